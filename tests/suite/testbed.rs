//! Issue 48, point 3: `chunkscope testbed` builds ext4 on a loop device (direct I/O) over an
//! image on a `--disk` mount, generates a store, runs each strategy cold in a memory cgroup,
//! and reports measured against predicted per phase; it leaves no mount, loop device or
//! cgroup behind. Nothing here depends on inode numbers.

use crate::common;

use std::path::Path;

use common::*;
use serde_json::Value;

fn loop_devices_on(dir: &Path) -> usize {
    let o = std::process::Command::new("losetup")
        .args(["--list", "--noheadings", "--output", "BACK-FILE"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.trim().starts_with(dir.to_str().unwrap()))
        .count()
}

fn mounts_under(dir: &Path) -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(dir.to_str().unwrap()))
        .count()
}

/// The whole testbed on the tiny preset with a fast disk (the pipeline, not the figures: the
/// figures are BENCHMARKS' business), two strategies; every field of the report checked.
#[test]
#[ignore = "long: builds a filesystem image and runs two GCs on it (about a minute)"]
fn the_testbed_reports_every_strategy_measured_and_predicted_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap(); // ext4 /tmp: the image's backing store
    let out = dir.path().join("tb");
    // Spawned, not run: the cgroup is named by the testbed's pid (another test may run one).
    let child = bin()
        .args([
            "testbed",
            "--out",
            out.to_str().unwrap(),
            "--disk",
            "ssd",
            "--image",
            "2GiB",
            "--memory",
            "128MiB",
            "--strategy",
            "naive,lru",
            // 512-byte inodes: 8 a table block, which the survey reads and the model takes.
            "--mkfs-options",
            "-I 512",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(mounts_under(dir.path()), 0, "no mount left");
    assert_eq!(loop_devices_on(dir.path()), 0, "no loop device left");
    let cgroups = std::fs::read_dir("/sys/fs/cgroup/memory")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("chunkscope-testbed-{pid}-"))
                })
                .count()
        })
        .unwrap_or(0);
    assert_eq!(cgroups, 0, "no cgroup left");
    let text = stdout(&o);
    for want in [
        "naive",
        "lru",
        "pred/meas",
        "re-reads",
        "fastest first",
        "memory reclaim",
    ] {
        assert!(text.contains(want), "{want} in:\n{text}");
    }
    let r: Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["options"]["fs"], "ext4");
    assert_eq!(r["options"]["memory_bytes"], 128 << 20);
    assert!(r["chunks"].as_u64().unwrap() > 1000, "{}", r["chunks"]);
    let runs = r["runs"].as_array().unwrap();
    assert_eq!(
        runs.iter()
            .map(|x| x["strategy"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["naive", "lru"]
    );
    for run in runs {
        let s = run["strategy"].as_str().unwrap();
        assert!(
            Path::new(run["trace"].as_str().unwrap()).exists(),
            "{s}: its trace"
        );
        for (i, p) in run["phases"].as_array().unwrap().iter().enumerate() {
            let f = |k: &str| {
                p[k].as_f64()
                    .unwrap_or_else(|| panic!("{s} phase {i}: {k}"))
            };
            assert!(f("measured_s") > 0.0, "{s} phase {i}: {p}");
            assert!(f("predicted_s") > 0.0, "{s} phase {i}: {p}");
            // Cold caches: every phase reads metadata from the disk, and the model says so.
            assert!(f("device_reads") > 100.0, "{s} phase {i}: {p}");
            assert!(
                f("device_read_bytes") >= 512.0 * f("device_reads"),
                "{s} phase {i}: {p}"
            );
            assert!(f("predicted_reads") > 100.0, "{s} phase {i}: {p}");
            assert!(
                f("device_rereads") <= f("device_reads"),
                "{s} phase {i}: {p}"
            );
            assert!(p["device_writes"].is_u64(), "{s} phase {i}: {p}");
        }
        // The sweep lists all 65,536 chunk directories: at least one read of each
        // directory's block, on the device and in the model.
        let sweep = &run["phases"][1];
        assert!(sweep["device_reads"].as_u64().unwrap() > 10_000, "{sweep}");
        assert!(
            sweep["predicted_reads"].as_u64().unwrap() > 10_000,
            "{sweep}"
        );
    }
    for k in ["measured_ranking", "predicted_ranking"] {
        let mut v: Vec<&str> = r[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        v.sort();
        assert_eq!(v, ["lru", "naive"], "{k}");
    }
    assert!(r["ranking_agrees"].is_boolean());
    assert!(r["image_in_memory"].is_boolean());
    assert!(r["host_io_ns"].as_u64().unwrap() > 0);
    // The model the predictions came from, with the testbed's disk spread over the image.
    let model: Value =
        serde_json::from_slice(&std::fs::read(r["model_file"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(model["disk"]["span"], 2u64 << 30);
    assert_eq!(model["cache_bytes"], 128 << 20);
    assert_eq!(model["io_ns"], r["host_io_ns"]);
    // The sweep reads each chunk directory's block once, on the device and in the model
    // (inode-table read-ahead and all): the counts agree within 1.5x.
    for run in runs {
        let sweep = &run["phases"][1];
        let (dev, pred) = (
            sweep["device_reads"].as_f64().unwrap(),
            sweep["predicted_reads"].as_f64().unwrap(),
        );
        assert!(
            (dev / 1.5..dev * 1.5).contains(&pred),
            "{}: sweep reads {dev} on the device, {pred} predicted",
            run["strategy"]
        );
    }
    assert!(!r["notes"].as_array().unwrap().is_empty());
    // Each GC's task log, timed; the model calibrated on lru's (the default) from the base
    // with the disk only, and every strategy predicted from the fit.
    for run in runs {
        let log = std::fs::read_to_string(run["task_log"].as_str().unwrap()).unwrap();
        assert!(
            log.contains(": Start GC phase2 (sweep unused chunks)\n"),
            "{log}"
        );
        assert!(log.contains(": processed 99% ("), "{log}");
        for (i, p) in run["phases"].as_array().unwrap().iter().enumerate() {
            assert!(p["calibrated_s"].as_f64().unwrap() > 0.0, "phase {i}: {p}");
            assert!(
                p["calibrated_reads"].as_u64().unwrap() > 100,
                "phase {i}: {p}"
            );
        }
    }
    let c = &r["calibrated"];
    assert_eq!(c["on"], "lru");
    let fitted: Value =
        serde_json::from_slice(&std::fs::read(c["model_file"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(fitted["cache_bytes"], c["cache_bytes"]);
    assert_eq!(fitted["io_ns"], c["io_ns"]);
    // The disk spans the surveyed filesystem (statvfs: the image less ext4's own tables).
    let span = fitted["disk"]["span"].as_u64().unwrap();
    assert!((14u64 << 27..=2 << 30).contains(&span), "{span}");
    assert_eq!(
        r["options"]["mkfs_options"],
        serde_json::json!(["-I", "512"])
    );
    assert_eq!(
        fitted["layout"]["per_block"], 8,
        "the filesystem's inodes a block"
    );
    assert!(c["ranking_agrees"].is_boolean());
    assert!(Path::new(r["survey"].as_str().unwrap()).exists());
    assert!(text.contains("calibrated on lru's log"), "{text}");
}

/// A wrong disk or size is refused before anything is built.
#[test]
fn the_testbed_refuses_a_bad_disk_or_size_before_building_anything() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tb");
    for (args, want) in [
        (&["--disk", "floppy"][..], "unknown disk 'floppy'"),
        (&["--image", "big"][..], "--image big"),
        (&["--memory", "lots"][..], "--memory lots"),
    ] {
        let mut a = vec!["testbed", "--out", out.to_str().unwrap()];
        a.extend_from_slice(args);
        let o = run(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
        assert!(!out.exists(), "{args:?}: nothing built");
    }
}

/// Processes whose command line names `dir` (the testbed's children all do).
fn processes_naming(dir: &Path) -> Vec<String> {
    let want = dir.to_str().unwrap().as_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| c.windows(want.len()).any(|w| w == want))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .collect()
}

/// An interrupt undoes what the testbed made: during a strategy's GC, a ^C at the terminal
/// (SIGINT to the whole process group: the GC, the mount and the testbed at once), and while
/// the store is generated, a SIGTERM to the testbed alone; issue 63, point 6: a SIGHUP (the
/// terminal gone) and a SIGQUIT likewise (before, a SIGHUP left three mounts, the loop
/// device, the cgroup and the children), and a ^C while a strategy's filesystem is mounted
/// over a disk of 1 byte a second (its replies held: before, the stop waited on them
/// forever). Each ends with 130
/// within seconds (the step running is ended, not waited for), and leaves no mount, loop
/// device, cgroup or process behind. A second testbed on the same OUT is refused by name.
#[test]
#[ignore = "long: builds a filesystem image five times (a few minutes)"]
fn an_interrupted_testbed_removes_its_mounts_loop_device_and_cgroup() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap(); // ext4 /tmp
    for (when, group, signal, disk) in [
        ("naive.log", true, libc::SIGINT, "ssd"),
        ("fs/store", false, libc::SIGTERM, "ssd"),
        ("naive.log", false, libc::SIGHUP, "ssd"),
        ("fs/store", false, libc::SIGQUIT, "ssd"),
        ("naive.trace", true, libc::SIGINT, "ssd,rate=1"),
    ] {
        let out = dir
            .path()
            .join(format!("tb-{}-{signal}", when.replace('/', "-")));
        let mut child = bin()
            .args(["testbed", "--out", out.to_str().unwrap()])
            .args([
                "--disk",
                disk,
                "--memory",
                "256MiB",
                "--strategy",
                "naive,lru",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        while !out.join(when).exists() {
            assert!(child.try_wait().unwrap().is_none(), "ended before {when}");
            assert!(std::time::Instant::now() < deadline, "no {when} in 300 s");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        if when == "fs/store" {
            // While it runs, its OUT is its own.
            let o = run(&["testbed", "--out", out.to_str().unwrap(), "--disk", "ssd"]);
            assert_eq!(o.status.code(), Some(2));
            assert!(
                stderr(&o).contains(&format!("is in use by another testbed (pid {pid})")),
                "{}",
                stderr(&o)
            );
        }
        if disk.contains("rate=1") {
            // The strategy's disk mount is up (its trace exists): the filesystem's mount
            // reads through it, each reply held for seconds a byte.
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        // SAFETY: our own child (or its process group), not yet reaped.
        unsafe { libc::kill(if group { -pid } else { pid }, signal) };
        let sent = std::time::Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if sent.elapsed() > std::time::Duration::from_secs(60) {
                let _ = child.kill();
                panic!("{when}: still running 60 s after the signal");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(130), "{when}: {err}");
        assert!(err.contains("interrupted"), "{when}: {err}");
        assert_eq!(mounts_under(&out), 0, "{when}: no mount left");
        assert_eq!(loop_devices_on(&out), 0, "{when}: no loop device left");
        let cgroup = format!("chunkscope-testbed-{pid}-");
        let left = std::fs::read_dir("/sys/fs/cgroup/memory")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&cgroup))
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(left, 0, "{when}: no cgroup left");
        assert_eq!(processes_naming(&out), Vec::<String>::new(), "{when}");
    }
}
