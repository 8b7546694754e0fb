//! Issue 7: the simulator against reality. Stores on tmpfs (`store_dir`): inode numbers follow
//! creation order there, as the simulator allocates them.

mod common;

use chunkscope::units::thousands;
use common::*;

/// Every strategy, mark and sweep, on `tiny`: the simulation of the generator's shape gives
/// the same touch, listing, stat and unlink counts as the GC through a shadow mount, and the
/// same modelled cost within 5%.
#[test]
fn simulation_matches_the_mount_on_tiny() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "5"]);
    let sims = simulate(&store, "tiny", "5", &["--model", "zfs-hdd"]);
    assert_eq!(sims.len(), 5);
    for sim in &sims {
        let strategy = sim["strategy"].as_str().unwrap();
        let d = dir.path().join(strategy);
        std::fs::create_dir(&d).unwrap();
        let mut m = Mount::shadow_zfs_hdd(&store, &d);
        let (code, report, out) = gc(&m.mnt, &["--no-lock", "--strategy", strategy]);
        assert_eq!(code, 0, "{out}");
        m.stop();
        let totals = replayed_totals(m.trace.as_ref().unwrap());
        assert_sim_matches(strategy, &report["counters"], &totals, sim, 0.05);
        assert!(report["counters"]["removed_chunks"].as_u64().unwrap() > 0);
    }
}

#[test]
fn bad_simulation_arguments_are_named() {
    let o = run(&["simulate", "--preset", "huge"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--preset huge"), "{}", stderr(&o));
    let o = run(&[
        "simulate",
        "--preset",
        "tiny",
        "--cache-capacity",
        "9000000",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("exceeds PBS's maximum"),
        "{}",
        stderr(&o)
    );
    let o = run(&["simulate", "--preset", "tiny", "--model", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--model nope"), "{}", stderr(&o));
}

/// `simulate --trace` writes what the mount's trace records, so `analyze` gives the same
/// phase-1 figures for a simulated run as for the real one; a sampled trace keeps a share of
/// the metadata blocks.
#[test]
fn simulated_trace_analyses_like_the_mount_trace() {
    // Inode numbers decide the blocks compared: a tmpfs no other test writes to.
    let dir = PrivateTmpfs::new();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "6"]);
    let d = dir.path().join("mnt");
    std::fs::create_dir(&d).unwrap();
    let mut m = Mount::shadow_zfs_hdd(&store, &d);
    let (code, _, out) = gc(
        &m.mnt,
        &["--no-lock", "--strategy", "inode-order", "--phase", "mark"],
    );
    assert_eq!(code, 0, "{out}");
    m.stop();
    let real = m.trace.clone().unwrap();
    let sim = dir.path().join("sim.trace");
    let sampled = dir.path().join("sampled.trace");
    for (t, rate) in [(&sim, "100%"), (&sampled, "10%")] {
        simulate(
            &store,
            "tiny",
            "6",
            &[
                "--strategy",
                "inode-order",
                "--phase",
                "mark",
                "--trace",
                t.to_str().unwrap(),
                "--trace-sample",
                rate,
            ],
        );
    }
    let phase1 = |trace: &std::path::Path| -> serde_json::Value {
        let o = run(&["analyze", "--json", trace.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "phase1 strategy=inode-order")
            .unwrap_or_else(|| panic!("no phase 1 in {}", trace.display()))
            .clone()
    };
    let ops = |p: &serde_json::Value, op: &str| -> u64 {
        p["ops"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["op"] == op)
            .map(|o| o["count"].as_u64().unwrap())
            .sum()
    };
    let (r, s) = (phase1(&real), phase1(&sim));
    for key in ["count", "distinct_inodes", "distinct_blocks", "gap_p50"] {
        assert_eq!(r["touches"][key], s["touches"][key], "touches.{key}");
    }
    for op in ["lookup", "setattr", "readdir"] {
        assert_eq!(ops(&r, op), ops(&s, op), "{op} requests");
    }
    assert_eq!(r["listings"]["entries"], s["listings"]["entries"]);
    let (m_real, m_sim) = (
        r["modeled_ns"].as_f64().unwrap(),
        s["modeled_ns"].as_f64().unwrap(),
    );
    assert!(
        (m_real - m_sim).abs() / m_real < 0.05,
        "{m_real} vs {m_sim}"
    );
    // A 10% sample of the blocks: about a tenth of the touches, and still a phase 1.
    let p = phase1(&sampled);
    let (all, some) = (
        s["touches"]["count"].as_u64().unwrap(),
        p["touches"]["count"].as_u64().unwrap(),
    );
    assert!(
        some > 0 && some * 4 < all,
        "{some} of {all} touches sampled"
    );
}

/// A long simulation says each run as it ends (stderr), so a stopped one keeps what it
/// finished; `--json` on stdout still holds every run, in the same order.
#[test]
fn each_finished_run_is_reported_as_it_ends() {
    let o = run(&[
        "simulate",
        "--preset",
        "tiny",
        "--strategy",
        "lru,batched",
        "--batch-size",
        "10,100",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("s wall")).collect();
    assert_eq!(lines.len(), 3, "{err}");
    for (line, label) in lines
        .iter()
        .zip(["lru", "batched (batch 10)", "batched (batch 100)"])
    {
        assert!(
            line.starts_with(&format!("chunkscope: {label}: phase 1 ")),
            "{line}"
        );
        assert!(line.contains("metadata reads"), "{line}");
    }
    let runs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let variants: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["variant"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(variants, ["-", "batch 10", "batch 100"]);
}

/// The table counts every metadata read the model charged, prefetch reads included (the
/// prefetch pass's are most of its I/O on a store with many chunks a directory), and says
/// when its reads and writes cover the sweep too.
#[test]
fn the_table_counts_demand_and_prefetch_reads() {
    let args = ["simulate", "--preset", "tiny", "--strategy", "lru,prefetch"];
    let o = run(&[&args[..], &["--json"]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let runs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let table = String::from_utf8(o.stdout).unwrap();
    let mut lines = table.lines();
    let head = lines.next().unwrap();
    assert!(
        head.contains("metadata reads, phases 1+2 (demand + prefetch)"),
        "{table}"
    );
    let prefetched: Vec<u64> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["model"]["prefetched"].as_u64().unwrap())
        .collect();
    assert!(prefetched.iter().all(|&p| p > 0), "{prefetched:?}");
    for (r, line) in runs.as_array().unwrap().iter().zip(lines.skip(1)) {
        let reads = format!(
            "{} + {} (",
            thousands(r["model"]["misses"].as_u64().unwrap()),
            thousands(r["model"]["prefetched"].as_u64().unwrap())
        );
        assert!(
            line.starts_with(r["strategy"].as_str().unwrap()) && line.contains(&reads),
            "{reads} not in {line}"
        );
    }
}
