//! Thin, allocation-free wrappers over the `*at` syscalls the overlay uses.

use std::ffi::{CStr, OsStr};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

/// A name from the kernel as a C string on the stack (names are at most 255 bytes).
pub struct CName {
    buf: [u8; 257],
}

impl CName {
    pub fn new(name: &OsStr) -> Result<CName, i32> {
        let b = name.as_bytes();
        if b.len() > 255 {
            return Err(libc::ENAMETOOLONG);
        }
        if b.contains(&0) || b.contains(&b'/') {
            return Err(libc::EINVAL);
        }
        let mut buf = [0u8; 257];
        buf[..b.len()].copy_from_slice(b);
        Ok(CName { buf })
    }

    pub fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_until_nul(&self.buf).expect("NUL-terminated")
    }

    pub fn bytes(&self) -> &[u8] {
        self.as_cstr().to_bytes()
    }
}

/// `/proc/self/fd/N`, for operations that have no `*at` form for `O_PATH` descriptors.
pub struct ProcPath {
    buf: [u8; 40],
}

impl ProcPath {
    pub fn new(fd: RawFd) -> ProcPath {
        let mut buf = [0u8; 40];
        let prefix = b"/proc/self/fd/";
        buf[..prefix.len()].copy_from_slice(prefix);
        let mut digits = [0u8; 12];
        let mut n = fd as u32;
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let d = &digits[i..];
        buf[prefix.len()..prefix.len() + d.len()].copy_from_slice(d);
        ProcPath { buf }
    }

    pub fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_until_nul(&self.buf).expect("NUL-terminated")
    }

    pub fn as_path(&self) -> &std::path::Path {
        std::path::Path::new(OsStr::from_bytes(self.as_cstr().to_bytes()))
    }
}

pub fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn check(rc: libc::c_int) -> Result<libc::c_int, i32> {
    if rc < 0 {
        Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    } else {
        Ok(rc)
    }
}

pub fn fstatat(dir: RawFd, name: &CStr, flags: libc::c_int) -> Result<libc::stat, i32> {
    // SAFETY: a plain C struct; all zeroes is a valid value of it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers; the kernel fills `st`.
    check(unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, flags) })?;
    Ok(st)
}

/// `fstat` of a descriptor (also `O_PATH` ones).
pub fn fstat(fd: RawFd) -> Result<libc::stat, i32> {
    fstatat(fd, c"", libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW)
}

pub fn openat(dir: RawFd, name: &CStr, flags: libc::c_int, mode: u32) -> Result<RawFd, i32> {
    // SAFETY: valid NUL-terminated name.
    check(unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })
}

pub fn close(fd: RawFd) {
    // SAFETY: the caller owns fd.
    unsafe { libc::close(fd) };
}

pub fn rc(r: libc::c_int) -> Result<(), i32> {
    check(r).map(|_| ())
}

/// The value of a syscall that returns a descriptor or count, or its errno.
pub fn rc_val(r: libc::c_int) -> Result<libc::c_int, i32> {
    check(r)
}

pub fn rc_size(r: isize) -> Result<usize, i32> {
    if r < 0 {
        Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    } else {
        Ok(r as usize)
    }
}
