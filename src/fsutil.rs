//! Small filesystem and process helpers with the project's I/O policy in one place.
//!
//! Atimes are the GC's state: anything that reads a chunk for a check or an analysis goes
//! through [`open_noatime`], so looking at a store never changes what a GC will do to it.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

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

/// The entries of `/etc/passwd` or `/etc/group`: name, numeric id, and (for a user) its
/// primary group. An unreadable file has none.
fn id_entries(file: &str) -> Vec<(String, u32, Option<u32>)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            Some((
                f.first()?.to_string(),
                f.get(2)?.parse().ok()?,
                f.get(3).and_then(|g| g.parse().ok()),
            ))
        })
        .collect()
}

/// The name of user `uid` in `/etc/passwd`.
pub fn user_name(uid: u32) -> Option<String> {
    id_entries("/etc/passwd")
        .into_iter()
        .find(|e| e.1 == uid)
        .map(|e| e.0)
}

/// The name of group `gid` in `/etc/group`.
pub fn group_name(gid: u32) -> Option<String> {
    id_entries("/etc/group")
        .into_iter()
        .find(|e| e.1 == gid)
        .map(|e| e.0)
}

/// The uid and primary gid of user `name` in `/etc/passwd`.
pub fn user_ids(name: &str) -> Option<(u32, u32)> {
    id_entries("/etc/passwd")
        .into_iter()
        .find(|e| e.0 == name)
        .and_then(|e| Some((e.1, e.2?)))
}

/// Reads up to `buf.len()` bytes; returns how many (less only at end of file).
pub fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Writes the file at `path` whole or not at all: `write` fills a temporary file beside it
/// (mode 0666 less the umask, as a plain create would give), which is synced and renamed
/// over `path` once complete. On an error (a full disk) `path` is as it was before, and no
/// half-written file that looks whole is left for a reader. A `path` that is not a regular
/// file (`/dev/null`, a FIFO) or is a symbolic link is written in place: a rename would
/// replace the device or the link itself.
pub fn write_whole<E: From<io::Error>>(
    path: &Path,
    write: impl FnOnce(&mut File) -> Result<(), E>,
) -> Result<(), E> {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_file()) {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(path)?;
        return write(&mut f);
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut temp = tempfile::Builder::new()
        .prefix(".chunkscope-")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    write(temp.as_file_mut())?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A path for a message: as it is where it is printable UTF-8; a byte that is not UTF-8 as
/// `\xNN`, a control character escaped (`\n`, `\u{1b}`), so that a hostile name can neither
/// hide in nor rewrite the terminal it is shown on.
pub fn shown(path: &Path) -> String {
    shown_bytes(path.as_os_str().as_encoded_bytes())
}

/// [`shown`] of a name's bytes.
pub fn shown_bytes(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// What kind of file `mode` is, for messages ("a FIFO", "a symbolic link").
pub fn file_type_name(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFSOCK => "a socket",
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFREG => "a regular file",
        _ => "not a regular file",
    }
}

/// Opens a regular file read-only with `O_NOATIME` (see [`open_noatime`]) and returns it with
/// its size. Anything else is refused with `InvalidInput` naming what it is, without blocking:
/// the open does not wait for a FIFO's writer, and a device is never read.
pub fn open_regular_noatime(path: &Path) -> io::Result<(File, u64)> {
    open_regular(path, 0)
}

/// [`open_regular_noatime`] of a file of a store, where a symbolic link (even a dangling one)
/// is refused with `InvalidInput`, never followed: what a store's walk reads is in the store.
pub fn open_regular_noatime_in_store(path: &Path) -> io::Result<(File, u64)> {
    open_regular(path, libc::O_NOFOLLOW).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => io::Error::new(
            io::ErrorKind::InvalidInput,
            "a symbolic link (only regular files of the store are read: links are never followed)",
        ),
        _ => e,
    })
}

fn open_regular(path: &Path, extra: i32) -> io::Result<(File, u64)> {
    let open = |flags: i32| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags | extra | libc::O_NONBLOCK)
            .open(path)
    };
    let f = match open(libc::O_NOATIME) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(0)?,
        r => r?,
    };
    let meta = f.metadata()?;
    let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions());
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} (only regular files are read)", file_type_name(mode)),
        ));
    }
    // A regular file ignores O_NONBLOCK; clear it all the same, so that reads are plain.
    // SAFETY: valid fd.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    Ok((f, meta.len()))
}

/// Reads a whole regular file with `O_NOATIME`, refusing one over `limit` bytes (by its size,
/// before reading, and by what a read returns, if it grew meanwhile) with `FileTooLarge`.
pub fn read_regular_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let (f, len) = open_regular_noatime(path)?;
    let too_large = |found: u64| {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("{found} bytes, more than the {limit} bytes allowed"),
        )
    };
    if len > limit {
        return Err(too_large(len));
    }
    let mut buf = Vec::with_capacity(len as usize);
    f.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(too_large(buf.len() as u64));
    }
    Ok(buf)
}

/// Reads a whole file with `O_NOATIME` (see [`open_noatime`]).
pub fn read_noatime(path: &Path) -> io::Result<Vec<u8>> {
    let (mut f, _) = open_noatime(path)?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(buf)
}

/// This machine's host name (`/proc/sys/kernel/hostname`), `localhost` if it cannot be read.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// A timestamp for [`set_file_times`]: seconds and nanoseconds since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp {
    /// Seconds since the epoch.
    pub secs: i64,
    /// Nanoseconds within the second.
    pub nanos: u32,
}

impl Timestamp {
    /// A timestamp of `secs` and `nanos`.
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

fn nofile() -> libc::rlimit {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out pointer.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    l
}

/// `statvfs(2)` of the filesystem that holds `path`.
pub fn statvfs(path: &Path) -> io::Result<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a plain C struct; zeroes are a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(s)
}

/// The mount flags (`ST_NODEV`, `ST_NOSUID`, `ST_NOEXEC`, `ST_RDONLY`, ...) of the filesystem
/// that holds `path`.
pub fn mount_flags(path: &Path) -> io::Result<libc::c_ulong> {
    Ok(statvfs(path)?.f_flag)
}

/// The size in bytes of the filesystem that holds `path`.
pub fn filesystem_bytes(path: &Path) -> io::Result<u64> {
    let s = statvfs(path)?;
    Ok(s.f_blocks as u64 * s.f_frsize as u64)
}

/// The bytes in use on the filesystem that holds `path` (its size less its free bytes).
pub fn filesystem_used_bytes(path: &Path) -> io::Result<u64> {
    let s = statvfs(path)?;
    Ok((s.f_blocks as u64).saturating_sub(s.f_bfree as u64) * s.f_frsize as u64)
}

/// The process's open-file limit (soft).
pub fn nofile_limit() -> u64 {
    nofile().rlim_cur
}

/// Raises the open-file limit as far as this process may: as root (CAP_SYS_RESOURCE) soft and
/// hard to the kernel's `fs.nr_open`, otherwise the soft limit to the hard one. A daemon that
/// holds a descriptor for every file its clients have open needs it. Returns the soft limit
/// now in force.
pub fn raise_nofile_limit() -> u64 {
    let l = nofile();
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let set = |cur: u64, max: u64| {
        let want = libc::rlimit {
            rlim_cur: cur,
            rlim_max: max,
        };
        // SAFETY: valid pointer.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 }
    };
    if nr_open <= l.rlim_max || !set(nr_open, nr_open) {
        set(l.rlim_max, l.rlim_max);
    }
    nofile_limit()
}

/// Memory this process can still take, bytes: the least of the kernel's `MemAvailable`, the
/// headroom under its cgroup's `memory.max`, and the address space left under `RLIMIT_AS`.
/// `None` when none of them can be read.
pub fn available_memory() -> Option<u64> {
    fn field_kb(text: &str, key: &str) -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
    }
    let mut limits = Vec::new();
    if let Ok(m) = std::fs::read_to_string("/proc/meminfo") {
        limits.extend(field_kb(&m, "MemAvailable:").map(|kb| kb * 1024));
    }
    // cgroup v2: "0::/path" names this process's group.
    let group = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
        });
    if let Some(g) = group {
        let dir = Path::new("/sys/fs/cgroup").join(g.trim_start_matches('/'));
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        if let (Some(max), Some(cur)) = (read("memory.max"), read("memory.current")) {
            if let (Ok(max), Ok(cur)) = (max.trim().parse::<u64>(), cur.trim().parse::<u64>()) {
                limits.push(max.saturating_sub(cur));
            }
        }
    }
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut rl) } == 0
        && rl.rlim_cur != libc::RLIM_INFINITY
    {
        let used = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| field_kb(&s, "VmSize:"))
            .map_or(0, |kb| kb * 1024);
        limits.push(rl.rlim_cur.saturating_sub(used));
    }
    limits.into_iter().min()
}

/// Mounts a tmpfs of its own on `dir` (mode 0755). Its inode numbers start from the same
/// number on every mount and follow creation order, whatever else the machine's other tmpfs
/// mounts hold; on `/dev/shm` they go on from whatever was created there before. Needs root.
pub fn mount_private_tmpfs(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: valid C strings; the data is a NUL-terminated option string.
    let rc = unsafe {
        libc::mount(
            c"chunkscope".as_ptr(),
            c.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=0755".as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The signals that end a process unless it handles them, and that chunkscope's long-running
/// commands take as a request to stop cleanly: ^C (SIGINT), SIGTERM, the terminal going away
/// (SIGHUP) and ^\ (SIGQUIT). Left to their default, each ended the process with its mounts,
/// loop devices and children left behind.
pub const TERMINATION_SIGNALS: [libc::c_int; 4] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The [`TERMINATION_SIGNALS`] as a set.
fn termination_set() -> libc::sigset_t {
    // SAFETY: plain signal-set manipulation on a set of our own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in TERMINATION_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// The [`TERMINATION_SIGNALS`], blocked in the thread that made this, in every thread it
/// starts afterwards and in the processes it spawns (make it before any other thread), to be
/// handled on one thread of their own: the one that cleans up (unmounts) before the process
/// ends.
pub struct TerminationSignals(libc::sigset_t);

impl TerminationSignals {
    /// Blocks the [`TERMINATION_SIGNALS`] in this thread (and the threads it starts from now
    /// on).
    pub fn block() -> TerminationSignals {
        let set = termination_set();
        // SAFETY: plain signal-mask manipulation.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        TerminationSignals(set)
    }

    /// Runs `f` on a thread named `name` each time one of the signals arrives.
    pub fn handle(self, name: &str, mut f: impl FnMut() + Send + 'static) -> std::io::Result<()> {
        let set = self.0;
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || loop {
                let mut sig = 0;
                // SAFETY: `set` holds the blocked signals.
                unsafe { libc::sigwait(&set, &mut sig) };
                f();
            })?;
        Ok(())
    }
}

/// Makes `cmd`'s process start with the [`TERMINATION_SIGNALS`] unblocked: a child inherits
/// the mask of the thread that spawns it, and [`TerminationSignals::block`] blocks them there
/// (a child with them blocked would run on through a Ctrl-C).
pub fn unblock_termination_signals_in(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let set = termination_set();
    // SAFETY: only sigprocmask (async-signal-safe) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A failed write leaves the file as it was and nothing beside it; a whole one replaces
    /// it with a plain create's mode; a link and a device are written through, not replaced.
    #[test]
    fn a_file_is_written_whole_or_not_at_all() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        std::fs::write(&path, "old").unwrap();
        let failed = write_whole(&path, |f| {
            f.write_all(b"half")?;
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        });
        assert_eq!(failed.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary left"
        );

        write_whole(&path, |f| f.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        // SAFETY: reads the umask and puts it back at once.
        let umask = unsafe {
            let m = libc::umask(0o022);
            libc::umask(m);
            m
        };
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o666 & !umask, "a plain create's mode, not 0600");

        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        write_whole(&link, |f| f.write_all(b"through")).unwrap();
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "through");

        write_whole(Path::new("/dev/null"), |f| f.write_all(b"x")).unwrap();
        let null = std::fs::metadata("/dev/null").unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_char_device(
            &null.file_type()
        ));
    }

    /// What the demo relies on: a private tmpfs numbers the same files the same way on every
    /// mount, whatever else was created on other tmpfs mounts meanwhile.
    #[test]
    fn a_private_tmpfs_numbers_inodes_the_same_every_time() {
        /// Unmounts on drop, a panic included (before the directory is removed).
        struct Mounted(tempfile::TempDir);
        impl Drop for Mounted {
            fn drop(&mut self) {
                let p = self.0.path().as_os_str().as_encoded_bytes();
                let c = std::ffi::CString::new(p).unwrap();
                // SAFETY: valid C string.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
        let numbers = || {
            let dir = tempfile::tempdir().unwrap();
            mount_private_tmpfs(dir.path()).unwrap();
            let m = Mounted(dir);
            (0..50)
                .map(|i| {
                    let p = m.0.path().join(format!("f{i}"));
                    std::fs::write(&p, b"x").unwrap();
                    std::fs::metadata(&p).unwrap().ino()
                })
                .collect::<Vec<u64>>()
        };
        let first = numbers();
        let _other = tempfile::NamedTempFile::new_in("/dev/shm").unwrap();
        assert_eq!(first, numbers());
        assert!(first.windows(2).all(|w| w[0] < w[1]), "{first:?}");
    }

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

/// One mount of `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The mount's id.
    pub id: u64,
    /// The id of the mount it stands on.
    pub parent: u64,
    /// The device, `major:minor`.
    pub dev: String,
    /// Where it is mounted (escapes undone).
    pub point: std::path::PathBuf,
    /// The filesystem type (`ext4`, `fuse`, `fuse.chunkscope`, ...).
    pub fstype: String,
    /// The source (a device, `chunkscope:<store>`, ...; escapes undone).
    pub source: String,
}

/// This process's mount table.
pub fn mounts() -> io::Result<Vec<MountEntry>> {
    Ok(parse_mountinfo(&std::fs::read_to_string(
        "/proc/self/mountinfo",
    )?))
}

/// The mounts of a mountinfo text (lines it cannot read are left out).
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    use std::os::unix::ffi::OsStringExt;
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            let sep = f.iter().position(|&x| x == "-")?;
            Some(MountEntry {
                id: f.first()?.parse().ok()?,
                parent: f.get(1)?.parse().ok()?,
                dev: f.get(2)?.to_string(),
                point: std::ffi::OsString::from_vec(unescape(f.get(4)?)).into(),
                fstype: f.get(sep + 1)?.to_string(),
                source: String::from_utf8_lossy(&unescape(f.get(sep + 2)?)).into_owned(),
            })
        })
        .collect()
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Opens the directory `name` below `at` (a directory descriptor, or `AT_FDCWD` for a path)
/// read-only with `O_NOFOLLOW` (a symbolic link fails with `ELOOP`, never followed) and
/// `O_NOATIME` where permitted (see [`open_noatime`]: the second value says whether it was).
/// Listing a directory updates its atime otherwise.
pub fn open_dir_noatime(
    at: std::os::unix::io::RawFd,
    name: &std::ffi::CStr,
) -> io::Result<(std::os::fd::OwnedFd, bool)> {
    open_dir_at(at, name, libc::O_NOFOLLOW)
}

/// The names in the open directory `fd` (not `.` and `..`), listed with `getdents64` itself:
/// glibc's `readdir(3)` takes an `ENOENT` from `getdents64` for the end of the directory, so a
/// listing that fails midway would read as a short one; here it is an error (an `ENOENT`
/// included: the directory was there when it was opened).
pub fn list_names(fd: &std::os::fd::OwnedFd) -> io::Result<Vec<std::ffi::OsString>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; 32 * 1024];
    let mut names = Vec::new();
    while getdents(fd.as_raw_fd(), &mut buf, &mut |name, _, _| {
        if name != b"." && name != b".." {
            names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
        }
    })? {}
    Ok(names)
}

/// Where the symbolic link at `path` leads when it leads to a directory (`None`: not a link,
/// a dangling one, or one to anything else). Neither stat changes an atime.
pub fn link_to_dir(path: &Path) -> io::Result<Option<PathBuf>> {
    if !std::fs::symlink_metadata(path)?.is_symlink() {
        return Ok(None);
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(Some(std::fs::read_link(path)?)),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Opens the directory at `path` to list it, following symbolic links as `opendir(3)` does
/// (a datastore's root may be one), with `O_NOATIME` where permitted.
pub fn open_dir_following(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(open_dir_at(libc::AT_FDCWD, &c, 0)?.0)
}

fn open_dir_at(
    at: std::os::unix::io::RawFd,
    name: &std::ffi::CStr,
    follow: i32,
) -> io::Result<(std::os::fd::OwnedFd, bool)> {
    use std::os::fd::FromRawFd;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | follow;
    let open = |extra: i32| {
        // SAFETY: a valid C string; the flags open nothing but a directory.
        let fd = unsafe { libc::openat(at, name.as_ptr(), flags | extra) };
        if fd < 0 {
            Err(io::Error::last_os_error())
        } else {
            // SAFETY: a new descriptor, ours.
            Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
        }
    };
    match open(libc::O_NOATIME) {
        Ok(fd) => Ok((fd, true)),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok((open(0)?, false)),
        Err(e) => Err(e),
    }
}

/// One `getdents64` call on the directory `fd` into `buf`: calls `f(name, d_ino, d_type)`
/// for each entry ("." and ".." included: callers skip them as they must); `Ok(false)` once
/// the directory has no more entries.
pub fn getdents(
    fd: std::os::unix::io::RawFd,
    buf: &mut [u8],
    f: &mut dyn FnMut(&[u8], u64, u8),
) -> io::Result<bool> {
    // SAFETY: buf is writable for its length.
    let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    let mut at = 0;
    while at < n {
        let b = &buf[at..n];
        let ino = u64::from_ne_bytes(b[..8].try_into().expect("8 bytes"));
        let reclen = u16::from_ne_bytes([b[16], b[17]]) as usize;
        let raw = &b[19..reclen];
        let name = &raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())];
        f(name, ino, b[18]);
        at += reclen;
    }
    Ok(n > 0)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)` of an entry of the open directory `dir`: `None`
/// when it is gone (ENOENT). A stat reads no data: no atime changes.
pub fn lstat_at(dir: std::os::unix::io::RawFd, name: &[u8]) -> io::Result<Option<libc::stat>> {
    let mut buf = [0u8; 256];
    if name.len() >= buf.len() || name.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    buf[..name.len()].copy_from_slice(name);
    let c = std::ffi::CStr::from_bytes_until_nul(&buf).expect("a NUL after the name");
    // SAFETY: a plain C struct; all zeroes is a valid value of it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor of the caller's, a C string and an out pointer, all valid.
    let rc = unsafe { libc::fstatat(dir, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENOENT) {
            Ok(None)
        } else {
            Err(e)
        };
    }
    Ok(Some(st))
}
