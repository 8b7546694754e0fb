//! The chunk table of a survey: every chunk file's digest and inode number, from one listing
//! of the 65,536 chunk directories with `getdents64` (`d_ino`, `d_type`: no stat per chunk).
//!
//! Memory: 44 bytes and a bit a chunk (digest 32, inode 8, readdir position 4, referenced
//! bit), in three arrays sorted by digest within each directory, so that a reference is
//! found by a binary search in its directory's part, and the readdir order (what a sweep
//! lists, and the simulator replays) is kept in the positions.

use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use crate::datastore::paths::{chunk_subdir_name, ChunkName, CHUNK_DIR};
use crate::datastore::Digest;
use crate::model::Layout;

/// One chunk directory's layout: its chunks, the distinct metadata blocks their inodes fall
/// in, and the median gap between consecutive inode numbers (sorted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirSummary {
    /// Chunk files listed.
    pub chunks: u32,
    /// Distinct metadata blocks of their inodes.
    pub blocks: u32,
    /// The median gap between consecutive inode numbers (0 with fewer than two chunks).
    pub median_gap: u64,
}

/// Entries of the chunk directories that are not chunk files, counted as `check` counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OtherEntries {
    /// `<digest>.N.bad` copies.
    pub bad_files: u64,
    /// `<digest>.using` markers (S3 stores).
    pub using_markers: u64,
    /// Names the GC ignores (`*.tmp_XXXXXX` from an interrupted insert, and others).
    pub ignored_files: u64,
    /// Entries with a chunk's name that are not regular files (never followed).
    pub irregular_chunks: u64,
}

/// Every chunk file of a store, by directory.
#[derive(Default)]
pub struct ChunkTable {
    /// Directory `p`'s chunks are `starts[p]..starts[p + 1]`.
    starts: Vec<u64>,
    digests: Vec<[u8; 32]>,
    inos: Vec<u64>,
    /// Each chunk's position in its directory's readdir order.
    pos: Vec<u32>,
    referenced: Vec<u64>,
    /// Per directory, its layout.
    pub dirs: Vec<DirSummary>,
    /// Per directory, its inode number (0: not listed).
    pub dir_inos: Vec<u64>,
    /// What else the directories held.
    pub other: OtherEntries,
    /// Chunk directories that were not there.
    pub missing_dirs: Vec<u16>,
    /// The digests of the `.using` markers (S3 datastores: phase 2 keeps an object with no
    /// local file that has one), in listing order.
    pub using: Vec<Digest>,
    /// The `<digest>.N.bad` copies, in listing order.
    pub bad: Vec<(Digest, u8)>,
    /// Opens that the kernel refused `O_NOATIME` (not the owner, no `CAP_FOWNER`): those
    /// directories' atimes changed.
    pub noatime_refused: u64,
    /// `stat` calls made (entries whose `d_type` was unknown).
    pub stats: u64,
}

/// Directories listed before the table reserves room for the whole store.
const ESTIMATE_AFTER: usize = 256;

/// Scratch of one directory's listing.
#[derive(Default)]
pub(super) struct Scratch {
    entries: Vec<([u8; 32], u64, u32)>,
    inos: Vec<u64>,
    gaps: Vec<u64>,
    buf: Vec<u8>,
}

impl ChunkTable {
    /// Chunk files listed.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// True without chunk files.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Chunk directory `p`'s chunks (indices of this table).
    #[inline]
    pub fn dir(&self, p: u16) -> Range<usize> {
        self.starts[p as usize] as usize..self.starts[p as usize + 1] as usize
    }

    /// The chunk named `d`.
    #[inline]
    pub fn find(&self, d: &Digest) -> Option<usize> {
        let r = self.dir(d.prefix());
        let start = r.start;
        self.digests[r].binary_search(&d.0).ok().map(|i| start + i)
    }

    /// Chunk `i`'s digest.
    #[inline]
    pub fn digest(&self, i: usize) -> Digest {
        Digest(self.digests[i])
    }

    /// Chunk `i`'s inode number.
    #[inline]
    pub fn ino(&self, i: usize) -> u64 {
        self.inos[i]
    }

    /// Chunk `i`'s number in readdir order over the store (directory by directory): its
    /// number in the survey file.
    #[inline]
    pub fn number(&self, i: usize) -> u64 {
        let p = Digest(self.digests[i]).prefix() as usize;
        self.starts[p] + self.pos[i] as u64
    }

    /// Directory `p`'s chunks in readdir order.
    pub fn readdir_order(&self, p: u16) -> Vec<usize> {
        let r = self.dir(p);
        let mut out = vec![0; r.len()];
        for i in r.clone() {
            out[self.pos[i] as usize] = i;
        }
        out
    }

    /// Marks chunk `i` referenced; true if it was not yet.
    #[inline]
    pub fn mark(&mut self, i: usize) -> bool {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let new = self.referenced[w] & b == 0;
        self.referenced[w] |= b;
        new
    }

    /// Whether chunk `i` is referenced.
    #[inline]
    pub fn is_referenced(&self, i: usize) -> bool {
        self.referenced[i / 64] & (1 << (i % 64)) != 0
    }

    /// Referenced chunks listed.
    pub fn referenced(&self) -> u64 {
        self.referenced.iter().map(|w| w.count_ones() as u64).sum()
    }

    /// Heap bytes of the table (capacities).
    pub fn heap_bytes(&self) -> u64 {
        (self.digests.capacity() * 32
            + self.inos.capacity() * 8
            + self.pos.capacity() * 4
            + self.referenced.capacity() * 8
            + self.starts.capacity() * 8
            + self.using.capacity() * 32
            + self.bad.capacity() * 33
            + self.dirs.capacity() * std::mem::size_of::<DirSummary>()) as u64
    }

    /// Lists the chunk directories of the store at `root` (all 65,536; those in `skip` are
    /// left out: they are not the store's own), calling `progress(p)` after each.
    pub fn list(
        root: &Path,
        layout: &Layout,
        skip: &[bool],
        progress: &mut dyn FnMut(u16),
    ) -> anyhow::Result<ChunkTable> {
        use anyhow::Context;
        let chunks = root.join(CHUNK_DIR);
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(chunks.as_os_str()))?;
        let (chunks_fd, noatime) = crate::fsutil::open_dir_noatime(libc::AT_FDCWD, &c)
            .with_context(|| format!("opening {}", chunks.display()))?;
        let mut t = ChunkTable {
            starts: Vec::with_capacity(skip.len() + 1),
            noatime_refused: u64::from(!noatime),
            ..Default::default()
        };
        t.starts.push(0);
        let mut s = Scratch {
            buf: vec![0; 64 * 1024],
            ..Default::default()
        };
        for p in 0..skip.len() {
            let p = p as u16;
            let (summary, ino) = if skip[p as usize] {
                (DirSummary::default(), 0)
            } else {
                t.list_dir(&chunks_fd, &chunks, p, layout, &mut s)?
            };
            t.dir_inos.push(ino);
            t.dirs.push(summary);
            t.starts.push(t.digests.len() as u64);
            if p as usize + 1 == ESTIMATE_AFTER && skip.len() > ESTIMATE_AFTER {
                t.reserve_estimate(skip.len());
            }
            progress(p);
        }
        t.referenced = vec![0; t.digests.len().div_ceil(64)];
        Ok(t)
    }

    /// Reserves room for the whole store from the chunks of the directories listed so far:
    /// digests spread evenly over the directories, so the first 256 of 65,536 tell the
    /// total within a few percent; a tenth more is reserved, where growing by doubling
    /// would leave up to half the arrays unused (the table's budget is 48 bytes a chunk).
    fn reserve_estimate(&mut self, dirs: usize) {
        let listed = self.dirs.len().max(1);
        let estimate = self.digests.len() * dirs / listed;
        let want = estimate + estimate / 10 + 1024;
        let more = want.saturating_sub(self.digests.len());
        self.digests.reserve_exact(more);
        self.inos.reserve_exact(more);
        self.pos.reserve_exact(more);
    }

    fn list_dir(
        &mut self,
        chunks_fd: &OwnedFd,
        chunks: &Path,
        p: u16,
        layout: &Layout,
        s: &mut Scratch,
    ) -> anyhow::Result<(DirSummary, u64)> {
        let name = chunk_subdir_name(p);
        let path = || chunks.join(&name);
        let c = std::ffi::CString::new(name.as_bytes()).expect("no NUL");
        let fd = match crate::fsutil::open_dir_noatime(chunks_fd.as_raw_fd(), &c) {
            Ok((fd, noatime)) => {
                self.noatime_refused += u64::from(!noatime);
                fd
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                self.missing_dirs.push(p);
                return Ok((DirSummary::default(), 0));
            }
            Err(e) => {
                return Err(anyhow::anyhow!("opening {}: {e}", path().display()));
            }
        };
        // SAFETY: a plain C struct; zeroes are a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and out pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            let e = std::io::Error::last_os_error();
            anyhow::bail!("stat {}: {e}", path().display());
        }
        s.entries.clear();
        let mut stat_failed = None;
        let (other, stats) = (&mut self.other, &mut self.stats);
        let (using, bad) = (&mut self.using, &mut self.bad);
        loop {
            let mut entry = |n: &[u8], ino: u64, d_type: u8| {
                let digest = match ChunkName::classify(n) {
                    ChunkName::Chunk(d) => d,
                    ChunkName::Bad(d, n) => {
                        other.bad_files += 1;
                        return bad.push((d, n));
                    }
                    ChunkName::Using(d) => {
                        other.using_markers += 1;
                        return using.push(d);
                    }
                    ChunkName::Ignored => {
                        if n != b"." && n != b".." {
                            other.ignored_files += 1;
                        }
                        return;
                    }
                };
                let regular = match d_type {
                    libc::DT_REG => true,
                    libc::DT_UNKNOWN => {
                        *stats += 1;
                        match stat_type(fd.as_raw_fd(), n) {
                            Ok(Some(reg)) => reg,
                            Ok(None) => return, // removed since the listing
                            Err(e) => {
                                stat_failed.get_or_insert(e);
                                return;
                            }
                        }
                    }
                    _ => false,
                };
                if regular {
                    let pos = s.entries.len() as u32;
                    s.entries.push((digest.0, ino, pos));
                } else {
                    other.irregular_chunks += 1;
                }
            };
            let more = crate::fsutil::getdents(fd.as_raw_fd(), &mut s.buf, &mut entry)
                .map_err(|e| anyhow::anyhow!("listing {}: {e}", path().display()))?;
            if !more {
                break;
            }
        }
        if let Some(e) = stat_failed {
            anyhow::bail!("stat of an entry of {}: {e}", path().display());
        }
        if s.entries.len() > u32::MAX as usize {
            anyhow::bail!("{} holds more than 2^32 chunks", path().display());
        }
        s.entries.sort_unstable_by_key(|e| e.0);
        for &(d, ino, pos) in &s.entries {
            self.digests.push(d);
            self.inos.push(ino);
            self.pos.push(pos);
        }
        s.inos.clear();
        s.inos.extend(s.entries.iter().map(|e| e.1));
        Ok((summarize(&mut s.inos, &mut s.gaps, layout), st.st_ino))
    }
}

/// Whether the entry `name` of the directory `dir` is a regular file (`None`: gone).
fn stat_type(dir: std::os::unix::io::RawFd, name: &[u8]) -> std::io::Result<Option<bool>> {
    Ok(crate::fsutil::lstat_at(dir, name)?.map(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG))
}

/// One directory's layout from its chunks' inode numbers (sorted here).
pub(super) fn summarize(inos: &mut [u64], gaps: &mut Vec<u64>, layout: &Layout) -> DirSummary {
    inos.sort_unstable();
    let mut blocks = 0u32;
    let mut last = None;
    for &ino in inos.iter() {
        let b = layout.block(ino);
        if last != Some(b) {
            blocks += 1;
            last = Some(b);
        }
    }
    gaps.clear();
    gaps.extend(inos.windows(2).map(|w| w[1] - w[0]));
    let median_gap = median(gaps);
    DirSummary {
        chunks: inos.len() as u32,
        blocks,
        median_gap,
    }
}

/// The median of `v` (the upper one of an even count; 0 when empty), reordering it.
pub(super) fn median(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let mid = v.len() / 2;
    *v.select_nth_unstable(mid).1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Thread 001's directory: inodes far apart share no block; a run of consecutive inodes
    /// shares blocks of 32; the median gap is the middle one.
    #[test]
    fn a_directorys_blocks_and_median_gap() {
        let zfs = Layout::Zfs { per_block: 32 };
        let mut gaps = Vec::new();
        let mut far: Vec<u64> = (0..1059).map(|i| 1000 + i * 77_966).rev().collect();
        let s = summarize(&mut far, &mut gaps, &zfs);
        assert_eq!((s.chunks, s.blocks, s.median_gap), (1059, 1059, 77_966));
        let mut near: Vec<u64> = (64..64 + 96).collect();
        let s = summarize(&mut near, &mut gaps, &zfs);
        assert_eq!((s.chunks, s.blocks, s.median_gap), (96, 3, 1));
        let ext4 = Layout::Ext4 {
            inodes_per_group: 8192,
            per_block: 16,
        };
        // Inodes 1..=16 are the first block of group 0; 8193 the first of group 1.
        let mut e = vec![1, 16, 17, 8193];
        let s = summarize(&mut e, &mut gaps, &ext4);
        assert_eq!((s.blocks, s.median_gap), (3, 15));
        let s = summarize(&mut [], &mut gaps, &zfs);
        assert_eq!(s, DirSummary::default());
        assert_eq!(median(&mut [5]), 5);
    }
}
