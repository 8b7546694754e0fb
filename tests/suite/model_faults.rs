//! Issue 5: the cost model in the overlay equals its offline replay, runs reproduce with any
//! number of overlay threads, and fault rules act end to end.
//!
//! Stores live on tmpfs when there is one (`store_dir`); nothing here depends on inode
//! numbering except that two mounts of the *same* store see the same numbers.

use crate::common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use chunkscope::datastore::paths::chunk_rel_path;
use chunkscope::trace::{Op, TraceReader};
use common::*;
use serde_json::Value;

/// The model's totals the mount wrote to its `--stats` file when it unmounted (its log
/// sums them up in words).
fn mount_totals(stats: &Path) -> Value {
    let v: Value = serde_json::from_slice(
        &std::fs::read(stats).unwrap_or_else(|e| panic!("{}: {e}", stats.display())),
    )
    .unwrap();
    v["totals"].clone()
}

fn replay(trace: &Path, extra: &[&str]) -> Value {
    let mut a = vec!["replay", "--json", trace.to_str().unwrap()];
    a.extend_from_slice(extra);
    let o = run(&a);
    assert!(o.status.success(), "replay: {}{}", stdout(&o), stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn online_totals_equal_the_offline_replay() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "5"]);
    let stats = dir.path().join("stats.json");
    let mut m = Mount::start(
        &store,
        dir.path(),
        true,
        &[
            "--model",
            "zfs-hdd",
            "--time-scale",
            "0",
            "--threads",
            "4",
            "--stats",
            stats.to_str().unwrap(),
        ],
    );
    let (code, _, out) = gc(&m.mnt, &["--strategy", "batched"]);
    assert_eq!(code, 0, "{out}");
    m.stop();
    let online = mount_totals(&stats);
    let trace = m.trace.clone().unwrap();

    let offline = replay(&trace, &[]);
    assert_eq!(offline["same_model"], true);
    assert_eq!(offline["mismatches"], 0, "every recorded cost recomputed");
    assert_eq!(offline["totals"], online, "online totals == replay totals");
    let t = &offline["totals"];
    assert!(t["misses"].as_u64().unwrap() > 1000, "{t}");
    assert!(
        t["prefetched"].as_u64().unwrap() > 0,
        "the sweep's listings prefetch"
    );
    assert!(t["txg_syncs"].as_u64().unwrap() > 1, "{t}");

    // The per-record costs add up to the total, and phases are split by the GC's markers.
    let mut r = TraceReader::open(&trace).unwrap();
    let mut sum = 0u64;
    while let Some(rec) = r.next_record().unwrap() {
        sum += rec.modeled_ns;
    }
    // The last transaction group's write-back happens at unmount, off every request path.
    assert_eq!(sum, t["ns"].as_u64().unwrap());
    let markers: Vec<&str> = offline["markers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert!(
        markers.iter().any(|m| m.starts_with("phase1 end")),
        "{markers:?}"
    );

    // What if: the same trace through another model gives other numbers, and no comparison.
    let ssd = replay(&trace, &["--model", "zfs-ssd"]);
    assert_eq!(ssd["same_model"], false);
    assert!(ssd["totals"]["ns"].as_u64() < t["ns"].as_u64());
    let big = replay(&trace, &["--model", "zfs-hdd", "--cache", "1KiB"]);
    assert!(big["totals"]["misses"].as_u64() > t["misses"].as_u64());
    // --cache alone resizes the model the trace was recorded with.
    let recorded_small = replay(&trace, &["--cache", "1KiB"]);
    assert_eq!(recorded_small["same_model"], false);
    assert_eq!(recorded_small["totals"], big["totals"]);
}

/// (op, ino, parent, injected_ns, flags, errno) of every request a fault rule touched, in
/// request order. Request numbers themselves are not compared: they also count forgets and
/// releases, which the kernel sends asynchronously (the model does not charge those).
fn injected(trace: &Path) -> Vec<(u16, u64, u64, u64, u8, i32)> {
    let mut r = TraceReader::open(trace).unwrap();
    let mut v = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        if rec.injected_ns > 0 || rec.flags & 16 != 0 {
            v.push((
                rec.seq,
                (
                    rec.op,
                    rec.ino,
                    rec.parent,
                    rec.injected_ns,
                    rec.flags,
                    rec.errno,
                ),
            ));
        }
    }
    v.sort_unstable();
    v.into_iter().map(|(_, x)| x).collect()
}

/// Two whole GCs with faults, one with four daemon threads: the same model totals and the same
/// faults on the same requests.
#[test]
#[ignore = "long suite (CI runs it with --ignored): two mounted GCs with faults"]
fn same_seed_same_totals_and_faults_with_one_and_four_threads() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "9"]);
    let run_once = |threads: &str, sub: &str| {
        let d = dir.path().join(sub);
        std::fs::create_dir(&d).unwrap();
        let stats = d.join("stats.json");
        // Shadow mode: the backing store is left as it was, so both runs see the same store.
        let mut m = Mount::start(
            &store,
            &d,
            true,
            &[
                "--stats",
                stats.to_str().unwrap(),
                "--shadow",
                "--threads",
                threads,
                "--model",
                "zfs-hdd",
                "--time-scale",
                "0",
                "--seed",
                "42",
                // Nothing cached by the kernel: every request reaches the mount whatever the
                // time between them (with TTLs, a run slowed by a busy machine saw 1,436
                // more revalidations than the other).
                "--entry-ttl",
                "0",
                "--attr-ttl",
                "0",
                "--dir-ttl",
                "0",
                "--fault",
                "lookup,getattr prob=0.02 delay=exp:50us",
                "--fault",
                "setattr-atime prob=0.01 delay=uniform:10us..90us",
            ],
        );
        let (code, report, out) = gc(&m.mnt, &["--strategy", "lru", "--no-lock"]);
        assert_eq!(code, 0, "{out}");
        m.stop();
        (
            mount_totals(&stats),
            injected(m.trace.as_ref().unwrap()),
            report["counters"]["removed_chunks"].clone(),
        )
    };
    let (t1, f1, removed1) = run_once("1", "one");
    let (t4, f4, removed4) = run_once("4", "four");
    assert!(f1.len() > 50, "faults fired: {}", f1.len());
    assert_eq!(removed1, removed4);
    assert_eq!(t1, t4, "identical modelled totals");
    assert_eq!(f1.len(), f4.len(), "as many faults");
    if let Some(i) = (0..f1.len()).find(|&i| f1[i] != f4[i]) {
        panic!("fault {i} differs: {:?} vs {:?}", f1[i], f4[i]);
    }
}

/// A referenced chunk of `store` (the first of the first index in walk order).
fn referenced_digest(store: &Path) -> chunkscope::datastore::Digest {
    let order = chunkscope::datastore::snapshots::phase1_order(store).unwrap();
    chunkscope::datastore::IndexFile::open(&order.expected[0])
        .unwrap()
        .digest(0)
}

#[test]
fn eio_on_atime_updates_aborts_before_the_sweep_and_loses_nothing() {
    let dir = store_dir();
    let (store, truth) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "6"]);
    let mut m = Mount::start(
        &store,
        dir.path(),
        true,
        &["--fault", "setattr-atime errno=EIO nth=100"],
    );
    let (code, _, out) = gc(&m.mnt, &["--strategy", "lru"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("aborted in phase 1 before anything was removed"),
        "{out}"
    );
    assert!(
        out.contains("Input/output error") || out.contains("EIO"),
        "{out}"
    );
    let rules = {
        let o = run(&["ctl", m.mnt.to_str().unwrap(), "rules"]);
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    assert_eq!(rules[0]["hits"], 1, "{rules}");
    m.stop();
    let mut r = TraceReader::open(m.trace.as_ref().unwrap()).unwrap();
    let (mut unlinks, mut flagged) = (0, 0);
    while let Some(rec) = r.next_record().unwrap() {
        unlinks += (rec.op() == Some(Op::Unlink)) as u32;
        if rec.flags & 16 != 0 {
            flagged += 1;
            assert_eq!((rec.op(), rec.errno), (Some(Op::Setattr), libc::EIO));
        }
    }
    assert_eq!(unlinks, 0, "no sweep");
    assert_eq!(flagged, 1, "the injected error is flagged in the trace");
    let (code, after) = check(&store, false);
    assert_eq!(code, 0, "{after}");
    assert_eq!(after["chunk_files"], truth["chunk_files"], "nothing lost");
}

#[test]
fn enoent_on_a_referenced_chunk_takes_the_missing_chunk_path() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "7"]);
    let digest = referenced_digest(&store);
    let rel = chunk_rel_path(&digest);
    let rule = format!("lookup path={} errno=ENOENT", rel.display());
    let mut m = Mount::start(&store, dir.path(), false, &["--fault", &rule]);
    assert!(
        std::fs::metadata(m.mnt.join(&rel)).is_err(),
        "the chunk is hidden"
    );
    assert!(std::fs::metadata(store.join(&rel)).is_ok());
    let (code, report, out) = gc(&m.mnt, &["--strategy", "lru"]);
    assert_eq!(code, 1, "the GC finishes, with a warning: {out}");
    assert!(
        out.contains(&format!(
            "unable to access non-existent chunk {}",
            digest.to_hex()
        )),
        "{out}"
    );
    assert_eq!(report["counters"]["missing_chunks"], 1);
    m.stop();
    assert!(
        store.join(&rel).exists(),
        "a referenced chunk is never removed"
    );
    let (code, after) = check(&store, false);
    assert_eq!(code, 0, "{after}");
}

#[test]
fn a_stalled_request_does_not_stop_the_others() {
    let dir = store_dir();
    let store = dir.path().join("store");
    std::fs::create_dir_all(store.join("others")).unwrap();
    std::fs::write(store.join("stall-me"), b"x").unwrap();
    for i in 0..50 {
        std::fs::write(store.join(format!("others/{i}")), b"y").unwrap();
    }
    // One worker thread: if the stall held it, nothing else could be answered. (The
    // acceptance asks for 2 s; 8 s leaves a loaded CI machine room for the 100 requests.)
    let mut m = Mount::start(
        &store,
        dir.path(),
        false,
        &[
            "--threads",
            "1",
            "--fault",
            "getattr,lookup path=stall-me stall=8s",
        ],
    );
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let stalled = s.spawn(|| {
            let r = std::fs::metadata(m.path("stall-me"));
            done.store(true, Ordering::SeqCst);
            r
        });
        // Wait until the stalled request is in (its rule fired).
        loop {
            let o = run(&["ctl", m.mnt.to_str().unwrap(), "rules"]);
            let v: Value = serde_json::from_slice(&o.stdout).unwrap();
            if v[0]["hits"].as_u64().unwrap() > 0 {
                break;
            }
            assert!(
                !stalled.is_finished(),
                "the stat ended before its rule fired"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for i in 0..50 {
            assert!(std::fs::metadata(m.path(&format!("others/{i}"))).is_ok());
            let listed = std::fs::read_dir(m.path("others")).unwrap().count();
            assert_eq!(listed, 50);
        }
        assert!(
            !done.load(Ordering::SeqCst),
            "100 other requests were served while the stalled one waited"
        );
        assert!(
            stalled.join().unwrap().is_ok(),
            "the stalled stat completes"
        );
    });
    // Nothing stays held (a reply is counted out just after it is sent: wait for it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let stats = run(&["ctl", m.mnt.to_str().unwrap(), "stats"]);
        let v: Value = serde_json::from_slice(&stats.stdout).unwrap();
        if v["held_replies"] == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still held: {v}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    m.stop();
}

/// `/tmp` is ext4 here: inode numbers cluster by directory, not by creation. With
/// `--layout-order creation` the ZFS model ranks inodes by creation instead, so phase 1 in
/// index (creation) order finds its dnodes together; replay uses the saved ranking.
#[test]
#[ignore = "long suite (CI runs it with --ignored): two mounted GCs and their replays"]
fn creation_order_layout_on_a_store_that_numbers_by_directory() {
    let dir = tempfile::tempdir().unwrap(); // ext4 on this machine kind; see the assertion
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "4"]);
    let ext4 = {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(store.as_os_str().as_bytes()).unwrap();
        // SAFETY: a plain C struct; all zeroes is a valid value of it.
        let mut s: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C string and out pointer.
        unsafe { libc::statfs(c.as_ptr(), &mut s) };
        s.f_type as i64 == 0xEF53
    };
    let mut misses = Vec::new();
    for (i, order) in ["creation", "native"].into_iter().enumerate() {
        let d = dir.path().join(format!("run{i}"));
        std::fs::create_dir(&d).unwrap();
        let stats = d.join("stats.json");
        let mut m = Mount::start(
            &store,
            &d,
            true,
            &[
                "--shadow",
                "--model",
                "zfs-hdd",
                "--time-scale",
                "0",
                "--layout-order",
                order,
                "--stats",
                stats.to_str().unwrap(),
            ],
        );
        let (code, _, out) = gc(
            &m.mnt,
            &["--strategy", "lru", "--phase", "mark", "--no-lock"],
        );
        assert_eq!(code, 0, "{out}");
        m.stop();
        let online = mount_totals(&stats);
        let trace = m.trace.clone().unwrap();
        let offline = replay(&trace, &[]);
        assert_eq!(offline["mismatches"], 0, "{order}");
        assert_eq!(offline["totals"], online, "{order}: online == replay");
        misses.push(online["misses"].as_u64().unwrap());
        if order == "creation" {
            let saved = chunkscope::replay::order_path(&trace);
            assert!(saved.exists());
            std::fs::remove_file(&saved).unwrap();
            let o = run(&["replay", trace.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(2));
            assert!(
                stderr(&o).contains("--layout-order creation"),
                "{}",
                stderr(&o)
            );
        }
    }
    if ext4 {
        assert!(
            misses[0] < misses[1],
            "creation {} vs native {}",
            misses[0],
            misses[1]
        );
    } else {
        assert!(
            misses[0] <= misses[1],
            "creation {} vs native {}",
            misses[0],
            misses[1]
        );
    }
}

/// Issue 49, point 6: a caller whose reply is held (an hour's delay) can be killed and timed
/// out at once, `ctl release` sends every held reply, and a delay over the longest is refused.
#[test]
fn a_held_reply_never_traps_its_caller() {
    use chunkscope::overlay::control::{socket_for, Client};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let dir = store_dir();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    for n in ["killed", "timed", "released"] {
        std::fs::write(store.join(n), n).unwrap();
    }
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = run(&[
        "mount",
        "--store",
        store.to_str().unwrap(),
        "--mountpoint",
        empty.to_str().unwrap(),
        "--fault",
        "lookup delay=2h",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("longer than the longest delay, 1h"),
        "{}",
        stderr(&o)
    );
    let m = Mount::start(
        &store,
        dir.path(),
        false,
        &[
            "--fault",
            "lookup path=killed delay=1h",
            "--fault",
            "lookup path=timed delay=1h",
            "--fault",
            "lookup path=released delay=1h",
        ],
    );
    let mut ctl = Client::connect(&socket_for(&m.mnt)).unwrap();
    // Waits until the mount holds `n` replies; releases them all if it never does (so that a
    // failing test leaves no caller behind).
    let held = |n: u64, ctl: &mut Client| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while ctl.stats().unwrap().held_replies != Some(n) {
            if Instant::now() > deadline {
                ctl.release().unwrap();
                panic!("the mount never held {n} replies");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // Ends within 20 s, or the held replies are released and the test fails.
    let ends = |child: &mut std::process::Child, ctl: &mut Client, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                ctl.release().unwrap();
                let _ = child.wait();
                panic!("{what}: the caller stayed trapped in its held request");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let stat = |name: &str| {
        Command::new("stat")
            .args(["-c", "%n"])
            .arg(m.mnt.join(name))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // SIGKILL.
    let mut child = stat("killed");
    held(1, &mut ctl);
    child.kill().unwrap();
    let status = ends(&mut child, &mut ctl, "kill");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    held(0, &mut ctl);
    // `timeout` (SIGTERM after a second).
    let mut child = Command::new("timeout")
        .args(["1", "stat"])
        .arg(m.mnt.join("timed"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = ends(&mut child, &mut ctl, "timeout");
    assert_eq!(status.code(), Some(124), "timeout killed its command");
    held(0, &mut ctl);
    // Released: the reply is sent, the caller gets its answer.
    let mut child = stat("released");
    held(1, &mut ctl);
    assert_eq!(ctl.release().unwrap(), 1);
    let status = ends(&mut child, &mut ctl, "release");
    assert!(status.success());
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert_eq!(out.trim(), m.mnt.join("released").to_str().unwrap());
    assert_eq!(ctl.stats().unwrap().interrupted_replies, Some(2));
}
