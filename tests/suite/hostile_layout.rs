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

/// The GC of `target` with a directory of `y` bound over `x`'s chunk directory `p` as its
/// sweep starts (after the layout check): it stops at that directory, naming it, and removes
/// nothing of `y`. Before issue 47 the sweep went through the bound directory (same device,
/// `O_NOFOLLOW` passed) and removed `y`'s referenced chunks there with exit 0.
fn bound_during_the_sweep(target: &Path, x: &Path, y: &Path, p: &str) -> String {
    let y_before = fingerprint(&y.join(".chunks"));
    let msg = gc_binding_at_the_sweep(
        target,
        &y.join(".chunks").join(p),
        &x.join(".chunks").join(p),
    );
    assert_same_files(
        &y_before,
        &fingerprint(&y.join(".chunks")),
        "the other store lost nothing",
    );
    assert!(msg.contains("aborted in phase 2"), "{msg}");
    assert!(
        msg.contains(&format!(".chunks/{p} is a mount point")),
        "{msg}"
    );
    msg
}

/// A GC of `target` (in this process) that must stop: `from` is bound over `over` as its
/// sweep starts (after the layout check), and undone when it has ended. Its error.
fn gc_binding_at_the_sweep(target: &Path, from: &Path, over: &Path) -> String {
    use chunkscope::gc::{self, log::TaskLog, GcOptions, GcPhase, Hooks};
    use chunkscope::store::dir::DirStore;
    let store = DirStore::open(target).unwrap();
    let mut log = TaskLog::new(Box::new(std::io::sink()), false);
    let opts = GcOptions {
        atime_check: false,
        ..GcOptions::default()
    };
    let mut bind = None;
    let mut boundary = |b: gc::Boundary| {
        if b.phase == GcPhase::Sweep && b.start {
            bind = Some(Bind::new(from, over));
        }
        Ok(())
    };
    let hooks = Hooks {
        boundary: Some(&mut boundary),
        ..Hooks::default()
    };
    let e = gc::run(&store, &opts, &mut log, hooks).expect_err("the sweep must stop");
    drop(bind);
    format!("{e:#}")
}

/// Issue 47, point 1: a directory bound over a chunk directory while the sweep runs, directly
/// and through a mount (whose daemon refuses a lookup that lands on another mount: `EXDEV`).
#[test]
fn a_directory_bound_over_a_chunk_directory_during_the_sweep_stops_it() {
    let dir = store_dir();
    let (x, y, p) = two_stores(dir.path());
    bound_during_the_sweep(&x, &x, &y, &p);
    // Through a mount whose kernel keeps no directory entry (--dir-ttl 0): the sweep's open
    // of the chunk directory is a lookup the daemon answers, after the bind.
    let mount_dir = tempfile::tempdir_in(dir.path()).unwrap();
    let mut m = Mount::start(&x, mount_dir.path(), false, &["--dir-ttl", "0"]);
    let msg = bound_during_the_sweep(&m.mnt, &x, &y, &p);
    assert!(msg.contains("in the mount's backing store"), "{msg}");
    m.stop();
}

/// A symbolically linked chunk directory found by the sweep itself is named as a link (the
/// kernel answers ENOTDIR to `O_NOFOLLOW|O_DIRECTORY` on a link, not ELOOP).
#[test]
fn a_chunk_directory_linked_during_the_sweep_is_named_as_a_link() {
    use chunkscope::store::{dir::DirStore, ChunkStore};
    let dir = store_dir();
    let (x, y, p) = two_stores(dir.path());
    let store = DirStore::open(&x).unwrap();
    let link = x.join(".chunks").join(&p);
    std::fs::rename(&link, dir.path().join("aside")).unwrap();
    std::os::unix::fs::symlink(y.join(".chunks").join(&p), &link).unwrap();
    let e = store
        .open_dir(u16::from_str_radix(&p, 16).unwrap())
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(
        msg.contains(&format!(
            ".chunks/{p} is a symbolic link to {}",
            y.join(".chunks").join(&p).display()
        )),
        "{msg}"
    );
    std::fs::remove_file(&link).unwrap();
    std::fs::write(&link, b"").unwrap();
    let msg = store
        .open_dir(u16::from_str_radix(&p, 16).unwrap())
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains(&format!(".chunks/{p} is a regular file")),
        "{msg}"
    );
}

/// Issue 47, point 2: a path of an index (`*.fidx`, `*.didx`) that is not a regular file of
/// the store: a symbolic link (to a valid index outside the store, or dangling), a FIFO, a
/// directory, a device. PBS's rule: it is an index that cannot be read, so the GC stops
/// before its sweep (exit 2, nothing removed, the path named); `check` names it (exit 1);
/// `survey` names it and says a GC would stop, instead of promising its garbage. Before, each
/// was skipped without a word: check OK, gc exit 0, the chunks only that index referenced
/// swept.
#[test]
fn an_index_path_that_is_not_a_regular_file_stops_the_gc_before_its_sweep() {
    let dir = store_dir();
    let (x, _) = gen(dir.path(), "x", &["--preset", "tiny", "--seed", "5"]);
    let index = index_files(&x).into_iter().next().expect("an index");
    let outside = dir.path().join("outside.fidx");
    std::fs::rename(&index, &outside).unwrap();
    let chunks = |s: &Path| fingerprint(&s.join(".chunks")).len();
    let before = chunks(&x);
    type Make = Box<dyn Fn(&Path)>;
    let outside2 = outside.clone();
    let kinds: Vec<(&str, Make)> = vec![
        (
            "a symbolic link",
            Box::new(move |p| std::os::unix::fs::symlink(&outside2, p).unwrap()),
        ),
        (
            "a symbolic link",
            Box::new(|p| std::os::unix::fs::symlink("/nonexistent/x.fidx", p).unwrap()),
        ),
        ("a FIFO", Box::new(|p| mknod(p, libc::S_IFIFO | 0o644, 0))),
        ("a directory", Box::new(|p| std::fs::create_dir(p).unwrap())),
        (
            "a character device",
            Box::new(|p| mknod(p, libc::S_IFCHR | 0o644, libc::makedev(1, 3))),
        ),
    ];
    let name = index.display().to_string();
    for (what, make) in kinds {
        make(&index);
        for args in [&[][..], &["--phase", "sweep"], &["--strategy", "batched"]] {
            let (code, report, out) = gc(&x, args);
            assert_eq!(code, 2, "{what} {args:?}: {out}");
            assert!(
                out.contains(&name)
                    && out.contains(what)
                    && out.contains("before anything was removed"),
                "{what} {args:?}: {out}"
            );
            assert_eq!(
                report["report"]["counters"]["unlinks"], 0,
                "{what} {args:?}"
            );
        }
        assert_eq!(chunks(&x), before, "{what}: nothing removed");
        let (code, r) = check(&x, false);
        assert_eq!(code, 1, "{what}: {r}");
        let named = r["corrupt_indexes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["path"] == name.as_str())
            .unwrap_or_else(|| panic!("{what}: check names it: {r}"));
        assert!(named["problem"].as_str().unwrap().contains(what), "{named}");
        let o = run(&["survey", "--json", x.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{what}: {}", stderr(&o));
        let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(s["gc_would_stop"], true, "{what}");
        assert!(
            s["unreadable_indexes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["path"] == name.as_str()),
            "{what}: {s}"
        );
        let text = run(&["survey", x.to_str().unwrap()]);
        assert!(
            stdout(&text).contains("a GC now would stop before its sweep and remove none"),
            "{}",
            stdout(&text)
        );
        match std::fs::symlink_metadata(&index).unwrap().is_dir() {
            true => std::fs::remove_dir(&index).unwrap(),
            false => std::fs::remove_file(&index).unwrap(),
        }
    }
    // The index back where it was: the store is whole again.
    std::fs::rename(&outside, &index).unwrap();
    let (code, report, out) = gc(&x, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        report["counters"]["index_file_count"].as_u64().unwrap() > 0,
        "{report}"
    );
}

/// The creation-order scan (`mount --layout-order creation`'s ranking) walks a directory bound
/// inside the store once: before, a store bound into one of its own directories was walked
/// twice, each directory ranked twice (and a chain of such binds walked deeper each time).
#[test]
fn the_creation_order_scan_walks_a_directory_bound_inside_the_store_once() {
    let dir = store_dir();
    let root = dir.path().join("s");
    std::fs::create_dir_all(root.join("vm/100/loop")).unwrap();
    std::fs::write(root.join("vm/100/index.json.blob"), b"x").unwrap();
    let _bind = Bind::new(&root, &root.join("vm/100/loop"));
    let inos = chunkscope::model::order::scan_creation_order(&root).unwrap();
    let mut sorted = inos.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), inos.len(), "an inode ranked twice: {inos:?}");
    // s, vm, 100 and loop (the bound directory is the store itself: ranked as s), one file.
    assert_eq!(inos.len(), 4, "{inos:?}");
}

/// A store's first namespace (`ns/<name>`), a type directory of the root namespace, a group
/// in it and that group's first snapshot (in readdir order: any will do).
fn tree_levels(x: &Path) -> [PathBuf; 4] {
    let first = |d: &Path| {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.is_dir())
            .unwrap_or_else(|| panic!("a directory in {}", d.display()))
    };
    let ty = x.join("vm");
    let group = first(&ty);
    let snapshot = first(&group);
    [first(&x.join("ns")), ty, group, snapshot]
}

/// Issue 63, point 1: a namespace, type, group or snapshot directory moved elsewhere and put
/// back as a symbolic link (absolute or relative). PBS's GC follows no link, so it passes the
/// indexes below it by and removes the chunks only they reference; before, chunkscope did too
/// (exit 0, 1,009 referenced chunks gone for a namespace). Now the GC stops before its sweep
/// naming the link (exit 2, nothing removed), whatever the phases or the dry run; `check` and
/// `survey` stop naming it too; through a mount as directly. Nothing here depends on inode
/// numbers.
#[test]
fn a_tree_directory_that_is_a_symlink_stops_the_gc_before_its_sweep() {
    let dir = store_dir();
    let (x, _) = gen(dir.path(), "x", &["--preset", "tiny", "--seed", "5"]);
    let [ns, _, group, snapshot] = tree_levels(&x);
    let chunks = |s: &Path| fingerprint(&s.join(".chunks"));
    let before = chunks(&x);
    for (level, relative) in [
        (ns.clone(), false),
        (group, true),
        (snapshot, false),
        (x.join("vm"), true),
    ] {
        let aside = dir.path().join("aside");
        std::fs::rename(&level, &aside).unwrap();
        if relative {
            let up = "../".repeat(level.strip_prefix(&x).unwrap().components().count() - 1);
            std::os::unix::fs::symlink(format!("{up}../aside"), &level).unwrap();
        } else {
            std::os::unix::fs::symlink(&aside, &level).unwrap();
        }
        assert!(
            std::fs::metadata(&level).unwrap().is_dir(),
            "the link leads"
        );
        let name = format!("{} is a symbolic link to a directory", level.display());
        for args in [&[][..], &["--phase", "sweep"], &["--dry-run"]] {
            let (code, report, out) = gc(&x, args);
            assert_eq!(code, 2, "{level:?} {args:?}: {out}");
            assert!(
                out.contains(&name) && out.contains("PBS's GC follows no link"),
                "{level:?} {args:?}: {out}"
            );
            assert_eq!(report["report"]["counters"]["unlinks"], 0, "{args:?}");
        }
        assert_same_files(&before, &chunks(&x), "nothing removed");
        let o = run(&["check", x.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
        assert!(stderr(&o).contains(&name), "check: {}", stderr(&o));
        let o = run(&["survey", x.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
        assert!(stderr(&o).contains(&name), "survey: {}", stderr(&o));
        std::fs::remove_file(&level).unwrap();
        std::fs::rename(&aside, &level).unwrap();
    }
    // Through a mount: the link is the mount's entry, its target outside the mount.
    let aside = dir.path().join("aside");
    std::fs::rename(&ns, &aside).unwrap();
    std::os::unix::fs::symlink(&aside, &ns).unwrap();
    let mount_dir = tempfile::tempdir_in(dir.path()).unwrap();
    let m = Mount::start(&x, mount_dir.path(), false, &[]);
    let (code, report, out) = gc(&m.mnt, &[]);
    assert_eq!(code, 2, "{out}");
    let rel = ns.strip_prefix(&x).unwrap().display().to_string();
    assert!(
        out.contains(&format!("{rel} is a symbolic link to a directory")),
        "{out}"
    );
    assert_eq!(report["report"]["counters"]["unlinks"], 0);
    drop(m);
    assert_same_files(&before, &chunks(&x), "nothing removed through the mount");
    std::fs::remove_file(&ns).unwrap();
    std::fs::rename(&aside, &ns).unwrap();
    let (code, _, out) = gc(&x, &[]);
    assert_eq!(code, 0, "the store whole again: {out}");
}

/// Issue 63, point 1: a namespace, group or snapshot directory that is a mount point (its
/// directory, moved aside, bound back over an empty one) is read through: the GC reads every index below
/// it and removes exactly the garbage the generator made, and `check` finds every referenced
/// chunk afterwards. Nothing here depends on inode numbers.
#[test]
fn a_tree_directory_that_is_a_mount_point_is_read_through() {
    let dir = store_dir();
    let (x, truth) = gen(dir.path(), "x", &["--preset", "tiny", "--seed", "5"]);
    let [ns, ty, group, _] = tree_levels(&x);
    // A snapshot of another group than the one bound (a rename out of a bound directory
    // would cross into another mount).
    let snapshot = std::fs::read_dir(&ty)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|g| *g != group)
        .find_map(|g| {
            std::fs::read_dir(g)
                .unwrap()
                .map(|e| e.unwrap().path())
                .next()
        })
        .expect("a second group with a snapshot");
    let mut binds = Vec::new();
    for (i, at) in [ns, group, snapshot].into_iter().enumerate() {
        let aside = dir.path().join(format!("aside{i}"));
        std::fs::rename(&at, &aside).unwrap();
        std::fs::create_dir(&at).unwrap();
        binds.push(Bind::new(&aside, &at));
    }
    let (code, report, out) = gc(&x, &["--strategy", "lru"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        report["counters"]["removed_chunks"], truth["garbage"]["removable"],
        "{out}"
    );
    assert_eq!(report["counters"]["index_file_count"], truth["index_files"]);
    let (code, r) = check(&x, false);
    assert_eq!(code, 0, "every referenced chunk is there: {r}");
}

/// Issue 63, point 9: the README says a store whose root or `.chunks` is no longer the
/// directory opened stops the run; before, a directory bound over either while the sweep ran
/// went unseen (the sweep went on through its open descriptors, exit 0). Now the sweep checks
/// every 256 chunk directories and stops with one message, directly and through a mount (the
/// bind then stands over the mount's root or its `.chunks`); the other store loses nothing.
#[test]
fn a_directory_bound_over_the_store_or_its_chunks_during_the_sweep_stops_it() {
    let dir = store_dir();
    let (x, y, _) = two_stores(dir.path());
    let mount_dir = tempfile::tempdir_in(dir.path()).unwrap();
    let m = Mount::start(&x, mount_dir.path(), false, &[]);
    for (target, over) in [
        (x.clone(), x.join(".chunks")),
        (x.clone(), x.clone()),
        (m.mnt.clone(), m.mnt.join(".chunks")),
        (m.mnt.clone(), m.mnt.clone()),
    ] {
        let from = if over.ends_with(".chunks") {
            y.join(".chunks")
        } else {
            y.clone()
        };
        let y_before = fingerprint(&y);
        let msg = gc_binding_at_the_sweep(&target, &from, &over);
        assert!(
            msg.contains("aborted in phase 2") && msg.contains("the store vanished under the GC"),
            "{over:?}: {msg}"
        );
        assert_same_files(&y_before, &fingerprint(&y), "the other store lost nothing");
    }
    drop(m);
}
