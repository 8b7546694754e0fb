//! `chunkscope simulate`

use anyhow::{bail, Result};
use clap::Args;

use super::gc::TuningArgs;
use super::model_args::ModelArgs;
use super::Outcome;
use crate::gc::{GcOptions, Phases, Strategy};
use crate::gen::{GenConfig, PRESETS};
use crate::sim::{self, DigestMode, SimRun, SimSetup};
use crate::table::Table;
use crate::units::{duration_ns, human_bytes};

/// Run GC strategies on an in-memory store built from the generator's history, through the
/// metadata cost model: what each strategy would cost on a store that is not on this machine.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope simulate --preset small\n  \
    chunkscope simulate --preset small --strategy lru,inode-order --model zfs-hdd --cache 1GiB\n  \
    chunkscope simulate --preset thread000 --digests hashed --json\n\n\
    The store is what `chunkscope gen` would write for the same preset and seed, created in\n\
    the same order (inode numbers follow it, as on ZFS and tmpfs); every strategy starts from\n\
    that state with a cold model. The GC is the same code as `chunkscope gc`; the requests\n\
    charged are those a chunkscope mount of the real store receives.")]
pub struct SimulateArgs {
    /// Store shape: a generator preset (tiny, small, thread000, datastore-b, datastore-a; the
    /// last three, shaped like the threads' stores, at their real size unless --scale).
    #[arg(long, default_value = "small", value_name = "PRESET")]
    preset: String,
    /// Generator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    shape: super::gen::ShapeArgs,
    /// Strategies to compare (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "naive,lru,prefetch,batched,inode-order"
    )]
    strategy: Vec<Strategy>,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    tuning: TuningArgs,
    /// Run only phase 1 (mark) or both phases.
    #[arg(long, value_enum, default_value = "all")]
    phase: Phases,
    /// Chunk names: SHA-256 of the payload as `gen` writes them (exact), or a hash of the
    /// content (hashed: no payload to hash, for large shapes).
    #[arg(long, value_enum, default_value = "exact")]
    digests: DigestMode,
    /// Number the simulated inodes from N (a real store's root inode, to compare block by block).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    first_ino: u64,
    /// Print the runs as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: SimulateArgs) -> Result<Outcome> {
    let mut cfg = GenConfig::preset(&args.preset).map_err(|e| {
        anyhow::anyhow!(
            "--preset {}: {e} (generator presets: {})",
            args.preset,
            PRESETS.join(", ")
        )
    })?;
    cfg.seed = args.seed;
    if args.shape.scale.is_none() && crate::gen::THREAD_PRESETS.contains(&args.preset.as_str()) {
        cfg.scale = 1.0; // the thread's store, not the generator's 1% of it
    }
    args.shape.apply(&mut cfg);
    args.tuning.validate()?;
    if args.phase == Phases::Sweep {
        bail!("--phase sweep: a simulated sweep needs the mark before it; use mark or all");
    }
    let params = args
        .model
        .params_or(Some("zfs-hdd"))?
        .expect("a default model");
    let setup = SimSetup {
        cfg,
        params: params.clone(),
        digests: args.digests,
        first_ino: args.first_ino,
        now: crate::fsutil::now_epoch_coarse(),
    };
    let built = std::time::Instant::now();
    let store = sim::build(&setup)?;
    if !args.json {
        eprintln!(
            "chunkscope: simulated store {} (seed {}): {} chunks, built in {:.1} s; model {}",
            args.preset,
            args.seed,
            store.chunks_created(),
            built.elapsed().as_secs_f64(),
            params.name
        );
    }
    let mut runs: Vec<SimRun> = Vec::new();
    for &strategy in &args.strategy {
        let opts = GcOptions {
            strategy,
            cache_capacity: args.tuning.cache_capacity,
            batch_size: args.tuning.batch_size,
            prefetch_jobs: args.tuning.prefetch_jobs as usize,
            phases: args.phase,
            atime_check: false,
            ..GcOptions::default()
        };
        runs.push(sim::run(&store, &params, &opts)?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(Outcome::Ok);
    }
    print!("{}", table(&runs, params.block_bytes).text());
    Ok(Outcome::Ok)
}

/// One row per strategy.
pub fn table(runs: &[SimRun], block_bytes: u64) -> Table {
    let mut t = Table::new([
        "strategy",
        "touches",
        "listings",
        "stats",
        "metadata reads",
        "block writes",
        "phase 1",
        "chunks/s",
        "phase 2",
        "digest hit",
        "wall",
    ]);
    for r in runs {
        let c = &r.counters;
        let lookups = c.cache_hits + c.cache_misses;
        t.row(vec![
            r.strategy.name().to_string(),
            c.utimensat_calls.to_string(),
            (c.listings + c.sweep_listings).to_string(),
            c.stat_calls.to_string(),
            format!(
                "{} ({})",
                r.model.misses,
                human_bytes(r.model.misses * block_bytes)
            ),
            r.model.blocks_written.to_string(),
            duration_ns(r.phase1_ns),
            format!("{:.0}", r.phase1_chunks_per_s),
            if r.phase2_ns > 0 {
                duration_ns(r.phase2_ns)
            } else {
                "-".into()
            },
            if lookups > 0 {
                format!("{:.1}%", 100.0 * c.cache_hits as f64 / lookups as f64)
            } else {
                "-".into()
            },
            format!("{:.1} s", r.wall_seconds),
        ]);
    }
    t
}
