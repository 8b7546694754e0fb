//! The overlay: a FUSE passthrough over a chunk store that records every request.
//!
//! Every request is passed to the backing store relative to directory descriptors, without
//! following symlinks, so no name from the kernel can lead outside the store; a submount below
//! the store is refused (`EXDEV`). The kernel sees the backing inode numbers, both in `stat`
//! (`st_ino`) and in directory entries (`d_ino`), and the trace records them: analyses speak of
//! the real layout. Inodes are tracked by file handle ([`inode`]), never by an open descriptor.
//!
//! Each request makes one trace record, built from integers and the name copied onto the stack
//! and handed to the trace writer thread ([`crate::trace::TraceSink`]); nothing is formatted or
//! allocated on the request path.
//!
//! Fault rules ([`crate::faults`]) are consulted before a request is performed (an injected
//! error replaces it); the cost model ([`crate::model`]) charges it after, under one lock that
//! also hands out the trace's request numbers, so the trace's order is the model's order and
//! `chunkscope replay` recomputes the same costs. A request whose reply must wait (an
//! injected delay, or `--time-scale` times its modelled cost) hands the reply to the timer
//! thread ([`timer`]) and the worker goes on serving.
//!
//! POSIX record locks are forwarded as open-file-description locks on the backing file, which
//! conflict with `fcntl` locks taken on the store directly. `flock` locks are not asked for
//! (`FUSE_FLOCK_LOCKS`): fuser's `setlk` does not pass the flag that tells them from POSIX
//! ones, so the kernel keeps them for the mount.

pub mod control;
mod convert;
pub mod creds;
mod files;
mod fs;
pub mod inode;
#[cfg(feature = "metrics")]
pub mod metrics;
mod record;
pub mod session;
pub mod shadow;
mod sys;
pub mod timer;

use std::cell::RefCell;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use fuser::{FileAttr, FileHandle, Generation, INodeNo, Request, TimeOrNow};

use crate::faults::Decision;
pub use crate::instrument::Instruments;
use crate::instrument::Trace;
use crate::trace::format::flags;
use crate::trace::{Op, TraceSink};
use convert::{attr, fd_of, timespec};
use inode::{handle_at, open_handle, Fd, InodeTable};
use sys::{errno_of, fstat, fstatat, CName, ProcPath};

thread_local! {
    /// Where the last panic on this thread happened (` at FILE:LINE`), for the request guard's
    /// one log line.
    static PANIC_AT: std::cell::Cell<Option<String>> = const { std::cell::Cell::new(None) };
}

/// Installs a panic hook that leaves a request handler's panic to its guard
/// (`Overlay::guarded`), which logs it once with the operation and the inode: on the FUSE
/// worker threads (`fuser-N`) the hook only notes where it happened. Elsewhere it prints as
/// before.
pub fn quiet_request_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let worker = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("fuser-"));
        if worker {
            let at = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()));
            PANIC_AT.with(|a| a.set(at));
        } else {
            default(info)
        }
    }));
}

/// How the overlay presents the store to the kernel.
#[derive(Clone, Debug)]
pub struct OverlayOptions {
    /// The backing store (absolute, canonical: the fault globs' paths are relative to it).
    pub store: PathBuf,
    /// How long the kernel may cache a name → inode mapping (0: every lookup is seen).
    pub entry_ttl: Duration,
    /// How long the kernel may cache attributes (0: every stat is seen).
    pub attr_ttl: Duration,
    /// How long the kernel may cache a directory's entry and attributes, when longer than
    /// `entry_ttl` and `attr_ttl`: a datastore's skeleton (the store, `.chunks`, the chunk
    /// directories, namespaces, groups, snapshots) does not change under a GC, and a real
    /// filesystem answers those path components from its dentry cache. Chunk files keep the
    /// TTLs above, so every chunk lookup, stat and touch still reaches the overlay. What
    /// changes through the mount the kernel invalidates itself; a directory removed behind
    /// it stays visible (and fails with ESTALE) until the TTL ends.
    pub dir_ttl: Duration,
    /// Ask the kernel for READDIRPLUS (it then learns attributes from listings).
    pub readdirplus: bool,
    /// Pass extended attribute requests through (default: ENOSYS, so `ls -l` stays cheap).
    pub xattr: bool,
    /// Keep atime/mtime changes and unlinks in memory; refuse other changes (EROFS).
    pub shadow: bool,
    /// A disk under the store's files: each read and write is held until the disk model
    /// says it is done (`--disk`).
    pub disk: Option<crate::disk::DiskParams>,
    /// Every open is answered "keep no page of this file" (FOPEN_DIRECT_IO), whatever the
    /// opener asked (`--direct-io`): a filesystem that reads its image without O_DIRECT
    /// (zfs-fuse's file vdevs) then reaches the disk model with each of its own reads, not
    /// with the kernel's readahead and page cache between.
    pub direct_io: bool,
}

/// A mount's disk model, shared with whoever reports on it.
pub type SharedDisk = std::sync::Arc<std::sync::Mutex<crate::disk::Disk>>;

/// The FUSE filesystem.
pub struct Overlay {
    root: OwnedFd,
    root_ino: u64,
    /// The store's device and mount: a name whose lookup lands on another (a submount, or a
    /// directory of the same filesystem bound over one of the store's) is refused.
    dev: u64,
    mount_id: i32,
    inodes: std::sync::Arc<InodeTable>,
    trace: Option<Trace>,
    shadow: Option<std::sync::Arc<shadow::Shadow>>,
    inst: std::sync::Arc<Instruments>,
    /// Holds delayed replies (when anything can delay one).
    timer: Option<std::sync::Arc<timer::Timer>>,
    /// The disk model (`--disk`): one queue, so one lock, taken by reads and writes only.
    disk: Option<SharedDisk>,
    opts: OverlayOptions,
}

thread_local! {
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The alignment a buffer of direct I/O needs (the largest logical block size in use; a
/// page).
const DIRECT_ALIGN: usize = 4096;

/// Runs `f` on `len` bytes of this thread's buffer, aligned for direct I/O (what `O_DIRECT`
/// asks of the memory a read fills or a write takes). The bytes are not cleared.
fn with_aligned<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    BUF.with(|b| {
        let mut buf = b.borrow_mut();
        if buf.len() < len + DIRECT_ALIGN {
            buf.resize(len + DIRECT_ALIGN, 0);
        }
        let at = buf.as_ptr().align_offset(DIRECT_ALIGN);
        f(&mut buf[at..at + len])
    })
}

/// The injected error of `dec`, or what `run` returns (the operation is performed only if no
/// error was injected).
#[inline]
fn unless<T>(dec: Decision, run: impl FnOnce() -> Result<T, i32>) -> Result<T, i32> {
    if dec.errno != 0 {
        Err(dec.errno)
    } else {
        run()
    }
}

impl Overlay {
    /// Opens the store (refusing anything that is not a directory); starts the timer thread
    /// if anything can delay a reply.
    pub fn new(
        opts: OverlayOptions,
        sink: Option<TraceSink>,
        inst: std::sync::Arc<Instruments>,
    ) -> Result<Overlay> {
        let store = &opts.store;
        let c = std::ffi::CString::new(store.as_os_str().as_bytes()).context("store path")?;
        // SAFETY: valid C string.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            bail!("cannot open store {}: {e}", store.display());
        }
        // SAFETY: fd is new and ours.
        let root = unsafe { OwnedFd::from_raw_fd(fd) };
        let st = fstat(root.as_raw_fd())
            .map_err(|e| anyhow::anyhow!("stat {}: errno {e}", store.display()))?;
        // File handles need CAP_DAC_READ_SEARCH; fail now rather than on the first lookup.
        let (h, mount_id) = handle_at(root.as_raw_fd(), c"").with_context(|| {
            format!(
                "{}: the filesystem does not support file handles",
                store.display()
            )
        })?;
        open_handle(root.as_raw_fd(), &h, libc::O_PATH).with_context(|| {
            format!(
                "opening file handles on {} needs root (CAP_DAC_READ_SEARCH)",
                store.display()
            )
        })?;
        let shadow = opts
            .shadow
            .then(|| std::sync::Arc::new(shadow::Shadow::default()));
        Ok(Overlay {
            root,
            root_ino: st.st_ino,
            dev: st.st_dev,
            mount_id,
            inodes: std::sync::Arc::new(InodeTable::default()),
            trace: sink.map(Trace::all),
            shadow,
            disk: opts
                .disk
                .clone()
                .map(|p| std::sync::Arc::new(std::sync::Mutex::new(crate::disk::Disk::new(p)))),
            timer: if inst.delays() || opts.disk.is_some() {
                Some(std::sync::Arc::new(
                    timer::Timer::start().context("starting the timer thread")?,
                ))
            } else {
                None
            },
            inst,
            opts,
        })
    }

    /// What the control channel shows of this overlay.
    pub fn shared(&self) -> control::Shared {
        control::Shared {
            store: self.opts.store.clone(),
            inodes: self.inodes.clone(),
            shadow: self.shadow.clone(),
            trace: std::sync::Mutex::new(self.trace.as_ref().map(|t| Trace::all(t.sink.clone()))),
            inst: self.inst.clone(),
            timer: self.timer.clone(),
        }
    }

    fn backing(&self, node: INodeNo) -> u64 {
        if node.0 == 1 {
            self.root_ino
        } else {
            node.0
        }
    }

    /// A descriptor for `node` opened with `flags` (`O_PATH` for the root is the root itself).
    fn fd(&self, node: INodeNo, flags: libc::c_int) -> Result<Fd<'_>, i32> {
        if node.0 == 1 {
            if flags == libc::O_PATH {
                // SAFETY: root lives as long as self.
                return Ok(Fd::Root(unsafe {
                    BorrowedFd::borrow_raw(self.root.as_raw_fd())
                }));
            }
            let fd = sys::openat(self.root.as_raw_fd(), c".", flags, 0)?;
            // SAFETY: new fd.
            return Ok(Fd::Owned(unsafe { OwnedFd::from_raw_fd(fd) }));
        }
        let h = self.inodes.handle(node.0).ok_or(libc::ESTALE)?;
        // Opening by handle needs root; a caller's open is then checked as the caller by
        // reopening the node through /proc/self/fd.
        let by_handle = |flags| {
            creds::as_root(|| open_handle(self.root.as_raw_fd(), &h, flags))
                .map_err(|e| errno_of(&e))
        };
        if flags == libc::O_PATH || !creds::acting_as_caller() {
            return by_handle(flags).map(Fd::Owned);
        }
        let path = by_handle(libc::O_PATH)?;
        // The kernel resolved the name already; O_NOFOLLOW here would refuse the /proc link.
        let fd = sys::openat(
            libc::AT_FDCWD,
            ProcPath::new(path.as_raw_fd()).as_cstr(),
            flags & !(libc::O_NOFOLLOW | libc::O_CREAT | libc::O_EXCL),
            0,
        )?;
        // SAFETY: new fd.
        Ok(Fd::Owned(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Acts as the request's caller for its backing calls (see [`creds`]).
    #[inline]
    fn caller(&self, req: &Request) {
        creds::become_caller(req.uid(), req.gid(), req.pid())
    }

    #[inline]
    fn t0(&self) -> u64 {
        self.inst.now_ns(self.trace.as_ref())
    }

    /// `dec` with the disk model's time for a read or write of `bytes` at `offset` of `node`
    /// that arrived at `t0` and was performed (nothing when there is no disk, the request
    /// failed or moved nothing): the reply is held until the disk would be done with it.
    #[inline]
    fn on_disk(
        &self,
        dec: Decision,
        node: INodeNo,
        t0: u64,
        offset: u64,
        done: &Result<usize, i32>,
        write: bool,
    ) -> Decision {
        let (Some(disk), Ok(bytes)) = (&self.disk, done) else {
            return dec;
        };
        if *bytes == 0 || dec.errno != 0 {
            return dec;
        }
        let served = disk.lock().unwrap_or_else(|p| p.into_inner()).serve(
            t0,
            self.backing(node),
            offset,
            *bytes as u64,
            write,
        );
        Decision {
            delay_ns: dec.delay_ns + served.done_ns.saturating_sub(self.t0()),
            ..dec
        }
    }

    /// The disk model (`--disk`), if there is one: what it has done can be read while and
    /// after the mount serves.
    pub fn disk(&self) -> Option<SharedDisk> {
        self.disk.clone()
    }

    /// Whether listings must collect their entries (for Dirent records or the model).
    #[inline]
    fn tracks_listings(&self) -> bool {
        self.trace.is_some() || self.inst.has_model()
    }

    /// Asks the fault rules about a request before it is performed. `node` is the inode the
    /// request is about, or the parent directory for a request with a name.
    #[inline]
    fn admit(&self, op: Op, node: INodeNo, name: &[u8], atime: bool, mtime: bool) -> Decision {
        let path = &mut || self.path_of(node, name);
        let dec = self
            .inst
            .admit(op, self.backing(node), name, atime, mtime, path);
        if dec.panic {
            panic!("injected by fault rule {}", dec.rule);
        }
        dec
    }

    /// Runs request handler `f` for `op` on `node`; if it panics, the request is answered
    /// EIO (its reply, dropped unsent in the unwinding, says so), the panic is logged once
    /// with the operation and the inode and counted (`ctl stats`, `/metrics`, `top`), the
    /// thread takes back the credentials it was acting with, and the worker goes on serving.
    /// Nothing is paid without a panic.
    #[inline]
    fn guarded(&self, op: Op, node: INodeNo, f: impl FnOnce()) {
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            creds::after_panic();
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let at = PANIC_AT.with(|a| a.take()).unwrap_or_default();
            let n = self.inst.count_panic();
            tracing::error!(
                "the {} request on inode {} panicked ({what}{at}): answered EIO, the mount \
                 goes on serving ({n} such request{} so far)",
                op.name(),
                self.backing(node),
                if n == 1 { "" } else { "s" }
            );
        }
    }

    /// Where the node open as `fd` is, relative to the store (the kernel's path of the
    /// descriptor less the store's; `opts.store` is canonical, see `cli::mount`).
    fn store_path(&self, fd: RawFd) -> Option<PathBuf> {
        let link = std::fs::read_link(ProcPath::new(fd).as_path()).ok()?;
        Some(link.strip_prefix(&self.opts.store).ok()?.to_path_buf())
    }

    /// A name of the node open as `fd` (an `O_PATH` descriptor) in the store, as the kernel's
    /// dentry cache has it: its directory's backing inode and the name. For a link's trace
    /// record, whose request names only the inode; off the hot path (a link is rare, and this
    /// runs only when tracing). `None` when the node has no name inside the store.
    fn name_of(&self, fd: RawFd) -> Option<(u64, Vec<u8>)> {
        let rel = self.store_path(fd)?;
        let name = rel.file_name()?.as_bytes().to_vec();
        let dir = rel.parent().filter(|d| !d.as_os_str().is_empty());
        let parent = match dir {
            None => self.root_ino,
            Some(d) => {
                let c = std::ffi::CString::new(d.as_os_str().as_bytes()).ok()?;
                creds::as_root(|| {
                    fstatat(self.root.as_raw_fd(), &c, libc::AT_SYMLINK_NOFOLLOW).ok()
                })?
                .st_ino
            }
        };
        Some((parent, name))
    }

    /// The store-relative path of `node`, joined with `name` (for path globs of fault rules).
    fn path_of(&self, node: INodeNo, name: &[u8]) -> Option<String> {
        let fd = self.fd(node, libc::O_PATH).ok()?;
        let mut p = self.store_path(fd.as_raw_fd())?.to_str()?.to_string();
        if !name.is_empty() {
            if !p.is_empty() {
                p.push('/');
            }
            p.push_str(std::str::from_utf8(name).ok()?);
        }
        Some(p)
    }

    /// Registers `name` in `dir` (already stat'ed as `st`) as looked up; returns the entry.
    fn enter(
        &self,
        dir: RawFd,
        name: &CName,
        st: &libc::stat,
    ) -> Result<(FileAttr, Generation), i32> {
        if st.st_dev != self.dev {
            return Err(libc::EXDEV); // a submount: never cross into it
        }
        if st.st_ino == 1 {
            return Err(libc::EIO); // would collide with the root's node id
        }
        let (h, mount_id) = handle_at(dir, name.as_cstr()).map_err(|e| errno_of(&e))?;
        if mount_id != self.mount_id {
            return Err(libc::EXDEV); // bound over from elsewhere: never followed
        }
        let generation = self.inodes.looked_up(st.st_ino, h);
        match &self.shadow {
            Some(sh) => {
                let mut st = *st;
                sh.apply(&mut st);
                Ok((attr(&st), Generation(generation)))
            }
            None => Ok((attr(st), Generation(generation))),
        }
    }

    fn lookup_in(&self, parent: INodeNo, name: &CName) -> Result<(FileAttr, Generation), i32> {
        if self
            .shadow
            .as_ref()
            .is_some_and(|s| s.is_removed(self.backing(parent), name.bytes()))
        {
            return Err(libc::ENOENT);
        }
        let dir = self.fd(parent, libc::O_PATH)?;
        let st = fstatat(dir.as_raw_fd(), name.as_cstr(), libc::AT_SYMLINK_NOFOLLOW)?;
        self.enter(dir.as_raw_fd(), name, &st)
    }

    /// True for a name removed in shadow mode.
    fn hidden(&self, parent: u64, name: &[u8]) -> bool {
        self.shadow
            .as_ref()
            .is_some_and(|s| s.is_removed(parent, name))
    }

    /// `EROFS` in shadow mode: for every change the shadow does not keep.
    fn writable(&self) -> Result<(), i32> {
        if self.shadow.is_some() {
            Err(libc::EROFS)
        } else {
            Ok(())
        }
    }

    /// The trace flag for an effect kept in the shadow.
    fn shadow_flag(&self) -> u8 {
        if self.shadow.is_some() {
            flags::SHADOW
        } else {
            0
        }
    }

    /// Open flags for reading the backing store: `O_NOATIME` in shadow mode.
    fn read_flags(&self, flags: libc::c_int) -> libc::c_int {
        if self.shadow.is_some() {
            flags | libc::O_NOATIME
        } else {
            flags
        }
    }

    fn getattr_of(&self, ino: INodeNo, fh: Option<FileHandle>) -> Result<libc::stat, i32> {
        let mut st = match fh {
            Some(fh) => fstat(fd_of(fh)),
            None => fstat(self.fd(ino, libc::O_PATH)?.as_raw_fd()),
        }?;
        if let Some(sh) = &self.shadow {
            sh.apply(&mut st);
        }
        Ok(st)
    }

    /// Whether `mode` is the file's mode less its set-user-ID and/or set-group-ID bits, and
    /// nothing else changed (what the kernel asks to drop privileges after a write).
    fn only_drops_setid(&self, fd: RawFd, mode: u32) -> bool {
        let setid = libc::S_ISUID | libc::S_ISGID;
        fstat(fd).is_ok_and(|st| {
            let cur = st.st_mode & 0o7777;
            let new = mode & 0o7777;
            new != cur && new == cur & !(cur & setid & !new)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr_of(
        &self,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<FileHandle>,
    ) -> Result<libc::stat, i32> {
        let fd = self.fd(ino, libc::O_PATH)?;
        if let Some(sh) = &self.shadow {
            if mode.is_some() || uid.is_some() || gid.is_some() || size.is_some() {
                return Err(libc::EROFS);
            }
            let mut st = fstat(fd.as_raw_fd())?;
            sh.set_times(st.st_ino, atime, mtime);
            sh.apply(&mut st);
            return Ok(st);
        }
        let proc = ProcPath::new(fd.as_raw_fd());
        if let Some(mode) = mode {
            // SAFETY: valid path.
            let chmod = || sys::rc(unsafe { libc::chmod(proc.as_cstr().as_ptr(), mode) });
            match chmod() {
                // The kernel clearing set-user-ID and set-group-ID on a write or truncate by
                // another user (`file_remove_privs`, forced past permissions on a plain
                // filesystem) sends the file's own mode less those bits: done as the daemon,
                // which only ever takes privilege away. A user's own chmod was checked by the
                // kernel before it came (`default_permissions`, which other users' access
                // requires).
                Err(libc::EPERM) if self.only_drops_setid(fd.as_raw_fd(), mode) => {
                    creds::as_root(chmod)?
                }
                r => r?,
            }
        }
        if uid.is_some() || gid.is_some() {
            let (u, g) = (uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX));
            // SAFETY: valid fd; empty path with AT_EMPTY_PATH.
            sys::rc(unsafe {
                libc::fchownat(
                    fd.as_raw_fd(),
                    c"".as_ptr(),
                    u,
                    g,
                    libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
                )
            })?;
        }
        if let Some(size) = size {
            // SAFETY: valid fd or path.
            sys::rc(unsafe {
                match fh {
                    Some(fh) => libc::ftruncate(fd_of(fh), size as libc::off_t),
                    None => libc::truncate(proc.as_cstr().as_ptr(), size as libc::off_t),
                }
            })?;
        }
        if atime.is_some() || mtime.is_some() {
            let times = [timespec(atime), timespec(mtime)];
            // SAFETY: valid path and two timespecs.
            sys::rc(unsafe {
                libc::utimensat(libc::AT_FDCWD, proc.as_cstr().as_ptr(), times.as_ptr(), 0)
            })?;
        }
        fstat(fd.as_raw_fd())
    }
}

/// Reads directory entries with `getdents64` from `offset`, calling `add(ino, next, type, name)`
/// until it returns `Some(true)` (reply buffer full) or the directory ends; `None` skips an
/// entry. Returns the entries added.
fn read_dir(
    fd: RawFd,
    offset: u64,
    mut add: impl FnMut(u64, u64, u8, &[u8]) -> Option<bool>,
) -> Result<u64, i32> {
    // SAFETY: valid fd.
    if unsafe { libc::lseek(fd, offset as libc::off_t, libc::SEEK_SET) } < 0 {
        return Err(errno_of(&std::io::Error::last_os_error()));
    }
    BUF.with(|b| {
        let mut buf = b.borrow_mut();
        buf.resize(64 * 1024, 0);
        let mut added = 0;
        loop {
            // SAFETY: buf is writable for its length.
            let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
            let n = sys::rc_size(n as isize)?;
            if n == 0 {
                return Ok(added);
            }
            let mut at = 0;
            while at < n {
                let ino = u64::from_ne_bytes(buf[at..at + 8].try_into().expect("8"));
                let off = i64::from_ne_bytes(buf[at + 8..at + 16].try_into().expect("8"));
                let reclen =
                    u16::from_ne_bytes(buf[at + 16..at + 18].try_into().expect("2")) as usize;
                let dtype = buf[at + 18];
                let name_bytes = &buf[at + 19..at + reclen];
                let name = &name_bytes[..name_bytes
                    .iter()
                    .position(|&c| c == 0)
                    .unwrap_or(name_bytes.len())];
                match add(ino, off as u64, dtype, name) {
                    Some(true) => return Ok(added),
                    Some(false) => added += 1,
                    None => {} // hidden (removed in shadow mode)
                }
                at += reclen;
            }
        }
    })
}
