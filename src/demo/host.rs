//! What the demo needs of the machine: its signals (an interrupt unmounts and stops), its
//! CPUs (the mounts pinned to one, the dense part on another), whether FUSE works, a work
//! directory on tmpfs, and the cleanup that undoes it all on every way out.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::overlay::session::{is_mounted, unmount};

pub(super) static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The mountpoint in use, for the signal thread to unmount.
pub(super) static MOUNTED: Mutex<Option<PathBuf>> = Mutex::new(None);

pub(super) fn interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

/// Whether the error is the user's interrupt (the caller exits quietly with 130).
pub fn was_interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Blocks SIGINT and SIGTERM in this process and handles them on a thread: mark the demo
/// interrupted and unmount the current mount, which makes the running GC fail at once.
pub(super) fn handle_signals() -> Result<()> {
    crate::fsutil::TerminationSignals::block().handle("demo-signals", || {
        INTERRUPTED.store(true, Ordering::SeqCst);
        tracing::warn!("interrupted; unmounting and cleaning up");
        if let Some(m) = MOUNTED.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = unmount(m);
        }
    })?;
    Ok(())
}

/// Keeps this thread (and every thread and process it starts from now on) on one CPU: the
/// first it may run on. A FUSE request is a round trip between the GC and the mount's
/// threads, and on a VM waking a thread on the other CPU costs more than the request itself
/// (BENCHMARKS.md: lru's phase 1 on `small` took 4.0 s on one CPU, 9.0 s on two). The modelled
/// costs do not depend on it; the wall column does.
pub(super) fn pin_to_one_cpu() {
    if let Some(&cpu) = allowed_cpus().first() {
        pin_to_cpu(cpu);
    }
}

/// Why a FUSE mount cannot work here, with what to do about it; `None` when it can.
pub fn fuse_unavailable() -> Option<String> {
    let dev = Path::new("/dev/fuse");
    if !dev.exists() {
        return Some(
            "/dev/fuse does not exist: load the module (modprobe fuse) or, in a container, \
             pass the device in (docker run --device /dev/fuse --cap-add SYS_ADMIN)"
                .into(),
        );
    }
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open(dev) {
        return Some(format!(
            "/dev/fuse cannot be opened ({e}): run as root, or give your user access to it"
        ));
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let fusermount = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").exists()));
    if !root && !fusermount {
        return Some(
            "not root and no fusermount3 on the PATH: run as root, or install fuse3 \
             (apt-get install fuse3)"
                .into(),
        );
    }
    if !root {
        return Some(
            "not root: the overlay opens backing files by handle, which needs root \
             (CAP_DAC_READ_SEARCH); run the demo with sudo"
                .into(),
        );
    }
    None
}

/// A temporary directory for the store and the mountpoint: tmpfs where there is one. Its
/// name carries the demo's pid (`chunkscope-demo-PID-XXXXXX`), so what a demo leaves behind,
/// if anything, is told apart from another demo's.
pub(super) fn work_dir() -> Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix(&format!("chunkscope-demo-{}-", std::process::id()))
        .tempdir_in(&base)
        .with_context(|| format!("creating a work directory in {}", base.display()))
}

/// Undoes what the demo set up, whatever way it ends: unmount, wait for the mount process,
/// unmount the store's tmpfs, remove the work directory (unless it is kept).
pub(super) struct Cleanup {
    /// The mount's process.
    pub(super) child: Option<Child>,
    /// Its mountpoint.
    pub(super) mnt: Option<PathBuf>,
    /// The store's own tmpfs, mounted in the work directory.
    pub(super) tmpfs: Option<PathBuf>,
    pub(super) work: Option<tempfile::TempDir>,
    pub(super) keep: bool,
}

impl Cleanup {
    pub(super) fn unmount(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let mnt = self.mnt.take().expect("a mountpoint with the child");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // Unmount first: a mount process that died leaves its mount behind (ENOTCONN).
            if is_mounted(&mnt) {
                let _ = unmount(&mnt);
            }
            if child.try_wait()?.is_some() && !is_mounted(&mnt) {
                break;
            }
            if Instant::now() > deadline {
                // Our own child, by its pid: it did not end after its unmount.
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "the mount process {} did not exit after unmounting {}",
                    child.id(),
                    mnt.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        *MOUNTED.lock().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(())
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = self.unmount();
        if let Some(t) = self.tmpfs.take() {
            let _ = unmount(&t);
        }
        if let Some(w) = self.work.take() {
            if self.keep {
                let _ = w.keep();
            }
        }
    }
}

/// Never set: for the simulations that have nothing to stop them but the user's interrupt.
pub(super) static NO_STOP: AtomicBool = AtomicBool::new(false);

/// The CPUs this process may run on.
pub(super) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; the calls only read and write it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// A CPU other than the one the mounts are pinned to ([`pin_to_one_cpu`]: the first
/// allowed), if there is one.
pub(super) fn other_cpu() -> Option<usize> {
    let cpus = allowed_cpus();
    (cpus.len() > 1).then(|| cpus[cpus.len() - 1])
}

/// Pins the calling thread (and the processes it starts) to `cpu`.
pub(super) fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; the calls only read and write it.
    unsafe {
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
    }
}
