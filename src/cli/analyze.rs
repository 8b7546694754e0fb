//! `chunkscope analyze`

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;

use super::Outcome;
use crate::analysis::plot::Labelled;
use crate::analysis::{
    analyze, pbs_digest_cache_bytes, Locality, Options, Phase, Report, S3Prices, PBS_CACHE_DEFAULT,
    PBS_CACHE_MAX,
};
use crate::table::Table;
use crate::units::thousands;
use crate::units::{duration_ns, human_bytes};

/// Access order and metadata locality of traces, per phase (cut at their markers).
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope analyze gc.trace\n  \
    chunkscope analyze naive.trace lru.trace inode.trace   # side by side\n  \
    chunkscope analyze --svg plots/ --csv=tables/ gc.trace\n  \
    chunkscope analyze --parquet=tables/ gc.trace   # for DuckDB\n  \
    chunkscope analyze --json gc.trace > gc-analysis.json\n  \
    chunkscope analyze --shards 1% huge.trace   # sampled miss-ratio curves\n  \
    # ext4's inode tables: 16 inodes of 256 bytes in a 4 KiB block\n  \
    chunkscope analyze --inodes-per-block 16 --block-size 4KiB gc.trace\n\n\
    Reads each trace once, in request order, without holding it in memory. Phases come from\n\
    markers (chunkscope gc on a mount writes 'phase1 start strategy=...' and '... end'); a trace\n\
    with several runs gives one row per run in the summary table. A trace without markers (a\n\
    real PBS's GC) is read twice: the phases are inferred from its requests first.")]
pub struct AnalyzeArgs {
    /// Traces written by `chunkscope mount --trace`; several are compared in one table.
    #[arg(required = true, value_name = "TRACE")]
    traces: Vec<PathBuf>,
    /// The whole report as JSON (an array when several traces are given): `--json` on
    /// standard output (instead of the tables), `--json=FILE` into FILE (beside them).
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    json: Option<PathBuf>,
    /// The tables as CSV: `--csv=DIR` writes phases, ops, mrc, gaps, txg and what_if.csv into
    /// DIR (beside the text); `--csv` or `--csv=-` writes the phases table (one row per phase)
    /// on standard output instead of the text.
    #[arg(long, value_name = "DIR", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    csv: Option<PathBuf>,
    /// The same tables as Parquet files (typed columns, zstd) in DIR, for DuckDB, pandas and
    /// Spark.
    #[cfg(feature = "parquet")]
    #[arg(long, value_name = "DIR", require_equals = true)]
    parquet: Option<PathBuf>,
    /// Write SVG plots (access pattern, miss-ratio curves, gaps, latency, write-back) here.
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
    /// Only the summary table (one row per phase), not each phase's details.
    #[arg(long, short)]
    summary: bool,
    /// Sample the miss-ratio curves with SHARDS at this rate (e.g. 1% or 0.01); exact when
    /// not given. Distances below ~64/rate stay exact.
    #[arg(long, value_name = "RATE")]
    shards: Option<String>,
    /// Skip the miss-ratio curves (the costliest part of the pass; see also --shards).
    #[arg(long, conflicts_with = "shards")]
    no_mrc: bool,
    /// Inodes per metadata block (ZFS: 32 dnodes per 16 KiB block).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    inodes_per_block: u64,
    /// Size of a metadata block, for cache sizes in bytes.
    #[arg(long, default_value = "16KiB", value_name = "SIZE")]
    block_size: String,
    /// Transaction-group length for the write-back figures (modelled time if the trace has it).
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    txg: String,
    /// What your S3 provider charges per 1,000 requests and per GB-month stored, for what
    /// each phase's S3 requests cost and what storing the bytes it listed and deleted costs a
    /// month: e.g. 'list=0.005,put=0.005,get=0.0004,head=0.0004,delete=0,storage=0.023'
    /// (kinds: list, delete, put, get, head, other, storage; a GB is 2^30 bytes; one left out
    /// costs nothing; no price is built in).
    #[arg(long, value_name = "PRICES")]
    s3_prices: Option<String>,
}

fn locality(name: &str, l: &Locality) {
    if l.count == 0 {
        return;
    }
    println!(
        "  {name:<8} {} ops on {} inodes in {} blocks (ideal {}); |Δino| p10/p50/p90 {}/{}/{}; \
         same block as previous {:.1}%; directory switches {} per 1,000",
        thousands(l.count),
        thousands(l.distinct_inodes),
        thousands(l.distinct_blocks),
        thousands(l.ideal_blocks),
        thousands(l.gap_p10),
        thousands(l.gap_p50),
        thousands(l.gap_p90),
        100.0 * l.same_block,
        thousands(l.dir_switches_per_1000.round() as u64)
    );
}

fn phase(p: &Phase, block_bytes: u64) {
    println!();
    println!(
        "== {} == {} records, real {}, modelled {}",
        p.name,
        thousands(p.records),
        duration_ns(p.real_ns),
        duration_ns(p.modeled_ns)
    );
    ops_table(p);
    locality("touches", &p.touches);
    locality("lookups", &p.lookups);
    digest_cache(p);
    block_cache(p, block_bytes);
    writeback(p, block_bytes);
    listings(p);
    s3_requests(p);
}

/// What the phase asked of an S3 bucket.
fn s3_requests(p: &Phase) {
    let Some(s) = &p.s3 else { return };
    let per_batch = if s.delete_requests > 0 {
        format!(
            ", {:.1} a request",
            s.keys_deleted as f64 / s.delete_requests as f64
        )
    } else {
        String::new()
    };
    let cost = s
        .cost
        .map(|c| format!("; cost {c:.6} at --s3-prices"))
        .unwrap_or_default();
    println!(
        "  s3: {} requests, {} waiting on the server: {} listing pages ({} keys, {}), {} \
         deletes ({} keys{per_batch}, {}), {} puts ({}), {} gets ({}), {} heads, {} other; {} \
         failed, {} injected{cost}",
        thousands(s.requests()),
        duration_ns(s.busy_ns),
        thousands(s.list_pages),
        thousands(s.keys_listed),
        human_bytes(s.bytes_listed),
        thousands(s.delete_requests),
        thousands(s.keys_deleted),
        human_bytes(s.bytes_deleted),
        thousands(s.puts),
        human_bytes(s.put_bytes),
        thousands(s.gets),
        human_bytes(s.get_bytes),
        thousands(s.heads),
        thousands(s.other),
        thousands(s.failed),
        thousands(s.injected),
    );
    if let (Some(stored), Some(saved)) = (s.storage_cost, s.storage_saved) {
        if s.bytes_listed + s.bytes_deleted > 0 {
            let gb = |b: u64| b as f64 / crate::analysis::BILLED_GB;
            println!(
                "  s3 storage: the {:.6} GB listed cost {stored:.6} a month at --s3-prices, the \
                 {:.6} GB deleted {saved:.6} a month",
                gb(s.bytes_listed),
                gb(s.bytes_deleted),
            );
        }
    }
}

/// Each operation's count, rate, latencies and errors.
fn ops_table(p: &Phase) {
    println!(
        "  {:<12} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11}  errors",
        "op", "count", "per s", "real p50", "real p99", "real max", "model avg", "model p99"
    );
    for o in &p.ops {
        let errors: Vec<String> = o.errors.iter().map(|(e, n)| format!("{e}:{n}")).collect();
        println!(
            "  {:<12} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11}  {}",
            o.op,
            thousands(o.count),
            thousands(o.rate.round() as u64),
            duration_ns(o.real.p50),
            duration_ns(o.real.p99),
            duration_ns(o.real.max),
            duration_ns(o.modeled.avg as u64),
            duration_ns(o.modeled.p99),
            errors.join(" ")
        );
    }
}

/// The digest cache's miss-ratio curve at the capacities PBS users set.
fn digest_cache(p: &Phase) {
    let m = &p.digest_mrc;
    if m.references > 0 {
        let at = |c: u64| 100.0 * m.hit_at(c);
        if m.references == m.distinct && m.sample_rate >= 1.0 {
            // Every hit ratio would be 0: say why instead.
            println!(
                "  digest cache (LRU): {} lookups of {} digests, none repeated (a GC with a \
                 digest cache looks up only its misses; its `gc --json` report has the hits); \
                 PBS's cache for them: {} at the default 1Mi, {} at the max 8Mi",
                thousands(m.references),
                thousands(m.distinct),
                human_bytes(pbs_digest_cache_bytes(PBS_CACHE_DEFAULT, m.distinct)),
                human_bytes(pbs_digest_cache_bytes(PBS_CACHE_MAX, m.distinct)),
            );
        } else {
            println!(
                "  digest cache (LRU): {} lookups of {} digests; hit ratio at 1Ki {:.1}%, 64Ki \
                 {:.1}%, PBS default 1Mi {:.1}% ({}), max 8Mi {:.1}% ({}){}",
                thousands(m.references),
                thousands(m.distinct),
                at(1 << 10),
                at(1 << 16),
                at(PBS_CACHE_DEFAULT),
                human_bytes(pbs_digest_cache_bytes(PBS_CACHE_DEFAULT, m.distinct)),
                at(PBS_CACHE_MAX),
                human_bytes(pbs_digest_cache_bytes(PBS_CACHE_MAX, m.distinct)),
                sampled(m.sample_rate)
            );
        }
    }
}

/// The metadata block cache's hit ratio by cache size.
fn block_cache(p: &Phase, block_bytes: u64) {
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
            thousands(b.references),
            thousands(b.distinct),
            pts.join(", ")
        );
    }
}

/// Blocks written per transaction group, and what the touches in inode order would write.
fn writeback(p: &Phase, block_bytes: u64) {
    let w = &p.writeback;
    if w.block_writes > 0 {
        let inode_order = if w.inode_order_block_writes > 0 {
            format!(
                "{} in inode order: amplification {:.2}",
                thousands(w.inode_order_block_writes),
                w.amplification
            )
        } else {
            "no touches to put in inode order".to_string()
        };
        println!(
            "  write-back ({} clock): {} transaction groups, {} block writes (max {} in one), \
             {inode_order}",
            w.clock,
            thousands(w.txgs),
            thousands(w.block_writes),
            thousands(w.max_per_txg),
        );
    }
    if p.touches.count > 1 {
        println!("  what if the same touches came in inode order:");
        for w in &p.what_if {
            // Without the miss-ratio curves (--no-mrc) there is no hit ratio to show.
            let hits = if w.block_mrc.references > 0 {
                format!(
                    ", touched-block hit ratio at {} {:.1}%",
                    human_bytes(1024 * block_bytes),
                    100.0 * w.block_mrc.hit_at(1024)
                )
            } else {
                String::new()
            };
            println!(
                "    {:<10} |Δino| p50 {:>8}, same block {:>5.1}%, block writes {:>8}{hits}",
                w.order,
                thousands(w.touches.gap_p50),
                100.0 * w.touches.same_block,
                thousands(w.block_writes),
            );
        }
    }
}

/// How chunk directories were listed.
fn listings(p: &Phase) {
    let l = &p.listings;
    if l.count > 0 {
        println!(
            "  listings: {} with {} entries; readdir order ascending in inode number for {:.1}% \
             of consecutive entries; {:.1} entries and {:.1} blocks per directory; {} of {} \
             directories with 2+ entries share no block; median gap within a directory {}",
            thousands(l.count),
            thousands(l.entries),
            100.0 * l.ascending_pairs,
            l.mean_entries_per_dir,
            l.mean_blocks_per_dir,
            thousands(l.dirs_without_shared_blocks),
            thousands(l.dirs_with_2_or_more),
            thousands(l.median_in_dir_gap)
        );
    }
}

/// The analysis's options from the command line, checked.
fn options(args: &AnalyzeArgs) -> Result<Options> {
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
    if super::to_stdout(&args.json) && super::to_stdout(&args.csv) {
        anyhow::bail!(
            "--json and --csv both on standard output: give one of them a destination \
             (--json=FILE or --csv=DIR)"
        );
    }
    Ok(Options {
        inodes_per_block: args.inodes_per_block,
        block_bytes,
        txg_ns,
        sample_rate: args
            .shards
            .as_deref()
            .map(|s| super::parse_rate(s, "--shards"))
            .transpose()?
            .unwrap_or(1.0),
        // The access-pattern points only matter for the plots.
        access_points: if args.svg.is_some() { 8_000 } else { 0 },
        mrc: !args.no_mrc,
        s3_prices: args
            .s3_prices
            .as_deref()
            .map(|p| S3Prices::parse(p).map_err(|e| anyhow::anyhow!("--s3-prices {p}: {e}")))
            .transpose()?,
    })
}

/// What the trace at `trace` cannot show, said before its tables: a torn end, requests the
/// kernel answered itself, phases inferred rather than marked.
fn say_what_is_missing(trace: &Path, report: &crate::analysis::Report) {
    if let Some(bytes) = report.truncated_bytes {
        tracing::warn!(
            "{}: its end is torn ({bytes} bytes ignored: a last record or block cut short)",
            trace.display()
        );
    }
    if let Some(c) = report.kernel_cache.filter(|c| c.hides_requests()) {
        tracing::warn!(
            "{}: the mount let the kernel cache names for {} s and \
             attributes for {} s{}: the lookups and stats it answered itself are not in \
             the trace (mount with --entry-ttl 0 --attr-ttl 0 to see them all)",
            trace.display(),
            c.entry_ttl_s,
            c.attr_ttl_s,
            if c.readdirplus {
                ", with READDIRPLUS"
            } else {
                ""
            }
        );
    }
    if report.inferred_phases {
        tracing::info!(
            "note: {}: no phase markers (a GC that is not chunkscope's): the \
             phases were inferred from the requests (atime check, touches, the sweep of \
             the chunk directories) and are named '... (inferred)'",
            trace.display()
        );
    }
    if let Some(c) = report.kernel_cache.filter(|c| c.dir_ttl_s > 0.0) {
        tracing::info!(
            "note: {}: the kernel kept directories for {} s (--dir-ttl): \
             a directory's lookups and stats within that were answered by the kernel, \
             untraced; every chunk request was traced",
            trace.display(),
            c.dir_ttl_s
        );
    }
}

fn sampled(rate: f64) -> String {
    if rate < 1.0 {
        format!(" [SHARDS {:.2}%]", 100.0 * rate)
    } else {
        String::new()
    }
}

/// The digest stream's hit ratio at PBS's default cache capacity; `-` without digest lookups,
/// and `no repeats` when no digest was looked up twice (a GC with a digest cache looks up only
/// its misses, so a trace cannot show what its cache saved: its `gc --json` report can).
fn digest_hit(m: &crate::analysis::mrc::Mrc) -> String {
    if m.references == 0 {
        "-".into()
    } else if m.references == m.distinct && m.sample_rate >= 1.0 {
        "no repeats".into()
    } else {
        format!("{:.1}%", 100.0 * m.hit_at(PBS_CACHE_DEFAULT))
    }
}

/// `cell()` for a phase with touches, `-` for one without.
fn touched(p: &Phase, cell: impl FnOnce() -> String) -> String {
    if p.touches.count > 0 {
        cell()
    } else {
        "-".into()
    }
}

/// The block cache the summary's "block hit" column is at, in blocks: 16 Ki, the `zfs-hdd`
/// model's 256 MiB of 16 KiB blocks.
const SUMMARY_CACHE_BLOCKS: u64 = 1 << 14;

/// One row per phase of every report: what the threads compare; `block_bytes` sizes the
/// block cache of the "block hit" column.
pub fn summary(rows: &[Labelled], block_bytes: u64) -> Table {
    let block_hit = format!(
        "block hit @{}",
        human_bytes(SUMMARY_CACHE_BLOCKS * block_bytes)
    );
    let mut t = Table::new([
        "phase",
        "touches",
        "lookups",
        "listings",
        "modelled",
        "|Δino| p50",
        "same block",
        "blocks / ideal",
        "block writes",
        "inode-order writes",
        "digest hit @1Mi",
        &block_hit,
    ]);
    for r in rows {
        let p = r.phase;
        t.row(vec![
            r.label.clone(),
            thousands(p.touches.count),
            thousands(p.op_count("lookup")),
            thousands(p.op_count("readdir") + p.op_count("readdirplus")),
            if p.modeled_ns > 0 {
                duration_ns(p.modeled_ns)
            } else {
                "-".into()
            },
            // A phase without touches (a sweep) has no touch locality to show.
            touched(p, || thousands(p.touches.gap_p50)),
            touched(p, || format!("{:.1}%", 100.0 * p.touches.same_block)),
            touched(p, || {
                format!(
                    "{:.2}",
                    p.touches.distinct_blocks as f64 / p.touches.ideal_blocks.max(1) as f64
                )
            }),
            thousands(p.writeback.block_writes),
            thousands(p.writeback.inode_order_block_writes),
            // `-` in a phase without touches (the sweep's lookups of chunks by name go
            // through no digest cache).
            touched(p, || digest_hit(&p.digest_mrc)),
            // `-` without the curves (--no-mrc) or without metadata requests.
            if p.block_mrc.references > 0 {
                format!("{:.1}%", 100.0 * p.block_mrc.hit_at(SUMMARY_CACHE_BLOCKS))
            } else {
                "-".into()
            },
        ]);
    }
    t
}

/// Labels for the phases of `reports`: the phase name, prefixed by the trace's file name when
/// several traces are compared.
pub fn labelled(reports: &[Report]) -> Vec<Labelled<'_>> {
    let many = reports.len() > 1;
    reports
        .iter()
        .flat_map(|r| {
            let stem = std::path::Path::new(&r.trace)
                .file_stem()
                .map_or_else(|| r.trace.clone(), |s| s.to_string_lossy().into_owned());
            r.shown_phases().map(move |p| Labelled {
                label: if many {
                    format!("{stem}: {}", p.name)
                } else {
                    p.name.clone()
                },
                phase: p,
            })
        })
        .collect()
}

pub fn run(args: AnalyzeArgs) -> Result<Outcome> {
    let o = options(&args)?;
    let mut reports = Vec::new();
    for trace in &args.traces {
        let report = analyze(trace, o.clone())?;
        say_what_is_missing(trace, &report);
        reports.push(report);
    }
    let rows = labelled(&reports);
    let tables = crate::analysis::tables::tables(&rows, o.block_bytes);
    match args.csv.as_deref() {
        Some(dir) if dir != Path::new("-") => {
            let files = crate::columnar::write_csv_files(dir, &tables)?;
            tracing::info!("{} CSV tables in {}", files.len(), dir.display());
        }
        _ => {}
    }
    #[cfg(feature = "parquet")]
    if let Some(dir) = &args.parquet {
        let source = reports.iter().map(|r| r.trace.as_str()).collect::<Vec<_>>();
        let meta = [
            (
                "chunkscope.version".to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            ),
            (
                "chunkscope.traces".to_string(),
                serde_json::to_string(&source)?,
            ),
        ];
        let files = crate::columnar::write_parquet_files(dir, &tables, &meta)?;
        tracing::info!("{} Parquet tables in {}", files.len(), dir.display());
    }
    if let Some(dir) = &args.svg {
        let files = crate::analysis::plot::write_all(dir, &rows)?;
        tracing::info!("{} SVG plots in {}", files.len(), dir.display());
    }
    if super::to_stdout(&args.csv) {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        tables[0].write_csv(&mut out)?;
        std::io::Write::flush(&mut out)?;
    }
    if let Some(dest) = &args.json {
        if reports.len() == 1 {
            super::write_json(dest, &reports[0])?;
        } else {
            super::write_json(dest, &reports)?;
        }
    }
    if super::to_stdout(&args.json) || super::to_stdout(&args.csv) {
        return Ok(Outcome::Ok);
    }
    if !args.summary {
        for report in &reports {
            println!(
                "trace {} (store {}), {} inodes per {} block",
                report.trace,
                report.store,
                report.inodes_per_block,
                human_bytes(report.block_bytes)
            );
            for p in report.shown_phases() {
                phase(p, report.block_bytes);
            }
            println!();
        }
    }
    print!("{}", summary(&rows, o.block_bytes).text());
    Ok(Outcome::Ok)
}
