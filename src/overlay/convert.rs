//! Conversions between the backing store's `libc` types and fuser's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo, TimeOrNow};

pub(super) fn to_time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
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
            let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
            libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
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
