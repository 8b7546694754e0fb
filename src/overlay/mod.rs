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
pub mod creds;
pub mod inode;
pub mod shadow;
mod sys;
pub mod timer;

use std::cell::RefCell;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::faults::{Decision, Faults, Request as FaultRequest};
use crate::model::{charges, Model, ModelOp};
use crate::trace::format::flags;
use crate::trace::{Op, RawRecord, TraceSink};
use inode::{handle_at, open_handle, Fd, InodeTable};
use sys::{errno_of, fstat, fstatat, CName, ProcPath};

/// How the overlay presents the store to the kernel.
#[derive(Clone, Debug)]
pub struct OverlayOptions {
    pub store: PathBuf,
    /// How long the kernel may cache a name → inode mapping (0: every lookup is seen).
    pub entry_ttl: Duration,
    /// How long the kernel may cache attributes (0: every stat is seen).
    pub attr_ttl: Duration,
    /// Ask the kernel for READDIRPLUS (it then learns attributes from listings).
    pub readdirplus: bool,
    /// Pass extended attribute requests through (default: ENOSYS, so `ls -l` stays cheap).
    pub xattr: bool,
    /// Keep atime/mtime changes and unlinks in memory; refuse other changes (EROFS).
    pub shadow: bool,
}

/// Fault rules, the cost model and the timer that holds delayed replies.
#[derive(Default)]
pub struct Instruments {
    pub faults: Option<Faults>,
    pub model: Option<std::sync::Mutex<Model>>,
    /// Replies wait `time_scale` times their modelled cost (0: account only).
    pub time_scale: f64,
    pub timer: Option<timer::Timer>,
    /// Requests the backing store answered EMFILE or ENFILE (the daemon ran out of file
    /// descriptors); injected ones are not counted.
    pub fd_exhausted: std::sync::atomic::AtomicU64,
}

impl Instruments {
    /// Starts the timer thread if anything can delay a reply.
    pub fn new(faults: Option<Faults>, model: Option<Model>, time_scale: f64) -> Result<Self> {
        let faults = faults.filter(|f| !f.is_empty());
        let delays = faults.is_some() || (model.is_some() && time_scale > 0.0);
        Ok(Instruments {
            faults,
            model: model.map(std::sync::Mutex::new),
            time_scale,
            fd_exhausted: std::sync::atomic::AtomicU64::new(0),
            timer: if delays {
                Some(timer::Timer::start().context("starting the timer thread")?)
            } else {
                None
            },
        })
    }

    /// The model, locked.
    pub fn model(&self) -> Option<std::sync::MutexGuard<'_, Model>> {
        self.model
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The entries of the listing a worker is answering (thread local, reused).
#[derive(Default)]
struct Listing {
    inos: Vec<u64>,
    names: Vec<u8>,
    ends: Vec<u32>,
}

impl Listing {
    fn clear(&mut self) {
        self.inos.clear();
        self.names.clear();
        self.ends.clear();
    }

    fn push(&mut self, ino: u64, name: &[u8]) {
        if name == b"." || name == b".." {
            return;
        }
        self.inos.push(ino);
        self.names.extend_from_slice(name);
        self.ends.push(self.names.len() as u32);
    }
}

/// The FUSE filesystem.
pub struct Overlay {
    root: OwnedFd,
    root_ino: u64,
    dev: u64,
    inodes: std::sync::Arc<InodeTable>,
    sink: Option<TraceSink>,
    shadow: Option<std::sync::Arc<shadow::Shadow>>,
    inst: std::sync::Arc<Instruments>,
    opts: OverlayOptions,
}

thread_local! {
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static LISTING: RefCell<Listing> = RefCell::new(Listing::default());
}

fn to_time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

fn kind(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

fn attr(st: &libc::stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(st.st_ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: to_time(st.st_atime, st.st_atime_nsec),
        mtime: to_time(st.st_mtime, st.st_mtime_nsec),
        ctime: to_time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: kind(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
            libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            }
        }
    }
}

fn err(e: i32) -> Errno {
    Errno::from_i32(e)
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

/// What a request did, for its trace record.
#[derive(Default)]
struct Done<'a> {
    errno: i32,
    ino: u64,
    parent: u64,
    arg: u64,
    flags: u8,
    name: &'a [u8],
    /// rename: the new name (in directory `arg`), recorded as a `newname` record with the
    /// request's number, before the request's own.
    new_name: &'a [u8],
    /// link: the inode, and a name it had (that name's directory and the name), recorded as
    /// an `oldname` record with the request's number, before the request's own.
    old_name: Option<(u64, u64, &'a [u8])>,
    /// A listing: its entries are in [`LISTING`].
    listing: bool,
}

impl Overlay {
    /// Opens the store; refuses anything that is not a directory.
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
        let h = handle_at(root.as_raw_fd(), c"").with_context(|| {
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
            inodes: std::sync::Arc::new(InodeTable::default()),
            sink,
            shadow,
            inst,
            opts,
        })
    }

    /// What the control channel shows of this overlay.
    pub fn shared(&self) -> control::Shared {
        control::Shared {
            inodes: self.inodes.clone(),
            shadow: self.shadow.clone(),
            sink: std::sync::Mutex::new(self.sink.clone()),
            inst: self.inst.clone(),
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
        self.sink.as_ref().map_or(0, TraceSink::now_ns)
    }

    /// Whether listings must collect their entries (for Dirent records or the model).
    #[inline]
    fn tracks_listings(&self) -> bool {
        self.sink.is_some() || self.inst.model.is_some()
    }

    /// Asks the fault rules about a request before it is performed. `node` is the inode the
    /// request is about, or the parent directory for a request with a name.
    #[inline]
    fn admit(&self, op: Op, node: INodeNo, name: &[u8], atime: bool, mtime: bool) -> Decision {
        let Some(f) = &self.inst.faults else {
            return Decision::default();
        };
        if !f.selects(op) {
            return Decision::default();
        }
        let (ino, parent) = if name.is_empty() {
            (self.backing(node), 0)
        } else {
            (0, self.backing(node))
        };
        let r = FaultRequest {
            op,
            ino,
            parent,
            name,
            set_atime: atime,
            set_mtime: mtime,
        };
        f.decide(&r, &mut || self.path_of(node, name))
    }

    /// A name of the node open as `fd` (an `O_PATH` descriptor) in the store, as the kernel's
    /// dentry cache has it: its directory's backing inode and the name. For a link's trace
    /// record, whose request names only the inode; off the hot path (a link is rare, and this
    /// runs only when tracing). `None` when the node has no name inside the store.
    fn name_of(&self, fd: RawFd) -> Option<(u64, Vec<u8>)> {
        let proc_link = |fd: RawFd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok();
        let root = proc_link(self.root.as_raw_fd())?;
        let path = proc_link(fd)?;
        let rel = path.strip_prefix(&root).ok()?;
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
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        let mut p = link
            .strip_prefix(&self.opts.store)
            .ok()?
            .to_str()?
            .to_string();
        if !name.is_empty() {
            if !p.is_empty() {
                p.push('/');
            }
            p.push_str(std::str::from_utf8(name).ok()?);
        }
        Some(p)
    }

    /// Records a request (charging the model first) and returns how long its reply must be
    /// held: the injected delay plus `time_scale` times the modelled cost.
    #[inline]
    fn emit(&self, req: &Request, op: Op, t0: u64, d: Done<'_>, dec: Decision) -> u64 {
        if (d.errno == libc::EMFILE || d.errno == libc::ENFILE) && dec.errno == 0 {
            self.inst
                .fd_exhausted
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let sink = self.sink.as_ref();
        let seq;
        let mut modeled = 0;
        match &self.inst.model {
            Some(_) if charges(op) => {
                let mut m = self.inst.model().expect("checked");
                // The request number is taken under the model's lock: the trace's order is
                // the order the model saw.
                seq = sink.map_or(0, TraceSink::next_seq);
                let mop = ModelOp {
                    op,
                    ino: d.ino,
                    parent: d.parent,
                    errno: d.errno,
                };
                modeled = if d.listing {
                    LISTING.with(|l| m.charge_request(&mop, Some(&l.borrow().inos)))
                } else {
                    m.charge_request(&mop, None)
                };
            }
            _ => seq = sink.map_or(0, TraceSink::next_seq),
        }
        if let Some(sink) = sink {
            if d.listing {
                LISTING.with(|l| {
                    let l = l.borrow();
                    let mut start = 0;
                    for (i, (&ino, &end)) in l.inos.iter().zip(&l.ends).enumerate() {
                        let mut r = RawRecord::new(Op::Dirent);
                        r.seq = seq;
                        r.start_ns = t0;
                        r.ino = ino;
                        r.parent = d.ino;
                        r.arg = i as u64;
                        r.pid = req.pid();
                        r.set_name(&l.names[start..end as usize]);
                        start = end as usize;
                        sink.record(r);
                    }
                });
            }
            if !d.new_name.is_empty() {
                let mut r = RawRecord::new(Op::NewName);
                r.seq = seq;
                r.start_ns = t0;
                r.ino = d.ino;
                r.parent = d.arg;
                r.pid = req.pid();
                r.set_name(d.new_name);
                sink.record(r);
            }
            if let Some((ino, parent, name)) = d.old_name {
                let mut r = RawRecord::new(Op::OldName);
                r.seq = seq;
                r.start_ns = t0;
                r.ino = ino;
                r.parent = parent;
                r.pid = req.pid();
                r.set_name(name);
                sink.record(r);
            }
            let mut r = RawRecord::new(op);
            r.seq = seq;
            r.start_ns = t0;
            r.duration_ns = sink.now_ns().saturating_sub(t0);
            r.pid = req.pid();
            r.errno = d.errno;
            r.ino = d.ino;
            r.parent = d.parent;
            r.arg = d.arg;
            r.flags = d.flags;
            if dec.errno != 0 {
                r.flags |= flags::INJECTED_ERROR;
            }
            r.injected_ns = dec.delay_ns;
            r.modeled_ns = modeled;
            r.set_name(d.name);
            sink.record(r);
        }
        dec.delay_ns + (modeled as f64 * self.inst.time_scale) as u64
    }

    /// Sends a reply now, or after `hold_ns` from the timer thread.
    #[inline]
    fn answer(&self, hold_ns: u64, send: impl FnOnce() + Send + 'static) {
        match &self.inst.timer {
            Some(t) if hold_ns > 0 => t.after(Duration::from_nanos(hold_ns), send),
            _ => send(),
        }
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
        let h = handle_at(dir, name.as_cstr()).map_err(|e| errno_of(&e))?;
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

    fn reply_entry(&self, hold: u64, reply: ReplyEntry, r: Result<(FileAttr, Generation), i32>) {
        let (attr_ttl, entry_ttl) = (self.opts.attr_ttl, self.opts.entry_ttl);
        self.answer(hold, move || match r {
            Ok((a, g)) => reply.entry_with_ttls(&attr_ttl, &entry_ttl, &a, g),
            Err(e) => reply.error(err(e)),
        })
    }

    /// Sends an attribute reply (after `hold`).
    fn reply_attr(&self, hold: u64, reply: ReplyAttr, r: Result<libc::stat, i32>) {
        let ttl = self.opts.attr_ttl;
        self.answer(hold, move || match r {
            Ok(st) => reply.attr(&ttl, &attr(&st)),
            Err(e) => reply.error(err(e)),
        })
    }

    /// Sends an empty reply (after `hold`).
    fn reply_empty(&self, hold: u64, reply: ReplyEmpty, r: Result<(), i32>) {
        self.answer(hold, move || match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        })
    }

    fn done_entry<'a>(
        &self,
        parent: INodeNo,
        name: &'a [u8],
        r: &Result<(FileAttr, Generation), i32>,
    ) -> Done<'a> {
        Done {
            errno: r.as_ref().err().copied().unwrap_or(0),
            ino: r.as_ref().map_or(0, |(a, _)| a.ino.0),
            parent: self.backing(parent),
            name,
            ..Default::default()
        }
    }

    fn getattr_of(&self, ino: INodeNo, fh: Option<FileHandle>) -> Result<libc::stat, i32> {
        let mut st = match fh {
            Some(fh) => fstat(fh.0 as RawFd),
            None => fstat(self.fd(ino, libc::O_PATH)?.as_raw_fd()),
        }?;
        if let Some(sh) = &self.shadow {
            sh.apply(&mut st);
        }
        Ok(st)
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
            sys::rc(unsafe { libc::chmod(proc.as_cstr().as_ptr(), mode) })?;
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
                    Some(fh) => libc::ftruncate(fh.0 as RawFd, size as libc::off_t),
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

fn dtype_kind(t: u8) -> FileType {
    match t {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_BLK => FileType::BlockDevice,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

macro_rules! name_or_reply {
    ($self:ident, $req:ident, $op:expr, $t0:ident, $parent:expr, $name:expr, $reply:ident) => {
        match CName::new($name) {
            Ok(n) => n,
            Err(e) => {
                $self.emit(
                    $req,
                    $op,
                    $t0,
                    Done {
                        errno: e,
                        parent: $self.backing($parent),
                        ..Default::default()
                    },
                    Decision::default(),
                );
                $reply.error(err(e));
                return;
            }
        }
    };
}

impl Filesystem for Overlay {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Without this the kernel keeps record locks to itself, and a lock taken through the
        // mount would not conflict with one taken on the backing store.
        if config
            .add_capabilities(fuser::InitFlags::FUSE_POSIX_LOCKS)
            .is_err()
        {
            return Err(std::io::Error::other(
                "the kernel does not offer FUSE_POSIX_LOCKS",
            ));
        }
        if self.opts.readdirplus {
            let _ = config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS);
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let t0 = self.t0();
        self.caller(req);
        let n = name_or_reply!(self, req, Op::Lookup, t0, parent, name, reply);
        let dec = self.admit(Op::Lookup, parent, n.bytes(), false, false);
        let r = unless(dec, || self.lookup_in(parent, &n));
        let d = self.done_entry(parent, n.bytes(), &r);
        let hold = self.emit(req, Op::Lookup, t0, d, dec);
        self.reply_entry(hold, reply, r);
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        let t0 = self.t0();
        self.inodes.forget(ino.0, nlookup);
        self.emit(
            req,
            Op::Forget,
            t0,
            Done {
                ino: self.backing(ino),
                arg: nlookup,
                ..Default::default()
            },
            Decision::default(),
        );
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let t0 = self.t0();
        self.caller(req);
        let dec = self.admit(Op::Getattr, ino, b"", false, false);
        let r = unless(dec, || self.getattr_of(ino, fh));
        let errno = r.as_ref().err().copied().unwrap_or(0);
        let hold = self.emit(
            req,
            Op::Getattr,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                ..Default::default()
            },
            dec,
        );
        self.reply_attr(hold, reply, r);
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let dec = self.admit(Op::Setattr, ino, b"", atime.is_some(), mtime.is_some());
        let r = unless(dec, || {
            self.setattr_of(ino, mode, uid, gid, size, atime, mtime, fh)
        });
        let mut f = self.shadow_flag();
        if atime.is_some() {
            f |= flags::SET_ATIME;
        }
        if mtime.is_some() {
            f |= flags::SET_MTIME;
        }
        if mode.is_some() || uid.is_some() || gid.is_some() || size.is_some() {
            f |= flags::SET_OTHER;
        }
        let arg = match (&r, atime) {
            (Ok(st), Some(_)) => st.st_atime as u64 * 1_000_000_000 + st.st_atime_nsec as u64,
            _ => 0,
        };
        let errno = r.as_ref().err().copied().unwrap_or(0);
        let hold = self.emit(
            req,
            Op::Setattr,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                arg,
                flags: f,
                ..Default::default()
            },
            dec,
        );
        self.reply_attr(hold, reply, r);
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let t0 = self.t0();
        self.caller(req);
        let mut target = [0u8; 4096];
        let dec = self.admit(Op::Readlink, ino, b"", false, false);
        let r = unless(dec, || self.fd(ino, libc::O_PATH)).and_then(|fd| {
            // SAFETY: valid fd and buffer.
            sys::rc_size(unsafe {
                libc::readlinkat(
                    fd.as_raw_fd(),
                    c"".as_ptr(),
                    target.as_mut_ptr() as *mut libc::c_char,
                    target.len(),
                )
            })
        });
        let errno = r.as_ref().err().copied().unwrap_or(0);
        let hold = self.emit(
            req,
            Op::Readlink,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                ..Default::default()
            },
            dec,
        );
        self.answer(hold, move || match r {
            Ok(n) => reply.data(&target[..n]),
            Err(e) => reply.error(err(e)),
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let n = name_or_reply!(self, req, Op::Mknod, t0, parent, name, reply);
        let dec = self.admit(Op::Mknod, parent, n.bytes(), false, false);
        let r = unless(dec, || self.writable())
            .and_then(|()| self.fd(parent, libc::O_PATH))
            .and_then(|dir| {
                // SAFETY: valid fd and name. FIFOs, sockets (a bind() on the mount), devices.
                sys::rc(unsafe {
                    libc::mknodat(
                        dir.as_raw_fd(),
                        n.as_cstr().as_ptr(),
                        mode & !umask,
                        rdev as libc::dev_t,
                    )
                })?;
                let st = fstatat(dir.as_raw_fd(), n.as_cstr(), libc::AT_SYMLINK_NOFOLLOW)?;
                self.enter(dir.as_raw_fd(), &n, &st)
            });
        let d = self.done_entry(parent, n.bytes(), &r);
        let hold = self.emit(req, Op::Mknod, t0, d, dec);
        self.reply_entry(hold, reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let n = name_or_reply!(self, req, Op::Mkdir, t0, parent, name, reply);
        let dec = self.admit(Op::Mkdir, parent, n.bytes(), false, false);
        let r = unless(dec, || self.writable())
            .and_then(|()| self.fd(parent, libc::O_PATH))
            .and_then(|dir| {
                // SAFETY: valid fd and name.
                sys::rc(unsafe {
                    libc::mkdirat(dir.as_raw_fd(), n.as_cstr().as_ptr(), mode & !umask)
                })?;
                let st = fstatat(dir.as_raw_fd(), n.as_cstr(), libc::AT_SYMLINK_NOFOLLOW)?;
                self.enter(dir.as_raw_fd(), &n, &st)
            });
        let d = self.done_entry(parent, n.bytes(), &r);
        let hold = self.emit(req, Op::Mkdir, t0, d, dec);
        self.reply_entry(hold, reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(req, Op::Unlink, parent, name, 0, reply)
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(req, Op::Rmdir, parent, name, libc::AT_REMOVEDIR, reply)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let n = name_or_reply!(self, req, Op::Symlink, t0, parent, link_name, reply);
        let dec = self.admit(Op::Symlink, parent, n.bytes(), false, false);
        let r = unless(dec, || Ok(()))
            .and_then(|()| {
                std::ffi::CString::new(target.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)
            })
            .and_then(|t| {
                self.writable()?;
                let dir = self.fd(parent, libc::O_PATH)?;
                // SAFETY: valid strings and fd.
                sys::rc(unsafe {
                    libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), n.as_cstr().as_ptr())
                })?;
                let st = fstatat(dir.as_raw_fd(), n.as_cstr(), libc::AT_SYMLINK_NOFOLLOW)?;
                self.enter(dir.as_raw_fd(), &n, &st)
            });
        let d = self.done_entry(parent, n.bytes(), &r);
        let hold = self.emit(req, Op::Symlink, t0, d, dec);
        self.reply_entry(hold, reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        rflags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let n = name_or_reply!(self, req, Op::Rename, t0, parent, name, reply);
        let nn = name_or_reply!(self, req, Op::Rename, t0, newparent, newname, reply);
        let mut ino = 0;
        let dec = self.admit(Op::Rename, parent, n.bytes(), false, false);
        let r = (|| {
            unless(dec, || Ok(()))?;
            self.writable()?;
            let from = self.fd(parent, libc::O_PATH)?;
            let to = self.fd(newparent, libc::O_PATH)?;
            ino = fstatat(from.as_raw_fd(), n.as_cstr(), libc::AT_SYMLINK_NOFOLLOW)?.st_ino;
            // SAFETY: valid fds and names.
            sys::rc(unsafe {
                libc::renameat2(
                    from.as_raw_fd(),
                    n.as_cstr().as_ptr(),
                    to.as_raw_fd(),
                    nn.as_cstr().as_ptr(),
                    rflags.bits(),
                )
            })
        })();
        let errno = r.err().unwrap_or(0);
        let d = Done {
            errno,
            ino,
            parent: self.backing(parent),
            arg: self.backing(newparent),
            name: n.bytes(),
            new_name: nn.bytes(),
            ..Default::default()
        };
        let hold = self.emit(req, Op::Rename, t0, d, dec);
        self.reply_empty(hold, reply, r);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let n = name_or_reply!(self, req, Op::Link, t0, newparent, newname, reply);
        let dec = self.admit(Op::Link, newparent, n.bytes(), false, false);
        let mut source = None;
        let r = (|| {
            unless(dec, || Ok(()))?;
            self.writable()?;
            let src = self.fd(ino, libc::O_PATH)?;
            if self.sink.is_some() {
                source = self.name_of(src.as_raw_fd());
            }
            let dir = self.fd(newparent, libc::O_PATH)?;
            // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH, which a caller does not have: it links
            // through /proc/self/fd, where the kernel's hard-link rules apply to it.
            let proc = ProcPath::new(src.as_raw_fd());
            let (from_dir, from, flags) = if creds::acting_as_caller() {
                (libc::AT_FDCWD, proc.as_cstr(), libc::AT_SYMLINK_FOLLOW)
            } else {
                (src.as_raw_fd(), c"", libc::AT_EMPTY_PATH)
            };
            // SAFETY: valid fds and names.
            sys::rc(unsafe {
                libc::linkat(
                    from_dir,
                    from.as_ptr(),
                    dir.as_raw_fd(),
                    n.as_cstr().as_ptr(),
                    flags,
                )
            })?;
            let st = fstatat(dir.as_raw_fd(), n.as_cstr(), libc::AT_SYMLINK_NOFOLLOW)?;
            self.enter(dir.as_raw_fd(), &n, &st)
        })();
        let mut d = self.done_entry(newparent, n.bytes(), &r);
        d.old_name = source
            .as_ref()
            .map(|(p, name)| (self.backing(ino), *p, name.as_slice()));
        let hold = self.emit(req, Op::Link, t0, d, dec);
        self.reply_entry(hold, reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, oflags: OpenFlags, reply: ReplyOpen) {
        let t0 = self.t0();
        self.caller(req);
        let fl = oflags.0 & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY);
        let writes = fl & libc::O_ACCMODE != libc::O_RDONLY || fl & libc::O_TRUNC != 0;
        let dec = self.admit(Op::Open, ino, b"", false, false);
        let r = unless(dec, || if writes { self.writable() } else { Ok(()) });
        let r = r
            .and_then(|()| self.fd(ino, self.read_flags(fl)))
            .map(|fd| match fd {
                Fd::Owned(o) => o.into_raw_fd_keep(),
                Fd::Root(_) => unreachable!("root is opened with openat"),
            });
        let errno = r.as_ref().err().copied().unwrap_or(0);
        let hold = self.emit(
            req,
            Op::Open,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                arg: oflags.0 as u64,
                ..Default::default()
            },
            dec,
        );
        self.answer(hold, move || match r {
            Ok(fd) => reply.opened(FileHandle(fd as u64), FopenFlags::empty()),
            Err(e) => reply.error(err(e)),
        });
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let dec = self.admit(Op::Read, ino, b"", false, false);
        BUF.with(|b| {
            let mut buf = b.borrow_mut();
            buf.resize(size as usize, 0);
            let r = unless(dec, || {
                // SAFETY: buf is writable for `size` bytes.
                sys::rc_size(unsafe {
                    libc::pread(
                        fh.0 as RawFd,
                        buf.as_mut_ptr() as *mut libc::c_void,
                        size as usize,
                        offset as libc::off_t,
                    )
                })
            });
            let errno = r.as_ref().err().copied().unwrap_or(0);
            let arg = *r.as_ref().unwrap_or(&0) as u64;
            let hold = self.emit(
                req,
                Op::Read,
                t0,
                Done {
                    errno,
                    ino: self.backing(ino),
                    arg,
                    ..Default::default()
                },
                dec,
            );
            match r {
                Ok(n) if hold > 0 => {
                    let data = buf[..n].to_vec(); // held: the reply outlives this buffer
                    self.answer(hold, move || reply.data(&data));
                }
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => self.answer(hold, move || reply.error(err(e))),
            }
        });
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let t0 = self.t0();
        // As the caller: a write clears set-uid bits unless the writer may keep them.
        self.caller(req);
        let dec = self.admit(Op::Write, ino, b"", false, false);
        let r = unless(dec, || {
            // SAFETY: data is readable for its length.
            sys::rc_size(unsafe {
                libc::pwrite(
                    fh.0 as RawFd,
                    data.as_ptr() as *const libc::c_void,
                    data.len(),
                    offset as libc::off_t,
                )
            })
        });
        let errno = r.as_ref().err().copied().unwrap_or(0);
        let arg = *r.as_ref().unwrap_or(&0) as u64;
        let hold = self.emit(
            req,
            Op::Write,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                arg,
                ..Default::default()
            },
            dec,
        );
        self.answer(hold, move || match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(err(e)),
        });
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let t0 = self.t0();
        self.caller(req);
        // As close(2) would on the backing file: write-back errors surface here.
        // SAFETY: fh is an fd we opened; the duplicate is closed at once.
        let r = sys::rc_val(unsafe { libc::dup(fh.0 as RawFd) })
            .and_then(|dup| sys::rc(unsafe { libc::close(dup) }));
        let errno = r.err().unwrap_or(0);
        self.emit(
            req,
            Op::Flush,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                ..Default::default()
            },
            Decision::default(),
        );
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let t0 = self.t0();
        self.caller(req);
        sys::close(fh.0 as RawFd);
        self.emit(
            req,
            Op::Release,
            t0,
            Done {
                ino: self.backing(ino),
                ..Default::default()
            },
            Decision::default(),
        );
        reply.ok();
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let dec = self.admit(Op::Fallocate, ino, b"", false, false);
        let r = unless(dec, || self.writable()).and_then(|()| {
            // SAFETY: fh is an fd we opened.
            sys::rc(unsafe {
                libc::fallocate(
                    fh.0 as RawFd,
                    mode,
                    offset as libc::off_t,
                    length as libc::off_t,
                )
            })
        });
        let errno = r.err().unwrap_or(0);
        let hold = self.emit(
            req,
            Op::Fallocate,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                arg: length,
                ..Default::default()
            },
            dec,
        );
        self.reply_empty(hold, reply, r);
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let dec = self.admit(Op::Fsync, ino, b"", false, false);
        let r = unless(dec, || {
            // SAFETY: fh is an fd we opened.
            sys::rc(unsafe {
                if datasync {
                    libc::fdatasync(fh.0 as RawFd)
                } else {
                    libc::fsync(fh.0 as RawFd)
                }
            })
        });
        let errno = r.err().unwrap_or(0);
        let hold = self.emit(
            req,
            Op::Fsync,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                ..Default::default()
            },
            dec,
        );
        self.reply_empty(hold, reply, r);
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let t0 = self.t0();
        self.caller(req);
        let dec = self.admit(Op::Opendir, ino, b"", false, false);
        let r = unless(dec, || {
            self.fd(ino, self.read_flags(libc::O_RDONLY | libc::O_DIRECTORY))
        })
        .map(|fd| match fd {
            Fd::Owned(o) => o.into_raw_fd_keep(),
            Fd::Root(_) => unreachable!("only O_PATH borrows the root"),
        });
        let errno = r.as_ref().err().copied().unwrap_or(0);
        let hold = self.emit(
            req,
            Op::Opendir,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                ..Default::default()
            },
            dec,
        );
        self.answer(hold, move || match r {
            Ok(fd) => reply.opened(FileHandle(fd as u64), FopenFlags::empty()),
            Err(e) => reply.error(err(e)),
        });
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let parent = self.backing(ino);
        let dec = self.admit(Op::Readdir, ino, b"", false, false);
        let track = self.tracks_listings();
        LISTING.with(|l| l.borrow_mut().clear());
        let r = unless(dec, || {
            read_dir(fh.0 as RawFd, offset, |d_ino, next, t, name| {
                if self.hidden(parent, name) {
                    return None;
                }
                let full = reply.add(INodeNo(d_ino), next, dtype_kind(t), OsStr::from_bytes(name));
                if !full && track {
                    LISTING.with(|l| l.borrow_mut().push(d_ino, name));
                }
                Some(full)
            })
        });
        let errno = r.as_ref().err().copied().unwrap_or(0);
        let arg = *r.as_ref().unwrap_or(&0);
        let hold = self.emit(
            req,
            Op::Readdir,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                arg,
                listing: track,
                ..Default::default()
            },
            dec,
        );
        self.answer(hold, move || match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(err(e)),
        });
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let dir = fh.0 as RawFd;
        let zero = attr(&unsafe { std::mem::zeroed() });
        let parent = self.backing(ino);
        let dec = self.admit(Op::Readdirplus, ino, b"", false, false);
        let track = self.tracks_listings();
        LISTING.with(|l| l.borrow_mut().clear());
        let r = unless(dec, || Ok(())).and_then(|()| {
            read_dir(dir, offset, |d_ino, next, _t, name| {
                if self.hidden(parent, name) {
                    return None;
                }
                // The kernel links every entry but "." and "..": those count as lookups.
                let dot = name == b"." || name == b"..";
                let entry = if dot {
                    None
                } else {
                    CName::new(OsStr::from_bytes(name)).ok().and_then(|n| {
                        let st = fstatat(dir, n.as_cstr(), libc::AT_SYMLINK_NOFOLLOW).ok()?;
                        self.enter(dir, &n, &st).ok()
                    })
                };
                match entry {
                    Some((a, g)) => {
                        let full = reply.add(
                            a.ino,
                            next,
                            OsStr::from_bytes(name),
                            &self.opts.entry_ttl,
                            &a,
                            g,
                        );
                        if full {
                            self.inodes.forget(a.ino.0, 1); // not sent: the kernel holds no lookup
                        } else if track {
                            LISTING.with(|l| l.borrow_mut().push(a.ino.0, name));
                        }
                        Some(full)
                    }
                    // Dots, and entries that vanished between listing and stat: no attributes, no
                    // lookup; the kernel learns the inode number only.
                    None => {
                        let full = reply.add(
                            INodeNo(d_ino),
                            next,
                            OsStr::from_bytes(name),
                            &Duration::ZERO,
                            &zero,
                            Generation(0),
                        );
                        if !full && track {
                            LISTING.with(|l| l.borrow_mut().push(d_ino, name));
                        }
                        Some(full)
                    }
                }
            })
        });
        let errno = r.as_ref().err().copied().unwrap_or(0);
        let arg = *r.as_ref().unwrap_or(&0);
        let hold = self.emit(
            req,
            Op::Readdirplus,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                arg,
                listing: track,
                ..Default::default()
            },
            dec,
        );
        self.answer(hold, move || match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(err(e)),
        });
    }

    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let t0 = self.t0();
        self.caller(req);
        sys::close(fh.0 as RawFd);
        self.emit(
            req,
            Op::Releasedir,
            t0,
            Done {
                ino: self.backing(ino),
                ..Default::default()
            },
            Decision::default(),
        );
        reply.ok();
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let t0 = self.t0();
        self.caller(req);
        // SAFETY: fh is a directory fd we opened.
        let r = sys::rc(unsafe {
            if datasync {
                libc::fdatasync(fh.0 as RawFd)
            } else {
                libc::fsync(fh.0 as RawFd)
            }
        });
        let errno = r.err().unwrap_or(0);
        self.emit(
            req,
            Op::Fsyncdir,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                ..Default::default()
            },
            Decision::default(),
        );
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let t0 = self.t0();
        self.caller(req);
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let dec = self.admit(Op::Statfs, ino, b"", false, false);
        // SAFETY: valid fd and out pointer.
        let r = unless(dec, || {
            sys::rc(unsafe { libc::fstatvfs(self.root.as_raw_fd(), &mut s) })
        });
        let errno = r.err().unwrap_or(0);
        let hold = self.emit(
            req,
            Op::Statfs,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                ..Default::default()
            },
            dec,
        );
        self.answer(hold, move || match r {
            Ok(()) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(err(e)),
        });
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let t0 = self.t0();
        self.caller(req);
        let dec = self.admit(Op::Access, ino, b"", false, false);
        let r = unless(dec, || self.fd(ino, libc::O_PATH)).and_then(|fd| {
            let p = ProcPath::new(fd.as_raw_fd());
            // SAFETY: valid path.
            sys::rc(unsafe {
                libc::faccessat(libc::AT_FDCWD, p.as_cstr().as_ptr(), mask.bits(), 0)
            })
        });
        let errno = r.err().unwrap_or(0);
        let hold = self.emit(
            req,
            Op::Access,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                arg: mask.bits() as u64,
                ..Default::default()
            },
            dec,
        );
        self.reply_empty(hold, reply, r);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        oflags: i32,
        reply: ReplyCreate,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let n = name_or_reply!(self, req, Op::Create, t0, parent, name, reply);
        let mut fd_out = -1;
        let dec = self.admit(Op::Create, parent, n.bytes(), false, false);
        let r = unless(dec, || self.writable())
            .and_then(|()| self.fd(parent, libc::O_PATH))
            .and_then(|dir| {
                let fd = sys::openat(
                    dir.as_raw_fd(),
                    n.as_cstr(),
                    oflags | libc::O_CREAT | libc::O_NOFOLLOW,
                    mode & !umask,
                )?;
                fd_out = fd;
                let st = fstat(fd)?;
                self.enter(dir.as_raw_fd(), &n, &st)
            });
        if r.is_err() && fd_out >= 0 {
            sys::close(fd_out);
        }
        let d = self.done_entry(parent, n.bytes(), &r);
        let hold = self.emit(req, Op::Create, t0, d, dec);
        let ttl = self.opts.entry_ttl;
        self.answer(hold, move || match r {
            Ok((a, g)) => {
                reply.created(&ttl, &a, g, FileHandle(fd_out as u64), FopenFlags::empty())
            }
            Err(e) => reply.error(err(e)),
        });
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let mut fl = flock(start, end, typ);
        // SAFETY: valid fd and flock.
        let r = sys::rc(unsafe { libc::fcntl(fh.0 as RawFd, libc::F_OFD_GETLK, &mut fl) });
        let errno = r.err().unwrap_or(0);
        self.emit(
            req,
            Op::Getlk,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                arg: typ as u64,
                ..Default::default()
            },
            Decision::default(),
        );
        match r {
            Ok(()) => {
                let s = fl.l_start as u64;
                let e = if fl.l_len == 0 {
                    i64::MAX as u64
                } else {
                    (fl.l_start + fl.l_len - 1) as u64
                };
                reply.locked(
                    s,
                    e,
                    fl.l_type as i32,
                    if fl.l_type as i32 == libc::F_UNLCK {
                        0
                    } else {
                        pid
                    },
                );
            }
            Err(e) => reply.error(err(e)),
        }
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let fl = flock(start, end, typ);
        let cmd = if sleep {
            libc::F_OFD_SETLKW
        } else {
            libc::F_OFD_SETLK
        };
        // SAFETY: valid fd and flock.
        let r = sys::rc(unsafe { libc::fcntl(fh.0 as RawFd, cmd, &fl) });
        let errno = r.err().unwrap_or(0);
        self.emit(
            req,
            Op::Setlk,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                arg: typ as u64,
                ..Default::default()
            },
            Decision::default(),
        );
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let t0 = self.t0();
        self.caller(req);
        if !self.opts.xattr {
            self.emit(
                req,
                Op::Getxattr,
                t0,
                Done {
                    errno: libc::ENOSYS,
                    ino: self.backing(ino),
                    ..Default::default()
                },
                Decision::default(),
            );
            return reply.error(Errno::ENOSYS);
        }
        let r = CName::new(name).and_then(|n| {
            let fd = self.fd(ino, libc::O_PATH)?;
            let p = ProcPath::new(fd.as_raw_fd());
            let mut buf = vec![0u8; size as usize];
            // SAFETY: valid path, name and buffer.
            let got = sys::rc_size(unsafe {
                libc::getxattr(
                    p.as_cstr().as_ptr(),
                    n.as_cstr().as_ptr(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                )
            })?;
            buf.truncate(got);
            Ok(buf)
        });
        let errno = r.as_ref().err().copied().unwrap_or(0);
        self.emit(
            req,
            Op::Getxattr,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                ..Default::default()
            },
            Decision::default(),
        );
        match r {
            Ok(buf) if size == 0 => reply.size(buf.len() as u32),
            Ok(buf) => reply.data(&buf),
            Err(e) => reply.error(err(e)),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let t0 = self.t0();
        self.caller(req);
        if !self.opts.xattr {
            self.emit(
                req,
                Op::Listxattr,
                t0,
                Done {
                    errno: libc::ENOSYS,
                    ino: self.backing(ino),
                    ..Default::default()
                },
                Decision::default(),
            );
            return reply.error(Errno::ENOSYS);
        }
        let r = self.fd(ino, libc::O_PATH).and_then(|fd| {
            let p = ProcPath::new(fd.as_raw_fd());
            let mut buf = vec![0u8; size as usize];
            // SAFETY: valid path and buffer.
            let got = sys::rc_size(unsafe {
                libc::listxattr(
                    p.as_cstr().as_ptr(),
                    buf.as_mut_ptr() as *mut libc::c_char,
                    buf.len(),
                )
            })?;
            buf.truncate(got);
            Ok(buf)
        });
        let errno = r.as_ref().err().copied().unwrap_or(0);
        self.emit(
            req,
            Op::Listxattr,
            t0,
            Done {
                errno,
                ino: self.backing(ino),
                ..Default::default()
            },
            Decision::default(),
        );
        match r {
            Ok(buf) if size == 0 => reply.size(buf.len() as u32),
            Ok(buf) => reply.data(&buf),
            Err(e) => reply.error(err(e)),
        }
    }
}

fn flock(start: u64, end: u64, typ: i32) -> libc::flock {
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = typ as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start as libc::off_t;
    // The kernel says "to the end of the file" with OFFSET_MAX (i64::MAX).
    fl.l_len = if end >= i64::MAX as u64 {
        0
    } else {
        (end - start + 1) as libc::off_t
    };
    fl.l_pid = 0; // required for OFD locks
    fl
}

impl Overlay {
    fn remove(
        &self,
        req: &Request,
        op: Op,
        parent: INodeNo,
        name: &OsStr,
        at_flags: libc::c_int,
        reply: ReplyEmpty,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let n = name_or_reply!(self, req, op, t0, parent, name, reply);
        let mut ino = 0;
        let dec = self.admit(op, parent, n.bytes(), false, false);
        let r = unless(dec, || self.fd(parent, libc::O_PATH)).and_then(|dir| {
            if let Some(sh) = &self.shadow {
                // Kept in memory: the name disappears from the mount, not from the store.
                if at_flags != 0 {
                    return Err(libc::EROFS);
                }
                if sh.is_removed(self.backing(parent), n.bytes()) {
                    return Err(libc::ENOENT);
                }
                let st = fstatat(dir.as_raw_fd(), n.as_cstr(), libc::AT_SYMLINK_NOFOLLOW)?;
                if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                    return Err(libc::EISDIR);
                }
                ino = st.st_ino;
                sh.remove(self.backing(parent), n.bytes());
                return Ok(());
            }
            // The inode number is what the trace is about; one stat more than the kernel asked.
            if self.sink.is_some() || self.inst.model.is_some() {
                ino = fstatat(dir.as_raw_fd(), n.as_cstr(), libc::AT_SYMLINK_NOFOLLOW)
                    .map_or(0, |s| s.st_ino);
            }
            // SAFETY: valid fd and name.
            sys::rc(unsafe { libc::unlinkat(dir.as_raw_fd(), n.as_cstr().as_ptr(), at_flags) })
        });
        let errno = r.err().unwrap_or(0);
        let hold = self.emit(
            req,
            op,
            t0,
            Done {
                errno,
                ino,
                parent: self.backing(parent),
                name: n.bytes(),
                flags: self.shadow_flag(),
                ..Default::default()
            },
            dec,
        );
        self.reply_empty(hold, reply, r);
    }
}

/// Leaks an `OwnedFd` into a raw fd that a FUSE file handle now owns (closed on release).
trait IntoRawKeep {
    fn into_raw_fd_keep(self) -> RawFd;
}

impl IntoRawKeep for OwnedFd {
    fn into_raw_fd_keep(self) -> RawFd {
        std::os::fd::IntoRawFd::into_raw_fd(self)
    }
}
