//! Requests on open files: open, read, write, flush, release, fallocate, fsync, record locks
//! and extended attributes. The [`super::fs`] `Filesystem` hands them here.

use std::ffi::{CStr, OsStr};
use std::os::fd::AsRawFd;

use fuser::{
    FileHandle, FopenFlags, INodeNo, OpenFlags, ReplyData, ReplyEmpty, ReplyLock, ReplyOpen,
    ReplyWrite, ReplyXattr, Request,
};

use super::convert::{err, fd_of, flock, handle, is_direct};
use super::fs::IntoRawKeep;
use super::inode::Fd;
use super::record::{Done, Finish};
use super::sys::{self, CName, ProcPath};
use super::{unless, with_aligned, Overlay};
use crate::faults::Decision;
use crate::trace::Op;

impl Overlay {
    pub(super) fn serve_open(
        &self,
        req: &Request,
        ino: INodeNo,
        oflags: OpenFlags,
        reply: ReplyOpen,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let fl = oflags.0 & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY);
        let writes = fl & libc::O_ACCMODE != libc::O_RDONLY || fl & libc::O_TRUNC != 0;
        let dec = self.admit(Op::Open, ino, b"", false, false);
        let r = unless(dec, || if writes { self.writable() } else { Ok(()) });
        // O_DIRECT is passed on; a backing filesystem that refuses it (EINVAL) gets the
        // open without it, and the kernel is told to keep no pages of this file (the
        // caller still bypasses every cache above the backing store's).
        let direct = fl & libc::O_DIRECT != 0;
        let forced = self.opts.direct_io;
        let mut fallback = false;
        let r = r
            .and_then(|()| match self.fd(ino, self.read_flags(fl)) {
                Err(libc::EINVAL) if direct => {
                    fallback = true;
                    self.fd(ino, self.read_flags(fl & !libc::O_DIRECT))
                }
                r => r,
            })
            .map(|fd| match fd {
                Fd::Owned(o) => o.into_raw_fd_keep(),
                Fd::Root(_) => unreachable!("root is opened with openat"),
            });
        let hold = self.emit(
            req,
            Op::Open,
            t0,
            Done {
                arg: oflags.0 as u64,
                ..self.done(ino, &r)
            },
            dec,
        );
        self.answer(hold, reply, move |reply| match r {
            Ok(fd) if fallback => reply.opened(handle(fd, false), FopenFlags::FOPEN_DIRECT_IO),
            Ok(fd) if forced => reply.opened(handle(fd, direct), FopenFlags::FOPEN_DIRECT_IO),
            Ok(fd) => reply.opened(handle(fd, direct), FopenFlags::empty()),
            Err(e) => reply.error(err(e)),
        });
    }

    pub(super) fn serve_read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        reply: ReplyData,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let dec = self.admit(Op::Read, ino, b"", false, false);
        // Aligned, as a backing file open with O_DIRECT needs (any other takes it as well).
        with_aligned(size as usize, |buf| {
            let r = unless(dec, || {
                // SAFETY: buf is writable for `size` bytes.
                sys::rc_size(unsafe {
                    libc::pread(
                        fd_of(fh),
                        buf.as_mut_ptr() as *mut libc::c_void,
                        size as usize,
                        offset as libc::off_t,
                    )
                })
            });
            let dec = self.on_disk(dec, ino, t0, offset, &r, false);
            let arg = *r.as_ref().unwrap_or(&0) as u64;
            let d = Done {
                arg,
                offset,
                ..self.done(ino, &r)
            };
            let hold = self.emit(req, Op::Read, t0, d, dec);
            match r {
                Ok(n) if hold > 0 => {
                    let data = buf[..n].to_vec(); // held: the reply outlives this buffer
                    self.answer(hold, reply, move |reply| reply.data(&data));
                }
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => self.answer(hold, reply, move |reply| reply.error(err(e))),
            }
        });
    }

    pub(super) fn serve_write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        reply: ReplyWrite,
    ) {
        let t0 = self.t0();
        // As the caller: a write clears set-uid bits unless the writer may keep them.
        self.caller(req);
        let dec = self.admit(Op::Write, ino, b"", false, false);
        let pwrite = |data: &[u8]| {
            // SAFETY: data is readable for its length.
            sys::rc_size(unsafe {
                libc::pwrite(
                    fd_of(fh),
                    data.as_ptr() as *const libc::c_void,
                    data.len(),
                    offset as libc::off_t,
                )
            })
        };
        let r = unless(dec, || {
            if is_direct(fh) {
                // The request's bytes sit after its headers, at no alignment O_DIRECT takes.
                with_aligned(data.len(), |buf| {
                    buf.copy_from_slice(data);
                    pwrite(buf)
                })
            } else {
                pwrite(data)
            }
        });
        let dec = self.on_disk(dec, ino, t0, offset, &r, true);
        let arg = *r.as_ref().unwrap_or(&0) as u64;
        let hold = self.emit(
            req,
            Op::Write,
            t0,
            Done {
                arg,
                offset,
                ..self.done(ino, &r)
            },
            dec,
        );
        self.answer(hold, reply, move |reply| match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(err(e)),
        });
    }

    pub(super) fn serve_flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        reply: ReplyEmpty,
    ) {
        let t0 = self.t0();
        self.caller(req);
        // As close(2) would on the backing file: write-back errors surface here.
        // SAFETY: fh is an fd we opened; the duplicate is closed at once.
        let r = sys::rc_val(unsafe { libc::dup(fd_of(fh)) })
            .and_then(|dup| sys::rc(unsafe { libc::close(dup) }));
        self.emit(req, Op::Flush, t0, self.done(ino, &r), Decision::default());
        reply.done(r);
    }

    pub(super) fn serve_release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        reply: ReplyEmpty,
    ) {
        self.close_handle(req, Op::Release, ino, fh);
        reply.ok();
    }

    /// release and releasedir: closes the descriptor behind `fh` and records it.
    pub(super) fn close_handle(&self, req: &Request, op: Op, ino: INodeNo, fh: FileHandle) {
        let t0 = self.t0();
        self.caller(req);
        sys::close(fd_of(fh));
        let d = Done {
            ino: self.backing(ino),
            ..Default::default()
        };
        self.emit(req, op, t0, d, Decision::default());
    }

    #[allow(clippy::too_many_arguments)] // the request's fields, as fuser hands them over
    pub(super) fn serve_fallocate(
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
                    fd_of(fh),
                    mode,
                    offset as libc::off_t,
                    length as libc::off_t,
                )
            })
        });
        let hold = self.emit(
            req,
            Op::Fallocate,
            t0,
            Done {
                arg: length,
                ..self.done(ino, &r)
            },
            dec,
        );
        self.reply_empty(hold, reply, r);
    }

    pub(super) fn serve_fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync(req, Op::Fsync, ino, fh, datasync, reply)
    }

    /// fsync and fsyncdir: fsync or fdatasync of the descriptor behind `fh`.
    pub(super) fn sync(
        &self,
        req: &Request,
        op: Op,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let dec = self.admit(op, ino, b"", false, false);
        let r = unless(dec, || {
            // SAFETY: fh is an fd we opened.
            sys::rc(unsafe {
                if datasync {
                    libc::fdatasync(fd_of(fh))
                } else {
                    libc::fsync(fd_of(fh))
                }
            })
        });
        let hold = self.emit(req, op, t0, self.done(ino, &r), dec);
        self.reply_empty(hold, reply, r);
    }

    #[allow(clippy::too_many_arguments)] // the request's fields, as fuser hands them over
    pub(super) fn serve_getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
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
        let r = sys::rc(unsafe { libc::fcntl(fd_of(fh), libc::F_OFD_GETLK, &mut fl) });
        self.emit(
            req,
            Op::Getlk,
            t0,
            Done {
                arg: typ as u64,
                ..self.done(ino, &r)
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

    #[allow(clippy::too_many_arguments)] // the request's fields, as fuser hands them over
    pub(super) fn serve_setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        start: u64,
        end: u64,
        typ: i32,
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
        let r = sys::rc(unsafe { libc::fcntl(fd_of(fh), cmd, &fl) });
        self.emit(
            req,
            Op::Setlk,
            t0,
            Done {
                arg: typ as u64,
                ..self.done(ino, &r)
            },
            Decision::default(),
        );
        reply.done(r);
    }

    pub(super) fn serve_getxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        self.serve_xattr(req, Op::Getxattr, ino, size, reply, |path, buf| {
            let n = CName::new(name)?;
            // SAFETY: valid path, name and buffer.
            sys::rc_size(unsafe {
                libc::getxattr(
                    path.as_ptr(),
                    n.as_cstr().as_ptr(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                )
            })
        });
    }

    pub(super) fn serve_listxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        size: u32,
        reply: ReplyXattr,
    ) {
        self.serve_xattr(req, Op::Listxattr, ino, size, reply, |path, buf| {
            // SAFETY: valid path and buffer.
            sys::rc_size(unsafe {
                libc::listxattr(
                    path.as_ptr(),
                    buf.as_mut_ptr() as *mut libc::c_char,
                    buf.len(),
                )
            })
        });
    }

    /// getxattr and listxattr (ENOSYS without `--xattr`): `query(path, buf)` fills `buf`
    /// through the node's `/proc/self/fd` path and returns the bytes it holds (or needs, for
    /// a query of size 0).
    fn serve_xattr(
        &self,
        req: &Request,
        op: Op,
        ino: INodeNo,
        size: u32,
        reply: ReplyXattr,
        query: impl FnOnce(&CStr, &mut [u8]) -> Result<usize, i32>,
    ) {
        let t0 = self.t0();
        self.caller(req);
        let r = if self.opts.xattr {
            self.fd(ino, libc::O_PATH).and_then(|fd| {
                let mut buf = vec![0u8; size as usize];
                let got = query(ProcPath::new(fd.as_raw_fd()).as_cstr(), &mut buf)?;
                buf.truncate(got);
                Ok(buf)
            })
        } else {
            Err(libc::ENOSYS)
        };
        self.emit(req, op, t0, self.done(ino, &r), Decision::default());
        match r {
            Ok(buf) if size == 0 => reply.size(buf.len() as u32),
            Ok(buf) => reply.data(&buf),
            Err(e) => reply.error(err(e)),
        }
    }
}
