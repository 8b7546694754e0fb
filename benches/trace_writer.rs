//! The trace writer, version 1 (plain slots) against version 2 (zstd blocks): bytes per
//! record and records per second of the writer thread, for the records of a real trace.
//!
//! Run (TRACE: any trace, e.g. a demo's with `--keep`, or a GC's through a mount):
//!
//!     cargo bench --bench trace_writer -- TRACE
//!     taskset -c 0 target/release/deps/trace_writer-* --bench TRACE   # as BENCHMARKS.md
//!
//! The records are read into memory first, then sent through a [`TraceWriter`] of each
//! version into a file beside TRACE, three rounds each, alternating; the time is from the
//! first record sent to the writer's end (its final flush and `fsync`).

use std::path::PathBuf;
use std::time::Instant;

use chunkscope::trace::{TraceReader, TraceWriter};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        println!("trace_writer: run with `cargo bench --bench trace_writer -- TRACE` to measure");
        return;
    }
    let Some(path) = args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map(PathBuf::from)
    else {
        eprintln!("usage: cargo bench --bench trace_writer -- TRACE (a trace file to rewrite)");
        std::process::exit(2);
    };
    let mut reader = TraceReader::open(&path).expect("a trace");
    let meta = reader.meta().clone();
    let mut records = Vec::new();
    while let Some(r) = reader.next_record().expect("readable") {
        let Some(raw) = r.to_raw() else {
            continue;
        };
        records.push(raw);
    }
    println!("{} records from {}", records.len(), path.display());
    let out = path.with_extension("bench-out");
    let mut results: Vec<(bool, f64, u64)> = Vec::new();
    for _round in 0..3 {
        for compress in [false, true] {
            let (w, sink) = TraceWriter::start_with(&out, meta.clone(), None, compress).unwrap();
            let t = Instant::now();
            for r in &records {
                sink.record(*r);
            }
            drop(sink);
            let stats = w.finish().unwrap();
            let secs = t.elapsed().as_secs_f64();
            results.push((compress, secs, stats.bytes));
        }
    }
    let _ = std::fs::remove_file(&out);
    println!("version  bytes        bytes/record  records/s (median of 3)  rounds (s)");
    for compress in [false, true] {
        let mut runs: Vec<(f64, u64)> = results
            .iter()
            .filter(|r| r.0 == compress)
            .map(|r| (r.1, r.2))
            .collect();
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (secs, bytes) = runs[1];
        println!(
            "{:<8} {:<12} {:<13.1} {:<24.0} {}",
            if compress { "2 (zstd)" } else { "1" },
            bytes,
            bytes as f64 / records.len() as f64,
            records.len() as f64 / secs,
            runs.iter()
                .map(|r| format!("{:.3}", r.0))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}
