//! Issue 23, point 0: phases inferred from the requests of a trace without markers. Each
//! test traces `chunkscope gc` through a mount, with its markers, and checks that the
//! inference, reading the same trace as if it had none, puts every boundary where the marker
//! is. Nothing here depends on inode numbering (stores on tmpfs or ext4 alike).

use crate::common;

use chunkscope::trace::ordered::Ordered;
use chunkscope::trace::phases::{infer_trace, Boundary};
use chunkscope::trace::{Op, Record, TraceReader};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A fresh `tiny` store in `dir/strategy`, collected with `strategy` (and `extra`) through a
/// traced mount; returns the trace and the GC's report.
fn traced_gc(dir: &Path, strategy: &str, extra: &[&str]) -> (PathBuf, Value) {
    let d = dir.join(strategy);
    std::fs::create_dir(&d).unwrap();
    let (store, _) = gen(&d, "store", &["--preset", "tiny", "--seed", "5"]);
    let mut m = Mount::start(&store, &d, true, &[]);
    let mut args = vec!["--strategy", strategy];
    args.extend_from_slice(extra);
    let (code, report, out) = gc(&m.mnt, &args);
    assert_eq!(code, 0, "{out}");
    m.stop();
    (m.trace.clone().unwrap(), report)
}

/// The request numbers of the trace's records that a boundary can fall before: the GC's
/// own requests and the other processes', not the kernel's (pid 0: releases and forgets
/// that follow a request at their own pace) and not markers.
fn positions(trace: &Path) -> Vec<u64> {
    let mut records = Ordered::<Record>::new(TraceReader::open(trace).unwrap());
    let mut seqs = Vec::new();
    while let Some((r, _)) = records.next_record().unwrap() {
        if r.pid != 0 && r.op != Op::Marker as u16 {
            seqs.push(r.seq);
        }
    }
    seqs
}

/// Each edge as (phase, start) with the first position at or after it.
fn edges(list: &[Boundary], positions: &[u64]) -> Vec<(u8, bool, Option<u64>)> {
    list.iter()
        .map(|b| {
            let (n, s) = b.marker.phase_edge().unwrap();
            let i = positions.partition_point(|&p| p < b.seq);
            (n, s, positions.get(i).copied())
        })
        .collect()
}

/// The inference on `trace` ignoring its markers gives the markers' boundaries.
fn assert_inferred_as_marked(trace: &Path, checked: bool) {
    let phases = infer_trace(trace, false).unwrap();
    assert_eq!(phases.checked, checked);
    let at = positions(trace);
    let marked = edges(&phases.marked, &at);
    assert_eq!(
        marked.iter().map(|e| (e.0, e.1)).collect::<Vec<_>>(),
        [(1, true), (1, false), (2, true), (2, false)]
    );
    assert_eq!(edges(&phases.inferred, &at), marked, "{}", trace.display());
}

#[test]
fn every_boundary_of_a_checked_gc_is_found_where_its_marker_is() {
    // A strategy whose phase 1 lists chunk directories, as the sweep does (prefetch, the
    // other one, is in the long suite's test below).
    let dir = store_dir();
    let (trace, _) = traced_gc(dir.path(), "inode-order", &["--with-atime-check"]);
    assert_inferred_as_marked(&trace, true);
}

#[test]
#[ignore = "long suite (CI runs it with --ignored): the other strategies, ~9 s each"]
fn every_strategy_s_boundaries_are_found_where_its_markers_are() {
    let dir = store_dir();
    for strategy in ["prefetch", "naive", "lru", "batched"] {
        let (trace, _) = traced_gc(dir.path(), strategy, &["--with-atime-check"]);
        assert_inferred_as_marked(&trace, true);
    }
}

#[test]
fn without_the_atime_check_phase_1_starts_at_the_first_index() {
    let dir = store_dir();
    let (trace, _) = traced_gc(dir.path(), "lru", &[]);
    let phases = infer_trace(&trace, false).unwrap();
    assert!(!phases.checked);
    let at = positions(&trace);
    let (marked, inferred) = (edges(&phases.marked, &at), edges(&phases.inferred, &at));
    assert_eq!(inferred[1..], marked[1..], "phase 2's edges are exact");
    // Phase 1 starts after its marker, at the first index, once the walk has found it.
    let mut records = Ordered::<Record>::new(TraceReader::open(&trace).unwrap());
    let mut first_index = None;
    while let Some((r, _)) = records.next_record().unwrap() {
        let index =
            matches!(&r.name, chunkscope::trace::Name::Text(t) if t.as_bytes().ends_with(b"idx"));
        if r.op == Op::Lookup as u16 && index {
            first_index = Some(r.seq);
            break;
        }
    }
    assert_eq!(inferred[0].2, first_index);
    assert!(marked[0].2 < first_index);
}

#[test]
fn analyze_and_replay_show_the_inferred_phases_of_a_gc_without_markers() {
    let dir = store_dir();
    let (trace, report) = traced_gc(dir.path(), "lru", &["--with-atime-check", "--no-markers"]);
    assert!(infer_trace(&trace, false).unwrap().marked.is_empty());
    let o = run(&["analyze", "--json", "--no-mrc", trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("inferred from the requests"),
        "{}",
        stderr(&o)
    );
    let a: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(a["inferred_phases"], true);
    let phase = |name: &str| -> Value {
        a["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no section {name}: {a}"))
            .clone()
    };
    let count = op_count;
    let c = &report["counters"];
    let (mark, sweep) = (phase("phase1 (inferred)"), phase("phase2 (inferred)"));
    assert_eq!(
        mark["touches"]["count"], c["touched"],
        "the check's touches are not phase 1's"
    );
    assert_eq!(count(&mark, "unlink"), 0);
    assert_eq!(count(&sweep, "setattr"), 0);
    assert_eq!(count(&sweep, "unlink"), c["unlinks"].as_u64().unwrap());
    assert_eq!(count(&sweep, "opendir"), 65_536);
    // The tables name them too.
    let o = run(&["analyze", "--summary", "--no-mrc", trace.to_str().unwrap()]);
    assert!(stdout(&o).contains("phase2 (inferred)"), "{}", stdout(&o));
    // Issue 49, point 7: the sweep has no digest cache, so no digest-cache hit ratio (its
    // lookups of chunks by name are not a cache's misses); phase 1 has one.
    let o = run(&["analyze", "--csv", trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = stdout(&o);
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    let col = rows[0]
        .iter()
        .position(|c| *c == "digest_hit_pbs_default")
        .unwrap();
    let hit = |name: &str| rows.iter().find(|r| r[0] == name).unwrap()[col].to_string();
    assert_eq!(hit("phase2 (inferred)"), "", "{csv}");
    assert!(hit("phase1 (inferred)").parse::<f64>().is_ok(), "{csv}");
    // Replay gives the model's state at the inferred edges.
    let o = run(&[
        "replay",
        "--json",
        "--model",
        "zfs-hdd",
        trace.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let texts: Vec<&str> = r["markers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        [
            "phase1 start (inferred)",
            "phase1 end (inferred)",
            "phase2 start (inferred)",
            "phase2 end (inferred)"
        ]
    );
}
