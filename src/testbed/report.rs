//! The testbed's report: per strategy and phase, measured beside predicted; the rankings
//! compared; the table for people.

use std::path::PathBuf;

use serde::Serialize;

use super::{TestbedOptions, ZfsSettings};

/// One phase of one strategy's run, measured and predicted.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseResult {
    /// The GC's own time for the phase, seconds.
    pub measured_s: f64,
    /// The model's, seconds.
    pub predicted_s: f64,
    /// Reads the disk served in the phase.
    pub device_reads: u64,
    /// Bytes they moved.
    pub device_read_bytes: u64,
    /// Reads of 4 KiB blocks read before in the same run (evicted from the page cache and
    /// read again: memory reclaim, or a cache smaller than the working set).
    pub device_rereads: u64,
    /// Writes the disk served in the phase.
    pub device_writes: u64,
    /// Metadata blocks the model reads from its disks in the phase.
    pub predicted_reads: u64,
    /// The calibrated model's time for the phase, seconds (0: no calibration).
    pub calibrated_s: f64,
    /// The calibrated model's reads in the phase.
    pub calibrated_reads: u64,
    /// On zfs with `name_reads`: the device's reads and writes in the phase by what they
    /// touched (OUT/blocks.map, the golden image's blocks from zdb).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_kind: Vec<crate::analysis::device::KindIo>,
    /// With `--repeat`: the fastest and the slowest run's time, seconds (`measured_s` is
    /// their median).
    pub measured_min_s: f64,
    /// See `measured_min_s`.
    pub measured_max_s: f64,
}

/// What one run of a strategy measured in each phase (`--repeat` keeps every run's).
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    /// The disk's trace of the run.
    pub trace: PathBuf,
    /// Per phase: the GC's time (s), the device's reads, re-reads and writes.
    pub phases: [(f64, u64, u64, u64); 2],
}

/// One strategy's run.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    /// The strategy.
    pub strategy: String,
    /// Phase 1 (mark) and phase 2 (sweep).
    pub phases: [PhaseResult; 2],
    /// The disk's trace of the run.
    pub trace: PathBuf,
    /// The GC's task log, with the time of each line (what `calibrate` reads).
    pub task_log: PathBuf,
    /// With `--repeat`: every run's measurements, this one's first; `phases` holds their
    /// medians (`by_kind` and the calibration are of the first run).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<Measured>,
}

impl RunResult {
    /// What this run measured.
    pub fn measured(&self) -> Measured {
        Measured {
            trace: self.trace.clone(),
            phases: [0, 1].map(|i| {
                let p = &self.phases[i];
                (
                    p.measured_s,
                    p.device_reads,
                    p.device_rereads,
                    p.device_writes,
                )
            }),
        }
    }

    /// With the other rounds' runs in `repeats`: puts this one's first and takes the medians
    /// (the lower middle of an even count: a figure some run measured) and the extremes.
    pub fn take_medians(&mut self) {
        if !self.repeats.is_empty() {
            self.repeats.insert(0, self.measured());
        }
        let all = match self.repeats.is_empty() {
            true => vec![self.measured()],
            false => self.repeats.clone(),
        };
        for (i, p) in self.phases.iter_mut().enumerate() {
            let mut secs: Vec<f64> = all.iter().map(|m| m.phases[i].0).collect();
            secs.sort_by(f64::total_cmp);
            let median = |mut v: Vec<u64>| {
                v.sort_unstable();
                v[(v.len() - 1) / 2]
            };
            p.measured_s = secs[(secs.len() - 1) / 2];
            p.measured_min_s = secs[0];
            p.measured_max_s = secs[secs.len() - 1];
            p.device_reads = median(all.iter().map(|m| m.phases[i].1).collect());
            p.device_rereads = median(all.iter().map(|m| m.phases[i].2).collect());
            p.device_writes = median(all.iter().map(|m| m.phases[i].3).collect());
        }
    }
}

/// The model fitted to one strategy's task log, as an admin would fit their pool's.
#[derive(Clone, Debug, Serialize)]
pub struct Calibrated {
    /// The strategy whose log it was fitted to.
    pub on: String,
    /// The fitted model file.
    pub model_file: PathBuf,
    /// Its metadata cache, bytes (the testbed's memory limit is the truth).
    pub cache_bytes: u64,
    /// Its host time per read, ns (the testbed's measured `host_io_ns` is the truth).
    pub io_ns: u64,
    /// Strategies by the calibrated model's phase-1 time, fastest first.
    pub ranking: Vec<String>,
    /// It orders the strategies' phase 1 as measured, ties within 10% aside.
    pub ranking_agrees: bool,
}

/// The testbed's report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// What was built and run.
    pub options: TestbedOptions,
    /// Chunks in the generated store.
    pub chunks: u64,
    /// Per strategy, in run order.
    pub runs: Vec<RunResult>,
    /// Strategies by measured phase-1 time, fastest first.
    pub measured_ranking: Vec<String>,
    /// Strategies by predicted phase-1 time, fastest first.
    pub predicted_ranking: Vec<String>,
    /// The model orders every two strategies as measured, where their measured phase-1
    /// times differ by more than 10% ([`TIE`]; closer is a tie that run-to-run noise decides).
    pub ranking_agrees: bool,
    /// The model file the predictions came from (`--model` with the testbed's disk, cache
    /// and host I/O time): `simulate --model` it to reproduce them.
    pub model_file: PathBuf,
    /// The host's time per device read through the filesystem, the loop device and the
    /// mount, beyond the disk model's, measured before the runs (the model's `io_ns`), ns.
    pub host_io_ns: u64,
    /// The image lay in memory (a tmpfs), not on this machine's disk.
    pub image_in_memory: bool,
    /// The survey of the store (`simulate --survey` it with a model file).
    pub survey: PathBuf,
    /// What the survey found the filesystem to be, and its layout (from its report,
    /// OUT/store.survey.json).
    pub surveyed: Surveyed,
    /// The model `calibrate` fitted to one strategy's task log, and what it predicts.
    pub calibrated: Option<Calibrated>,
    /// On zfs: the daemon's and the pool's settings, as run.
    pub zfs: Option<ZfsReport>,
    /// On zfs with `name_reads`: the golden image's block map (`trace device --zfs-blocks`).
    pub block_map: Option<PathBuf>,
    /// What this machine disturbs, for whoever reads the figures.
    pub notes: Vec<String>,
}

/// What the survey of the store said of its filesystem.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Surveyed {
    /// The filesystem (`zfs`, `ext4`, ...).
    pub filesystem: String,
    /// Where its inodes' metadata lives, described.
    pub layout: String,
    /// The layout was assumed, not read.
    pub layout_assumed: bool,
    /// Where the model finds the filesystem's blocks, as the survey read it (the survey
    /// file's header: ext4's geometry, ZFS's sector and allocated bytes).
    #[serde(default)]
    pub placement: Option<crate::model::place::Placement>,
}

/// The ZFS testbed's settings and the commands that applied them.
#[derive(Clone, Debug, Serialize)]
pub struct ZfsReport {
    /// The settings.
    pub settings: ZfsSettings,
    /// zfs-fuse's command line.
    pub daemon_args: Vec<String>,
    /// `zpool create`'s arguments.
    pub create_args: Vec<String>,
}

/// The strategies of `runs` by `f`, smallest first.
pub(super) fn rank(runs: &[RunResult], f: &dyn Fn(&RunResult) -> f64) -> Vec<String> {
    let mut v: Vec<&RunResult> = runs.iter().collect();
    v.sort_by(|a, b| f(a).total_cmp(&f(b)));
    v.iter().map(|r| r.strategy.clone()).collect()
}

/// Measured times closer than this ratio are a tie (the same strategy measured twice differs
/// by a few percent).
pub const TIE: f64 = 1.10;

/// Whether the predictions order every two strategies' phase 1 as the measurements do,
/// where the measurements tell them apart (more than [`TIE`] apart).
pub fn ranking_agrees(runs: &[RunResult]) -> bool {
    ranking_agrees_by(runs, |p| p.predicted_s)
}

/// [`ranking_agrees`] for the predictions `predicted` takes from a phase.
pub(super) fn ranking_agrees_by(
    runs: &[RunResult],
    predicted: impl Fn(&PhaseResult) -> f64,
) -> bool {
    let t = |r: &RunResult| (r.phases[0].measured_s, predicted(&r.phases[0]));
    runs.iter().enumerate().all(|(i, a)| {
        runs[i + 1..].iter().all(|b| {
            let ((ma, pa), (mb, pb)) = (t(a), t(b));
            let (lo, hi) = (ma.min(mb), ma.max(mb));
            hi <= lo * TIE || (ma < mb) == (pa < pb)
        })
    })
}

/// The report as a table for people.
pub fn table(r: &Report) -> String {
    let repeated = r.options.repeat > 1;
    let mut head = vec![
        "strategy",
        "phase",
        if repeated {
            "measured (median)"
        } else {
            "measured"
        },
        "predicted",
        "pred/meas",
        "device reads",
        "predicted reads",
        "pred/meas",
        "re-reads",
    ];
    if repeated {
        head.push("runs: fastest-slowest");
    }
    if r.calibrated.is_some() {
        head.extend(["calibrated", "cal/meas", "cal reads/meas"]);
    }
    let mut t = crate::table::Table::new(head);
    let ratio = |a: f64, b: f64| {
        if a > 0.0 && b > 0.0 {
            format!("{:.2}", b / a)
        } else {
            "-".into()
        }
    };
    for run in &r.runs {
        for (i, p) in run.phases.iter().enumerate() {
            let mut row = vec![
                run.strategy.clone(),
                (i + 1).to_string(),
                format!("{:.1} s", p.measured_s),
                format!("{:.1} s", p.predicted_s),
                ratio(p.measured_s, p.predicted_s),
                crate::units::thousands(p.device_reads),
                crate::units::thousands(p.predicted_reads),
                ratio(p.device_reads as f64, p.predicted_reads as f64),
                crate::units::thousands(p.device_rereads),
            ];
            if repeated {
                row.push(format!("{:.1}-{:.1} s", p.measured_min_s, p.measured_max_s));
            }
            if r.calibrated.is_some() {
                row.extend([
                    format!("{:.1} s", p.calibrated_s),
                    ratio(p.measured_s, p.calibrated_s),
                    ratio(p.device_reads as f64, p.calibrated_reads as f64),
                ]);
            }
            t.row(row);
        }
    }
    let agrees = |yes: bool| {
        if yes {
            "the same ranking, ties within 10% aside"
        } else {
            "the rankings differ"
        }
    };
    let calibrated = match &r.calibrated {
        Some(c) => format!(
            "                       calibrated on {}'s log: {}  ({}; fitted cache {}, io_ns {}: \
             the testbed has {} and {})\n",
            c.on,
            c.ranking.join(", "),
            agrees(c.ranking_agrees),
            crate::units::human_bytes(c.cache_bytes),
            crate::units::duration_ns(c.io_ns),
            crate::units::human_bytes(r.options.memory_bytes),
            crate::units::duration_ns(r.host_io_ns),
        ),
        None => String::new(),
    };
    let mut named = String::new();
    if r.runs
        .iter()
        .any(|run| run.phases.iter().any(|p| !p.by_kind.is_empty()))
    {
        named.push_str(
            "\ndevice requests by what they touched (reads / writes; OUT/blocks.map, \
             chunkscope trace device --zfs-blocks):\n",
        );
        for run in &r.runs {
            for (i, p) in run.phases.iter().enumerate() {
                let parts: Vec<String> = p
                    .by_kind
                    .iter()
                    .filter(|k| k.reads + k.writes > 0)
                    .map(|k| {
                        format!(
                            "{} {}/{}",
                            k.kind,
                            crate::units::thousands(k.reads),
                            crate::units::thousands(k.writes)
                        )
                    })
                    .collect();
                named.push_str(&format!(
                    "  {} {}: {}\n",
                    run.strategy,
                    i + 1,
                    parts.join(", ")
                ));
            }
        }
    }
    format!(
        "{}{named}\nphase 1 fastest first, measured:  {}\n                       predicted: {}  ({})\n{calibrated}{}\n",
        t.text(),
        r.measured_ranking.join(", "),
        r.predicted_ranking.join(", "),
        agrees(r.ranking_agrees),
        r.notes.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, measured_s: f64, predicted_s: f64) -> RunResult {
        let phase = PhaseResult {
            measured_s,
            predicted_s,
            ..PhaseResult::default()
        };
        RunResult {
            strategy: name.into(),
            phases: [phase, PhaseResult::default()],
            trace: PathBuf::new(),
            task_log: PathBuf::new(),
            repeats: Vec::new(),
        }
    }

    /// Issue 64: with `--repeat`, the medians of every run (the first's included), with the
    /// fastest and slowest beside; one run is its own median.
    #[test]
    fn repeats_report_their_medians_and_extremes() {
        let mut one = run("lru", 12.0, 10.0);
        one.phases[0].device_reads = 100;
        one.take_medians();
        assert_eq!(one.phases[0].measured_s, 12.0);
        assert_eq!(
            (one.phases[0].measured_min_s, one.phases[0].measured_max_s),
            (12.0, 12.0)
        );
        assert!(one.repeats.is_empty());
        let mut r = run("lru", 30.0, 10.0);
        r.phases[0].device_reads = 300;
        for (secs, reads) in [(10.0, 100), (20.0, 250), (12.0, 120)] {
            let mut other = run("lru", secs, 0.0);
            other.phases[0].device_reads = reads;
            r.repeats.push(other.measured());
        }
        r.take_medians();
        assert_eq!(r.repeats.len(), 4);
        assert_eq!(r.repeats[0].phases[0].0, 30.0, "the first run first");
        let p = &r.phases[0];
        assert_eq!(
            (p.measured_s, p.measured_min_s, p.measured_max_s),
            (12.0, 10.0, 30.0)
        );
        assert_eq!(p.device_reads, 120);
        assert_eq!(p.predicted_s, 10.0, "the prediction stays");
    }

    #[test]
    fn rankings_agree_where_the_measurements_tell_strategies_apart() {
        // naive and lru within 10% of each other: either order agrees.
        let tied = [
            run("naive", 19.4, 18.5),
            run("lru", 19.0, 18.6),
            run("batched", 4.5, 4.3),
        ];
        assert!(ranking_agrees(&tied));
        let swapped = [run("naive", 19.4, 4.0), run("batched", 4.5, 18.0)];
        assert!(!ranking_agrees(&swapped));
        let apart = [run("naive", 25.0, 18.5), run("lru", 19.0, 18.6)];
        assert!(!ranking_agrees(&apart), "25 s against 19 s is no tie");
    }
}
