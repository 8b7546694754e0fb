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
/// itself when `name` is empty, with the id of the mount it is on (a name with a mount over
/// it is on that mount: the handle is of what is mounted there).
pub fn handle_at(dir: RawFd, name: &std::ffi::CStr) -> io::Result<(Handle, i32)> {
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
    Ok((
        Handle::from_bytes(&buf.0[..8 + len.min(MAX_HANDLE_SZ)]),
        mount_id,
    ))
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

/// Handle bytes kept in an entry itself: ext4's (8), tmpfs's (12) and xfs's fit; longer
/// ones (btrfs, ZFS's long fids), or a handle type over 255, go whole to the shard's side
/// table.
const PACKED: usize = 14;
/// `len` of an entry whose handle is in the side table.
const LONG: u8 = u8::MAX;

/// What the table keeps of one inode: 24 bytes, 32 with its key (a slot of the shard's map),
/// so that a kernel knowing millions of inodes costs tens of MB, not hundreds
/// (BENCHMARKS.md, "Memory per inode").
#[derive(Clone, Copy)]
struct Entry {
    /// Lookups the kernel holds; saturates (an entry at `u32::MAX` is never dropped).
    nlookup: u32,
    generation: u32,
    /// The handle's `handle_type`.
    kind: u8,
    /// Bytes of `bytes` in use, or [`LONG`].
    len: u8,
    bytes: [u8; PACKED],
}

impl Entry {
    /// The entry for `h`, and `h`'s bytes for the side table when it does not fit.
    fn pack(h: &Handle) -> (Entry, Option<&[u8]>) {
        let b = h.bytes();
        let kind = i32::from_ne_bytes(b[4..8].try_into().expect("a handle's header"));
        let body = &b[8..];
        let mut e = Entry {
            nlookup: 0,
            generation: 0,
            kind: 0,
            len: LONG,
            bytes: [0; PACKED],
        };
        match u8::try_from(kind) {
            Ok(kind) if body.len() <= PACKED => {
                e.kind = kind;
                e.len = body.len() as u8;
                e.bytes[..body.len()].copy_from_slice(body);
                (e, None)
            }
            _ => (e, Some(b)),
        }
    }

    /// The same handle as `h` (with `long`, the side table's bytes for this entry)?
    fn same(&self, h: &Handle, long: Option<&[u8]>) -> bool {
        let (other, other_long) = Entry::pack(h);
        self.kind == other.kind
            && self.len == other.len
            && self.bytes == other.bytes
            && long == other_long
    }

    fn unpack(&self, long: Option<&[u8]>) -> Handle {
        if self.len == LONG {
            return Handle::from_bytes(long.unwrap_or_default());
        }
        // On the stack: no allocation.
        let mut b = [0u8; 8 + PACKED];
        let n = self.len as usize;
        b[..4].copy_from_slice(&(n as u32).to_ne_bytes());
        b[4..8].copy_from_slice(&(self.kind as i32).to_ne_bytes());
        b[8..8 + n].copy_from_slice(&self.bytes[..n]);
        Handle::from_bytes(&b[..8 + n])
    }
}

/// One shard: the entries, and the handles too long to keep in one.
#[derive(Default)]
struct Shard {
    map: HashMap<u64, Entry>,
    long: HashMap<u64, Box<[u8]>>,
}

impl Shard {
    /// Gives memory back once the kernel has forgotten most of what the shard held: the map
    /// shrinks to twice what it holds when it is under a quarter full.
    fn shrink(&mut self) -> bool {
        let (len, cap) = (self.map.len(), self.map.capacity());
        if cap > 256 && len < cap / 4 {
            self.map.shrink_to(len * 2);
            self.long.shrink_to(self.long.len() * 2);
            return true;
        }
        false
    }
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
    shards: Box<[Mutex<Shard>]>,
}

impl Default for InodeTable {
    fn default() -> Self {
        InodeTable {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
        }
    }
}

impl InodeTable {
    fn shard(&self, ino: u64) -> std::sync::MutexGuard<'_, Shard> {
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
        let Shard { map, long } = &mut *shard;
        match map.get_mut(&ino) {
            Some(e) => {
                if !e.same(&handle, long.get(&ino).map(|b| &b[..])) {
                    let (mut new, body) = Entry::pack(&handle);
                    new.nlookup = e.nlookup;
                    new.generation = e.generation.wrapping_add(1);
                    *e = new;
                    match body {
                        Some(b) => long.insert(ino, b.into()),
                        None => long.remove(&ino),
                    };
                }
                e.nlookup = e.nlookup.saturating_add(1);
                e.generation as u64
            }
            None => {
                let (mut e, body) = Entry::pack(&handle);
                e.nlookup = 1;
                if let Some(b) = body {
                    long.insert(ino, b.into());
                }
                map.insert(ino, e);
                0
            }
        }
    }

    /// Drops `n` lookups; removes the entry at zero, and gives memory back when most of a
    /// shard is gone (`Shard::shrink`, then `malloc_trim`: freed table memory returns to the
    /// system, not only to the allocator).
    pub fn forget(&self, ino: u64, n: u64) {
        let mut shard = self.shard(ino);
        let Some(e) = shard.map.get_mut(&ino) else {
            return;
        };
        if e.nlookup == u32::MAX {
            return; // saturated: kept for good
        }
        e.nlookup = e.nlookup.saturating_sub(n.min(u32::MAX as u64) as u32);
        if e.nlookup == 0 {
            shard.map.remove(&ino);
            shard.long.remove(&ino);
            if shard.shrink() {
                drop(shard);
                #[cfg(target_env = "gnu")]
                // SAFETY: no preconditions; returns free heap memory to the system.
                unsafe {
                    libc::malloc_trim(0);
                }
            }
        }
    }

    /// The handle of a known inode.
    pub fn handle(&self, ino: u64) -> Option<Handle> {
        let shard = self.shard(ino);
        let e = shard.map.get(&ino)?;
        Some(e.unpack(shard.long.get(&ino).map(|b| &b[..])))
    }

    /// Number of inodes known.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).map.len())
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
        let (h, _) = handle_at(d.as_raw_fd(), &CString::new("f").unwrap()).unwrap();
        let fd = open_handle(d.as_raw_fd(), &h, libc::O_RDONLY).unwrap();
        let mut s = String::new();
        use std::io::Read;
        std::fs::File::from(fd).read_to_string(&mut s).unwrap();
        assert_eq!(s, "x");

        let t = InodeTable::default();
        assert_eq!(t.looked_up(42, h.clone()), 0);
        assert_eq!(t.looked_up(42, h.clone()), 0);
        let (other, _) = handle_at(d.as_raw_fd(), &CString::new("").unwrap()).unwrap();
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

    /// Issue 40, point 4: an entry is 24 bytes (32 with its key); handles of any length and
    /// type come back as they went in; a table the kernel has mostly forgotten gives its
    /// memory back.
    #[test]
    fn entries_are_compact_handles_round_trip_and_forgotten_memory_is_freed() {
        assert_eq!(std::mem::size_of::<Entry>(), 24);
        assert_eq!(std::mem::size_of::<(u64, Entry)>(), 32);
        let t = InodeTable::default();
        let handle = |kind: i32, body: &[u8]| {
            let mut b = (body.len() as u32).to_ne_bytes().to_vec();
            b.extend_from_slice(&kind.to_ne_bytes());
            b.extend_from_slice(body);
            Handle::from_bytes(&b)
        };
        let cases = [
            (0, 1),
            (8, 1),
            (12, 1),
            (14, 1),
            (15, 1),
            (40, 1),
            (128, 1),
            (8, 0x4f1),
        ];
        for (ino, &(len, kind)) in (1u64..).zip(cases.iter()) {
            let body: Vec<u8> = (0..len as u8).collect();
            let h = handle(kind, &body);
            t.looked_up(ino, h.clone());
            assert!(t.handle(ino) == Some(h.clone()), "{len} bytes, type {kind}");
            // The same handle again is the same inode; another one a new generation.
            assert_eq!(t.looked_up(ino, h), 0);
            assert_eq!(t.looked_up(ino, handle(kind + 1, &body)), 1, "{len} bytes");
            assert!(t.handle(ino) == Some(handle(kind + 1, &body)));
        }
        let many = 200_000u64;
        for ino in 100..100 + many {
            t.looked_up(ino, handle(1, &ino.to_ne_bytes()));
        }
        let full: usize = t
            .shards
            .iter()
            .map(|s| s.lock().unwrap().map.capacity())
            .sum();
        for ino in 100..100 + many {
            t.forget(ino, 1);
        }
        let left: usize = t
            .shards
            .iter()
            .map(|s| s.lock().unwrap().map.capacity())
            .sum();
        assert!(
            left * 4 < full && left <= SHARDS * 512,
            "capacity {full} -> {left}"
        );
        assert_eq!(t.len(), cases.len());
    }
}
