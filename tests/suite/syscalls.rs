//! `trace import`: a syscall log of a real GC (strace; bpftrace in the long suite) as a
//! trace that `analyze`, `replay` and phase inference read as a recorded one. The GC runs
//! directly on a store (no mount); a survey taken before it gives every inode.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// The store, its survey (before the GC) and a scratch directory.
fn store_and_survey(seed: &str) -> (PrivateTmpfs, PathBuf, PathBuf) {
    let tmp = store_dir();
    let (store, _) = gen(tmp.path(), "s", &["--preset", "tiny", "--seed", seed]);
    let survey = tmp.path().join("s.survey");
    let o = run(&[
        "survey",
        "--out",
        survey.to_str().unwrap(),
        store.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    (tmp, store, survey)
}

/// Imports `log` and analyses it: the import's counts and the analysis's phases.
fn import(
    log: &Path,
    format: &str,
    survey: &Path,
    out: &Path,
) -> (serde_json::Value, Vec<serde_json::Value>) {
    let o = run(&[
        "trace",
        "import",
        "--json",
        "--format",
        format,
        "--survey",
        survey.to_str().unwrap(),
        log.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let a = run(&["analyze", "--json", out.to_str().unwrap()]);
    assert!(a.status.success(), "{}", stderr(&a));
    let analysis: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    (report, analysis["phases"].as_array().unwrap().clone())
}

/// What the imported trace must show of the GC whose `gc --json` report is `gc`: phase 1
/// inferred, with exactly the GC's touches, each with its inode; the sweep inferred as
/// phase 2 with the GC's unlinks; `replay` charges it under a model.
fn assert_imported_is_the_gc(
    report: &serde_json::Value,
    phases: &[serde_json::Value],
    gc: &serde_json::Value,
    trace: &Path,
) {
    let c = &gc["counters"];
    assert_eq!(
        report["unresolved"], 0,
        "every path has its inode from the survey"
    );
    let phase = |name: &str| {
        phases
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {phases:?}"))
    };
    let p1 = phase("phase1 (inferred)");
    assert_eq!(p1["touches"]["count"], c["touched"], "phase-1 touches");
    assert_eq!(p1["touches"]["distinct_inodes"], c["touched"]);
    let p2 = phase("phase2 (inferred)");
    assert_eq!(op_count(p2, "unlink"), c["unlinks"].as_u64().unwrap());
    assert_eq!(
        op_count(p2, "opendir"),
        65_536,
        "the sweep opens every chunk directory"
    );
    // A lookup for each chunk directory opened, each stat of the sweep and each unlink (the
    // getattrs include the fstat of each chunk directory opened), and chunkscope's own: the
    // store's root and `.chunks` stat'ed every 256 directories, to stop if either is no
    // longer the directory opened (PBS makes no such call).
    let (stats, unlinks) = (
        c["stat_calls"].as_u64().unwrap(),
        c["unlinks"].as_u64().unwrap(),
    );
    let checks = (65_536 / chunkscope::gc::sweep::IDENTITY_CHECK_DIRS as u64 - 1) * 2;
    assert_eq!(op_count(p2, "lookup"), 65_536 + stats + unlinks + checks);
    let o = run(&[
        "replay",
        "--json",
        "--model",
        "zfs-hdd",
        trace.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["totals"]["misses"].as_u64().unwrap() > c["touched"].as_u64().unwrap() / 32);
}

/// `strace` of `chunkscope gc --phase mark` (the options) on a store, imported with
/// the survey taken before it: phase 1's touches are the GC's own, each with its inode.
/// (strace stops the GC at each of the sweep's 265,000 calls, a minute here: the whole GC
/// is the long suite's.)
#[test]
fn an_strace_of_a_gc_imports_as_its_trace() {
    let (tmp, store, survey) = store_and_survey("6");
    let log = tmp.path().join("gc.strace");
    let json = tmp.path().join("gc.json");
    strace_gc(&store, &log, &json, &["--phase", "mark"]);
    let gc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let trace = tmp.path().join("gc.trace");
    let (report, phases) = import(&log, "strace", &survey, &trace);
    assert_eq!(report["unresolved"], 0, "every path has its inode");
    let p1 = phases
        .iter()
        .find(|p| p["name"] == "phase1 (inferred)")
        .unwrap();
    assert_eq!(
        p1["touches"]["count"], gc["counters"]["touched"],
        "phase-1 touches"
    );
    assert_eq!(p1["touches"]["distinct_inodes"], gc["counters"]["touched"]);
    assert!(gc["counters"]["touched"].as_u64().unwrap() > 2000);
    // Without a survey, the inodes come from a stat at import time: every touched chunk is
    // there, each the same inode.
    let stat_trace = tmp.path().join("stat.trace");
    let o = run(&[
        "trace",
        "import",
        "--json",
        log.to_str().unwrap(),
        "-o",
        stat_trace.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["unresolved"], 0);
    assert_eq!(r["records"], report["records"]);
}

/// Runs `chunkscope gc --strategy lru ARGS STORE` under the strace.
fn strace_gc(store: &Path, log: &Path, json: &Path, args: &[&str]) {
    let o = Command::new(require("strace"))
        .args([
            "-f",
            "-tt",
            "-T",
            "-y",
            "-e",
            "trace=utimensat,newfstatat,statx,getdents64,unlinkat,openat",
            "-o",
        ])
        .arg(log)
        .arg(env!("CARGO_BIN_EXE_chunkscope"))
        .args(["gc", "--strategy", "lru"])
        .args(args)
        .arg(format!("--json={}", json.display()))
        .arg(store)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The whole GC under strace, imported: phase 1 its touches, phase 2 its sweep; without a
/// survey, the chunks it removed have no inode, and the import says so.
#[test]
#[ignore = "long suite (CI runs it with --ignored): strace stops at each of the sweep's 265,000 calls (about a minute)"]
fn an_strace_of_a_whole_gc_imports_as_its_trace() {
    let (tmp, store, survey) = store_and_survey("6");
    let log = tmp.path().join("gc.strace");
    let json = tmp.path().join("gc.json");
    strace_gc(&store, &log, &json, &[]);
    let gc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(gc["counters"]["unlinks"].as_u64().unwrap() > 0);
    let trace = tmp.path().join("gc.trace");
    let (report, phases) = import(&log, "strace", &survey, &trace);
    assert_imported_is_the_gc(&report, &phases, &gc, &trace);
    // strace counts each getdents64's entries: with the survey's readdir order, the sweep's
    // listings return every chunk file, each with its inode.
    let chunks = chunkscope::survey::file::SurveyFile::read(&survey)
        .unwrap()
        .chunks
        .len();
    let p2 = phases
        .iter()
        .find(|p| p["name"] == "phase2 (inferred)")
        .unwrap();
    assert_eq!(p2["listings"]["entries"], chunks as u64);
    assert_eq!(
        report["calls"]["utimensat"],
        gc["counters"]["utimensat_calls"].as_u64().unwrap() + 1,
        "and the atime check's touch"
    );

    // Without a survey, the inodes come from a stat at import time: the removed chunks'
    // are gone, and said so; the touched ones are all there.
    let o = run(&[
        "trace",
        "import",
        "--json",
        log.to_str().unwrap(),
        "-o",
        tmp.path().join("stat.trace").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["unresolved"].as_u64().unwrap() >= gc["counters"]["unlinks"].as_u64().unwrap());
    // Issue 49, point 4: the warning counts chunks only, and asks for a survey only where
    // none was given; with one, no chunk lacks its inode (the atime check's temporary file,
    // gone before the import, is not a chunk).
    let chunks_unresolved = r["unresolved_chunks"].as_u64().unwrap();
    assert!(chunks_unresolved >= gc["counters"]["unlinks"].as_u64().unwrap());
    assert!(chunks_unresolved <= r["unresolved"].as_u64().unwrap());
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "{} records of chunks have no inode number",
            chunkscope::units::thousands(chunks_unresolved)
        )) && err.contains("--survey"),
        "{err}"
    );
    assert_eq!(
        report["unresolved_chunks"], 0,
        "the survey gives every chunk its inode"
    );
}

/// A log that is not a GC's, or not there, is refused by name.
#[test]
fn a_log_of_something_else_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("other.strace");
    std::fs::write(&log, "123 10:00:00.000001 openat(AT_FDCWD</>, \"/etc/passwd\", O_RDONLY) = 3</etc/passwd> <0.000010>\n").unwrap();
    let out = tmp.path().join("x.trace");
    let o = run(&[
        "trace",
        "import",
        log.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("other.strace") && stderr(&o).contains(".chunks"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists(), "no trace written");
    let o = run(&[
        "trace",
        "import",
        tmp.path().join("nope").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nope"), "{}", stderr(&o));
}

/// Mounts tracefs for bpftrace where it is not mounted, and unmounts it on drop.
struct Tracefs(Option<PathBuf>);

impl Tracefs {
    fn ensure() -> Tracefs {
        let dir = PathBuf::from("/sys/kernel/tracing");
        if dir.join("events").exists() {
            return Tracefs(None);
        }
        let o = Command::new("mount")
            .args(["-t", "tracefs", "nodev"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "mount tracefs: {o:?}");
        Tracefs(Some(dir))
    }
}

impl Drop for Tracefs {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = Command::new("umount").arg(d).status();
        }
    }
}

/// A process this test started, ended (by its pid) and reaped on drop, panics included.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// The same through `mount-scripts/gc-syscalls.bt` (bpftrace on syscall tracepoints): the
/// GC waits on a FIFO until the script has attached (its header line), then runs; the
/// script stops at the GC's exit.
#[test]
#[ignore = "long suite (CI runs it with --ignored): needs bpftrace (README.md, Requirements) and tracefs"]
fn a_bpftrace_log_of_a_gc_imports_as_its_trace() {
    use std::io::{BufRead, Write};
    let _tracefs = Tracefs::ensure();
    let (tmp, store, survey) = store_and_survey("7");
    let json = tmp.path().join("gc.json");
    let fifo = tmp.path().join("go");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let gc_cmd = format!(
        "read x < '{}'; exec '{}' gc --strategy lru --json='{}' '{}' > /dev/null",
        fifo.display(),
        env!("CARGO_BIN_EXE_chunkscope"),
        json.display(),
        store.display()
    );
    let mut gc = Reap(Command::new("sh").args(["-c", &gc_cmd]).spawn().unwrap());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("mount-scripts/gc-syscalls.bt");
    let log = tmp.path().join("gc.bpf.log");
    let mut bt = Reap(
        Command::new(require("bpftrace"))
            .env("BPFTRACE_STRLEN", "200")
            // 16 MiB a CPU (the default is 256 KiB): room for a burst while this test's
            // neighbours hold the CPUs. The import fails if bpftrace says it lost events.
            .env("BPFTRACE_PERF_RB_PAGES", "4096")
            .arg(&script)
            .arg(gc.0.id().to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Copy its output to the log; start the GC once the header says it is attached, then
    // copy the rest in large reads and writes (a write a line slowed bpftrace's draining of
    // its ring buffer enough, on a busy CI machine, for it to drop events).
    let stdout = bt.0.stdout.take().unwrap();
    let log_path = log.clone();
    let copier = std::thread::spawn(move || {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&log_path).unwrap());
        let mut from = std::io::BufReader::with_capacity(1 << 20, stdout);
        let mut line = String::new();
        while from.read_line(&mut line).unwrap() > 0 {
            out.write_all(line.as_bytes()).unwrap();
            if line.starts_with("# chunkscope gc-syscalls") {
                let mut go = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
                writeln!(go, "go").unwrap();
                std::io::copy(&mut from, &mut out).unwrap();
                out.flush().unwrap();
                return true;
            }
            line.clear();
        }
        false
    });
    let status = gc.0.wait().unwrap();
    assert!(status.success(), "the GC: {status}");
    // The script ends itself at the GC process's exit, after writing out what it buffered
    // (a SIGINT right after the GC's exit cut the last calls off a busy machine's log).
    assert!(bt.0.wait().unwrap().success(), "bpftrace");
    assert!(copier.join().unwrap(), "bpftrace never attached");
    let gc_report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let trace = tmp.path().join("gc.trace");
    let (report, phases) = import(&log, "bpftrace", &survey, &trace);
    assert_imported_is_the_gc(&report, &phases, &gc_report, &trace);
}

/// A bpftrace log in which bpftrace says it lost events (its ring buffer was full) is
/// imported, but the import exits 1 naming the log, the count and the remedy: the trace
/// lacks calls.
#[test]
fn a_bpftrace_log_with_lost_events_is_flagged() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    std::fs::create_dir_all(store.join(".chunks/0000")).unwrap();
    let chunk = format!("{}/.chunks/0000/0000{}", store.display(), "ab".repeat(30));
    std::fs::write(&chunk, b"x").unwrap();
    let log = tmp.path().join("gc.bpf.log");
    std::fs::write(
        &log,
        format!(
            "Attaching 14 probes...\n\
             # chunkscope gc-syscalls v1 pid 7 boot_ns 1000000000 wall_s 1796365094\n\
             E utimensat 7 2000000000 -100 0 {chunk}\n\
             X 7 900 0\n\
             Lost 12 events\n\
             E utimensat 7 2000001000 -100 0 {chunk}\n\
             X 7 800 0\n"
        ),
    )
    .unwrap();
    let out = tmp.path().join("gc.trace");
    let o = run(&[
        "trace",
        "import",
        "--json",
        "--format",
        "bpftrace",
        "--store",
        store.to_str().unwrap(),
        log.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["lost_events"], 12);
    assert_eq!(r["calls"]["utimensat"], 2);
    let e = stderr(&o);
    assert!(
        e.contains("gc.bpf.log") && e.contains("lost 12 events") && e.contains("PERF_RB_PAGES"),
        "{e}"
    );
    assert!(out.exists(), "the trace of what was recorded is written");
}

/// Issue 49, point 4: a log recorded without strace's `-y` names the sweep's directories by
/// bare descriptors: the import refuses it, naming the flag, and writes no trace (it exited
/// 0 with the whole sweep silently dropped). The same calls with `-y` import, and the
/// summary says which phases the log shows; without `-T` the import says the latencies are
/// missing, without `-tt` that the time stamps are.
#[test]
fn a_log_without_the_flags_the_import_needs_says_which() {
    let tmp = store_dir();
    let (store, _) = gen(tmp.path(), "s", &["--preset", "tiny"]);
    let s = store.to_str().unwrap();
    // The first chunk of the store (tiny leaves most chunk directories empty).
    let chunk = (0..=0xffffu32)
        .find_map(|p| {
            let dir = store.join(format!(".chunks/{p:04x}"));
            std::fs::read_dir(dir)
                .unwrap()
                .next()
                .map(|e| e.unwrap().file_name())
        })
        .expect("a chunk");
    let chunk = chunk.to_str().unwrap();
    let px = &chunk[..4];
    let lines = |y: bool, t: bool| {
        let fd = |n: u32, p: &str| {
            if y {
                format!("{n}<{p}>")
            } else {
                n.to_string()
            }
        };
        let dur = if t { " <0.000005>" } else { "" };
        [
            format!("100 10:00:00.000001 utimensat(AT_FDCWD, \"{s}/.chunks/{px}/{chunk}\", [UTIME_NOW, UTIME_OMIT], AT_SYMLINK_NOFOLLOW) = 0{dur}"),
            format!("100 10:00:01.000001 openat({}, \"{px}\", O_RDONLY|O_NOFOLLOW|O_CLOEXEC|O_DIRECTORY) = {}{dur}", fd(3, &format!("{s}/.chunks")), fd(5, &format!("{s}/.chunks/{px}"))),
            format!("100 10:00:01.000002 getdents64({}, 0x1 /* 3 entries */, 32768) = 120{dur}", fd(5, &format!("{s}/.chunks/{px}"))),
            format!("100 10:00:01.000003 newfstatat({}, \"{chunk}\", {{st_mode=S_IFREG|0644, st_size=1848, ...}}, AT_SYMLINK_NOFOLLOW) = 0{dur}", fd(5, &format!("{s}/.chunks/{px}"))),
        ]
        .join("\n")
            + "\n"
    };
    let import = |name: &str, text: String| {
        let log = tmp.path().join(format!("{name}.strace"));
        std::fs::write(&log, text).unwrap();
        let out = tmp.path().join(format!("{name}.trace"));
        let o = run(&[
            "trace",
            "import",
            "--store",
            s,
            log.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        (o, out)
    };
    let (o, out) = import("no-y", lines(false, true));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("no-y.strace")
            && err.contains("3 calls")
            && err.contains("strace -f -tt -T -y"),
        "{err}"
    );
    assert!(!out.exists(), "no trace left");
    let (o, out) = import("with-y", lines(true, true));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.exists() && !stderr(&o).contains("-T"), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("phases seen: mark (touches) and sweep"),
        "{}",
        stdout(&o)
    );
    let touch_only = lines(true, true).lines().next().unwrap().to_string() + "\n";
    let (o, _) = import("mark-only", touch_only);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("mark only"), "{}", stdout(&o));
    // Without -tt: "PID NAME(...)".
    let untimed: String = lines(true, true)
        .lines()
        .map(|l| {
            let (pid, rest) = l.split_once(' ').unwrap();
            format!("{pid} {}\n", rest.split_once(' ').unwrap().1)
        })
        .collect();
    let (o, out) = import("no-tt", untimed);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no time stamps") && stderr(&o).contains("-tt"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
    let (o, _) = import("no-t", lines(true, false));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("strace's -T"), "{}", stderr(&o));
}
