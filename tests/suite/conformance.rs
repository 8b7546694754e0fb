//! Issue 19, point 3: a differential conformance test. Generated sequences of filesystem calls
//! run on a plain directory and through mounts of identical directories (1 and 4 daemon
//! threads with `--allow-other`, the 4-thread one with directories cached as on a datastore,
//! 2 without it), as root or as an unprivileged user (through
//! the two that allow other users): every call returns the same (value or errno)
//! on all three, and afterwards the trees are the same (names, types, modes, owners, link
//! counts, sizes, contents, symlink targets, and times where a call set them). A failing case
//! shrinks to a short sequence. All on tmpfs; nothing depends on inode numbers.
//!
//! More cases: `CHUNKSCOPE_CONFORMANCE_CASES=500 cargo test --release --test suite conformance::`, and
//! other ones with `CHUNKSCOPE_CONFORMANCE_SEED=N`.

use crate::common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use common::*;
use proptest::prelude::*;
use proptest::prop_assert_eq;
use serde::{Deserialize, Serialize};

const NAMES: [&str; 7] = ["a", "b", "c", "d/a", "d/b", "d/d/a", "e/a"];
const DIRS: [&str; 4] = ["d", "e", "d/d", "f"];
const USER: u32 = 1000;

#[derive(Clone, Debug, Serialize, Deserialize)]
enum Call {
    Create {
        p: String,
        mode: u32,
        excl: bool,
        trunc: bool,
        append: bool,
        /// 0, O_NOFOLLOW, O_NOATIME or O_DIRECTORY, with O_CREAT.
        extra: i32,
    },
    Write {
        p: String,
        off: u64,
        len: u32,
    },
    Mkdir {
        p: String,
        mode: u32,
    },
    Mkfifo {
        p: String,
        mode: u32,
    },
    Symlink {
        target: String,
        p: String,
    },
    Link {
        from: String,
        to: String,
    },
    Rename {
        from: String,
        to: String,
        flags: u32,
    },
    Unlink {
        p: String,
    },
    Rmdir {
        p: String,
    },
    Chmod {
        p: String,
        mode: u32,
    },
    Chown {
        p: String,
        uid: u32,
        gid: u32,
    },
    Truncate {
        p: String,
        size: u64,
    },
    Utimens {
        p: String,
        atime: Option<i64>,
        mtime: Option<i64>,
        nofollow: bool,
    },
    Fallocate {
        p: String,
        len: u32,
    },
    Readlink {
        p: String,
    },
    Stat {
        p: String,
    },
    Read {
        p: String,
    },
    /// Opens with extra flags (O_NOFOLLOW, O_DIRECTORY, O_NOATIME), closes.
    Open {
        p: String,
        flags: i32,
    },
    /// Opens for writing, unlinks the name, writes and ftruncates through the open file.
    UnlinkOpen {
        p: String,
        size: u64,
    },
    /// flock (BSD) and fcntl (POSIX) locks on an open file.
    Lock {
        p: String,
        exclusive: bool,
    },
    /// utimensat(UTIME_NOW) on both times (compared as set or not).
    Touch {
        p: String,
    },
    /// Opens (a directory with O_DIRECTORY), then fsync or fdatasync (fsyncdir through FUSE).
    Fsync {
        p: String,
        dir: bool,
        data: bool,
    },
    /// statvfs: what the backing filesystem says of its size, names and inodes.
    Statfs {
        p: String,
    },
    /// bind() of a UNIX socket at the name (mknod S_IFSOCK through FUSE).
    Bind {
        p: String,
    },
    /// mknod of a character device (1, 3): root only.
    Mknod {
        p: String,
        mode: u32,
    },
    /// fchmodat(AT_SYMLINK_NOFOLLOW): EOPNOTSUPP on a symlink, chmod otherwise.
    Lchmod {
        p: String,
        mode: u32,
    },
    /// Opens a directory, removes it, then lists and fstats it through the open descriptor.
    RmdirOpen {
        p: String,
    },
}

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(
        NAMES
            .iter()
            .chain(DIRS.iter())
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    )
}

fn mode() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![
        0o644, 0o600, 0o755, 0o700, 0o1777, 0o4755, 0o000, 0o666,
    ])
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        3 => (name(), mode(), any::<bool>(), any::<bool>(), any::<bool>(),
              prop::sample::select(vec![0, 0, libc::O_NOFOLLOW, libc::O_NOATIME, libc::O_DIRECTORY]))
            .prop_map(|(p, mode, excl, trunc, append, extra)| Call::Create { p, mode, excl, trunc, append, extra }),
        2 => (name(), 0u64..9000, 1u32..5000).prop_map(|(p, off, len)| Call::Write { p, off, len }),
        2 => (name(), mode()).prop_map(|(p, mode)| Call::Mkdir { p, mode }),
        1 => (name(), mode()).prop_map(|(p, mode)| Call::Mkfifo { p, mode }),
        1 => (name(), name()).prop_map(|(target, p)| Call::Symlink { target, p }),
        1 => (name(), name()).prop_map(|(from, to)| Call::Link { from, to }),
        2 => (name(), name(), prop::sample::select(vec![0u32, 1, 2]))
            .prop_map(|(from, to, flags)| Call::Rename { from, to, flags }),
        1 => name().prop_map(|p| Call::Unlink { p }),
        1 => name().prop_map(|p| Call::Rmdir { p }),
        1 => (name(), mode()).prop_map(|(p, mode)| Call::Chmod { p, mode }),
        1 => (name(), prop::sample::select(vec![0u32, USER, 1001]), prop::sample::select(vec![0u32, USER, 1001]))
            .prop_map(|(p, uid, gid)| Call::Chown { p, uid, gid }),
        1 => (name(), 0u64..20000).prop_map(|(p, size)| Call::Truncate { p, size }),
        1 => (name(), prop::option::of(1_000_000_000i64..1_000_100_000), prop::option::of(1_000_000_000i64..1_000_100_000), any::<bool>())
            .prop_map(|(p, atime, mtime, nofollow)| Call::Utimens { p, atime, mtime, nofollow }),
        1 => (name(), 1u32..20000).prop_map(|(p, len)| Call::Fallocate { p, len }),
        1 => name().prop_map(|p| Call::Readlink { p }),
        1 => name().prop_map(|p| Call::Stat { p }),
        1 => name().prop_map(|p| Call::Read { p }),
        1 => (name(), prop::sample::select(vec![libc::O_NOFOLLOW, libc::O_DIRECTORY, libc::O_NOATIME, libc::O_NOFOLLOW | libc::O_DIRECTORY]))
            .prop_map(|(p, flags)| Call::Open { p, flags }),
        1 => (name(), 0u64..5000).prop_map(|(p, size)| Call::UnlinkOpen { p, size }),
        1 => (name(), any::<bool>()).prop_map(|(p, exclusive)| Call::Lock { p, exclusive }),
        1 => name().prop_map(|p| Call::Touch { p }),
        1 => (name(), any::<bool>(), any::<bool>()).prop_map(|(p, dir, data)| Call::Fsync { p, dir, data }),
        1 => name().prop_map(|p| Call::Statfs { p }),
        1 => name().prop_map(|p| Call::Bind { p }),
        1 => (name(), mode()).prop_map(|(p, mode)| Call::Mknod { p, mode }),
        1 => (name(), mode()).prop_map(|(p, mode)| Call::Lchmod { p, mode }),
        1 => name().prop_map(|p| Call::RmdirOpen { p }),
    ]
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn rc(r: libc::c_int) -> String {
    if r < 0 {
        format!("errno {}", errno())
    } else {
        format!("ok {r}")
    }
}

fn cs(root: &Path, p: &str) -> CString {
    CString::new(root.join(p).as_os_str().as_bytes()).unwrap()
}

/// Performs one call below `root`; returns what it returned, in a form that does not depend
/// on where `root` is.
fn perform(root: &Path, c: &Call) -> String {
    // SAFETY: (all the calls below) valid C strings and buffers; every descriptor opened is
    // closed before returning.
    unsafe {
        match c {
            Call::Create {
                p,
                mode,
                excl,
                trunc,
                append,
                extra,
            } => {
                let mut fl = libc::O_CREAT | libc::O_WRONLY | libc::O_NONBLOCK | extra;
                if *excl {
                    fl |= libc::O_EXCL
                }
                if *trunc {
                    fl |= libc::O_TRUNC
                }
                if *append {
                    fl |= libc::O_APPEND
                }
                let fd = libc::open(cs(root, p).as_ptr(), fl, *mode);
                if fd >= 0 {
                    libc::close(fd);
                }
                rc(fd.min(0))
            }
            Call::Write { p, off, len } => {
                let fd = libc::open(cs(root, p).as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK);
                if fd < 0 {
                    return rc(fd);
                }
                let data: Vec<u8> = (0..*len).map(|i| (i % 251) as u8).collect();
                let n = libc::pwrite(fd, data.as_ptr().cast(), data.len(), *off as i64);
                let r = if n < 0 { rc(-1) } else { format!("ok {n}") };
                libc::close(fd);
                r
            }
            Call::Mkdir { p, mode } => rc(libc::mkdir(cs(root, p).as_ptr(), *mode)),
            Call::Mkfifo { p, mode } => rc(libc::mkfifo(cs(root, p).as_ptr(), *mode)),
            Call::Symlink { target, p } => {
                let t = CString::new(target.as_str()).unwrap();
                rc(libc::symlink(t.as_ptr(), cs(root, p).as_ptr()))
            }
            Call::Link { from, to } => {
                rc(libc::link(cs(root, from).as_ptr(), cs(root, to).as_ptr()))
            }
            Call::Rename { from, to, flags } => rc(libc::renameat2(
                libc::AT_FDCWD,
                cs(root, from).as_ptr(),
                libc::AT_FDCWD,
                cs(root, to).as_ptr(),
                *flags,
            )),
            Call::Unlink { p } => rc(libc::unlink(cs(root, p).as_ptr())),
            Call::Rmdir { p } => rc(libc::rmdir(cs(root, p).as_ptr())),
            Call::Chmod { p, mode } => rc(libc::chmod(cs(root, p).as_ptr(), *mode)),
            Call::Chown { p, uid, gid } => rc(libc::lchown(cs(root, p).as_ptr(), *uid, *gid)),
            Call::Truncate { p, size } => rc(libc::truncate(cs(root, p).as_ptr(), *size as i64)),
            Call::Utimens {
                p,
                atime,
                mtime,
                nofollow,
            } => {
                let ts = |t: &Option<i64>| match t {
                    Some(s) => libc::timespec {
                        tv_sec: *s,
                        tv_nsec: 0,
                    },
                    None => libc::timespec {
                        tv_sec: 0,
                        tv_nsec: libc::UTIME_OMIT,
                    },
                };
                let times = [ts(atime), ts(mtime)];
                let fl = if *nofollow {
                    libc::AT_SYMLINK_NOFOLLOW
                } else {
                    0
                };
                rc(libc::utimensat(
                    libc::AT_FDCWD,
                    cs(root, p).as_ptr(),
                    times.as_ptr(),
                    fl,
                ))
            }
            Call::Fallocate { p, len } => {
                let fd = libc::open(cs(root, p).as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK);
                if fd < 0 {
                    return rc(fd);
                }
                let r = rc(libc::fallocate(fd, 0, 0, *len as i64));
                libc::close(fd);
                r
            }
            Call::Readlink { p } => {
                let mut buf = [0u8; 256];
                let n = libc::readlink(cs(root, p).as_ptr(), buf.as_mut_ptr().cast(), buf.len());
                if n < 0 {
                    rc(-1)
                } else {
                    format!("ok {}", String::from_utf8_lossy(&buf[..n as usize]))
                }
            }
            Call::Stat { p } => {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::lstat(cs(root, p).as_ptr(), &mut st) < 0 {
                    return rc(-1);
                }
                format!(
                    "ok {:o} {}:{} {} {}",
                    st.st_mode, st.st_uid, st.st_gid, st.st_nlink, st.st_size
                )
            }
            Call::Open { p, flags } => {
                let fd = libc::open(
                    cs(root, p).as_ptr(),
                    libc::O_RDONLY | libc::O_NONBLOCK | flags,
                );
                if fd >= 0 {
                    libc::close(fd);
                }
                rc(fd.min(0))
            }
            Call::UnlinkOpen { p, size } => {
                let fd = libc::open(cs(root, p).as_ptr(), libc::O_RDWR | libc::O_NONBLOCK);
                if fd < 0 {
                    return rc(fd);
                }
                let mut r = vec![rc(libc::unlink(cs(root, p).as_ptr()))];
                r.push(rc(libc::write(fd, b"still open".as_ptr().cast(), 10) as i32));
                r.push(rc(libc::ftruncate(fd, *size as i64)));
                let mut st: libc::stat = std::mem::zeroed();
                libc::fstat(fd, &mut st);
                r.push(format!("nlink {} size {}", st.st_nlink, st.st_size));
                libc::close(fd);
                r.join(", ")
            }
            Call::Lock { p, exclusive } => {
                let fd = libc::open(cs(root, p).as_ptr(), libc::O_RDWR | libc::O_NONBLOCK);
                if fd < 0 {
                    return rc(fd);
                }
                let op = if *exclusive {
                    libc::LOCK_EX
                } else {
                    libc::LOCK_SH
                };
                let mut r = vec![rc(libc::flock(fd, op | libc::LOCK_NB))];
                let mut fl: libc::flock = std::mem::zeroed();
                fl.l_type = if *exclusive {
                    libc::F_WRLCK
                } else {
                    libc::F_RDLCK
                } as libc::c_short;
                fl.l_whence = libc::SEEK_SET as libc::c_short;
                r.push(rc(libc::fcntl(fd, libc::F_SETLK, &fl)));
                fl.l_type = libc::F_WRLCK as libc::c_short;
                r.push(rc(libc::fcntl(fd, libc::F_GETLK, &mut fl)));
                r.push(format!("type {}", fl.l_type));
                libc::close(fd);
                r.join(", ")
            }
            Call::Touch { p } => {
                let now = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                };
                rc(libc::utimensat(
                    libc::AT_FDCWD,
                    cs(root, p).as_ptr(),
                    [now, now].as_ptr(),
                    0,
                ))
            }
            Call::Fsync { p, dir, data } => {
                let fl = if *dir { libc::O_DIRECTORY } else { 0 };
                let fd = libc::open(cs(root, p).as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK | fl);
                if fd < 0 {
                    return rc(fd);
                }
                let r = rc(if *data {
                    libc::fdatasync(fd)
                } else {
                    libc::fsync(fd)
                });
                libc::close(fd);
                r
            }
            Call::Statfs { p } => {
                let mut s: libc::statvfs = std::mem::zeroed();
                if libc::statvfs(cs(root, p).as_ptr(), &mut s) < 0 {
                    return rc(-1);
                }
                // Free counts change with every other case; the flags are the mount's.
                format!(
                    "ok bsize {} frsize {} blocks {} files {} namemax {}",
                    s.f_bsize, s.f_frsize, s.f_blocks, s.f_files, s.f_namemax
                )
            }
            Call::Bind { p } => {
                // sun_path holds 108 bytes: bind through the directory's /proc/self/fd link.
                let path = root.join(p);
                let dir = CString::new(path.parent().unwrap().as_os_str().as_bytes()).unwrap();
                let dfd = libc::open(dir.as_ptr(), libc::O_PATH | libc::O_DIRECTORY);
                if dfd < 0 {
                    return rc(dfd);
                }
                let short = format!(
                    "/proc/self/fd/{dfd}/{}",
                    path.file_name().unwrap().to_str().unwrap()
                );
                let sock = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                let mut addr: libc::sockaddr_un = std::mem::zeroed();
                addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
                for (d, b) in addr.sun_path.iter_mut().zip(short.as_bytes()) {
                    *d = *b as libc::c_char;
                }
                let r = rc(libc::bind(
                    sock,
                    (&addr as *const libc::sockaddr_un).cast(),
                    std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
                ));
                libc::close(sock);
                libc::close(dfd);
                r
            }
            Call::Mknod { p, mode } => rc(libc::mknod(
                cs(root, p).as_ptr(),
                libc::S_IFCHR | (mode & 0o777),
                libc::makedev(1, 3),
            )),
            Call::Lchmod { p, mode } => rc(libc::fchmodat(
                libc::AT_FDCWD,
                cs(root, p).as_ptr(),
                *mode,
                libc::AT_SYMLINK_NOFOLLOW,
            )),
            Call::RmdirOpen { p } => {
                let fd = libc::open(
                    cs(root, p).as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NONBLOCK,
                );
                if fd < 0 {
                    return rc(fd);
                }
                let mut r = vec![rc(libc::rmdir(cs(root, p).as_ptr()))];
                let mut buf = [0u8; 4096];
                let n = libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len());
                // Entries left: a removed directory lists nothing (not even . and ..).
                let mut names = Vec::new();
                let mut at = 0usize;
                while n > 0 && at < n as usize {
                    let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
                    let name = std::ffi::CStr::from_ptr(buf[at + 19..].as_ptr().cast());
                    names.push(name.to_string_lossy().into_owned());
                    at += reclen;
                }
                names.sort();
                r.push(if n < 0 {
                    rc(-1)
                } else {
                    format!("listed {names:?}")
                });
                let mut st: libc::stat = std::mem::zeroed();
                libc::fstat(fd, &mut st);
                r.push(format!("nlink {}", st.st_nlink));
                libc::close(fd);
                r.join(", ")
            }
            Call::Read { p } => {
                // O_NOATIME where the caller may: a read the kernel answers itself (at the
                // end of a file) reaches no store through a FUSE mount, so it cannot update
                // the store's atime as a read on the disk does (README, "what differs").
                let fl = libc::O_RDONLY | libc::O_NONBLOCK;
                let mut fd = libc::open(cs(root, p).as_ptr(), fl | libc::O_NOATIME);
                if fd < 0 && errno() == libc::EPERM {
                    fd = libc::open(cs(root, p).as_ptr(), fl);
                }
                if fd < 0 {
                    return rc(fd);
                }
                let mut buf = vec![0u8; 32 << 10];
                let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
                libc::close(fd);
                if n < 0 {
                    rc(-1)
                } else {
                    format!("ok {n}")
                }
            }
        }
    }
}

/// Everything below `root`: name, type, mode, owner, links, size, content hash, symlink
/// target, and atime/mtime where a call set them (values before 2001).
fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(root.join(&rel))
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        names.sort();
        for n in names {
            let r = rel.join(&n);
            let p = root.join(&r);
            let m = std::fs::symlink_metadata(&p).unwrap();
            use std::os::unix::fs::MetadataExt;
            let mut line = format!(
                "{} {:o} {}:{} {} {}",
                r.display(),
                m.mode(),
                m.uid(),
                m.gid(),
                m.nlink(),
                if m.is_dir() { 0 } else { m.size() }
            );
            let old = |t: i64| {
                if t < 1_000_200_000 {
                    t.to_string()
                } else {
                    "-".into()
                }
            };
            use std::os::unix::fs::FileTypeExt;
            // A FIFO opened through a FUSE mount is the kernel's own pipe on the FUSE inode:
            // its reads and writes never reach the backing FIFO, so neither do the times they
            // set (a limit of FUSE, not of the overlay). Its other fields are compared.
            if !m.file_type().is_fifo() {
                line += &format!(" a{} m{}", old(m.atime()), old(m.mtime()));
            }
            if m.file_type().is_char_device() || m.file_type().is_block_device() {
                line += &format!(" rdev {:x}", m.rdev());
            }
            if m.file_type().is_symlink() {
                line += &format!(" -> {}", std::fs::read_link(&p).unwrap().display());
            } else if m.is_file() {
                // O_NOATIME: reading the tree must not change the atimes it compares.
                if let Ok(b) = chunkscope::fsutil::read_noatime(&p) {
                    use sha2::Digest as _;
                    line += &format!(" {}", hex::encode(&sha2::Sha256::digest(&b)[..8]));
                }
            } else if m.is_dir() {
                stack.push(r.clone());
            }
            out.push(line);
        }
    }
    out.sort();
    out
}

/// Lays out a case's directory: `d`, `e` and `d/d` to work in, world-writable so that the
/// unprivileged user can.
fn lay_out(root: &Path) {
    for d in ["", "d", "e", "d/d"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
        std::fs::set_permissions(root.join(d), std::fs::Permissions::from_mode(0o777)).unwrap();
    }
}

/// Runs the calls on `root`, as root in this process or as `USER` in a child.
fn run_calls(root: &Path, calls: &[Call], as_user: bool) -> Vec<String> {
    if !as_user {
        return calls.iter().map(|c| perform(root, c)).collect();
    }
    let o = test_binary_for_others()
        .args([
            "--ignored",
            "--exact",
            "conformance::conformance_helper",
            "--test-threads",
            "1",
            "--nocapture",
        ])
        .env("CHUNKSCOPE_CONFORMANCE_ROOT", root)
        .env(
            "CHUNKSCOPE_CONFORMANCE_CALLS",
            serde_json::to_string(calls).unwrap(),
        )
        .uid(USER)
        .gid(USER)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out.lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .map(str::to_string)
        .collect()
}

#[test]
#[ignore = "a helper, run as another user by the conformance test"]
fn conformance_helper() {
    let Some(root) = std::env::var_os("CHUNKSCOPE_CONFORMANCE_ROOT") else {
        return;
    };
    let calls: Vec<Call> =
        serde_json::from_str(&std::env::var("CHUNKSCOPE_CONFORMANCE_CALLS").unwrap()).unwrap();
    // SAFETY: plain syscall; the same umask on every side.
    unsafe { libc::umask(0o022) };
    for c in &calls {
        println!("RESULT {}", perform(Path::new(&root), c));
    }
}

fn cases() -> u32 {
    std::env::var("CHUNKSCOPE_CONFORMANCE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// The generator's seed: fixed, so that CI runs the same cases; another one explores others.
fn seed() -> u64 {
    std::env::var("CHUNKSCOPE_CONFORMANCE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(19)
}

#[test]
fn the_mount_answers_every_call_as_the_disk_does() {
    use proptest::test_runner::{Config, RngSeed, TestRunner};
    // The mounts live for the whole run and are unmounted by their guards, on panic too.
    let dir = store_dir();
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    // (threads, --allow-other): the unprivileged user's calls go to the two that allow it;
    // root's to all three.
    let mounts: Vec<(Mount, bool)> = [("1", true), ("4", true), ("2", false)]
        .iter()
        .map(|&(threads, others)| {
            let d = dir.path().join(format!("t{threads}"));
            let store = d.join("store");
            std::fs::create_dir_all(&store).unwrap();
            let mut args = vec!["--threads", threads];
            if others {
                args.push("--allow-other");
            }
            if threads == "4" {
                // The kernel caching directories as on a datastore (--dir-ttl, issue 21): what
                // changes through the mount, it must see at once.
                args.extend(["--dir-ttl", "600"]);
            }
            (Mount::start(&store, &d, false, &args), others)
        })
        .collect();
    // SAFETY: plain syscall; the same umask on every side.
    unsafe { libc::umask(0o022) };
    let case = std::cell::Cell::new(0u32);
    // (calls that succeeded, calls that failed, entries in the trees): not a vacuous run.
    let seen = std::cell::Cell::new((0usize, 0usize, 0usize));
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        rng_seed: RngSeed::Fixed(seed()),
        max_shrink_iters: 200,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (prop::collection::vec(call(), 1..25), any::<bool>());
    let result = runner.run(&strategy, |(calls, as_user)| {
        let name = format!("case{}", case.get());
        case.set(case.get() + 1);
        let root = plain.join(&name);
        lay_out(&root);
        let expected = run_calls(&root, &calls, as_user);
        let want = tree(&root);
        let ok = expected.iter().filter(|r| r.starts_with("ok")).count();
        let (a, b, c) = seen.get();
        seen.set((a + ok, b + expected.len() - ok, c + want.len()));
        for (m, others) in &mounts {
            if as_user && !others {
                continue;
            }
            let root = m.mnt.join(&name);
            lay_out(&root);
            let got = run_calls(&root, &calls, as_user);
            for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                prop_assert_eq!(
                    g,
                    e,
                    "call {} {:?} through {} (as user: {})",
                    i,
                    &calls[i],
                    m.mnt.display(),
                    as_user
                );
            }
            prop_assert_eq!(got.len(), expected.len());
            prop_assert_eq!(
                tree(&root),
                want.clone(),
                "trees through {}",
                m.mnt.display()
            );
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (ok, failed, entries) = seen.get();
    let n = cases() as usize;
    assert!(
        ok > n && failed > n / 2 && entries > n * 4,
        "{ok} calls succeeded, {failed} failed, {entries} tree entries"
    );
}
