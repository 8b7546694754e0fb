//! Issue 8: `chunkscope demo` runs the whole experiment, writes its report, and leaves no
//! mount, process or store behind, also when interrupted. Runs the `tiny` preset; the demo
//! generates on tmpfs (/dev/shm), where inode numbers follow creation order.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

/// The demos of this file run one at a time: each checks that no demo mount is left.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Mount lines of the demo's work directories (`/dev/shm/chunkscope-demo-*`).
fn demo_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains("chunkscope-demo-"))
        .map(str::to_string)
        .collect()
}

/// `chunkscope mount` processes started by a demo (their store is in a demo work directory).
fn demo_mount_processes() -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        if cmd.contains("mount") && cmd.contains("chunkscope-demo-") {
            out.push(pid);
        }
    }
    out
}

fn work_dirs() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("chunkscope-demo-"))
                .collect()
        })
        .unwrap_or_default()
}

fn assert_svg(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{}: not XML: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert!(
        doc.descendants().any(|n| n.has_tag_name("text")),
        "{}: no labels",
        path.display()
    );
}

/// The demo with the three strategies its findings are about (the other two are the long
/// suite's, [`demo_with_every_strategy_on_tiny`]).
#[test]
fn demo_on_tiny_prints_the_table_and_writes_the_report() {
    demo_on_tiny(&["naive", "lru", "prefetch"]);
}

/// The demo as a new user runs it: every strategy.
#[test]
#[ignore = "long suite (CI runs it with --ignored): the whole demo, five mounted GCs"]
fn demo_with_every_strategy_on_tiny() {
    demo_on_tiny(&[]);
}

/// Runs the demo on `tiny` with `strategies` (none: its default, every strategy) and checks
/// its table, findings, report and that it leaves nothing behind.
fn demo_on_tiny(strategies: &[&str]) {
    let _one = serial();
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("report");
    let before = work_dirs();
    let list = strategies.join(",");
    // The dense part at its finest slice (256 directories of datastore B): seconds.
    let mut args = vec![
        "demo",
        "--preset",
        "tiny",
        "--dense-slice",
        "256",
        "--out",
        report.to_str().unwrap(),
    ];
    if !strategies.is_empty() {
        args.extend(["--strategies", &list]);
    }
    let o = run(&args);
    let (so, se) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "{so}\n{se}");
    let expected: Vec<&str> = if strategies.is_empty() {
        chunkscope::gc::Strategy::ALL.map(|s| s.name()).to_vec()
    } else {
        strategies.to_vec()
    };
    // The table: a row per strategy, each checked.
    for &s in &expected {
        let row = so
            .lines()
            .find(|l| l.starts_with(&format!("{s} ")))
            .unwrap_or_else(|| panic!("no row for {s}:\n{so}"));
        assert!(row.contains(" ok "), "{row}");
    }
    assert!(
        so.contains("phase 1 (modelled)") && so.contains("digest hit"),
        "{so}"
    );
    // The dense table: a row per strategy, at datastore B's density.
    let dense = so
        .split("At the threads' density: a 1/256 slice of `datastore-b` (256 of its 65,536")
        .nth(1)
        .unwrap_or_else(|| panic!("no dense table:\n{so}"));
    for &s in &expected {
        assert!(
            dense.lines().any(|l| l.starts_with(&format!("{s} "))),
            "no dense row for {s}:\n{so}"
        );
    }
    // Four findings: the ranking at the threads' density against lru, the demo's own
    // store and why it differs, the digest cache, the simulator against the mount.
    let findings: Vec<&str> = so.lines().filter(|l| l.starts_with("* ")).collect();
    assert_eq!(findings.len(), 4, "{so}");
    assert!(
        findings[0].starts_with("* At the threads' density (")
            && findings[0].contains("the ranking is ")
            && findings[0].contains("against lru, PBS's default"),
        "{}",
        findings[0]
    );
    assert!(
        findings[1].contains("On the demo's own store (")
            && findings[1].contains("The rankings differ because a listing"),
        "{}",
        findings[1]
    );
    assert!(findings[2].contains("3.3.5") && findings[2].contains("thread 000"));
    assert!(
        findings[3].contains(&format!(
            "counted what the mount counted for all {} strategies",
            expected.len()
        )),
        "{}",
        findings[3]
    );
    // Each mounted row says the simulator counted the same.
    for &s in &expected {
        let row = so
            .lines()
            .find(|l| l.starts_with(&format!("{s} ")))
            .unwrap();
        assert!(row.contains("same counts"), "{row}");
    }
    assert!(so.contains(&format!(
        "report:      {}",
        report.join("report.html").display()
    )));

    // The report: JSON with the same rows, Markdown, HTML that shows the plots.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["mode"], "fuse");
    let checks = json["sim_check"].as_array().unwrap();
    assert_eq!(checks.len(), expected.len());
    for c in checks {
        assert_eq!(c["mount"], c["simulated"], "{c}");
        assert!(c["mount"]["touches"].as_u64().unwrap() > 0, "{c}");
    }
    let d = &json["dense"];
    assert_eq!(
        (d["slice"].as_u64(), d["chunk_dirs"].as_u64()),
        (Some(256), Some(256))
    );
    // The threads' density: over 100 referenced chunks a directory.
    assert!(d["referenced_chunks"].as_u64().unwrap() > 100 * 256, "{d}");
    assert_eq!(d["rows"].as_array().unwrap().len(), expected.len());
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), expected.len());
    let referenced = json["referenced_chunks"].as_u64().unwrap();
    assert!(referenced > 1000);
    for r in rows {
        assert_eq!(r["check_ok"], true);
        assert!(r["phase1_modeled_ns"].as_u64().unwrap() > 0, "{r}");
        assert!(r["metadata_reads"].as_u64().unwrap() > 0, "{r}");
        // Every strategy touches every referenced chunk at least once.
        assert!(r["touches"].as_u64().unwrap() >= referenced, "{r}");
    }
    let touches = |s: &str| {
        rows.iter().find(|r| r["strategy"] == s).unwrap()["touches"]
            .as_u64()
            .unwrap()
    };
    assert!(touches("naive") > touches("lru"));
    assert_eq!(touches("lru"), referenced);
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("| strategy |") && md.contains("![svg/mrc-digests.svg]"));
    let html = std::fs::read_to_string(report.join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.matches("<table>").count() == 2);
    assert!(!html.contains('`'), "Markdown left in the HTML");
    assert!(html.contains("<code>tiny</code>") && html.contains("<dt>block writes</dt>"));
    // Every column of the tables has its legend entry.
    for col in [
        "touches",
        "metadata reads",
        "chunks/s",
        "digest hit",
        "simulated",
        "slice",
    ] {
        assert!(
            html.contains(&format!("<dt>{col}</dt>")),
            "no legend for {col}"
        );
    }
    // Captions say what a plot shows, not its file name.
    assert!(!html.contains("<figcaption>svg/"), "{html}");
    assert!(
        html.contains("<figcaption>Digest cache: the share"),
        "{html}"
    );
    let imgs: Vec<&str> = html
        .split("<img src=\"")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
        .collect();
    assert!(imgs.len() >= 4, "{html}");
    for img in imgs {
        assert_svg(&report.join(img));
    }
    for s in [expected[0], expected[expected.len() - 1]] {
        assert!(report.join(format!("traces/{s}.trace")).is_file());
        assert!(report.join(format!("logs/gc-{s}.log")).is_file());
    }

    // Nothing left behind: no mount, no mount process, no work directory.
    assert!(demo_mounts().is_empty(), "{:?}", demo_mounts());
    assert!(demo_mount_processes().is_empty());
    let after = work_dirs();
    assert!(after.iter().all(|d| before.contains(d)), "{after:?}");
}

#[test]
fn demo_interrupted_unmounts_and_cleans_up() {
    let _one = serial();
    let out = tempfile::tempdir().unwrap();
    let before = work_dirs();
    let mut child = bin()
        .args(["demo", "--preset", "tiny", "--out"])
        .arg(out.path().join("report"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until a strategy's mount is up, then interrupt the demo (our child, by pid).
    let deadline = Instant::now() + Duration::from_secs(120);
    while demo_mounts().is_empty() {
        assert!(Instant::now() < deadline, "the demo never mounted");
        assert!(child.try_wait().unwrap().is_none(), "the demo ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: a signal to the process we started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted; unmounting and cleaning up"),
        "{err}"
    );
    assert!(demo_mounts().is_empty(), "{:?}", demo_mounts());
    // The mount process may take a moment to exit after its unmount.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !demo_mount_processes().is_empty() {
        assert!(Instant::now() < deadline, "mount processes left behind");
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = work_dirs();
    assert!(after.iter().all(|d| before.contains(d)), "{after:?}");
}

#[test]
fn demo_simulated_says_so_and_reports_the_same_columns() {
    let _one = serial();
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("report");
    let o = run(&[
        "demo",
        "--preset",
        "tiny",
        "--simulate",
        "--dense-slice",
        "0",
        "--strategies",
        "naive,lru",
        "--out",
        report.to_str().unwrap(),
    ]);
    let (so, se) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "{so}\n{se}");
    assert!(
        se.contains("runs on the simulated store instead: --simulate was given"),
        "{se}"
    );
    assert!(so.starts_with("\nSimulated store `tiny`"), "{so}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["mode"], "simulated");
    assert_eq!(json["rows"].as_array().unwrap().len(), 2);
    // The demo's own store and the digest cache; no dense part (--dense-slice 0), no
    // check against a mount.
    assert_eq!(
        so.lines().filter(|l| l.starts_with("* ")).count(),
        2,
        "{so}"
    );
    assert!(json["dense"].is_null() && json["sim_check"].as_array().unwrap().is_empty());
    assert!(report.join("report.html").is_file());
}

#[test]
fn demo_refuses_bad_arguments_by_name() {
    let o = run(&["demo", "--preset", "thread000"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("thread000"), "{}", stderr(&o));
    let o = run(&["demo", "--model", "nonsense", "--out", "/tmp/x-never"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--model nonsense"), "{}", stderr(&o));
    assert!(!Path::new("/tmp/x-never").exists());
    let o = run(&["demo", "--dense-slice", "3", "--out", "/tmp/x-never"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--dense-slice 3: must be a power of two from 1 to 256"),
        "{}",
        stderr(&o)
    );
    assert!(!Path::new("/tmp/x-never").exists());
}
