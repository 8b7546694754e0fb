//! `chunkscope gen`

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::Outcome;
use crate::gen::writer::{write_store, WriteOptions};
use crate::gen::{build_history, GenConfig};
use crate::units::thousands;

/// Generate a valid PBS datastore with a realistic backup history.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope gen --preset tiny --out /dev/shm/tiny\n  \
    chunkscope gen --preset thread000 --scale 0.05 --out /dev/shm/t000\n  \
    chunkscope gen --preset tiny --missing 3 --bad 4 --tmp 2 --out /tmp/damaged\n\n\
    The ground truth is written beside the store as DIR.truth.json (not inside it).\n\
    Use tmpfs (/dev/shm) when inode numbers should follow creation order, as on ZFS.")]
pub struct GenArgs {
    /// Directory to create the datastore in (must not exist, or be empty).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Shape of the store: tiny (a few thousand chunks, for tests), small (about 53k chunks,
    /// for the demo), thread000, datastore-b, datastore-a (shaped like the 1.49M-, 10.5M- and
    /// 72M-chunk stores of threads 000, 001 and 003, written at 1%; see --scale).
    #[arg(long, default_value = "tiny", value_parser = clap::builder::PossibleValuesParser::new(crate::gen::PRESETS))]
    preset: String,
    /// Seed: the same seed and options give the same store.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    shape: ShapeArgs,
    /// The history's last day (YYYY-MM-DD); snapshot names are taken from this timeline.
    #[arg(long, value_name = "DATE", default_value = "2026-01-31")]
    history_end: String,
    /// Fixed chunk size in bytes (a power of two); small keeps disk use low.
    #[arg(long, value_name = "BYTES")]
    chunk_size: Option<u32>,
    /// Referenced chunks to leave out (damage, for testing checks and GC).
    #[arg(long, default_value_t = 0)]
    missing: usize,
    /// `.0.bad` files to add: first for the missing chunks, then for garbage digests.
    #[arg(long, default_value_t = 0)]
    bad: usize,
    /// `<digest>.tmp_XXXXXX` leftovers of interrupted chunk inserts to add.
    #[arg(long, default_value_t = 0)]
    tmp: usize,
    /// chown everything to the `backup` user and group, as PBS requires.
    #[arg(long)]
    pbs_owner: bool,
    /// Where to write the ground truth JSON [default: DIR.truth.json beside the store].
    #[arg(long, value_name = "FILE")]
    truth: Option<PathBuf>,
}

/// The shape of a generated (or simulated) store, over its preset.
#[derive(Args, Debug, Default, PartialEq)]
pub struct ShapeArgs {
    /// Multiply the chunk counts of disks and archives (`gen --preset thread000` defaults to
    /// 0.01; `simulate` runs the presets of the threads at 1, their real size).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Target references per distinct chunk; the churn per backup is solved for it.
    #[arg(long)]
    pub dedup: Option<f64>,
    /// Use this churn per backup (probability that a chunk-sized slot changes between two
    /// backups) instead of solving for a dedup factor.
    #[arg(long, conflicts_with = "dedup")]
    pub churn: Option<f64>,
    /// Number of backup groups.
    #[arg(long)]
    pub groups: Option<usize>,
    /// Number of namespaces, the root namespace included.
    #[arg(long)]
    pub namespaces: Option<usize>,
    /// Days of daily backups in the history (one snapshot per group and day, then pruned).
    #[arg(long)]
    pub days: Option<u32>,
    /// Snapshots kept per group by prune: daily (the weekly and monthly ones come on top).
    #[arg(long, value_name = "N")]
    pub keep_daily: Option<u32>,
    /// Hours since the previous GC: chunks of snapshots pruned after it are the garbage this
    /// GC removes (more hours, more garbage).
    #[arg(long, value_name = "HOURS")]
    pub prev_gc_hours: Option<f64>,
}

impl ShapeArgs {
    pub fn apply(&self, cfg: &mut GenConfig) {
        if let Some(v) = self.scale {
            cfg.scale = v;
        }
        if let Some(v) = self.dedup {
            cfg.dedup = Some(v);
        }
        if let Some(v) = self.churn {
            cfg.dedup = None;
            cfg.churn = v;
        }
        if let Some(v) = self.groups {
            cfg.groups = v;
        }
        if let Some(v) = self.namespaces {
            cfg.namespaces = v;
        }
        if let Some(v) = self.days {
            cfg.days = v;
        }
        if let Some(v) = self.keep_daily {
            cfg.retention.keep_daily = v;
        }
        if let Some(v) = self.prev_gc_hours {
            cfg.prev_gc_hours = v;
        }
    }
}

fn backup_owner() -> Result<(u32, u32)> {
    crate::fsutil::user_ids("backup")
        .context("--pbs-owner: there is no user 'backup' in /etc/passwd")
}

pub fn run(args: GenArgs, quiet: bool) -> Result<Outcome> {
    let mut cfg = GenConfig::preset(&args.preset)?;
    cfg.seed = args.seed;
    args.shape.apply(&mut cfg);
    cfg.history_end = crate::time::parse_rfc3339_utc(&format!("{}T00:00:00Z", args.history_end))
        .with_context(|| {
            format!(
                "--history-end {:?}: expected a date like 2026-01-31",
                args.history_end
            )
        })?;
    if let Some(v) = args.chunk_size {
        cfg.chunk_size = v;
    }
    cfg.damage = crate::gen::Damage {
        missing: args.missing,
        bad: args.bad,
        tmp: args.tmp,
    };
    let owner = if args.pbs_owner {
        Some(backup_owner()?)
    } else {
        None
    };
    let out = args.out.components().collect::<PathBuf>();
    let Some(name) = out.file_name().map(|n| n.to_os_string()) else {
        bail!("--out {}: needs a directory name", args.out.display());
    };
    let truth_path = args.truth.unwrap_or_else(|| {
        let mut n = name;
        n.push(".truth.json");
        out.with_file_name(n)
    });

    let progress = !quiet && super::stderr_is_terminal();
    let spinner = if progress {
        indicatif::ProgressBar::new_spinner()
    } else {
        indicatif::ProgressBar::hidden()
    };
    if let Some(d) = cfg.dedup {
        spinner.set_message(format!(
            "modelling the backup history (solving churn for dedup {d})"
        ));
        spinner.enable_steady_tick(std::time::Duration::from_millis(100));
    }
    let history = build_history(&cfg)?;
    spinner.finish_and_clear();
    let opts = WriteOptions {
        owner,
        progress,
        now: crate::fsutil::now_epoch(),
    };
    let truth = write_store(&cfg, &history, &out, &opts)?;
    super::write_json(&truth_path, &truth)?;
    if !quiet {
        let t = &truth;
        println!("datastore        {}", out.display());
        println!("ground truth     {}", truth_path.display());
        println!(
            "preset           {} (seed {}, scale {})",
            t.preset, t.seed, t.scale
        );
        let n = |v: u64| thousands(v);
        println!("namespaces       {}", n(t.namespaces as u64));
        println!("groups           {}", n(t.groups as u64));
        println!("snapshots        {}", n(t.snapshots as u64));
        println!(
            "index files      {} ({} fidx, {} didx)",
            n(t.index_files as u64),
            n(t.fixed_indexes as u64),
            n(t.dynamic_indexes as u64)
        );
        println!("references       {}", n(t.references));
        println!(
            "referenced       {} chunks ({} missing)",
            n(t.referenced_chunks as u64),
            n(t.missing_chunks.len() as u64)
        );
        println!(
            "garbage          {} chunks: {} older than the cutoff, {} pending",
            n(t.garbage.chunks as u64),
            n(t.garbage.removable as u64),
            n(t.garbage.pending as u64)
        );
        println!(
            "dedup factor     {:.2} references per chunk (churn {:.4} per backup)",
            t.dedup_factor, t.churn
        );
        println!(
            "PBS dedup        {:.2} (index bytes / referenced chunk bytes)",
            t.pbs_dedup_factor
        );
        println!(
            "written          {} chunk files in {:.1} s ({} chunks/s)",
            n(t.chunk_files as u64),
            t.elapsed_seconds,
            n(t.chunks_per_second.round() as u64)
        );
    }
    Ok(Outcome::Ok)
}
