//! The testbed: the cost model's predictions checked against a real filesystem on an
//! emulated disk, in one command.
//!
//! ```text
//! OUT/backing/disk.img ── chunkscope mount --disk SPEC --trace OUT/S.trace ──▶ OUT/disk
//!        (the image)        (every read and write of the image held as the disk would)
//!                                                  │ losetup --direct-io=on
//!                                                  ▼
//!                                   /dev/loopN ── mkfs.ext4|xfs|btrfs, mounted on OUT/fs
//!                                                  │ chunkscope gen (once, then the image is
//!                                                  ▼ kept as OUT/backing/golden.img)
//!                                   OUT/fs/store ── chunkscope gc --strategy S, cold, in a
//!                                                   memory cgroup (a bounded page cache)
//! ```
//!
//! Per strategy: the image restored from the golden copy, the disk mount started with a trace
//! of its own, the loop device attached with direct I/O (so every block the filesystem reads
//! reaches the disk model), the filesystem mounted, the caches dropped, the GC run with its
//! phase markers written into the disk's trace (`gc --mark-mount`). The report puts side by
//! side, per strategy and phase: the GC's measured time and the device's reads (and re-reads
//! of blocks read before in the same run: what memory reclaim evicted), and the model's
//! prediction for the store (`simulate --store` with the same cache). Everything is built
//! and torn down by guards that undo on drop, on error and on panic.

mod guards;
mod host;
mod interrupt;
mod report;
mod zfs;

pub use interrupt::{handle_signals, was_interrupted};
pub use report::{
    ranking_agrees, table, Calibrated, PhaseResult, Report, RunResult, Surveyed, ZfsReport, TIE,
};
pub use zfs::ZfsSettings;

use guards::{Cgroup, DiskMount, FsMount, Loop};
use host::{drop_caches, host_io_ns};
use report::{rank, ranking_agrees_by};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::gc::Strategy;

/// A filesystem the testbed can build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Fs {
    /// ext4 (`mkfs.ext4`).
    Ext4,
    /// XFS (`mkfs.xfs`, xfsprogs).
    Xfs,
    /// Btrfs (`mkfs.btrfs`, btrfs-progs).
    Btrfs,
    /// ZFS (Debian's zfs-fuse: pool version 23 in a userspace daemon, its vdev the image).
    Zfs,
}

impl Fs {
    /// Its mkfs and the testbed's own options to it (ZFS: `zpool create`, see [`zfs`]).
    fn mkfs(self) -> Option<(&'static str, &'static [&'static str])> {
        match self {
            Fs::Ext4 => Some(("mkfs.ext4", &["-q", "-F"])),
            Fs::Xfs => Some(("mkfs.xfs", &["-q", "-f"])),
            Fs::Btrfs => Some(("mkfs.btrfs", &["-q", "-f"])),
            Fs::Zfs => None,
        }
    }

    /// The tools it needs beyond the testbed's own, with the Debian package of each.
    fn tools(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Fs::Ext4 => vec![("mkfs.ext4", "e2fsprogs")],
            Fs::Xfs => vec![("mkfs.xfs", "xfsprogs")],
            Fs::Btrfs => vec![("mkfs.btrfs", "btrfs-progs")],
            Fs::Zfs => vec![
                ("zfs-fuse", "zfs-fuse"),
                ("zpool", "zfs-fuse"),
                ("zfs", "zfs-fuse"),
            ],
        }
    }

    fn name(self) -> &'static str {
        match self {
            Fs::Ext4 => "ext4",
            Fs::Xfs => "xfs",
            Fs::Btrfs => "btrfs",
            Fs::Zfs => "zfs",
        }
    }

    /// The image's place under the backing directory: ZFS's in a directory of its own,
    /// which `zpool import -d` searches (the golden copy beside it would be a second pool).
    fn image_in_backing(self) -> &'static str {
        match self {
            Fs::Zfs => "vdev/disk.img",
            _ => "disk.img",
        }
    }
}

/// What to build and run.
#[derive(Clone, Debug, Serialize)]
pub struct TestbedOptions {
    /// The working directory (created; the image, traces and the report go here).
    pub out: PathBuf,
    /// The filesystem under the store.
    pub fs: Fs,
    /// The generator's preset and seed for the store.
    pub preset: String,
    /// The generator's seed.
    pub seed: u64,
    /// The disk model (`mount --disk`), e.g. `hdd-7200`.
    pub disk: String,
    /// The image's size, bytes.
    pub image_bytes: u64,
    /// The GC's memory limit (its page cache included), bytes; 0: none.
    pub memory_bytes: u64,
    /// The strategies, run in this order.
    pub strategies: Vec<Strategy>,
    /// The cost model whose predictions are compared (`--model` of `simulate`).
    pub model: String,
    /// The strategy whose task log `calibrate` fits the model to (its cache and read time,
    /// from the base model with the testbed's disk), to predict every strategy from that.
    pub calibrate_on: Option<Strategy>,
    /// Options given to the filesystem's mkfs beyond the testbed's own (`-d agcount=7`, ...).
    pub mkfs_options: Vec<String>,
    /// On zfs: map the golden image's blocks with `zdb` and name what each device request
    /// of every phase touched (minutes of one CPU for the tiny preset).
    pub name_reads: bool,
    /// Runs of every strategy (the measured figures are their medians).
    pub repeat: u32,
}

/// Builds the testbed in `o.out`, runs every strategy, writes `report.json` there and
/// returns the report.
pub fn run(o: &TestbedOptions, exe: &Path) -> Result<Report> {
    check_tools(o.fs)?;
    std::fs::create_dir_all(&o.out).with_context(|| format!("creating {}", o.out.display()))?;
    let out = o.out.canonicalize()?;
    let _own = guards::OutLock::take(&out)?;
    let bed = Bed {
        exe,
        fs: o.fs,
        backing: out.join("backing"),
        disk_mnt: out.join("disk"),
        fs_dir: out.join("fs"),
        out,
    };
    for d in [&bed.backing, &bed.disk_mnt, &bed.fs_dir] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    // The image and its golden copy in memory where they fit: the disk model's times are
    // then all the disk there is (a direct read of an image on this VM's own disk costs
    // 60-160 us of real I/O, varying with what the host has cached, beside the model's).
    let backing_bytes = 2 * o.image_bytes + (64 << 20);
    let in_memory = crate::fsutil::available_memory()
        .is_some_and(|m| m > backing_bytes + o.memory_bytes + (2 << 30));
    let _tmpfs = in_memory
        .then(|| FsMount::tmpfs(&bed.backing, backing_bytes))
        .transpose()?;
    let (predicted, host_io_ns) = bed.build(o)?;
    let (mut runs, chunks) = bed.run_rounds(o, &predicted)?;
    let block_map = name_reads(&bed, o, &mut runs)?;
    let calibrated = match o.calibrate_on {
        Some(on) => Some(bed.calibrate(o, on, &mut runs)?),
        None => None,
    };
    let out = bed.out;
    let rank = |f: &dyn Fn(&RunResult) -> f64| rank(&runs, f);
    let report = Report {
        options: o.clone(),
        chunks,
        ranking_agrees: ranking_agrees(&runs),
        model_file: out.join("model.json"),
        host_io_ns,
        image_in_memory: in_memory,
        survey: out.join("store.survey"),
        surveyed: {
            let path = out.join("store.survey.json");
            let mut s: Surveyed = serde_json::from_slice(
                &std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?,
            )
            .with_context(|| format!("{}: not the survey's report", path.display()))?;
            let file = out.join("store.survey");
            s.placement = crate::survey::file::SurveyFile::read(&file)
                .with_context(|| format!("reading {}", file.display()))?
                .header
                .placement;
            s
        },
        calibrated,
        measured_ranking: rank(&|r| r.phases[0].measured_s),
        predicted_ranking: rank(&|r| r.phases[0].predicted_s),
        runs,
        block_map,
        zfs: (o.fs == Fs::Zfs).then(|| {
            let settings = ZfsSettings::for_memory(o.memory_bytes);
            ZfsReport {
                daemon_args: settings.daemon_args(),
                create_args: settings
                    .create_args(
                        &out.join("disk").join(Fs::Zfs.image_in_backing()),
                        &out.join("fs"),
                    )
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
                settings,
            }
        }),
        notes: notes(o, host_io_ns, in_memory),
    };
    crate::fsutil::write_whole(&out.join("report.json"), |f| {
        serde_json::to_writer_pretty(&mut *f, &report)?;
        f.write_all(b"\n")
    })
    .context("writing report.json")?;
    Ok(report)
}

/// The report's notes: what bounds the caches and what a device read costs the host, as the
/// run's filesystem has them.
fn notes(o: &TestbedOptions, host_io_ns: u64, in_memory: bool) -> Vec<String> {
    let memory = crate::units::human_bytes(o.memory_bytes);
    let image = if in_memory {
        "in memory (a tmpfs)"
    } else {
        "on this machine's disk, whose own reads add 60-160 us each, varying with what the \
         host has cached: too little memory for a tmpfs"
    };
    let io = crate::units::duration_ns(host_io_ns);
    if o.fs == Fs::Zfs {
        return vec![
            format!(
                "The pool's cache is zfs-fuse's ARC, --max-arc-size {memory} (pool version 23 \
                 keeps metadata to a quarter of it), in the daemon; the GC runs in a memory \
                 cgroup of the same size; the model's cache is set to the ARC's size."
            ),
            "zfs-fuse reads its image through the disk mount with direct I/O: no page cache \
             stands between the pool and the disk model; device_rereads counts blocks the ARC \
             read again within a run."
                .into(),
            format!(
                "A device read through zfs-fuse and the disk mount costs the host {io} beyond \
                 the disk model's time (measured before the runs, with a roomy ARC: the model's \
                 io_ns). The image lay {image}."
            ),
        ];
    }
    vec![
        "The VM's memory reclaim evicts cached blocks after about a minute whatever the \
         cgroup allows: device_rereads counts blocks read again within a run."
            .into(),
        format!(
            "The GC's memory (its page cache included) is bounded by a memory cgroup of {memory} \
             (0: unbounded); the model's cache is set to the same size."
        ),
        format!(
            "A device read through the filesystem, the loop device and the mount costs the host \
             {io} beyond the disk model's time (measured before the runs: the model's io_ns). \
             The image lay {image}."
        ),
    ]
}

/// On zfs with `name_reads`: the golden image's blocks mapped by zdb, and every run's
/// phases named by them ([`PhaseResult::by_kind`]); the map's path.
fn name_reads(bed: &Bed, o: &TestbedOptions, runs: &mut [RunResult]) -> Result<Option<PathBuf>> {
    if o.fs != Fs::Zfs || !o.name_reads {
        return Ok(None);
    }
    interrupt::check()?;
    let map = bed.zfs_block_map(o)?;
    for run in runs {
        let named = crate::analysis::device::device_phases_named(&run.trace, Some(&map))?;
        for (i, p) in run.phases.iter_mut().enumerate() {
            let label = format!("phase {}", i + 1);
            if let Some(d) = named.iter().find(|d| d.label == label) {
                p.by_kind = d.by_kind.clone();
            }
        }
    }
    Ok(Some(bed.out.join("blocks.map")))
}

/// The testbed's places.
struct Bed<'a> {
    exe: &'a Path,
    fs: Fs,
    out: PathBuf,
    backing: PathBuf,
    disk_mnt: PathBuf,
    fs_dir: PathBuf,
}

/// The filesystem of a run, mounted: ext4, XFS or Btrfs on a loop device (unmounted and
/// detached on drop), or a ZFS pool in its zfs-fuse daemon (exported and stopped by
/// [`Mounted::finish`]; only stopped on drop).
enum Mounted {
    Block { _fs: FsMount, lo: Loop },
    Zfs(zfs::Daemon),
}

impl Mounted {
    /// `cmd` sees the filesystem (ZFS: enters the daemon's mount namespace).
    fn enter<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        match self {
            Mounted::Block { .. } => cmd,
            Mounted::Zfs(d) => d.enter(cmd),
        }
    }

    /// Unmounted cleanly: ZFS exported (its write-back done) and its daemon stopped.
    fn finish(self) -> Result<()> {
        match self {
            Mounted::Block { .. } => Ok(()),
            Mounted::Zfs(d) => d.stop(),
        }
    }
}

impl Bed<'_> {
    fn image(&self) -> PathBuf {
        self.backing.join(self.fs.image_in_backing())
    }

    /// The image as the filesystem opens it: through the disk mount.
    fn image_on_disk(&self) -> PathBuf {
        self.disk_mnt.join(self.fs.image_in_backing())
    }

    fn golden(&self) -> PathBuf {
        self.backing.join("golden.img")
    }

    fn store(&self) -> PathBuf {
        self.fs_dir.join("store")
    }

    fn zfs_dir(&self) -> PathBuf {
        self.out.join("zfs")
    }

    /// The filesystem on the image (made by `mkfs` or `zpool create` when `create`), mounted.
    fn mount_fs(&self, o: &TestbedOptions, create: bool) -> Result<Mounted> {
        if o.fs == Fs::Zfs {
            let settings = ZfsSettings::for_memory(o.memory_bytes);
            let needed = [
                self.disk_mnt.as_path(),
                self.backing.as_path(),
                self.out.as_path(),
                self.exe,
            ];
            let mut d = zfs::Daemon::start(&self.zfs_dir(), &settings, &needed)?;
            if create {
                d.create(&settings, &self.image_on_disk(), &self.fs_dir)?;
            } else {
                let dir = self.image_on_disk();
                d.import(dir.parent().unwrap_or(&self.disk_mnt))?;
            }
            return Ok(Mounted::Zfs(d));
        }
        let lo = Loop::attach(&self.image_on_disk())?;
        if let (true, Some((mkfs, args))) = (create, o.fs.mkfs()) {
            command(
                Command::new(mkfs)
                    .args(args)
                    .args(&o.mkfs_options)
                    .arg(&lo.dev),
            )?;
        }
        let fs = FsMount::mount(&lo.dev, &self.fs_dir)?;
        Ok(Mounted::Block { _fs: fs, lo })
    }

    /// The image with a filesystem and the store, generated once (through the mount without
    /// a disk model: how long that takes is not measured) and kept as the golden image; the
    /// model's predictions for the store.
    fn build(&self, o: &TestbedOptions) -> Result<(Predicted, u64)> {
        let (exe, image, store) = (self.exe, self.image(), self.store());
        tracing::info!(
            "building {} on a {} image",
            o.fs.name(),
            crate::units::human_bytes(o.image_bytes)
        );
        if let Some(dir) = image.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(o.image_bytes))
            .with_context(|| format!("creating {}", image.display()))?;
        let disk = DiskMount::start(
            exe,
            &self.backing,
            &self.disk_mnt,
            None,
            None,
            o.fs == Fs::Zfs,
        )?;
        let mut fs = self.mount_fs(o, true)?;
        let seed = o.seed.to_string();
        tracing::info!("generating the {} store", o.preset);
        command(
            fs.enter(&mut Command::new(exe))
                .args(["-q", "gen", "--preset", &o.preset, "--seed", &seed, "--out"])
                .arg(&store),
        )
        .map_err(|e| {
            if format!("{e:#}").contains("No space left") {
                e.context(format!(
                    "the {} image is too small for the {} store (its 65,536 chunk \
                     directories need as many inodes): give a larger --image",
                    crate::units::human_bytes(o.image_bytes),
                    o.preset
                ))
            } else {
                e
            }
        })?;
        // Listing a directory sets its atime: the survey and the host's read-time pass must
        // leave the golden image as the generator made it.
        let host_io_ns = match &mut fs {
            Mounted::Block { lo, .. } => host_io_ns(&self.fs_dir, &store, &lo.dev)?,
            Mounted::Zfs(d) => {
                d.run("zfs", ["set", "atime=off", zfs::POOL])?;
                0
            }
        };
        self.survey(&fs)?;
        if let Mounted::Zfs(d) = &mut fs {
            d.run("zfs", ["set", "atime=on", zfs::POOL])?;
        }
        fs.finish()?;
        disk.stop()?;
        command(
            Command::new("cp")
                .arg("--sparse=always")
                .arg(&image)
                .arg(self.golden()),
        )?;
        let host_io_ns = if o.fs == Fs::Zfs {
            self.zfs_host_io_ns(o)?
        } else {
            host_io_ns
        };
        tracing::info!(
            "a device read through the filesystem and the mount costs the host {} beyond the \
             disk",
            crate::units::duration_ns(host_io_ns)
        );
        let model = self.out.join("model.json");
        write_model(o, Some(host_io_ns), &model)?;
        let predicted = predict(exe, &self.out.join("store.survey"), &model, o)?;
        Ok((predicted, host_io_ns))
    }

    /// `survey` of the store into OUT/store.survey.
    fn survey(&self, fs: &Mounted) -> Result<()> {
        tracing::info!("surveying the store");
        command(
            fs.enter(&mut Command::new(self.exe))
                .args(["-q", "survey", "--out"])
                .arg(self.out.join("store.survey"))
                .arg(format!(
                    "--json={}",
                    self.out.join("store.survey.json").display()
                ))
                .arg(self.store())
                .stdout(Stdio::null()),
        )
    }

    /// [`host_io_ns`] on ZFS, on a copy of the golden image (the pool's ARC is the daemon's,
    /// cold only in a fresh daemon): the pool imported by a fresh daemon with atime off,
    /// every 16th chunk directory listed cold between phase markers in the disk's trace,
    /// then warm; the difference over the reads the trace holds between the markers.
    fn zfs_host_io_ns(&self, o: &TestbedOptions) -> Result<u64> {
        let trace = self.out.join("host-io.trace");
        let disk = DiskMount::start(
            self.exe,
            &self.backing,
            &self.disk_mnt,
            None,
            Some(&trace),
            true,
        )?;
        // An ARC that keeps what the cold pass reads: the warm pass reads (nearly) nothing.
        let roomy = TestbedOptions {
            memory_bytes: o.memory_bytes.max(1 << 30),
            ..o.clone()
        };
        let mut fs = self.mount_fs(&roomy, false)?;
        if let Mounted::Zfs(d) = &mut fs {
            d.run("zfs", ["set", "atime=off", zfs::POOL])?;
        }
        drop_caches()?;
        let dirs: Vec<PathBuf> = (0..4096u64)
            .map(|i| self.store().join(format!(".chunks/{:04x}", i * 16)))
            .collect();
        let pass = || -> Result<u64> {
            let started = std::time::Instant::now();
            command(
                fs.enter(&mut Command::new("ls"))
                    .arg("-f")
                    .args(&dirs)
                    .stdout(Stdio::null()),
            )?;
            Ok(started.elapsed().as_nanos() as u64)
        };
        let socket = crate::overlay::control::socket_for(&self.disk_mnt);
        let mark = |phase: u8, start: bool| -> Result<()> {
            let m = crate::trace::marker::Marker::phase(phase, start, "host-io");
            crate::overlay::control::Client::connect(&socket)?.mark(&m.encode())?;
            Ok(())
        };
        mark(1, true)?;
        let cold = pass()?;
        mark(1, false)?;
        mark(2, true)?;
        let warm = pass()?;
        mark(2, false)?;
        fs.finish()?;
        disk.stop()?;
        let phases = crate::analysis::device::device_phases(&trace)?;
        let reads = |label: &str| {
            phases
                .iter()
                .find(|p| p.label == label)
                .map_or(0, |p| p.reads)
        };
        // The passes' times over their reads' difference (no disk model: host time only).
        let (cold_reads, warm_reads) = (reads("phase 1"), reads("phase 2"));
        if cold_reads <= warm_reads || cold <= warm {
            bail!(
                "{}: listing the pool's directories cold read {cold_reads} blocks in {} and \
                 again {warm_reads} in {}: no host time per read to take from that",
                trace.display(),
                crate::units::duration_ns(cold),
                crate::units::duration_ns(warm)
            );
        }
        Ok((cold - warm) / (cold_reads - warm_reads))
    }

    /// The golden image's blocks named by `zdb` (a daemon of its own, the pool not
    /// imported), saved as OUT/blocks.map.
    fn zfs_block_map(&self, o: &TestbedOptions) -> Result<crate::analysis::zfs_blocks::BlockMap> {
        tracing::info!(
            "mapping the golden image's blocks with zdb (minutes: zdb reads every object)"
        );
        // zdb -e -p searches a directory's files: one holding the golden image alone.
        let dir = self.backing.join("golden");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let golden = dir.join("golden.img");
        std::fs::rename(self.golden(), &golden).with_context(|| {
            format!("moving {} into {}", self.golden().display(), dir.display())
        })?;
        let settings = ZfsSettings::for_memory(o.memory_bytes);
        let needed = [self.backing.as_path(), self.out.as_path(), self.exe];
        let mapped = zfs::Daemon::start(&self.zfs_dir(), &settings, &needed).and_then(|mut d| {
            let map = d.block_map(&dir, o.image_bytes, &self.zfs_dir().join("zdb.log"));
            d.stop()?;
            map
        });
        std::fs::rename(&golden, self.golden())
            .with_context(|| format!("moving {} back", golden.display()))?;
        let map = mapped?;
        map.save(&self.out.join("blocks.map"))?;
        Ok(map)
    }

    /// Every strategy `o.repeat` times, round after round (whatever drifts over the hour,
    /// the host and its caches, falls on every strategy alike): their medians beside the
    /// predictions; with the chunks the sweeps found.
    fn run_rounds(
        &self,
        o: &TestbedOptions,
        predicted: &Predicted,
    ) -> Result<(Vec<RunResult>, u64)> {
        let (mut runs, mut chunks) = (Vec::<RunResult>::new(), 0);
        for round in 0..o.repeat.max(1) {
            for (i, &s) in o.strategies.iter().enumerate() {
                interrupt::check()?;
                let (run, found) = self.run_strategy(o, s, round)?;
                chunks = chunks.max(found);
                match runs.get_mut(i) {
                    Some(first) => first.repeats.push(run.measured()),
                    None => runs.push(run),
                }
            }
        }
        for run in &mut runs {
            run.take_medians();
            let pr = predicted.get(&run.strategy).into_iter().flatten();
            for (p, &(secs, reads)) in run.phases.iter_mut().zip(pr) {
                (p.predicted_s, p.predicted_reads) = (secs, reads);
            }
        }
        Ok((runs, chunks))
    }

    /// One strategy from the golden image, cold: the GC in a memory cgroup, the disk traced;
    /// with the chunks the GC's sweep found.
    fn run_strategy(
        &self,
        o: &TestbedOptions,
        s: Strategy,
        round: u32,
    ) -> Result<(RunResult, u64)> {
        // The first round's files keep the strategy's name; later rounds' add theirs.
        let name = s.name();
        let file = match round {
            0 => name.to_string(),
            r => format!("{name}-{}", r + 1),
        };
        tracing::info!("strategy {file}: restoring the image, cold caches");
        command(
            Command::new("cp")
                .arg("--sparse=always")
                .arg(self.golden())
                .arg(self.image()),
        )?;
        let trace = self.out.join(format!("{file}.trace"));
        let task_log = self.out.join(format!("{file}.log"));
        let gc_json = self.out.join(format!("{file}.gc.json"));
        let disk = DiskMount::start(
            self.exe,
            &self.backing,
            &self.disk_mnt,
            Some(&o.disk_spec()),
            Some(&trace),
            // zfs-fuse reads its file vdev without O_DIRECT: the kernel's readahead and
            // page cache would stand between it and the disk model.
            o.fs == Fs::Zfs,
        )?;
        let mut fs = self.mount_fs(o, false)?;
        drop_caches()?;
        let cgroup = (o.memory_bytes > 0)
            .then(|| {
                Cgroup::create(
                    &format!("chunkscope-testbed-{}-{file}", std::process::id()),
                    o.memory_bytes,
                )
            })
            .transpose()?;
        let mut gc = Command::new(self.exe);
        gc.args(["gc", "--strategy", name, "--mark-mount"])
            .arg(&self.disk_mnt)
            .arg(format!("--json={}", gc_json.display()))
            .arg("--task-log")
            .arg(&task_log)
            .arg(self.store())
            .stdout(Stdio::null());
        fs.enter(&mut gc);
        if let Some(cg) = &cgroup {
            cg.enter_on_exec(&mut gc)?;
        }
        tracing::info!("strategy {file}: gc");
        command(&mut gc)?;
        if let Mounted::Zfs(d) = &mut fs {
            d.check_alive()?;
        }
        drop(cgroup);
        fs.finish()?;
        disk.stop()?;
        let (phases, chunks) = measure(&trace, &gc_json)?;
        Ok((
            RunResult {
                strategy: name.to_string(),
                phases,
                trace,
                task_log,
                repeats: Vec::new(),
            },
            chunks,
        ))
    }
}

impl Bed<'_> {
    /// `calibrate` on strategy `on`'s task log, from the base model with the testbed's disk
    /// (not its cache or measured host time: those are what is fitted), then every strategy
    /// predicted by the fitted model into `runs`.
    fn calibrate(
        &self,
        o: &TestbedOptions,
        on: Strategy,
        runs: &mut [RunResult],
    ) -> Result<Calibrated> {
        let Some(log) = runs.iter().find(|r| r.strategy == on.name()) else {
            bail!(
                "--calibrate-on {}: that strategy was not run (--strategy)",
                on.name()
            );
        };
        let base = self.out.join("base-model.json");
        write_model(o, None, &base)?;
        let fitted = self.out.join("fitted.json");
        let survey = self.out.join("store.survey");
        tracing::info!("calibrating on {}'s task log", on.name());
        let mut cmd = Command::new(self.exe);
        cmd.args(["-q", "calibrate", "--survey"])
            .arg(&survey)
            .arg("--model")
            .arg(&base)
            .arg("--out")
            .arg(&fitted)
            .arg(&log.task_log)
            .stdout(Stdio::null());
        // A ZFS pool's ARC is a number its admin knows (arcstats' c_max; here the daemon's
        // --max-arc-size): pinned, as they would pin it. A log of a strategy that reads each
        // block once cannot tell cache sizes apart, and the largest that fits as well (724
        // MiB for a 64 MiB ARC) predicts prefetch's second reads as hits.
        if o.fs == Fs::Zfs && o.memory_bytes > 0 {
            cmd.arg("--cache").arg(o.memory_bytes.to_string());
        }
        command(&mut cmd)?;
        let p = crate::model::ModelParams::load(&fitted.to_string_lossy())?;
        let predicted = predict(self.exe, &survey, &fitted, o)?;
        for run in runs.iter_mut() {
            if let Some(pr) = predicted.get(&run.strategy) {
                for (ph, &(secs, reads)) in run.phases.iter_mut().zip(pr) {
                    ph.calibrated_s = secs;
                    ph.calibrated_reads = reads;
                }
            }
        }
        Ok(Calibrated {
            on: on.name().to_string(),
            model_file: fitted,
            cache_bytes: p.cache_bytes,
            io_ns: p.io_ns,
            ranking: rank(runs, &|r| r.phases[0].calibrated_s),
            ranking_agrees: ranking_agrees_by(runs, |p| p.calibrated_s),
        })
    }
}

/// The model's (seconds, reads) of phase 1 and phase 2, per strategy.
type Predicted = std::collections::HashMap<String, [(f64, u64); 2]>;

impl TestbedOptions {
    /// The disk spec, spread over the image unless the spec says otherwise.
    fn disk_spec(&self) -> String {
        if self.disk.contains("span=") {
            self.disk.clone()
        } else {
            format!("{},span={}", self.disk, self.image_bytes)
        }
    }
}

/// The tools a testbed runs, each with the Debian package that brings it (README.md's
/// requirements table lists the same): a missing one is an error naming its package.
fn check_tools(fs: Fs) -> Result<()> {
    let mut tools = vec![("cp", "coreutils")];
    if fs != Fs::Zfs {
        tools.push(("losetup", "mount"));
    }
    tools.extend(fs.tools());
    for (tool, package) in tools {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .map_or(true, |s| !s.success())
        {
            bail!(
                "{tool} is not installed: the testbed on {} needs it (Debian's {package}: \
                 apt-get install {package})",
                fs.name()
            );
        }
    }
    Ok(())
}

/// Runs `cmd` to its end; an error names it and what it printed.
fn command(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let o = interrupt::output(cmd).with_context(|| format!("running {shown}"))?;
    if !o.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(())
}

/// The model the predictions use: `o.model` with the testbed's disk (spread over the
/// image), its memory limit as the cache and the host's time per read, written to `path`.
fn write_model(o: &TestbedOptions, host_io_ns: Option<u64>, path: &Path) -> Result<()> {
    let mut p = crate::model::ModelParams::load(&o.model)
        .with_context(|| format!("--model {}", o.model))?;
    p.disk = Some(crate::disk::DiskParams::parse(&o.disk_spec())?);
    // Without them: the base `calibrate` fits them to, knowing the disk only.
    if let Some(ns) = host_io_ns {
        p.io_ns = ns;
        if o.memory_bytes > 0 {
            p.cache_bytes = o.memory_bytes;
        }
    }
    if o.fs == Fs::Zfs {
        zfs::model(&mut p, &ZfsSettings::for_memory(o.memory_bytes));
    }
    p.name = format!("{} on the testbed ({})", p.name, o.disk_spec());
    crate::fsutil::write_whole(path, |f| {
        serde_json::to_writer_pretty(&mut *f, &p)?;
        f.write_all(b"\n")
    })
    .with_context(|| format!("writing {}", path.display()))
}

/// The model's (phase-1, phase-2) (seconds, reads) per strategy for the surveyed store.
fn predict(exe: &Path, survey: &Path, model: &Path, o: &TestbedOptions) -> Result<Predicted> {
    let names: Vec<&str> = o.strategies.iter().map(|s| s.name()).collect();
    let mut cmd = Command::new(exe);
    cmd.args(["-q", "simulate", "--survey"]).arg(survey).args([
        "--strategy",
        &names.join(","),
        "--json",
    ]);
    cmd.arg("--model").arg(model);
    let out = interrupt::output(&mut cmd).context("running simulate")?;
    if !out.status.success() {
        bail!(
            "simulate failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let runs: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).context("simulate's JSON")?;
    let mut m = std::collections::HashMap::new();
    for r in runs {
        let u = |k: &str| r[k].as_u64().unwrap_or(0);
        let model = &r["model"];
        let all_reads =
            model["misses"].as_u64().unwrap_or(0) + model["prefetch_ios"].as_u64().unwrap_or(0);
        // I/Os on both sides: the device counts requests, the model's prefetch reads
        // (inode-table read-ahead, listings) go several blocks to a request.
        let p1_reads = u("phase1_reads") + u("phase1_prefetch_ios");
        m.insert(
            r["strategy"].as_str().unwrap_or("").to_string(),
            [
                (u("phase1_ns") as f64 / 1e9, p1_reads),
                (
                    u("phase2_ns") as f64 / 1e9,
                    all_reads.saturating_sub(p1_reads),
                ),
            ],
        );
    }
    Ok(m)
}

/// The GC's phase times and the store's chunks (its JSON report), and the disk's reads and
/// writes per phase (its trace, split at the GC's phase markers: `trace device`'s figures).
fn measure(trace: &Path, gc_json: &Path) -> Result<([PhaseResult; 2], u64)> {
    let gc: serde_json::Value = serde_json::from_slice(
        &std::fs::read(gc_json).with_context(|| format!("reading {}", gc_json.display()))?,
    )
    .with_context(|| format!("{}: not the GC's JSON report", gc_json.display()))?;
    let device = crate::analysis::device::device_phases(trace)?;
    let mut phases = [PhaseResult::default(), PhaseResult::default()];
    for (i, p) in phases.iter_mut().enumerate() {
        let key = format!("phase{}_seconds", i + 1);
        p.measured_s = gc["counters"][&key].as_f64().unwrap_or(0.0);
        let label = format!("phase {}", i + 1);
        let Some(dev) = device.iter().find(|d| d.label == label) else {
            continue;
        };
        p.device_reads = dev.reads;
        p.device_read_bytes = dev.read_bytes;
        p.device_rereads = dev.rereads;
        p.device_writes = dev.writes;
    }
    Ok((phases, gc["counters"]["chunk_count"].as_u64().unwrap_or(0)))
}
