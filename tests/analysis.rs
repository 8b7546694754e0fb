//! Issue 6: `chunkscope analyze` on real GC traces. The store is on tmpfs when there is one
//! (`store_dir`): inode numbers follow creation order, which is what inode order exploits.

mod common;

use common::*;
use serde_json::Value;

/// Phase 1 of `strategy` on a shadow mount of `store` with the zfs-hdd model (accounting
/// only); returns the analysis of its phase-1 phase.
fn phase1(store: &std::path::Path, dir: &std::path::Path, strategy: &str) -> Value {
    let d = dir.join(strategy);
    std::fs::create_dir(&d).unwrap();
    let mut m = Mount::start(
        store,
        &d,
        true,
        &["--shadow", "--model", "zfs-hdd", "--time-scale", "0"],
    );
    let o = run(&[
        "gc",
        "--no-atime-check",
        "--no-lock",
        "--phase",
        "mark",
        "--strategy",
        strategy,
        m.mnt.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    m.stop();
    let o = run(&[
        "analyze",
        "--json",
        m.trace.as_ref().unwrap().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let name = format!("phase1 strategy={strategy}");
    report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name.as_str())
        .unwrap_or_else(|| panic!("no phase {name}: {report}"))
        .clone()
}

#[test]
fn strategies_differ_as_the_threads_say() {
    let dir = store_dir();
    let (store, truth) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "8"]);
    let naive = phase1(&store, dir.path(), "naive");
    let lru = phase1(&store, dir.path(), "lru");
    let inode = phase1(&store, dir.path(), "inode-order");
    let n = |v: &Value| v.as_u64().unwrap();
    let referenced = n(&truth["referenced_chunks"]);

    assert_eq!(n(&lru["touches"]["count"]), referenced);
    assert!(n(&naive["touches"]["count"]) > n(&lru["touches"]["count"]));
    assert_eq!(n(&naive["touches"]["distinct_inodes"]), referenced);
    // Inode order: consecutive touches are neighbours.
    assert!(n(&inode["touches"]["gap_p50"]) < n(&lru["touches"]["gap_p50"]));
    assert!(inode["touches"]["same_block"].as_f64() > lru["touches"]["same_block"].as_f64());
    assert!(
        n(&inode["writeback"]["block_writes"]) < n(&lru["writeback"]["block_writes"]),
        "inode {} lru {}",
        inode["writeback"]["block_writes"],
        lru["writeback"]["block_writes"]
    );
    assert!(inode["writeback"]["amplification"].as_f64().unwrap() < 1.05);
    // The digest stream: naive sees every reference, lru only the misses of its cache.
    let dm = &naive["digest_mrc"];
    assert_eq!(n(&dm["distinct"]), referenced);
    let at_default = dm["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["capacity"] == 1_048_576)
        .unwrap();
    let expect = 1.0 - referenced as f64 / n(&dm["references"]) as f64;
    assert!((at_default["hit_ratio"].as_f64().unwrap() - expect).abs() < 1e-9);
    assert_eq!(
        lru["digest_mrc"]["points"][0]["hit_ratio"].as_f64(),
        Some(0.0)
    );
}

#[test]
fn a_truncated_trace_is_analysed_up_to_its_last_whole_record() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "2"]);
    let mut m = Mount::start(&store, dir.path(), true, &[]);
    std::fs::read_dir(m.path(".chunks/0000")).unwrap().count();
    m.stop();
    let t = m.trace.clone().unwrap();
    let len = std::fs::metadata(&t).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&t).unwrap();
    f.set_len(len - 50).unwrap();
    let o = run(&["analyze", t.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("incomplete"), "{}", stderr(&o));
    let o = run(&["analyze", store.join(".lock").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("not a chunkscope trace"),
        "{}",
        stderr(&o)
    );
}
