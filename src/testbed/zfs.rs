//! ZFS on the testbed: Debian's `zfs-fuse` (ZFS pool version 23 in a userspace daemon) with
//! its vdev on the image on the disk mount.
//!
//! zfs-fuse reads `/etc/zfs/zfsrc`, listens on `/run/zfs/zfs_socket` and locks
//! `/var/lock/zfs/zfs_lock`, each fixed in its code: one daemon a machine. The testbed's
//! daemon runs in a mount namespace of its own (`unshare(CLONE_NEWNS)`, the host's mounts
//! propagated in, none out) where its own directories are bound over those places (and
//! `/var/lib/zfs`, the pool cache's): it reads the testbed's `zfsrc`
//! (every option on its command line instead), never the system's, and a zfs-fuse daemon of
//! the host (or of another testbed) is neither seen nor touched. `zpool`, `zfs`, the
//! generator and the GC enter that namespace (`setns`) to reach the daemon and see the pool's
//! filesystem, which is mounted there only, and the host's mounts it has no use for are
//! detached there ([`foreign_mounts`]): when the daemon ends, however it ends (it also
//! gets SIGKILL when the testbed dies), its namespace and the pool's mount go with it and
//! nothing is left mounted on the host.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

/// The pool's name (private to the testbed's daemon).
pub(super) const POOL: &str = "testbed";

/// How long an export may take (it writes back what is dirty, at the disk model's pace)
/// before the daemon is killed and the run fails naming it.
pub(super) const EXPORT_LIMIT: Duration = Duration::from_secs(600);

/// How long an export refused as busy is asked again (see [`Daemon::export`]): as long as an
/// export may take, since the daemon writes back what is dirty before it lets go.
const BUSY_LIMIT: Duration = EXPORT_LIMIT;

/// One run of a `zpool` command: its success, exit status and what it printed to stderr.
struct Attempt {
    ok: bool,
    status: String,
    stderr: String,
}

/// Runs `attempt` until it succeeds, fails otherwise than "is busy", or has been refused as
/// busy for `limit` (`pause` between tries); the error names the last refusal and how long
/// it was asked.
fn retry_while_busy(
    mut attempt: impl FnMut() -> Result<Attempt>,
    limit: Duration,
    pause: Duration,
) -> Result<()> {
    let start = Instant::now();
    let mut tries = 0u32;
    loop {
        let a = attempt()?;
        tries += 1;
        if a.ok {
            return Ok(());
        }
        if !a.stderr.contains("is busy") {
            bail!("failed ({}): {}", a.status, a.stderr);
        }
        if start.elapsed() >= limit {
            bail!(
                "failed ({}): {} (refused as busy {tries} times over {:.1} s: something \
                 still holds the pool's filesystem)",
                a.status,
                a.stderr,
                start.elapsed().as_secs_f64()
            );
        }
        if tries == 1 {
            tracing::debug!("{}: asked again", a.stderr);
        }
        std::thread::sleep(pause);
        super::interrupt::check()?;
    }
}

/// The daemon's and the pool's settings, each stated in the report.
#[derive(Clone, Debug, Serialize)]
pub struct ZfsSettings {
    /// The ARC's maximum, MiB (`--max-arc-size`; the testbed's `--memory`, 16 at least);
    /// `None`: zfs-fuse's own default.
    pub arc_mib: Option<u64>,
    /// zfs-fuse's vdev cache, MiB (`--vdev-cache-size`; its default 10): reads under 16 KiB
    /// widened to 64 KiB and kept. 0 on the testbed: OpenZFS, what PBS runs, has had it off
    /// since 0.7 and removed it in 2.2.
    pub vdev_cache_mib: u64,
    /// The kernel's FUSE attribute and entry timeouts, seconds: how long the kernel keeps
    /// what the daemon answered to a lookup or a getattr (the VFS caches of a kernel ZFS keep
    /// them until memory is reclaimed).
    pub fuse_timeout_s: u64,
    /// The pool's sector size, log2 bytes (`-o ashift`).
    pub ashift: u8,
    /// The dataset's record size.
    pub recordsize: &'static str,
    /// The dataset's compression.
    pub compression: &'static str,
    /// ZFS's file-level prefetch (zfetch) is on, as in OpenZFS by default.
    pub prefetch: bool,
    /// zfs-fuse runs with `--disable-block-cache`, but reads a file vdev without O_DIRECT
    /// all the same (its descriptor's flags: 02100002); the disk mount keeps no page of the
    /// image (`mount --direct-io`), so every read zfs-fuse makes reaches the disk model as it
    /// made it, with no readahead or page cache between.
    pub direct_io: bool,
}

/// What the testbed's pool is beyond the model it starts from (BENCHMARKS.md, "ZFS on the
/// testbed"): ZFS as the testbed makes it (`atime=on`, so a listing updates the directory's
/// atime; `ashift=12`, lzjb-compressed metadata read a sector at a time; ditto copies of
/// every metadata block, written copy-on-write; fat ZAPs for 64-character names), and
/// zfs-fuse's own: pool version 23 keeps metadata to a quarter of the ARC
/// (`arc_meta_limit`), its next transaction group closes 5 s after the previous sync's
/// writes end or once its dirty data reaches the pool's write limit (the device's write
/// bursts on the testbed), and its readdir gives no entry types (the GC's layout check
/// stats every chunk directory).
pub(super) fn model(p: &mut crate::model::ModelParams, settings: &ZfsSettings) {
    p.metadata_limit = 0.25;
    p.dir_atime = true;
    p.read_bytes = 1 << settings.ashift;
    p.cow_copies = 2;
    p.txg_after_sync = true;
    // Fitted on naive's writes at a 64 MiB ARC (BENCHMARKS.md, "A group closes on its dirty
    // blocks"): 21 syncs from its phase 1's start to its sweep's end (the uberblock's
    // writes), 455 device writes each, two copies of each block: 228 blocks a sync, of which
    // 150 dirty (the model dirties about 3,000 blocks in that run: 21 groups of ~150) and 78 the
    // allocation's own. Checked on the other strategies and, three rounds, at 256 MiB.
    p.sync_dirty_blocks = 150;
    p.cow_sync_extra_blocks = 78;
    p.readdir_without_types = true;
    if p.zap_leaf_entries == 0 {
        p.zap_leaf_entries = 75;
    }
}

impl ZfsSettings {
    /// The testbed's settings for a GC memory limit of `memory_bytes` (0: none).
    pub(super) fn for_memory(memory_bytes: u64) -> ZfsSettings {
        ZfsSettings {
            arc_mib: (memory_bytes > 0).then(|| (memory_bytes >> 20).clamp(16, 16384)),
            vdev_cache_mib: 0,
            fuse_timeout_s: 3600,
            ashift: 12,
            recordsize: "128K",
            compression: "off",
            prefetch: true,
            direct_io: true,
        }
    }

    /// zfs-fuse's command line for these settings.
    pub(super) fn daemon_args(&self) -> Vec<String> {
        let mut a: Vec<String> = ["--no-daemon", "--no-kstat-mount"]
            .map(String::from)
            .to_vec();
        if self.direct_io {
            a.push("--disable-block-cache".into());
        }
        if !self.prefetch {
            a.push("--zfs-prefetch-disable".into());
        }
        if let Some(m) = self.arc_mib {
            a.extend(["--max-arc-size".into(), m.to_string()]);
        }
        a.extend([
            "--vdev-cache-size".into(),
            self.vdev_cache_mib.to_string(),
            "--fuse-attr-timeout".into(),
            self.fuse_timeout_s.to_string(),
            "--fuse-entry-timeout".into(),
            self.fuse_timeout_s.to_string(),
        ]);
        a
    }

    /// `zpool create`'s arguments for a pool on `vdev` mounted on `mountpoint`.
    pub(super) fn create_args(&self, vdev: &Path, mountpoint: &Path) -> Vec<std::ffi::OsString> {
        let mut a: Vec<std::ffi::OsString> = vec![
            "create".into(),
            "-o".into(),
            format!("ashift={}", self.ashift).into(),
            "-o".into(),
            "cachefile=none".into(),
            "-O".into(),
            "atime=on".into(),
            "-O".into(),
            format!("recordsize={}", self.recordsize).into(),
            "-O".into(),
            format!("compression={}", self.compression).into(),
        ];
        let mut mp = std::ffi::OsString::from("mountpoint=");
        mp.push(mountpoint);
        a.extend(["-O".into(), mp, POOL.into(), vdev.into()]);
        a
    }
}

/// A zfs-fuse daemon of the testbed's, in a mount namespace of its own: stopped on drop
/// (SIGTERM, SIGKILL after 10 s) and reaped.
pub(super) struct Daemon {
    child: Option<Child>,
    /// Its mount namespace (`/proc/PID/ns/mnt`), for the commands that enter it.
    ns: std::fs::File,
    log: PathBuf,
    imported: bool,
}

/// The places zfs-fuse's code names, each bound over by a directory of the testbed's in the
/// daemon's namespace: its configuration (`zfsrc`), its socket, its lock (one daemon a
/// machine otherwise) and its pool cache.
const PRIVATE: [(&str, &str); 4] = [
    ("etc", "/etc/zfs"),
    ("run", "/run/zfs"),
    ("lock", "/run/lock/zfs"),
    ("lib", "/var/lib/zfs"),
];

/// Prepared before the fork: the pre-exec code may not allocate.
struct NsPaths {
    root: CString,
    /// Mounts of the host's to detach in the namespace, deepest first.
    foreign: Vec<CString>,
    binds: Vec<(CString, CString)>,
}

/// The system's own places, whose kernel filesystems the namespace keeps.
const SYSTEM: [&str; 4] = ["/proc", "/sys", "/dev", "/run"];

/// The kernel's own filesystems, kept wherever they are mounted below [`SYSTEM`].
const KERNEL_FS: [&str; 19] = [
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "mqueue",
    "cgroup",
    "cgroup2",
    "securityfs",
    "debugfs",
    "tracefs",
    "pstore",
    "bpf",
    "configfs",
    "fusectl",
    "hugetlbfs",
    "binfmt_misc",
    "autofs",
    "efivarfs",
    "nsfs",
];

/// The tmpfs places the system itself mounts below [`SYSTEM`].
const SYSTEM_TMPFS: [&str; 3] = ["/dev/shm", "/run/lock", "/sys/fs/cgroup"];

/// Whether `m` is the system's own: a [`SYSTEM`] place itself, a kernel filesystem below
/// one, or the system's tmpfs at its place. Anything else below them (a FUSE mount or a
/// tmpfs in a directory of `/dev/shm`, a disk mounted under `/run/media`) is not: the demo
/// mounts its store and its overlay in `/dev/shm`.
fn system_mount(m: &crate::fsutil::MountEntry) -> bool {
    let p = m.point.as_path();
    SYSTEM.iter().any(|s| p == Path::new(s))
        || (SYSTEM.iter().any(|s| p.starts_with(s))
            && (KERNEL_FS.contains(&m.fstype.as_str())
                || (m.fstype == "tmpfs" && SYSTEM_TMPFS.iter().any(|s| p == Path::new(s)))))
}

/// The mount points of `mounts` that the daemon's namespace has no use for, deepest first:
/// all but the root, the system's own ([`system_mount`]) and the mounts that hold one of
/// `needed` (a mount on `needed` itself or on a directory above it). A new namespace is a
/// copy of every mount there is; where the host's mounts do not propagate (a private root,
/// as in containers) each copy would hold its filesystem until the daemon ends, after the
/// host unmounted it: another testbed's disk mount (whose unmount then waits for this
/// daemon), a demo's FUSE mount (whose process then never ends), an admin's USB disk.
pub(super) fn foreign_mounts(
    mounts: &[crate::fsutil::MountEntry],
    needed: &[&Path],
) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = mounts
        .iter()
        .filter(|m| {
            m.point != Path::new("/")
                && !system_mount(m)
                && !needed.iter().any(|n| n.starts_with(&m.point))
        })
        .map(|m| m.point.clone())
        .collect();
    v.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    v.dedup();
    v
}

impl Daemon {
    /// Starts the daemon with `settings`, its own `zfsrc`, socket and log under `dir`.
    /// `needed`: the places the daemon and the commands entering its namespace use (the
    /// image's disk mount, the testbed's OUT, chunkscope itself); the mounts holding them
    /// are kept in the namespace, the host's others detached there.
    pub(super) fn start(dir: &Path, settings: &ZfsSettings, needed: &[&Path]) -> Result<Daemon> {
        let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).context("a path with a NUL");
        let mut needed = needed.to_vec();
        let tools: Vec<PathBuf> = [
            "/usr",
            "/etc",
            "/lib",
            "/lib64",
            "/bin",
            "/sbin",
            "/var/lib/zfs",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        needed.extend(tools.iter().map(PathBuf::as_path));
        let mounts = crate::fsutil::mounts().context("reading /proc/self/mountinfo")?;
        let mut ns = NsPaths {
            root: CString::new("/")?,
            foreign: foreign_mounts(&mounts, &needed)
                .iter()
                .map(|p| c(p))
                .collect::<Result<_>>()?,
            binds: Vec::new(),
        };
        for (own, place) in PRIVATE {
            let own = dir.join(own);
            std::fs::create_dir_all(&own).with_context(|| format!("creating {}", own.display()))?;
            // The place bound over, made when missing (an empty directory, as the package's
            // own service makes it).
            std::fs::create_dir_all(place).with_context(|| format!("creating {place}"))?;
            ns.binds.push((c(&own)?, c(Path::new(place))?));
        }
        let etc = dir.join("etc");
        std::fs::write(
            etc.join("zfsrc"),
            "# chunkscope testbed: zfs-fuse's options are all on its command line \
             (report.json: zfs.daemon_args)\n",
        )
        .with_context(|| format!("writing {}", etc.join("zfsrc").display()))?;
        let socket = dir.join("run/zfs_socket");
        let _ = std::fs::remove_file(&socket);
        let log = dir.join("daemon.log");
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new("zfs-fuse");
        cmd.args(settings.daemon_args())
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        super::interrupt::detach_from_terminal(&mut cmd);
        crate::fsutil::unblock_termination_signals_in(&mut cmd);
        isolate(&mut cmd, ns);
        let mut child = cmd
            .spawn()
            .context("starting zfs-fuse (Debian's zfs-fuse: apt-get install zfs-fuse)")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            if let Ok(Some(st)) = child.try_wait() {
                bail!(
                    "zfs-fuse exited at its start ({st}): {}",
                    log_tail(&log).unwrap_or_default()
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "zfs-fuse made no socket in 30 s: {}",
                    log_tail(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let ns_path = format!("/proc/{}/ns/mnt", child.id());
        let ns = match std::fs::File::open(&ns_path) {
            Ok(f) => f,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("opening {ns_path}: {e}");
            }
        };
        let pid = child.id();
        let d = Daemon {
            child: Some(child),
            ns,
            log,
            imported: false,
        };
        if same_file(&d.ns, "/proc/self/ns/mnt") {
            bail!("zfs-fuse runs in the testbed's own mount namespace, not one of its own");
        }
        // A mount the host made after its mounts were read above, before the daemon's
        // unshare, was copied in and not detached (another test's FUSE mount, whose process
        // would then wait for this daemon to end): detached now, the binds kept.
        let info = format!("/proc/{pid}/mountinfo");
        let text = std::fs::read_to_string(&info).with_context(|| format!("reading {info}"))?;
        needed.extend(PRIVATE.iter().map(|(_, place)| Path::new(place)));
        let stray = foreign_mounts(&crate::fsutil::parse_mountinfo(&text), &needed);
        if !stray.is_empty() {
            let mut umount = Command::new("umount");
            umount.arg("-l").args(&stray).stderr(Stdio::null());
            // Best effort: one that went meanwhile is an error of umount's, and no harm.
            let _ = super::command(d.enter(&mut umount));
        }
        Ok(d)
    }

    /// `cmd` runs in the daemon's mount namespace (its pool's filesystem, its socket).
    pub(super) fn enter<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        let fd = self.ns.as_raw_fd();
        // SAFETY: setns (a system call) between fork and exec, on a descriptor this daemon
        // guard holds open; a forked child shares no filesystem context, as setns requires.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNS) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    /// Runs `program args` in the namespace to its end.
    pub(super) fn run<S: AsRef<std::ffi::OsStr>>(
        &mut self,
        program: &str,
        args: impl IntoIterator<Item = S>,
    ) -> Result<()> {
        let mut cmd = Command::new(program);
        cmd.args(args);
        let r = super::command(self.enter(&mut cmd));
        self.check_alive()?;
        r
    }

    /// Creates the pool on `vdev`, its root dataset mounted on `mountpoint`.
    pub(super) fn create(
        &mut self,
        settings: &ZfsSettings,
        vdev: &Path,
        mountpoint: &Path,
    ) -> Result<()> {
        self.run("zpool", settings.create_args(vdev, mountpoint))?;
        self.imported = true;
        Ok(())
    }

    /// Imports the pool from the image files in `dir`.
    pub(super) fn import(&mut self, dir: &Path) -> Result<()> {
        let mut a: Vec<std::ffi::OsString> = vec!["import".into(), "-d".into()];
        a.extend([dir.as_os_str().to_owned(), POOL.into()]);
        self.run("zpool", a)?;
        self.imported = true;
        Ok(())
    }

    /// Exports the pool (its write-back done) within [`EXPORT_LIMIT`]. zfs-fuse's `zpool
    /// export` unmounts the pool's filesystem with umount(8) and asks the daemon to export at
    /// once, but the daemon lets go of the filesystem only once its FUSE listener has seen the
    /// connection end and has written back what is dirty and unmounted (`zfsfuse_destroy`:
    /// `VFS_SYNC`, then `VFS_UNMOUNT`), at the disk model's pace: until then the export is
    /// refused ("pool is busy"). Asked again while it says so, for [`BUSY_LIMIT`]. Seen in
    /// CI beside other tests, and after prefetch's GC at a 256 MiB ARC with nothing else
    /// running.
    pub(super) fn export(&mut self) -> Result<()> {
        let shown = format!("{:?}", Command::new("zpool").args(["export", POOL]));
        let log = self.log.clone();
        let attempt = || {
            let mut cmd = Command::new("zpool");
            cmd.args(["export", POOL]);
            self.enter(&mut cmd);
            let o = super::interrupt::output_within(&mut cmd, Some(EXPORT_LIMIT)).map_err(|e| {
                if e.kind() == std::io::ErrorKind::TimedOut {
                    anyhow::anyhow!(
                        "{shown} hung ({e}): the daemon is stopped without it and the run \
                         fails; its log: {}",
                        log.display()
                    )
                } else {
                    anyhow::anyhow!("running {shown}: {e}")
                }
            })?;
            Ok(Attempt {
                ok: o.status.success(),
                status: o.status.to_string(),
                stderr: String::from_utf8_lossy(&o.stderr).trim().to_owned(),
            })
        };
        retry_while_busy(attempt, BUSY_LIMIT, Duration::from_millis(250)).with_context(|| {
            let held = holders_of_pool_mounts();
            if held.is_empty() {
                shown.clone()
            } else {
                format!(
                    "{shown} (a mount of a pool named {POOL} held by: {})",
                    held.join("; ")
                )
            }
        })?;
        self.imported = false;
        Ok(())
    }

    /// The block map of the pool on the image files in `dir` (exported), from `zdb -ddddd`
    /// read as it prints (tens of MB for the tiny preset's 68,000 objects: minutes of one
    /// CPU); zdb's errors go to `log`.
    pub(super) fn block_map(
        &mut self,
        dir: &Path,
        device_bytes: u64,
        log: &Path,
    ) -> Result<crate::analysis::zfs_blocks::BlockMap> {
        let err =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new("zdb");
        cmd.arg("-e")
            .arg("-p")
            .arg(dir)
            .args(["-ddddd", POOL])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err);
        crate::fsutil::unblock_termination_signals_in(&mut cmd);
        let shown = format!("{cmd:?}");
        let mut child = self
            .enter(&mut cmd)
            .spawn()
            .with_context(|| format!("running {shown}"))?;
        let stdout = child.stdout.take().expect("piped");
        let map = super::interrupt::while_running(&child, || {
            crate::analysis::zfs_blocks::BlockMap::from_zdb(
                std::io::BufReader::with_capacity(1 << 20, stdout),
                device_bytes,
            )
        });
        let st = child.wait()?;
        super::interrupt::check()?;
        if !st.success() {
            bail!("{shown} failed ({st}): see {}", log.display());
        }
        map.with_context(|| format!("reading the output of {shown}"))
    }

    /// An error naming the daemon's end if it has ended.
    pub(super) fn check_alive(&mut self) -> Result<()> {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                self.child = None;
                bail!(
                    "zfs-fuse died ({st}): {}",
                    log_tail(&self.log).unwrap_or_default()
                );
            }
        }
        Ok(())
    }

    /// Stops the daemon (the pool exported first) and waits for it.
    pub(super) fn stop(mut self) -> Result<()> {
        if self.imported {
            self.export()?;
        }
        match self.end(Duration::from_secs(30)) {
            // It had ended before it was told to.
            Some((st, false)) => bail!(
                "zfs-fuse died ({st}): {}",
                log_tail(&self.log).unwrap_or_default()
            ),
            // zfs-fuse exits with 1 on SIGTERM, its way of stopping.
            _ => Ok(()),
        }
    }

    /// SIGTERM, then SIGKILL after `grace`; the daemon reaped. Its status, and whether it
    /// was still running when told to end.
    fn end(&mut self, grace: Duration) -> Option<(std::process::ExitStatus, bool)> {
        let mut c = self.child.take()?;
        if let Ok(Some(st)) = c.try_wait() {
            return Some((st, false));
        }
        // SAFETY: our child, not reaped yet: its pid is its own.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + grace;
        loop {
            match c.try_wait() {
                Ok(Some(st)) => return Some((st, true)),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    tracing::warn!("zfs-fuse did not end on SIGTERM: killing it");
                    let _ = c.kill();
                    return c.wait().ok().map(|st| (st, true));
                }
            }
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.end(Duration::from_secs(10));
    }
}

/// `cmd`'s process enters a mount namespace of its own before it executes: the host's mounts
/// it has no use for detached, the testbed's directories bound over zfs-fuse's fixed places,
/// and SIGKILL when the testbed dies.
fn isolate(cmd: &mut Command, ns: NsPaths) {
    // SAFETY: only system calls (unshare, mount, prctl) between fork and exec, on
    // strings made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let ok = |r: libc::c_int| {
                if r == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            };
            let none = std::ptr::null::<libc::c_char>();
            ok(libc::unshare(libc::CLONE_NEWNS))?;
            // The host's mounts (the disk mount) reach the namespace; none of its own
            // reach the host.
            ok(libc::mount(
                none,
                ns.root.as_ptr(),
                none,
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ))?;
            // A mount detached with its parent before is EINVAL here: nothing to do.
            for point in &ns.foreign {
                libc::umount2(point.as_ptr(), libc::MNT_DETACH);
            }
            for (src, dst) in &ns.binds {
                ok(libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    none,
                    libc::MS_BIND,
                    std::ptr::null(),
                ))?;
            }
            // The daemon ends with the testbed, even a testbed killed by SIGKILL.
            ok(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL))?;
            Ok(())
        });
    }
}

/// Every process whose mount namespace holds a zfs-fuse mount of a pool named [`POOL`]
/// (this testbed's or another's): `pid (comm): mount point`, for an export that stays busy.
fn holders_of_pool_mounts() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for e in dir.filter_map(|e| e.ok()) {
        let pid = e.file_name().to_string_lossy().into_owned();
        if pid.parse::<u32>().is_err() {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path().join("mountinfo")) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        for m in crate::fsutil::parse_mountinfo(&text) {
            if m.source == POOL && m.fstype.starts_with("fuse") {
                found.push(format!("{pid} ({}): {}", comm.trim(), m.point.display()));
            }
        }
    }
    found
}

fn same_file(f: &std::fs::File, other: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (f.metadata(), std::fs::metadata(other)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The last lines of the daemon's log.
fn log_tail(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join(" / ");
    Some(if tail.is_empty() {
        format!("{} is empty", log.display())
    } else {
        format!("{}: {tail}", log.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(stderr: &str) -> Attempt {
        Attempt {
            ok: false,
            status: "exit status: 1".into(),
            stderr: stderr.into(),
        }
    }

    /// Stop 68's CI: zfs-fuse's daemon lets go of an unmounted filesystem once it has written
    /// it back, and an export asked before then is refused as busy: asked again,
    /// it succeeds; any other failure is not asked again; a refusal that lasts is an error
    /// that says how long it was asked.
    #[test]
    fn an_export_refused_as_busy_is_asked_again_and_no_other_failure_is() {
        let mut n = 0;
        let r = retry_while_busy(
            || {
                n += 1;
                Ok(if n < 3 {
                    refused("cannot export 'testbed': pool is busy")
                } else {
                    Attempt {
                        ok: true,
                        status: "exit status: 0".into(),
                        stderr: String::new(),
                    }
                })
            },
            Duration::from_secs(60),
            Duration::ZERO,
        );
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(n, 3);

        let mut n = 0;
        let e = retry_while_busy(
            || {
                n += 1;
                Ok(refused("cannot open 'testbed': no such pool"))
            },
            Duration::from_secs(60),
            Duration::ZERO,
        )
        .unwrap_err();
        assert_eq!(n, 1);
        assert!(format!("{e}").contains("no such pool"), "{e}");

        let mut n = 0;
        let e = retry_while_busy(
            || {
                n += 1;
                Ok(refused("cannot export 'testbed': pool is busy"))
            },
            Duration::from_millis(20),
            Duration::from_millis(5),
        )
        .unwrap_err();
        assert!(n >= 2, "{n}");
        let e = format!("{e}");
        assert!(
            e.contains("pool is busy") && e.contains(&format!("{n} times")),
            "{e}"
        );
    }

    fn entry(point: &str, fstype: &str) -> crate::fsutil::MountEntry {
        crate::fsutil::MountEntry {
            id: 0,
            parent: 0,
            dev: String::new(),
            point: point.into(),
            fstype: fstype.into(),
            source: String::new(),
        }
    }

    #[test]
    fn the_namespace_keeps_the_root_the_system_and_what_holds_a_needed_place() {
        let mounts: Vec<_> = [
            ("/", "ext4"),
            ("/proc", "proc"),
            ("/sys/fs/cgroup", "tmpfs"),
            ("/sys/fs/cgroup/memory", "cgroup"),
            ("/dev", "devtmpfs"),
            ("/dev/pts", "devpts"),
            ("/dev/shm", "tmpfs"),
            ("/dev/shm", "tmpfs"),
            // A demo's store and overlay, in /dev/shm: not the system's.
            ("/dev/shm/chunkscope-demo-1-x/store-fs", "tmpfs"),
            ("/dev/shm/chunkscope-demo-1-x/mnt", "fuse.chunkscope"),
            ("/run", "tmpfs"),
            ("/run/user/1000", "tmpfs"),
            ("/run/user/1000/gvfs", "fuse.gvfsd-fuse"),
            ("/run/media/usb", "vfat"),
            ("/tmp", "tmpfs"),
            ("/tmp/a/tb/backing", "tmpfs"),
            ("/tmp/a/tb/disk", "fuse.chunkscope"),
            ("/tmp/b/tb/backing", "tmpfs"),
            ("/tmp/b/tb/disk", "fuse.chunkscope"),
            ("/tmp/b/tb/disk/deeper", "ext4"),
            ("/media/usb", "vfat"),
            ("/usr", "ext4"),
        ]
        .iter()
        .map(|(p, t)| entry(p, t))
        .collect();
        let got = foreign_mounts(
            &mounts,
            &[
                Path::new("/tmp/a/tb/disk/vdev"),
                Path::new("/tmp/a/tb"),
                Path::new("/usr/sbin"),
            ],
        );
        assert_eq!(
            got,
            [
                "/tmp/b/tb/disk/deeper",
                "/dev/shm/chunkscope-demo-1-x/store-fs",
                "/dev/shm/chunkscope-demo-1-x/mnt",
                "/run/user/1000/gvfs",
                "/tmp/a/tb/backing",
                "/tmp/b/tb/backing",
                "/tmp/b/tb/disk",
                // A user's runtime directory: the daemon has no use for it either.
                "/run/user/1000",
                "/run/media/usb",
                "/media/usb",
            ]
            .map(PathBuf::from)
        );
    }
}
