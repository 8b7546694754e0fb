//! Creation-order renumbering: the ZFS layout puts object ids in creation order, but a store
//! on ext4 numbers inodes by block group (files cluster by directory). To model a ZFS pool on
//! such a store faithfully, the model ranks inodes by when they were created and uses the
//! rank as the object id.
//!
//! The ranking is computed once when the mount starts ([`scan_creation_order`]): directories
//! first, in path order (PBS creates the 65536 chunk directories when it creates the
//! datastore), then every other file by modification time (chunks are written once; the
//! generator gives them strictly increasing mtimes), ties by inode number. Objects created
//! later get the next ranks in the order the model sees them. The ranking is saved beside the
//! trace (`TRACE.order`) so that `replay` uses the same one.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{bail, Context, Result};
use hashbrown::HashMap;

const MAGIC: &[u8; 8] = b"CSORDER1";

/// Inode number → creation rank (ranks start at 1, like inode numbers).
#[derive(Clone, Debug, Default)]
pub struct InodeOrder {
    /// (inode, rank), sorted by inode.
    sorted: Vec<(u64, u64)>,
    /// Objects created after the scan (and inode numbers reused by them).
    later: HashMap<u64, u64>,
    next: u64,
    /// Inodes in creation order, as scanned (what [`InodeOrder::save`] writes).
    scanned: Vec<u64>,
}

impl InodeOrder {
    /// From inode numbers in creation order.
    pub fn from_creation(inos: Vec<u64>) -> InodeOrder {
        let mut sorted: Vec<(u64, u64)> = inos
            .iter()
            .enumerate()
            .map(|(i, &ino)| (ino, i as u64 + 1))
            .collect();
        sorted.sort_unstable();
        sorted.dedup_by_key(|e| e.0);
        InodeOrder {
            next: inos.len() as u64 + 1,
            sorted,
            later: HashMap::new(),
            scanned: inos,
        }
    }

    /// The creation rank of `ino`; unknown inodes keep their number above every rank.
    #[inline]
    pub fn rank(&self, ino: u64) -> u64 {
        if let Some(&r) = self.later.get(&ino) {
            return r;
        }
        match self.sorted.binary_search_by_key(&ino, |e| e.0) {
            Ok(i) => self.sorted[i].1,
            Err(_) => (1 << 48) | ino,
        }
    }

    /// `ino` was just created: it gets the next rank.
    pub fn created(&mut self, ino: u64) {
        self.later.insert(ino, self.next);
        self.next += 1;
    }

    /// Inodes ranked by the scan.
    pub fn len(&self) -> usize {
        self.scanned.len()
    }

    /// True when the scan ranked none.
    pub fn is_empty(&self) -> bool {
        self.scanned.is_empty()
    }

    /// Writes the scan's ranking to `path` (beside a trace, for `replay`).
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        );
        out.write_all(MAGIC)?;
        out.write_all(&(self.scanned.len() as u64).to_le_bytes())?;
        for ino in &self.scanned {
            out.write_all(&ino.to_le_bytes())?;
        }
        out.flush()
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Reads a ranking [`InodeOrder::save`] wrote.
    pub fn load(path: &Path) -> Result<InodeOrder> {
        // A regular file only (a device or a FIFO would be read without end), as long as
        // its size says: 8 bytes an inode.
        let mut bytes = Vec::new();
        crate::fsutil::open_regular_noatime(path)
            .and_then(|(f, len)| {
                bytes.reserve_exact(len as usize);
                f.take(len).read_to_end(&mut bytes)
            })
            .with_context(|| format!("reading inode order {}", path.display()))?;
        if bytes.len() < 16 || &bytes[..8] != MAGIC {
            bail!(
                "{} is not a chunkscope inode order file{}",
                path.display(),
                crate::sniff::describe_file(path)
            );
        }
        let n = u64::from_le_bytes(bytes[8..16].try_into().expect("8")) as usize;
        if bytes.len() != 16 + n * 8 {
            bail!(
                "{}: {} bytes, expected {} for {n} inodes (truncated?)",
                path.display(),
                bytes.len(),
                16 + n * 8
            );
        }
        let inos = bytes[16..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
            .collect();
        Ok(InodeOrder::from_creation(inos))
    }
}

/// Chunk files per chunk directory of the store at `store`, estimated from 256 chunk
/// directories spread over the 65,536 (names only: nothing is stat'ed or opened, so no chunk's
/// atime changes). For [`super::ModelParams::dir_entries`] on a mounted store.
pub fn sample_dir_entries(store: &std::path::Path) -> std::io::Result<u64> {
    use crate::datastore::paths::{chunk_subdir_name, CHUNK_DIR, CHUNK_SUBDIRS};
    const SAMPLES: usize = 256;
    let mut total = 0u64;
    for i in 0..SAMPLES {
        let prefix = (i * CHUNK_SUBDIRS / SAMPLES) as u16;
        let dir = store.join(CHUNK_DIR).join(chunk_subdir_name(prefix));
        // getdents64 itself: glibc's readdir would take an ENOENT midway for the end.
        let listed =
            crate::fsutil::open_dir_following(&dir).and_then(|fd| crate::fsutil::list_names(&fd));
        match listed {
            Ok(names) => total += names.len() as u64,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", dir.display()),
                ))
            }
        }
    }
    Ok(total.div_ceil(SAMPLES as u64).max(1))
}

/// Inode numbers of everything under `store` (itself included) in modelled creation order.
pub fn scan_creation_order(store: &Path) -> Result<Vec<u64>> {
    let mut dirs: Vec<(std::path::PathBuf, u64)> = Vec::new();
    let mut files: Vec<(i64, i64, u64)> = Vec::new();
    let root = std::fs::symlink_metadata(store).with_context(|| format!("{}", store.display()))?;
    dirs.push((store.to_path_buf(), root.ino()));
    let mut stack = vec![store.to_path_buf()];
    // A directory bound (same device) inside the store again is walked once, not forever.
    let mut seen: hashbrown::HashSet<u64> = hashbrown::HashSet::from([root.ino()]);
    while let Some(dir) = stack.pop() {
        // getdents64 itself: glibc's readdir would take an ENOENT midway for the end.
        let names = crate::fsutil::open_dir_following(&dir)
            .and_then(|fd| crate::fsutil::list_names(&fd))
            .with_context(|| format!("listing {}", dir.display()))?;
        for name in names {
            let path = dir.join(name);
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                continue; // vanished
            };
            if m.dev() != root.dev() {
                continue;
            }
            if m.is_dir() {
                if !seen.insert(m.ino()) {
                    continue;
                }
                dirs.push((path.clone(), m.ino()));
                stack.push(path);
            } else {
                files.push((m.mtime(), m.mtime_nsec(), m.ino()));
            }
        }
    }
    dirs.sort_unstable();
    files.sort_unstable();
    Ok(dirs
        .into_iter()
        .map(|d| d.1)
        .chain(files.into_iter().map(|f| f.2))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_entries_are_estimated_from_sampled_chunk_dirs() {
        let store = tempfile::tempdir().unwrap();
        let chunks = store.path().join(".chunks");
        // Sampled: every 256th prefix. 0000 holds 512 entries, 0100 holds 256, 0001 (not
        // sampled) holds 1000; the other sampled directories are missing or empty.
        for (dir, n) in [("0000", 512), ("0100", 256), ("0001", 1000)] {
            std::fs::create_dir_all(chunks.join(dir)).unwrap();
            for i in 0..n {
                std::fs::File::create(chunks.join(dir).join(format!("{i:064x}"))).unwrap();
            }
        }
        std::fs::create_dir_all(chunks.join("0200")).unwrap();
        assert_eq!(sample_dir_entries(store.path()).unwrap(), (512 + 256) / 256);
        // A sampled path that is not a directory is an error that names it.
        std::fs::write(chunks.join("0300"), b"").unwrap();
        let e = sample_dir_entries(store.path()).unwrap_err().to_string();
        assert!(e.contains(".chunks/0300"), "{e}");
    }

    #[test]
    fn ranks_follow_creation_and_survive_a_round_trip() {
        let mut o = InodeOrder::from_creation(vec![900, 12, 500]);
        assert_eq!((o.rank(900), o.rank(12), o.rank(500)), (1, 2, 3));
        assert_eq!(o.rank(7), (1 << 48) | 7, "unknown inodes stay apart");
        o.created(7);
        assert_eq!(o.rank(7), 4);
        o.created(12); // an inode number reused by a new file
        assert_eq!(o.rank(12), 5);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.order");
        o.save(&p).unwrap();
        let back = InodeOrder::load(&p).unwrap();
        assert_eq!((back.rank(900), back.rank(12), back.len()), (1, 2, 3));
        std::fs::write(&p, b"CSORDER1\x05\0\0\0\0\0\0\0").unwrap();
        assert!(format!("{:#}", InodeOrder::load(&p).unwrap_err()).contains("truncated"));
    }

    #[test]
    fn scan_puts_directories_first_then_files_by_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let s = dir.path();
        std::fs::create_dir(s.join("b")).unwrap();
        std::fs::create_dir(s.join("a")).unwrap();
        for (name, t) in [("b/x", 30), ("a/y", 10), ("z", 20)] {
            std::fs::write(s.join(name), b"").unwrap();
            let f = std::fs::File::open(s.join(name)).unwrap();
            let ts = crate::fsutil::Timestamp::new(t, 0);
            crate::fsutil::set_file_times(&f, ts, ts).unwrap();
        }
        let ino = |p: &str| std::fs::symlink_metadata(s.join(p)).unwrap().ino();
        let order = scan_creation_order(s).unwrap();
        assert_eq!(
            order,
            vec![
                ino(""),
                ino("a"),
                ino("b"),
                ino("a/y"),
                ino("z"),
                ino("b/x")
            ]
        );
    }
}
