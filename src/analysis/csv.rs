//! The analysis as CSV tables, for pandas and DuckDB: phases, operations, miss-ratio curves,
//! gap histograms, dirty blocks per transaction group, what-if orders (columns in the headers
//! below).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::Labelled;
use super::PBS_CACHE_DEFAULT;
use crate::table::csv_field;

/// Writes the CSV tables into `dir`.
pub fn write_csv(dir: &Path, rows: &[Labelled], block_bytes: u64) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut files = Vec::new();
    let mut put = |name: &str, header: &str, lines: Vec<String>| -> Result<()> {
        let path = dir.join(name);
        let mut body = String::with_capacity(lines.len() * 64);
        body.push_str(header);
        body.push('\n');
        for l in lines {
            body.push_str(&l);
            body.push('\n');
        }
        std::fs::write(&path, body).with_context(|| format!("cannot write {}", path.display()))?;
        files.push(path);
        Ok(())
    };
    let q = |s: &str| csv_field(s);
    let mut phases = Vec::new();
    let mut ops = Vec::new();
    let mut mrc = Vec::new();
    let mut gaps = Vec::new();
    let mut txg = Vec::new();
    let mut what_if = Vec::new();
    for r in rows {
        let p = r.phase;
        let l = q(&r.label);
        phases.push(format!(
            "{l},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            p.records,
            p.real_ns,
            p.modeled_ns,
            p.touches.count,
            p.op_count("lookup"),
            p.op_count("readdir") + p.op_count("readdirplus"),
            p.indexes,
            p.touches.distinct_inodes,
            p.touches.gap_p10,
            p.touches.gap_p50,
            p.touches.gap_p90,
            p.touches.same_block,
            p.touches.distinct_blocks,
            p.touches.ideal_blocks,
            p.writeback.block_writes,
            p.writeback.inode_order_block_writes,
            p.digest_mrc.hit_at(PBS_CACHE_DEFAULT),
            p.listings.median_in_dir_gap,
        ));
        for o in &p.ops {
            let errors: u64 = o.errors.values().sum();
            ops.push(format!(
                "{l},{},{},{errors},{},{},{},{},{},{},{:.1},{},{}",
                o.op,
                o.count,
                o.rate,
                o.real.min,
                o.real.p50,
                o.real.p99,
                o.real.p999,
                o.real.max,
                o.modeled.avg,
                o.modeled.p50,
                o.modeled.p99
            ));
        }
        let curves = [("digests", &p.digest_mrc), ("blocks", &p.block_mrc)];
        let what_curves = p.what_if.iter().map(|w| (w.order, &w.block_mrc));
        for (stream, m) in curves.into_iter().chain(what_curves.map(|(o, m)| {
            (
                match o {
                    "recorded" => "touch-blocks-recorded",
                    "per-index" => "touch-blocks-per-index",
                    _ => "touch-blocks-global",
                },
                m,
            )
        })) {
            for x in &m.points {
                mrc.push(format!(
                    "{l},{stream},{},{},{},{},{}",
                    x.capacity, x.bytes, x.hit_ratio, x.miss_ratio, m.sample_rate
                ));
            }
        }
        for (stream, loc) in [("touches", &p.touches), ("lookups", &p.lookups)] {
            for (k, &n) in loc.gap_log2.iter().enumerate() {
                let lower = if k == 0 { 0 } else { 1u64 << (k - 1) };
                gaps.push(format!("{l},{stream},{lower},{n}"));
            }
        }
        for (t, n) in p
            .writeback
            .txg_start_ns
            .iter()
            .zip(&p.writeback.dirty_per_txg)
        {
            txg.push(format!("{l},{},{t},{n}", p.writeback.clock));
        }
        for w in &p.what_if {
            what_if.push(format!(
                "{l},{},{},{},{},{},{},{}",
                w.order,
                w.touches.gap_p50,
                w.touches.same_block,
                w.touches.distinct_blocks,
                w.block_writes,
                w.block_mrc.hit_at(1024),
                1024 * block_bytes
            ));
        }
    }
    put(
        "phases.csv",
        "phase,records,real_ns,modeled_ns,touches,lookups,listings,indexes,touched_inodes,\
         gap_p10,gap_p50,gap_p90,same_block,distinct_blocks,ideal_blocks,block_writes,\
         inode_order_block_writes,digest_hit_pbs_default,median_in_dir_gap",
        phases,
    )?;
    put(
        "ops.csv",
        "phase,op,count,errors,rate_per_s,real_min_ns,real_p50_ns,real_p99_ns,real_p999_ns,\
         real_max_ns,modeled_avg_ns,modeled_p50_ns,modeled_p99_ns",
        ops,
    )?;
    put(
        "mrc.csv",
        "phase,stream,capacity,bytes,hit_ratio,miss_ratio,sample_rate",
        mrc,
    )?;
    put("gaps.csv", "phase,stream,gap_at_least,count", gaps)?;
    put("txg.csv", "phase,clock,txg_start_ns,dirty_blocks", txg)?;
    put(
        "what_if.csv",
        "phase,order,gap_p50,same_block,distinct_blocks,block_writes,block_hit_1024,cache_bytes_1024",
        what_if,
    )?;
    Ok(files)
}
