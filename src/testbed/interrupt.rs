//! ^C during a testbed run. SIGINT and SIGTERM are taken on a thread of their own, which
//! marks the run interrupted and ends the step running (a `cp`, `mkfs`, the GC, ...) by its
//! pidfd, so never a process that took a reaped child's pid. The main thread then returns an
//! error and the guards undo, in order, the filesystem's mount, the loop device, the disk
//! mount and the memory cgroup. The disk mount runs in a process group of its own
//! ([`detach_from_terminal`]): a ^C at the terminal reaches every process of the foreground
//! group at once, and the mount must keep serving the loop device until the filesystem
//! above it is unmounted.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Result};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The pidfd of the step running, for the signal thread to end it.
static RUNNING: Mutex<Option<OwnedFd>> = Mutex::new(None);
/// The control socket of the disk mount under the image, while it runs.
static DISK: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);

/// Takes the termination signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) from now on (call it
/// before any thread is started).
pub fn handle_signals() -> Result<()> {
    crate::fsutil::TerminationSignals::block().handle("testbed-signals", || {
        if !INTERRUPTED.swap(true, Ordering::SeqCst) {
            tracing::warn!(
                "interrupted: ending the step running, then unmounting the filesystem, \
                 detaching the loop device and removing the cgroup"
            );
        }
        // The disk first: every write the unmount of the filesystem makes goes through it,
        // and a slow disk (`--disk ssd,rate=1`) would hold each for its time.
        release_disk();
        end_running();
    })?;
    Ok(())
}

/// Names the disk mount's control socket (`None`: it ended), for [`release_disk`].
pub(super) fn set_disk(socket: Option<std::path::PathBuf>) {
    *DISK.lock().unwrap_or_else(|p| p.into_inner()) = socket;
}

/// Tells the disk mount to answer every held reply now and to hold none from now on.
fn release_disk() {
    let disk = DISK.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(socket) = disk.as_ref() {
        match crate::overlay::control::Client::connect(socket).and_then(|mut c| c.release_all()) {
            Ok(n) => tracing::info!("the disk mount answered {n} held replies and holds no more"),
            Err(e) => tracing::warn!("releasing the disk mount's held replies: {e:#}"),
        }
    }
}

/// Whether the run was interrupted (the command exits with 130).
pub fn was_interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// An error once the run is interrupted: checked between steps.
pub(super) fn check() -> Result<()> {
    if was_interrupted() {
        bail!("interrupted");
    }
    Ok(())
}

fn end_running() {
    let running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(fd) = running.as_ref() {
        signal_pidfd(fd, libc::SIGTERM);
    }
}

/// Sends `signal` to the process of `fd`, a pidfd: never to a process that took its pid
/// after it was reaped (a signal to one that ended is ESRCH, ignored).
fn signal_pidfd(fd: &OwnedFd, signal: i32) {
    // SAFETY: a pidfd the caller holds open.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
}

/// Runs `cmd` to its end with its output captured, as [`Command::output`] does, ended early
/// by an interrupt (then an error).
pub(super) fn output(cmd: &mut Command) -> std::io::Result<Output> {
    output_within(cmd, None)
}

/// [`output`], the process killed (SIGKILL, by its pidfd) once `limit` has passed: then an
/// error of kind `TimedOut`.
pub(super) fn output_within(
    cmd: &mut Command,
    limit: Option<std::time::Duration>,
) -> std::io::Result<Output> {
    let interrupted = || std::io::Error::new(std::io::ErrorKind::Interrupted, "interrupted");
    if was_interrupted() {
        return Err(interrupted());
    }
    // The signals are blocked here and a child inherits the mask: it would run to its end.
    crate::fsutil::unblock_termination_signals_in(cmd);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // SAFETY: pidfd_open on the pid of a child not yet reaped (its pid is still its own).
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    if fd >= 0 {
        // SAFETY: a new descriptor, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        *RUNNING.lock().unwrap_or_else(|p| p.into_inner()) = Some(fd);
        // An interrupt between the spawn and here found nothing to end.
        if was_interrupted() {
            end_running();
        }
    }
    // The watchdog holds a pidfd of its own: a pidfd names its process and never one that
    // took its pid after it was reaped.
    let (done, watch) = std::sync::mpsc::channel::<()>();
    let expired = std::sync::Arc::new(AtomicBool::new(false));
    let watchdog = limit.map(|limit| {
        // SAFETY: pidfd_open on the pid of a child not yet reaped.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
        let expired = expired.clone();
        std::thread::spawn(move || {
            if fd < 0 {
                return;
            }
            // SAFETY: a new descriptor, owned by this thread.
            let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(limit) {
                expired.store(true, Ordering::SeqCst);
                signal_pidfd(&fd, libc::SIGKILL);
            }
        })
    });
    let out = child.wait_with_output();
    let _ = done.send(());
    if let Some(w) = watchdog {
        let _ = w.join();
    }
    RUNNING.lock().unwrap_or_else(|p| p.into_inner()).take();
    if was_interrupted() {
        return Err(interrupted());
    }
    if expired.load(Ordering::SeqCst) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "still running after {:?}: killed",
                limit.unwrap_or_default()
            ),
        ));
    }
    out
}

/// Runs `f` while `child` is the step an interrupt ends (by its pidfd), for a child whose
/// output is read as it comes rather than collected by [`output`].
pub(super) fn while_running<T>(child: &std::process::Child, f: impl FnOnce() -> T) -> T {
    // SAFETY: pidfd_open on the pid of a child not yet reaped (its pid is still its own).
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    if fd >= 0 {
        // SAFETY: a new descriptor, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        *RUNNING.lock().unwrap_or_else(|p| p.into_inner()) = Some(fd);
        if was_interrupted() {
            end_running();
        }
    }
    let r = f();
    RUNNING.lock().unwrap_or_else(|p| p.into_inner()).take();
    r
}

/// `cmd` starts a process group of its own: a ^C at the terminal does not reach it.
pub(super) fn detach_from_terminal(cmd: &mut Command) -> &mut Command {
    cmd.process_group(0)
}
