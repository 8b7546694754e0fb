//! Issue 40, point 1: another store's chunks are never touched. A chunk directory that is a
//! symbolic link, or a mount of another filesystem (or another directory bound over it),
//! stops the GC before it touches anything, directly and through a mount, and `check` and
//! `gc --dry-run` name it. Before the fix, `gc x` exited 0 and removed chunks of the store the
//! link pointed into.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// Stores `x` (seed 1) and `y` (seed 2), and a chunk directory both have chunks in.
fn two_stores(dir: &Path) -> (PathBuf, PathBuf, String) {
    let (x, _) = gen(dir, "x", &["--preset", "tiny", "--seed", "1"]);
    let (y, _) = gen(dir, "y", &["--preset", "tiny", "--seed", "2"]);
    let p = shared_chunk_dir(&x, &y);
    (x, y, p)
}

/// The GC on `target` (the store `x` or a mount of it) refuses, naming `odd`; nothing of
/// `x` or `y` changed.
fn assert_refused(target: &Path, x: &Path, y: &Path, odd: &str, what: &str) {
    let (x_before, y_before) = (fingerprint(&x.join(".chunks")), fingerprint(y));
    for args in [
        &["--strategy", "lru"][..],
        &["--dry-run"],
        &["--phase", "sweep"],
    ] {
        let (code, report, out) = gc(target, args);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(
            out.contains(&format!("{odd} is {what}")) && out.contains("nothing was touched"),
            "{args:?}: {out}"
        );
        assert_eq!(report["outcome"], "aborted", "{args:?}");
        assert_eq!(report["report"]["counters"]["unlinks"], 0, "{args:?}");
        assert_eq!(
            report["report"]["counters"]["utimensat_calls"], 0,
            "{args:?}"
        );
    }
    assert_same_files(&y_before, &fingerprint(y), "the other store is untouched");
    assert_same_files(
        &x_before,
        &fingerprint(&x.join(".chunks")),
        "the store is untouched",
    );
}

#[test]
fn a_symlinked_chunk_directory_stops_the_gc_directly_and_through_a_mount() {
    let dir = store_dir();
    let (x, y, p) = two_stores(dir.path());
    let link = x.join(".chunks").join(&p);
    std::fs::rename(&link, dir.path().join("aside")).unwrap();
    std::os::unix::fs::symlink(y.join(".chunks").join(&p), &link).unwrap();
    let odd = format!(".chunks/{p}");
    let what = format!(
        "a symbolic link to {}",
        y.join(".chunks").join(&p).display()
    );

    assert_refused(&x, &x, &y, &odd, &what);
    let (code, r) = check(&x, false);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["odd_chunk_dirs"][0]["path"], link.display().to_string());
    assert_eq!(
        r["odd_chunk_dirs"][0]["problem"],
        Value::String(what.clone())
    );

    // Through a (non-shadow) mount the link resolves outside the mount, to `y` itself.
    let mount_dir = tempfile::tempdir_in(dir.path()).unwrap();
    let mut m = Mount::start(&x, mount_dir.path(), false, &[]);
    assert_refused(&m.mnt, &x, &y, &odd, &what);
    let log = m.stop();
    assert!(
        log.contains(&format!(
            "{odd} is {what}: not the store's own chunk directory"
        )),
        "the mount said so when it started: {log}"
    );
    let (code, r) = check(&y, true);
    assert_eq!(code, 0, "{r}");
}

#[test]
fn a_chunk_directory_bound_from_elsewhere_stops_the_gc_directly_and_through_a_mount() {
    let dir = store_dir();
    let (x, y, p) = two_stores(dir.path());
    let odd = format!(".chunks/{p}");
    let what = "a mount point (";
    {
        let _bind = Bind::new(&y.join(".chunks").join(&p), &x.join(".chunks").join(&p));
        assert_refused(&x, &x, &y, &odd, what);
        let (code, r) = check(&x, false);
        assert_eq!(code, 1, "{r}");
        assert!(r["odd_chunk_dirs"][0]["problem"]
            .as_str()
            .unwrap()
            .starts_with(what));
        // Through a mount, the daemon checks the backing store's mounts.
        let mount_dir = tempfile::tempdir_in(dir.path()).unwrap();
        let m = Mount::start(&x, mount_dir.path(), false, &[]);
        assert_refused(&m.mnt, &x, &y, &odd, what);
    }
    // A chunk file with another file bound over it is named too.
    let chunk = std::fs::read_dir(x.join(".chunks").join(&p))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::write(&elsewhere, b"not this store's").unwrap();
    let _bind = Bind::new(&elsewhere, &chunk);
    let rel = format!(
        ".chunks/{p}/{}",
        chunk.file_name().unwrap().to_str().unwrap()
    );
    assert_refused(&x, &x, &y, &rel, what);
}

/// Point 6: a store that vanishes under the GC (here renamed away mid phase 1, as a detached
/// mount leaves an empty mountpoint) stops it with one message, not a warning per chunk.
#[test]
fn a_store_that_vanishes_in_phase_1_stops_the_gc_with_one_message() {
    use chunkscope::gc::{self, log::TaskLog, GcOptions, Hooks};
    use chunkscope::store::dir::DirStore;
    let dir = store_dir();
    let (s, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "3"]);
    let gone = dir.path().join("gone");
    let before = fingerprint(&s.join(".chunks"));
    let store = DirStore::open(&s).unwrap();
    let log_path = dir.path().join("task.log");
    let mut log = TaskLog::new(Box::new(std::fs::File::create(&log_path).unwrap()), false);
    let opts = GcOptions {
        atime_check: false,
        ..GcOptions::default()
    };
    let hooks = Hooks {
        boundary: None,
        after_index: Some(Box::new(|i| {
            if i == 1 {
                std::fs::rename(&s, &gone).unwrap();
                std::fs::create_dir_all(s.join(".chunks")).unwrap();
            }
        })),
        cutoff_fixed: None,
    };
    let e = gc::run(&store, &opts, &mut log, hooks).unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("aborted in phase 1 before anything was removed"),
        "{msg}"
    );
    assert!(msg.contains("the store vanished under the GC"), "{msg}");
    drop(log);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains("non-existent chunk"), "{log}");
    // What the GC touched before the store left is the store's; nothing was removed.
    let after = fingerprint(&gone.join(".chunks"));
    assert_eq!(after.len(), before.len());
}

/// Point 6, both sides: a mount stopped under a running GC. The first SIGINT is refused and
/// names the GC's process; the second forces the unmount; the GC then stops before its sweep
/// with one message that the store vanished (it listed an empty tree and warned of tens of
/// missing chunks before), and the backing store lost nothing.
#[test]
fn a_mount_forced_away_under_a_gc_stops_it_with_one_message() {
    let dir = store_dir();
    let (s, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "4"]);
    let before = fingerprint(&s.join(".chunks")).len();
    let mount_dir = tempfile::tempdir_in(dir.path()).unwrap();
    let mut m = Mount::start(
        &s,
        mount_dir.path(),
        false,
        &["--fault", "setattr-atime nth=2 stall=3s"],
    );
    let gc_run = bin()
        .args(["gc", "--no-atime-check", "--json", m.mnt.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let socket = chunkscope::overlay::control::socket_for(&m.mnt);
    let mut client = chunkscope::overlay::control::Client::connect(&socket).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while client.stats().unwrap().held_replies.unwrap_or(0) == 0 {
        assert!(std::time::Instant::now() < deadline, "the GC never touched");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let pid = m.pid().unwrap() as i32;
    // SAFETY: signals to the mount this test started.
    unsafe { libc::kill(pid, libc::SIGINT) };
    while !m.log().contains("not unmounting") {
        assert!(std::time::Instant::now() < deadline, "{}", m.log());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        m.log()
            .contains(&format!("pid {} (chunkscope", gc_run.id())),
        "{}",
        m.log()
    );
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let o = gc_run.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("the store vanished under the GC"), "{out}");
    assert!(out.contains("before anything was removed"), "{out}");
    assert!(!out.contains("non-existent chunk"), "{out}");
    let (code, log) = m.stop_with_status();
    assert_eq!(code, Some(2), "{log}");
    assert_eq!(
        fingerprint(&s.join(".chunks")).len(),
        before,
        "nothing removed"
    );
}
