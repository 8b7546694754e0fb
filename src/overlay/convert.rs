//! Conversions between the backing store's `libc` types and fuser's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo, TimeOrNow};

/// A file time of the backing store (`sec` may be before 1970; `nsec` in 0..1e9) as the time
/// fuser sends the kernel. Saturates where `SystemTime` ends, never panics.
pub(super) fn to_time(sec: i64, nsec: i64) -> SystemTime {
    let nanos = Duration::from_nanos(nsec.clamp(0, 999_999_999) as u64);
    let t = if sec >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(sec as u64))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(sec.unsigned_abs()))
    };
    t.and_then(|t| t.checked_add(nanos)).unwrap_or(if sec >= 0 {
        UNIX_EPOCH + Duration::from_secs(i64::MAX as u64 / 2)
    } else {
        UNIX_EPOCH
    })
}

/// A time the kernel sent (through fuser) back as the kernel's `(sec, nsec)`. For a time
/// before 1970 fuser builds the `SystemTime` as the epoch less `(-sec)` seconds and `nsec`
/// nanoseconds (its `system_time_from_time`), so this undoes exactly that: the backing store
/// gets what the caller asked for (1950 stays 1950; it became 1970 before).
pub(super) fn from_time(t: SystemTime) -> (i64, i64) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos() as i64,
        ),
        Err(before) => {
            let d = before.duration();
            (
                i64::try_from(d.as_secs()).map_or(i64::MIN, |s| -s),
                d.subsec_nanos() as i64,
            )
        }
    }
}

/// Nanoseconds since 1970 of a file time, for a trace field: 0 before 1970, saturating after
/// 2554.
pub(super) fn time_ns(sec: i64, nsec: i64) -> u64 {
    let ns = sec as i128 * 1_000_000_000 + nsec as i128;
    ns.clamp(0, u64::MAX as i128) as u64
}

pub(super) fn kind(mode: u32) -> FileType {
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

pub(super) fn attr(st: &libc::stat) -> FileAttr {
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

pub(super) fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
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
            let (sec, nsec) = from_time(t);
            libc::timespec {
                tv_sec: sec as libc::time_t,
                tv_nsec: nsec as libc::c_long,
            }
        }
    }
}

pub(super) fn err(e: i32) -> Errno {
    Errno::from_i32(e)
}
pub(super) fn dtype_kind(t: u8) -> FileType {
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
pub(super) fn flock(start: u64, end: u64, typ: i32) -> libc::flock {
    // SAFETY: a plain C struct; all zeroes is a valid value of it.
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

/// The file handle the kernel keeps for an open backing file: the descriptor in the low 32
/// bits, and bit 32 set when the backing file is open with `O_DIRECT` (its writes then go
/// through an aligned copy, see [`super::files`]).
pub(super) fn handle(fd: std::os::fd::RawFd, direct: bool) -> fuser::FileHandle {
    fuser::FileHandle(fd as u32 as u64 | (direct as u64) << 32)
}

/// The backing descriptor of a file handle ([`handle`]).
#[inline]
pub(super) fn fd_of(fh: fuser::FileHandle) -> std::os::fd::RawFd {
    fh.0 as u32 as std::os::fd::RawFd
}

/// Whether the handle's backing file is open with `O_DIRECT` ([`handle`]).
#[inline]
pub(super) fn is_direct(fh: fuser::FileHandle) -> bool {
    fh.0 >> 32 & 1 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What fuser makes of the kernel's `(sec, nsec)` (its `system_time_from_time`), kept
    /// here to test the round trip against.
    fn fuser_time(sec: i64, nsec: u32) -> SystemTime {
        if sec >= 0 {
            UNIX_EPOCH + Duration::new(sec as u64, nsec)
        } else {
            UNIX_EPOCH - Duration::new(sec.unsigned_abs(), nsec)
        }
    }

    #[test]
    fn times_before_1970_and_far_ahead_pass_through() {
        for (sec, nsec) in [
            (0, 0),
            (1_700_000_000, 123),
            (-315_619_200, 0), // 1960-01-01
            (-631_152_000, 5), // 1950-01-01, 5 ns
            (-1, 999_999_999),
            (i64::MAX / 4, 7),
        ] {
            assert_eq!(
                from_time(fuser_time(sec, nsec)),
                (sec, nsec as i64),
                "{sec} {nsec}"
            );
            let t = to_time(sec, nsec as i64);
            let back = match t.duration_since(UNIX_EPOCH) {
                Ok(d) => d.as_nanos() as i128,
                Err(e) => -(e.duration().as_nanos() as i128),
            };
            assert_eq!(
                back,
                sec as i128 * 1_000_000_000 + nsec as i128,
                "{sec} {nsec}"
            );
        }
        // Never a panic, whatever a stat says.
        to_time(i64::MIN, 0);
        to_time(i64::MAX, 999_999_999);
        assert_eq!(time_ns(-5, 0), 0);
        assert_eq!(time_ns(i64::MAX, 0), u64::MAX);
    }

    #[test]
    fn a_handle_carries_its_descriptor_and_whether_it_is_direct() {
        for (fd, direct) in [(0, false), (3, true), (i32::MAX, true), (19_999, false)] {
            let fh = handle(fd, direct);
            assert_eq!((fd_of(fh), is_direct(fh)), (fd, direct));
        }
    }
}
