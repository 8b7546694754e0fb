//! `chunkscope testbed`

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::Outcome;
use crate::gc::Strategy;
use crate::testbed::{Fs, TestbedOptions};

/// Check the cost model against a real filesystem on an emulated disk: an image on a
/// chunkscope mount with a disk model (`mount --disk`), attached as a loop device with direct
/// I/O, a filesystem on it, a generated store; then for each strategy, from the same image
/// and cold caches, a GC bounded by a memory cgroup. The report puts the measured time and
/// device reads of each phase beside the model's prediction for the same store and cache.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope testbed --out /tmp/tb --strategy naive,batched\n  \
    chunkscope testbed --out /tmp/tbx --fs xfs --disk ssd --strategy lru\n  \
    chunkscope testbed --out /tmp/tbz --fs zfs --memory 64MiB\n\n\
    Every strategy on the default hdd-7200 disk takes about 8 minutes on the tiny preset;\n\
    --disk ssd compares the reads only, in seconds.\n\n\
    Needs root (loop devices, mounts, drop_caches, a memory cgroup), losetup and the\n\
    filesystem's mkfs. Every mount, loop device and cgroup it makes is removed when it ends,\n\
    also on an error and on ^C, SIGTERM, SIGHUP or SIGQUIT (exit 130; held replies of the\n\
    disk are answered first). Only a SIGKILL leaves them; then, in this order: let the disk\n\
    answer what it holds (chunkscope ctl OUT/disk release all), kill the\n\
    orphaned chunkscope gc (pgrep -af OUT/fs), umount OUT/fs, losetup -d the loop device\n\
    of OUT/disk/disk.img (losetup -j OUT/disk/disk.img), umount OUT/disk (its chunkscope\n\
    mount ends with it), umount OUT/backing (a tmpfs, when the images fit in memory), and\n\
    rmdir /sys/fs/cgroup/memory/chunkscope-testbed-PID-* (or /sys/fs/cgroup/...). On zfs\n\
    there is no loop device and no OUT/fs mount on the host: zfs-fuse runs in a mount\n\
    namespace of its own (its own /etc/zfs/zfsrc and socket; a zfs-fuse of the host is\n\
    never touched), the pool's filesystem is mounted there only, and the daemon gets\n\
    SIGKILL when the testbed dies; its image is OUT/disk/vdev/disk.img. A second\n\
    testbed on the same OUT is refused while one runs. OUT keeps the images, each\n\
    strategy's disk trace (OUT/S.trace: every read and write of the image with its offset,\n\
    split by the GC's phase markers), its GC report (OUT/S.gc.json) and OUT/report.json.")]
pub struct TestbedArgs {
    /// The working directory (created): images, traces, reports.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The filesystem under the store.
    #[arg(long, value_enum, default_value = "ext4")]
    fs: Fs,
    /// Options for the filesystem's mkfs beyond the testbed's own (`-q -F` or `-q -f`), in one
    /// argument split at spaces: `--mkfs-options "-d agcount=7 -i size=1024"`. `survey` reads
    /// the geometry they give and the model takes it.
    #[arg(long, value_name = "OPTIONS", allow_hyphen_values = true)]
    mkfs_options: Option<String>,
    /// The store's generator preset.
    #[arg(long, default_value = "tiny")]
    preset: String,
    /// The generator's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The disk under the image (`mount --disk`); its span is the image unless it says
    /// `span=`.
    #[arg(long, default_value = "hdd-7200")]
    disk: String,
    /// The image's size.
    #[arg(long, default_value = "2GiB")]
    image: String,
    /// The GC's memory limit, its page cache included (a memory cgroup); 0 for none. The
    /// model's cache is set to it; on zfs it is also the ARC's maximum (16 MiB at least).
    #[arg(long, default_value = "256MiB")]
    memory: String,
    /// The strategies, run in this order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = Strategy::all_names())]
    strategy: Vec<Strategy>,
    /// The cost model to compare (a preset or a model file); by default the filesystem's:
    /// `ext4-hdd` on ext4 (and btrfs, which has no model of its own yet), `xfs-hdd` on xfs,
    /// `zfs-hdd` on zfs.
    #[arg(long)]
    model: Option<String>,
    /// Fit the model to this strategy's task log as an admin would fit their pool's
    /// (`calibrate`: the cache and the read time, from the base model with the testbed's
    /// disk; on zfs the read time only, the ARC's size pinned as an admin knows it) and
    /// predict every strategy from the fit (default: lru when it runs, else the first
    /// strategy).
    #[arg(long, value_enum, value_name = "STRATEGY")]
    calibrate_on: Option<Strategy>,
    /// On zfs: skip naming the device's requests (by default the golden image's blocks are
    /// mapped with zdb after the runs, OUT/blocks.map, and each phase's reads and writes
    /// are reported by what they touched: minutes of one CPU for the tiny preset).
    #[arg(long)]
    no_zdb: bool,
    /// Run every strategy N times (round after round, each from the golden image, cold):
    /// the report's measured figures are the medians, with each phase's fastest and slowest
    /// run beside them.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=99))]
    repeat: u32,
}

pub fn run(args: TestbedArgs) -> Result<Outcome> {
    let size = |v: &str, flag: &str| {
        parse_size::parse_size(v)
            .with_context(|| format!("{flag} {v}: expected a size such as 2GiB"))
    };
    crate::disk::DiskParams::parse(&args.disk)?;
    let calibrate_on = match args.calibrate_on {
        Some(s) if !args.strategy.contains(&s) => bail!(
            "--calibrate-on {}: not one of the strategies run (--strategy)",
            s.name()
        ),
        Some(s) => Some(s),
        None if args.strategy.contains(&Strategy::Lru) => Some(Strategy::Lru),
        None => args.strategy.first().copied(),
    };
    let o = TestbedOptions {
        calibrate_on,
        name_reads: !args.no_zdb,
        repeat: args.repeat,
        mkfs_options: args
            .mkfs_options
            .as_deref()
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        out: args.out,
        fs: args.fs,
        preset: args.preset,
        seed: args.seed,
        disk: args.disk,
        image_bytes: size(&args.image, "--image")?,
        memory_bytes: size(&args.memory, "--memory")?,
        strategies: args.strategy,
        model: args.model.unwrap_or_else(|| {
            match args.fs {
                Fs::Xfs => "xfs-hdd",
                Fs::Ext4 | Fs::Btrfs => "ext4-hdd",
                Fs::Zfs => "zfs-hdd",
            }
            .to_string()
        }),
    };
    let exe = std::env::current_exe().context("finding chunkscope's own executable")?;
    crate::testbed::handle_signals()?;
    let report = crate::testbed::run(&o, &exe)?;
    print!("{}", crate::testbed::table(&report));
    Ok(Outcome::Ok)
}
