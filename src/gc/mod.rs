//! PBS-compatible garbage collection with the phase-1 strategies of the pbs-devel threads.
//!
//! [`run`] is one GC: phase 1 ([`mark`]) touches every referenced chunk, phase 2 ([`sweep`])
//! removes chunks whose atime is older than the cutoff. It talks only to a
//! [`crate::store::ChunkStore`], so the same code runs on a directory, on a chunkscope mount,
//! and on a simulated store. Nothing referenced is ever removed (ARCHITECTURE.md, invariant
//! 9): the sweep runs only after a mark that finished without an error other than missing
//! chunks, and it removes a chunk only when it is not in the [`referenced::ReferencedSet`]
//! collected from the indexes (by phase 1, or by reading them again when the sweep runs
//! alone), whatever its atime says. A referenced chunk PBS would have removed is kept, named
//! and counted ([`KeptChunk`]), and the run ends with warnings.
//!
//! Locking (`.lock`, format document 3.12) and markers are the caller's business: `run`
//! receives a hook for markers.

pub mod bucket;
pub use bucket::{run_s3, PageOrder};
pub mod curve;
pub mod log;
pub mod lru;
pub mod mark;
pub mod referenced;
pub mod sweep;

use anyhow::{anyhow, Result};
use serde::Serialize;

use crate::bucket::Bucket;
use crate::store::{ChunkStore, IndexOrder};
use crate::units::{HumanByte, TimeSpan};
use log::TaskLog;

/// Phase-1 strategies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// PBS 3.3.4 and earlier: no digest cache, the index files in the order a walk of the
    /// tree finds them (`list_images`), with no namespace iterator.
    Unpatched,
    /// PBS's phase 1 without a digest cache: every reference touched, in index order.
    Naive,
    /// PBS's phase 1 with its digest cache (`gc-cache-capacity`): a reference whose digest
    /// the LRU of recently touched ones holds is not touched again.
    Lru,
    /// Thread 001: every chunk directory listed first (warming the metadata), then PBS's touches.
    Prefetch,
    /// Thread 003: digests collected per batch, then touched chunk directory by chunk directory.
    Batched,
    /// Batched, each batch's touches sorted by inode number (the order the inodes lie in).
    InodeOrder,
}

impl Strategy {
    /// The strategies the demo and `--strategy`'s default run, in the order the threads
    /// introduced them: PBS's phase 1 with and without its cache, and the threads' fixes.
    /// [`Strategy::Unpatched`], the code before them, is run when asked for by name.
    pub const ALL: [Strategy; 5] = [
        Strategy::Naive,
        Strategy::Lru,
        Strategy::Prefetch,
        Strategy::Batched,
        Strategy::InodeOrder,
    ];

    /// Every strategy's name, comma-separated (the default of `--strategy` lists).
    pub fn all_names() -> &'static str {
        static NAMES: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        NAMES.get_or_init(|| Strategy::ALL.map(Strategy::name).join(","))
    }

    /// True if it touches every reference (no digest cache).
    pub fn uncached(self) -> bool {
        matches!(self, Strategy::Unpatched | Strategy::Naive)
    }

    /// The order it visits the index files in, unless `--index-order` says otherwise.
    pub fn index_order(self) -> IndexOrder {
        match self {
            Strategy::Unpatched => IndexOrder::Walk,
            _ => IndexOrder::Iterator,
        }
    }

    /// The name used on the command line, in reports and in markers.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Unpatched => "unpatched",
            Strategy::Naive => "naive",
            Strategy::Lru => "lru",
            Strategy::Prefetch => "prefetch",
            Strategy::Batched => "batched",
            Strategy::InodeOrder => "inode-order",
        }
    }
}

/// Which phases to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Phases {
    /// Phase 1 only: touch what the indexes reference.
    Mark,
    /// Phase 2 only, after reading every index again (touching nothing).
    Sweep,
    /// Both, as PBS runs them.
    All,
}

/// PBS's default `gc-cache-capacity`.
pub const DEFAULT_CACHE_CAPACITY: usize = 1_048_576;
/// PBS's maximum `gc-cache-capacity`.
pub const MAX_CACHE_CAPACITY: usize = 8_388_608;
/// Thread 003's batch size.
pub const DEFAULT_BATCH_SIZE: usize = 1_048_576;
/// PBS's default `gc-atime-cutoff`, minutes (the datastore's option).
pub const DEFAULT_CUTOFF_MINUTES: u64 = crate::datastore::DEFAULT_ATIME_CUTOFF_MINUTES;

/// How one GC runs.
#[derive(Clone, Debug, Serialize)]
pub struct GcOptions {
    /// The phase-1 strategy.
    pub strategy: Strategy,
    /// Digest LRU capacity; 0 turns the cache off.
    pub cache_capacity: usize,
    /// The datastore's `gc-cache-capacity` tuning option is set (to `cache_capacity`, 0
    /// included): PBS then logs `Using chunk digest cache capacity of N.`, and only then.
    pub cache_capacity_tuned: bool,
    /// Digests per batch (batched, inode-order).
    pub batch_size: usize,
    /// The order phase 1 visits the index files in; `None`: the strategy's
    /// ([`Strategy::index_order`]).
    pub index_order: Option<IndexOrder>,
    /// Threads listing chunk directories in the prefetch pass.
    pub prefetch_jobs: usize,
    /// Chunks whose atime is older than this many minutes before phase 1's start are garbage.
    pub cutoff_minutes: u64,
    /// Which phases run.
    pub phases: Phases,
    /// Change nothing: phase 1 reads the indexes without touching (and the atime check, which
    /// writes the zero chunk, is skipped), phase 2 counts what a GC would remove now (the
    /// unreferenced chunks older than the cutoff) and removes nothing.
    pub dry_run: bool,
    /// PBS's `gc-atime-safety-check` (format document 3.2). A dry run and a `--shadow` mount
    /// skip it whatever this says; the CLI sets it only when the check runs.
    pub atime_check: bool,
    /// The store is a `--shadow` chunkscope mount: touches and unlinks stay in the mount's
    /// memory, the backing store keeps every chunk. The atime check is skipped (it would test
    /// the mount's memory, and the zero chunk cannot be written), and the task log says what a
    /// real run would have removed, not "Removed".
    pub shadow: bool,
    /// The store is an S3 datastore's local cache (PBS 4, format document 3.7): phase 1
    /// leaves `.using` markers for referenced chunks with no local file, phase 2 lists and
    /// deletes objects, phase 3 sweeps the local markers. [`run_s3`] sets it.
    pub s3: bool,
    /// S3: the order phase 2 judges each listing page's objects in: key order (PBS's) or
    /// the inode order of their local files (chunkscope's variant).
    pub s3_page_order: PageOrder,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            strategy: Strategy::Lru,
            cache_capacity: DEFAULT_CACHE_CAPACITY,
            cache_capacity_tuned: false,
            batch_size: DEFAULT_BATCH_SIZE,
            index_order: None,
            prefetch_jobs: 1,
            cutoff_minutes: DEFAULT_CUTOFF_MINUTES,
            phases: Phases::All,
            dry_run: false,
            atime_check: true,
            shadow: false,
            s3: false,
            s3_page_order: PageOrder::Key,
        }
    }
}

/// Everything a run counted: PBS's status fields and chunkscope's own.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counters {
    // phase 1
    /// Index files read in phase 1.
    pub index_file_count: u64,
    /// Bytes of those index files.
    pub index_data_bytes: u64,
    /// Chunk references in them (with repeats).
    pub references: u64,
    /// `utimensat` calls made (touches and `.bad` touches).
    pub utimensat_calls: u64,
    /// Chunks touched.
    pub touched: u64,
    /// References whose chunk was missing (ENOENT).
    pub missing_chunks: u64,
    /// `.N.bad` copies touched for missing chunks.
    pub bad_touched: u64,
    /// References the digest cache answered (no touch).
    pub cache_hits: u64,
    /// References the digest cache did not hold.
    pub cache_misses: u64,
    /// Memory the digest cache reserves, bytes.
    pub cache_reserved_bytes: u64,
    /// Batches touched (batched, inode-order).
    pub batch_flushes: u64,
    /// Chunk directories listed in phase 1 (prefetch and batched kinds).
    pub listings: u64,
    /// Chunk directories listed by the prefetch pass.
    pub prefetch_listings: u64,
    /// Directory entries those listings returned.
    pub entries_listed: u64,
    /// Phase 1's wall time.
    pub phase1_seconds: f64,
    // phase 2
    /// Chunk directories listed in phase 2.
    pub sweep_listings: u64,
    /// Directory entries those listings returned.
    pub sweep_entries: u64,
    /// Chunk files stat'ed in phase 2.
    pub stat_calls: u64,
    /// Files removed (chunks and `.bad` copies).
    pub unlinks: u64,
    /// Chunks phase 2 saw (PBS's "chunk count").
    pub chunk_count: u64,
    /// Chunks removed.
    pub removed_chunks: u64,
    /// Bytes of the chunks removed.
    pub removed_bytes: u64,
    /// `.bad` copies removed.
    pub removed_bad: u64,
    /// `.bad` copies kept (not older than the cutoff, or their unlink failed).
    pub still_bad: u64,
    /// Chunks newer than the cutoff but older than the oldest writer's start (PBS's
    /// "pending": garbage a later GC may remove).
    pub pending_chunks: u64,
    /// Bytes of the pending chunks (and of the `.bad` copies kept that old).
    pub pending_bytes: u64,
    /// Chunks in use: newer than the oldest writer's start, or referenced and kept.
    pub disk_chunks: u64,
    /// Bytes of the chunks in use (and of `.bad` copies that new).
    pub disk_bytes: u64,
    /// Referenced chunks whose atime was older than the cutoff: PBS would have removed them;
    /// chunkscope kept them (also counted in `disk_chunks`/`disk_bytes`).
    pub kept_referenced: u64,
    /// Bytes of the referenced chunks kept.
    pub kept_referenced_bytes: u64,
    /// Entries with a chunk's name that are not regular files (a symlink, a directory...):
    /// neither followed nor removed, reported.
    pub irregular_chunks: u64,
    /// Entries phase 2 could not stat (an error other than ENOENT): not removed, each named
    /// in a warning (the run ends with warnings).
    pub stat_errors: u64,
    /// Index files read by the sweep's own pass when phase 1 did not run.
    pub verify_index_files: u64,
    /// Phase 2's wall time.
    pub phase2_seconds: f64,
    // S3 datastores
    /// Phase 1: `.using` markers created for referenced chunks with no local file.
    pub using_created: u64,
    /// Phase 2: `ListObjectsV2` pages read.
    pub list_pages: u64,
    /// Phase 2: objects listed whose key names a chunk or a bad copy.
    pub listed_objects: u64,
    /// Phase 2: referenced chunks with neither an object nor a whole local copy (each a
    /// warning naming it).
    pub referenced_nowhere: u64,
    /// Phase 2: referenced chunks without an object whose whole copy is in the local cache.
    pub referenced_only_local: u64,
    /// Phase 2: objects under `.chunks/` not at a chunk's canonical key (another directory,
    /// uppercase hex, another suffix): kept, named, a warning.
    pub foreign_objects: u64,
    /// Phase 2: `DeleteObjects` requests sent.
    pub delete_requests: u64,
    /// Phase 2: objects the server says it deleted.
    pub deleted_objects: u64,
    /// Phase 2: zero-length markers created for objects a `.using` marker kept.
    pub markers_created: u64,
    /// Phase 2: queued keys taken out of a batch because their local file came back.
    pub delete_withdrawn: u64,
    /// Phase 3: local entries judged (PBS does not report phase 3's counts; chunkscope does).
    pub phase3_chunk_count: u64,
    /// Phase 3: local markers, `.bad` files and `.using` leftovers removed.
    pub phase3_unlinks: u64,
    /// Phase 3: chunk directories listed.
    pub phase3_listings: u64,
    /// Phase 3: directory entries those listings returned.
    pub phase3_entries: u64,
    /// Phase 3: local files stat'ed.
    pub phase3_stat_calls: u64,
    /// Phase 3's wall time.
    pub phase3_seconds: f64,
}

impl Counters {
    /// What an index adds to PBS's counters as phase 1 reads it.
    pub fn count_index(&mut self, index: &crate::datastore::IndexFile) {
        self.index_file_count += 1;
        self.index_data_bytes += index.index_bytes();
        self.references += index.entries() as u64;
    }

    /// Share of phase-1 references the digest cache answered; `None` without a cache.
    pub fn digest_hit_ratio(&self) -> Option<f64> {
        let lookups = self.cache_hits + self.cache_misses;
        (lookups > 0).then(|| self.cache_hits as f64 / lookups as f64)
    }
}

/// Why a referenced chunk had an atime older than the cutoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeptReason {
    /// Phase 1 found it missing (its touch said ENOENT), yet it is there: a flaky disk, an
    /// injected fault, or a concurrent re-upload. PBS would remove it.
    MissingInPhase1,
    /// This run did not mark (`--phase sweep`): its atime is whatever the last mark left.
    NotMarkedThisRun,
    /// Phase 1 touched it, but the atime did not change (a touch without effect).
    TouchWithoutEffect,
    /// S3: its object has neither a local file nor a `.using` marker (phase 1 did not mark it
    /// in this run). PBS would delete the object.
    NoLocalFile,
}

impl KeptReason {
    /// The reason in words, for the log.
    pub fn describe(self) -> &'static str {
        match self {
            KeptReason::MissingInPhase1 => "phase 1 found it missing",
            KeptReason::NotMarkedThisRun => "no phase 1 in this run",
            KeptReason::TouchWithoutEffect => "phase 1 touched it, the atime did not change",
            KeptReason::NoLocalFile => "no local file and no .using marker",
        }
    }
}

/// A referenced chunk PBS would have removed and chunkscope kept.
#[derive(Clone, Debug, Serialize)]
pub struct KeptChunk {
    /// The chunk's digest (hex).
    pub digest: String,
    /// Why its atime was old.
    pub reason: KeptReason,
    /// Its atime (epoch seconds).
    pub atime: i64,
    /// Its size, bytes.
    pub size: u64,
}

/// How many kept chunks are named one by one (log and JSON); all are counted.
pub const KEPT_NAMED: usize = 1000;

/// The result of a run.
#[derive(Clone, Debug, Serialize)]
pub struct GcReport {
    /// The store's path.
    pub store: String,
    /// How the run was asked for.
    pub options: GcOptions,
    /// When phase 1 started (epoch seconds).
    pub phase1_start: i64,
    /// The atime cutoff: chunks older than this are garbage (epoch seconds).
    pub min_atime: i64,
    /// The oldest running writer's start (epoch seconds; the cutoff never passes it).
    pub oldest_writer: i64,
    /// What the run counted.
    pub counters: Counters,
    /// The first [`KEPT_NAMED`] referenced chunks PBS would have removed
    /// (`counters.kept_referenced` counts all).
    pub kept_referenced: Vec<KeptChunk>,
    /// Warnings written to the task log.
    pub warnings: u64,
}

/// The context of an error that ended a run: which phase, and what had been removed by then
/// (the counters are the run's so far). Its text is the first line of the error.
#[derive(Debug)]
pub struct Aborted {
    /// The phase the error ended (1 or 2).
    pub phase: u8,
    /// The run's report up to the error.
    pub report: Box<GcReport>,
}

impl std::fmt::Display for Aborted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.report.counters;
        if c.unlinks == 0 {
            write!(
                f,
                "garbage collection aborted in phase {} before anything was removed",
                self.phase
            )
        } else {
            write!(
                f,
                "garbage collection aborted in phase {} after removing {} files: {} chunks and \
                 {} bad chunks ({})",
                self.phase,
                c.unlinks,
                c.removed_chunks,
                c.removed_bad,
                HumanByte(c.removed_bytes)
            )
        }
    }
}

/// A GC phase: 1 marks (touches) what the indexes reference, 2 sweeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcPhase {
    /// Phase 1: touch what the indexes reference.
    Mark,
    /// Phase 2: remove what was not touched (on S3: the bucket's objects).
    Sweep,
    /// Phase 3 of an S3 datastore: sweep the local markers.
    MarkerSweep,
}

impl GcPhase {
    /// PBS's number for the phase.
    pub fn number(self) -> u8 {
        match self {
            GcPhase::Mark => 1,
            GcPhase::Sweep => 2,
            GcPhase::MarkerSweep => 3,
        }
    }
}

/// A phase's start or end, as the GC reports it to [`Hooks`]'s `boundary` (a chunkscope mount
/// records it as a trace marker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// Which phase.
    pub phase: GcPhase,
    /// True at its start, false at its end.
    pub start: bool,
    /// The strategy running.
    pub strategy: Strategy,
}

/// Told of each phase boundary; an error aborts the run.
pub type BoundaryFn<'a> = &'a mut dyn FnMut(Boundary) -> Result<()>;

/// Test and caller hooks.
#[derive(Default)]
pub struct Hooks<'a> {
    /// Told when a phase starts and ends (e.g. to mark a chunkscope mount's trace).
    pub boundary: Option<BoundaryFn<'a>>,
    /// Called after each index file is marked.
    pub after_index: Option<Box<dyn FnMut(usize) + 'a>>,
    /// Called once the run's start and cutoff are fixed, before anything is touched (the
    /// caller turns its exclusive `.lock` into a shared one: format document 3.12); a line it
    /// returns goes into the task log.
    pub cutoff_fixed: Option<Box<dyn FnOnce() -> Option<String> + 'a>>,
}

impl Hooks<'_> {
    fn boundary(&mut self, phase: GcPhase, start: bool, strategy: Strategy) -> Result<()> {
        match &mut self.boundary {
            Some(b) => b(Boundary {
                phase,
                start,
                strategy,
            }),
            None => Ok(()),
        }
    }
}

/// One garbage collection: phase 1, then (if it succeeded and was asked for) phase 2.
pub fn run<S: ChunkStore>(
    store: &S,
    opts: &GcOptions,
    log: &mut TaskLog,
    hooks: Hooks<'_>,
) -> Result<GcReport> {
    run_with(store, None, opts, log, hooks)
}

pub(super) fn run_with<S: ChunkStore>(
    store: &S,
    bucket: Option<&dyn Bucket>,
    opts: &GcOptions,
    log: &mut TaskLog,
    mut hooks: Hooks<'_>,
) -> Result<GcReport> {
    // The coarse clock, as file times use it (see `now_epoch_coarse`), or a simulated store's.
    let start = store.now();
    let cutoff = opts.cutoff_minutes as i64 * 60;
    let min_atime = start - cutoff;
    // The caller took the exclusive .lock, so no writer was running: oldest writer = start.
    let oldest_writer = start;
    log.info(&format!(
        "starting garbage collection on store {}",
        store.root().display()
    ));
    if let Some(line) = hooks.cutoff_fixed.take().and_then(|f| f()) {
        log.info(&line);
    }
    let mut report = GcReport {
        store: store.root().display().to_string(),
        options: opts.clone(),
        phase1_start: start,
        min_atime,
        oldest_writer,
        counters: Counters::default(),
        kept_referenced: Vec::new(),
        warnings: 0,
    };
    // Before anything is touched: every chunk directory must be the store's own.
    check_layout(store).map_err(|e| aborted(1, &report, log, e))?;
    if let Some(b) = bucket {
        b.head()
            .map_err(|e| anyhow!("failed to reach bucket {} - {e}", b.describe()))
            .map_err(|e| aborted(1, &report, log, e))?;
        if opts.atime_check && !opts.dry_run && !opts.shadow {
            bucket::upload_zero_chunk(store, b).map_err(|e| aborted(1, &report, log, e))?;
        }
    }
    announce(store, opts, log, cutoff, min_atime)?;
    let mut marked = None;
    if opts.phases != Phases::Sweep {
        log.info("Start GC phase1 (mark used chunks)");
        let phase1 = (|| -> Result<mark::Marked> {
            hooks.boundary(GcPhase::Mark, true, opts.strategy)?;
            let m = if opts.dry_run {
                mark::collect(store)?
            } else {
                let mut marker = mark::Marker::new(store, opts, log);
                marker.after_index = hooks.after_index.take();
                marker.run()?
            };
            hooks.boundary(GcPhase::Mark, false, opts.strategy)?;
            Ok(m)
        })();
        match phase1 {
            Ok(mark::Marked {
                counters,
                referenced,
                missing,
            }) => {
                report.counters = counters;
                marked = Some((referenced, missing));
            }
            Err(e) => return Err(aborted(1, &report, log, vanished_or(store, e))),
        }
    }
    if opts.phases != Phases::Mark {
        let cutoffs = (min_atime, oldest_writer);
        sweep_phases(
            store,
            bucket,
            opts,
            marked,
            cutoffs,
            log,
            &mut report,
            &mut hooks,
        )?;
    }
    summary(log, &report.counters, opts);
    report.warnings = log.warnings;
    Ok(report)
}

/// The error `e` that ended phase `phase`, with the report so far.
fn aborted(phase: u8, report: &GcReport, log: &TaskLog, e: anyhow::Error) -> anyhow::Error {
    let mut report = report.clone();
    report.warnings = log.warnings;
    e.context(Aborted {
        phase,
        report: Box::new(report),
    })
}

/// Phase 2 (and an S3 datastore's phase 3) after phase 1's `marked` (`None`: no phase 1 ran,
/// the indexes are read again to learn what is referenced).
#[allow(clippy::too_many_arguments)]
fn sweep_phases<S: ChunkStore>(
    store: &S,
    bucket: Option<&dyn Bucket>,
    opts: &GcOptions,
    marked: Option<(
        referenced::SealedSet,
        hashbrown::HashSet<crate::datastore::Digest>,
    )>,
    (min_atime, oldest_writer): (i64, i64),
    log: &mut TaskLog,
    report: &mut GcReport,
    hooks: &mut Hooks<'_>,
) -> Result<()> {
    let (referenced, missing) = match marked {
        Some((referenced, missing)) => (referenced, Some(missing)),
        None => {
            log.info(
                "No phase 1 in this run: reading every index to learn which chunks are \
                 referenced (nothing is touched); a referenced chunk is never removed",
            );
            let m = mark::collect(store).map_err(|e| aborted(2, report, log, e))?;
            let c = &m.counters;
            report.counters.verify_index_files = c.index_file_count;
            report.counters.index_file_count = c.index_file_count;
            report.counters.index_data_bytes = c.index_data_bytes;
            report.counters.references = c.references;
            (m.referenced, None)
        }
    };
    // Phase 1 may have taken days: is the store still the one opened, all its own?
    check_layout(store).map_err(|e| aborted(2, report, log, e))?;
    log.info("Start GC phase2 (sweep unused chunks)");
    let guard = sweep::Guard {
        referenced: &referenced,
        missing: missing.as_ref(),
    };
    let phase2 = hooks
        .boundary(GcPhase::Sweep, true, opts.strategy)
        .and_then(|()| match bucket {
            None => sweep::sweep(
                store,
                min_atime,
                oldest_writer,
                opts.dry_run,
                &guard,
                log,
                report,
            ),
            Some(b) => bucket::sweep_bucket(
                store,
                b,
                min_atime,
                oldest_writer,
                opts.dry_run,
                &guard,
                log,
                report,
            ),
        })
        .and_then(|()| hooks.boundary(GcPhase::Sweep, false, opts.strategy));
    if let Err(e) = phase2 {
        return Err(aborted(2, report, log, vanished_or(store, e)));
    }
    if bucket.is_some() {
        log.info("Start GC phase3 (sweep unused chunk markers)");
        let phase3 = hooks
            .boundary(GcPhase::MarkerSweep, true, opts.strategy)
            .and_then(|()| {
                bucket::sweep_markers(store, min_atime, oldest_writer, opts, &guard, log, report)
            })
            .and_then(|()| hooks.boundary(GcPhase::MarkerSweep, false, opts.strategy));
        if let Err(e) = phase3 {
            return Err(aborted(3, report, log, vanished_or(store, e)));
        }
    }
    Ok(())
}

/// The store is still the directory the GC opened, and every chunk directory is its own (no
/// symbolic link, no other filesystem's mount): otherwise the error that stops the run.
fn check_layout<S: ChunkStore>(store: &S) -> Result<()> {
    store.check_identity(false)?;
    let odd = store.odd_chunk_dirs()?;
    if !odd.is_empty() {
        return Err(crate::store::layout::refusal(store.root(), &odd));
    }
    Ok(())
}

/// Format document 3.2 and 3.5's opening lines: the atime check (run, or why not), the
/// cutoff, the digest cache's capacity where the tuning option sets it.
fn announce<S: ChunkStore>(
    store: &S,
    opts: &GcOptions,
    log: &mut TaskLog,
    cutoff: i64,
    min_atime: i64,
) -> Result<()> {
    if opts.dry_run {
        log.info(
            "Dry run: nothing is touched or removed; the access time check (it writes the zero \
             chunk) is skipped, and phase 2 counts the unreferenced chunks older than the cutoff.",
        );
    } else if opts.shadow {
        log.info(
            "Access time update check skipped: on a --shadow mount atimes live in the mount's \
             memory (the check would test that, not the store's filesystem).",
        );
    } else if opts.atime_check {
        atime_safety_check(store)?;
        log.info("Access time update check successful, proceeding with GC.");
    } else {
        log.info("Access time update check disabled (--no-atime-check).");
    }
    log.info(&format!(
        "Using access time cutoff {}, minimum access time is {}",
        TimeSpan(cutoff.max(0) as u64),
        crate::time::rfc3339_utc(min_atime)
    ));
    // PBS logs the capacity exactly when the tuning option is set; the GC before the digest
    // cache (naive) had no such option.
    if opts.cache_capacity_tuned && !opts.strategy.uncached() {
        log.info(&format!(
            "Using chunk digest cache capacity of {}.",
            opts.cache_capacity
        ));
    }
    Ok(())
}

/// The error that ended a phase, or, when the store vanished under the GC (every path then
/// fails one way or another), that: the one message that says what happened.
fn vanished_or<S: ChunkStore>(store: &S, e: anyhow::Error) -> anyhow::Error {
    match store.check_identity(true) {
        Err(gone) => gone,
        Ok(()) => e,
    }
}

/// The 4 MiB all-zero chunk PBS uses for the check: its digest and compressed blob.
pub fn zero_chunk() -> (crate::datastore::Digest, Vec<u8>) {
    let zeros = vec![0u8; 4 << 20];
    (
        crate::datastore::Digest::of(&zeros),
        crate::datastore::blob::encode(&zeros, true),
    )
}

/// Format document 3.2: does an explicit atime update show up on this filesystem? Inserts
/// (or touches) the zero chunk, waits a second, touches it, and compares the atimes.
fn atime_safety_check<S: ChunkStore>(store: &S) -> Result<()> {
    use anyhow::{bail, Context};
    let (digest, blob) = zero_chunk();
    for attempt in 0..2 {
        let existed = match store.insert_chunk(&digest, &blob) {
            Err(e) if e.raw_os_error() == Some(libc::EROFS) => bail!(
                "inserting the zero chunk for the atime check: {e} (a --shadow mount refuses \
                 writes: add --no-atime-check, its atimes live in the mount's memory)"
            ),
            r => r.context("inserting the zero chunk for the atime check")?,
        };
        std::thread::sleep(std::time::Duration::from_secs(1));
        let before = store
            .stat_chunk(&digest)?
            .context("the zero chunk vanished during the atime check")?;
        if !store.touch(&digest)? {
            bail!("the zero chunk vanished during the atime check");
        }
        let after = store
            .stat_chunk(&digest)?
            .context("the zero chunk vanished during the atime check")?;
        if before.ino != after.ino {
            if attempt == 0 {
                continue;
            }
            bail!("chunk {digest} changed twice during access time safety check");
        }
        if before.atime_ns >= after.atime_ns {
            bail!(
                "access time safety check using {} chunk failed, aborting GC!",
                if existed {
                    "pre-existing"
                } else {
                    "newly inserted"
                }
            );
        }
        return Ok(());
    }
    unreachable!("the loop returns or bails on its second attempt")
}

/// The summary lines of format document 3.5, in order.
fn summary(log: &mut TaskLog, c: &Counters, opts: &GcOptions) {
    let lookups = c.cache_hits + c.cache_misses;
    if lookups > 0 {
        log.info(&format!(
            "Chunk cache: hits {}, misses {} (hit ratio {:.2}%)",
            c.cache_hits,
            c.cache_misses,
            c.cache_hits as f64 * 100.0 / lookups as f64
        ));
    }
    if opts.phases == Phases::Mark {
        return;
    }
    let verb = if opts.dry_run || opts.shadow {
        "Would remove"
    } else {
        "Removed"
    };
    if opts.shadow && !opts.dry_run {
        log.info(
            "Nothing left the store: on a --shadow mount the removals stay in the mount's \
             memory. A real run would have removed:",
        );
    }
    if c.kept_referenced > 0 {
        log.info(&format!(
            "Kept referenced chunks PBS would have removed: {} ({})",
            c.kept_referenced,
            HumanByte(c.kept_referenced_bytes)
        ));
    }
    log.info(&format!("{verb} garbage: {}", HumanByte(c.removed_bytes)));
    log.info(&format!("{verb} chunks: {}", c.removed_chunks));
    if c.pending_bytes > 0 {
        log.info(&format!(
            "Pending removals: {} (in {} chunks)",
            HumanByte(c.pending_bytes),
            c.pending_chunks
        ));
    }
    if c.stat_errors > 0 {
        log.info(&format!(
            "Entries that could not be stat'ed (kept): {}",
            c.stat_errors
        ));
    }
    if c.removed_bad > 0 {
        log.info(&format!("{verb} bad chunks: {}", c.removed_bad));
    }
    if c.still_bad > 0 {
        log.info(&format!("Leftover bad chunks: {}", c.still_bad));
    }
    log.info(&format!(
        "Original data usage: {}",
        HumanByte(c.index_data_bytes)
    ));
    if c.index_data_bytes > 0 {
        log.info(&format!(
            "On-Disk usage: {} ({:.2}%)",
            HumanByte(c.disk_bytes),
            c.disk_bytes as f64 * 100.0 / c.index_data_bytes as f64
        ));
    }
    log.info(&format!("On-Disk chunks: {}", c.disk_chunks));
    let dedup = if c.disk_bytes == 0 {
        1.0
    } else {
        c.index_data_bytes as f64 / c.disk_bytes as f64
    };
    log.info(&format!("Deduplication factor: {dedup:.2}"));
    if let Some(avg) = c.disk_bytes.checked_div(c.disk_chunks) {
        log.info(&format!("Average chunk size: {}", HumanByte(avg)));
    }
}

/// `.gc-status` in PBS's kebab-case schema (format document 1.7).
pub fn gc_status_json(report: &GcReport, upid: &str) -> serde_json::Value {
    let c = &report.counters;
    let mut v = serde_json::json!({
        "upid": upid,
        "index-file-count": c.index_file_count,
        "index-data-bytes": c.index_data_bytes,
        "disk-bytes": c.disk_bytes,
        "disk-chunks": c.disk_chunks,
        "removed-bytes": c.removed_bytes,
        "removed-chunks": c.removed_chunks,
        "pending-bytes": c.pending_bytes,
        "pending-chunks": c.pending_chunks,
        "removed-bad": c.removed_bad,
        "still-bad": c.still_bad,
    });
    if c.cache_hits + c.cache_misses > 0 {
        v["cache-stats"] = serde_json::json!({ "hits": c.cache_hits, "misses": c.cache_misses });
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "cli")]
    fn all_strategies_are_every_variant_under_its_command_line_name() {
        use clap::ValueEnum;
        let variants: Vec<String> = Strategy::value_variants()
            .iter()
            .map(|s| {
                s.to_possible_value()
                    .expect("not skipped")
                    .get_name()
                    .to_owned()
            })
            .collect();
        let mut named = vec![Strategy::Unpatched.name().to_owned()];
        named.extend(Strategy::ALL.map(|s| s.name().to_owned()));
        assert_eq!(named, variants);
        assert_eq!(Strategy::all_names(), variants[1..].join(","));
    }
}
