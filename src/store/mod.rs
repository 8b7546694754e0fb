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

use std::io;
use std::path::Path;

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

/// What phase 1 does with each index file, in PBS order.
pub trait Phase1Visitor {
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

/// An open chunk directory.
pub trait ChunkDir {
    /// Calls `f(name, d_ino)` for every entry in readdir order ("." and ".." excluded).
    fn list(&mut self, f: &mut dyn FnMut(&[u8], u64)) -> io::Result<()>;
    /// `None` when the entry is gone.
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
    /// How many chunk directories the store has, prefixes `0..chunk_dirs()`: 65,536 on
    /// every datastore and mount; fewer only on a simulated slice of a store
    /// ([`crate::sim::Slice`]), whose digests all fall in its directories.
    fn chunk_dirs(&self) -> usize {
        crate::datastore::paths::CHUNK_SUBDIRS
    }
    /// Opens chunk directory `prefix`; `None` if it does not exist.
    fn open_dir(&self, prefix: u16) -> io::Result<Option<Self::Dir<'_>>>;
    /// Visits every index file in PBS phase-1 order (format document 3.3): the scan, then
    /// namespaces, groups, snapshots newest first, files, each listed when reached (so an
    /// index created meanwhile in a group not yet visited is found), then leftovers. A
    /// vanished index is skipped; any other error opening one is returned, naming the file.
    fn walk_indexes(&self, visitor: &mut dyn Phase1Visitor) -> anyhow::Result<()>;
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
    let mut unprocessed = snapshots::list_index_files(tree, root)?;
    visitor.start(unprocessed.len());
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
