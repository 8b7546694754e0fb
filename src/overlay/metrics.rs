//! `mount --metrics ADDR:PORT`: the mount's counters over HTTP, at `/metrics`, in the
//! OpenMetrics text format that Prometheus scrapes.
//!
//! Each scrape reads the same snapshot as `ctl stats` ([`Stats`]) on the HTTP thread and
//! encodes it with prometheus-client: nothing is kept per scrape and the request path is not
//! waited on. Counters (`_total`) only grow while the mount lives; the GC's progress is a set
//! of gauges of the running GC (they start again at each GC), with `chunkscope_gcs_total`
//! counting the GCs begun. Latency histograms have buckets at powers of four nanoseconds
//! (about 1 µs to 69 s), exact from the live counters' finer buckets.

use std::sync::Arc;

use anyhow::{Context, Result};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::control::{Shared, Stats};
use crate::live::Histogram;

/// The histograms' upper bounds, ns: 2^10 (1.02 µs) to 2^36 (68.7 s), every power of four.
const BOUNDS_NS: [u64; 14] = [
    1 << 10,
    1 << 12,
    1 << 14,
    1 << 16,
    1 << 18,
    1 << 20,
    1 << 22,
    1 << 24,
    1 << 26,
    1 << 28,
    1 << 30,
    1 << 32,
    1 << 34,
    1 << 36,
];

struct MountCollector(Arc<Shared>);

impl std::fmt::Debug for MountCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MountCollector")
    }
}

fn counter(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: i64) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

/// A counter with one label, a value per label value.
fn labelled<'a>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    label: &str,
    values: impl Iterator<Item = (&'a str, u64)>,
) -> std::fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (l, v) in values {
        let set = [(label, l)];
        ConstCounter::new(v).encode(m.encode_family(&set)?)?;
    }
    Ok(())
}

/// A histogram in seconds per operation.
fn histograms<'a>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    values: impl Iterator<Item = (&'a str, &'a Histogram)>,
) -> std::fmt::Result {
    let mut m = e.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
    for (op, h) in values {
        let set = [("op", op)];
        let mut below = 0;
        let mut buckets: Vec<(f64, u64)> = BOUNDS_NS
            .iter()
            .map(|&b| {
                let n = h.at_most(b - 1);
                let step = n - below;
                below = n;
                (b as f64 / 1e9, step)
            })
            .collect();
        buckets.push((f64::INFINITY, h.count() - below));
        m.encode_family(&set)?
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                h.sum as f64 / 1e9,
                h.count(),
                &buckets,
                None,
            )?;
    }
    Ok(())
}

/// Encodes `s` as the metrics a scrape returns.
fn encode_stats(s: &Stats, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
    encode_requests(s, e)?;
    encode_mount(s, e)?;
    if let Some(m) = &s.model {
        encode_model(m, e)?;
    }
    if let Some(rules) = &s.faults {
        encode_faults(rules, e)?;
    }
    encode_gc(s, e)?;
    if let Some(n) = s.index_files {
        gauge(
            e,
            "chunkscope_store_index_files",
            "Index files in the store when it was mounted",
            n as i64,
        )?;
    }
    Ok(())
}

/// Requests, errors and latencies by operation.
fn encode_requests(s: &Stats, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
    let ops = || s.ops.iter();
    labelled(
        e,
        "chunkscope_requests",
        "Requests answered, by FUSE operation",
        "op",
        ops().map(|o| (o.op.as_str(), o.requests)),
    )?;
    labelled(
        e,
        "chunkscope_request_errors",
        "Requests answered with an error (injected ones included), by operation",
        "op",
        ops().map(|o| (o.op.as_str(), o.errors)),
    )?;
    labelled(
        e,
        "chunkscope_injected_errors",
        "Errors a fault rule injected, by operation",
        "op",
        ops().map(|o| (o.op.as_str(), o.injected_errors)),
    )?;
    histograms(
        e,
        "chunkscope_request_duration",
        "Real time from a request's arrival to the store's answer (a held reply's wait excluded)",
        ops().map(|o| (o.op.as_str(), &o.real_ns)),
    )?;
    if s.model.is_some() {
        histograms(
            e,
            "chunkscope_modeled_cost",
            "What the metadata cost model charged a request",
            ops().map(|o| (o.op.as_str(), &o.modeled_ns)),
        )?;
    }
    Ok(())
}

/// The mount's own counters: the trace writer's, descriptors, panics, inodes.
fn encode_mount(s: &Stats, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
    counter(
        e,
        "chunkscope_trace_records",
        "Trace records sent to the writer",
        s.records,
    )?;
    counter(
        e,
        "chunkscope_trace_stalls",
        "Times a request waited for room in the trace writer's channel",
        s.stalls,
    )?;
    counter(
        e,
        "chunkscope_trace_lost",
        "Trace records lost (the writer failed)",
        s.lost,
    )?;
    counter(
        e,
        "chunkscope_fd_exhausted",
        "Requests the store answered EMFILE or ENFILE",
        s.fd_exhausted,
    )?;
    counter(
        e,
        "chunkscope_handler_panics",
        "Requests whose handler panicked (answered EIO; the mount went on)",
        s.panics,
    )?;
    gauge(
        e,
        "chunkscope_inodes",
        "Inodes the kernel holds lookups on",
        s.inodes as i64,
    )?;
    Ok(())
}

/// The cost model's totals and state.
fn encode_model(
    m: &crate::overlay::control::ModelStats,
    e: &mut DescriptorEncoder<'_>,
) -> std::fmt::Result {
    let t = &m.totals;
    counter(
        e,
        "chunkscope_model_cache_hits",
        "Metadata block cache hits",
        t.hits,
    )?;
    counter(
        e,
        "chunkscope_model_cache_misses",
        "Demand reads (cache misses)",
        t.misses,
    )?;
    counter(
        e,
        "chunkscope_model_prefetch_reads",
        "Blocks read ahead",
        t.prefetched,
    )?;
    counter(
        e,
        "chunkscope_model_blocks_written",
        "Dirty blocks written at transaction-group syncs",
        t.blocks_written,
    )?;
    counter(
        e,
        "chunkscope_model_txg_syncs",
        "Transaction groups synced",
        t.txg_syncs,
    )?;
    let secs = |ns: u64| ns / 1_000_000_000;
    counter(
        e,
        "chunkscope_model_throttle_seconds",
        "Modelled delay the write throttle added, whole seconds",
        secs(t.throttle_ns),
    )?;
    counter(
        e,
        "chunkscope_model_clock_seconds",
        "The model's clock: modelled time so far, whole seconds",
        secs(m.clock_ns),
    )?;
    gauge(
        e,
        "chunkscope_model_dirty_blocks",
        "Blocks dirty in the open transaction group",
        m.dirty_blocks as i64,
    )?;
    gauge(
        e,
        "chunkscope_model_dirty_limit_blocks",
        "The model's dirty limit",
        m.dirty_limit_blocks as i64,
    )?;
    Ok(())
}

/// Each fault rule's matches and firings.
fn encode_faults(
    rules: &[crate::faults::RuleStats],
    e: &mut DescriptorEncoder<'_>,
) -> std::fmt::Result {
    let rules = || rules.iter();
    labelled(
        e,
        "chunkscope_fault_matches",
        "Requests a fault rule selected",
        "rule",
        rules().map(|r| (r.rule.as_str(), r.matches)),
    )?;
    labelled(
        e,
        "chunkscope_fault_fired",
        "Requests a fault rule fired on",
        "rule",
        rules().map(|r| (r.rule.as_str(), r.hits)),
    )?;
    Ok(())
}

/// The GC on the mount: its phase and progress.
fn encode_gc(s: &Stats, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
    let g = &s.gc;
    let phase = g.phase();
    gauge(
        e,
        "chunkscope_gc_phase",
        "The GC phase running (0 none, 1 mark, 2 sweep), from markers or inferred",
        phase.map_or(0, |p| p.0 as i64),
    )?;
    gauge(
        e,
        "chunkscope_gc_phase_inferred",
        "1 when the phase is inferred from the requests (no markers), else 0",
        phase.is_some_and(|p| p.1) as i64,
    )?;
    counter(
        e,
        "chunkscope_gcs",
        "GCs begun, as inferred (a traced mount)",
        g.progress.gcs,
    )?;
    let p = &g.progress;
    for (name, help, v) in [
        (
            "chunkscope_gc_indexes",
            "Index files the running GC looked up",
            p.indexes,
        ),
        (
            "chunkscope_gc_touches",
            "Chunks the running GC touched",
            p.touches,
        ),
        (
            "chunkscope_gc_dirs_swept",
            "Chunk directories the running GC's sweep reached (of 65536)",
            p.dirs_swept as u64,
        ),
        (
            "chunkscope_gc_unlinks",
            "Chunks the running GC's sweep removed",
            p.unlinks,
        ),
    ] {
        gauge(e, name, help, v as i64)?;
    }
    Ok(())
}

impl Collector for MountCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> std::fmt::Result {
        encode_stats(&Stats::of(&self.0), &mut e)
    }
}

/// The text a scrape of `shared` returns.
pub fn scrape(shared: &Arc<Shared>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(MountCollector(shared.clone())));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).expect("writing into a String");
    out
}

/// Binds `addr` and answers `GET /metrics` on a thread until the process ends.
pub fn serve(addr: std::net::SocketAddr, shared: Arc<Shared>) -> Result<()> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("--metrics {addr}: binding"))?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for req in server.incoming_requests() {
                let path = req.url().split('?').next().unwrap_or("");
                tracing::debug!("metrics: GET {path} from {:?}", req.remote_addr());
                let response = if path == "/metrics" {
                    let header = tiny_http::Header::from_bytes(
                        &b"Content-Type"[..],
                        &b"application/openmetrics-text; version=1.0.0; charset=utf-8"[..],
                    )
                    .expect("a valid header");
                    tiny_http::Response::from_string(scrape(&shared)).with_header(header)
                } else {
                    tiny_http::Response::from_string("chunkscope: try /metrics\n")
                        .with_status_code(404)
                };
                let _ = req.respond(response);
            }
        })
        .context("starting the metrics thread")?;
    Ok(())
}
