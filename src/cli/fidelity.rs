//! `chunkscope fidelity`

use anyhow::Result;
use clap::Args;

use super::Outcome;
use crate::sim::fidelity::{self, Figure, Kind, Scale};
use crate::table::Table;
use crate::units::{duration_ns, thousands};

/// Every figure of the pbs-devel threads (000, 001, 003) next to the simulator's on the
/// presets of their stores and pools: the ratio, and whether it is within 2x.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope fidelity\n  \
    chunkscope fidelity --quick --json=fidelity.json\n\n\
    Thread 000's store runs whole, datastores B and A as 1/32 slices (an N-th of the groups\n\
    and chunk directories, the metadata cache divided alike; counts and times multiplied\n\
    back by N): about 3 minutes on 2 cores. --quick runs 1/32 of thread 000's and 1/256 of\n\
    the others' in under a minute, a smoke test only: at 1/256 datastore A's cache is\n\
    64 MiB and its figures run 2-8 times off the report's. A fitted figure is one a model\n\
    parameter was fitted on; it is shown, not counted.")]
pub struct FidelityArgs {
    /// The finest slices (under a minute): a smoke test, not the report (see below).
    #[arg(long)]
    quick: bool,
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

pub fn run(args: FidelityArgs) -> Result<Outcome> {
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
