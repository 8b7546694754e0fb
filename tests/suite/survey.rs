//! `chunkscope survey`: counts equal `check`'s and an independent `find`'s, the layout
//! figures equal ones computed here from `stat`, nothing of the store changes (atimes of
//! files and directories included) while another process writes and removes files in it,
//! and bad input is refused by name.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::common::*;

fn survey_json(store: &Path, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let mut args = vec!["survey", "--json"];
    args.extend_from_slice(extra);
    args.push(store.to_str().unwrap());
    let o = run(&args);
    let report = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&o), stderr(&o)));
    (o.status.code().unwrap(), report, stderr(&o))
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Chunk files counted by `find` (regular files named by 64 hex digits).
fn find_count(store: &Path) -> u64 {
    let o = std::process::Command::new("find")
        .arg(store.join(".chunks"))
        .args([
            "-type",
            "f",
            "-regextype",
            "posix-extended",
            "-regex",
            ".*/[0-9a-f]{64}",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    o.stdout.iter().filter(|&&b| b == b'\n').count() as u64
}

/// Per chunk directory, its chunks' inode numbers from `stat` (the test's own count).
fn inodes_by_dir(store: &Path) -> Vec<Vec<u64>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(store.join(".chunks")).unwrap() {
        let e = e.unwrap();
        let mut inos: Vec<u64> = std::fs::read_dir(e.path())
            .unwrap()
            .map(|f| f.unwrap())
            .filter(|f| f.file_name().len() == 64)
            .map(|f| f.path().symlink_metadata().unwrap().ino())
            .collect();
        inos.sort();
        out.push(inos);
    }
    out
}

fn median(mut v: Vec<u64>) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let mid = v.len() / 2;
    *v.select_nth_unstable(mid).1
}

/// Chunks, references, garbage: `check`'s and `find`'s; blocks per chunk and the median
/// inode gap: computed here from each chunk's `stat` (ZFS's 32 dnodes a block, which the
/// survey assumes on tmpfs and says so); the survey file holds what the report counts.
#[test]
fn a_surveys_counts_are_checks_finds_and_stats() {
    let tmp = store_dir();
    let (store, _) = gen(tmp.path(), "s", &["--preset", "tiny", "--seed", "3"]);
    let out = tmp.path().join("s.survey");
    let (code, r, err) = survey_json(&store, &["--out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (_, c) = check(&store, false);
    assert_eq!(u(&r["chunks"]), u(&c["chunk_files"]));
    assert_eq!(u(&r["chunks"]), find_count(&store));
    assert_eq!(u(&r["referenced"]), u(&c["referenced_chunks"]));
    assert_eq!(u(&r["references"]), u(&c["references"]));
    assert_eq!(u(&r["index_files"]), u(&c["index_files"]));
    assert_eq!(u(&r["index_data_bytes"]), u(&c["index_data_bytes"]));
    assert!(u(&r["index_data_bytes"]) > 0);
    for k in ["chunks", "removable", "pending", "bytes"] {
        assert_eq!(u(&r["garbage"][k]), u(&c["garbage"][k]), "garbage {k}");
    }
    assert_eq!(u(&r["unreferenced"]), u(&c["garbage"]["chunks"]));
    assert_eq!(
        (u(&r["chunk_dirs"]), u(&r["missing_chunk_dirs"])),
        (65_536, 0)
    );
    assert_eq!(u(&r["referenced_not_listed"]), 0);
    assert_eq!(u(&r["noatime_refused"]), 0, "root may always use O_NOATIME");

    let dirs = inodes_by_dir(&store);
    let with: Vec<&Vec<u64>> = dirs.iter().filter(|d| !d.is_empty()).collect();
    let blocks_per_chunk = with
        .iter()
        .map(|d| {
            let mut b: Vec<u64> = d.iter().map(|i| i / 32).collect();
            b.dedup();
            b.len() as f64 / d.len() as f64
        })
        .sum::<f64>()
        / with.len() as f64;
    let got = r["blocks_per_chunk"].as_f64().unwrap();
    assert!(
        (got - blocks_per_chunk).abs() < 1e-9,
        "{got} vs {blocks_per_chunk}"
    );
    let gap = median(
        with.iter()
            .filter(|d| d.len() > 1)
            .map(|d| median(d.windows(2).map(|w| w[1] - w[0]).collect()))
            .collect(),
    );
    assert_eq!(u(&r["median_inode_gap"]), gap);
    let mut all: Vec<u64> = dirs.iter().flatten().map(|i| i / 32).collect();
    all.sort();
    all.dedup();
    assert_eq!(u(&r["store_blocks"]), all.len() as u64);
    if statfs_type(&store) == Some(0x0102_1994) {
        assert!(r["layout_assumed"].as_bool().unwrap());
        assert!(r["layout"].as_str().unwrap().contains("assumed"));
    }

    let f = chunkscope::survey::file::SurveyFile::read(&out).unwrap();
    assert_eq!(f.chunks.len() as u64, u(&r["chunks"]));
    assert_eq!(f.indexes.len() as u64, u(&r["index_files"]));
    let refs: usize = f.indexes.iter().map(|i| i.refs.len()).sum();
    assert_eq!(refs as u64, u(&r["references"]));
    assert_eq!(f.unreferenced.len() as u64, u(&r["garbage"]["chunks"]));
    // Each chunk's inode in the file is the one `stat` gives.
    for (d, ino) in f.chunks.iter().step_by(97) {
        let p = store
            .join(".chunks")
            .join(&d.to_hex()[..4])
            .join(d.to_hex());
        assert_eq!(p.symlink_metadata().unwrap().ino(), *ino);
    }
    let bytes: u64 = f.unreferenced.iter().map(|x| x.size).sum();
    assert_eq!(bytes, u(&r["garbage"]["bytes"]));

    // A store reached through a link (/datastore/pbs -> the pool's mountpoint), as `check`
    // and `gc` take it: the same counts.
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&store, &link).unwrap();
    let (code, l, err) = survey_json(&link, &[]);
    assert_eq!(code, 0, "{err}");
    for k in [
        "chunks",
        "referenced",
        "references",
        "index_files",
        "unreferenced",
    ] {
        assert_eq!(l[k], r[k], "{k} through a link");
    }
}

/// The names in `dir`, listed with O_NOATIME (as the survey lists: a listing of std's
/// would set the atimes this test watches).
fn names(dir: &Path) -> Vec<PathBuf> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    let (fd, noatime) = chunkscope::fsutil::open_dir_noatime(libc::AT_FDCWD, &c).unwrap();
    assert!(noatime);
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    while chunkscope::fsutil::getdents(fd.as_raw_fd(), &mut buf, &mut |n, _, _| {
        if n != b"." && n != b".." {
            out.push(dir.join(std::ffi::OsString::from_vec(n.to_vec())));
        }
    })
    .unwrap()
    {}
    out
}

/// Every path below `dir` (directories included) with its atime, mtime and size.
fn snapshot(dir: &Path) -> Vec<(PathBuf, i128, i128, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for p in names(&d) {
            let m = p.symlink_metadata().unwrap();
            let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
            out.push((
                p.clone(),
                ns(m.atime(), m.atime_nsec()),
                ns(m.mtime(), m.mtime_nsec()),
                m.size(),
            ));
            if m.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Sets the atime of `p` (not following a link) to 2020-01-01, its mtime unchanged.
fn age_atime(p: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let times = [
        libc::timespec {
            tv_sec: 1_577_836_800,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    ];
    // SAFETY: a valid C string and two timespecs.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(rc, 0, "{}", p.display());
}

/// Ends the writer process on drop (test failure included) and reaps it.
struct Writer(std::process::Child, PathBuf);

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.1, b"");
        let _ = self.0.wait();
    }
}

/// A survey beside another process that writes and removes chunk files and snapshot
/// directories (as backups and prunes do) succeeds every time and changes nothing: every
/// atime (files and directories, all aged to 2020 first, so that a read or a listing
/// without O_NOATIME would set them on a relatime mount), every mtime but those of the
/// directories the writer changed, every size, every file there.
#[test]
fn a_survey_changes_nothing_while_another_process_writes() {
    let tmp = store_dir();
    let (store, _) = gen(tmp.path(), "s", &["--preset", "tiny", "--seed", "5"]);
    let before_all = snapshot(&store);
    for (p, ..) in &before_all {
        age_atime(p);
    }
    age_atime(&store);
    let before = snapshot(&store);
    // An index file to link into the writer's snapshots (a hard link reads nothing).
    let index = before
        .iter()
        .map(|e| &e.0)
        .find(|p| p.extension().is_some_and(|x| x == "fidx" || x == "didx"))
        .unwrap()
        .clone();
    let stop = tmp.path().join("stop");
    let script = r#"
        s="$1"; idx="$2"; stop="$3"; i=0
        while [ ! -e "$stop" ]; do
            i=$((i + 1))
            n=$(printf 'abcd%060x' "$i")
            echo chunk > "$s/.chunks/abcd/$n"
            [ $i -gt 1 ] && rm -f "$s/.chunks/abcd/$(printf 'abcd%060x' $((i - 1)))"
            d="$s/vm/999/2031-01-01T00:00:$(printf '%02d' $((i % 60)))Z"
            mkdir -p "$d" && ln "$idx" "$d/drive-scsi0.img.fidx" 2>/dev/null
            rm -rf "$s/vm/999"
        done
        rm -f "$s/.chunks/abcd/$(printf 'abcd%060x' "$i")"
    "#;
    let child = std::process::Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(&store)
        .arg(&index)
        .arg(&stop)
        .spawn()
        .unwrap();
    let writer = Writer(child, stop);
    for _ in 0..3 {
        let (code, r, err) = survey_json(&store, &[]);
        assert_eq!(code, 0, "{err}");
        assert!(u(&r["chunks"]) > 2000);
        assert_eq!(u(&r["noatime_refused"]), 0);
    }
    drop(writer);
    let after = snapshot(&store);
    // The writer changed the mtimes of .chunks/abcd and vm (its entries came and went).
    let changed = [store.join(".chunks/abcd"), store.join("vm")];
    let strip = |v: &[(PathBuf, i128, i128, u64)]| -> Vec<(PathBuf, i128, i128, u64)> {
        v.iter()
            .map(|(p, a, m, s)| {
                let m = if changed.contains(p) { 0 } else { *m };
                let s = if changed.contains(p) { 0 } else { *s };
                (p.clone(), *a, m, s)
            })
            .collect()
    };
    let (b, a) = (strip(&before), strip(&after));
    let first = b.iter().zip(&a).find(|(x, y)| x != y);
    assert!(
        first.is_none() && b.len() == a.len(),
        "{} entries before, {} after; first difference: {first:?}",
        b.len(),
        a.len()
    );
    assert_eq!(
        store.symlink_metadata().unwrap().atime(),
        1_577_836_800,
        "the store's own atime"
    );
}

/// A missing store, a store with a corrupt index, a destination inside the store, ext4
/// figures without --layout ext4: each refused or reported by name, with its exit status.
#[test]
fn bad_input_is_named() {
    let tmp = store_dir();
    let missing = tmp.path().join("nothing-here");
    let o = run(&["survey", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("nothing-here") && stderr(&o).contains("not a datastore"),
        "{}",
        stderr(&o)
    );

    let (store, _) = gen(tmp.path(), "s", &["--preset", "tiny", "--seed", "7"]);
    let inside = store.join("x.survey");
    let o = run(&[
        "survey",
        "--out",
        inside.to_str().unwrap(),
        store.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("inside the store"), "{}", stderr(&o));
    assert!(!inside.exists());
    let o = run(&["survey", "--inode-size", "256", store.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--layout ext4"), "{}", stderr(&o));

    let (_, good, _) = survey_json(&store, &[]);
    let index = snapshot(&store)
        .into_iter()
        .map(|e| e.0)
        .find(|p| p.extension().is_some_and(|x| x == "didx"))
        .unwrap();
    std::fs::write(&index, b"not an index").unwrap();
    let (code, r, err) = survey_json(&store, &[]);
    assert_eq!(code, 1, "{err}");
    let bad = &r["unreadable_indexes"][0];
    assert_eq!(bad["path"].as_str().unwrap(), index.to_str().unwrap());
    assert!(err.contains(index.to_str().unwrap()), "{err}");
    assert_eq!(u(&r["index_files"]) + 1, u(&good["index_files"]));
    assert_eq!(u(&r["chunks"]), u(&good["chunks"]));
}

/// A file handed to the command that does not read it is named with what it is and which
/// command does: a survey to `analyze`, a trace to `simulate --survey`, an strace log and a
/// chunk to `replay`; exit 2 each.
#[test]
fn a_file_for_another_command_is_named_with_the_one_that_reads_it() {
    let tmp = store_dir();
    let (store, _) = gen(tmp.path(), "s", &["--preset", "tiny", "--seed", "7"]);
    let survey = tmp.path().join("s.survey");
    assert_eq!(
        survey_json(&store, &["--out", survey.to_str().unwrap()]).0,
        0
    );
    let trace = tmp.path().join("t.trace");
    let o = run(&[
        "simulate",
        "--preset",
        "tiny",
        "--strategy",
        "lru",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let log = tmp.path().join("gc.strace");
    std::fs::write(
        &log,
        "4242  10:20:30.123456 utimensat(AT_FDCWD, \"/ds/.chunks/0000/00\", NULL, 0) = 0 <0.000010>\n",
    )
    .unwrap();
    let chunk = (0..=0xffffu32)
        .find_map(|p| {
            let dir = store.join(format!(".chunks/{p:04x}"));
            std::fs::read_dir(dir)
                .unwrap()
                .next()
                .map(|e| e.unwrap().path())
        })
        .unwrap();
    // An old atime, which a plain read would move (relatime): the chunk must keep it.
    age_atime(&chunk);
    let atime = chunk.symlink_metadata().unwrap().atime();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    for (args, says) in [
        (
            vec!["analyze".to_string(), s(&survey)],
            "simulate --survey FILE",
        ),
        (
            vec!["simulate".into(), "--survey".into(), s(&trace)],
            "it is a chunkscope trace",
        ),
        (
            vec!["replay".into(), s(&log)],
            "trace import --format strace",
        ),
        (vec!["analyze".into(), s(&chunk)], "PBS chunk or blob"),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert!(
            err.contains(args[args.len() - 1]) && err.contains(says),
            "{args:?}: {err}"
        );
    }
    assert_eq!(
        chunk.symlink_metadata().unwrap().atime(),
        atime,
        "read without O_NOATIME"
    );
}

/// The records of each operation in `trace`, by name.
fn op_counts(trace: &Path) -> std::collections::HashMap<String, u64> {
    let mut r = chunkscope::trace::TraceReader::open(trace).unwrap();
    let mut n = std::collections::HashMap::new();
    while let Some(rec) = r.next_record().unwrap() {
        if let Some(op) = rec.op() {
            *n.entry(op.name().to_string()).or_default() += 1;
        }
    }
    n
}

/// `simulate --survey` of a store equals the same strategy's GC through a mount of it,
/// request for request (touches, listings, stats, unlinks, every request kind), and its
/// modelled cost equals `replay` of that GC's trace under the same model. Both without a
/// directory TTL (`--dir-ttl 0`): the simulator expires the kernel's cached directories on
/// the model's clock, a `--time-scale 0` mount on the wall clock, and on ext4 the modelled
/// time (past the default 600 s or not) changes with each store's inode numbers. The store is on
/// the default temporary directory (ext4 here, whose inode numbers cluster by directory,
/// not in creation order, so a simulation of the generator's shape would not match it): the
/// survey reads the real numbers, and the match relies on nothing else. `simulate --store`
/// (a survey of its own) gives the same runs as `--survey FILE`. lru here; the other
/// strategies in the long suite.
#[test]
fn a_surveyed_simulation_is_the_mounted_gc() {
    surveyed_simulation_is_the_mounted_gc("lru");
}

/// [`a_surveyed_simulation_is_the_mounted_gc`] for every other strategy.
#[test]
#[ignore = "long suite (CI runs it with --ignored): four more mounted GCs"]
fn every_surveyed_simulation_is_the_mounted_gc() {
    surveyed_simulation_is_the_mounted_gc("unpatched,naive,prefetch,batched,inode-order");
}

fn surveyed_simulation_is_the_mounted_gc(strategies: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "5"]);
    let file = dir.path().join("s.survey");
    let (code, _, err) = survey_json(&store, &["--out", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let sim = |source: &[&str]| -> Vec<serde_json::Value> {
        let mut a = vec![
            "simulate",
            "--json",
            "--model",
            "zfs-hdd",
            "--dir-ttl",
            "0",
            "--strategy",
            strategies,
        ];
        a.extend_from_slice(source);
        let o = run(&a);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_array().unwrap().clone()
    };
    let from_file = sim(&["--survey", file.to_str().unwrap()]);
    let from_store = sim(&["--store", store.to_str().unwrap()]);
    assert_eq!(from_file.len(), strategies.split(',').count());
    for (a, b) in from_file.iter().zip(&from_store) {
        // Everything but the wall-clock seconds.
        let strip = |v: &serde_json::Value| {
            let mut v = v.clone();
            for k in ["phase1_seconds", "phase2_seconds"] {
                v["counters"].as_object_mut().unwrap().remove(k);
            }
            (
                v["counters"].clone(),
                v["requests"].clone(),
                v["model"].clone(),
            )
        };
        assert_eq!(strip(a), strip(b), "--survey and --store");
    }
    for s in &from_file {
        let strategy = s["strategy"].as_str().unwrap();
        let d = dir.path().join(strategy);
        std::fs::create_dir(&d).unwrap();
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
                "--dir-ttl",
                "0",
            ],
        );
        let (code, report, out) = gc(&m.mnt, &["--no-lock", "--strategy", strategy]);
        assert_eq!(code, 0, "{out}");
        m.stop();
        let trace = m.trace.as_ref().unwrap();
        let totals = replayed_totals(trace);
        assert_sim_matches(strategy, &report["counters"], &totals, s, 0.0);
        // The indexes are made with the bytes the survey read: "Original data usage" holds.
        assert_eq!(
            s["counters"]["index_data_bytes"], report["counters"]["index_data_bytes"],
            "{strategy}: the indexes' content bytes"
        );
        let traced = op_counts(trace);
        for op in [
            "lookup", "getattr", "setattr", "opendir", "readdir", "open", "unlink",
        ] {
            assert_eq!(
                s["requests"][op].as_u64().unwrap(),
                traced.get(op).copied().unwrap_or(0),
                "{strategy}: {op} requests simulated and through the mount"
            );
        }
        assert!(report["counters"]["removed_chunks"].as_u64().unwrap() > 0);
    }
}

/// On a tmpfs of its own (inode numbers in creation order, as the generator's simulation
/// numbers them), `simulate --store` of a generated store gives `simulate --preset`'s runs
/// of the same preset and seed: the same counts, requests and modelled costs.
#[test]
fn a_surveyed_simulation_is_the_presets_on_a_generated_store() {
    let dir = PrivateTmpfs::new();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "8"]);
    let args = ["--model", "zfs-hdd", "--strategy", "lru,batched"];
    let preset = simulate(&store, "tiny", "8", &args);
    let mut a = vec!["simulate", "--json", "--store", store.to_str().unwrap()];
    a.extend_from_slice(&args);
    let o = run(&a);
    assert!(o.status.success(), "{}", stderr(&o));
    let surveyed: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(preset.len(), surveyed.len());
    for (p, s) in preset.iter().zip(&surveyed) {
        let strategy = p["strategy"].as_str().unwrap();
        for key in [
            "utimensat_calls",
            "touched",
            "listings",
            "sweep_listings",
            "stat_calls",
            "unlinks",
            "removed_chunks",
        ] {
            assert_eq!(p["counters"][key], s["counters"][key], "{strategy}: {key}");
        }
        assert_eq!(p["requests"], s["requests"], "{strategy}");
        assert_eq!(p["model"], s["model"], "{strategy}");
    }
}

/// `simulate --store-trace` of a mounted GC's trace builds the store that GC saw: its
/// strategies' touches, listings, stats and removals are those of `simulate --store` (the
/// survey's store, equal to the mount's GC: above). The trace is of `naive`, which touches
/// every reference, so the store holds them all. The store on ext4: inode numbers from the
/// trace, relying on no order.
#[test]
fn a_traced_gc_rebuilds_its_store_for_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "9"]);
    let d = dir.path().join("mount");
    std::fs::create_dir(&d).unwrap();
    let mut m = Mount::start(&store, &d, true, &["--shadow"]);
    let (code, report, out) = gc(&m.mnt, &["--no-lock", "--strategy", "naive"]);
    assert_eq!(code, 0, "{out}");
    m.stop();
    let trace = m.trace.clone().unwrap();
    let sim = |source: &[&str]| -> Vec<serde_json::Value> {
        let mut a = vec![
            "simulate",
            "--json",
            "--model",
            "zfs-hdd",
            "--strategy",
            "naive,lru,batched",
        ];
        a.extend_from_slice(source);
        let o = run(&a);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let traced = sim(&["--store-trace", trace.to_str().unwrap()]);
    // Issue 63, point 8: half of the trace builds part of the store, and says so (it built
    // 2,581 of 2,749 chunks in silence before).
    let bytes = std::fs::read(&trace).unwrap();
    let torn = dir.path().join("torn.trace");
    std::fs::write(&torn, &bytes[..bytes.len() * 3 / 4]).unwrap();
    let o = run(&[
        "simulate",
        "--strategy",
        "lru",
        "--store-trace",
        torn.to_str().unwrap(),
    ]);
    assert!(
        stderr(&o).contains("torn.trace: its end is torn"),
        "{}",
        stderr(&o)
    );
    let surveyed = sim(&["--store", store.to_str().unwrap()]);
    for (t, s) in traced.iter().zip(&surveyed) {
        let strategy = t["strategy"].as_str().unwrap();
        for key in [
            "references",
            "utimensat_calls",
            "touched",
            "listings",
            "sweep_listings",
            "stat_calls",
            "unlinks",
            "removed_chunks",
        ] {
            assert_eq!(t["counters"][key], s["counters"][key], "{strategy}: {key}");
        }
    }
    let naive = &traced[0]["counters"];
    assert_eq!(naive["references"], report["counters"]["references"]);
    assert_eq!(
        naive["removed_chunks"],
        report["counters"]["removed_chunks"]
    );
}

/// Issue 47, point 5: a trace of an `lru` GC (PBS's default) serves the strategies that
/// deduplicate, as the guide says (section 9). An index all of whose chunks were digest cache
/// hits has no touch in the trace; it made the rebuilt store fail for every strategy ("index
/// has no entries"). Each strategy's distinct touches are the surveyed store's.
#[test]
#[ignore = "long suite (CI runs it with --ignored): a mounted GC and five simulations on ext4; \
            a_traced_gc_rebuilds_its_store_for_the_simulator is the default suite's"]
fn a_traced_lru_gc_rebuilds_a_store_for_every_deduplicating_strategy() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = gen(
        dir.path(),
        "s",
        &["--preset", "tiny", "--seed", "11", "--dedup", "8"],
    );
    let d = dir.path().join("mount");
    std::fs::create_dir(&d).unwrap();
    let mut m = Mount::start(&store, &d, true, &["--shadow"]);
    let (code, report, out) = gc(&m.mnt, &["--no-lock", "--strategy", "lru"]);
    assert_eq!(code, 0, "{out}");
    m.stop();
    let trace = m.trace.clone().unwrap();
    // The case this is about: fewer touches than index files would leave some without any.
    let c = &report["counters"];
    assert!(
        c["index_file_count"].as_u64().unwrap() > 0 && c["cache_hits"].as_u64().unwrap() > 0,
        "{c}"
    );
    let sim = |source: &[&str]| -> Vec<serde_json::Value> {
        let mut a = vec![
            "simulate",
            "--json",
            "--model",
            "zfs-hdd",
            "--strategy",
            "lru,prefetch,batched,inode-order",
        ];
        a.extend_from_slice(source);
        let o = run(&a);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let traced = sim(&["--store-trace", trace.to_str().unwrap()]);
    let surveyed = sim(&["--store", store.to_str().unwrap()]);
    assert_eq!(traced.len(), 4);
    for (t, s) in traced.iter().zip(&surveyed) {
        let strategy = t["strategy"].as_str().unwrap();
        for key in ["touched", "listings", "unlinks", "removed_chunks"] {
            assert_eq!(t["counters"][key], s["counters"][key], "{strategy}: {key}");
        }
    }
    assert_eq!(
        traced[0]["counters"]["utimensat_calls"],
        c["utimensat_calls"]
    );
}

/// Issue 48, point 4: an XFS filesystem of other than the preset's geometry (seven groups of
/// 2,396,746 blocks, 1 KiB inodes; the preset's is mkfs.xfs's 2 GiB default) is surveyed as
/// it is (XFS_IOC_FSGEOMETRY), and `simulate --survey` places its blocks by that: the
/// model's layout, cluster size and disk span are the filesystem's. A model of another
/// filesystem is named with the one to use. Nothing here depends on inode numbers.
#[test]
#[ignore = "long suite: needs mkfs.xfs (xfsprogs; README.md, Requirements)"]
fn a_survey_reads_the_xfs_geometry_and_the_model_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("xfs.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(64 << 30)
        .unwrap();
    let mkfs = std::process::Command::new(require("mkfs.xfs"))
        .args(["-q", "-d", "agcount=7", "-i", "size=1024"])
        .arg(&image)
        .output()
        .unwrap();
    assert!(mkfs.status.success(), "{}", stderr(&mkfs));
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let _mounted = LoopMount::image(&image, &mnt, None, "");
    let (store, _) = gen(&mnt, "store", &[]);
    let survey = dir.path().join("s.survey");
    let (code, report, err) = survey_json(&store, &["--out", survey.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(report["filesystem"], "xfs");
    assert_eq!(report["layout_assumed"], false);
    let layout = report["layout"].as_str().unwrap();
    for want in [
        "1024 bytes",
        "32 KiB a cluster",
        "7 allocation groups",
        "<< 24",
    ] {
        assert!(layout.contains(want), "{want} in {layout}");
    }
    let trace = dir.path().join("sim.trace");
    let o = run(&[
        "simulate",
        "--survey",
        survey.to_str().unwrap(),
        "--model",
        "xfs-hdd",
        "--strategy",
        "lru",
        "--trace",
        trace.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let dump = run(&["trace", "dump", trace.to_str().unwrap()]);
    let options = stdout(&dump)
        .lines()
        .find_map(|l| l.strip_prefix("# options "))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .expect("the trace's options");
    let model = &options["model"];
    assert_eq!(model["layout"]["agino_log"], 24, "{model}");
    assert_eq!(model["layout"]["inopb_log"], 2);
    assert_eq!(model["layout"]["ag_blocks"], 2_396_746);
    assert_eq!(model["layout"]["shortform_entries"], 11);
    assert_eq!(model["block_bytes"], 32 << 10);
    let span = model["disk"]["span"].as_u64().unwrap();
    assert!((63u64 << 30..=64 << 30).contains(&span), "{span}");
    let o = run(&[
        "simulate",
        "--survey",
        survey.to_str().unwrap(),
        "--model",
        "ext4-hdd",
        "--strategy",
        "lru",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("--model xfs-hdd"), "{}", stderr(&o));
}
