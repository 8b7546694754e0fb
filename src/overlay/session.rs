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

/// Mounts `overlay` as `cfg` says and serves it until it is unmounted, or until SIGINT or
/// SIGTERM (`signals`, blocked before any thread was started) unmount it. The control
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
    signals.handle("signals", move || {
        tracing::debug!("a termination signal: unmounting {}", target.display());
        match unmount(&target) {
            Ok(Unmounted::Now) => {}
            Ok(Unmounted::Detached) => {
                tracing::warn!("mountpoint busy; detached it (lazy unmount)")
            }
            Err(e) => tracing::error!("unmounting {}: {e}", target.display()),
        }
    })?;
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
    ran
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
