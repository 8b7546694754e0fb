//! Running a request as its caller: the worker thread takes the caller's filesystem uid and
//! gid and supplementary groups for the request's backing calls, so that ownership of what it
//! creates, permission checks, the sticky bit and the chmod/chown rules are the backing
//! filesystem's own (issue 19).
//!
//! Linux keeps these credentials per thread at the syscall level (glibc's wrappers broadcast a
//! change to every thread; the raw syscalls here do not), so one worker can act as one caller
//! while another acts as another.
//!
//! The switch is lazy: a thread keeps the credentials of its last caller after the request
//! and changes only what the next request needs changed, so a run of requests from one user
//! (a GC as `backup`) makes no credential syscall at all, and a root caller on a thread that
//! acts as root (every request of a mount without `--allow-other`) none either. So every
//! request handler that reaches the backing store takes its caller's credentials first
//! ([`become_caller`]), also those whose calls check none today (fstat, read, close, fsync,
//! a listing of an open directory): no handler runs with the credentials of a request that
//! came before it. Only FORGET, which has no caller and touches no file, takes none.
//!
//! A caller's supplementary groups come from `/proc/TID/status` (the request names the
//! calling thread). They are kept per thread of the daemon for a few recent callers, keyed by
//! (tid, uid, gid), and read again after [`GROUPS_TTL_MS`]: only a process with
//! `CAP_SETGID` can change its groups, and the kernel checks permissions with the caller's
//! current credentials before the overlay sees the request (`default_permissions`, which
//! `--allow-other` adds); what the kept groups can still decide for that long is the backing
//! filesystem's second check. Reading them on every request halved an unprivileged caller's
//! throughput (BENCHMARKS.md).
//!
//! Resolving a node's file handle (`open_by_handle_at`) needs `CAP_DAC_READ_SEARCH`, which a
//! non-zero filesystem uid drops from the effective set; [`as_root`] runs such a step as root
//! and returns to the caller.

use std::cell::{Cell, RefCell};

/// How long a caller's supplementary groups are kept before they are read again.
pub const GROUPS_TTL_MS: u64 = 100;
/// Callers whose groups a daemon thread keeps.
const KEPT: usize = 8;

thread_local! {
    /// The (fsuid, fsgid) this thread acts as now; (0, 0) is the daemon itself.
    static ACTING: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
    /// The supplementary groups the thread has now, and the callers' groups it keeps.
    static GROUPS: RefCell<Groups> = RefCell::new(Groups::default());
}

fn setfsuid(uid: u32) {
    // SAFETY: plain syscall on this thread's credentials.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) };
}

fn setfsgid(gid: u32) {
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) };
}

/// This thread's supplementary groups (the raw syscall: only this thread's).
fn setgroups(groups: &[libc::gid_t]) -> bool {
    // SAFETY: a valid slice.
    unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) == 0 }
}

/// The daemon's own supplementary groups, what a thread has when it acts as root.
fn own_groups() -> &'static [libc::gid_t] {
    static OWN: std::sync::OnceLock<Vec<libc::gid_t>> = std::sync::OnceLock::new();
    OWN.get_or_init(|| {
        // SAFETY: a size query, then a buffer of that size.
        unsafe {
            let n = libc::getgroups(0, std::ptr::null_mut());
            let mut v = vec![0; n.max(0) as usize];
            let n = libc::getgroups(v.len() as i32, v.as_mut_ptr());
            v.truncate(n.max(0) as usize);
            v
        }
    })
}

/// Milliseconds of a coarse monotonic clock (read from the vDSO, no syscall).
fn now_ms() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// The supplementary groups of thread (or process) `tid` (`Groups:` in `/proc/TID/status`),
/// into `out`, read through `buf` (the whole file: a caller in thousands of groups has a line
/// of tens of KiB; the buffer is the thread's, so it grows once); `None` when the caller is
/// gone or the line unreadable.
fn groups_of(tid: u32, buf: &mut Vec<u8>, out: &mut Vec<libc::gid_t>) -> Option<()> {
    use std::io::Read;
    let mut path = [0u8; 32];
    let mut w = std::io::Cursor::new(&mut path[..]);
    std::io::Write::write_fmt(&mut w, format_args!("/proc/{tid}/status")).ok()?;
    let len = w.position() as usize;
    let path = std::str::from_utf8(&path[..len]).ok()?;
    buf.clear();
    std::fs::File::open(path).ok()?.read_to_end(buf).ok()?;
    let text = std::str::from_utf8(buf).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    out.clear();
    for g in line.split_ascii_whitespace() {
        out.push(g.parse().ok()?);
    }
    Some(())
}

/// A caller whose groups a thread keeps.
#[derive(Default)]
struct Kept {
    tid: u32,
    uid: u32,
    gid: u32,
    read_ms: u64,
    groups: Vec<libc::gid_t>,
}

#[derive(Default)]
struct Groups {
    /// The groups this thread has now (`None`: the daemon's own, or not known after a failed
    /// `setgroups`, which the next switch then makes again).
    applied: Option<Vec<libc::gid_t>>,
    /// A failed `setgroups` left the thread's groups unknown.
    unknown: bool,
    /// `/proc/TID/status`, read into this buffer.
    status: Vec<u8>,
    kept: Vec<Kept>,
    /// The slot the next new caller takes.
    next: usize,
    /// How often groups were read from /proc (for tests).
    reads: u64,
}

impl Groups {
    /// The groups of caller (tid, uid, gid), read again when older than the TTL.
    fn of(&mut self, tid: u32, uid: u32, gid: u32, now: u64) -> usize {
        let i = match self
            .kept
            .iter()
            .position(|k| (k.tid, k.uid, k.gid) == (tid, uid, gid))
        {
            Some(i) if now.saturating_sub(self.kept[i].read_ms) < GROUPS_TTL_MS => return i,
            Some(i) => i,
            None if self.kept.len() < KEPT => {
                self.kept.push(Kept::default());
                self.kept.len() - 1
            }
            None => {
                let i = self.next;
                self.next = (self.next + 1) % KEPT;
                i
            }
        };
        let k = &mut self.kept[i];
        (k.tid, k.uid, k.gid, k.read_ms) = (tid, uid, gid, now);
        self.reads += 1;
        if groups_of(tid, &mut self.status, &mut k.groups).is_none() {
            // The caller is gone or hidden: no supplementary groups, the safe side.
            k.groups.clear();
        }
        i
    }

    /// Gives the thread caller `i`'s groups unless it has them already. If the kernel refuses
    /// them (more than `NGROUPS_MAX`, or no `CAP_SETGID`), the thread gets no supplementary
    /// groups at all (the safe side: a check may fail that the caller would pass, never the
    /// other way); if it refuses that too, the groups are unknown and set again next time.
    fn apply(&mut self, i: usize) {
        let want = &self.kept[i].groups;
        if !self.unknown && self.applied.as_deref() == Some(want.as_slice()) {
            return;
        }
        let applied = self.applied.get_or_insert_with(Vec::new);
        applied.clear();
        if setgroups(want) {
            applied.extend_from_slice(want);
            self.unknown = false;
        } else {
            warn_once(want.len());
            self.unknown = !setgroups(&[]);
        }
    }

    /// Gives the thread the daemon's own groups back.
    fn restore(&mut self) {
        if self.applied.take().is_some() || self.unknown {
            self.unknown = !setgroups(own_groups());
        }
    }
}

/// Says once per daemon that a caller's groups could not be taken.
fn warn_once(groups: usize) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "could not give a worker thread a caller's {groups} supplementary groups ({}): such \
             requests run with no supplementary groups",
            std::io::Error::last_os_error()
        );
    }
}

/// Makes this thread act as the caller (uid, gid) of thread `tid` for the backing calls that
/// follow, until a request of another caller. Changes only what differs from the last caller.
#[inline]
pub fn become_caller(uid: u32, gid: u32, tid: u32) {
    let (cur_uid, cur_gid) = ACTING.with(|a| a.get());
    if uid == 0 {
        // Root keeps the daemon's own groups (root's checks do not depend on them).
        GROUPS.with(|g| g.borrow_mut().restore());
    } else {
        GROUPS.with(|g| {
            let mut g = g.borrow_mut();
            let i = g.of(tid, uid, gid, now_ms());
            g.apply(i);
        });
    }
    if gid != cur_gid {
        setfsgid(gid);
    }
    if uid != cur_uid {
        setfsuid(uid);
    }
    ACTING.with(|a| a.set((uid, gid)));
}

/// After a request's handler panicked (perhaps inside [`as_root`], or between two switches):
/// sets the thread's filesystem ids to the ones it says it acts as, and its groups to be set
/// again by the next caller, so no request runs with another's credentials.
pub fn after_panic() {
    let (uid, gid) = ACTING.with(|a| a.get());
    setfsgid(gid);
    setfsuid(uid);
    GROUPS.with(|g| {
        if let Ok(mut g) = g.try_borrow_mut() {
            g.unknown = true;
        }
    });
}

/// Whether the thread acts as a caller other than root now.
pub fn acting_as_caller() -> bool {
    ACTING.with(|a| a.get()) != (0, 0)
}

/// How often this thread read a caller's groups from /proc.
pub fn groups_reads() -> u64 {
    GROUPS.with(|g| g.borrow().reads)
}

/// Runs `f` with the daemon's capabilities (filesystem uid 0, which gives the thread back its
/// `CAP_DAC_READ_SEARCH`), then returns to the caller the thread was acting as. The gid stays
/// the caller's: nothing run here creates a file.
#[inline]
pub fn as_root<T>(f: impl FnOnce() -> T) -> T {
    let uid = ACTING.with(|a| a.get()).0;
    if uid == 0 {
        return f();
    }
    setfsuid(0);
    let r = f();
    setfsuid(uid);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (fsuid, fsgid, groups) of this thread, as the kernel has them.
    fn fs_ids() -> (u32, u32, String) {
        let s = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let field = |k: &str| -> u32 {
            s.lines()
                .find_map(|l| l.strip_prefix(k))
                .unwrap()
                .split_ascii_whitespace()
                .nth(3)
                .unwrap()
                .parse()
                .unwrap()
        };
        let groups = s
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .unwrap()
            .trim()
            .to_string();
        (field("Uid:"), field("Gid:"), groups)
    }

    fn own() -> String {
        own_groups()
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn a_thread_acts_as_each_caller_and_as_root_again() {
        // SAFETY: no arguments, no preconditions; it cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return; // needs root to switch
        }
        // Another thread, started before, is not affected.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            rx.recv().unwrap();
            fs_ids()
        });
        std::thread::spawn(move || {
            become_caller(1234, 5678, std::process::id());
            tx.send(()).unwrap();
            assert_eq!(other.join().unwrap(), (0, 0, own()));
        })
        .join()
        .unwrap();
        // A caller whose /proc entry is gone has no supplementary groups.
        let gone = u32::MAX - 1;
        std::thread::spawn(move || {
            become_caller(1234, 5678, gone);
            assert_eq!(fs_ids(), (1234, 5678, String::new()));
            assert!(acting_as_caller());
            as_root(|| assert_eq!(fs_ids(), (0, 5678, String::new())));
            assert_eq!(fs_ids(), (1234, 5678, String::new()));
            // The thread stays the caller until a request of another one.
            assert_eq!(fs_ids(), (1234, 5678, String::new()));
            become_caller(0, 0, gone);
            assert_eq!(fs_ids(), (0, 0, own()));
            assert!(!acting_as_caller());
            become_caller(99, 0, gone);
            assert_eq!(fs_ids(), (99, 0, String::new()));
            become_caller(0, 7, gone);
            assert_eq!(fs_ids(), (0, 7, own()));
            assert!(acting_as_caller());
            become_caller(0, 0, gone);
            assert_eq!(fs_ids(), (0, 0, own()));
        })
        .join()
        .unwrap();
    }

    /// Issue 40, point 7: a caller in many groups has a `Groups:` line far past the first 4 KiB
    /// of its status file (it was cut there, and the groups after it lost).
    #[test]
    fn every_group_of_a_caller_in_thousands_is_read() {
        use std::os::unix::process::CommandExt;
        // SAFETY: no arguments, no preconditions; it cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return; // needs root to give a child thousands of groups
        }
        let groups: Vec<libc::gid_t> = (10_000..13_000).collect();
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        let g = groups.clone();
        // SAFETY: setgroups is async-signal-safe; the child execs right after.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(g.len(), g.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
        let mut child = cmd.spawn().unwrap();
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        let read = groups_of(child.id(), &mut buf, &mut out);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(read.is_some());
        assert!(buf.len() > 4096, "{} bytes", buf.len());
        assert_eq!(out, groups);
    }

    /// A `setgroups` the kernel refuses is not recorded as applied: the thread runs with no
    /// supplementary groups, and the next caller's are set.
    #[test]
    fn groups_the_kernel_refuses_leave_none() {
        // SAFETY: no arguments, no preconditions; it cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        std::thread::spawn(|| {
            let mut g = Groups::default();
            g.kept.push(Kept {
                groups: (0..70_000).collect(), // over NGROUPS_MAX (65,536): EINVAL
                ..Kept::default()
            });
            g.kept.push(Kept {
                groups: vec![4242],
                ..Kept::default()
            });
            g.apply(1);
            assert_eq!(fs_ids().2, "4242");
            g.apply(0);
            assert_eq!(
                g.applied.as_deref(),
                Some(&[][..]),
                "not recorded as applied"
            );
            assert_eq!(fs_ids().2, "", "none rather than the last caller's");
            g.apply(1);
            assert_eq!(fs_ids().2, "4242");
            g.restore();
            assert_eq!(fs_ids().2, own());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_callers_groups_are_kept_for_a_while_then_read_again() {
        // SAFETY: no arguments, no preconditions; it cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        std::thread::spawn(|| {
            let me = std::process::id();
            become_caller(1234, 5678, me);
            become_caller(1234, 5678, me);
            become_caller(0, 0, me);
            become_caller(1234, 5678, me);
            assert_eq!(groups_reads(), 1, "kept");
            become_caller(1234, 9, me);
            assert_eq!(groups_reads(), 2, "another gid is another caller");
            // More callers than kept: the oldest is read again.
            for tid in 0..KEPT as u32 {
                become_caller(1234, 5678, u32::MAX - 10 - tid);
            }
            become_caller(1234, 9, me);
            assert_eq!(groups_reads(), 3 + KEPT as u64);
            std::thread::sleep(std::time::Duration::from_millis(GROUPS_TTL_MS + 20));
            become_caller(1234, 9, me);
            assert_eq!(groups_reads(), 4 + KEPT as u64, "read again after the TTL");
            become_caller(0, 0, me);
            assert_eq!(fs_ids(), (0, 0, own()));
        })
        .join()
        .unwrap();
    }
}
