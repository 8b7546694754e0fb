//! `chunkscope simulate`

use anyhow::{bail, Result};
use clap::Args;

use super::gc::validate_cache_capacity;
use super::model_args::ModelArgs;
use super::Outcome;
use crate::gc::{GcOptions, Phases, Strategy};
use crate::gen::{GenConfig, PRESETS};
use crate::sim::{self, DigestMode, SimRun, SimSetup};
use crate::store::IndexOrder;
use crate::table::Table;
use crate::units::{duration_ns, human_bytes, thousands};

/// Run GC strategies on an in-memory store, through the metadata cost model: a store built
/// from the generator's history (what each strategy would cost on a store that is not on
/// this machine), or a real store's layout from a survey (`--store`, `--survey`).
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope simulate --preset small\n  \
    chunkscope simulate --preset small --strategy lru,inode-order --cache 1GiB\n  \
    chunkscope simulate --preset thread000 --digests hashed --json\n  \
    chunkscope simulate --store /dev/shm/tiny --strategy lru,batched\n  \
    chunkscope simulate --survey tiny.survey --model zfs-raidz-hdd\n  \
    chunkscope simulate --survey s3tiny.survey --s3-page-order key,inode\n\n\
    With --preset, the store is what `chunkscope gen` would write for the same preset and\n\
    seed, created in the same order (inode numbers follow it, as on ZFS and tmpfs); with\n\
    --store or --survey, the real store as a survey saw it (its inode numbers, readdir\n\
    orders and references). Every strategy starts from that state with a cold model. The GC is the same code as `chunkscope gc`; the requests\n\
    charged are those a chunkscope mount of the real store receives.")]
pub struct SimulateArgs {
    /// Simulate a real datastore: a read-only survey of it first (as `chunkscope survey`:
    /// its chunks' real inode numbers, its index files' references), then every strategy on
    /// that layout.
    #[arg(long, value_name = "STORE", conflicts_with_all = ["survey", "preset", "seed", "slice", "digests", "first_ino"])]
    store: Option<std::path::PathBuf>,
    /// Simulate the store a saved survey saw (`chunkscope survey --out FILE`).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["preset", "seed", "slice", "digests", "first_ino"])]
    survey: Option<std::path::PathBuf>,
    /// Simulate the store a trace of a whole GC saw (through a mount, or `trace import`ed):
    /// its chunks' inodes, the references it touched, what it removed (a trace of lru has
    /// no cache hits: naive then touches fewer references than the real indexes hold).
    #[arg(long, value_name = "TRACE", conflicts_with_all = ["store", "survey", "preset", "seed", "slice", "digests", "first_ino"])]
    store_trace: Option<std::path::PathBuf>,
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
        default_value = Strategy::all_names()
    )]
    strategy: Vec<Strategy>,
    /// Simulate an S3 datastore (PBS 4): the store its local cache, the GC's three phases;
    /// one run per page order given for phase 2's local stats: key (PBS 4's) and inode
    /// (`gc --s3-page-order inode`). The bucket is the one a survey listed (`survey
    /// --s3-bucket`, whose datastore is simulated as S3 in key order without this option),
    /// else every chunk file an object. The bucket's requests are counted, not timed.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "ORDER,...")]
    s3_page_order: Vec<crate::gc::PageOrder>,
    /// With --store: an S3 datastore's bucket, listed into the survey (as `survey
    /// --s3-bucket`).
    #[command(flatten)]
    s3: super::s3_args::S3Args,
    #[command(flatten)]
    model: ModelArgs,
    /// Digest cache entries (PBS gc-cache-capacity); 0 turns the cache off.
    #[arg(long, default_value_t = crate::gc::DEFAULT_CACHE_CAPACITY, value_name = "N")]
    cache_capacity: usize,
    /// The order phase 1 visits the index files in (iterator, walk or hash-set; default: each
    /// strategy's: walk for unpatched, iterator for the others).
    #[arg(long, value_name = "ORDER")]
    index_order: Option<IndexOrder>,
    /// Digests per batch (batched, inode-order); several (comma-separated) run each of those
    /// strategies once per size.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1048576",
        value_name = "N[,N...]"
    )]
    batch_size: Vec<usize>,
    /// Threads listing chunk directories in the prefetch pass; several (comma-separated) run
    /// prefetch once per count.
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = clap::value_parser!(u16).range(1..=64), value_name = "N[,N...]")]
    prefetch_jobs: Vec<u16>,
    /// Run only phase 1 (mark) or both phases.
    #[arg(long, value_enum, default_value = "all")]
    phase: Phases,
    /// Chunk names: SHA-256 of the payload as `gen` writes them (exact), or a hash of the
    /// content (hashed: no payload to hash, for large shapes).
    #[arg(long, value_enum, default_value = "exact")]
    digests: DigestMode,
    /// Simulate one N-th of the store (N a power of two): an N-th of its backup groups,
    /// namespaces and 65,536 chunk directories, with the model's metadata cache divided by
    /// N. It keeps chunks per directory, and with them
    /// how the strategies rank, on a store too large to simulate whole (`--preset
    /// datastore-b --slice 32`: 2,048 directories of ~160 chunks); counts and times are the
    /// slice's, about an N-th of the whole store's.
    #[arg(long, default_value_t = 1, value_name = "N")]
    slice: u32,
    /// Number the simulated inodes from N (a real store's root inode, to compare block by block).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    first_ino: u64,
    /// Start every strategy with the model's cache holding the store's metadata (as far as it
    /// fits), as a pool that ran a GC shortly before does; the default is a cold cache.
    #[arg(long)]
    warm: bool,
    /// A fault rule, as `chunkscope mount --fault` takes it (repeatable): every run gets the
    /// faults a mount of the same store with the same rules and seed would inject. Delays are
    /// recorded, not waited for; the model's clock does not count them.
    #[arg(long = "fault", value_name = "RULE")]
    faults: Vec<String>,
    /// Read fault rules from FILE, one per line (# comments), after the --fault ones.
    #[arg(long = "faults", value_name = "FILE")]
    fault_files: Vec<std::path::PathBuf>,
    /// Seed of the fault decisions (a mount's --seed).
    #[arg(long, default_value_t = 0, value_name = "N")]
    fault_seed: u64,
    /// Seconds the simulated mount's kernel caches directories (a mount's --dir-ttl): their
    /// lookups and stats within it are not requests; 0 makes every one a request
    /// [default: 600, as a mount of a datastore].
    #[arg(long, value_name = "SECONDS")]
    dir_ttl: Option<f64>,
    /// Memory the simulation may take [default: what this process can still take:
    /// MemAvailable, the cgroup's memory.max, ulimit -v].
    #[arg(long, value_name = "SIZE")]
    max_memory: Option<String>,
    /// Build the store even when its estimated peak memory exceeds --max-memory (it is
    /// refused otherwise, with the estimate and the largest --scale that fits).
    #[arg(long)]
    force: bool,
    /// Runs side by side, each on its own copy of what a run changes (atimes, referenced set,
    /// model: about 21 bytes a chunk and 64 MiB) over one shared store, as many as fit in
    /// memory; the results are those of the runs one after the other. Runs with --trace or
    /// fault rules take one at a time [default: the CPUs, at most the runs].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    jobs: Option<u16>,
    /// The runs as JSON: `--json` on standard output (instead of the table),
    /// `--json=FILE` into FILE (beside the table).
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    json: Option<std::path::PathBuf>,
    /// Write the simulated requests of every run to FILE in the trace format (markers
    /// separate the strategies' phases), for `chunkscope analyze`.
    #[arg(long, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
    /// Keep this share of the metadata blocks in the trace (e.g. 1% or 0.01), chosen by a
    /// hash of the block: everything on a kept block is recorded.
    #[arg(long, value_name = "RATE", requires = "trace", default_value = "100%")]
    trace_sample: String,
}

/// A simulated store ready to run, and what was estimated of it.
struct Prepared {
    store: sim::SimStore,
    /// Chunks it holds (estimated before it was built, for the jobs side by side).
    chunks: u64,
    /// Its estimated peak memory.
    peak_bytes: u64,
    /// The memory the simulation may take.
    limit: Option<u64>,
    /// What it was built from, for the trace's header.
    origin: Origin,
    slice: sim::Slice,
    /// The survey's header, when it was built from one: the filesystem the model is fitted to.
    surveyed: Option<crate::survey::file::FileHeader>,
    /// An S3 datastore's bucket as a survey listed it.
    bucket: Option<std::sync::Arc<[crate::survey::file::SurveyObject]>>,
}

enum Origin {
    Preset,
    Survey(String),
    Trace(String),
}

pub fn run(mut args: SimulateArgs) -> Result<Outcome> {
    validate_cache_capacity(args.cache_capacity)?;
    if let Some(0) = args.batch_size.iter().min() {
        bail!("--batch-size 0: a batch holds at least one digest");
    }
    if args.phase == Phases::Sweep {
        bail!("--phase sweep: a simulated sweep needs the mark before it; use mark or all");
    }
    let faults = crate::faults::Faults::load(&args.faults, &args.fault_files, args.fault_seed)?;
    faults.check_kind(false)?;
    let mut params = args
        .model
        .params_or(Some("zfs-hdd"))?
        .expect("a default model");
    let progress = !super::to_stdout(&args.json) && super::stderr_is_terminal();
    let (limit, what) = match &args.max_memory {
        Some(m) => (
            Some(parse_size::parse_size(m).map_err(|e| anyhow::anyhow!("--max-memory {m}: {e}"))?),
            "--max-memory",
        ),
        None => (
            crate::fsutil::available_memory(),
            "what this process can still take (MemAvailable, the cgroup's memory.max, ulimit -v)",
        ),
    };
    let built = std::time::Instant::now();
    let prepared = if let Some(trace) = &args.store_trace {
        traced(&args, trace, &params, limit, what, progress)?
    } else if args.store.is_some() || args.survey.is_some() {
        surveyed(&args, &params, limit, what, progress)?
    } else {
        generated(&args, &params, limit, what, progress)?
    };
    let Prepared {
        store,
        chunks: estimated_chunks,
        peak_bytes,
        limit,
        origin,
        slice,
        surveyed,
        bucket,
    } = prepared;
    let bucket = s3_source(&mut args, bucket);
    store.set_faults(Some(faults));
    if let Some(ttl) = args.dir_ttl {
        store.set_dir_ttl(super::seconds(ttl, "--dir-ttl")?);
    }
    store.fill_dir_entries(&mut params);
    // A real store's disk is its filesystem: seeks are spread over that, blocks placed by
    // its geometry.
    if let Some(note) = surveyed.as_ref().and_then(|h| h.fit_model(&mut params)) {
        tracing::warn!("{note}");
    }
    if !super::to_stdout(&args.json) {
        describe(
            &args,
            &store,
            &params,
            &origin,
            slice,
            built.elapsed().as_secs_f64(),
        );
    }
    let writer = start_trace(&args, &store, &params, &origin, slice)?;
    let plan = plan(&args);
    let run_one = |store: &sim::SimStore, i: usize, progress: bool| -> Result<SimRun> {
        let (strategy, batch_size, jobs, variant, page_order) = plan[i].clone();
        let opts = GcOptions {
            strategy,
            cache_capacity: args.cache_capacity,
            batch_size,
            index_order: args.index_order,
            prefetch_jobs: jobs as usize,
            phases: args.phase,
            atime_check: false,
            s3_page_order: page_order.unwrap_or_default(),
            ..GcOptions::default()
        };
        let mut run = sim::run_on(
            store,
            page_order.map(|_| &bucket),
            &params,
            &opts,
            args.warm,
            progress,
        )?;
        run.variant = variant;
        // A run at the threads' scale takes minutes to hours: say each one as it ends,
        // so a long run shows its progress and a stopped one keeps what it finished.
        tracing::info!("{}", run_summary(&run));
        Ok(run)
    };
    let jobs = jobs_that_fit(&args, plan.len(), limit, peak_bytes, estimated_chunks);
    // Progress bars only for runs one after the other: several would draw over each other.
    let bars = progress && jobs.min(plan.len()) <= 1;
    let runs = sim::side_by_side(&store, plan.len(), jobs, |st, i| run_one(st, i, bars))?;
    if let Some(w) = writer {
        drop(store.set_trace(None)); // the sink: the writer finishes when it is gone
        let stats = w.finish()?;
        tracing::info!(
            "trace {}: {} records ({} lost)",
            args.trace.as_ref().expect("a trace path").display(),
            stats.written,
            stats.lost
        );
    }
    if let Some(dest) = &args.json {
        super::write_json(dest, &runs)?;
        if super::to_stdout(&args.json) {
            return Ok(Outcome::Ok);
        }
    }
    print!("{}", table(&runs, params.block_bytes).text());
    Ok(Outcome::Ok)
}

/// The bucket an S3 datastore's runs use: the one a survey listed (the datastore's GC is then
/// PBS 4's, in key order unless `--s3-page-order` says otherwise), else the store's chunk files.
fn s3_source(
    args: &mut SimulateArgs,
    surveyed: Option<std::sync::Arc<[crate::survey::file::SurveyObject]>>,
) -> sim::bucket::BucketSource {
    let Some(objects) = surveyed else {
        return sim::bucket::BucketSource::Store;
    };
    if args.s3_page_order.is_empty() {
        args.s3_page_order = vec![crate::gc::PageOrder::Key];
    }
    tracing::info!(
        "an S3 datastore: its bucket as the survey listed it, {} objects ({})",
        thousands(objects.len() as u64),
        human_bytes(objects.iter().map(|o| o.size).sum())
    );
    sim::bucket::BucketSource::Objects(objects)
}

/// One run to make: (strategy, batch size, prefetch jobs, variant label, an S3 datastore's
/// page order).
type Planned = (
    Strategy,
    usize,
    u16,
    Option<String>,
    Option<crate::gc::PageOrder>,
);

/// The store as built, in two lines for a person: what it is and its memory.
fn describe(
    args: &SimulateArgs,
    store: &sim::SimStore,
    params: &crate::model::ModelParams,
    origin: &Origin,
    slice: sim::Slice,
    built_s: f64,
) {
    let slice_text = match slice.of {
        1 => String::new(),
        _ => format!(
            ", slice {} ({} chunk directories, {} chunks each; the model's cache {})",
            slice.label(),
            thousands(slice.chunk_dirs() as u64),
            thousands(store.dir_entries()),
            human_bytes(slice.params(params).cache_bytes)
        ),
    };
    let mechanisms = params.mechanisms();
    let order = args
        .index_order
        .map(|o| format!("; index order {}", o.name()))
        .unwrap_or_default();
    let name = match &origin {
        Origin::Preset => format!("{} (seed {}{slice_text})", args.preset, args.seed),
        Origin::Survey(s) => format!("{s} (surveyed)"),
        Origin::Trace(t) => format!("seen by the GC of {t}"),
    };
    tracing::info!(
        "simulated store {name}: {} chunks, built in {:.1} s; model {} (mechanisms: {}){order}",
        thousands(store.chunks_created() as u64),
        built_s,
        params.name,
        if mechanisms.is_empty() {
            "none".to_string()
        } else {
            mechanisms.join(", ")
        }
    );
    let n = store.chunks_created().max(1) as u64;
    let parts: Vec<String> = store
        .memory_by_structure()
        .into_iter()
        .filter(|p| p.1 > 0)
        .map(|(what, bytes)| format!("{what} {} ({} B a chunk)", human_bytes(bytes), bytes / n))
        .collect();
    tracing::info!("its memory: {}", parts.join(", "));
}

/// The trace of the simulated requests, with `--trace`: its writer, the store's sink set.
fn start_trace(
    args: &SimulateArgs,
    store: &sim::SimStore,
    params: &crate::model::ModelParams,
    origin: &Origin,
    slice: sim::Slice,
) -> Result<Option<crate::trace::TraceWriter>> {
    Ok(match &args.trace {
        Some(path) => {
            let rate = super::parse_rate(&args.trace_sample, "--trace-sample")?;
            let mut meta = crate::trace::TraceMeta {
                store: crate::store::ChunkStore::root(store).display().to_string(),
                ..Default::default()
            };
            let o = &mut meta.options;
            o.insert("simulated".into(), true.into());
            match &origin {
                Origin::Preset => {
                    o.insert("preset".into(), args.preset.clone().into());
                    o.insert("seed".into(), args.seed.into());
                }
                Origin::Survey(s) => {
                    o.insert("survey".into(), s.clone().into());
                }
                Origin::Trace(t) => {
                    o.insert("store_trace".into(), t.clone().into());
                }
            }
            if slice.of > 1 {
                o.insert("slice".into(), slice.of.into());
            }
            o.insert("sample_rate".into(), rate.into());
            let rules = store.fault_stats();
            if !rules.is_empty() {
                let texts: Vec<String> = rules.into_iter().map(|r| r.rule).collect();
                o.insert("faults".into(), texts.into());
                o.insert("fault_seed".into(), args.fault_seed.into());
            }
            // The model that charged the requests: the slice's.
            meta.set_model(serde_json::to_value(slice.params(params))?, false);
            meta.set_kernel_cache(&crate::trace::KernelCache {
                dir_ttl_s: store.dir_ttl_s(),
                ..Default::default()
            });
            let (w, sink) = crate::trace::TraceWriter::start(path, meta)
                .map_err(|e| anyhow::anyhow!("--trace {}: {e}", path.display()))?;
            store.set_trace(Some(crate::instrument::Trace::sampled(
                sink,
                rate,
                params.layout,
            )));
            Some(w)
        }
        None => None,
    })
}

/// Every run to make: one per strategy, and per value of the tuning option it uses when
/// several are given (labelled).
fn plan(args: &SimulateArgs) -> Vec<Planned> {
    let mut plan: Vec<Planned> = Vec::new();
    for &strategy in &args.strategy {
        // One run per value of the tuning option the strategy uses, labelled when there are
        // several.
        let variants: Vec<(usize, u16, Option<String>)> = match strategy {
            Strategy::Batched | Strategy::InodeOrder if args.batch_size.len() > 1 => args
                .batch_size
                .iter()
                .map(|&b| (b, 1, Some(format!("batch {b}"))))
                .collect(),
            Strategy::Prefetch if args.prefetch_jobs.len() > 1 => args
                .prefetch_jobs
                .iter()
                .map(|&j| {
                    let jobs = if j == 1 {
                        "1 job".into()
                    } else {
                        format!("{j} jobs")
                    };
                    (args.batch_size[0], j, Some(jobs))
                })
                .collect(),
            _ => vec![(args.batch_size[0], args.prefetch_jobs[0], None)],
        };
        for (batch_size, jobs, variant) in variants {
            if args.s3_page_order.is_empty() {
                plan.push((strategy, batch_size, jobs, variant, None));
                continue;
            }
            for &order in &args.s3_page_order {
                let name = match order {
                    crate::gc::PageOrder::Key => "s3 key order",
                    crate::gc::PageOrder::Inode => "s3 inode order",
                };
                let label = match &variant {
                    Some(v) => format!("{v}, {name}"),
                    None => name.to_string(),
                };
                plan.push((strategy, batch_size, jobs, Some(label), Some(order)));
            }
        }
    }
    plan
}

/// How many of the `runs` go side by side: `--jobs` or the CPUs, as many as fit in memory
/// next to the store's estimated peak (each takes its own atimes, removed bits, referenced
/// set and caches).
fn jobs_that_fit(
    args: &SimulateArgs,
    runs: usize,
    limit: Option<u64>,
    peak_bytes: u64,
    estimated_chunks: u64,
) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut jobs = args.jobs.map_or(cpus, |j| j as usize).min(runs).max(1);
    // Each run beside the first takes its own atimes, removed bits, referenced set and
    // caches: as many as fit next to the store's estimated peak.
    let per_job = sim::run_state_bytes(estimated_chunks);
    if let Some(limit) = limit.filter(|_| !args.force) {
        let room = limit.saturating_sub(peak_bytes) / per_job.max(1);
        if (jobs as u64 - 1) > room {
            let fit = room as usize + 1;
            tracing::info!(
                "{jobs} runs side by side would need about {} more than the store; \
                 running {fit} at a time",
                human_bytes((jobs as u64 - 1) * per_job)
            );
            jobs = fit;
        }
    }
    jobs
}

/// A spinner on standard error while a store is built (hidden without a terminal).
fn spinner(progress: bool, message: String) -> indicatif::ProgressBar {
    if !progress {
        return indicatif::ProgressBar::hidden();
    }
    let s = indicatif::ProgressBar::new_spinner();
    s.set_message(message);
    s.enable_steady_tick(std::time::Duration::from_millis(100));
    s
}

/// The store of `--preset`: its history, checked against the memory it may take, built.
fn generated(
    args: &SimulateArgs,
    params: &crate::model::ModelParams,
    limit: Option<u64>,
    what: &str,
    progress: bool,
) -> Result<Prepared> {
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
    let setup = SimSetup {
        cfg,
        params: params.clone(),
        digests: args.digests,
        first_ino: args.first_ino,
        now: crate::fsutil::now_epoch_coarse(),
        slice: sim::Slice::new(args.slice)?,
    };
    if let Some(w) = setup.slice.cache_warning(params) {
        tracing::warn!("{w}");
    }
    let spinner = spinner(
        progress,
        format!(
            "building the simulated {} store (the history, then its chunks in creation order)",
            args.preset
        ),
    );
    let history = crate::gen::build_history(&setup.slice.config(&setup.cfg))?;
    let estimate = sim::estimate_memory(&history, args.digests);
    if let Some(limit) = limit.filter(|&l| estimate.peak_bytes > l && !args.force) {
        spinner.finish_and_clear();
        // Chunks grow with the scale (disks and archives); the rest does not.
        let fit = match estimate.fit(limit) {
            Some(f) => format!("--scale {} fits", format_scale(setup.cfg.scale * f)),
            None => "no scale fits".into(),
        };
        let hashed = if args.digests == DigestMode::Exact {
            ", --digests hashed needs less"
        } else {
            ""
        };
        bail!(
            "--preset {} --scale {}: the simulated store would hold about {} chunks and need \
             about {} at its peak, more than {what} ({}); {fit}{hashed}, --force builds it \
             anyway",
            args.preset,
            setup.cfg.scale,
            thousands(estimate.chunks),
            human_bytes(estimate.peak_bytes),
            human_bytes(limit),
        );
    }
    let store = sim::build_from(&setup, history)?;
    spinner.finish_and_clear();
    Ok(Prepared {
        store,
        chunks: estimate.chunks,
        peak_bytes: estimate.peak_bytes,
        limit,
        origin: Origin::Preset,
        slice: setup.slice,
        surveyed: None,
        bucket: None,
    })
}

/// The store of `--store-trace`: what a trace of a whole GC saw.
fn traced(
    args: &SimulateArgs,
    trace: &std::path::Path,
    params: &crate::model::ModelParams,
    limit: Option<u64>,
    what: &str,
    progress: bool,
) -> Result<Prepared> {
    if args.shape != super::gen::ShapeArgs::default() {
        bail!("--scale, --dedup and the other shape options describe a generated store, not a traced one");
    }
    let spinner = spinner(
        progress,
        format!("building the store {} saw", trace.display()),
    );
    let store = sim::build_trace(trace, params)?;
    spinner.finish_and_clear();
    let chunks = store.chunks_created() as u64;
    let peak_bytes = sim::survey_peak_bytes(chunks, 0);
    if let Some(limit) = limit.filter(|&l| peak_bytes > l && !args.force) {
        bail!(
            "{}: a simulated store of {} chunks would need about {} at its peak, more than \
             {what} ({}); --force builds it anyway",
            trace.display(),
            thousands(chunks),
            human_bytes(peak_bytes),
            human_bytes(limit)
        );
    }
    Ok(Prepared {
        store,
        chunks,
        peak_bytes,
        limit,
        origin: Origin::Trace(trace.display().to_string()),
        slice: sim::Slice::WHOLE,
        surveyed: None,
        bucket: None,
    })
}

/// The store of `--store` (surveyed now) or `--survey` (read from the file).
fn surveyed(
    args: &SimulateArgs,
    params: &crate::model::ModelParams,
    limit: Option<u64>,
    what: &str,
    progress: bool,
) -> Result<Prepared> {
    if args.shape != super::gen::ShapeArgs::default() {
        bail!("--scale, --dedup and the other shape options describe a generated store, not a surveyed one");
    }
    if args.s3.given() && args.store.is_none() {
        bail!("--s3-bucket and the other S3 options go with --store (a survey's file holds its bucket)");
    }
    let client = args.s3.client()?;
    let (mut file, name) = read_survey(
        args.store.as_deref(),
        args.survey.as_deref(),
        client.as_ref().map(|c| c as &dyn crate::bucket::Bucket),
        progress,
    )?;
    let bucket = file
        .bucket
        .as_mut()
        .map(|b| std::mem::take(&mut b.objects).into());
    let header = file.header.clone();
    let chunks = file.chunks.len() as u64;
    let references: u64 = file.indexes.iter().map(|i| i.refs.len() as u64).sum();
    let peak_bytes = sim::survey_peak_bytes(chunks, references);
    if let Some(limit) = limit.filter(|&l| peak_bytes > l && !args.force) {
        bail!(
            "{name}: the simulated store of {} chunks and {} references would need about {} \
             at its peak, more than {what} ({}); --force builds it anyway",
            thousands(chunks),
            thousands(references),
            human_bytes(peak_bytes),
            human_bytes(limit)
        );
    }
    let spinner = spinner(progress, format!("building the simulated store of {name}"));
    let store = sim::build_survey(file, params)?;
    spinner.finish_and_clear();
    Ok(Prepared {
        store,
        chunks,
        peak_bytes,
        limit,
        origin: Origin::Survey(name),
        slice: sim::Slice::WHOLE,
        surveyed: Some(header),
        bucket,
    })
}

/// The survey of `store` (taken now, read-only; with its bucket when given) or the one saved
/// in `survey`, with a name for it.
pub(super) fn read_survey(
    store: Option<&std::path::Path>,
    survey: Option<&std::path::Path>,
    bucket: Option<&dyn crate::bucket::Bucket>,
    progress: bool,
) -> Result<(crate::survey::file::SurveyFile, String)> {
    match (store, survey) {
        (Some(store), _) => {
            // A survey of its own, in a file that goes when it has been read.
            let tmp = tempfile::Builder::new()
                .prefix("chunkscope-simulate-")
                .suffix(".survey")
                .tempfile()?;
            let opts = crate::survey::SurveyOptions {
                layout: crate::survey::LayoutChoice::Auto { dnode_size: None },
                cutoff_minutes: 1445,
                now: crate::fsutil::now_epoch(),
                out: Some(tmp.path().to_path_buf()),
                progress,
            };
            let report = match bucket {
                Some(b) => crate::survey::survey_s3(store, &opts, b)?,
                None => crate::survey::survey(store, &opts)?,
            };
            if !report.complete() {
                bail!(
                    "the survey of {} is incomplete ({} unreadable index files, {} chunk \
                     directories not the store's own): a GC would stop there; run \
                     `chunkscope survey` on it for the details",
                    store.display(),
                    report.unreadable_indexes.len(),
                    report.odd_chunk_dirs.len()
                );
            }
            let file = crate::survey::file::SurveyFile::read(tmp.path())?;
            Ok((file, store.display().to_string()))
        }
        (None, Some(path)) => Ok((
            crate::survey::file::SurveyFile::read(path)?,
            path.display().to_string(),
        )),
        (None, None) => bail!("--store or --survey: the store the GC ran on"),
    }
}

/// A scale factor with two significant digits, rounded down (what still fits).
fn format_scale(s: f64) -> String {
    if s <= 0.0 {
        return "0".into();
    }
    let digits = (2 - s.log10().floor() as i32 - 1).max(0);
    let f = 10f64.powi(digits);
    format!("{:.*}", digits as usize, (s * f).floor() / f)
}

/// One line for a finished run: its label, modelled phase times and wall time.
fn run_summary(run: &SimRun) -> String {
    format!(
        "{}: phase 1 {} ({} chunks/s), phase 2 {}, {} + {} metadata reads (demand + prefetch), {} block writes; {:.1} s wall",
        run.label(),
        duration_ns(run.phase1_ns),
        thousands(run.phase1_chunks_per_s.round() as u64),
        duration_ns(run.phase2_ns),
        thousands(run.model.misses),
        thousands(run.model.prefetched),
        thousands(run.model.blocks_written),
        run.wall_seconds
    )
}

/// One row per strategy.
pub fn table(runs: &[SimRun], block_bytes: u64) -> Table {
    // The prefetch pass's share of phase 1, when a run has one.
    let pass = runs.iter().any(|r| r.counters.prefetch_listings > 0);
    // Reads and writes are the whole run's: say so when it swept too (the demo's are phase 1's).
    let (reads, writes) = if runs.iter().any(|r| r.s3.is_some()) {
        // An S3 datastore's run has a phase 3 (the local markers' sweep).
        (
            "metadata reads, phases 1-3 (demand + prefetch)",
            "block writes, 1-3",
        )
    } else if runs.iter().any(|r| r.phase2_ns > 0) {
        (
            "metadata reads, phases 1+2 (demand + prefetch)",
            "block writes, 1+2",
        )
    } else {
        ("metadata reads (demand + prefetch)", "block writes")
    };
    let mut head = vec![
        "strategy", "touches", "listings", "stats", reads, writes, "phase 1",
    ];
    if pass {
        head.push("of it, pass");
    }
    head.extend(["chunks/s", "phase 2"]);
    // An S3 datastore's bucket requests and phase 3 (the local markers' sweep).
    let s3 = runs.iter().any(|r| r.s3.is_some());
    if s3 {
        head.extend(["S3 pages", "S3 deletes (keys)", "phase 3"]);
    }
    head.extend(["digest hit", "wall"]);
    let mut t = Table::new(head);
    for r in runs {
        let c = &r.counters;
        let mut row = vec![
            r.label(),
            thousands(c.utimensat_calls),
            thousands(c.listings + c.sweep_listings),
            thousands(c.stat_calls),
            format!(
                "{} + {} ({})",
                thousands(r.model.misses),
                thousands(r.model.prefetched),
                human_bytes(r.model.reads() * block_bytes)
            ),
            thousands(r.model.blocks_written),
            duration_ns(r.phase1_ns),
        ];
        if pass {
            row.push(if c.prefetch_listings > 0 {
                duration_ns(r.pass_ns)
            } else {
                "-".into()
            });
        }
        row.extend([
            thousands(r.phase1_chunks_per_s.round() as u64),
            if r.phase2_ns > 0 {
                duration_ns(r.phase2_ns)
            } else {
                "-".into()
            },
        ]);
        if s3 {
            row.extend(match &r.s3 {
                Some(s) => [
                    thousands(s.bucket.list_pages),
                    format!(
                        "{} ({})",
                        thousands(s.bucket.delete_requests),
                        thousands(s.bucket.keys_deleted)
                    ),
                    duration_ns(s.phase3_ns),
                ],
                None => ["-".into(), "-".into(), "-".into()],
            });
        }
        row.extend([
            c.digest_hit_ratio()
                .map_or("-".into(), |h| format!("{:.1}%", 100.0 * h)),
            format!("{:.1} s", r.wall_seconds),
        ]);
        t.row(row);
    }
    t
}
