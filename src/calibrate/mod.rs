//! `calibrate`: a pool's model fitted to its own GC task logs.
//!
//! A task log holds the time of each percentage of phase 1 (index files marked) and of
//! phase 2 (chunk directories swept): the GC's progress curve ([`Curve`]). A survey holds the
//! store the GC ran on. The model's mechanisms come from a base model (the filesystem's
//! preset); what a pool has of its own, and no survey shows, is fitted so that replaying the
//! logged GC on the surveyed store through the model gives the logged curve:
//!
//! * the metadata cache's size (`cache_bytes`): the RAM the pool had for metadata. It shapes
//!   the curve (the sweep re-reads what phase 1 read only when it did not stay cached);
//!   searched over sizes a factor of 2 apart, then refined to a factor of √2;
//! * the time of a read (`io_ns` with a disk model, where the disk prices seeks and the
//!   platter's turn and this is what the host adds; `miss_ns` without one, `write_ns` scaled
//!   along). Times are linear in it (reads one at a time), so for each cache size two runs
//!   give each point of the curve as `a + b·x` and the best `x` in closed form; a third run
//!   at that `x` gives the deviation that ranks the cache sizes.
//!
//! The deviation of a point is its time's difference from the log's over the log's length of
//! that phase; a fit's is the root of the mean square over its points, each phase of each log
//! weighing the same. PBS's logs have whole seconds: a phase of a few seconds fits coarsely.

use std::path::PathBuf;

use anyhow::{bail, Result};
use serde::Serialize;

use crate::gc::curve::Curve;
use crate::gc::{GcOptions, Strategy};
use crate::model::ModelParams;
use crate::sim::{SimRun, SimStore};

/// A logged GC to fit: its curve and how it ran.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The log file (for the report).
    pub path: PathBuf,
    /// Its progress curve.
    pub curve: Curve,
    /// The strategy it ran.
    pub strategy: Strategy,
    /// Its digest cache's capacity.
    pub cache_capacity: usize,
}

/// One log beside the fitted model's replay of it.
#[derive(Clone, Debug, Serialize)]
pub struct LogFit {
    /// The log file.
    pub log: PathBuf,
    /// The strategy it ran.
    pub strategy: String,
    /// Phase 1 and 2 as logged, seconds (phase 2 0 when the log has none).
    pub logged_s: [f64; 2],
    /// The same phases replayed through the fitted model, seconds.
    pub fitted_s: [f64; 2],
    /// Root mean square deviation of its points (see the module documentation).
    pub deviation: f64,
}

/// One model tried.
#[derive(Clone, Debug, Serialize)]
pub struct Trial {
    /// Its metadata cache, bytes.
    pub cache_bytes: u64,
    /// Its time per read (the knob fitted), ns.
    pub read_ns: u64,
    /// Its deviation over every log.
    pub deviation: f64,
}

/// What `calibrate` found.
#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    /// The fitted model (the base with the cache and the read time found).
    pub params: ModelParams,
    /// The knob fitted: `io_ns` (a disk model) or `miss_ns`.
    pub read_knob: &'static str,
    /// Every log against the fitted model.
    pub logs: Vec<LogFit>,
    /// Every model tried, in order.
    pub trials: Vec<Trial>,
    /// The read time fitted is the least there is (no host time a read with a disk model):
    /// the logged GC ran faster than the base model's disk can, so its disk is faster.
    pub read_at_floor: bool,
    /// The smallest and largest cache sizes that fit as well as the best (within 2% of its
    /// deviation): where a bigger cache changes nothing, the logs cannot tell sizes apart
    /// (the fitted model has the largest).
    pub cache_range: (u64, u64),
}

/// The smallest cache tried.
const FIRST_CACHE: u64 = 8 << 20;
/// The largest.
const LAST_CACHE: u64 = 1 << 40;
/// Deviations within this factor of the best count as fitting as well.
const AS_WELL: f64 = 1.02;

/// The knob `calibrate` fits: a read's time in `p`.
pub fn read_ns(p: &ModelParams) -> u64 {
    if p.disk.is_some() {
        p.io_ns
    } else {
        p.miss_ns
    }
}

fn read_knob(p: &ModelParams) -> &'static str {
    if p.disk.is_some() {
        "io_ns"
    } else {
        "miss_ns"
    }
}

/// The least read time fitted: no host time beyond a disk model's, or 1 us a read.
fn read_floor(base: &ModelParams) -> u64 {
    if base.disk.is_some() {
        0
    } else {
        1_000
    }
}

/// `base` with `cache` bytes of cache and `x` ns a read.
fn with(base: &ModelParams, cache: u64, x: u64) -> ModelParams {
    let mut p = base.clone();
    p.cache_bytes = cache;
    if p.disk.is_some() {
        p.io_ns = x;
    } else {
        let x = x.max(1);
        p.write_ns = (p.write_ns as f64 * x as f64 / p.miss_ns.max(1) as f64).round() as u64;
        p.miss_ns = x;
    }
    p
}

/// The two read times each cache size is probed at.
fn probes(base: &ModelParams) -> (u64, u64) {
    if base.disk.is_some() {
        (0, 1_000_000)
    } else {
        let m = base.miss_ns.max(1_000);
        (m / 2, m * 2)
    }
}

/// A curve's time at `percent` of a phase, interpolated between its points (with the
/// phase's start at 0 and its end at 100).
fn at(points: &[(u8, f64)], end: Option<f64>, percent: u8) -> Option<f64> {
    let mut prev = (0u8, 0.0);
    let all = points.iter().copied().chain(end.map(|e| (100u8, e)));
    for (p, t) in all {
        if p >= percent {
            if p == prev.0 {
                return Some(t);
            }
            let f = (percent - prev.0) as f64 / (p - prev.0) as f64;
            return Some(prev.1 + f * (t - prev.1));
        }
        prev = (p, t);
    }
    None
}

/// A logged phase's points: (percent, logged seconds), the end as 100%, and its length.
fn logged(c: &Curve, phase: usize) -> (Vec<(u8, f64)>, f64) {
    let (points, end) = c.phase(phase);
    let mut v: Vec<(u8, f64)> = points.iter().copied().filter(|p| p.0 < 100).collect();
    if let Some(e) = end {
        v.push((100, e));
    }
    // A phase that did not end (a killed GC) is as long as its last percentage.
    let length = end.or_else(|| v.last().map(|p| p.1)).unwrap_or(0.0);
    (v, length)
}

/// A simulated phase's time at `percent`.
fn simulated(c: &Curve, phase: usize, percent: u8) -> f64 {
    let (points, end) = c.phase(phase);
    at(points, end, percent).unwrap_or(0.0)
}

/// Each fitted point of every log: (weight, logged seconds, simulated seconds per run).
struct Points {
    rows: Vec<(f64, f64, Vec<f64>)>,
}

impl Points {
    /// `runs[r][l]`: run `r` of log `l`.
    fn of(logs: &[Observed], runs: &[Vec<SimRun>]) -> Points {
        let mut rows = Vec::new();
        for (l, o) in logs.iter().enumerate() {
            for phase in 0..2 {
                let (points, length) = logged(&o.curve, phase);
                if points.is_empty() || length <= 0.0 {
                    continue;
                }
                let w = 1.0 / (points.len() as f64 * length * length);
                for (p, t) in points {
                    let sims = runs
                        .iter()
                        .map(|r| simulated(&r[l].curve, phase, p))
                        .collect();
                    rows.push((w, t, sims));
                }
            }
        }
        Points { rows }
    }

    /// The deviation of run `r`.
    fn deviation(&self, r: usize, phases: usize) -> f64 {
        let s: f64 = self
            .rows
            .iter()
            .map(|(w, t, sims)| w * (sims[r] - t).powi(2))
            .sum();
        (s / phases.max(1) as f64).sqrt()
    }

    /// The read time that fits best, from runs 0 and 1 at `x0` and `x1`.
    fn best_x(&self, x0: u64, x1: u64) -> f64 {
        let (mut num, mut den) = (0.0, 0.0);
        let dx = (x1 - x0) as f64;
        for (w, t, sims) in &self.rows {
            let b = (sims[1] - sims[0]) / dx;
            let a = sims[0] - b * x0 as f64;
            num += w * b * (t - a);
            den += w * b * b;
        }
        if den > 0.0 {
            num / den
        } else {
            x0 as f64
        }
    }
}

/// Phases with points, over every log (the deviation's denominator).
fn phases(logs: &[Observed]) -> usize {
    logs.iter()
        .map(|o| {
            (0..2)
                .filter(|&p| !logged(&o.curve, p).0.is_empty())
                .count()
        })
        .sum()
}

/// Runs every log's GC on `store` with `params`.
fn replay(store: &SimStore, params: &ModelParams, logs: &[Observed]) -> Result<Vec<SimRun>> {
    logs.iter()
        .map(|o| {
            let opts = GcOptions {
                strategy: o.strategy,
                cache_capacity: o.cache_capacity,
                phases: if o.curve.sweep_s.is_some() {
                    crate::gc::Phases::All
                } else {
                    crate::gc::Phases::Mark
                },
                atime_check: false,
                ..GcOptions::default()
            };
            crate::sim::run(store, params, &opts, false, false)
        })
        .collect()
}

/// One cache size: the best read time for it and its deviation, and the verifying runs'
/// total reads (a bigger cache that reads no less changes nothing).
fn try_cache(
    store: &SimStore,
    base: &ModelParams,
    logs: &[Observed],
    cache: u64,
) -> Result<(Trial, u64, Vec<SimRun>)> {
    let (x0, x1) = probes(base);
    let probe = [
        replay(store, &with(base, cache, x0), logs)?,
        replay(store, &with(base, cache, x1), logs)?,
    ];
    let x = Points::of(logs, &probe)
        .best_x(x0, x1)
        .max(read_floor(base) as f64)
        .round() as u64;
    let runs = replay(store, &with(base, cache, x), logs)?;
    let deviation = Points::of(logs, std::slice::from_ref(&runs)).deviation(0, phases(logs));
    let reads = runs.iter().map(|r| r.model.reads()).sum();
    Ok((
        Trial {
            cache_bytes: cache,
            read_ns: x,
            deviation,
        },
        reads,
        runs,
    ))
}

/// Fits `base`'s cache size and read time to `logs` of GCs on `store`; `progress` is told
/// each trial. With `cache`, only that cache size is tried (the pool's, when it is known).
pub fn calibrate(
    store: &SimStore,
    base: &ModelParams,
    logs: &[Observed],
    cache: Option<u64>,
    progress: &mut dyn FnMut(&Trial),
) -> Result<Calibration> {
    if logs.is_empty() {
        bail!("no task log to fit");
    }
    if phases(logs) == 0 {
        bail!("the task logs have no percentage lines: nothing to fit");
    }
    let mut tried: Vec<(Trial, Vec<SimRun>)> = Vec::new();
    let mut keep = |t: Trial, runs: Vec<SimRun>, tried: &mut Vec<(Trial, Vec<SimRun>)>| {
        progress(&t);
        tried.push((t, runs));
    };
    let best_cache = |tried: &[(Trial, Vec<SimRun>)]| {
        tried
            .iter()
            .min_by(|a, b| a.0.deviation.total_cmp(&b.0.deviation))
            .map(|t| t.0.cache_bytes)
    };
    let pinned = cache.is_some();
    if let Some(c) = cache {
        let (t, _, runs) = try_cache(store, base, logs, c)?;
        keep(t, runs, &mut tried);
    }
    // Doubling until a bigger cache reads no less: everything fits from there on.
    let mut cache = if pinned { u64::MAX } else { FIRST_CACHE };
    let mut last_reads = None;
    while cache <= LAST_CACHE {
        let (t, reads, runs) = try_cache(store, base, logs, cache)?;
        keep(t, runs, &mut tried);
        if last_reads.is_some_and(|r| reads >= r) {
            break;
        }
        last_reads = Some(reads);
        cache *= 2;
    }
    // Then a factor of √2 either side of the best.
    let centre = best_cache(&tried).expect("one trial at least");
    for c in [centre as f64 / 2f64.sqrt(), centre as f64 * 2f64.sqrt()] {
        let c = c.round() as u64;
        if !pinned && (FIRST_CACHE..=LAST_CACHE).contains(&c) {
            let (t, _, runs) = try_cache(store, base, logs, c)?;
            keep(t, runs, &mut tried);
        }
    }
    // Of the sizes that fit as well as the best, the largest: a smaller one claims that
    // blocks were evicted and read again, which the logs do not show (a log of a strategy
    // that reads every directory once cannot tell whether all of them would stay cached).
    let least = tried
        .iter()
        .map(|t| t.0.deviation)
        .fold(f64::INFINITY, f64::min);
    let as_well = |t: &Trial| t.deviation <= least * AS_WELL + 1e-12;
    let near: Vec<u64> = tried
        .iter()
        .filter(|t| as_well(&t.0))
        .map(|t| t.0.cache_bytes)
        .collect();
    let cache_range = (
        near.iter().copied().min().unwrap_or(FIRST_CACHE),
        near.iter().copied().max().unwrap_or(FIRST_CACHE),
    );
    let trials: Vec<Trial> = tried.iter().map(|t| t.0.clone()).collect();
    let (t, runs) = tried
        .into_iter()
        .filter(|t| as_well(&t.0))
        .max_by_key(|t| t.0.cache_bytes)
        .expect("the best fits as well as itself");
    let floor = read_floor(base);
    let mut params = with(base, t.cache_bytes, t.read_ns);
    params.name = format!("{} fitted to {} task log(s)", base.name, logs.len());
    let fits = logs
        .iter()
        .zip(&runs)
        .map(|(o, r)| {
            let one = std::slice::from_ref(o);
            let dev = Points::of(one, &[vec![r.clone()]]).deviation(0, phases(one));
            LogFit {
                log: o.path.clone(),
                strategy: o.strategy.name().to_string(),
                logged_s: [
                    o.curve.mark_s.unwrap_or(0.0),
                    o.curve.sweep_s.unwrap_or(0.0),
                ],
                fitted_s: [r.phase1_ns as f64 / 1e9, r.phase2_ns as f64 / 1e9],
                deviation: dev,
            }
        })
        .collect();
    Ok(Calibration {
        read_at_floor: t.read_ns <= floor,
        read_knob: read_knob(&params),
        params,
        logs: fits,
        trials,
        cache_range,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_interpolate_between_their_points_and_end_at_the_phase_end() {
        let pts = [(10u8, 1.0), (50, 3.0)];
        assert_eq!(at(&pts, Some(7.0), 30), Some(2.0));
        assert_eq!(at(&pts, Some(7.0), 5), Some(0.5));
        assert_eq!(at(&pts, Some(7.0), 75), Some(5.0));
        assert_eq!(at(&pts, None, 75), None);
        assert_eq!(at(&pts, Some(7.0), 100), Some(7.0));
    }

    /// The `tiny` preset, simulated.
    fn tiny(params: &ModelParams) -> SimStore {
        let mut cfg = crate::gen::GenConfig::preset("tiny").unwrap();
        cfg.seed = 5;
        crate::sim::build(&crate::sim::SimSetup {
            cfg,
            params: params.clone(),
            digests: crate::sim::DigestMode::Hashed,
            first_ino: 1000,
            now: 1_750_000_000,
            slice: crate::sim::Slice::WHOLE,
        })
        .unwrap()
    }

    /// A simulated GC's curve as the log of a pool with `truth`.
    fn observed(store: &SimStore, truth: &ModelParams, strategy: Strategy) -> Observed {
        let run = replay(
            store,
            truth,
            &[Observed {
                path: "truth".into(),
                curve: Curve {
                    sweep_s: Some(1.0),
                    ..Curve::default()
                },
                strategy,
                cache_capacity: crate::gc::DEFAULT_CACHE_CAPACITY,
            }],
        )
        .unwrap()
        .remove(0);
        assert!(!run.curve.mark.is_empty() && !run.curve.sweep.is_empty());
        Observed {
            path: format!("{}.log", strategy.name()).into(),
            curve: run.curve,
            strategy,
            cache_capacity: crate::gc::DEFAULT_CACHE_CAPACITY,
        }
    }

    #[test]
    fn a_fit_to_a_simulated_log_finds_the_pool_that_made_it() {
        // The truth: ZFS on HDDs with a cache too small for the store's metadata (the sweep
        // reads again what phase 1 read), and a slower disk than the preset's.
        let base = ModelParams::preset("zfs-hdd").unwrap();
        let mut truth = base.clone();
        let store = tiny(&base);
        truth.cache_bytes = 32 << 20;
        truth = with(&truth, 32 << 20, base.miss_ns * 3);
        let log = observed(&store, &truth, Strategy::Lru);
        let fit = calibrate(&store, &base, &[log], None, &mut |_| {}).unwrap();
        let p = &fit.params;
        let x = p.miss_ns as f64 / truth.miss_ns as f64;
        assert!(
            (0.95..=1.05).contains(&x),
            "miss_ns {} vs {}",
            p.miss_ns,
            truth.miss_ns
        );
        let (lo, hi) = fit.cache_range;
        assert!(
            lo <= truth.cache_bytes && truth.cache_bytes <= hi,
            "fitted caches {lo}..{hi}, truth {}",
            truth.cache_bytes
        );
        assert!(fit.logs[0].deviation < 0.02, "{:?}", fit.logs);
        assert!(!fit.read_at_floor);
        // A bigger cache than the truth's would have made the sweep cheaper than logged: the
        // fit cannot have taken the largest it tried.
        assert!(hi < fit.trials.iter().map(|t| t.cache_bytes).max().unwrap());
    }

    #[test]
    fn the_read_knob_is_io_ns_with_a_disk_and_miss_ns_without() {
        let zfs = ModelParams::preset("zfs-hdd").unwrap();
        let p = with(&zfs, 1 << 30, zfs.miss_ns * 2);
        assert_eq!((p.miss_ns, p.write_ns), (zfs.miss_ns * 2, zfs.write_ns * 2));
        assert_eq!(p.cache_bytes, 1 << 30);
        let ext4 = ModelParams::preset("ext4-hdd").unwrap();
        let q = with(&ext4, 1 << 20, 123_000);
        assert_eq!((q.io_ns, q.miss_ns), (123_000, ext4.miss_ns));
        assert_eq!(read_knob(&q), "io_ns");
    }
}
