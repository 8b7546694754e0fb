//! The fidelity report: every figure the pbs-devel threads (000, 001, 003) measured, next to
//! the simulator's on the presets of their stores and pools, with the ratio and whether it
//! is within a factor of 2. `chunkscope fidelity` prints it; BENCHMARKS.md keeps a copy, and
//! a test checks at a small scale that the figures reproduced stay reproduced.
//!
//! Stores too large to simulate quickly run as a slice ([`Slice`]: an N-th of the groups and
//! chunk directories, the cache divided alike); counts and times are multiplied back by N,
//! rates and ratios are the slice's.

use anyhow::Result;
use serde::Serialize;

use super::{DigestMode, SimRun, SimSetup, Slice};
use crate::gc::{GcOptions, Phases, Strategy};
use crate::gen::GenConfig;
use crate::model::ModelParams;

/// How finely each store is sliced.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Scale {
    /// Thread 000's store (1.5 M chunks).
    pub thread000: u32,
    /// Datastore B (10.7 M).
    pub datastore_b: u32,
    /// Datastore A (73.4 M).
    pub datastore_a: u32,
}

impl Scale {
    /// The report's: thread 000 whole, B and A at 1/32 (about 3 minutes on 2 cores).
    pub const REPORT: Scale = Scale {
        thread000: 1,
        datastore_b: 32,
        datastore_a: 32,
    };
    /// A smoke test: the finest slices (B's and A's 16 GiB at 1/256 is 64 MiB,
    /// [`Slice::MIN_CACHE`]); under a minute, but datastore A's figures drift 2-8x from the
    /// report's at this scale (its cache no longer holds the ZAP leaves).
    pub const QUICK: Scale = Scale {
        thread000: 32,
        datastore_b: 256,
        datastore_a: 256,
    };
}

/// How a figure relates to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The model predicts it: nothing was fitted on it.
    Predicted,
    /// A model parameter was fitted on it (said in the note).
    Fitted,
    /// The thread's own estimate, not a measurement.
    Estimate,
}

/// One figure of a thread against the model's.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    /// A short stable name (tests refer to it).
    pub id: &'static str,
    /// The thread it comes from (000, 001, 003).
    pub thread: &'static str,
    /// What it is.
    pub what: &'static str,
    /// The thread's value, in `unit`.
    pub measured: f64,
    /// The model's, in `unit`.
    pub model: f64,
    /// "s", "chunks/s", "calls", "blocks" or "" (a ratio).
    pub unit: &'static str,
    /// Predicted, fitted or an estimate.
    pub kind: Kind,
    /// Where the model's value comes from (preset, strategy, scale).
    pub from: String,
}

impl Figure {
    /// Model over thread.
    pub fn ratio(&self) -> f64 {
        self.model / self.measured
    }

    /// Within a factor of 2 either way.
    pub fn within_2x(&self) -> bool {
        let r = self.ratio();
        (0.5..=2.0).contains(&r)
    }
}

/// The store of generator preset `preset` (at the thread's size), sliced to an `of`-th, and
/// pool model `model` filled in for it.
fn build(preset: &str, model: &str, of: u32) -> Result<(super::SimStore, ModelParams)> {
    build_with(preset, model, of, None)
}

/// [`build`], with the previous GC `prev_gc_hours` back instead of the preset's (more hours,
/// more garbage for this GC to remove).
fn build_with(
    preset: &str,
    model: &str,
    of: u32,
    prev_gc_hours: Option<f64>,
) -> Result<(super::SimStore, ModelParams)> {
    let mut cfg = GenConfig::preset(preset)?;
    cfg.scale = 1.0; // the thread's store, not the generator's 1% of it
    if let Some(h) = prev_gc_hours {
        cfg.prev_gc_hours = h;
    }
    let setup = SimSetup {
        cfg,
        params: ModelParams::preset(model)?,
        digests: DigestMode::Hashed,
        first_ino: 1000,
        // A fixed time: the same store every run.
        now: 1_800_000_000,
        slice: Slice::new(of)?,
    };
    let history = crate::gen::build_history(&setup.slice.config(&setup.cfg))?;
    let store = super::build_from(&setup, history)?;
    let mut params = setup.params.clone();
    store.fill_dir_entries(&mut params);
    Ok((store, params))
}

/// A GC of `strategy` with digest-cache capacity `cache_capacity`, without the atime check.
fn gc(strategy: Strategy, cache_capacity: usize, phases: Phases) -> GcOptions {
    GcOptions {
        strategy,
        cache_capacity,
        phases,
        atime_check: false,
        ..GcOptions::default()
    }
}

/// One store's runs: each strategy (with its digest-cache capacity) once, both phases.
fn runs(
    preset: &str,
    model: &str,
    of: u32,
    warm: bool,
    plan: &[(Strategy, usize)],
) -> Result<Vec<SimRun>> {
    runs_with(preset, model, of, None, warm, plan)
}

/// [`runs`] on the store [`build_with`] makes.
fn runs_with(
    preset: &str,
    model: &str,
    of: u32,
    prev_gc_hours: Option<f64>,
    warm: bool,
    plan: &[(Strategy, usize)],
) -> Result<Vec<SimRun>> {
    let (store, params) = build_with(preset, model, of, prev_gc_hours)?;
    plan.iter()
        .map(|&(strategy, capacity)| {
            super::run(
                &store,
                &params,
                &gc(strategy, capacity, Phases::All),
                warm,
                false,
            )
        })
        .collect()
}

const HOUR: f64 = 3600.0;
const DAY: f64 = 86400.0;

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Datastore A's phase-1 figures in threads 001 and 003, shared by the report and the sweep.
/// The LRU baseline before the work, chunks touched per second.
const A_LRU_RATE: f64 = 39.2;
/// v1's whole-store readdir pass (~1 h).
const A_V1_PASS_S: f64 = HOUR;
/// v1's phase 1 after its pass.
const A_V1_PHASE1_S: f64 = 53.5 * HOUR;
/// v2's phase 1 (batches of 1,048,576).
const A_V2_PHASE1_S: f64 = 59.3 * HOUR;
/// v2's phase 1 over v1's pass and phase 1 ("comparable, not faster").
const A_V2_OVER_V1: f64 = A_V2_PHASE1_S / (A_V1_PASS_S + A_V1_PHASE1_S);

/// Datastore A's garbage at its sweeps (thread 003): v2's removed 5.24 M chunks, v1's 18.2 M,
/// and a sweep's time follows what it removes (36 h for v2, ~121 h for v1: 24.7 and 23.9 ms a
/// removal). The threads do not give A's history; the preset's (its churn solved for the
/// dedup factor, a GC a week before) leaves 1.15 M. Built with the previous GC this many hours
/// back, it leaves about as much as each sweep removed (5.1 M and 18.2 M at 1/32;
/// BENCHMARKS.md "The threads again"): the sweep and whole-cycle figures run on those.
const A_V2_GARBAGE_HOURS: f64 = 960.0;
/// See [`A_V2_GARBAGE_HOURS`].
const A_V1_GARBAGE_HOURS: f64 = 3876.0;

/// Thread 000's GC runtimes hold CPU work the model does not charge (reading 6,875 index
/// files, the LRU over 31.5 M references): 10.3 s, fitted with `zfs-special-ssd`'s `op_ns`
/// on the capacity table's 1 Ki and 1 Mi rows (66.2 s and 22.2 s; the model, warm, with
/// `op_ns` 0, charges both 6.07 s and counts 55.5 M and 6.52 M requests: 22.2 = 6.07 +
/// 898 ns x 6.52 M + 10.3). BENCHMARKS.md "Thread 000's capacity table".
const THREAD000_CPU_S: f64 = 10.3;

/// Every figure, from fresh runs at `scale`. `progress` is told what runs.
pub fn report(scale: Scale, progress: &mut dyn FnMut(&str)) -> Result<Vec<Figure>> {
    let mut out = thread000_figures(scale.thread000, progress)?;
    out.extend(datastore_b_figures(scale.datastore_b, progress)?);
    out.extend(datastore_a_figures(scale.datastore_a, progress)?);
    Ok(out)
}

/// Thread 000's figures, on a `1/n` slice of its store.
fn thread000_figures(n: u32, progress: &mut dyn FnMut(&str)) -> Result<Vec<Figure>> {
    let mut out = Vec::new();
    let default = crate::gc::DEFAULT_CACHE_CAPACITY;
    // Thread 000: its pool (SSD special vdev), warm (the runtimes average 3 runs in a row).
    let label = Slice::new(n)?.label();
    progress(&format!(
        "thread 000's store ({label}), zfs-special-ssd, warm"
    ));
    let t = runs(
        "thread000",
        "zfs-special-ssd",
        n,
        true,
        &[
            (Strategy::Naive, default),
            (Strategy::Lru, default),
            (Strategy::Lru, 10 * 1024),
            (Strategy::Lru, 100 * 1024),
        ],
    )?;
    let k = n as f64;
    let from = |what: &str| format!("thread000 {label}, zfs-special-ssd, warm: {what}");
    let runtime = |r: &SimRun| (secs(r.phase1_ns) + secs(r.phase2_ns)) * k + THREAD000_CPU_S;
    out.push(Figure {
        id: "t000-utimensat-unpatched",
        thread: "000",
        what: "utimensat calls, unpatched (no digest cache)",
        measured: 31_591_944.0,
        model: t[0].counters.touched as f64 * k,
        unit: "calls",
        kind: Kind::Predicted,
        from: from("naive"),
    });
    out.push(Figure {
        id: "t000-utimensat-lru",
        thread: "000",
        what: "utimensat calls, LRU of 1 Mi digests",
        measured: 1_495_136.0,
        model: t[1].counters.touched as f64 * k,
        unit: "calls",
        kind: Kind::Predicted,
        from: from("lru"),
    });
    for (id, what, measured, r) in [
        (
            "t000-runtime-10ki",
            "GC runtime, capacity 10 Ki",
            36.164,
            &t[2],
        ),
        (
            "t000-runtime-100ki",
            "GC runtime, capacity 100 Ki",
            23.141,
            &t[3],
        ),
        (
            "t000-runtime-unpatched",
            "GC runtime, unpatched",
            155.4,
            &t[0],
        ),
    ] {
        out.push(Figure {
            id,
            thread: "000",
            what,
            measured,
            model: runtime(r),
            unit: "s",
            kind: Kind::Predicted,
            from: from("both phases + 10.3 s of CPU fitted on the 1 Ki and 1 Mi rows"),
        });
    }

    Ok(out)
}

/// Thread 001's and 003's figures of datastore B, on a `1/n` slice of it.
fn datastore_b_figures(n: u32, progress: &mut dyn FnMut(&str)) -> Result<Vec<Figure>> {
    let mut out = Vec::new();
    let default = crate::gc::DEFAULT_CACHE_CAPACITY;
    // Datastore B on its pool, quiet and cold (thread 001's experiments).
    let label = Slice::new(n)?.label();
    progress(&format!("datastore B ({label}), zfs-raidz-hdd, cold"));
    let b = runs(
        "datastore-b",
        "zfs-raidz-hdd",
        n,
        false,
        &[
            (Strategy::Lru, default),
            (Strategy::Prefetch, default),
            (Strategy::Batched, default),
        ],
    )?;
    let k = n as f64;
    let dirs = (crate::datastore::paths::CHUNK_SUBDIRS as f64 / k).max(1.0);
    let from = |what: &str| format!("datastore-b {label}, zfs-raidz-hdd, cold: {what}");
    out.extend([
        Figure {
            id: "b-lru-phase1",
            thread: "001",
            what: "cold phase 1 with the LRU (the baseline)",
            measured: 2.0 * HOUR + 14.0 * 60.0,
            model: secs(b[0].phase1_ns) * k,
            unit: "s",
            kind: Kind::Predicted,
            from: from("lru"),
        },
        Figure {
            id: "b-pass-per-dir",
            thread: "001",
            what: "readdir pass, time per directory (270.9 s / 32,768)",
            measured: 270.9 / 32768.0,
            model: secs(b[1].pass_ns) / dirs,
            unit: "s",
            kind: Kind::Predicted,
            from: from("prefetch's pass"),
        },
        Figure {
            id: "b-phase1-after-pass",
            thread: "001",
            what: "phase 1 after the pass (9.85 M touches)",
            measured: 11.0 * 60.0 + 59.0,
            model: secs(b[1].phase1_ns.saturating_sub(b[1].pass_ns)) * k,
            unit: "s",
            kind: Kind::Fitted,
            from: from("prefetch after its pass; op_ns fitted here"),
        },
        Figure {
            id: "b-v2-phase1",
            thread: "003",
            what: "v2 (batched) daily phase 1",
            measured: 15.0 * 60.0,
            model: secs(b[2].phase1_ns) * k,
            unit: "s",
            kind: Kind::Predicted,
            from: from("batched"),
        },
        Figure {
            id: "b-v2-gc",
            thread: "003",
            what: "v2 daily GC, both phases (40-50 min)",
            measured: 45.0 * 60.0,
            model: (secs(b[2].phase1_ns) + secs(b[2].phase2_ns)) * k,
            unit: "s",
            kind: Kind::Predicted,
            from: from("batched, both phases"),
        },
    ]);

    Ok(out)
}

/// Thread 001's and 003's figures of datastore A, on a `1/n` slice of it.
fn datastore_a_figures(n: u32, progress: &mut dyn FnMut(&str)) -> Result<Vec<Figure>> {
    let mut out = Vec::new();
    let default = crate::gc::DEFAULT_CACHE_CAPACITY;
    // Datastore A's production cycles, on B's pool serving the backups as well.
    let label = Slice::new(n)?.label();
    progress(&format!("datastore A ({label}), zfs-raidz-hdd-busy, cold"));
    let a = runs(
        "datastore-a",
        "zfs-raidz-hdd-busy",
        n,
        false,
        &[
            (Strategy::Unpatched, default),
            (Strategy::Lru, default),
            (Strategy::Prefetch, default),
            (Strategy::Batched, default),
        ],
    )?;
    let k = n as f64;
    let from = |what: &str| format!("datastore-a {label}, zfs-raidz-hdd-busy, cold: {what}");
    let (lru, v1, v2) = (&a[1], &a[2], &a[3]);
    let v1_phase1 = secs(v1.phase1_ns.saturating_sub(v1.pass_ns)) * k;
    out.extend([
        Figure {
            id: "a-lru-rate",
            thread: "001",
            what: "phase 1 before the work (LRU)",
            measured: A_LRU_RATE,
            model: lru.phase1_chunks_per_s,
            unit: "chunks/s",
            kind: Kind::Predicted,
            from: from("lru"),
        },
        Figure {
            id: "a-v1-pass",
            thread: "003",
            what: "v1: the whole-store readdir pass (~1 h)",
            measured: A_V1_PASS_S,
            model: secs(v1.pass_ns) * k,
            unit: "s",
            kind: Kind::Predicted,
            from: from("prefetch's pass"),
        },
        Figure {
            id: "a-v1-phase1",
            thread: "003",
            what: "v1: phase 1 after the pass",
            measured: A_V1_PHASE1_S,
            model: v1_phase1,
            unit: "s",
            kind: Kind::Fitted,
            from: from("prefetch after its pass; backup_disk_share fitted here"),
        },
        Figure {
            id: "a-v2-phase1",
            thread: "003",
            what: "v2: phase 1, batches of 1,048,576",
            measured: A_V2_PHASE1_S,
            model: secs(v2.phase1_ns) * k,
            unit: "s",
            kind: Kind::Predicted,
            from: from("batched"),
        },
        Figure {
            id: "a-v2-over-v1",
            thread: "003",
            what: "v2 against v1, phase 1 and pass (\"comparable, not faster\")",
            measured: A_V2_OVER_V1,
            model: secs(v2.phase1_ns) / secs(v1.phase1_ns).max(1e-9),
            unit: "",
            kind: Kind::Predicted,
            from: from("batched / prefetch"),
        },
    ]);
    // The sweeps and cycles on stores holding the garbage each sweep removed.
    progress(&format!(
        "datastore A ({label}) with v2's and v1's garbage, zfs-raidz-hdd-busy, cold"
    ));
    let model = "zfs-raidz-hdd-busy";
    let v2g = runs_with(
        "datastore-a",
        model,
        n,
        Some(A_V2_GARBAGE_HOURS),
        false,
        &[(Strategy::Batched, default)],
    )?;
    let v1g = runs_with(
        "datastore-a",
        model,
        n,
        Some(A_V1_GARBAGE_HOURS),
        false,
        &[(Strategy::Prefetch, default)],
    )?;
    out.extend(datastore_a_cycles(&a[0], &v1g[0], &v2g[0], k, &from));
    out.push(Figure {
        id: "a-v2-rewrites",
        thread: "001",
        what: "phase 1 block rewrites in digest order (~72 M)",
        measured: 72e6,
        model: a[3].phase1_block_writes as f64 * k,
        unit: "blocks",
        kind: Kind::Estimate,
        from: from("batched's phase 1 block writes"),
    });
    Ok(out)
}

/// Datastore A's sweep and whole cycles: unpatched's on the preset's store, v1's (prefetch)
/// and v2's (batched) on stores holding the garbage their sweeps removed; on a `1/k` slice.
fn datastore_a_cycles(
    unpatched: &SimRun,
    v1: &SimRun,
    v2: &SimRun,
    k: f64,
    from: &dyn Fn(&str) -> String,
) -> Vec<Figure> {
    let cycle = |r: &SimRun| (secs(r.phase1_ns) + secs(r.phase2_ns)) * k;
    let removed = |r: &SimRun| {
        format!(
            "{:.1} M removed",
            r.counters.removed_chunks as f64 * k / 1e6
        )
    };
    vec![
        Figure {
            id: "a-v2-phase2",
            thread: "003",
            what: "v2: phase 2 (5.24 M removed of 84.2 M)",
            measured: 36.0 * HOUR,
            model: secs(v2.phase2_ns) * k,
            unit: "s",
            kind: Kind::Predicted,
            from: from(&format!(
                "batched's sweep, previous GC {A_V2_GARBAGE_HOURS} h back ({})",
                removed(v2)
            )),
        },
        Figure {
            id: "a-v1-cycle",
            thread: "003",
            what: "v1: whole cycle (7.33 days)",
            measured: 7.33 * DAY,
            model: cycle(v1),
            unit: "s",
            kind: Kind::Predicted,
            from: from(&format!(
                "prefetch, both phases, previous GC {A_V1_GARBAGE_HOURS} h back ({})",
                removed(v1)
            )),
        },
        Figure {
            id: "a-v2-cycle",
            thread: "003",
            what: "v2: whole cycle (3.97 days)",
            measured: 3.97 * DAY,
            model: cycle(v2),
            unit: "s",
            kind: Kind::Predicted,
            from: from(&format!(
                "batched, both phases, previous GC {A_V2_GARBAGE_HOURS} h back ({})",
                removed(v2)
            )),
        },
        Figure {
            id: "a-unpatched-cycle",
            thread: "003",
            what: "unpatched: whole cycle (21.25-65.81 days; the shortest)",
            measured: 21.25 * DAY,
            model: cycle(unpatched),
            unit: "s",
            kind: Kind::Predicted,
            from: from("unpatched, both phases"),
        },
    ]
}

/// The sweep's metadata caches (the whole store's; a slice divides them): from one that holds
/// nothing of datastore A to one that holds all its metadata (~50 GiB of dnodes and ZAP
/// leaves). A pool's ARC less what its backups hold: the model's `backup_cache_share`
/// only scales the cache, so the sweep varies the cache alone.
pub const SWEEP_CACHES: [u64; 6] = [512 << 20, 2 << 30, 8 << 30, 16 << 30, 32 << 30, 64 << 30];

/// lru's phase 1 over v1's in the threads: v1's rate after its pass (datastore A's ~74.6 M
/// touches in 53.5 h: 387 chunks/s) over the LRU baseline's 39.2 chunks/s.
pub const THREADS_LRU_OVER_V1: f64 = 74.6e6 / A_V1_PHASE1_S / A_LRU_RATE;

/// The sweep's shares of the disks' time taken by backups (`backup_disk_share`).
pub const SWEEP_DISK_SHARES: [f64; 4] = [0.0, 0.5, 0.75, 0.9];

/// Datastore A's phase-1 figures at one point of the sweep: B's pool (`zfs-raidz-hdd`,
/// every value from B's hardware and figures) with A's two unknowns set, the ARC it had and
/// the backups' load on its disks.
#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    /// The metadata cache, bytes (the whole store's).
    pub cache_bytes: u64,
    /// The backups' share of the disks' time.
    pub backup_disk_share: f64,
    /// lru's phase 1, chunks touched per second (thread 001: 39.2).
    pub lru_chunks_per_s: f64,
    /// lru's phase 1, seconds.
    pub lru_phase1_s: f64,
    /// prefetch's (v1's) readdir pass, seconds (thread 003: ~1 h).
    pub v1_pass_s: f64,
    /// v1's phase 1 after its pass, seconds (53.5 h).
    pub v1_phase1_s: f64,
    /// batched's (v2's) phase 1, seconds (59.3 h).
    pub v2_phase1_s: f64,
    /// unpatched's phase 1, seconds (its cycles took 21-66 days with phase 2).
    pub unpatched_phase1_s: f64,
}

impl SweepPoint {
    /// The threads' figures the point is held against: (name, thread's, model's).
    pub fn figures(&self) -> [(&'static str, f64, f64); 5] {
        [
            ("lru chunks/s", A_LRU_RATE, self.lru_chunks_per_s),
            ("v1 pass", A_V1_PASS_S, self.v1_pass_s),
            ("v1 phase 1", A_V1_PHASE1_S, self.v1_phase1_s),
            ("v2 phase 1", A_V2_PHASE1_S, self.v2_phase1_s),
            (
                "v2 / v1",
                A_V2_OVER_V1,
                self.v2_phase1_s / (self.v1_pass_s + self.v1_phase1_s).max(1e-9),
            ),
        ]
    }

    /// lru's phase 1 over v1's after its pass: what the LRU baseline and v1 pull against
    /// each other on (the threads: 39.2 chunks/s against v1's ~74.6 M touches in 53.5 h,
    /// 387 chunks/s, is [`THREADS_LRU_OVER_V1`]).
    pub fn lru_over_v1(&self) -> f64 {
        self.lru_phase1_s / self.v1_phase1_s.max(1e-9)
    }

    /// How many of [`SweepPoint::figures`] are within 2x.
    pub fn within_2x(&self) -> usize {
        self.figures()
            .iter()
            .filter(|(_, thread, model)| (0.5..=2.0).contains(&(model / thread)))
            .count()
    }
}

/// Datastore A's phase 1 (an `of`-th slice, times multiplied back) for unpatched, lru,
/// prefetch and batched at every pair of `caches` and `shares`, on one built store; the runs
/// go side by side on the machine's CPUs. `progress` is told each point as it starts.
pub fn sweep(
    of: u32,
    caches: &[u64],
    shares: &[f64],
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<SweepPoint>> {
    let (store, base) = build("datastore-a", "zfs-raidz-hdd", of)?;
    sweep_store(&store, &base, caches, shares, progress)
}

/// [`sweep`] on a built store (an `of`-th slice, as [`SimStore::slice`] says) with pool
/// `base`, whose cache and disk share each point replaces.
fn sweep_store(
    store: &super::SimStore,
    base: &ModelParams,
    caches: &[u64],
    shares: &[f64],
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<SweepPoint>> {
    let of = store.slice().of;
    let label = store.slice().label();
    let points: Vec<(u64, f64)> = caches
        .iter()
        .flat_map(|&c| shares.iter().map(move |&s| (c, s)))
        .collect();
    const PLAN: [Strategy; 4] = [
        Strategy::Unpatched,
        Strategy::Lru,
        Strategy::Prefetch,
        Strategy::Batched,
    ];
    let default = crate::gc::DEFAULT_CACHE_CAPACITY;
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runs = super::side_by_side(store, points.len() * PLAN.len(), jobs, |st, i| {
        let (cache_bytes, share) = points[i / PLAN.len()];
        let strategy = PLAN[i % PLAN.len()];
        if i % PLAN.len() == 0 {
            progress(&format!(
                "datastore A ({label}): cache {}, backups take {:.0}% of the disks' time",
                crate::units::human_bytes(cache_bytes),
                share * 100.0
            ));
        }
        let params = ModelParams {
            name: format!("zfs-raidz-hdd, cache {cache_bytes}, backup_disk_share {share}"),
            cache_bytes,
            backup_disk_share: share,
            ..base.clone()
        };
        super::run(
            st,
            &params,
            &gc(strategy, default, Phases::Mark),
            false,
            false,
        )
    })?;
    let k = of as f64;
    Ok(points
        .iter()
        .zip(runs.chunks(PLAN.len()))
        .map(|(&(cache_bytes, backup_disk_share), r)| {
            let (unpatched, lru, v1, v2) = (&r[0], &r[1], &r[2], &r[3]);
            SweepPoint {
                cache_bytes,
                backup_disk_share,
                lru_chunks_per_s: lru.phase1_chunks_per_s,
                lru_phase1_s: secs(lru.phase1_ns) * k,
                v1_pass_s: secs(v1.pass_ns) * k,
                v1_phase1_s: secs(v1.phase1_ns.saturating_sub(v1.pass_ns)) * k,
                v2_phase1_s: secs(v2.phase1_ns) * k,
                unpatched_phase1_s: secs(unpatched.phase1_ns) * k,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sweep point is the runs it stands for (made side by side on forks of one store),
    /// and the backups' share of the disks slows what reads and writes. On a 1/256 slice of
    /// datastore B, which builds in a fraction of A's time.
    #[test]
    fn a_sweep_point_is_the_runs_at_its_parameters() {
        let (store, base) = build("datastore-b", "zfs-raidz-hdd", 256).unwrap();
        let points = sweep_store(&store, &base, &[16 << 30], &[0.5], &|_| {}).unwrap();
        let busy = ModelParams {
            backup_disk_share: 0.5,
            ..base.clone()
        };
        let preset = ModelParams::preset("zfs-raidz-hdd-busy").unwrap();
        assert_eq!(
            ModelParams {
                name: preset.name.clone(),
                dir_entries: preset.dir_entries,
                ..busy.clone()
            },
            preset,
            "the point (16 GiB, 0.5) is the busy preset"
        );
        let run = |p: &ModelParams, s| {
            let opts = gc(s, crate::gc::DEFAULT_CACHE_CAPACITY, Phases::Mark);
            super::super::run(&store, p, &opts, false, false).unwrap()
        };
        let (lru, v1, v2) = (
            run(&busy, Strategy::Lru),
            run(&busy, Strategy::Prefetch),
            run(&busy, Strategy::Batched),
        );
        let [point] = &points[..] else {
            panic!("{points:?}")
        };
        let k = 256.0;
        assert_eq!(
            (point.cache_bytes, point.backup_disk_share),
            (16 << 30, 0.5)
        );
        assert_eq!(point.lru_chunks_per_s, lru.phase1_chunks_per_s);
        assert_eq!(point.lru_phase1_s, secs(lru.phase1_ns) * k);
        assert_eq!(point.lru_over_v1(), point.lru_phase1_s / point.v1_phase1_s);
        assert!((9.8..10.0).contains(&THREADS_LRU_OVER_V1));
        assert_eq!(point.v1_pass_s, secs(v1.pass_ns) * k);
        assert_eq!(point.v1_phase1_s, secs(v1.phase1_ns - v1.pass_ns) * k);
        assert_eq!(point.v2_phase1_s, secs(v2.phase1_ns) * k);
        assert!(point.unpatched_phase1_s > point.v2_phase1_s, "{point:?}");
        let idle = run(&base, Strategy::Lru);
        assert!(
            idle.phase1_chunks_per_s > lru.phase1_chunks_per_s,
            "{} against {}",
            idle.phase1_chunks_per_s,
            lru.phase1_chunks_per_s
        );
        let f = point.figures();
        assert_eq!(f[0], ("lru chunks/s", 39.2, point.lru_chunks_per_s));
        let within = f
            .iter()
            .filter(|(_, t, m)| (0.5..=2.0).contains(&(m / t)))
            .count();
        assert_eq!(point.within_2x(), within);
    }
}
