//! Small filesystem and process helpers with the project's I/O policy in one place.
//!
//! Atimes are the GC's state: anything that reads a chunk for a check or an analysis goes
//! through [`open_noatime`], so looking at a store never changes what a GC will do to it.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Opens `path` read-only with `O_NOATIME`.
///
/// `O_NOATIME` is allowed only to the file's owner or a process with `CAP_FOWNER`; for anyone
/// else the open is retried without it (the kernel then applies its atime policy, which for a
/// `relatime` mount changes the atime at most once a day). That fallback is reported by the
/// second return value so callers that must not disturb a store can refuse.
pub fn open_noatime(path: &Path) -> io::Result<(File, bool)> {
    let noatime = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOATIME)
        .open(path);
    match noatime {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok((File::open(path)?, false)),
        Err(e) => Err(e),
    }
}

/// Reads a whole file with `O_NOATIME` (see [`open_noatime`]).
pub fn read_noatime(path: &Path) -> io::Result<Vec<u8>> {
    let (mut f, _) = open_noatime(path)?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(buf)
}

/// A timestamp for [`set_file_times`]: seconds and nanoseconds since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

impl Timestamp {
    pub fn new(secs: i64, nanos: u32) -> Timestamp {
        Timestamp { secs, nanos }
    }

    fn timespec(self) -> libc::timespec {
        libc::timespec {
            tv_sec: self.secs as libc::time_t,
            tv_nsec: self.nanos as libc::c_long,
        }
    }
}

/// Sets atime and mtime of an open file (`futimens`).
pub fn set_file_times(file: &File, atime: Timestamp, mtime: Timestamp) -> io::Result<()> {
    let times = [atime.timespec(), mtime.timespec()];
    // SAFETY: the fd is valid for the lifetime of `file`; `times` points at two timespecs.
    let rc = unsafe { libc::futimens(file.as_raw_fd(), times.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Current time as epoch seconds from the coarse clock the kernel stamps files with.
///
/// File timestamps come from the coarse clock, which can lag the precise one by a tick: a
/// chunk touched just after a GC took its start time from the precise clock could get an
/// atime one second *earlier* than that start, and be counted as pending instead of in use.
/// Taking the start from the coarse clock rules that out.
pub fn now_epoch_coarse() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    ts.tv_sec
}

/// Current time as epoch seconds.
pub fn now_epoch() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts from now on
/// (and the processes it spawns), so one thread can wait for them with `sigwait` and clean up
/// (unmount) before the process ends. Returns the blocked set, for `sigwait`.
pub fn block_termination_signals() -> libc::sigset_t {
    // SAFETY: plain signal-mask manipulation.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn reading_with_noatime_keeps_the_atime() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("chunk");
        std::fs::write(&p, b"data").unwrap();
        let f = File::options().write(true).open(&p).unwrap();
        set_file_times(
            &f,
            Timestamp::new(1_000_000, 5),
            Timestamp::new(2_000_000, 7),
        )
        .unwrap();
        drop(f);
        assert_eq!(read_noatime(&p).unwrap(), b"data");
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.atime(), m.atime_nsec()), (1_000_000, 5));
        assert_eq!((m.mtime(), m.mtime_nsec()), (2_000_000, 7));
    }
}
