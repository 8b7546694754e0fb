//! The analysis as tables for pandas, DuckDB and Spark (`analyze --csv`, `--parquet`):
//! phases, operations, miss-ratio curves, gap histograms, dirty blocks per transaction
//! group, what-if orders. Each is a [`Frame`], so its CSV file and its Parquet file have the
//! same columns (below), typed in the Parquet one.

use super::Labelled;
use super::PBS_CACHE_DEFAULT;
use crate::columnar::{Column, Frame, Value};

const PHASES: [Column; 19] = [
    Column::text("phase"),
    Column::u64("records"),
    Column::u64("real_ns"),
    Column::u64("modeled_ns"),
    Column::u64("touches"),
    Column::u64("lookups"),
    Column::u64("listings"),
    Column::u64("indexes"),
    Column::u64("touched_inodes"),
    Column::u64("gap_p10"),
    Column::u64("gap_p50"),
    Column::u64("gap_p90"),
    Column::f64("same_block"),
    Column::u64("distinct_blocks"),
    Column::u64("ideal_blocks"),
    Column::u64("block_writes"),
    Column::u64("inode_order_block_writes"),
    // Null in a phase without touches (the sweep): no digest cache answers there.
    Column::f64("digest_hit_pbs_default").nullable(),
    Column::u64("median_in_dir_gap"),
];

const OPS: [Column; 13] = [
    Column::text("phase"),
    Column::text("op").dictionary(),
    Column::u64("count"),
    Column::u64("errors"),
    Column::f64("rate_per_s"),
    Column::u64("real_min_ns"),
    Column::u64("real_p50_ns"),
    Column::u64("real_p99_ns"),
    Column::u64("real_p999_ns"),
    Column::u64("real_max_ns"),
    Column::f64("modeled_avg_ns"),
    Column::u64("modeled_p50_ns"),
    Column::u64("modeled_p99_ns"),
];

const MRC: [Column; 7] = [
    Column::text("phase").dictionary(),
    Column::text("stream").dictionary(),
    Column::u64("capacity"),
    Column::u64("bytes"),
    Column::f64("hit_ratio"),
    Column::f64("miss_ratio"),
    Column::f64("sample_rate"),
];

const GAPS: [Column; 4] = [
    Column::text("phase").dictionary(),
    Column::text("stream").dictionary(),
    Column::u64("gap_at_least"),
    Column::u64("count"),
];

const TXG: [Column; 4] = [
    Column::text("phase").dictionary(),
    Column::text("clock").dictionary(),
    Column::u64("txg_start_ns"),
    Column::u64("dirty_blocks"),
];

const WHAT_IF: [Column; 8] = [
    Column::text("phase"),
    Column::text("order").dictionary(),
    Column::u64("gap_p50"),
    Column::f64("same_block"),
    Column::u64("distinct_blocks"),
    Column::u64("block_writes"),
    Column::f64("block_hit_1024"),
    Column::u64("cache_bytes_1024"),
];

/// The analysis tables of `rows` (phases, ops, mrc, gaps, txg, what_if), in that order.
pub fn tables(rows: &[Labelled], block_bytes: u64) -> Vec<Frame> {
    use Value::{F, T, U};
    let mut phases = Frame::new("phases", &PHASES);
    let mut ops = Frame::new("ops", &OPS);
    let mut mrc = Frame::new("mrc", &MRC);
    let mut gaps = Frame::new("gaps", &GAPS);
    let mut txg = Frame::new("txg", &TXG);
    let mut what_if = Frame::new("what_if", &WHAT_IF);
    for r in rows {
        let p = r.phase;
        let l = T(&r.label);
        phases.push(&[
            l,
            U(p.records),
            U(p.real_ns),
            U(p.modeled_ns),
            U(p.touches.count),
            U(p.op_count("lookup")),
            U(p.op_count("readdir") + p.op_count("readdirplus")),
            U(p.indexes),
            U(p.touches.distinct_inodes),
            U(p.touches.gap_p10),
            U(p.touches.gap_p50),
            U(p.touches.gap_p90),
            F(p.touches.same_block),
            U(p.touches.distinct_blocks),
            U(p.touches.ideal_blocks),
            U(p.writeback.block_writes),
            U(p.writeback.inode_order_block_writes),
            if p.touches.count > 0 {
                F(p.digest_mrc.hit_at(PBS_CACHE_DEFAULT))
            } else {
                Value::Null
            },
            U(p.listings.median_in_dir_gap),
        ]);
        for o in &p.ops {
            ops.push(&[
                l,
                T(o.op),
                U(o.count),
                U(o.errors.values().sum()),
                F(o.rate),
                U(o.real.min),
                U(o.real.p50),
                U(o.real.p99),
                U(o.real.p999),
                U(o.real.max),
                F(o.modeled.avg),
                U(o.modeled.p50),
                U(o.modeled.p99),
            ]);
        }
        let curves = [("digests", &p.digest_mrc), ("blocks", &p.block_mrc)];
        let what_curves = p.what_if.iter().map(|w| {
            let stream = match w.order {
                "recorded" => "touch-blocks-recorded",
                "per-index" => "touch-blocks-per-index",
                _ => "touch-blocks-global",
            };
            (stream, &w.block_mrc)
        });
        for (stream, m) in curves.into_iter().chain(what_curves) {
            for x in &m.points {
                mrc.push(&[
                    l,
                    T(stream),
                    U(x.capacity),
                    U(x.bytes),
                    F(x.hit_ratio),
                    F(x.miss_ratio),
                    F(m.sample_rate),
                ]);
            }
        }
        for (stream, loc) in [("touches", &p.touches), ("lookups", &p.lookups)] {
            for (k, &n) in loc.gap_log2.iter().enumerate() {
                let lower = if k == 0 { 0 } else { 1u64 << (k - 1) };
                gaps.push(&[l, T(stream), U(lower), U(n)]);
            }
        }
        let starts = p.writeback.txg_start_ns.iter();
        for (&t, &n) in starts.zip(&p.writeback.dirty_per_txg) {
            txg.push(&[l, T(p.writeback.clock), U(t), U(n)]);
        }
        for w in &p.what_if {
            what_if.push(&[
                l,
                T(w.order),
                U(w.touches.gap_p50),
                F(w.touches.same_block),
                U(w.touches.distinct_blocks),
                U(w.block_writes),
                F(w.block_mrc.hit_at(1024)),
                U(1024 * block_bytes),
            ]);
        }
    }
    vec![phases, ops, mrc, gaps, txg, what_if]
}
