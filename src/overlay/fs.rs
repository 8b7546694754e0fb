//! The fuser `Filesystem`: one function per request. Each passes its request through to the
//! store as its caller, relative to directory descriptors, and records it (see [`super::record`]).

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow, WriteFlags,
};

use super::convert::{attr, dtype_kind, err, fd_of, handle, time_ns};
use super::inode::Fd;
use super::record::Done;
use super::sys::{self, fstat, fstatat, CName, ProcPath};
use super::{creds, unless, Overlay};
use crate::faults::Decision;
use crate::trace::format::flags;
use crate::trace::{Extra, Op};

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
        // open(O_TRUNC) comes as an open with O_TRUNC, which the backing open performs as
        // the disk would. Without it the kernel sends a setattr of size 0 without a time,
        // and a file already empty kept its mtime (the disk's open(O_TRUNC) always sets it).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_ATOMIC_O_TRUNC);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.guarded(Op::Lookup, parent, || {
            let t0 = self.t0();
            self.caller(req);
            let n = name_or_reply!(self, req, Op::Lookup, t0, parent, name, reply);
            let dec = self.admit(Op::Lookup, parent, n.bytes(), false, false);
            let r = unless(dec, || self.lookup_in(parent, &n));
            let d = self.done_entry(parent, n.bytes(), &r);
            let hold = self.emit(req, Op::Lookup, t0, d, dec);
            self.reply_entry(hold, reply, r);
        });
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        self.guarded(Op::Forget, ino, || {
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
        });
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.guarded(Op::Getattr, ino, || {
            let t0 = self.t0();
            self.caller(req);
            let dec = self.admit(Op::Getattr, ino, b"", false, false);
            let r = unless(dec, || self.getattr_of(ino, fh));
            let hold = self.emit(req, Op::Getattr, t0, self.done(ino, &r), dec);
            self.reply_attr(hold, reply, r);
        });
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
        self.guarded(Op::Setattr, ino, || {
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
                (Ok(st), Some(_)) => time_ns(st.st_atime, st.st_atime_nsec),
                _ => 0,
            };
            let hold = self.emit(
                req,
                Op::Setattr,
                t0,
                Done {
                    arg,
                    flags: f,
                    ..self.done(ino, &r)
                },
                dec,
            );
            self.reply_attr(hold, reply, r);
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.guarded(Op::Readlink, ino, || {
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
            let hold = self.emit(req, Op::Readlink, t0, self.done(ino, &r), dec);
            self.answer(hold, reply, move |reply| match r {
                Ok(n) => reply.data(&target[..n]),
                Err(e) => reply.error(err(e)),
            });
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
        self.guarded(Op::Mknod, parent, || {
            self.make(req, Op::Mknod, parent, name, reply, |dir, n| {
                // SAFETY: valid fd and name. FIFOs, sockets (a bind() on the mount), devices.
                sys::rc(unsafe {
                    libc::mknodat(dir, n.as_ptr(), mode & !umask, rdev as libc::dev_t)
                })
            });
        });
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
        self.guarded(Op::Mkdir, parent, || {
            self.make(req, Op::Mkdir, parent, name, reply, |dir, n| {
                // SAFETY: valid fd and name.
                sys::rc(unsafe { libc::mkdirat(dir, n.as_ptr(), mode & !umask) })
            });
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.guarded(Op::Unlink, parent, || {
            self.remove(req, Op::Unlink, parent, name, 0, reply)
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.guarded(Op::Rmdir, parent, || {
            self.remove(req, Op::Rmdir, parent, name, libc::AT_REMOVEDIR, reply)
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.guarded(Op::Symlink, parent, || {
            self.make(req, Op::Symlink, parent, link_name, reply, |dir, n| {
                let t = std::ffi::CString::new(target.as_os_str().as_bytes())
                    .map_err(|_| libc::EINVAL)?;
                // SAFETY: valid strings and fd.
                sys::rc(unsafe { libc::symlinkat(t.as_ptr(), dir, n.as_ptr()) })
            });
        });
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
        self.guarded(Op::Rename, parent, || {
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
                extra: Extra {
                    new_name: Some((self.backing(newparent), nn.bytes())),
                    ..Extra::default()
                },
                ..Default::default()
            };
            let hold = self.emit(req, Op::Rename, t0, d, dec);
            self.reply_empty(hold, reply, r);
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.guarded(Op::Link, ino, || {
            let t0 = self.t0();
            self.caller(req);
            let n = name_or_reply!(self, req, Op::Link, t0, newparent, newname, reply);
            let dec = self.admit(Op::Link, newparent, n.bytes(), false, false);
            let mut source = None;
            let r = (|| {
                unless(dec, || Ok(()))?;
                self.writable()?;
                let src = self.fd(ino, libc::O_PATH)?;
                if self.trace.is_some() {
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
            d.extra.old_name = source
                .as_ref()
                .map(|(p, name)| (self.backing(ino), *p, name.as_slice()));
            let hold = self.emit(req, Op::Link, t0, d, dec);
            self.reply_entry(hold, reply, r);
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, oflags: OpenFlags, reply: ReplyOpen) {
        self.guarded(Op::Open, ino, || self.serve_open(req, ino, oflags, reply));
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
        self.guarded(Op::Read, ino, || {
            self.serve_read(req, ino, fh, offset, size, reply)
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
        self.guarded(Op::Write, ino, || {
            self.serve_write(req, ino, fh, offset, data, reply)
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
        self.guarded(Op::Flush, ino, || self.serve_flush(req, ino, fh, reply));
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
        self.guarded(Op::Release, ino, || self.serve_release(req, ino, fh, reply));
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
        self.guarded(Op::Fallocate, ino, || {
            self.serve_fallocate(req, ino, fh, offset, length, mode, reply)
        });
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.guarded(Op::Fsync, ino, || {
            self.serve_fsync(req, ino, fh, datasync, reply)
        });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.guarded(Op::Opendir, ino, || {
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
            let hold = self.emit(req, Op::Opendir, t0, self.done(ino, &r), dec);
            self.answer(hold, reply, move |reply| match r {
                Ok(fd) => reply.opened(FileHandle(fd as u64), FopenFlags::empty()),
                Err(e) => reply.error(err(e)),
            });
        });
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.guarded(Op::Readdir, ino, || {
            self.list(
                req,
                Op::Readdir,
                ino,
                fh,
                offset,
                reply,
                |reply, d_ino, next, t, name| {
                    let full =
                        reply.add(INodeNo(d_ino), next, dtype_kind(t), OsStr::from_bytes(name));
                    (full, d_ino)
                },
            );
        });
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.guarded(Op::Readdirplus, ino, || {
            let dir = fd_of(fh);
            // SAFETY: a plain C struct; all zeroes is a valid value of it.
            let zero = attr(&unsafe { std::mem::zeroed() });
            self.list(
                req,
                Op::Readdirplus,
                ino,
                fh,
                offset,
                reply,
                |reply, d_ino, next, _t, name| {
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
                    let name = OsStr::from_bytes(name);
                    match entry {
                        Some((a, g)) => {
                            let ttl = self.ttls(a.kind == fuser::FileType::Directory).1;
                            let full = reply.add(a.ino, next, name, &ttl, &a, g);
                            if full {
                                self.inodes.forget(a.ino.0, 1); // not sent: the kernel holds no lookup
                            }
                            (full, a.ino.0)
                        }
                        // Dots, and entries that vanished between listing and stat: no attributes, no
                        // lookup; the kernel learns the inode number only.
                        None => {
                            let full = reply.add(
                                INodeNo(d_ino),
                                next,
                                name,
                                &Duration::ZERO,
                                &zero,
                                Generation(0),
                            );
                            (full, d_ino)
                        }
                    }
                },
            );
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
        self.guarded(Op::Releasedir, ino, || {
            self.close_handle(req, Op::Releasedir, ino, fh);
            reply.ok();
        });
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.guarded(Op::Fsyncdir, ino, || {
            self.sync(req, Op::Fsyncdir, ino, fh, datasync, reply)
        });
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.guarded(Op::Statfs, ino, || {
            let t0 = self.t0();
            self.caller(req);
            // SAFETY: a plain C struct; all zeroes is a valid value of it.
            let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
            let dec = self.admit(Op::Statfs, ino, b"", false, false);
            // SAFETY: valid fd and out pointer.
            let r = unless(dec, || {
                // SAFETY: a valid descriptor and out pointer.
                sys::rc(unsafe { libc::fstatvfs(self.root.as_raw_fd(), &mut s) })
            });
            let hold = self.emit(req, Op::Statfs, t0, self.done(ino, &r), dec);
            self.answer(hold, reply, move |reply| match r {
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
        });
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.guarded(Op::Access, ino, || {
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
            let hold = self.emit(
                req,
                Op::Access,
                t0,
                Done {
                    arg: mask.bits() as u64,
                    ..self.done(ino, &r)
                },
                dec,
            );
            self.reply_empty(hold, reply, r);
        });
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
        self.guarded(Op::Create, parent, || {
            let t0 = self.t0();
            self.caller(req);
            let n = name_or_reply!(self, req, Op::Create, t0, parent, name, reply);
            let mut fd_out = -1;
            // O_DIRECT as in open (see serve_open): passed on, or left to the kernel.
            let direct = oflags & libc::O_DIRECT != 0;
            let forced = self.opts.direct_io;
            let mut fallback = false;
            let dec = self.admit(Op::Create, parent, n.bytes(), false, false);
            let r = unless(dec, || self.writable())
                .and_then(|()| self.fd(parent, libc::O_PATH))
                .and_then(|dir| {
                    let open = |oflags| {
                        sys::openat(
                            dir.as_raw_fd(),
                            n.as_cstr(),
                            oflags | libc::O_CREAT | libc::O_NOFOLLOW,
                            mode & !umask,
                        )
                    };
                    let fd = match open(oflags) {
                        Err(libc::EINVAL) if direct => {
                            // The refused open made the file (O_DIRECT is checked after):
                            // without O_EXCL, the retry opens what it made.
                            fallback = true;
                            open(oflags & !(libc::O_DIRECT | libc::O_EXCL))
                        }
                        r => r,
                    }?;
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
            self.answer(hold, reply, move |reply| match r {
                Ok((a, g)) if fallback || forced => {
                    let fh = handle(fd_out, direct && !fallback);
                    reply.created(&ttl, &a, g, fh, FopenFlags::FOPEN_DIRECT_IO)
                }
                Ok((a, g)) => {
                    reply.created(&ttl, &a, g, handle(fd_out, direct), FopenFlags::empty())
                }
                Err(e) => reply.error(err(e)),
            });
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
        self.guarded(Op::Getlk, ino, || {
            self.serve_getlk(req, ino, fh, start, end, typ, pid, reply)
        });
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
        self.guarded(Op::Setlk, ino, || {
            self.serve_setlk(req, ino, fh, start, end, typ, sleep, reply)
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.guarded(Op::Getxattr, ino, || {
            self.serve_getxattr(req, ino, name, size, reply)
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.guarded(Op::Listxattr, ino, || {
            self.serve_listxattr(req, ino, size, reply)
        });
    }
}

impl Overlay {
    /// mknod, mkdir and symlink: `make(dir, name)` creates `name` in the directory open as
    /// `dir` (as the caller); the new node is then looked up and entered.
    fn make(
        &self,
        req: &Request,
        op: Op,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEntry,
        make: impl FnOnce(RawFd, &std::ffi::CStr) -> Result<(), i32>,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let n = name_or_reply!(self, req, op, t0, parent, name, reply);
        let dec = self.admit(op, parent, n.bytes(), false, false);
        let r = unless(dec, || self.writable())
            .and_then(|()| self.fd(parent, libc::O_PATH))
            .and_then(|dir| {
                make(dir.as_raw_fd(), n.as_cstr())?;
                let st = fstatat(dir.as_raw_fd(), n.as_cstr(), libc::AT_SYMLINK_NOFOLLOW)?;
                self.enter(dir.as_raw_fd(), &n, &st)
            });
        let d = self.done_entry(parent, n.bytes(), &r);
        let hold = self.emit(req, op, t0, d, dec);
        self.reply_entry(hold, reply, r);
    }

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
            if self.tracks_listings() {
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
pub(super) trait IntoRawKeep {
    fn into_raw_fd_keep(self) -> RawFd;
}

impl IntoRawKeep for OwnedFd {
    fn into_raw_fd_keep(self) -> RawFd {
        std::os::fd::IntoRawFd::into_raw_fd(self)
    }
}
