//! `chunkscope fidelity`

use anyhow::Result;
use clap::Args;

use super::Outcome;
use crate::sim::fidelity::{self, Figure, Kind, Scale, SweepPoint};
use crate::table::Table;
use crate::units::{duration_ns, thousands};

/// Every figure of the pbs-devel threads (000, 001, 003) next to the simulator's on the
/// presets of their stores and pools: the ratio, and whether it is within 2x.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope fidelity\n  \
    chunkscope fidelity --quick --json=fidelity.json\n  \
    chunkscope fidelity --sweep --quick --json=sweep.json\n\n\
    Thread 000's store runs whole, datastores B and A as 1/32 slices (an N-th of the groups\n\
    and chunk directories, the metadata cache divided alike; counts and times multiplied\n\
    back by N): about 3 minutes on 2 cores. --quick runs 1/32 of thread 000's and 1/256 of\n\
    the others' in under a minute, a smoke test only: at 1/256 datastore A's cache is\n\
    64 MiB and its figures run 2-8 times off the report's. A fitted figure is one a model\n\
    parameter was fitted on; it is shown, not counted.\n\n\
    --sweep runs datastore A's phase 1 (1/32; --quick: 1/256) on B's pool with A's two\n\
    unknowns swept, the metadata cache (512 MiB to 64 GiB) and the backups' share of the\n\
    disks' time (0 to 90%), and shows which of the threads' figures each point reaches:\n\
    about 6 minutes on 2 cores (--quick: under 2 minutes, a smoke test).")]
pub struct FidelityArgs {
    /// The finest slices (under a minute): a smoke test, not the report (see below).
    #[arg(long)]
    quick: bool,
    /// Instead of the report, datastore A's figures over a sweep of its unknown pool
    /// parameters (cache size, backup load on the disks): which figures pull against each
    /// other.
    #[arg(long)]
    sweep: bool,
    /// The figures as JSON: `--json` on standard output (instead of the table),
    /// `--json=FILE` into FILE (beside the table).
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    json: Option<std::path::PathBuf>,
}

fn value(f: &Figure, v: f64) -> String {
    match f.unit {
        "s" => duration_ns((v * 1e9).max(0.0) as u64),
        "" => format!("{v:.2}"),
        "chunks/s" if v < 100.0 => format!("{v:.1} chunks/s"),
        unit => format!("{} {unit}", thousands(v.round().max(0.0) as u64)),
    }
}

/// The report as a table (Markdown-compatible pipes are left to BENCHMARKS.md).
pub fn table(figures: &[Figure]) -> String {
    let mut t = Table::new([
        "thread",
        "figure",
        "thread's",
        "model",
        "ratio",
        "within 2x",
    ]);
    for f in figures {
        let within = match f.kind {
            Kind::Fitted => "fitted".to_string(),
            Kind::Estimate if f.within_2x() => "yes (an estimate)".to_string(),
            Kind::Estimate => "no (an estimate)".to_string(),
            Kind::Predicted if f.within_2x() => "yes".to_string(),
            Kind::Predicted => "no".to_string(),
        };
        t.row(vec![
            f.thread.to_string(),
            f.what.to_string(),
            value(f, f.measured),
            value(f, f.model),
            format!("{:.2}", f.ratio()),
            within,
        ]);
    }
    t.text()
}

/// The sweep as a table: one row a point, each figure with its ratio to the thread's.
pub fn sweep_table(points: &[SweepPoint]) -> String {
    let mut t = Table::new([
        "cache",
        "backups' disk share",
        "lru chunks/s",
        "v1 pass",
        "v1 phase 1",
        "v2 phase 1",
        "v2 / v1",
        "unpatched phase 1",
        "lru / v1, phase 1",
        "within 2x (of 5)",
    ]);
    for p in points {
        let f = p.figures();
        let cell = |i: usize, text: String| format!("{text} ({:.2})", f[i].2 / f[i].1);
        // Hours throughout: the points span minutes to years, and a column reads at a glance.
        let time = |s: f64| format!("{:.1} h", s / 3600.0);
        t.row(vec![
            crate::units::human_bytes(p.cache_bytes),
            format!("{:.0}%", p.backup_disk_share * 100.0),
            cell(0, format!("{:.1}", p.lru_chunks_per_s)),
            cell(1, time(p.v1_pass_s)),
            cell(2, time(p.v1_phase1_s)),
            cell(3, time(p.v2_phase1_s)),
            cell(4, format!("{:.2}", f[4].2)),
            time(p.unpatched_phase1_s),
            format!("{:.2}", p.lru_over_v1()),
            p.within_2x().to_string(),
        ]);
    }
    t.text()
}

fn run_sweep(args: &FidelityArgs) -> Result<Outcome> {
    let of = if args.quick {
        Scale::QUICK.datastore_a
    } else {
        Scale::REPORT.datastore_a
    };
    let points = fidelity::sweep(
        of,
        &fidelity::SWEEP_CACHES,
        &fidelity::SWEEP_DISK_SHARES,
        &|what| tracing::info!("simulating {what}"),
    )?;
    if let Some(dest) = &args.json {
        super::write_json(dest, &points)?;
        if super::to_stdout(&args.json) {
            return Ok(Outcome::Ok);
        }
    }
    print!("{}", sweep_table(&points));
    let best = points.iter().map(SweepPoint::within_2x).max().unwrap_or(0);
    let ratios = points.iter().map(SweepPoint::lru_over_v1);
    let (lo, hi) = ratios.fold((f64::MAX, 0.0f64), |(lo, hi), r| (lo.min(r), hi.max(r)));
    println!(
        "\n(in parentheses: model over thread; threads 001/003: 39.2 chunks/s, ~1 h, 53.5 h, \
         59.3 h, 1.09)\nmost figures within 2x at one point: {best} of 5\n\
         lru's phase 1 over v1's: {lo:.2} to {hi:.2} over the sweep; the threads': {:.1}",
        fidelity::THREADS_LRU_OVER_V1
    );
    Ok(Outcome::Ok)
}

pub fn run(args: FidelityArgs) -> Result<Outcome> {
    if args.sweep {
        return run_sweep(&args);
    }
    let scale = if args.quick {
        Scale::QUICK
    } else {
        Scale::REPORT
    };
    let figures = fidelity::report(scale, &mut |what| tracing::info!("simulating {what}"))?;
    if let Some(dest) = &args.json {
        super::write_json(dest, &figures)?;
        if super::to_stdout(&args.json) {
            return Ok(Outcome::Ok);
        }
    }
    print!("{}", table(&figures));
    let predicted: Vec<&Figure> = figures
        .iter()
        .filter(|f| f.kind == Kind::Predicted)
        .collect();
    let within = predicted.iter().filter(|f| f.within_2x()).count();
    println!(
        "\n{within} of {} predicted figures within 2x; fitted: {}",
        predicted.len(),
        figures
            .iter()
            .filter(|f| f.kind == Kind::Fitted)
            .map(|f| f.id)
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(Outcome::Ok)
}
