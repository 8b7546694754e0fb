//! `chunkscope demo`

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use super::Outcome;
use crate::demo::{self, report, DemoOptions};
use crate::gc::Strategy;
use crate::model::ModelParams;

/// Run the whole experiment: generate a store, run every GC strategy through a shadow mount
/// with a slow-metadata model, and compare what each did to the metadata.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope demo\n  \
    chunkscope demo --preset tiny --out /tmp/demo\n  \
    chunkscope demo --preset tiny --strategies lru,batched --dense-slice 0\n\n\
    The store is generated on a tmpfs of its own (the same inode numbers every run) and\n\
    removed afterwards; --keep keeps it, in /dev/shm, and the mounts' traces in --out.\n\
    Each strategy gets a fresh shadow mount (the store is never changed) and a cold cache;\n\
    the model accounts the cost of every request without waiting for it. Writes report.md,\n\
    report.json, report.html, SVG plots and logs into --out. Needs root and\n\
    /dev/fuse; without them the same experiment runs on the simulated store, saying why.\n\
    Ctrl-C unmounts and cleans up.")]
pub struct DemoArgs {
    /// Store to generate: tiny (about 30 s on 2 cores), small (about 53k chunks, about 65 s;
    /// the default).
    #[arg(long, default_value = "small", value_parser = ["tiny", "small"])]
    preset: String,
    /// Generator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value = "zfs-hdd", value_name = "PRESET|FILE", help = crate::model::model_help())]
    model: String,
    /// Strategies to run, in this order (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = Strategy::all_names()
    )]
    strategies: Vec<Strategy>,
    /// Report directory.
    #[arg(long, default_value = "chunkscope-demo", value_name = "DIR")]
    out: PathBuf,
    /// Keep the generated store (its path is printed) and the mounts' traces (in --out).
    #[arg(long)]
    keep: bool,
    /// Run on the simulated store even where FUSE works.
    #[arg(long)]
    simulate: bool,
    /// After the runs on the demo's store, simulate every strategy on this slice of
    /// datastore B (an N-th of its groups and chunk directories, N a power of two), which has
    /// the threads' density of ~160 referenced chunks a directory, on its pool's model
    /// (zfs-raidz-hdd); 0 leaves it out.
    #[arg(long, default_value_t = crate::demo::DENSE_SLICE, value_name = "N")]
    dense_slice: u32,
}

pub fn run(args: DemoArgs) -> Result<Outcome> {
    let model = ModelParams::load(&args.model).with_context(|| {
        format!(
            "--model {} (presets: {}, or a JSON file)",
            args.model,
            crate::model::PRESETS.join(", ")
        )
    })?;
    let o = DemoOptions {
        preset: args.preset,
        seed: args.seed,
        model,
        strategies: args.strategies,
        out: std::path::absolute(&args.out)
            .with_context(|| format!("--out {}", args.out.display()))?,
        keep: args.keep,
        exe: std::env::current_exe().context("finding this program to start the mount")?,
        simulate: args.simulate,
        progress: super::stderr_is_terminal(),
        dense_slice: args.dense_slice,
    };
    if args.dense_slice > 0 {
        crate::sim::Slice::new(args.dense_slice).map_err(|e| {
            anyhow::anyhow!("{}", e.to_string().replace("--slice", "--dense-slice"))
        })?;
    }
    let r = demo::run(&o, &mut |line| tracing::info!("{line}"))?;
    let page = report::write(&o.out, &r)?;
    println!();
    println!("{}.", report::headline(&r));
    println!();
    print!("{}", report::table(&r).text());
    println!();
    if let Some(d) = &r.dense {
        println!("{}.", report::dense_headline(d));
        println!();
        print!("{}", report::dense_table(d).text());
        println!();
    }
    for f in &r.findings {
        println!("* {f}");
    }
    println!();
    if let Some(s) = &r.store {
        println!("store kept:  {s}");
    }
    if let Some(t) = &r.traces {
        let size = crate::units::human_bytes(t.bytes);
        if t.kept {
            println!("traces kept: {} ({size})", t.dir);
        } else {
            println!("traces:      {size}, removed once analysed (--keep keeps them)");
        }
    }
    println!("report:      {}", page.display());
    println!("took {:.0} s", r.wall_seconds);
    Ok(Outcome::Ok)
}
