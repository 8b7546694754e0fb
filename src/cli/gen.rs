//! `chunkscope gen`

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::s3_args::S3Args;
use super::Outcome;
use crate::gen::writer::{write_store, WriteOptions};
use crate::gen::{build_history, GenConfig};
use crate::units::thousands;

/// Generate a valid PBS datastore with a realistic backup history.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope gen --preset tiny --out /dev/shm/tiny\n  \
    chunkscope gen --preset thread000 --scale 0.05 --out /dev/shm/t000\n  \
    chunkscope gen --preset tiny --missing 3 --bad 4 --tmp 2 --out /tmp/damaged\n  \
    # an S3 datastore (PBS 4), with AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and\n  \
    # AWS_SECRET_ACCESS_KEY set as for the AWS CLI:\n  \
    chunkscope gen --backend s3 --s3-bucket pbs-tiny --out /dev/shm/s3tiny\n\n\
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
    /// Where the chunks live: fs (a filesystem datastore) or s3 (PBS 4: every chunk an object
    /// in --s3-bucket, the local .chunks tree a cache of whole chunks and zero-length markers).
    #[arg(long, value_enum, default_value = "fs")]
    backend: Backend,
    #[command(flatten)]
    s3: S3Args,
    #[command(flatten)]
    split: SplitArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Fs,
    S3,
}

/// How an S3 datastore's chunks are split between the bucket and the local cache.
#[derive(Args, Debug)]
struct SplitArgs {
    /// S3: share of the chunks whose local file stays whole (the rest are zero-length
    /// markers, as PBS's cache leaves evicted chunks).
    #[arg(long, value_name = "SHARE", default_value_t = 0.25)]
    s3_cached: f64,
    /// S3: share of the chunk objects with no local file at all (a lost cache).
    #[arg(long, value_name = "SHARE", default_value_t = 0.02)]
    s3_no_marker: f64,
    /// S3: chunks with a local marker and no object (objects the bucket lost).
    #[arg(long, value_name = "N", default_value_t = 0)]
    s3_no_object: usize,
    /// S3: unreferenced objects with no local file but a stale `.using` marker, as a GC that
    /// died between its phases leaves them.
    #[arg(long, value_name = "N", default_value_t = 0)]
    s3_stale_using: usize,
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
    let truth_path = args.truth.clone().unwrap_or_else(|| {
        let mut n = name;
        n.push(".truth.json");
        out.with_file_name(n)
    });

    let client = s3_client(&args)?;

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
    let mut truth = write_store(&cfg, &history, &out, &opts)?;
    if let Some(client) = &client {
        let shape = crate::gen::s3::SplitShape {
            cached: args.split.s3_cached,
            no_marker: args.split.s3_no_marker,
            no_object: args.split.s3_no_object,
            stale_using: args.split.s3_stale_using,
        };
        truth.s3 = Some(crate::gen::s3::split(
            &out, client, &shape, cfg.seed, progress,
        )?);
    }
    super::write_json(&truth_path, &truth)?;
    if !quiet {
        print_summary(&truth, &out, &truth_path);
    }
    Ok(Outcome::Ok)
}

/// For `--backend s3`, the bucket's client, the bucket made ready; S3 options without it are
/// refused.
fn s3_client(args: &GenArgs) -> Result<Option<crate::s3::Client>> {
    Ok(match args.backend {
        Backend::S3 => {
            for (name, v) in [
                ("--s3-cached", args.split.s3_cached),
                ("--s3-no-marker", args.split.s3_no_marker),
            ] {
                if !(0.0..=1.0).contains(&v) {
                    bail!("{name} {v}: a share, from 0 to 1");
                }
            }
            let target = args.s3.target()?;
            let client = crate::s3::Client::new(&target)?;
            crate::gen::s3::prepare_bucket(&client)?;
            Some(client)
        }
        Backend::Fs => {
            if args.s3.given() {
                bail!("--s3-bucket, --s3-endpoint, --s3-region and --s3-path-style are for --backend s3");
            }
            None
        }
    })
}

/// The summary `gen` prints: the store, its history and, for S3, the split.
fn print_summary(
    truth: &crate::gen::truth::GroundTruth,
    out: &std::path::Path,
    truth_path: &std::path::Path,
) {
    let t = truth;
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
        n(t.referenced_chunks),
        n(t.missing_chunks.len() as u64)
    );
    println!(
        "garbage          {} chunks: {} older than the cutoff, {} pending",
        n(t.garbage.chunks),
        n(t.garbage.removable),
        n(t.garbage.pending)
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
        n(t.chunk_files),
        t.elapsed_seconds,
        n(t.chunks_per_second.round() as u64)
    );
    if let Some(s) = &t.s3 {
        println!("bucket           {}", s.bucket);
        println!(
            "objects          {} chunk objects ({}), {} under .cnt/",
            n(s.chunk_objects),
            crate::units::human_bytes(s.chunk_object_bytes),
            n(s.content_objects)
        );
        println!(
            "local cache      {} whole, {} markers; {} objects without a local file \
             ({} referenced), {} markers without an object ({} referenced), {} stale .using",
            n(s.cached_whole),
            n(s.markers),
            n(s.no_marker_referenced + s.no_marker_garbage),
            n(s.no_marker_referenced),
            n(s.no_object_referenced + s.no_object_garbage),
            n(s.no_object_referenced),
            n(s.stale_using)
        );
    }
}
