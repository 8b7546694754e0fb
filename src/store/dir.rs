//! The real filesystem as a [`ChunkStore`]: a datastore directory, or a chunkscope mount.
//!
//! Paths are built in stack buffers (no allocation per touch or stat), and each phase-2
//! directory is opened once and used as the base of its `fstatat`/`unlinkat` calls, exactly as
//! PBS does, so a trace of this GC through the overlay shows PBS's request pattern.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::layout::{self, OddDir};
use super::{ChunkDir, ChunkStat, ChunkStore, EntryStat, Phase1Visitor};
use crate::datastore::paths::CHUNK_DIR;
use crate::datastore::snapshots;
use crate::datastore::{Digest, IndexFile};

const PATH_MAX: usize = 4096;

/// A datastore directory.
pub struct DirStore {
    root: PathBuf,
    root_bytes: Vec<u8>,
    chunks: OwnedFd,
    /// `getdents64` buffers of closed [`DirHandle`]s, for the next `open_dir`: a sweep opens
    /// 65,536 directories, one (or a prefetch pass's jobs) at a time.
    buffers: std::sync::Mutex<Vec<Box<[u8]>>>,
    /// Where `.chunks` is: every chunk directory opened must be on the same device and the
    /// same mount (a directory bound over a chunk directory after the layout check is on the
    /// same device, but is another mount).
    home: Place,
    /// Where the layout check asks (a chunkscope mount's daemon checks its backing store);
    /// `None`: [`layout::odd_chunk_dirs`] on `root`.
    layout_check: Option<LayoutCheck>,
    /// What the store was when opened, to tell that it is still there.
    identity: Identity,
}

/// A layout check other than [`layout::odd_chunk_dirs`] on the store's root: for a chunkscope
/// mount, the daemon's check of its backing store (`DirStore::set_layout_check`).
pub type LayoutCheck = Box<dyn Fn() -> anyhow::Result<Vec<OddDir>> + Send + Sync>;

/// What a store was when opened ([`ChunkStore::check_identity`]).
enum Identity {
    /// A directory: `(st_dev, st_ino)` of the root and of `.chunks`.
    Dir([(u64, u64); 2]),
    /// A FUSE mount (a chunkscope mount), by its device: it is there as long as the mount
    /// table has a mount of that device. Asked of `/proc/self/mountinfo`, so that the check
    /// sends the mount no request (its trace holds only the GC's own).
    Fuse(u64),
}

/// Of the mount table `info` (`/proc/self/mountinfo`), the mount of device `id`
/// (`major:minor`): `None` when there is none; `Some(Some(what))` when another mount stands
/// over its root or over its `.chunks` (a bind mount, say: a path through it no longer
/// reaches the store), `Some(None)` when it is there as it was.
fn mounted_over(info: &str, id: &str) -> Option<Option<String>> {
    let mounts = crate::fsutil::parse_mountinfo(info);
    let ours = mounts.iter().find(|m| m.dev == id)?;
    let chunks = ours.point.join(CHUNK_DIR);
    let over = mounts
        .iter()
        .find(|m| m.parent == ours.id && (m.point == ours.point || m.point == chunks));
    Some(over.map(|m| {
        let what = if m.point == ours.point {
            "another mount"
        } else {
            "a mount on .chunks"
        };
        format!("{what} (device {})", m.dev)
    }))
}

/// Where a directory is: its device and its mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    dev: u64,
    /// The mount's id (`STATX_MNT_ID`); `None` where the kernel does not say (before 5.8).
    mnt: Option<u64>,
}

/// `(st_dev, st_ino)` of `fd` and its mount, from the attributes the kernel holds
/// (`AT_STATX_DONT_SYNC`, no attribute the filesystem must fill): a FUSE filesystem is not
/// asked.
fn statx_place(fd: RawFd) -> io::Result<(Place, u64)> {
    statx_with(fd, libc::AT_STATX_DONT_SYNC)
}

/// `(st_dev, st_ino)`, asking the filesystem (`AT_STATX_FORCE_SYNC`: a FUSE request).
fn statx_dev_ino_sync(fd: &OwnedFd) -> io::Result<(u64, u64)> {
    let (place, ino) = statx_with(fd.as_raw_fd(), libc::AT_STATX_FORCE_SYNC)?;
    Ok((place.dev, ino))
}

fn statx_with(fd: RawFd, sync: libc::c_int) -> io::Result<(Place, u64)> {
    // SAFETY: a plain C struct; zeroes are a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor, an empty path with AT_EMPTY_PATH, and an out pointer.
    let rc = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | sync,
            libc::STATX_INO | libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    if rc != 0 {
        return Err(last_err());
    }
    let place = Place {
        dev: libc::makedev(stx.stx_dev_major, stx.stx_dev_minor),
        mnt: (stx.stx_mask & libc::STATX_MNT_ID != 0).then_some(stx.stx_mnt_id),
    };
    Ok((place, stx.stx_ino))
}

/// `major:minor` of a device, as the mount table names it.
fn dev_id(dev: u64) -> String {
    format!("{}:{}", libc::major(dev), libc::minor(dev))
}

/// Whether device `dev` is a FUSE filesystem's, by the mount table (no request to it).
fn is_fuse(dev: u64) -> bool {
    let id = dev_id(dev);
    crate::fsutil::mounts()
        .unwrap_or_default()
        .iter()
        .any(|m| m.dev == id && m.fstype.starts_with("fuse"))
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

impl DirStore {
    /// Opens the store at `root` (its `.chunks` directory is held open).
    pub fn open(root: &Path) -> io::Result<DirStore> {
        let root = std::path::absolute(root)?;
        let chunks = root.join(CHUNK_DIR);
        let c = std::ffi::CString::new(chunks.as_os_str().as_bytes())?;
        // SAFETY: valid C string.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = last_err();
            return Err(io::Error::new(
                e.kind(),
                format!("opening {}: {e}", chunks.display()),
            ));
        }
        // SAFETY: fd is new and ours.
        let chunks_fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // The device from the attributes the kernel has (AT_STATX_DONT_SYNC, no field asked:
        // on a FUSE mount no request, so its trace starts with the GC's own).
        let (home, ino) = statx_place(chunks_fd.as_raw_fd())
            .map_err(|e| io::Error::new(e.kind(), format!("stat {}: {e}", chunks.display())))?;
        let dev = home.dev;
        let identity = if is_fuse(dev) {
            Identity::Fuse(dev)
        } else {
            let r = std::fs::metadata(&root)?;
            Identity::Dir([(r.dev(), r.ino()), (dev, ino)])
        };
        Ok(DirStore {
            root_bytes: root.as_os_str().as_bytes().to_vec(),
            root,
            chunks: chunks_fd,
            buffers: Default::default(),
            home,
            layout_check: None,
            identity,
        })
    }

    /// Asks `check` instead of listing the store's `.chunks` for the layout check (a
    /// chunkscope mount's daemon, which sees the backing store's mounts and asks nothing
    /// through the mount, so the trace holds only the GC's own requests).
    pub fn set_layout_check(&mut self, check: LayoutCheck) {
        self.layout_check = Some(check);
    }

    /// What `.chunks/<name>` is, for a chunk directory that would not open as one.
    fn what_is(&self, name: &[u8], errno: Option<i32>) -> String {
        match crate::fsutil::lstat_at(self.chunks.as_raw_fd(), name) {
            Ok(Some(st)) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
                let path = self
                    .root
                    .join(CHUNK_DIR)
                    .join(std::ffi::OsStr::from_bytes(name));
                match std::fs::read_link(&path) {
                    Ok(to) => format!("a symbolic link to {}", to.display()),
                    Err(_) => "a symbolic link".to_string(),
                }
            }
            Ok(Some(st)) => crate::fsutil::file_type_name(st.st_mode).to_string(),
            _ if errno == Some(libc::ELOOP) => "a symbolic link".to_string(),
            _ => "not a directory".to_string(),
        }
    }

    /// `<root>/.chunks/XXXX/<hex>[suffix]` NUL-terminated in `buf`.
    fn chunk_path<'b>(
        &self,
        buf: &'b mut [u8; PATH_MAX],
        digest: &Digest,
        suffix: &[u8],
    ) -> io::Result<&'b CStr> {
        let hex = digest.hex_bytes();
        let parts: [&[u8]; 7] = [
            &self.root_bytes,
            b"/",
            CHUNK_DIR.as_bytes(),
            b"/",
            &hex[..4],
            b"/",
            &hex,
        ];
        let mut at = 0;
        for p in parts.iter().chain(std::iter::once(&suffix)) {
            if at + p.len() >= PATH_MAX {
                return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
            }
            buf[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        buf[at] = 0;
        Ok(CStr::from_bytes_with_nul(&buf[..=at]).expect("one NUL at the end"))
    }

    /// Writes `blob` as the chunk at `path` the way PBS's `replace_file` does: a temporary
    /// `<path>.tmp_XXXXXX` (`mkostemp`, `O_CLOEXEC`), `fchmod` 0644, `fchown` to the owner of
    /// `.chunks` when running as root, the data, then `rename` over `path`. The temporary
    /// file is removed if any step fails.
    fn write_chunk(&self, path: &CStr, blob: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let mut template = Vec::with_capacity(path.to_bytes().len() + 12);
        template.extend_from_slice(path.to_bytes());
        template.extend_from_slice(b".tmp_XXXXXX\0");
        // SAFETY: a NUL-terminated, writable template ending in six X.
        let fd = unsafe { libc::mkostemp(template.as_mut_ptr().cast(), libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(last_err());
        }
        // SAFETY: fd is new and ours.
        let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let tmp = CStr::from_bytes_with_nul(&template).expect("one NUL at the end");
        let written = (|| -> io::Result<()> {
            // SAFETY: valid fd.
            if unsafe { libc::fchmod(file.as_raw_fd(), 0o644) } != 0 {
                return Err(last_err());
            }
            self.own_like_chunks(file.as_raw_fd())?;
            file.write_all(blob)?;
            drop(file);
            // SAFETY: two valid paths.
            if unsafe { libc::rename(tmp.as_ptr(), path.as_ptr()) } != 0 {
                return Err(last_err());
            }
            Ok(())
        })();
        if written.is_err() {
            // SAFETY: valid path; whatever is left of the temporary file goes.
            unsafe { libc::unlink(tmp.as_ptr()) };
        }
        written
    }

    /// When running as root, gives the file `fd` the owner of `.chunks` (PBS chowns what it
    /// creates there to backup:backup, the owner of a PBS datastore's `.chunks`).
    fn own_like_chunks(&self, fd: libc::c_int) -> io::Result<()> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(());
        }
        // SAFETY: a plain C struct; all zeroes is a valid value of it.
        let mut owner: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fds and out pointer.
        if unsafe { libc::fstat(self.chunks.as_raw_fd(), &mut owner) } != 0
            // SAFETY: a valid descriptor; plain ids.
            || unsafe { libc::fchown(fd, owner.st_uid, owner.st_gid) } != 0
        {
            return Err(last_err());
        }
        Ok(())
    }

    fn touch_path(path: &CStr) -> io::Result<bool> {
        let times = [
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_NOW,
            },
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
        ];
        // SAFETY: valid path and two timespecs.
        let rc = unsafe {
            libc::utimensat(-1, path.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW)
        };
        if rc == 0 {
            return Ok(true);
        }
        let e = last_err();
        if e.raw_os_error() == Some(libc::ENOENT) {
            Ok(false)
        } else {
            Err(e)
        }
    }
}

/// An open chunk directory of a [`DirStore`].
pub struct DirHandle<'a> {
    fd: OwnedFd,
    /// [`GETDENTS_BUFFER`](super::GETDENTS_BUFFER) bytes, given back to the store on drop.
    buf: Box<[u8]>,
    buffers: &'a std::sync::Mutex<Vec<Box<[u8]>>>,
}

impl Drop for DirHandle<'_> {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if let Ok(mut free) = self.buffers.lock() {
            free.push(buf);
        }
    }
}

fn name_cstr<'b>(buf: &'b mut [u8; 256], name: &[u8]) -> io::Result<&'b CStr> {
    if name.len() > 255 || name.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    buf[..name.len()].copy_from_slice(name);
    buf[name.len()] = 0;
    Ok(CStr::from_bytes_with_nul(&buf[..=name.len()]).expect("NUL"))
}

impl ChunkDir for DirHandle<'_> {
    fn rewind(&mut self) -> io::Result<()> {
        // SAFETY: valid fd.
        if unsafe { libc::lseek(self.fd.as_raw_fd(), 0, libc::SEEK_SET) } < 0 {
            return Err(last_err());
        }
        Ok(())
    }

    fn read_batch(&mut self, f: &mut dyn FnMut(&[u8], u64)) -> io::Result<bool> {
        let fd: RawFd = self.fd.as_raw_fd();
        // SAFETY: buf is writable for its length.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd,
                self.buf.as_mut_ptr(),
                self.buf.len(),
            )
        };
        if n < 0 {
            return Err(last_err());
        }
        if n == 0 {
            return Ok(false);
        }
        let mut at = 0;
        while at < n as usize {
            let b = &self.buf[at..];
            let ino = u64::from_ne_bytes(b[..8].try_into().expect("8"));
            let reclen = u16::from_ne_bytes(b[16..18].try_into().expect("2")) as usize;
            let raw = &b[19..reclen];
            let name = &raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())];
            if name != b"." && name != b".." {
                f(name, ino);
            }
            at += reclen;
        }
        Ok(true)
    }

    fn stat(&mut self, name: &[u8]) -> io::Result<Option<EntryStat>> {
        let mut nb = [0u8; 256];
        let c = name_cstr(&mut nb, name)?;
        // SAFETY: a plain C struct; all zeroes is a valid value of it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd, name and out pointer.
        let rc = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            // A vanished entry (removed meanwhile) is skipped, as PBS skips it; any other
            // error is the sweep's to count and report.
            let e = last_err();
            return if e.raw_os_error() == Some(libc::ENOENT) {
                Ok(None)
            } else {
                Err(e)
            };
        }
        Ok(Some(EntryStat {
            atime: st.st_atime,
            size: st.st_size as u64,
            is_file: st.st_mode & libc::S_IFMT == libc::S_IFREG,
        }))
    }

    fn unlink(&mut self, name: &[u8]) -> io::Result<()> {
        let mut nb = [0u8; 256];
        let c = name_cstr(&mut nb, name)?;
        // SAFETY: valid fd and name.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
            return Err(last_err());
        }
        Ok(())
    }
}

impl ChunkStore for DirStore {
    type Dir<'a> = DirHandle<'a>;

    fn root(&self) -> &Path {
        &self.root
    }

    fn touch(&self, digest: &Digest) -> io::Result<bool> {
        let mut buf = [0u8; PATH_MAX];
        Self::touch_path(self.chunk_path(&mut buf, digest, b"")?)
    }

    fn touch_bad(&self, digest: &Digest, n: u8) -> io::Result<bool> {
        let mut buf = [0u8; PATH_MAX];
        let suffix = [b'.', b'0' + n, b'.', b'b', b'a', b'd'];
        Self::touch_path(self.chunk_path(&mut buf, digest, &suffix)?)
    }

    /// `O_CREAT | O_EXCL`, mode 0644, no symbolic link followed; owned like `.chunks`.
    fn create_marker(&self, digest: &Digest, suffix: &[u8]) -> io::Result<bool> {
        let mut buf = [0u8; PATH_MAX];
        let path = self.chunk_path(&mut buf, digest, suffix)?;
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid path; the descriptor is owned below.
        let fd = unsafe { libc::open(path.as_ptr(), flags, 0o644 as libc::c_uint) };
        if fd < 0 {
            let e = last_err();
            return if e.raw_os_error() == Some(libc::EEXIST) {
                Ok(false)
            } else {
                Err(e)
            };
        }
        // SAFETY: fd is new and ours.
        let file = unsafe { OwnedFd::from_raw_fd(fd) };
        self.own_like_chunks(file.as_raw_fd())?;
        Ok(true)
    }

    fn stat_chunk(&self, digest: &Digest) -> io::Result<Option<ChunkStat>> {
        let mut buf = [0u8; PATH_MAX];
        let path = self.chunk_path(&mut buf, digest, b"")?;
        // SAFETY: a plain C struct; all zeroes is a valid value of it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid path and out pointer. A `stat`, as PBS's check (`std::fs::metadata`).
        if unsafe { libc::stat(path.as_ptr(), &mut st) } != 0 {
            let e = last_err();
            return if e.raw_os_error() == Some(libc::ENOENT) {
                Ok(None)
            } else {
                Err(e)
            };
        }
        Ok(Some(ChunkStat {
            ino: st.st_ino,
            atime_ns: st.st_atime as i128 * 1_000_000_000 + st.st_atime_nsec as i128,
        }))
    }

    /// PBS's `insert_chunk_nolock` (format document 1.3): a `stat` first, so that inserting
    /// a chunk that is not there makes no request on it before it is written. An existing
    /// regular file of the same size, or a smaller non-empty one (the blob here is never
    /// encrypted), is kept and touched; an empty or a bigger one is replaced, as a missing
    /// one is written: a `<hex>.tmp_XXXXXX` file from `mkostemp`, mode 0644, owned like
    /// `.chunks` when running as root (PBS chowns to backup:backup, the owner of a PBS
    /// store's `.chunks`, so that PBS can touch it later), renamed over the chunk.
    fn insert_chunk(&self, digest: &Digest, blob: &[u8]) -> io::Result<bool> {
        let mut buf = [0u8; PATH_MAX];
        let path = self.chunk_path(&mut buf, digest, b"")?;
        // SAFETY: a plain C struct; all zeroes is a valid value of it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid path and out pointer. PBS ignores a failed stat (`if let Ok(..)`)
        // and writes; so does this.
        if unsafe { libc::stat(path.as_ptr(), &mut st) } == 0 {
            if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                return Err(io::Error::other(format!(
                    "got unexpected file type on store '{}' for chunk {digest}",
                    self.root.display()
                )));
            }
            let (old, new) = (st.st_size as u64, blob.len() as u64);
            if old == new || (old != 0 && old < new) {
                if Self::touch_path(path)? {
                    return Ok(true);
                }
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("update atime failed for chunk {digest}: it vanished after its stat"),
                ));
            }
        }
        self.write_chunk(path, blob)?;
        Ok(false)
    }

    fn check_identity(&self, thorough: bool) -> anyhow::Result<()> {
        let ids = match self.identity {
            Identity::Dir(ids) => ids,
            Identity::Fuse(dev) => {
                if thorough {
                    // A request: a connection aborted (a forced unmount) or a daemon gone
                    // answers ENOTCONN or ECONNABORTED while the mount table still lists it.
                    if let Err(e) = statx_dev_ino_sync(&self.chunks) {
                        if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)) {
                            anyhow::bail!(
                                "the store vanished under the GC: the mount {} no longer \
                                 answers ({e}: unmounted by force, or its process ended): \
                                 stopped before sweeping anything more",
                                self.root.display()
                            );
                        }
                    }
                }
                let (major, minor) = (libc::major(dev), libc::minor(dev));
                let id = format!("{major}:{minor}");
                let info = std::fs::read_to_string("/proc/self/mountinfo")?;
                let Some(over) = mounted_over(&info, &id) else {
                    anyhow::bail!(
                        "the store vanished under the GC: the mount {} (device {id}) is no \
                         longer mounted (unmounted or detached): stopped before sweeping \
                         anything more",
                        self.root.display()
                    );
                };
                if let Some(what) = over {
                    anyhow::bail!(
                        "the store vanished under the GC: {what} was mounted over the mount \
                         {} (device {id}) it opened: stopped before sweeping anything more",
                        self.root.display()
                    );
                }
                return Ok(());
            }
        };
        let chunks = self.root.join(CHUNK_DIR);
        for (path, (dev, ino)) in [&self.root, &chunks].into_iter().zip(ids) {
            let now = std::fs::metadata(path).map(|m| (m.dev(), m.ino()));
            if now.as_ref().ok() != Some(&(dev, ino)) {
                let found = match now {
                    Ok((d, i)) => format!("is now another directory (device {d:#x}, inode {i})"),
                    Err(e) => format!("cannot be reached ({e})"),
                };
                anyhow::bail!(
                    "the store vanished under the GC: {} {found}, not the one it opened \
                     (device {dev:#x}, inode {ino}): was it unmounted, moved or replaced? \
                     Stopped before sweeping anything more",
                    path.display()
                );
            }
        }
        Ok(())
    }

    fn odd_chunk_dirs(&self) -> anyhow::Result<Vec<OddDir>> {
        match &self.layout_check {
            Some(check) => check(),
            None => Ok(layout::odd_chunk_dirs(&self.root)?),
        }
    }

    fn open_dir(&self, prefix: u16) -> io::Result<Option<DirHandle<'_>>> {
        let name = crate::datastore::paths::chunk_subdir_name(prefix);
        let mut nb = [0u8; 256];
        let c = name_cstr(&mut nb, name.as_bytes())?;
        let odd = |what: &str| {
            io::Error::other(format!(
                "{}/{CHUNK_DIR}/{name} is {what}, not a directory of the store's own mount: \
                 never followed",
                self.root.display()
            ))
        };
        // SAFETY: valid fd and name. O_NOFOLLOW: a symbolic link is never followed.
        let fd = unsafe {
            libc::openat(
                self.chunks.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = last_err();
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Ok(None),
                // O_DIRECTORY wins over O_NOFOLLOW: a symbolic link says ENOTDIR (ELOOP
                // where a kernel checks the other way round). What it is, for the message.
                Some(libc::ELOOP | libc::ENOTDIR) => {
                    Err(odd(&self.what_is(name.as_bytes(), e.raw_os_error())))
                }
                // A chunkscope mount's answer for a name that would cross a mount point of
                // its backing store.
                Some(libc::EXDEV) => Err(odd(
                    "a mount point in the mount's backing store (another filesystem, or a \
                     directory bound there from elsewhere)",
                )),
                _ => Err(io::Error::new(
                    e.kind(),
                    format!("opening {}/{CHUNK_DIR}/{name}: {e}", self.root.display()),
                )),
            };
        }
        // SAFETY: new fd.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // The layout check ran before the sweep, but a sweep takes hours: a directory bound
        // over this one since (same device, another mount) or another filesystem mounted
        // there holds another store's chunks. One statx of the descriptor, answered from
        // what the kernel holds (no request to a FUSE mount).
        let (place, _) = statx_place(fd.as_raw_fd())?;
        if place.dev != self.home.dev {
            return Err(odd("the mount point of another filesystem"));
        }
        if place.mnt != self.home.mnt {
            return Err(odd(
                "a mount point (a directory bound there from elsewhere, or another mount of \
                 the store's filesystem)",
            ));
        }
        let reused = self.buffers.lock().ok().and_then(|mut free| free.pop());
        Ok(Some(DirHandle {
            fd,
            buf: reused.unwrap_or_else(|| vec![0; super::GETDENTS_BUFFER].into_boxed_slice()),
            buffers: &self.buffers,
        }))
    }

    fn walk_indexes(&self, visitor: &mut dyn Phase1Visitor) -> anyhow::Result<()> {
        super::walk_indexes(
            &snapshots::Fs,
            &self.root,
            &mut |p| IndexFile::open(p).map(Some),
            visitor,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mount over a chunkscope mount's root or its `.chunks` is found in the mount table,
    /// whatever its device; a mount of another filesystem elsewhere is not one.
    #[test]
    fn a_mount_over_the_store_s_mount_is_found_in_the_mount_table() {
        let base = "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
40 22 0:50 / /mnt/cs rw - fuse.chunkscope chunkscope rw
41 22 0:51 / /mnt/other rw - tmpfs t rw
";
        assert_eq!(mounted_over(base, "0:50"), Some(None));
        assert_eq!(mounted_over(base, "0:99"), None);
        let over_root = format!("{base}42 40 0:51 / /mnt/cs rw - tmpfs t rw\n");
        assert_eq!(
            mounted_over(&over_root, "0:50"),
            Some(Some("another mount (device 0:51)".into()))
        );
        let over_chunks = format!("{base}43 40 8:1 /x /mnt/cs/.chunks rw - ext4 /dev/sda1 rw\n");
        assert_eq!(
            mounted_over(&over_chunks, "0:50"),
            Some(Some("a mount on .chunks (device 8:1)".into()))
        );
        // A mount below a chunk directory is the layout check's, not this one's.
        let below = format!("{base}44 40 8:1 /x /mnt/cs/.chunks/0000 rw - ext4 /dev/sda1 rw\n");
        assert_eq!(mounted_over(&below, "0:50"), Some(None));
    }
    use crate::store::CHUNK_ENTRIES_PER_GETDENTS;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn touch_list_stat_unlink() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".chunks/abcd")).unwrap();
        let d = Digest::from_hex(&format!("abcd{}", "0".repeat(60))).unwrap();
        let p = dir.path().join(".chunks/abcd").join(d.to_hex());
        std::fs::write(&p, b"x").unwrap();
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        crate::fsutil::set_file_times(
            &f,
            crate::fsutil::Timestamp::new(1000, 0),
            crate::fsutil::Timestamp::new(2000, 0),
        )
        .unwrap();
        let s = DirStore::open(dir.path()).unwrap();
        assert!(s.touch(&d).unwrap());
        let m = std::fs::metadata(&p).unwrap();
        assert!(m.atime() > 1000 && m.mtime() == 2000);
        assert!(!s.touch(&Digest::default()).unwrap());
        assert!(!s.touch_bad(&d, 0).unwrap());
        assert!(s.open_dir(0x0000).unwrap().is_none());
        let mut h = s.open_dir(0xabcd).unwrap().unwrap();
        let mut names = Vec::new();
        h.list(&mut |n, ino| names.push((n.to_vec(), ino))).unwrap();
        assert_eq!(names, vec![(d.to_hex().into_bytes(), m.ino())]);
        let st = h.stat(d.to_hex().as_bytes()).unwrap().unwrap();
        assert!(st.is_file && st.size == 1 && st.atime == m.atime());
        h.unlink(d.to_hex().as_bytes()).unwrap();
        assert!(h.stat(d.to_hex().as_bytes()).unwrap().is_none());
    }

    /// One getdents call of glibc's 32 KiB returns 371 chunk names with "." and "..", then
    /// 372 a call (88-byte records, any filesystem: the record layout is the VFS's).
    #[test]
    fn a_directory_is_read_in_getdents_calls_of_32_kib() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join(".chunks/abcd");
        std::fs::create_dir_all(&sub).unwrap();
        for i in 0..1000u32 {
            std::fs::write(sub.join(format!("abcd{i:060x}")), b"").unwrap();
        }
        let s = DirStore::open(dir.path()).unwrap();
        let mut h = s.open_dir(0xabcd).unwrap().unwrap();
        let mut sizes = Vec::new();
        loop {
            let mut n = 0;
            if !h.read_batch(&mut |_, _| n += 1).unwrap() {
                assert_eq!(n, 0);
                break;
            }
            sizes.push(n);
        }
        assert_eq!(sizes, [371, 372, 257]);
        assert_eq!(CHUNK_ENTRIES_PER_GETDENTS, 372);
        let mut n = 0;
        h.list(&mut |_, _| n += 1).unwrap();
        assert_eq!(n, 1000, "list rewinds");
    }
}
