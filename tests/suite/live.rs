//! Issue 23, points 1 and 2: watching a running mount. One GC runs through a traced mount
//! with a model, a fault rule and `--metrics`; meanwhile `chunkscope top` prints its lines
//! and the test scrapes `/metrics` as Prometheus would. Nothing here depends on inode
//! numbering.

use crate::common;

use common::*;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// A free TCP port on the loopback (bound, then let go: the mount binds it next).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `GET path` on 127.0.0.1:`port`: (status line, body).
fn get(port: u16, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The samples of a scrape: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap_or_else(|_| panic!("{l}")))
        })
        .collect()
}

/// Every histogram's buckets grow with `le` and end at its count.
fn assert_histograms_cumulative(s: &BTreeMap<String, f64>, name: &str, op: &str) {
    let prefix = format!("{name}_bucket{{");
    let mut buckets: Vec<(f64, f64)> = s
        .iter()
        .filter_map(|(k, &v)| {
            let labels = k.strip_prefix(&prefix)?.strip_suffix('}')?;
            let label = |n: &str| {
                labels
                    .split(',')
                    .find_map(|l| l.strip_prefix(&format!("{n}=\"")))
                    .and_then(|l| l.strip_suffix('"'))
                    .map(str::to_string)
            };
            (label("op")? == op).then_some(())?;
            let le = label("le")?;
            Some((
                if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                },
                v,
            ))
        })
        .collect();
    assert_eq!(buckets.len(), 15, "{prefix}: {buckets:?}");
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
    let count = s[&format!("{name}_count{{op=\"{op}\"}}")];
    assert_eq!(buckets.last().unwrap().1, count);
}

#[test]
fn top_and_the_metrics_endpoint_follow_a_gc_as_it_runs() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "store", &["--preset", "tiny", "--seed", "9"]);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut m = Mount::start(
        &store,
        dir.path(),
        true,
        &[
            "--model",
            "zfs-hdd",
            "--time-scale",
            "0",
            "--fault",
            "getattr nth=50 delay=1ms",
            // The sweep's first unlink waits 2 s: scrapes and top see phase 2 whatever the
            // machine's speed.
            "--fault",
            "unlink nth=1 stall=2s",
            "--metrics",
            &addr,
        ],
    );
    let (status, _) = get(port, "/nothing");
    assert!(status.contains("404"), "{status}");
    let (status, before) = get(port, "/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(before.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    let before = samples(&before);
    assert_eq!(before["chunkscope_gc_phase"], 0.0);

    let json = dir.path().join("gc.json");
    let mut gc = bin()
        .args(["gc", "--no-markers", &format!("--json={}", json.display())])
        .arg(&m.mnt)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // top's lines while it runs (stopped once the GC is over), and scrapes all along: the
    // sweep lasts at least its first unlink's stall, so both see it whatever the machine's
    // speed.
    let top = bin()
        .args(["top", "--interval", "0.2", "--count", "100000"])
        .arg(&m.mnt)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let over = std::sync::atomic::AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(120);
    let phases = std::thread::scope(|scope| {
        let scraper = scope.spawn(|| {
            let mut phases = Vec::new();
            let mut last = before.clone();
            while !over.load(std::sync::atomic::Ordering::SeqCst) {
                let s = samples(&get(port, "/metrics").1);
                for (k, v) in &s {
                    if k.starts_with("chunkscope_requests_total") {
                        assert!(*v >= last.get(k).copied().unwrap_or(0.0), "{k} went down");
                    }
                }
                phases.push(s["chunkscope_gc_phase"] as u8);
                last = s;
                std::thread::sleep(Duration::from_millis(20));
            }
            phases
        });
        while gc.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the GC did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
        over.store(true, std::sync::atomic::Ordering::SeqCst);
        scraper.join().unwrap()
    });
    assert!(gc.wait().unwrap().success());
    assert!(phases.contains(&2), "a scrape saw the sweep: {phases:?}");
    let mut top = top;
    top.kill().unwrap(); // the pid this test started
    let top = top.wait_with_output().unwrap();
    let lines = stdout(&top);
    let mut rows = lines.lines();
    assert!(
        rows.next().unwrap().starts_with("time     phase"),
        "{lines}"
    );
    assert!(
        rows.any(|r| r.split_whitespace().nth(1) == Some("2?")),
        "the sweep shows as inferred phase 2: {lines}"
    );
    let screen = bin()
        .args(["top", "--screen", "--interval", "0.3"])
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(screen.status.success(), "{}", stderr(&screen));
    let text = stdout(&screen);
    assert!(text.contains("chunkscope top"), "{text}");
    assert!(text.contains("cache hits"), "{text}");
    assert!(text.contains("getattr nth=50 delay=1ms"), "{text}");

    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let c = &report["counters"];
    let unlinks = c["unlinks"].as_u64().unwrap() as f64;
    // The trace writer publishes the inferred GC state as it drains: wait for the GC's end
    // to show (on the mount's counters, not a clock).
    let after = loop {
        let s = samples(&get(port, "/metrics").1);
        if s["chunkscope_gcs_total"] == 1.0 && s["chunkscope_gc_unlinks"] == unlinks {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the GC's end never showed: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(after["chunkscope_requests_total{op=\"unlink\"}"], unlinks);
    assert_eq!(after["chunkscope_gc_unlinks"], unlinks);
    assert_eq!(
        after["chunkscope_gc_touches"],
        c["touched"].as_u64().unwrap() as f64
    );
    assert_eq!(after["chunkscope_gc_phase"], 0.0, "the GC is over");
    assert_eq!(after["chunkscope_gcs_total"], 1.0);
    assert_eq!(after["chunkscope_gc_dirs_swept"], 65_536.0);
    assert!(after["chunkscope_fault_fired_total{rule=\"getattr nth=50 delay=1ms\"}"] >= 1.0);
    assert_eq!(
        after["chunkscope_fault_fired_total{rule=\"unlink nth=1 stall=2s (stall)\"}"],
        1.0
    );
    assert!(after["chunkscope_model_cache_misses_total"] > 0.0);
    assert_histograms_cumulative(&after, "chunkscope_request_duration_seconds", "lookup");
    assert_histograms_cumulative(&after, "chunkscope_modeled_cost_seconds", "setattr");
    m.stop();
}

/// Issue 23, point 3: diagnostics go through `tracing`: `-q` hides what a command did,
/// `-v` shows the daemon's debug events, `RUST_LOG` replaces the flags, and `mount --log`
/// appends timestamped lines to a file.
#[test]
fn diagnostics_follow_the_verbosity_flags_and_the_mount_logs_to_its_file() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "store", &["--preset", "tiny"]);
    let trace = dir.path().join("t.trace");
    let log = dir.path().join("daemon.log");
    let mut m = Mount::start(
        &store,
        dir.path(),
        false,
        &[
            "-v",
            "--log",
            log.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
        ],
    );
    let o = run(&["ctl", m.mnt.to_str().unwrap(), "stats"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["ctl", m.mnt.to_str().unwrap(), "mark", "hello"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stderr_of_mount = m.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.iter().any(|l| l.contains("chunkscope: mounted ")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("chunkscope: debug: control request 'stats'")),
        "-v shows the daemon's debug events: {text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("chunkscope: unmounted; trace")),
        "{text}"
    );
    for l in &lines {
        // 2026-12-02T05:30:00.123Z chunkscope: ...
        let (stamp, rest) = l.split_once(' ').unwrap();
        assert!(
            stamp.len() == 24 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
            "{l}"
        );
        assert!(rest.starts_with("chunkscope: "), "{l}");
    }
    assert!(
        !stderr_of_mount.contains("mounted"),
        "the log went to the file: {stderr_of_mount}"
    );

    // An analysis: its notes are info, -q hides them, warnings stay; RUST_LOG rules.
    let t = trace.to_str().unwrap();
    let loud = run(&["analyze", "--summary", "--no-mrc", t]);
    assert!(
        stderr(&loud).contains("chunkscope: note: "),
        "{}",
        stderr(&loud)
    );
    let quiet = run(&["analyze", "-q", "--summary", "--no-mrc", t]);
    assert!(quiet.status.success());
    assert_eq!(stderr(&quiet), "", "-q keeps warnings only");
    assert_eq!(
        stdout(&quiet),
        stdout(&loud),
        "the report itself is output, not a diagnostic"
    );
    let o = bin()
        .args(["analyze", "--summary", "--no-mrc", t])
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert_eq!(stderr(&o), "");
    let o = bin()
        .args(["analyze", t])
        .env("RUST_LOG", "chunkscope=[")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("RUST_LOG=chunkscope=["),
        "{}",
        stderr(&o)
    );
    // Errors show whatever the flags.
    let o = run(&["analyze", "-qq", "/nonexistent.trace"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("chunkscope: error: "),
        "{}",
        stderr(&o)
    );
}
