//! `chunkscope analyze`

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::Outcome;
use crate::analysis::{analyze, Locality, Options, Phase, PBS_CACHE_DEFAULT, PBS_CACHE_MAX};
use crate::units::{duration_ns, human_bytes};

/// Access order and metadata locality of a trace, per phase (cut at its markers).
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope analyze gc.trace\n  \
    chunkscope analyze --json gc.trace > gc-analysis.json\n  \
    chunkscope analyze --inodes-per-block 16 --block-size 4KiB gc.trace   (ext4 inode tables)\n\n\
    Reads the trace once, in request order, without holding it in memory. Phases come from\n\
    markers (chunkscope gc on a mount writes 'phase1 start strategy=...' and '... end').")]
pub struct AnalyzeArgs {
    /// A trace written by `chunkscope mount --trace`.
    trace: PathBuf,
    /// Print the whole report as JSON.
    #[arg(long)]
    json: bool,
    /// Inodes per metadata block (ZFS: 32 dnodes per 16 KiB block).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    inodes_per_block: u64,
    /// Size of a metadata block, for cache sizes in bytes.
    #[arg(long, default_value = "16KiB", value_name = "SIZE")]
    block_size: String,
    /// Transaction-group length for the write-back figures (modelled time if the trace has it).
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    txg: String,
}

fn locality(name: &str, l: &Locality) {
    if l.count == 0 {
        return;
    }
    println!(
        "  {name:<8} {} ops on {} inodes in {} blocks (ideal {}); |Δino| p10/p50/p90 {}/{}/{}; \
         same block as previous {:.1}%; directory switches {:.0} per 1000",
        l.count,
        l.distinct_inodes,
        l.distinct_blocks,
        l.ideal_blocks,
        l.gap_p10,
        l.gap_p50,
        l.gap_p90,
        100.0 * l.same_block,
        l.dir_switches_per_1000
    );
}

fn phase(p: &Phase, block_bytes: u64) {
    println!();
    println!(
        "== {} == {} records, real {}, modelled {}",
        p.name,
        p.records,
        duration_ns(p.real_ns),
        duration_ns(p.modeled_ns)
    );
    println!(
        "  {:<12} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11}  errors",
        "op", "count", "per s", "real p50", "real p99", "real max", "model avg", "model p99"
    );
    for o in &p.ops {
        let errors: Vec<String> = o.errors.iter().map(|(e, n)| format!("{e}:{n}")).collect();
        println!(
            "  {:<12} {:>9} {:>10.0} {:>10} {:>10} {:>10} {:>10} {:>11}  {}",
            o.op,
            o.count,
            o.rate,
            duration_ns(o.real.p50),
            duration_ns(o.real.p99),
            duration_ns(o.real.max),
            duration_ns(o.modeled.avg as u64),
            duration_ns(o.modeled.p99),
            errors.join(" ")
        );
    }
    locality("touches", &p.touches);
    locality("lookups", &p.lookups);
    let m = &p.digest_mrc;
    if m.references > 0 {
        let at = |c: u64| {
            m.points
                .iter()
                .find(|x| x.capacity == c)
                .map_or(0.0, |x| 100.0 * x.hit_ratio)
        };
        println!(
            "  digest cache (LRU): {} lookups of {} digests; hit ratio at 1Ki {:.1}%, 64Ki \
             {:.1}%, PBS default 1Mi {:.1}%, max 8Mi {:.1}%",
            m.references,
            m.distinct,
            at(1 << 10),
            at(1 << 16),
            at(PBS_CACHE_DEFAULT),
            at(PBS_CACHE_MAX)
        );
    }
    let b = &p.block_mrc;
    if b.references > 0 {
        let pts: Vec<String> = b
            .points
            .iter()
            .filter(|x| x.capacity >= 64 && x.capacity.is_power_of_two())
            .take_while(|x| x.capacity <= b.distinct.next_power_of_two().max(64))
            .step_by(2)
            .map(|x| {
                format!(
                    "{} {:.0}%",
                    human_bytes(x.capacity * block_bytes),
                    100.0 * x.hit_ratio
                )
            })
            .collect();
        println!(
            "  metadata blocks (LRU): {} accesses to {} blocks; hit ratio by cache size: {}",
            b.references,
            b.distinct,
            pts.join(", ")
        );
    }
    let w = &p.writeback;
    if w.block_writes > 0 {
        println!(
            "  write-back ({} clock): {} transaction groups, {} block writes (max {} in one), \
             {} in inode order: amplification {:.2}",
            w.clock,
            w.txgs,
            w.block_writes,
            w.max_per_txg,
            w.inode_order_block_writes,
            w.amplification
        );
    }
    let l = &p.listings;
    if l.count > 0 {
        println!(
            "  listings: {} with {} entries; readdir order ascending in inode number for {:.1}% \
             of consecutive entries; {:.1} entries and {:.1} blocks per directory; {} of {} \
             directories with 2+ entries share no block; median gap within a directory {}",
            l.count,
            l.entries,
            100.0 * l.ascending_pairs,
            l.mean_entries_per_dir,
            l.mean_blocks_per_dir,
            l.dirs_without_shared_blocks,
            l.dirs_with_2_or_more,
            l.median_in_dir_gap
        );
    }
}

pub fn run(args: AnalyzeArgs) -> Result<Outcome> {
    let block_bytes = parse_size::parse_size(&args.block_size).map_err(|e| {
        anyhow::anyhow!(
            "--block-size {}: {e} (expected e.g. 16KiB)",
            args.block_size
        )
    })?;
    let txg_ns = crate::units::parse_duration(&args.txg)
        .map_err(|e| anyhow::anyhow!("--txg {}: {e}", args.txg))?;
    if txg_ns == 0 {
        anyhow::bail!("--txg must be longer than 0");
    }
    let o = Options {
        inodes_per_block: args.inodes_per_block,
        block_bytes,
        txg_ns,
    };
    let report = analyze(&args.trace, o)?;
    if let Some(bytes) = report.truncated_bytes {
        eprintln!(
            "chunkscope: warning: {}: the last record is incomplete ({bytes} bytes ignored)",
            args.trace.display()
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(Outcome::Ok);
    }
    println!(
        "trace {} (store {}), {} inodes per {} block",
        report.trace,
        report.store,
        report.inodes_per_block,
        human_bytes(report.block_bytes)
    );
    for p in &report.phases {
        phase(p, report.block_bytes);
    }
    Ok(Outcome::Ok)
}
