//! Simulation: the GC strategies, unchanged, against an in-memory store built from the
//! generator's history, through the same cost model as the overlay.
//!
//! [`store::SimStore`] implements [`crate::store::ChunkStore`] (and the index walk's
//! [`crate::datastore::snapshots::Tree`]), so [`crate::gc::run`] runs on it exactly as on a
//! datastore or a mount: no strategy code knows it is simulated. Each strategy starts from
//! the store as built and a cold model ([`SimStore::reset`]), as the demo's shadow mounts do.

mod ahead;
pub mod bucket;
pub mod builder;
mod dentries;
mod digest_table;
pub mod fidelity;
pub mod history_source;
mod markers;
mod ops;
mod requests;
pub mod store;
pub mod survey_source;
pub mod trace_source;

use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::gc::log::TaskLog;
use crate::gc::{self, Counters, GcOptions, GcPhase, Hooks, Strategy};
use crate::gen::GenConfig;
use crate::model::{Model, ModelParams, Totals};
use crate::trace::Marker;
pub use store::{DigestMode, RequestCounts, SimStore};

/// One strategy's simulated run.
#[derive(Clone, Debug, Serialize)]
pub struct SimRun {
    /// The strategy.
    pub strategy: Strategy,
    /// Which of several tuning values this run used ("batch 131072", "8 jobs"), if the
    /// caller asked for several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The GC's own counters.
    pub counters: Counters,
    /// The requests a mount would have received, by kind.
    pub requests: RequestCounts,
    /// The requests up to the end of phase 1.
    pub phase1_requests: RequestCounts,
    /// Demand reads (the model's misses) of phase 1.
    pub phase1_reads: u64,
    /// Its prefetch reads (blocks).
    pub phase1_prefetch_reads: u64,
    /// The I/Os those took (fewer than the blocks where reads were aggregated).
    pub phase1_prefetch_ios: u64,
    /// Its block writes (the open transaction group included).
    pub phase1_block_writes: u64,
    /// Model totals after the final transaction group was written.
    pub model: Totals,
    /// Modelled time of phase 1 (from its start marker to its end marker), ns.
    pub phase1_ns: u64,
    /// Modelled time of phase 2, ns (0 when it did not run).
    pub phase2_ns: u64,
    /// Modelled time from phase 1's start to its first index file: the prefetch pass (for
    /// the other strategies, the few requests that open the store).
    pub pass_ns: u64,
    /// Distinct referenced chunks per modelled second of phase 1.
    pub phase1_chunks_per_s: f64,
    /// Real time the simulation took.
    pub wall_seconds: f64,
    /// Each fault rule with its counters in this run (with fault rules only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<crate::faults::RuleStats>,
    /// Its progress curve: the task log's percentage lines at the model's clock (what
    /// `calibrate` fits to a real GC's).
    #[serde(skip)]
    pub curve: crate::gc::curve::Curve,
    /// An S3 datastore's run: its bucket's requests and its phase 3.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3: Option<SimS3>,
}

impl SimRun {
    /// The strategy, with the tuning value in parentheses when the run has one.
    pub fn label(&self) -> String {
        match &self.variant {
            Some(v) => format!("{} ({v})", self.strategy.name()),
            None => self.strategy.name().to_string(),
        }
    }
}

/// What the simulation was asked.
pub struct SimSetup {
    /// The generator configuration of the store.
    pub cfg: GenConfig,
    /// The cost model.
    pub params: ModelParams,
    /// How chunk digests are made.
    pub digests: DigestMode,
    /// The root's inode number (the rest follow in creation order).
    pub first_ino: u64,
    /// Generation time the store is simulated at (shifts atimes as `gen` does).
    pub now: i64,
    /// The part of the store to simulate ([`Slice::WHOLE`]: all of it).
    pub slice: Slice,
}

/// A slice of a store: one `of`-th of its backup groups, namespaces and 65,536 chunk
/// directories (every chunk's digest falls in the slice's directories), with the model's
/// metadata cache divided by as much. Each group keeps its disks and history, so the slice
/// keeps what decides a GC's metadata traffic per chunk: chunks per directory (ZAP leaves,
/// what a listing prefetches), referenced chunks per metadata block, index files per chunk
/// and the share of the store the cache holds. The transaction group and the dirty limit
/// stay as they are: they are windows of the request stream (seconds, blocks in flight),
/// whose reuse of blocks follows the index walk, not the store's size; divided as well, a
/// slice of datastore B wrote 3-8x the blocks of the whole store per chunk (BENCHMARKS.md
/// compares a 1/32 slice with the whole store: rates within 8%, block writes 0.77-1.13x).
/// Counts and times are the slice's, about one `of`-th of the whole store's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Slice {
    /// The store is `of` slices (1: the whole store).
    pub of: u32,
}

impl Slice {
    /// The whole store.
    pub const WHOLE: Slice = Slice { of: 1 };

    /// The finest slice: 256 chunk directories. Datastore B on its pool ranks at 1/256 as on
    /// the whole store (every phase-1 rate within 3%; block writes drift, batched's to 0.10x,
    /// its phase 1 fitting in one transaction group); at 1/1024 the divided cache (16 MiB)
    /// no longer holds what one index file's walk comes back to, and lru came out 6x slower
    /// than on the whole store, inode-order 5x (BENCHMARKS.md).
    pub const FINEST: u32 = 256;

    /// One `of`-th of a store; `of` is a power of two up to [`Slice::FINEST`].
    pub fn new(of: u32) -> Result<Slice> {
        if !of.is_power_of_two() || of > Self::FINEST {
            anyhow::bail!(
                "--slice {of}: must be a power of two from 1 to {} (a slice keeps 65,536 / N \
                 chunk directories; finer slices divide the model's cache below what one \
                 index file's walk needs)",
                Self::FINEST
            );
        }
        Ok(Slice { of })
    }

    /// Chunk directories of the slice (prefixes `0..chunk_dirs()`).
    pub fn chunk_dirs(self) -> usize {
        crate::datastore::paths::CHUNK_SUBDIRS / self.of as usize
    }

    /// The generator configuration of the slice: the groups and namespaces divided (at
    /// least one each), everything a group is left as it is.
    pub fn config(self, cfg: &GenConfig) -> GenConfig {
        let part = |n: usize| ((n as f64 / self.of as f64).round() as usize).max(1);
        GenConfig {
            groups: part(cfg.groups),
            namespaces: part(cfg.namespaces),
            ..cfg.clone()
        }
    }

    /// The model of the slice's pool: the cache divided, so that it holds the same share of
    /// the (smaller) store; everything else unchanged (see [`Slice`]).
    pub fn params(self, p: &ModelParams) -> ModelParams {
        ModelParams {
            cache_bytes: (p.cache_bytes / self.of as u64).max(p.block_bytes),
            ..p.clone()
        }
    }

    /// The smallest divided cache a slice was measured faithful with: 64 MiB (datastore B's
    /// pool at 1/256); 16 MiB (its pool at 1/1024) and 8 MiB (`zfs-hdd` at 1/32) were not.
    pub const MIN_CACHE: u64 = 64 << 20;

    /// A warning when the slice's cache is below [`Slice::MIN_CACHE`].
    pub fn cache_warning(self, p: &ModelParams) -> Option<String> {
        let cache = self.params(p).cache_bytes;
        (self.of > 1 && cache < Self::MIN_CACHE).then(|| {
            format!(
                "the slice's metadata cache ({} of {}'s {}) is below 64 MiB, where it no \
                 longer holds what one index file's walk comes back to: its rates drift from \
                 the whole store's (on datastore B, 0.4-5.6x with zfs-hdd at 1/32); use a \
                 coarser slice or a larger --cache",
                crate::units::human_bytes(cache),
                p.name,
                crate::units::human_bytes(p.cache_bytes)
            )
        })
    }

    /// `d` moved into the slice's directories: its directory prefix divided by `of` (the
    /// rest of the digest, which names it, unchanged).
    #[inline]
    pub fn digest(self, mut d: crate::datastore::Digest) -> crate::datastore::Digest {
        if self.of > 1 {
            let p = d.prefix() / self.of as u16;
            d.0[..2].copy_from_slice(&p.to_be_bytes());
        }
        d
    }

    /// "1/32" (or "whole").
    pub fn label(self) -> String {
        match self.of {
            1 => "whole".into(),
            n => format!("1/{n}"),
        }
    }
}

/// Peak bytes a chunk of the simulated store takes beyond [`BASE_BYTES`] (the build's, when
/// the history's content sets are alive too), measured (BENCHMARKS.md): 106 at datastore A's
/// size and 91 on thread 000's store with hashed digests; rounded up, as the sets' table
/// doubles at powers of two.
const PEAK_BYTES_PER_CHUNK_HASHED: u64 = 115;
/// See [`PEAK_BYTES_PER_CHUNK_HASHED`]: exact digests keep a map from content to chunk as
/// well (17 bytes a slot: 112 a chunk on thread 000's store, about 31 more at A's size).
const PEAK_BYTES_PER_CHUNK_EXACT: u64 = 145;
/// What the process takes besides the chunks (the binary, the chunk directories, the model).
const BASE_BYTES: u64 = 64 << 20;

/// What a simulated store will take, estimated before it is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// Chunk files the store will hold (estimated from a sample of its slots).
    pub chunks: u64,
    /// Peak bytes of the process while building it and running a strategy.
    pub peak_bytes: u64,
}

impl MemoryEstimate {
    /// The factor by which the store's chunk count may shrink so that its peak fits in
    /// `limit` bytes, with a tenth to spare (`None` when even no chunks would not fit).
    pub fn fit(&self, limit: u64) -> Option<f64> {
        let room = limit.checked_sub(BASE_BYTES)? as f64 * 0.9;
        let chunks = (self.peak_bytes - BASE_BYTES).max(1) as f64;
        Some((room / chunks).min(1.0))
    }
}

/// The memory the store of `history` will take with `digests`, from a sample of a million
/// contents (a second or two even at datastore A's size).
pub fn estimate_memory(
    history: &crate::gen::history::History,
    digests: DigestMode,
) -> MemoryEstimate {
    let chunks = history.present_chunks_estimate(1 << 20);
    let per_chunk = match digests {
        DigestMode::Hashed => PEAK_BYTES_PER_CHUNK_HASHED,
        DigestMode::Exact => PEAK_BYTES_PER_CHUNK_EXACT,
    };
    MemoryEstimate {
        chunks,
        peak_bytes: BASE_BYTES + chunks * per_chunk,
    }
}

/// What a run side by side with others needs of its own ([`side_by_side`]) on a store of
/// `chunks` chunks: its atimes and removed bits (4 bytes and a bit a chunk), its GC's
/// referenced set (8 to 16 bytes a referenced chunk), and the digest LRU and the model's
/// caches (a fixed 64 MiB, above the default 1 Mi-entry LRU's 48 MiB).
pub fn run_state_bytes(chunks: u64) -> u64 {
    chunks * 21 + (64 << 20)
}

/// Builds the store once.
pub fn build(setup: &SimSetup) -> Result<SimStore> {
    build_from(
        setup,
        crate::gen::build_history(&setup.slice.config(&setup.cfg))?,
    )
}

/// Builds the store of `history` (made from `setup.cfg`).
pub fn build_from(setup: &SimSetup, history: crate::gen::history::History) -> Result<SimStore> {
    SimStore::build(
        &setup.slice.config(&setup.cfg),
        history,
        setup.digests,
        setup.first_ino,
        setup.now,
        setup.slice,
        Model::new(setup.slice.params(&setup.params)),
    )
}

/// Peak bytes of a simulated store built from a survey of `chunks` chunks and `references`
/// references, with a run: the survey file read (40 bytes a chunk, 4 a reference), the
/// store (chunk records, atimes, digest table, directories: about 65 bytes a chunk), its
/// index references (4 bytes each), a run's referenced set and caches, and [`BASE_BYTES`].
/// Calibrated on a survey of datastore B at a tenth (1,076,158 chunks, 5,626,730
/// references): 368 MB at the peak of `simulate --survey` with lru, batched and
/// inode-order one after the other (BENCHMARKS.md); rounded up.
pub fn survey_peak_bytes(chunks: u64, references: u64) -> u64 {
    BASE_BYTES + chunks * 200 + references * 16
}

/// Builds the store a survey saw, simulated at the survey's time with `params`' model.
pub fn build_survey(
    file: crate::survey::file::SurveyFile,
    params: &ModelParams,
) -> Result<SimStore> {
    let now = file.header.surveyed_at;
    let chunks = file.chunks.len();
    let source = survey_source::SurveySource { file };
    let (root, first_ino) = (source.root(), source.first_ino());
    SimStore::from_source(
        Box::new(source),
        root,
        first_ino,
        chunks,
        Slice::WHOLE,
        now,
        Model::new(params.clone()),
    )
}

/// Builds the store a trace of a whole GC saw ([`trace_source`]), simulated at the trace's
/// start with `params`' model.
pub fn build_trace(path: &std::path::Path, params: &ModelParams) -> Result<SimStore> {
    let source = trace_source::TraceSource::read(path)?;
    let (first_ino, chunks, now) = (source.first_ino(), source.chunk_count(), source.start_s);
    SimStore::from_source(
        Box::new(source),
        std::path::Path::new("/simulated/trace").to_path_buf(),
        first_ino,
        chunks,
        Slice::WHOLE,
        now,
        Model::new(params.clone()),
    )
}

/// Runs one GC with `opts` on `store` from its built state and a cold model (or, `warm`, a
/// model whose cache holds the store's metadata as far as it fits); `progress` draws a bar on
/// standard error (index files marked, chunk directories swept).
pub fn run(
    store: &SimStore,
    params: &ModelParams,
    opts: &GcOptions,
    warm: bool,
    progress: bool,
) -> Result<SimRun> {
    run_on(store, None, params, opts, warm, progress)
}

/// [`run`] of an S3 datastore's GC (PBS 4's three phases) when `s3` is given: the simulated
/// store is the local cache, and a [`bucket::SimBucket`] of the objects `s3` gives (a
/// survey's, or the store's chunk files as the run starts) the bucket, whose requests are
/// counted in the run's `s3`.
pub fn run_on(
    store: &SimStore,
    s3: Option<&bucket::BucketSource>,
    params: &ModelParams,
    opts: &GcOptions,
    warm: bool,
    progress: bool,
) -> Result<SimRun> {
    store.reset(Model::new(store.slice().params(params)));
    // Listed once the store is as a run starts, then reset again: the listing's requests
    // are no part of the run.
    let bucket = match s3 {
        Some(source) => {
            let b = bucket::SimBucket::new(source, store).context("listing the simulated store")?;
            store.reset(Model::new(store.slice().params(params)));
            Some(b)
        }
        None => None,
    };
    let bucket = bucket.as_ref();
    if warm {
        store.warm();
    }
    let started = Instant::now();
    store
        .open_requests()
        .context("opening the simulated store (lookup .chunks, opendir)")?;
    // Each phase boundary with the model's clock there.
    let mut marks: Vec<(gc::Boundary, u64)> = Vec::new();
    let mut phase1_requests = RequestCounts::default();
    let (mut phase1_reads, mut phase1_prefetch_reads, mut phase1_block_writes) = (0, 0, 0);
    let mut phase1_prefetch_ios = 0;
    let mut boundary = |b: gc::Boundary| -> Result<()> {
        store.mark(&Marker::phase(b.phase.number(), b.start, b.strategy.name()).encode());
        marks.push((b, store.with_model(|m| m.clock_ns())));
        if b.phase == GcPhase::Mark && !b.start {
            phase1_requests = store.counts();
            (
                phase1_reads,
                phase1_prefetch_reads,
                phase1_prefetch_ios,
                phase1_block_writes,
            ) = store.with_model(|m| {
                (
                    m.totals().misses,
                    m.totals().prefetched,
                    m.totals().prefetch_ios,
                    m.totals().blocks_written + m.dirty_blocks(),
                )
            });
        }
        Ok(())
    };
    let mut lines: Vec<(f64, String)> = Vec::new();
    let mut log = TaskLog::new(Box::new(std::io::sink()), progress)
        .labelled(opts.strategy.name())
        .tapped(|line: &str| {
            let at = store.with_model(|m| m.clock_ns()) as f64 / 1e9;
            lines.push((at, line.to_string()));
        });
    let hooks = Hooks {
        boundary: Some(&mut boundary),
        after_index: None,
        cutoff_fixed: None,
    };
    let report = match bucket {
        Some(b) => gc::run_s3(store, b, opts, &mut log, hooks),
        None => gc::run(store, opts, &mut log, hooks),
    }
    .with_context(|| format!("simulated GC, strategy {}", opts.strategy.name()))?;
    drop(log);
    let curve = crate::gc::curve::Curve::from_lines(lines.iter().map(|(t, l)| (*t, l.as_str())));
    let clock_at = |phase: GcPhase, start: bool| {
        marks
            .iter()
            .find(|(b, _)| b.phase == phase && b.start == start)
            .map(|m| m.1)
    };
    let span = |phase: GcPhase| match (clock_at(phase, true), clock_at(phase, false)) {
        (Some(a), Some(b)) => b - a,
        _ => 0,
    };
    let (phase1_ns, phase2_ns) = (span(GcPhase::Mark), span(GcPhase::Sweep));
    let s3 = bucket.map(|b| SimS3 {
        bucket: b.counts(),
        phase3_ns: span(GcPhase::MarkerSweep),
        page_order: opts.s3_page_order,
    });
    let pass_ns = match (clock_at(GcPhase::Mark, true), store.first_index_ns()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => 0,
    };
    let model = store.with_model(|m| {
        m.flush();
        m.totals().clone()
    });
    let c = report.counters;
    Ok(SimRun {
        strategy: opts.strategy,
        variant: None,
        phase1_chunks_per_s: store.referenced() as f64 / (phase1_ns as f64 / 1e9).max(1e-9),
        requests: store.counts(),
        phase1_requests,
        phase1_reads,
        phase1_prefetch_reads,
        phase1_prefetch_ios,
        phase1_block_writes,
        model,
        phase1_ns,
        phase2_ns,
        pass_ns,
        wall_seconds: started.elapsed().as_secs_f64(),
        faults: store.fault_stats(),
        counters: c,
        curve,
        s3,
    })
}

/// What a simulated S3 datastore's GC did beyond a local one's.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SimS3 {
    /// How phase 2 stat'ed each page's local files: in key order, or in inode order.
    pub page_order: gc::PageOrder,
    /// Its requests to the bucket (their time is the server's, not modelled).
    pub bucket: bucket::BucketCounts,
    /// Modelled time of phase 3 (the local markers' sweep), ns.
    pub phase3_ns: u64,
}

/// Runs `f(store, i)` for every `i` in `0..n`, on `jobs` threads side by side, each with its
/// own fork of `store` (the first with `store` itself), and returns the results in `i`'s
/// order. One after the other, on `store`, when `jobs` is 1 or the store cannot be forked
/// (fault rules, a trace). After an error no new `i` is started; the first error in `i`'s
/// order is returned.
pub fn side_by_side<T: Send>(
    store: &SimStore,
    n: usize,
    jobs: usize,
    f: impl Fn(&SimStore, usize) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let jobs = jobs.min(n).max(1);
    let forks: Option<Vec<SimStore>> = (1..jobs).map(|_| store.fork()).collect();
    let Some(forks) = forks.filter(|_| jobs > 1) else {
        return (0..n).map(|i| f(store, i)).collect();
    };
    // Each worker takes the next run not taken.
    let next = AtomicUsize::new(0);
    let (next, f) = (&next, &f);
    let mut done: Vec<(usize, Result<T>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = std::iter::once(store)
            .chain(&forks)
            .map(|st| {
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return mine;
                        }
                        let r = f(st, i);
                        if r.is_err() {
                            next.store(n, Ordering::Relaxed); // the others start no new run
                        }
                        mine.push((i, r));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a simulation worker panicked"))
            .collect()
    });
    done.sort_by_key(|d| d.0);
    done.into_iter().map(|d| d.1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::Phases;

    /// The estimate before the build is within a tenth of the chunks the build makes.
    #[test]
    fn the_memory_estimate_counts_the_chunks_the_build_makes() {
        for preset in ["tiny", "small"] {
            let cfg = GenConfig::preset(preset).unwrap();
            let history = crate::gen::build_history(&cfg).unwrap();
            let estimate = estimate_memory(&history, DigestMode::Hashed);
            let model = Model::new(ModelParams::preset("zfs-hdd").unwrap());
            let store = SimStore::build(
                &cfg,
                history,
                DigestMode::Hashed,
                1000,
                1_800_000_000,
                Slice::WHOLE,
                model,
            )
            .unwrap();
            let built = store.chunks_created() as f64;
            let e = estimate.chunks as f64;
            assert!(
                (e - built).abs() / built < 0.1,
                "{preset}: {e} estimated, {built} built"
            );
            assert!(estimate.peak_bytes > estimate.chunks * 100);
            let half_the_chunks = BASE_BYTES + (estimate.peak_bytes - BASE_BYTES) / 2;
            let half = estimate.fit(half_the_chunks).unwrap();
            assert!(half > 0.0 && half < 0.5, "{half}");
            assert_eq!(
                estimate.fit(1 << 20),
                None,
                "less than the base fits nothing"
            );
        }
    }

    /// The `tiny` preset with `seed`, built for `now`.
    fn tiny(seed: u64, params: &ModelParams, digests: DigestMode, now: i64) -> SimStore {
        let mut cfg = GenConfig::preset("tiny").unwrap();
        cfg.seed = seed;
        build(&SimSetup {
            cfg,
            params: params.clone(),
            digests,
            first_ino: 1000,
            now,
            slice: Slice::WHOLE,
        })
        .unwrap()
    }

    /// Hashed digests name chunks differently but must make the same store: same references,
    /// touches, stats, removals, and no chunk missing (the hashed index walk skips the content
    /// -> chunk map, trusting that every content of a snapshot has its chunk). Listings
    /// differ: which directories a batch spans depends on the names.
    #[test]
    fn hashed_digests_give_the_counts_of_exact_ones() {
        let params = ModelParams::preset("zfs-hdd").unwrap();
        let runs = |digests| {
            let store = tiny(5, &params, digests, 1_750_000_000);
            [Strategy::Lru, Strategy::Batched]
                .into_iter()
                .map(|strategy| {
                    let opts = GcOptions {
                        strategy,
                        phases: Phases::All,
                        atime_check: false,
                        ..GcOptions::default()
                    };
                    run(&store, &params, &opts, false, false).unwrap().counters
                })
                .collect::<Vec<_>>()
        };
        let (exact, hashed) = (runs(DigestMode::Exact), runs(DigestMode::Hashed));
        for (e, h) in exact.iter().zip(&hashed) {
            assert!(e.references > 1000 && e.removed_chunks > 0, "{e:?}");
            assert_eq!(h.missing_chunks, 0);
            let key = |c: &Counters| {
                (
                    c.references,
                    c.utimensat_calls,
                    c.touched,
                    c.stat_calls,
                    c.removed_chunks,
                    c.removed_bytes,
                )
            };
            assert_eq!(key(e), key(h));
        }
    }

    /// A prefetch pass on several threads takes as long as its busiest job or the pool's
    /// reads at its queue depth, not the sum of its jobs; everything else stays the same.
    #[test]
    fn parallel_prefetch_jobs_overlap_their_reads() {
        // Prefetch reads waited for (zfs-hdd) and asynchronous (zfs-raidz-hdd).
        for model in ["zfs-hdd", "zfs-raidz-hdd"] {
            let mut params = ModelParams::preset(model).unwrap();
            let store = tiny(2, &params, DigestMode::Hashed, 1_750_000_000);
            params.dir_entries = store.dir_entries();
            let pass = |jobs| {
                let opts = GcOptions {
                    strategy: Strategy::Prefetch,
                    prefetch_jobs: jobs,
                    phases: Phases::Mark,
                    atime_check: false,
                    ..GcOptions::default()
                };
                run(&store, &params, &opts, false, false).unwrap()
            };
            let (one, four) = (pass(1), pass(4));
            // The jobs take turns in one fixed order: the same run every time.
            let again = pass(4);
            assert_eq!(
                (again.pass_ns, again.phase1_ns, again.model.reads()),
                (four.pass_ns, four.phase1_ns, four.model.reads()),
                "{model}: four jobs, run twice"
            );
            assert_eq!(one.counters.listings, four.counters.listings);
            assert_eq!(one.counters.utimensat_calls, four.counters.utimensat_calls);
            // The jobs' requests interleave (one directory of each in turn), so the cache
            // evicts in another order than one job's: reads agree within 1%, not exactly.
            let reads = |r: &SimRun| r.model.reads() as f64;
            assert!((reads(&one) / reads(&four) - 1.0).abs() < 0.01, "{model}");
            let device = four.model.reads().div_ceil(params.queue_depth) * params.miss_ns;
            assert!(
                four.pass_ns < one.pass_ns / 2 && four.pass_ns >= one.pass_ns / 5,
                "{model}: 4 jobs: {} ns, 1 job: {} ns",
                four.pass_ns,
                one.pass_ns
            );
            assert!(four.pass_ns >= device.min(one.pass_ns), "{model}");
            // After the pass, marking costs about the same (within 3%: the cache evicted in
            // another order): the time the pass saved is not
            // spent waiting later (for the pass's reads, or a transaction group).
            let after = |r: &SimRun| (r.phase1_ns - r.pass_ns) as f64;
            assert!(
                (after(&one) / after(&four) - 1.0).abs() < 0.03,
                "{model}: after the pass {} s against {} s",
                after(&four) / 1e9,
                after(&one) / 1e9
            );
        }
    }

    /// A simulated GC runs at the store's time, not the wall clock's: the same store built for
    /// two times a month apart sweeps the same chunks, and keeps the ones inside the cutoff
    /// window as pending (were the GC to use the wall clock, a store built for the past would
    /// lose them).
    #[test]
    fn simulated_runs_use_the_stores_clock() {
        let params = ModelParams::preset("none").unwrap();
        let counts = |now| {
            let store = tiny(4, &params, DigestMode::Hashed, now);
            let opts = GcOptions {
                strategy: Strategy::Batched,
                atime_check: false,
                ..GcOptions::default()
            };
            let c = run(&store, &params, &opts, false, false).unwrap().counters;
            (c.removed_chunks, c.pending_chunks, c.unlinks)
        };
        let a = counts(1_700_000_000);
        assert!(a.0 > 0 && a.1 > 0, "removed and pending: {a:?}");
        assert_eq!(a, counts(1_700_000_000 + 30 * 86_400));
    }

    /// A slice names only its own directories: every digest in them, the rest of each digest
    /// as it was; only the cache is divided; bad sizes are refused by name.
    #[test]
    fn a_slice_moves_digests_into_its_directories_and_divides_the_cache() {
        let slice = Slice::new(32).unwrap();
        assert_eq!(slice.chunk_dirs(), 2048);
        for p in [0u16, 1, 0x7fff, 0xffff] {
            let mut d = crate::datastore::Digest([0xa5; 32]);
            d.0[..2].copy_from_slice(&p.to_be_bytes());
            let moved = slice.digest(d);
            assert!((moved.prefix() as usize) < slice.chunk_dirs(), "{p}");
            assert_eq!(moved.prefix(), p / 32);
            assert_eq!(moved.0[2..], d.0[2..]);
            assert_eq!(Slice::WHOLE.digest(d), d);
        }
        let p = ModelParams::preset("zfs-raidz-hdd").unwrap();
        let sliced = slice.params(&p);
        assert_eq!(sliced.cache_bytes, p.cache_bytes / 32);
        assert_eq!(
            ModelParams {
                cache_bytes: p.cache_bytes,
                ..sliced
            },
            p,
            "only the cache is divided"
        );
        let cfg = GenConfig::preset("datastore-b").unwrap();
        let part = slice.config(&cfg);
        assert_eq!((part.groups, part.namespaces), (9, 1));
        assert_eq!(part.disk_chunks, cfg.disk_chunks);
        assert_eq!(slice.cache_warning(&p), None, "512 MiB");
        let hdd = ModelParams::preset("zfs-hdd").unwrap();
        let w = slice.cache_warning(&hdd).unwrap();
        assert!(w.contains("8 MiB of zfs-hdd's 256 MiB"), "{w}");
        assert_eq!(Slice::WHOLE.cache_warning(&hdd), None);
        for bad in [0, 3, 48, 512] {
            let e = Slice::new(bad).unwrap_err().to_string();
            assert!(
                e.contains(&format!("--slice {bad}")) && e.contains("256"),
                "{e}"
            );
        }
    }

    /// The GC on a slice visits only its directories: the sweep lists each once and finds
    /// every chunk there, phase 1 misses none, and a chunk outside (the atime check's zero
    /// chunk, say) is absent, as on a store without its directory.
    #[test]
    fn a_gc_on_a_slice_visits_its_directories_only() {
        let params = ModelParams::preset("zfs-hdd").unwrap();
        let mut cfg = GenConfig::preset("tiny").unwrap();
        cfg.seed = 3;
        let slice = Slice::new(64).unwrap();
        let store = build(&SimSetup {
            cfg,
            params: params.clone(),
            digests: DigestMode::Hashed,
            first_ino: 1000,
            now: 1_750_000_000,
            slice,
        })
        .unwrap();
        use crate::store::ChunkStore;
        assert_eq!(store.chunk_dirs(), 1024);
        for strategy in [Strategy::Prefetch, Strategy::Batched] {
            let opts = GcOptions {
                strategy,
                atime_check: false,
                ..GcOptions::default()
            };
            let r = run(&store, &params, &opts, false, false).unwrap();
            let c = &r.counters;
            assert_eq!(c.sweep_listings, 1024, "{strategy:?}");
            assert_eq!(c.stat_calls, store.chunks_created() as u64, "{strategy:?}");
            assert_eq!(c.missing_chunks, 0, "{strategy:?}");
            assert_eq!(c.touched, store.referenced() as u64, "{strategy:?}");
            assert!(c.removed_chunks > 0, "{strategy:?}");
            if strategy == Strategy::Prefetch {
                assert_eq!(c.prefetch_listings, 1024);
            }
        }
        let mut outside = crate::datastore::Digest([7; 32]);
        outside.0[..2].copy_from_slice(&2000u16.to_be_bytes());
        assert_eq!(store.stat_chunk(&outside).unwrap(), None);
        assert!(!store.touch(&outside).unwrap());
        assert!(store.open_dir(2000).unwrap().is_none());
    }

    /// With hashed digests a second thread builds the index files ahead of the GC's walk: it
    /// must build every one (it once stopped after the first, when the walk began to treat
    /// its "nothing to visit" as an unconfirmed vanished file, and the GC built them all
    /// itself at half the speed).
    #[test]
    fn every_index_file_is_built_ahead() {
        let params = ModelParams::preset("none").unwrap();
        let store = tiny(4, &params, DigestMode::Hashed, 1_750_000_000);
        let opts = GcOptions {
            strategy: Strategy::Lru,
            phases: Phases::Mark,
            atime_check: false,
            ..GcOptions::default()
        };
        let c = run(&store, &params, &opts, false, false).unwrap().counters;
        assert!(c.index_file_count > 10, "{c:?}");
        assert_eq!(store.lock().indexes_not_ahead, 0);
    }

    /// Side-by-side runs come back in order, each on a store of its own, and an error stops
    /// them: no run starts after it, and it is what the caller gets.
    #[test]
    fn side_by_side_keeps_the_order_and_stops_at_an_error() {
        let params = ModelParams::preset("none").unwrap();
        let store = tiny(4, &params, DigestMode::Hashed, 1_750_000_000);
        let touch_one = |st: &SimStore, i: usize| -> Result<(usize, usize)> {
            // Each store's own counts: a fork does not see another's requests.
            st.reset(Model::new(params.clone()));
            let before = st.counts().setattr;
            let d = st.chunks[i].digest;
            crate::store::ChunkStore::touch(st, &d)?;
            Ok((i, (st.counts().setattr - before) as usize))
        };
        let out = side_by_side(&store, 6, 2, touch_one).unwrap();
        assert_eq!(out, (0..6).map(|i| (i, 1)).collect::<Vec<_>>());
        let started = std::sync::atomic::AtomicUsize::new(0);
        let r = side_by_side(&store, 50, 2, |_, i| {
            started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if i == 3 {
                anyhow::bail!("run {i} failed");
            }
            if i > 3 {
                // Long enough that the other worker could not have run them all (2.3 s)
                // by the time the error stops it.
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Ok(i)
        });
        assert_eq!(r.unwrap_err().to_string(), "run 3 failed");
        assert!(started.into_inner() < 50, "runs went on after the error");
    }
}
