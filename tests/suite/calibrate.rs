//! Issue 48, point 5: `gc --task-log` writes a GC's progress as PBS's task-log files have it,
//! and `calibrate` fits a pool's model to such logs. Stores on a tmpfs of their own (inode
//! numbers follow creation order there; nothing here depends on them).

use crate::common::*;

use serde_json::Value;

/// `gc --task-log` writes every line with its time, the percentage lines included, and the
/// strategy; `calibrate` reads it back with the store, writes a model file that `simulate`
/// takes, and says what it fitted.
#[test]
fn a_gcs_task_log_calibrates_a_model_that_simulate_takes() {
    let dir = PrivateTmpfs::new();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "3"]);
    let log = dir.path().join("gc.log");
    let (code, _, out) = gc(
        &store,
        &["--strategy", "batched", "--task-log", log.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // `2026-12-05T11:16:39.341+00:00: message`, every line.
    for l in &lines {
        assert_eq!(&l[23..31], "+00:00: ", "{l}");
        assert!(l[..4].parse::<u32>().is_ok(), "{l}");
    }
    let msg = |l: &&str| l[31..].to_string();
    let msgs: Vec<String> = lines.iter().map(msg).collect();
    assert!(msgs[0].starts_with("starting garbage collection on store"));
    assert_eq!(msgs[1], "chunkscope strategy: batched");
    // Under a terminal's bar or not, the file has the percentages: 100 of phase 1.
    assert_eq!(
        msgs.iter().filter(|m| m.starts_with("marked ")).count(),
        100,
        "{text}"
    );
    assert!(msgs.iter().any(|m| m.starts_with("processed 99% (")));
    assert_eq!(msgs.last().unwrap(), "TASK OK");

    let fitted = dir.path().join("fitted.json");
    let o = run(&[
        "calibrate",
        "--store",
        store.to_str().unwrap(),
        "--model",
        "zfs-hdd",
        "--out",
        fitted.to_str().unwrap(),
        "--json",
        log.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(c["logs"][0]["strategy"], "batched");
    assert_eq!(c["read_knob"], "miss_ns");
    // A GC on a tmpfs is faster than any HDD pool (8 ms a read): the fit says so, at the
    // floor of 1 us a read on an idle machine, a few us on a busy one.
    let miss_ns = c["params"]["miss_ns"].as_u64().unwrap();
    assert!(miss_ns < 100_000, "{c}");
    assert_eq!(c["read_at_floor"], miss_ns <= 1_000, "{c}");
    assert!(c["trials"].as_array().unwrap().len() >= 3);
    let model: Value = serde_json::from_slice(&std::fs::read(&fitted).unwrap()).unwrap();
    assert_eq!(model, c["params"]);
    let o = run(&[
        "simulate",
        "--store",
        store.to_str().unwrap(),
        "--model",
        fitted.to_str().unwrap(),
        "--strategy",
        "lru",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let runs: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(runs[0]["strategy"], "lru");

    // A known cache is pinned: one model tried, only the read time fitted.
    let pinned = |cache: &str| {
        run(&[
            "calibrate",
            "--store",
            store.to_str().unwrap(),
            "--cache",
            cache,
            "--out",
            fitted.to_str().unwrap(),
            "--json",
            log.to_str().unwrap(),
        ])
    };
    let o = pinned("64MiB");
    assert!(o.status.success(), "{}", stderr(&o));
    let c: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(c["params"]["cache_bytes"], 64 << 20);
    assert_eq!(c["trials"].as_array().unwrap().len(), 1);
    assert_eq!(c["cache_range"], serde_json::json!([64 << 20, 64 << 20]));
    let o = pinned("0");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--cache 0"), "{}", stderr(&o));
}

/// A file that is not a GC's task log, or the log of another store, is refused with its
/// name and what is wrong, and no model is written.
#[test]
fn calibrate_refuses_what_is_not_a_task_log_of_the_store() {
    let dir = PrivateTmpfs::new();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "3"]);
    let fitted = dir.path().join("fitted.json");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let garbage = write("garbage.log", "2025-05-16T22:31:53Z: fine\nnot a line\n");
    let no_gc = write("backup.log", "2025-05-16T22:31:53Z: TASK OK\n");
    let other = write(
        "other.log",
        "2025-05-16T22:31:51Z: Start GC phase1 (mark used chunks)\n\
         2025-05-16T22:31:55Z: marked 1% (9 of 900 index files)\n",
    );
    // Issue 63, point 7: logs no GC could have written, each once fitted "4.0 ms a read"
    // or 26.74 s a read with exit 0.
    let gc_log = |lines: &[(&str, &str)]| -> String {
        lines
            .iter()
            .map(|(t, m)| format!("2025-05-16T{t}Z: {m}\n"))
            .collect()
    };
    let backwards = write(
        "backwards.log",
        &gc_log(&[
            ("22:31:51", "Start GC phase1 (mark used chunks)"),
            ("22:31:55", "marked 50% (2 of 4 index files)"),
            ("22:31:53", "marked 100% (4 of 4 index files)"),
        ]),
    );
    let still = write(
        "still.log",
        &gc_log(&[
            ("22:31:51", "Start GC phase1 (mark used chunks)"),
            ("22:31:51", "marked 50% (2 of 4 index files)"),
            ("22:31:51", "marked 100% (4 of 4 index files)"),
        ]),
    );
    let future = write(
        "future.log",
        "2025-05-16T22:31:51Z: Start GC phase1 (mark used chunks)\n\
         2125-05-16T22:31:55Z: marked 100% (4 of 4 index files)\n",
    );
    let huge = write(
        "huge.log",
        &gc_log(&[
            ("22:31:51", "Start GC phase1 (mark used chunks)"),
            (
                "22:31:55",
                "marked 18446744073709551616% (2 of 4 index files)",
            ),
        ]),
    );
    let negative = write(
        "negative.log",
        &gc_log(&[
            ("22:31:51", "Start GC phase1 (mark used chunks)"),
            ("22:31:55", "marked -5% (2 of 4 index files)"),
        ]),
    );
    let falling = write(
        "falling.log",
        &gc_log(&[
            ("22:31:51", "Start GC phase1 (mark used chunks)"),
            ("22:31:55", "marked 50% (2 of 4 index files)"),
            ("22:31:56", "marked 25% (1 of 4 index files)"),
        ]),
    );
    let sparse = dir.path().join("sparse.log");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    for (log, want) in [
        (&garbage, "garbage.log line 2: not a task-log line"),
        (&no_gc, "no `Start GC phase1"),
        (&other, "marked 900 index files, the survey has"),
        (&backwards, "backwards.log line 3: its time is 2 s before"),
        (&still, "every line has the same time"),
        (&future, "future.log line 2: 36524 days after"),
        (
            &huge,
            "huge.log line 2: marked 18446744073709551616%: not a percentage",
        ),
        (
            &negative,
            "negative.log line 2: marked -5%: not a percentage",
        ),
        (&falling, "falling.log line 3: marked 25% after 50%"),
        (&sparse, "sparse.log: 1024 MiB, over 64 MiB"),
    ] {
        let o = run(&[
            "calibrate",
            "--store",
            store.to_str().unwrap(),
            "--out",
            fitted.to_str().unwrap(),
            log.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", log.display());
        assert!(stderr(&o).contains(want), "{want}: {}", stderr(&o));
        assert!(!fitted.exists(), "{}: no model written", log.display());
    }
    // gc's task log never goes into the store (it would truncate whatever it is named
    // after): refused before the GC runs.
    let index = index_files(&store).remove(0);
    let before = std::fs::read(&index).unwrap();
    let (code, _, out) = gc(&store, &["--task-log", index.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("inside the store"), "{out}");
    assert_eq!(
        std::fs::read(&index).unwrap(),
        before,
        "the index untouched"
    );
    // Nor through a link to one of its files, symbolic or hard.
    let sym = dir.path().join("sym.log");
    std::os::unix::fs::symlink(&index, &sym).unwrap();
    let hard = dir.path().join("hard.log");
    std::fs::hard_link(&index, &hard).unwrap();
    for (link, want) in [(&sym, "inside the store"), (&hard, "other names")] {
        let (code, _, out) = gc(&store, &["--task-log", link.to_str().unwrap()]);
        assert_eq!(code, 2, "{out}");
        assert!(out.contains(want), "{want}: {out}");
        assert_eq!(
            std::fs::read(&index).unwrap(),
            before,
            "the index untouched"
        );
    }
    std::fs::remove_file(&hard).unwrap();
    let o = run(&["calibrate", garbage.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--store"), "{}", stderr(&o));
}
