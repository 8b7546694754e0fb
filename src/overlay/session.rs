//! Serving a mount: the FUSE session over an [`Overlay`], its control socket, the signals that
//! end it, and unmounting. One implementation for `chunkscope mount` and every mount the demo
//! starts (each a `chunkscope mount` process).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use fuser::{Config, MountOption, Session, SessionACL};

use super::{control, Overlay};

/// How to mount an overlay.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Where (absolute, canonical: the control socket's name is derived from it).
    pub mountpoint: PathBuf,
    /// Worker threads answering requests.
    pub threads: usize,
    /// Let other users use the mount (the kernel then checks modes: default_permissions).
    pub allow_other: bool,
    /// The control socket (default: [`control::socket_for`] the mountpoint).
    pub control: Option<PathBuf>,
    /// Where to serve the counters over HTTP for Prometheus (`/metrics`).
    pub metrics: Option<std::net::SocketAddr>,
}

/// Takes the termination signals (`signals`) on a thread of their own: each asks the mount
/// on `target` to stop; a busy one is refused and named, and a second signal within
/// [`FORCE_WINDOW`] forces it, answering every held reply first (`forced` says how far).
fn stop_on_signals(
    signals: crate::fsutil::TerminationSignals,
    target: PathBuf,
    forced_by_signal: std::sync::Arc<std::sync::atomic::AtomicU8>,
    timer: Option<std::sync::Arc<super::timer::Timer>>,
) -> Result<()> {
    let mut refused_at: Option<std::time::Instant> = None;
    signals.handle("signals", move || {
        tracing::debug!("a termination signal: unmounting {}", target.display());
        let again = refused_at.is_some_and(|t| t.elapsed() < FORCE_WINDOW);
        if again {
            // A forced stop answers every held reply first (and holds none from now on):
            // a caller waiting on a modelled delay or a stall is answered, not cut off.
            if let Some(t) = &timer {
                t.release_from_now();
            }
        }
        let forcing = || {
            // Before the connection is aborted: the session ends at once, and its end must
            // see that it was forced.
            forced_by_signal.store(FORCING, std::sync::atomic::Ordering::SeqCst);
        };
        let stopped = stop(&target, again, forcing);
        if forced_by_signal.load(std::sync::atomic::Ordering::SeqCst) == FORCING {
            forced_by_signal.store(FORCED, std::sync::atomic::Ordering::SeqCst);
        }
        match stopped {
            Ok(Stopped::Unmounted) => {}
            Ok(Stopped::Busy(holders)) => {
                refused_at = Some(std::time::Instant::now());
                tracing::warn!(
                    "not unmounting {}: it is busy ({}). Stop them first, or send \
                     SIGINT/SIGTERM again within {} s to force it (held replies are then \
                     answered, later requests fail, and the mount exits with an error)",
                    target.display(),
                    describe(&holders),
                    FORCE_WINDOW.as_secs()
                );
            }
            Ok(Stopped::Forced) => {}
            Err(e) => tracing::error!("unmounting {}: {e}", target.display()),
        }
    })?;
    Ok(())
}

/// Mounts `overlay` as `cfg` says and serves it until it is unmounted, or until a
/// termination signal (`signals`, blocked before any thread was started) unmounts it. The control
/// socket is bound before mounting (whoever sees the mount finds it) and removed after;
/// `mounted` is told the socket's path once the mount is live. On return the overlay and the
/// control thread have let go of the trace, so its writer can finish.
pub fn serve(
    overlay: Overlay,
    cfg: &MountConfig,
    signals: crate::fsutil::TerminationSignals,
    mounted: impl FnOnce(&Path),
) -> Result<()> {
    let mnt = &cfg.mountpoint;
    let shared = std::sync::Arc::new(overlay.shared());
    let socket = cfg
        .control
        .clone()
        .unwrap_or_else(|| control::socket_for(mnt));
    let socket_ino = control::serve(&socket, shared.clone())?;
    if let Some(addr) = cfg.metrics {
        #[cfg(feature = "metrics")]
        if let Err(e) = super::metrics::serve(addr, shared.clone()) {
            control::remove_if_ours(&socket, socket_ino);
            return Err(e);
        }
        #[cfg(not(feature = "metrics"))]
        anyhow::bail!("--metrics {addr}: this build has no metrics (feature `metrics`)");
    }
    let mut config = Config::default();
    config.mount_options = mount_options(&overlay.opts.store, cfg.allow_other)?;
    config.acl = if cfg.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(cfg.threads);
    super::quiet_request_panics();
    // From here on the daemon creates files only for its callers, with the modes they ask
    // for less the umask the kernel sends with each request: its own umask must not mask
    // them again. (The trace and the control socket exist already.)
    // SAFETY: plain syscall.
    let own_umask = unsafe { libc::umask(0) };
    let session = match Session::new(overlay, mnt, &config) {
        Ok(s) => s,
        Err(e) => {
            // SAFETY: plain syscall.
            unsafe { libc::umask(own_umask) };
            control::remove_if_ours(&socket, socket_ino);
            return Err(e).with_context(|| {
                format!(
                    "mounting on {} (is /dev/fuse there, and are you root?)",
                    mnt.display()
                )
            });
        }
    };
    mounted(&socket);
    let target = mnt.clone();
    // 0: not forced; FORCING: the connection is being aborted; FORCED: and the mount detached.
    let forced = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(0));
    let forced_by_signal = forced.clone();
    stop_on_signals(signals, target, forced_by_signal, shared.timer.clone())?;
    let ran = session.run().context("FUSE session");
    // The control thread's handle on the trace must go before the writer can finish.
    shared
        .trace
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    control::remove_if_ours(&socket, socket_ino);
    // SAFETY: plain syscall. The daemon's own files (--stats) get its own umask again.
    unsafe { libc::umask(own_umask) };
    // The aborted connection ends the session at once; the signal thread's detach that
    // follows must happen before this process exits (or the dead mount stays in the tree).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while forced.load(std::sync::atomic::Ordering::SeqCst) == FORCING
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    ran?;
    if forced.load(std::sync::atomic::Ordering::SeqCst) != 0 {
        anyhow::bail!(
            "{} was unmounted by force while files were open through it: their requests \
             failed",
            mnt.display()
        );
    }
    Ok(())
}

const FORCING: u8 = 1;
const FORCED: u8 = 2;

/// How long after a refused stop a second signal forces it.
pub const FORCE_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// What a stop did.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Unmounted (the session ends).
    Unmounted,
    /// Busy, left mounted: what holds it (pid, command, what it holds).
    Busy(Vec<Holder>),
    /// Busy, and forced: the connection aborted (every request fails), the mount detached.
    Forced,
}

/// A process holding something under a mountpoint open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its pid.
    pub pid: u32,
    /// Its command (`comm`).
    pub command: String,
    /// How many of its descriptors, and whether its working directory or root, are there.
    pub files: usize,
}

/// Unmounts `mnt` if nothing holds it; if something does, names it and leaves it mounted,
/// unless `force`: then logs who held it, calls `forcing`, aborts the FUSE connection
/// (`MNT_FORCE`: pending and later requests fail) and detaches it.
pub fn stop(mnt: &Path, force: bool, forcing: impl FnOnce()) -> std::io::Result<Stopped> {
    let c = std::ffi::CString::new(mnt.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return Ok(Stopped::Unmounted);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EBUSY) => {}
        // Unmounted already (a signal after the first, while the trace is finished).
        Some(libc::EINVAL) if !is_mounted(mnt) => return Ok(Stopped::Unmounted),
        _ => return Err(e),
    }
    let holders = holders_of(mnt);
    if !force {
        return Ok(Stopped::Busy(holders));
    }
    tracing::warn!(
        "forcing the unmount of {} while it is busy ({})",
        mnt.display(),
        describe(&holders)
    );
    forcing();
    // SAFETY: a valid C string. MNT_FORCE makes FUSE abort the connection; the detach then
    // takes the mount out of the tree whatever still holds it.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_FORCE) };
    // SAFETY: as above.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Stopped::Forced)
}

/// The processes with a descriptor, working directory or root under `mnt` (from `/proc`).
pub fn holders_of(mnt: &Path) -> Vec<Holder> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    let under = |link: &Path| std::fs::read_link(link).is_ok_and(|t| t.starts_with(mnt));
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let dir = p.path();
        let mut files = ["cwd", "root"]
            .iter()
            .filter(|l| under(&dir.join(l)))
            .count();
        if let Ok(fds) = std::fs::read_dir(dir.join("fd")) {
            files += fds.flatten().filter(|fd| under(&fd.path())).count();
        }
        if files > 0 {
            let command = std::fs::read_to_string(dir.join("comm"))
                .map(|c| c.trim_end().to_string())
                .unwrap_or_default();
            out.push(Holder {
                pid,
                command,
                files,
            });
        }
    }
    out
}

/// "pid 123 (chunkscope, 2 open)" for each holder, or why none is named.
fn describe(holders: &[Holder]) -> String {
    if holders.is_empty() {
        return "no process found holding it: perhaps a mount below it".into();
    }
    holders
        .iter()
        .map(|h| format!("pid {} ({}, {} open)", h.pid, h.command, h.files))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The mount's options: its name (`chunkscope:<store>`, which [`control::mount_of`] finds),
/// default_permissions for other users, and the store's own dev, suid and exec flags (a FUSE
/// mount is nodev and nosuid otherwise): a device node, a set-uid file and an executable behave
/// through the mount as they do on the store.
fn mount_options(store: &Path, allow_other: bool) -> Result<Vec<MountOption>> {
    let mut options = vec![
        MountOption::FSName(format!("chunkscope:{}", store.display())),
        MountOption::Subtype("chunkscope".into()),
    ];
    if allow_other {
        options.push(MountOption::DefaultPermissions);
    }
    let backing = crate::fsutil::mount_flags(store)
        .with_context(|| format!("statvfs {}", store.display()))?;
    let flag = |bit: libc::c_ulong| backing & bit != 0;
    options.extend([
        if flag(libc::ST_NODEV) {
            MountOption::NoDev
        } else {
            MountOption::Dev
        },
        if flag(libc::ST_NOSUID) {
            MountOption::NoSuid
        } else {
            MountOption::Suid
        },
        if flag(libc::ST_NOEXEC) {
            MountOption::NoExec
        } else {
            MountOption::Exec
        },
    ]);
    Ok(options)
}

/// How [`unmount`] unmounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmounted {
    /// At once.
    Now,
    /// It was busy: detached (a lazy unmount), gone when its last user lets go.
    Detached,
}

/// Unmounts `mnt`, or detaches it when it is busy.
pub fn unmount(mnt: &Path) -> std::io::Result<Unmounted> {
    let c = std::ffi::CString::new(mnt.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return Ok(Unmounted::Now);
    }
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(Unmounted::Detached);
    }
    Err(std::io::Error::last_os_error())
}

/// Whether a chunkscope mount is on `mnt` itself (not only above it).
pub fn is_mounted(mnt: &Path) -> bool {
    control::mount_of(mnt).is_some_and(|m| m == mnt)
}
