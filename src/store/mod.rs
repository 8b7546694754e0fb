//! The operations a garbage collector performs on a chunk store, as a small trait.
//!
//! GC strategies talk only to [`ChunkStore`]; [`dir::DirStore`] is the real filesystem (a
//! datastore directory or a chunkscope mount of one), and an in-memory store can implement
//! the same trait for simulation. The operations mirror PBS's syscalls one for one, so that
//! counting them here counts what the filesystem sees:
//!
//! | operation | PBS syscall |
//! |---|---|
//! | [`ChunkStore::touch`] | `utimensat(-1, <abs chunk path>, {UTIME_NOW, UTIME_OMIT}, AT_SYMLINK_NOFOLLOW)` |
//! | [`ChunkStore::open_dir`] + [`ChunkDir::list`] | `openat(.chunks, "XXXX")` + `getdents64` |
//! | [`ChunkDir::stat`] | `fstatat(subdir_fd, name, AT_SYMLINK_NOFOLLOW)` |
//! | [`ChunkDir::unlink`] | `unlinkat(subdir_fd, name, 0)` |

pub mod dir;
pub mod layout;

use std::io;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::datastore::error::FormatError;
use crate::datastore::snapshots::{self, Tree};
use crate::datastore::{Digest, IndexFile};

/// How phase 1 came to an index file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexOrigin {
    /// Found by the initial scan and visited in namespace/group/snapshot order.
    Expected,
    /// Visited in that order but created after the initial scan.
    New,
    /// Found by the scan but outside the namespace/group/snapshot scheme (visited last).
    Unexpected,
}

/// The order phase 1 visits the index files in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum IndexOrder {
    /// PBS 3.3.5 and later: the datastore's iterator (namespaces, groups, snapshots newest
    /// first), after a scan that finds every index, then the scan's leftovers.
    #[default]
    Iterator,
    /// PBS 3.3.4 and earlier (`list_images`): the order a walk of the whole tree finds them
    /// in (walkdir: depth first, each directory in readdir order, hidden entries skipped).
    Walk,
    /// The scan's index files in the iteration order of a hash set, as the GC visited them
    /// between `list_index_files` and the iterator of thread 000's series (patch 4/5):
    /// consecutive indexes of unrelated groups. Rust's hash set randomises its order per
    /// run; this one is a fixed hash of the path, so runs repeat.
    HashSet,
}

impl IndexOrder {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            IndexOrder::Iterator => "iterator",
            IndexOrder::Walk => "walk",
            IndexOrder::HashSet => "hash-set",
        }
    }
}

/// What phase 1 does with each index file, in PBS order.
pub trait Phase1Visitor {
    /// The order the walk visits the index files in (PBS's iterator unless said otherwise).
    fn order(&self) -> IndexOrder {
        IndexOrder::Iterator
    }
    /// The number of index files the initial scan found.
    fn start(&mut self, scanned: usize);
    /// One index file; an error aborts the walk (and the GC).
    fn index(&mut self, path: &Path, index: IndexFile, origin: IndexOrigin) -> anyhow::Result<()>;
}

/// What phase 2 needs to know of a chunk file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryStat {
    /// Whole seconds, as PBS compares them.
    pub atime: i64,
    /// Its size, bytes.
    pub size: u64,
    /// Whether it is a regular file (anything else is neither followed nor removed).
    pub is_file: bool,
}

/// What the atime safety check needs to know of a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkStat {
    /// Its inode number.
    pub ino: u64,
    /// Nanoseconds since the epoch.
    pub atime_ns: i128,
}

/// The buffer a directory is read with, one `getdents64` call at a time: glibc's `readdir`
/// buffer (32 KiB), which PBS's directory iterators read through.
pub const GETDENTS_BUFFER: usize = 32 * 1024;

/// Chunk entries one `getdents64` call returns with a [`GETDENTS_BUFFER`]: a record of a
/// 64-character name takes 88 bytes (19 bytes of header, the name and its NUL, 8-aligned).
pub const CHUNK_ENTRIES_PER_GETDENTS: usize = GETDENTS_BUFFER / 88;

/// An open chunk directory.
pub trait ChunkDir {
    /// The entries of the next `getdents64` call ([`GETDENTS_BUFFER`] bytes), in readdir
    /// order, as `f(name, d_ino)` ("." and ".." excluded); `Ok(false)` once a call finds the
    /// end. The first call after opening (or [`ChunkDir::rewind`]) starts at the first entry.
    /// PBS's sweep stats each batch's entries before it reads the next.
    fn read_batch(&mut self, f: &mut dyn FnMut(&[u8], u64)) -> io::Result<bool>;
    /// Back to the first entry (`rewinddir`: no request of its own).
    fn rewind(&mut self) -> io::Result<()>;
    /// Calls `f(name, d_ino)` for every entry in readdir order, from the first.
    fn list(&mut self, f: &mut dyn FnMut(&[u8], u64)) -> io::Result<()> {
        self.rewind()?;
        while self.read_batch(f)? {}
        Ok(())
    }
    /// `None` when the entry is gone (ENOENT); any other error is returned.
    fn stat(&mut self, name: &[u8]) -> io::Result<Option<EntryStat>>;
    /// Removes the entry `name`.
    fn unlink(&mut self, name: &[u8]) -> io::Result<()>;
}

/// A chunk store as a GC sees it.
pub trait ChunkStore: Sync {
    /// An open chunk directory of this store.
    type Dir<'a>: ChunkDir
    where
        Self: 'a;

    /// The datastore root (for index files and messages).
    fn root(&self) -> &Path;
    /// The store's clock, epoch seconds (the coarse clock file times use; a simulated store
    /// has its own, so that its runs do not depend on when they ran).
    fn now(&self) -> i64 {
        crate::fsutil::now_epoch_coarse()
    }
    /// Sets the chunk's atime to now; `Ok(false)` if it does not exist.
    fn touch(&self, digest: &Digest) -> io::Result<bool>;
    /// The same for `<digest>.<n>.bad`.
    fn touch_bad(&self, digest: &Digest, n: u8) -> io::Result<bool>;
    /// Inode and atime of a chunk; `None` if it does not exist.
    fn stat_chunk(&self, digest: &Digest) -> io::Result<Option<ChunkStat>>;
    /// Inserts a chunk as PBS does (temp file, then rename); an existing one is touched
    /// instead. Returns true if it existed.
    fn insert_chunk(&self, digest: &Digest, blob: &[u8]) -> io::Result<bool>;
    /// Whether the prefetch pass's jobs run in turn on the calling thread, one directory of
    /// each at a time, with `job` saying whose request comes next (`None` once the pass is
    /// over); `false` (a real store): each job on a thread of its own.
    fn prefetch_job(&self, job: Option<usize>) -> bool {
        let _ = job;
        false
    }
    /// Creates the empty file `<digest><suffix>` in its chunk directory, as PBS's S3
    /// datastores do: a zero-length marker of a chunk whose data is in the bucket (suffix
    /// `""`), or the `.using` marker phase 1 leaves for a referenced chunk with no local file
    /// (suffix `".using"`). `Ok(false)` if it exists already. Stores without S3 support say
    /// `Unsupported`.
    fn create_marker(&self, digest: &Digest, suffix: &[u8]) -> io::Result<bool> {
        let _ = (digest, suffix);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this store keeps no S3 markers",
        ))
    }
    /// How many chunk directories the store has, prefixes `0..chunk_dirs()`: 65,536 on
    /// every datastore and mount; fewer only on a simulated slice of a store
    /// ([`crate::sim::Slice`]), whose digests all fall in its directories.
    fn chunk_dirs(&self) -> usize {
        crate::datastore::paths::CHUNK_SUBDIRS
    }
    /// The chunk directories that are not plain directories of the store's own filesystem
    /// ([`layout::odd_chunk_dirs`]: symbolic links, mounts of other filesystems), which a GC
    /// must neither touch nor sweep. A simulated store has none.
    fn odd_chunk_dirs(&self) -> anyhow::Result<Vec<layout::OddDir>> {
        Ok(Vec::new())
    }
    /// An error when the store's root or its `.chunks` is no longer the directory opened (a
    /// mount detached under the GC, a directory renamed or replaced): what the GC sees there
    /// now is not the store it started on. `thorough` (after an error, when the run stops
    /// anyway) may ask the store itself, which a mount's trace then shows. A simulated store
    /// never vanishes.
    fn check_identity(&self, thorough: bool) -> anyhow::Result<()> {
        let _ = thorough;
        Ok(())
    }
    /// Opens chunk directory `prefix`; `None` if it does not exist. A chunk directory that is
    /// not a directory of the store's filesystem (a symbolic link, another filesystem's
    /// mount) is an error naming it, never followed.
    fn open_dir(&self, prefix: u16) -> io::Result<Option<Self::Dir<'_>>>;
    /// Visits every index file in PBS phase-1 order (format document 3.3): the scan, then
    /// namespaces, groups, snapshots newest first, files, each listed when reached (so an
    /// index created meanwhile in a group not yet visited is found), then leftovers. A
    /// vanished index is skipped; any other error opening one is returned, naming the file.
    fn walk_indexes(&self, visitor: &mut dyn Phase1Visitor) -> anyhow::Result<()>;
}

/// A fixed hash of a path (FNV-1a, then mixed): the hash-set order of [`IndexOrder::HashSet`].
fn path_hash(p: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in p.as_os_str().as_bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    let x = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ (x >> 33)
}

/// PBS's phase-1 walk (format document 3.3) over any [`Tree`]: the scan, then namespaces,
/// groups, snapshots newest first and their index files, each listed when reached, then the
/// leftovers of the scan. `open` reads one index (`None`: nothing to visit, for a walk that
/// only follows the order); a vanished one is skipped. The real store and the simulated one
/// both walk with this function.
pub fn walk_indexes(
    tree: &dyn Tree,
    root: &Path,
    open: &mut dyn FnMut(&Path) -> Result<Option<IndexFile>, FormatError>,
    visitor: &mut dyn Phase1Visitor,
) -> anyhow::Result<()> {
    let order = visitor.order();
    // The iterator's order lists each snapshot when reached, and keeps the scan for the
    // leftovers; the other two orders visit one list made before the first index.
    let (mut unprocessed, walked) = match order {
        IndexOrder::Iterator => (snapshots::list_index_files(tree, root)?, Vec::new()),
        IndexOrder::Walk => (Default::default(), snapshots::walk_index_files(tree, root)?),
        IndexOrder::HashSet => {
            let mut v: Vec<PathBuf> = snapshots::list_index_files(tree, root)?
                .into_iter()
                .collect();
            v.sort_by_cached_key(|p| path_hash(p));
            (Default::default(), v)
        }
    };
    visitor.start(unprocessed.len() + walked.len());
    let mut visit = |path: &Path, origin: IndexOrigin| -> anyhow::Result<()> {
        match open(path) {
            Ok(Some(index)) => visitor.index(path, index, origin),
            Ok(None) => Ok(()),
            // Vanished (pruned meanwhile), if its directory no longer lists it.
            Err(e) if e.is_not_found() => snapshots::confirm_vanished(tree, root, path),
            Err(e) => Err(anyhow::anyhow!(
                "can't open index {} - {}",
                path.display(),
                e.kind
            )),
        }
    };
    if order != IndexOrder::Iterator {
        for path in walked {
            visit(&path, IndexOrigin::Expected)?;
        }
        return Ok(());
    }
    for ns in snapshots::list_namespaces(tree, root)? {
        for group in snapshots::list_groups(tree, &ns)? {
            let snaps = match snapshots::list_snapshots(tree, &group) {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    snapshots::confirm_vanished(tree, root, &group)?;
                    continue;
                }
                Err(e) => return Err(e).with_context(|| format!("listing {}", group.display())),
            };
            for (_, snap) in snaps {
                let files = match snapshots::list_snapshot_indexes(tree, &snap) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        snapshots::confirm_vanished(tree, root, &snap)?;
                        continue;
                    }
                    Err(e) => return Err(e).with_context(|| format!("listing {}", snap.display())),
                };
                for path in files {
                    let origin = if unprocessed.remove(&path) {
                        IndexOrigin::Expected
                    } else {
                        IndexOrigin::New
                    };
                    visit(&path, origin)?;
                }
            }
        }
    }
    for path in unprocessed {
        visit(&path, IndexOrigin::Unexpected)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::snapshots::{EntryKind, Tree};
    use std::path::PathBuf;

    /// A tree answering from a fixed map, in the map's (readdir) order.
    struct Listed(Vec<(&'static str, Vec<(&'static str, EntryKind)>)>);

    impl Tree for Listed {
        fn read_dir(&self, dir: &Path) -> io::Result<Vec<(String, EntryKind)>> {
            self.0
                .iter()
                .find(|(d, _)| Path::new(d) == dir)
                .map(|(_, e)| e.iter().map(|(n, k)| (n.to_string(), *k)).collect())
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
    }

    struct Order(IndexOrder, usize);

    impl Phase1Visitor for Order {
        fn order(&self) -> IndexOrder {
            self.0
        }
        fn start(&mut self, scanned: usize) {
            self.1 = scanned;
        }
        fn index(&mut self, _: &Path, _: IndexFile, _: IndexOrigin) -> anyhow::Result<()> {
            unreachable!("nothing is opened")
        }
    }

    fn visited(tree: &Listed, order: IndexOrder) -> (Vec<String>, usize) {
        let mut seen = Vec::new();
        let mut v = Order(order, 0);
        walk_indexes(
            tree,
            Path::new("/s"),
            &mut |p: &Path| {
                seen.push(p.strip_prefix("/s").unwrap().display().to_string());
                Ok(None)
            },
            &mut v,
        )
        .unwrap();
        (seen, v.1)
    }

    #[test]
    fn the_index_orders_visit_the_same_files_in_pbs_s_three_orders() {
        use EntryKind::{Dir, File};
        let tree = Listed(vec![
            ("/s", vec![("vm", Dir), ("ns", Dir), (".hidden", Dir)]),
            ("/s/.hidden", vec![("x.fidx", File)]),
            ("/s/vm", vec![("100", Dir)]),
            (
                "/s/vm/100",
                vec![("2025-01-01T00:00:00Z", Dir), ("2025-03-01T00:00:00Z", Dir)],
            ),
            (
                "/s/vm/100/2025-01-01T00:00:00Z",
                vec![
                    ("drive-scsi0.img.fidx", File),
                    ("drive-scsi1.img.fidx", File),
                ],
            ),
            (
                "/s/vm/100/2025-03-01T00:00:00Z",
                vec![("drive-scsi0.img.fidx", File)],
            ),
            ("/s/ns", vec![("a", Dir)]),
            ("/s/ns/a", vec![("ct", Dir)]),
            ("/s/ns/a/ct", vec![("200", Dir)]),
            ("/s/ns/a/ct/200", vec![("2025-01-05T00:00:00Z", Dir)]),
            (
                "/s/ns/a/ct/200/2025-01-05T00:00:00Z",
                vec![("root.pxar.didx", File)],
            ),
        ]);
        let (iter, n) = visited(&tree, IndexOrder::Iterator);
        assert_eq!(n, 4);
        // PBS's iterator: the root namespace first, snapshots newest first.
        assert_eq!(
            iter,
            [
                "vm/100/2025-03-01T00:00:00Z/drive-scsi0.img.fidx",
                "vm/100/2025-01-01T00:00:00Z/drive-scsi0.img.fidx",
                "vm/100/2025-01-01T00:00:00Z/drive-scsi1.img.fidx",
                "ns/a/ct/200/2025-01-05T00:00:00Z/root.pxar.didx",
            ]
        );
        // PBS 3.3.4's walk: depth first in readdir order, oldest snapshot first here.
        let (walk, n) = visited(&tree, IndexOrder::Walk);
        assert_eq!(n, 4);
        assert_eq!(
            walk,
            [
                "vm/100/2025-01-01T00:00:00Z/drive-scsi0.img.fidx",
                "vm/100/2025-01-01T00:00:00Z/drive-scsi1.img.fidx",
                "vm/100/2025-03-01T00:00:00Z/drive-scsi0.img.fidx",
                "ns/a/ct/200/2025-01-05T00:00:00Z/root.pxar.didx",
            ]
        );
        // The hash set's: the same files, by a fixed hash of the path, the same every run.
        let (hashed, n) = visited(&tree, IndexOrder::HashSet);
        assert_eq!(n, 4);
        let mut by_hash: Vec<PathBuf> = iter.iter().map(|p| Path::new("/s").join(p)).collect();
        by_hash.sort_by_key(|p| path_hash(p));
        let by_hash: Vec<String> = by_hash
            .iter()
            .map(|p| p.strip_prefix("/s").unwrap().display().to_string())
            .collect();
        assert_eq!(hashed, by_hash);
        assert_eq!(visited(&tree, IndexOrder::HashSet).0, hashed);
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        assert_eq!(sorted(hashed), sorted(iter.clone()));
        assert_eq!(sorted(walk), sorted(iter));
    }
}
