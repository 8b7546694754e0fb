//! Running a request as its caller: the worker thread takes the caller's filesystem uid and
//! gid and supplementary groups for the request's backing calls, so that ownership of what it
//! creates, permission checks, the sticky bit and the chmod/chown rules are the backing
//! filesystem's own (issue 19).
//!
//! Linux keeps these credentials per thread at the syscall level (glibc's wrappers broadcast a
//! change to every thread; the raw syscalls here do not), so one worker can act as one caller
//! while another acts as another. A root caller (a GC run by root, every request of a mount
//! without `--allow-other`) switches nothing: no syscall is added to its requests.
//!
//! Resolving a node's file handle (`open_by_handle_at`) needs `CAP_DAC_READ_SEARCH`, which a
//! non-zero filesystem uid drops from the effective set; [`as_root`] runs such a step as root
//! and returns to the caller.

use std::cell::Cell;

thread_local! {
    /// The (fsuid, fsgid) this thread acts as now; (0, 0) is the daemon itself.
    static ACTING: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
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

/// The daemon's own supplementary groups, restored after each caller's request.
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

/// The supplementary groups of process `pid` (`Groups:` in `/proc/PID/status`), into `out`;
/// `None` when the process is gone or the line unreadable.
fn groups_of(pid: u32, out: &mut Vec<libc::gid_t>) -> Option<()> {
    use std::io::Read;
    let mut path = [0u8; 32];
    let mut w = std::io::Cursor::new(&mut path[..]);
    std::io::Write::write_fmt(&mut w, format_args!("/proc/{pid}/status")).ok()?;
    let len = w.position() as usize;
    let path = std::str::from_utf8(&path[..len]).ok()?;
    let mut buf = [0u8; 4096];
    let mut f = std::fs::File::open(path).ok()?;
    let n = f.read(&mut buf).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    out.clear();
    for g in line.split_ascii_whitespace() {
        out.push(g.parse().ok()?);
    }
    Some(())
}

thread_local! {
    static GROUPS: std::cell::RefCell<Vec<libc::gid_t>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// While alive, the thread acts as a request's caller; dropping it returns to the daemon.
#[must_use]
pub struct AsCaller {
    switched: bool,
}

/// Takes the caller's credentials for this thread (nothing to do for root:root).
pub fn become_caller(uid: u32, gid: u32, pid: u32) -> AsCaller {
    if uid == 0 && gid == 0 {
        return AsCaller { switched: false };
    }
    if uid != 0 {
        GROUPS.with(|g| {
            let mut g = g.borrow_mut();
            if groups_of(pid, &mut g).is_none() {
                // The caller is gone or hidden: no supplementary groups, the safe side.
                g.clear();
            }
            setgroups(&g);
        });
    }
    setfsgid(gid);
    setfsuid(uid);
    ACTING.with(|a| a.set((uid, gid)));
    AsCaller { switched: true }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        if self.switched {
            let (uid, _) = ACTING.with(|a| a.get());
            setfsuid(0);
            setfsgid(0);
            if uid != 0 {
                setgroups(own_groups());
            }
            ACTING.with(|a| a.set((0, 0)));
        }
    }
}

/// Whether the thread acts as a caller other than root now.
pub fn acting_as_caller() -> bool {
    ACTING.with(|a| a.get()) != (0, 0)
}

/// Runs `f` as the daemon (root), then returns to the caller the thread was acting as.
#[inline]
pub fn as_root<T>(f: impl FnOnce() -> T) -> T {
    let (uid, gid) = ACTING.with(|a| a.get());
    if (uid, gid) == (0, 0) {
        return f();
    }
    setfsuid(0);
    setfsgid(0);
    let r = f();
    setfsgid(gid);
    setfsuid(uid);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs_ids() -> (u32, u32) {
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
        (field("Uid:"), field("Gid:"))
    }

    #[test]
    fn a_thread_acts_as_the_caller_and_returns() {
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
            let me = std::process::id();
            let _c = become_caller(1234, 5678, me);
            tx.send(()).unwrap();
            assert_eq!(other.join().unwrap(), (0, 0));
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            let me = std::process::id();
            {
                let _c = become_caller(1234, 5678, me);
                assert_eq!(fs_ids(), (1234, 5678));
                assert!(acting_as_caller());
                as_root(|| assert_eq!(fs_ids(), (0, 0)));
                assert_eq!(fs_ids(), (1234, 5678));
            }
            assert_eq!(fs_ids(), (0, 0));
            assert!(!acting_as_caller());
        })
        .join()
        .unwrap();
    }
}
