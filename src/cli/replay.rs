//! `chunkscope replay`

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::model_args::ModelArgs;
use super::Outcome;
use crate::model::ModelParams;
use crate::trace::TraceReader;
use crate::units::duration_ns;

/// Run a recorded trace through a cost model and print the modelled totals.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope replay gc.trace                # the model it was recorded with\n  \
    chunkscope replay gc.trace --cache 4GiB   # that model with a 4 GiB cache\n  \
    chunkscope replay gc.trace --model zfs-hdd --cache 4GiB\n  \
    chunkscope replay gc.trace --model zfs-hdd --print-model > my-pool.json\n  \
    chunkscope replay gc.trace --model my-pool.json --json\n\n\
    Asks \"what if\" without re-running the GC: a bigger cache, SSDs, another layout. Replaying\n\
    with the model the trace was recorded with recomputes every request's recorded cost and\n\
    reports any difference (exit 1). Markers (chunkscope ctl MNT mark, and those chunkscope\n\
    gc writes on a mount unless --no-markers) split the modelled time into phases.")]
pub struct ReplayArgs {
    /// A trace written by `chunkscope mount --trace`.
    trace: PathBuf,
    #[command(flatten)]
    model: ModelArgs,
    /// The report as JSON: `--json` on standard output (instead of the text),
    /// `--json=FILE` into FILE (beside the text).
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    json: Option<PathBuf>,
    /// Print the model's parameters as JSON (a model file to edit) and exit.
    #[arg(long)]
    print_model: bool,
    /// Place inodes by the creation ranking in FILE (default for a trace recorded with
    /// --layout-order creation: TRACE.order).
    #[arg(long, value_name = "FILE")]
    order: Option<PathBuf>,
}

pub fn run(args: ReplayArgs) -> Result<Outcome> {
    let params = match &args.model.model {
        Some(_) => args.model.params()?.expect("--model given"),
        // The model the trace was recorded with, and --cache on it if given.
        None => {
            let r = TraceReader::open(&args.trace)?;
            let Some(v) = r.meta().model() else {
                bail!(
                    "{} was recorded without a model: choose one with --model ({}, or a JSON \
                     file)",
                    args.trace.display(),
                    crate::model::PRESETS.join(", ")
                );
            };
            let mut p = serde_json::from_value::<ModelParams>(v.clone()).with_context(|| {
                format!(
                    "{}: the recorded model is not readable",
                    args.trace.display()
                )
            })?;
            args.model.apply_cache(&mut p)?;
            p
        }
    };
    if args.print_model {
        println!("{}", serde_json::to_string_pretty(&params)?);
        return Ok(Outcome::Ok);
    }
    let (rep, truncated) = crate::replay::replay(&args.trace, params, args.order.as_deref())?;
    if let Some(bytes) = truncated {
        tracing::warn!(
            "{}: its end is torn ({bytes} bytes ignored: a last record or block cut short)",
            args.trace.display()
        );
    }
    if rep.missing > 0 {
        tracing::warn!(
            "{}: {} request numbers are missing (a cut trace); totals cover the rest",
            args.trace.display(),
            rep.missing
        );
    }
    if let Some(dest) = &args.json {
        super::write_json(dest, &rep)?;
    }
    if !super::to_stdout(&args.json) {
        let t = &rep.totals;
        let s = duration_ns;
        println!("model            {}", rep.model.name);
        let n = crate::units::thousands;
        println!(
            "requests         {} ({} charged)",
            n(rep.requests),
            n(t.ops)
        );
        println!("modelled time    {}", s(t.ns));
        println!(
            "block reads      {} misses, {} hits ({:.1}% hit), {} prefetched by {} listings",
            n(t.misses),
            n(t.hits),
            100.0 * t.hits as f64 / (t.hits + t.misses).max(1) as f64,
            n(t.prefetched),
            n(rep.listings)
        );
        println!(
            "write-back       {} blocks dirtied, {} written in {} transaction groups ({}), throttled {}",
            n(t.dirtied),
            n(t.blocks_written),
            n(t.txg_syncs),
            s(t.writeback_ns),
            s(t.throttle_ns)
        );
        let mut prev = (0u64, 0u64);
        for m in &rep.markers {
            println!(
                "marker @{:<10} {:>12}  +{:<14} {}",
                n(m.seq),
                s(m.modeled_ns),
                s(m.modeled_ns - prev.0),
                m.text
            );
            prev = (m.modeled_ns, m.misses);
        }
        if rep.same_model {
            println!(
                "recorded costs   {}",
                if rep.mismatches == 0 {
                    "every request's recorded cost recomputed exactly".to_string()
                } else {
                    format!(
                        "{} requests differ (first at seq {})",
                        rep.mismatches,
                        rep.first_mismatch_seq.unwrap_or(0)
                    )
                }
            );
        }
    }
    if rep.same_model && rep.mismatches > 0 {
        return Ok(Outcome::ProblemsFound);
    }
    Ok(Outcome::Ok)
}
