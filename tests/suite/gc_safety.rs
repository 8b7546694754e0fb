//! Issue 18: no flag, fault or order of phases may cost a referenced chunk. Each test is a case
//! that lost data before (exit status 0, referenced chunks gone); afterwards the backing store
//! is checked with `check --deep`, which reads the indexes with its own code, not the GC's.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Chunk and .bad files in the store (what a sweep can remove).
fn removable_files(store: &Path) -> u64 {
    let (_, r) = check(store, false);
    n(&r["chunk_files"]) + n(&r["bad_files"])
}

/// Every referenced chunk is there with its content.
fn assert_nothing_referenced_lost(store: &Path, context: &str) {
    let (code, r) = check(store, true);
    assert_eq!(r["missing_chunks"], Value::Array(vec![]), "{context}");
    assert_eq!(r["corrupt_chunks"], Value::Array(vec![]), "{context}");
    assert_eq!(code, 0, "{context}: {r}");
}

/// A GC through a non-shadow mount of a new `tiny` store with `mount_args` (fault rules).
struct FaultRun {
    _dir: PrivateTmpfs,
    store: std::path::PathBuf,
    truth: Value,
    /// The mountpoint (unmounted by now).
    mnt: std::path::PathBuf,
    /// Removable files before the run.
    before: u64,
    code: i32,
    report: Value,
    out: String,
}

fn gc_through_mount(seed: &str, mount_args: &[&str], gc_args: &[&str]) -> FaultRun {
    let dir = store_dir();
    let (store, truth) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", seed]);
    let before = removable_files(&store);
    let m = Mount::start(&store, dir.path(), false, mount_args);
    let (code, report, out) = gc(&m.mnt, gc_args);
    let mnt = m.mnt.clone();
    drop(m);
    FaultRun {
        _dir: dir,
        store,
        truth,
        mnt,
        before,
        code,
        report,
        out,
    }
}

#[test]
fn a_sweep_alone_reads_the_indexes_and_keeps_every_referenced_chunk() {
    let dir = store_dir();
    let (store, truth) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "18"]);
    let before = removable_files(&store);
    // No mark before it: every referenced chunk still has the previous GC's (old) atime.
    let (code, r, out) = gc(&store, &["--phase", "sweep"]);
    assert_eq!(code, 1, "finished with warnings: {out}");
    assert!(out.contains("No phase 1 in this run"), "{out}");
    let c = &r["counters"];
    let referenced = n(&truth["referenced_chunks"]);
    // Chunks first written by the last day's backups are recent (pending, unmarked); all
    // others carry the previous GC's atime, older than the cutoff: PBS would remove them.
    assert_eq!(
        n(&c["disk_chunks"]) + n(&c["pending_chunks"]),
        referenced + n(&truth["garbage"]["pending"]),
        "{out}"
    );
    let kept = n(&c["kept_referenced"]);
    assert!(
        kept > referenced * 9 / 10 && kept <= referenced,
        "{kept} of {referenced}"
    );
    assert_eq!(n(&c["verify_index_files"]), n(&truth["index_files"]));
    assert_eq!(
        n(&c["removed_chunks"]),
        n(&truth["garbage"]["removable"]),
        "garbage is still collected"
    );
    let named = r["kept_referenced"].as_array().unwrap();
    assert_eq!(named.len() as u64, kept.min(1000));
    assert!(named.iter().all(
        |k| k["reason"] == "not-marked-this-run" && out.contains(k["digest"].as_str().unwrap())
    ));
    assert!(out.contains("Kept referenced chunks PBS would have removed: "));
    assert_eq!(
        before - removable_files(&store),
        n(&c["removed_chunks"]) + n(&c["removed_bad"]),
        "reported removals are the files gone"
    );
    assert_nothing_referenced_lost(&store, "sweep alone");

    // A mark, then a sweep alone: nothing is old any more, a clean run.
    let (code, _, out) = gc(&store, &["--phase", "mark"]);
    assert_eq!(code, 0, "{out}");
    let (code, r, out) = gc(&store, &["--phase", "sweep"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(n(&r["counters"]["kept_referenced"]), 0);
    assert!(out.contains("TASK OK"), "{out}");
}

#[test]
fn a_touch_that_says_enoent_costs_no_chunk_and_is_reported() {
    let run = gc_through_mount(
        "5",
        &["--fault", "setattr-atime errno=ENOENT every=50"],
        &["--strategy", "lru"],
    );
    let (r, out) = (&run.report, &run.out);
    assert_eq!(run.code, 1, "{out}");
    let c = &r["counters"];
    let missing = n(&c["missing_chunks"]);
    assert!(missing > 10, "the faults fired: {missing}");
    // PBS would have removed each of them whose atime is old (not those the last backups
    // wrote): kept, named, with why.
    let kept = n(&c["kept_referenced"]);
    assert!(kept > 0 && kept <= missing, "{kept} of {missing}: {out}");
    let named = r["kept_referenced"].as_array().unwrap();
    assert!(named.iter().all(|k| k["reason"] == "missing-in-phase1"));
    assert_eq!(
        n(&c["removed_chunks"]),
        n(&run.truth["garbage"]["removable"]),
        "only garbage removed"
    );
    assert_eq!(
        run.before - removable_files(&run.store),
        n(&c["removed_chunks"]) + n(&c["removed_bad"])
    );
    assert_nothing_referenced_lost(&run.store, "setattr ENOENT");
}

#[test]
fn lookups_that_say_enoent_cost_no_chunk() {
    // Every 50th lookup anywhere (index files and directories too) says ENOENT, and 1% of
    // touches pick any errno a setattr can return.
    let run = gc_through_mount(
        "6",
        &[
            "--fault",
            "lookup errno=ENOENT every=50",
            "--fault",
            "setattr-atime errno=any prob=0.01",
        ],
        &["--strategy", "batched", "--batch-size", "500"],
    );
    let (code, out) = (run.code, &run.out);
    assert!(
        code == 1 || code == 2,
        "warnings (kept chunks) or an abort (an index that said ENOENT but is listed): {code} {out}"
    );
    if code == 2 {
        assert!(out.contains("garbage collection aborted in phase"), "{out}");
    } else {
        let c = &run.report["counters"];
        assert!(n(&c["missing_chunks"]) > 0, "{out}");
    }
    assert_nothing_referenced_lost(&run.store, "lookup ENOENT");
}

#[test]
fn a_sweep_that_fails_midway_says_what_it_removed() {
    let run = gc_through_mount("7", &["--fault", "unlink errno=EIO nth=50"], &[]);
    let (r, out) = (&run.report, &run.out);
    assert_eq!(run.code, 2, "{out}");
    assert!(
        out.contains("garbage collection aborted in phase 2 after removing 49 files"),
        "{out}"
    );
    assert!(
        out.contains("Input/output error") && out.contains(".chunks/"),
        "names the file: {out}"
    );
    assert_eq!(r["outcome"], "aborted");
    let c = &r["report"]["counters"];
    assert_eq!(n(&c["unlinks"]), 49);
    assert_eq!(
        run.before - removable_files(&run.store),
        n(&c["removed_chunks"]) + n(&c["removed_bad"]),
        "the aborted report counts the files gone"
    );
    assert_nothing_referenced_lost(&run.store, "unlink EIO");
}

#[test]
fn a_phase_one_error_says_nothing_was_removed() {
    let run = gc_through_mount("8", &["--fault", "setattr-atime errno=EIO nth=20"], &[]);
    let out = &run.out;
    assert_eq!(run.code, 2, "{out}");
    assert!(
        out.contains("garbage collection aborted in phase 1 before anything was removed"),
        "{out}"
    );
    assert_eq!(run.report["phase"], 1);
    assert_eq!(removable_files(&run.store), run.before);
    assert_nothing_referenced_lost(&run.store, "touch EIO");
}

#[test]
fn a_chunk_that_is_a_symlink_is_reported_by_gc_and_check_and_never_followed() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "9"]);
    let order = chunkscope::datastore::snapshots::phase1_order(&store).unwrap();
    let d = chunkscope::datastore::IndexFile::open(&order.expected[0])
        .unwrap()
        .digest(0);
    let chunk = store.join(chunkscope::datastore::paths::chunk_rel_path(&d));
    let target = dir.path().join("elsewhere");
    std::fs::rename(&chunk, &target).unwrap();
    std::os::unix::fs::symlink(&target, &chunk).unwrap();

    let (code, report) = check(&store, false);
    assert_eq!(code, 1);
    let problems = report["irregular_chunks"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{report}");
    assert!(problems[0]["problem"]
        .as_str()
        .unwrap()
        .contains("symbolic link"));

    let (code, r, out) = gc(&store, &[]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(n(&r["counters"]["irregular_chunks"]), 1);
    assert!(
        out.contains(&format!("{} is not a regular file", chunk.display())),
        "{out}"
    );
    assert!(
        chunk.symlink_metadata().unwrap().file_type().is_symlink(),
        "not removed"
    );
    assert!(target.exists(), "not followed");
}

#[test]
fn the_mount_daemon_survives_descriptor_pressure() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "10"]);
    let m = Mount::start(&store, dir.path(), false, &[]);
    let pid = m.pid().unwrap() as i32;
    // As root the daemon raised its limit to the kernel's fs.nr_open.
    let nr_open: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a pid this test started; valid out pointer.
    assert_eq!(
        // SAFETY: a pid of ours, valid (or null) rlimit pointers.
        unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut l) },
        0
    );
    // With CAP_SYS_RESOURCE (bit 24) it raised both limits to fs.nr_open; without it (a
    // container may withhold it from root) the soft limit to the hard one.
    let cap_eff = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("CapEff:")
                .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        })
        .unwrap();
    let expected = if cap_eff & (1 << 24) != 0 {
        nr_open
    } else {
        l.rlim_max
    };
    assert_eq!(l.rlim_cur, expected, "soft limit raised");
    // Now squeeze it, and hold more directories open through the mount than it allows.
    let small = libc::rlimit {
        rlim_cur: 64,
        rlim_max: 64,
    };
    // SAFETY: as above.
    assert_eq!(
        // SAFETY: a pid of ours, valid (or null) rlimit pointers.
        unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &small, std::ptr::null_mut()) },
        0
    );
    let mut held = Vec::new();
    let mut emfile = 0;
    for prefix in 0..200u16 {
        match std::fs::File::open(m.path(&format!(".chunks/{prefix:04x}"))) {
            Ok(f) => held.push(f),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
                emfile += 1;
            }
        }
    }
    assert!(emfile > 100, "the daemon ran out: {emfile}");
    // The control socket still answers, and counts what happened.
    let o = run(&["ctl", s(&m.mnt), "stats"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stats: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(n(&stats["fd_exhausted"]) >= emfile, "{stats}");
    assert_eq!(n(&stats["nofile_limit"]), 64);
    drop(held);
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_mark_on_a_shadow_mount_then_a_sweep_on_the_store_keeps_every_referenced_chunk() {
    // The tracing recipe (mark through a --shadow mount), then "now clean up" on the store:
    // the shadow mount's touches never reached the store, so every referenced chunk there
    // still has the previous GC's atime.
    let dir = store_dir();
    let (store, truth) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "19"]);
    let m = Mount::start(&store, dir.path(), false, &["--shadow"]);
    let (code, _, out) = gc(&m.mnt, &["--no-lock", "--phase", "mark"]);
    drop(m);
    assert_eq!(code, 0, "{out}");
    let (code, r, out) = gc(&store, &["--phase", "sweep"]);
    assert_eq!(code, 1, "{out}");
    let kept = n(&r["counters"]["kept_referenced"]);
    assert!(kept > n(&truth["referenced_chunks"]) / 2, "{out}");
    assert_eq!(
        n(&r["counters"]["removed_chunks"]),
        n(&truth["garbage"]["removable"])
    );
    assert_nothing_referenced_lost(&store, "shadow mark, real sweep");
}

#[test]
fn a_listing_error_in_the_sweep_names_the_directory_and_what_was_removed() {
    let run = gc_through_mount(
        "20",
        &["--fault", "readdir path=.chunks/8000 errno=EIO"],
        &["--strategy", "lru"],
    );
    let out = &run.out;
    assert_eq!(run.code, 2, "{out}");
    assert!(
        out.contains(&format!(
            "listing chunk directory {} failed - Input/output error",
            run.mnt.join(".chunks/8000").display()
        )),
        "{out}"
    );
    let removed = n(&run.report["report"]["counters"]["removed_chunks"]);
    assert!(removed > 0, "half the sweep was done: {out}");
    assert!(
        out.contains(&format!(
            "aborted in phase 2 after removing {removed} files"
        )),
        "{out}"
    );
    assert_eq!(run.before - removable_files(&run.store), removed);
    assert_nothing_referenced_lost(&run.store, "readdir EIO");
}

#[test]
fn a_mount_killed_in_the_sweep_aborts_and_says_what_was_removed() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "21"]);
    let before = removable_files(&store);
    // The 10th unlink is held for 5 s (performed, its reply delayed): the mount dies then.
    let mut m = Mount::start(
        &store,
        dir.path(),
        false,
        &["--fault", "unlink nth=10 stall=5s"],
    );
    let mnt = m.mnt.clone();
    let t = std::thread::spawn(move || gc(&mnt, &["--strategy", "lru"]));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // Wait for the stall: nine files gone (and the tenth going).
    while before - removable_files(&store) < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "the sweep never reached the stall"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    m.kill();
    let (code, r, out) = t.join().unwrap();
    drop(m);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("aborted in phase 2 after removing 9 files"),
        "{out}"
    );
    assert_eq!(n(&r["report"]["counters"]["unlinks"]), 9);
    // The tenth was done by the backing store, its reply lost with the mount.
    assert_eq!(before - removable_files(&store), 10);
    assert_nothing_referenced_lost(&store, "mount killed");
}

#[test]
fn on_a_shadow_mount_the_report_counts_what_pbs_would_have_removed() {
    let run = gc_through_mount(
        "22",
        &[
            "--shadow",
            "--fault",
            "setattr-atime errno=ENOENT prob=0.01",
        ],
        &["--no-lock"],
    );
    let out = &run.out;
    assert_eq!(run.code, 1, "{out}");
    let c = &run.report["counters"];
    assert!(n(&c["missing_chunks"]) > 0, "the faults fired: {out}");
    let kept = n(&c["kept_referenced"]);
    assert!(kept > 0 && kept <= n(&c["missing_chunks"]), "{out}");
    let named = run.report["kept_referenced"].as_array().unwrap();
    assert!(named.iter().all(|k| k["reason"] == "missing-in-phase1"));
    assert!(out.contains("Kept referenced chunks PBS would have removed: "));
    assert_eq!(
        removable_files(&run.store),
        run.before,
        "a shadow mount changes nothing"
    );
}

/// Issue 40, point 7: a stat in the sweep that fails with anything but ENOENT was skipped
/// silently (PBS's way); now the entry is kept, named in a warning, counted, and the run ends
/// with warnings.
#[test]
fn a_stat_error_in_the_sweep_is_counted_named_and_kept() {
    let run = gc_through_mount(
        "11",
        &["--fault", "getattr path=.chunks/*/* errno=EIO nth=3"],
        &[],
    );
    let out = &run.out;
    assert_eq!(run.code, 1, "{out}");
    assert_eq!(n(&run.report["counters"]["stat_errors"]), 1, "{out}");
    assert!(
        out.contains("failed - Input/output error (os error 5): not removed")
            && out.contains("Entries that could not be stat'ed (kept): 1"),
        "{out}"
    );
    assert_eq!(
        run.before - removable_files(&run.store),
        n(&run.report["counters"]["unlinks"])
    );
    assert_nothing_referenced_lost(&run.store, "stat EIO");
}

/// Each chunk file's name and atime (ns), sorted: a stat changes no atime.
fn chunk_atimes(store: &Path) -> Vec<(String, i128)> {
    use std::os::unix::fs::MetadataExt;
    let mut v = Vec::new();
    for d in std::fs::read_dir(store.join(".chunks")).unwrap() {
        for f in std::fs::read_dir(d.unwrap().path()).unwrap() {
            let f = f.unwrap();
            let m = f.metadata().unwrap();
            let ns = m.atime() as i128 * 1_000_000_000 + m.atime_nsec() as i128;
            v.push((f.file_name().to_string_lossy().into_owned(), ns));
        }
    }
    v.sort();
    v
}

/// Issue 42, point 3: `gc` on a --shadow mount needs no flag. It learns from the mount's
/// daemon that nothing it does reaches the store, says so once, takes no lock (the mount
/// would refuse to create .lock), skips the atime check (it writes the zero chunk), and its
/// task log says what a real run would have removed, never "Removed". The store keeps every
/// chunk and every atime. `--no-atime-check` on a store says that flag, not PBS's tuning.
/// (And point 4: the unmount's log sums the model up in a sentence, not JSON.)
#[test]
fn a_gc_on_a_shadow_mount_needs_no_flag_and_says_what_it_would_remove() {
    let dir = store_dir();
    let (store, truth) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "23"]);
    let before = chunk_atimes(&store);
    let m = Mount::start(
        &store,
        dir.path(),
        false,
        &["--shadow", "--model", "zfs-hdd", "--time-scale", "0"],
    );
    let json = dir.path().join("gc.json");
    let o = run(&[
        "gc",
        &format!("--json={}", json.display()),
        m.mnt.to_str().unwrap(),
    ]);
    drop(m);
    let out = stdout(&o) + &stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert_eq!(
        out.matches("is a --shadow chunkscope mount").count(),
        1,
        "{out}"
    );
    assert!(out.contains("Access time update check skipped"), "{out}");
    let removable = n(&truth["garbage"]["removable"]);
    assert!(removable > 0);
    assert!(
        out.contains(&format!("Would remove chunks: {removable}\n")),
        "{out}"
    );
    assert!(
        !out.contains("Removed chunks") && !out.contains("Removed garbage"),
        "{out}"
    );
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["options"]["shadow"], true);
    assert_eq!(
        r["options"]["atime_check"], false,
        "skipped, so not reported as run"
    );
    assert_eq!(n(&r["counters"]["removed_chunks"]), removable);
    assert_eq!(chunk_atimes(&store), before, "the store is as it was");
    // Point 4: the unmount sums the model up in words; its JSON is --stats's.
    let log = std::fs::read_to_string(dir.path().join("mount.log")).unwrap();
    assert!(
        log.contains("model zfs-hdd: ") && log.contains("requests charged") && !log.contains("{\""),
        "{log}"
    );
    // On the store itself, with the flag: the log names the flag.
    let (code, r, out) = gc(&store, &["--phase", "mark"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(r["options"]["shadow"], false);
    assert_eq!(r["options"]["atime_check"], false);
    assert!(
        out.contains("Access time update check disabled (--no-atime-check).")
            && !out.contains("tuning options"),
        "{out}"
    );
}

/// The newest snapshot directory of the store's first group in the root namespace, relative
/// to the store, and the index files in it.
fn newest_snapshot(store: &Path) -> (String, usize) {
    let mut groups: Vec<_> = ["vm", "ct", "host"]
        .iter()
        .flat_map(|t| std::fs::read_dir(store.join(t)).into_iter().flatten())
        .map(|e| e.unwrap().path())
        .collect();
    groups.sort();
    let group = groups.first().expect("a group in the root namespace");
    let mut snaps: Vec<_> = std::fs::read_dir(group)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    snaps.sort();
    let snap = snaps.pop().expect("a snapshot");
    let indexes = std::fs::read_dir(&snap)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            let name = name.to_string_lossy();
            name.ends_with(".fidx") || name.ends_with(".didx")
        })
        .count();
    let rel = snap
        .strip_prefix(store)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    (rel, indexes)
}

#[test]
fn a_listing_of_a_snapshot_that_says_enoent_stops_the_gc_before_its_sweep() {
    // glibc's readdir takes ENOENT from getdents64 for the end of the directory: a GC that
    // listed with it saw an empty snapshot, never read its indexes, and swept their chunks.
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "23"]);
    let (snap, indexes) = newest_snapshot(&store);
    assert!(indexes > 0, "{snap} holds indexes");
    let before = removable_files(&store);
    let rule = format!("readdir path={snap} errno=ENOENT");
    let m = Mount::start(&store, dir.path(), false, &["--fault", &rule]);
    for phases in [&["--phase", "sweep"][..], &[]] {
        let (code, r, out) = gc(&m.mnt, phases);
        assert_eq!(code, 2, "{phases:?}: {out}");
        assert!(out.contains(&snap), "{phases:?} names the snapshot: {out}");
        assert!(out.contains("nothing was removed"), "{phases:?}: {out}");
        assert_eq!(r["report"]["counters"]["removed_chunks"], 0, "{out}");
    }
    drop(m);
    assert_eq!(removable_files(&store), before);
    assert_nothing_referenced_lost(&store, "snapshot listing ENOENT");
}
