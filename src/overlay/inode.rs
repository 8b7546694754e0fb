//! The overlay's inode table: backing inode number → file handle and lookup count.
//!
//! No file descriptor is held per inode: a store has 65,536 directories and millions of chunks,
//! the kernel may know millions of inodes at once, and the open-file limit here is 20,000. Each
//! entry keeps the backing filesystem's file handle (`name_to_handle_at`), and an operation
//! opens a short-lived `O_PATH` descriptor from it with `open_by_handle_at` (root only, i.e.
//! `CAP_DAC_READ_SEARCH`). FORGET drops entries whose lookup count reaches zero.
//!
//! Node ids are the backing inode numbers (fuser uses `FileAttr::ino` as the node id), except
//! that the store root is node 1. The table is sharded by inode number so that worker threads
//! rarely contend; a shard's lock is held only to copy a handle in or out, never across a
//! syscall.
//!
//! Invariant: an entry exists exactly while the kernel holds at least one lookup on it.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use hashbrown::HashMap;

/// `MAX_HANDLE_SZ` of the kernel.
const MAX_HANDLE_SZ: usize = 128;
/// Handles up to this size (ext4, tmpfs, xfs, btrfs, zfs) are stored inline.
const INLINE: usize = 40;
const SHARDS: usize = 64;

/// A `struct file_handle` (header and bytes) as the kernel returned it.
#[derive(Clone, PartialEq, Eq)]
pub enum Handle {
    /// A handle of up to 40 bytes (ext4, tmpfs, ZFS), kept in place.
    Inline {
        /// Bytes of `buf` in use.
        len: u8,
        /// The handle.
        buf: [u8; INLINE],
    },
    /// A longer one, on the heap.
    Heap(Box<[u8]>),
}

impl Handle {
    fn from_bytes(b: &[u8]) -> Handle {
        if b.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..b.len()].copy_from_slice(b);
            Handle::Inline {
                len: b.len() as u8,
                buf,
            }
        } else {
            Handle::Heap(b.into())
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Handle::Inline { len, buf } => &buf[..*len as usize],
            Handle::Heap(b) => b,
        }
    }
}

/// Aligned buffer for a `struct file_handle`.
#[repr(C, align(8))]
struct HandleBuf([u8; 8 + MAX_HANDLE_SZ]);

/// The file handle of `name` in directory `dir` (not following a final symlink), or of `dir`
/// itself when `name` is empty.
pub fn handle_at(dir: RawFd, name: &std::ffi::CStr) -> io::Result<Handle> {
    let mut buf = HandleBuf([0; 8 + MAX_HANDLE_SZ]);
    buf.0[..4].copy_from_slice(&(MAX_HANDLE_SZ as u32).to_ne_bytes());
    let mut mount_id: libc::c_int = 0;
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH
    } else {
        0
    };
    // SAFETY: buf is aligned and large enough for MAX_HANDLE_SZ bytes; name is NUL-terminated.
    let rc = unsafe {
        libc::name_to_handle_at(
            dir,
            name.as_ptr(),
            buf.0.as_mut_ptr() as *mut libc::file_handle,
            &mut mount_id,
            flags,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let len = u32::from_ne_bytes(buf.0[..4].try_into().expect("4")) as usize;
    Ok(Handle::from_bytes(&buf.0[..8 + len.min(MAX_HANDLE_SZ)]))
}

/// Opens a handle relative to the mount of `mount_fd` with `flags` (e.g. `O_PATH`).
pub fn open_handle(mount_fd: RawFd, h: &Handle, flags: libc::c_int) -> io::Result<OwnedFd> {
    let mut buf = HandleBuf([0; 8 + MAX_HANDLE_SZ]);
    let b = h.bytes();
    buf.0[..b.len()].copy_from_slice(b);
    // SAFETY: buf holds a handle returned by name_to_handle_at, aligned.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount_fd,
            buf.0.as_mut_ptr() as *mut libc::file_handle,
            flags | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by the kernel and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

struct Entry {
    handle: Handle,
    nlookup: u64,
    generation: u64,
}

/// A descriptor for an operation: the store root (borrowed) or one opened from a handle.
pub enum Fd<'a> {
    /// The store root's own descriptor.
    Root(BorrowedFd<'a>),
    /// A descriptor opened for the operation, closed after it.
    Owned(OwnedFd),
}

impl AsRawFd for Fd<'_> {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Fd::Root(b) => b.as_raw_fd(),
            Fd::Owned(o) => o.as_raw_fd(),
        }
    }
}

/// Inodes the kernel knows, by node id.
pub struct InodeTable {
    shards: Box<[Mutex<HashMap<u64, Entry>>]>,
}

impl Default for InodeTable {
    fn default() -> Self {
        InodeTable {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl InodeTable {
    fn shard(&self, ino: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        // A poisoned shard means a panic while holding it, which never happens across a
        // syscall; the data is still consistent, so keep serving.
        self.shards[(ino as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one lookup of `ino` with `handle`; returns the generation to report. A different
    /// handle for a known inode number means the number was reused: the generation moves on.
    pub fn looked_up(&self, ino: u64, handle: Handle) -> u64 {
        let mut shard = self.shard(ino);
        match shard.get_mut(&ino) {
            Some(e) => {
                if e.handle != handle {
                    e.handle = handle;
                    e.generation += 1;
                }
                e.nlookup += 1;
                e.generation
            }
            None => {
                shard.insert(
                    ino,
                    Entry {
                        handle,
                        nlookup: 1,
                        generation: 0,
                    },
                );
                0
            }
        }
    }

    /// Drops `n` lookups; removes the entry at zero.
    pub fn forget(&self, ino: u64, n: u64) {
        let mut shard = self.shard(ino);
        if let Some(e) = shard.get_mut(&ino) {
            e.nlookup = e.nlookup.saturating_sub(n);
            if e.nlookup == 0 {
                shard.remove(&ino);
            }
        }
    }

    /// The handle of a known inode.
    pub fn handle(&self, ino: u64) -> Option<Handle> {
        self.shard(ino).get(&ino).map(|e| e.handle.clone())
    }

    /// Number of inodes known.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    /// True when no inode is looked up.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::io::AsRawFd;

    #[test]
    fn handles_reopen_files_and_lookups_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let d = std::fs::File::open(dir.path()).unwrap();
        let h = handle_at(d.as_raw_fd(), &CString::new("f").unwrap()).unwrap();
        let fd = open_handle(d.as_raw_fd(), &h, libc::O_RDONLY).unwrap();
        let mut s = String::new();
        use std::io::Read;
        std::fs::File::from(fd).read_to_string(&mut s).unwrap();
        assert_eq!(s, "x");

        let t = InodeTable::default();
        assert_eq!(t.looked_up(42, h.clone()), 0);
        assert_eq!(t.looked_up(42, h.clone()), 0);
        let other = handle_at(d.as_raw_fd(), &CString::new("").unwrap()).unwrap();
        assert_eq!(
            t.looked_up(42, other),
            1,
            "reused inode number: new generation"
        );
        t.forget(42, 2);
        assert_eq!(t.len(), 1);
        t.forget(42, 1);
        assert!(t.is_empty());
        assert!(t.handle(42).is_none());
    }
}
