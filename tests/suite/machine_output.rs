//! Issue 23, point 6: every command with `--json` writes it the same way: `--json` (or
//! `--json=-`) on standard output instead of the text, `--json=FILE` into FILE beside the
//! text; `--json FILE.json` (a space) is refused with a message that says how. `analyze
//! --csv[=DIR]` alike.

use crate::common;

use common::*;
use serde_json::Value;

#[test]
fn every_json_option_takes_nothing_a_dash_or_a_file_alike() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "store", &["--preset", "tiny"]);
    let s = store.to_str().unwrap();
    // A trace to analyse and replay: a dry-run GC through a traced mount.
    let mut m = Mount::start(
        &store,
        dir.path(),
        true,
        &["--model", "zfs-hdd", "--time-scale", "0"],
    );
    let o = run(&[
        "gc",
        "--json",
        "--dry-run",
        "--phase",
        "mark",
        m.mnt.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("only JSON on stdout");
    assert_eq!(v["options"]["dry_run"], true);
    assert!(
        stderr(&o).contains("TASK OK"),
        "the task log went to stderr"
    );
    m.stop();
    let trace = m.trace.clone().unwrap();
    let t = trace.to_str().unwrap();
    let commands: [Vec<&str>; 5] = [
        vec!["check", s],
        vec!["gc", "--dry-run", "--phase", "mark", s],
        vec!["analyze", "--no-mrc", t],
        vec!["replay", t],
        vec![
            "simulate",
            "--preset",
            "tiny",
            "--strategy",
            "lru",
            "--phase",
            "mark",
        ],
    ];
    for args in &commands {
        let with = |json: &str| -> std::process::Output {
            let mut a = vec![args[0], json];
            a.extend_from_slice(&args[1..]);
            run(&a)
        };
        let alone = with("--json");
        assert!(alone.status.success(), "{args:?}: {}", stderr(&alone));
        let v: Value = serde_json::from_slice(&alone.stdout)
            .unwrap_or_else(|e| panic!("{args:?} --json: {e}: {}", stdout(&alone)));
        let dash = with("--json=-");
        assert!(
            serde_json::from_slice::<Value>(&dash.stdout).is_ok(),
            "{args:?} --json=-"
        );
        let file = dir.path().join(format!("{}.json", args[0]));
        let to_file = with(&format!("--json={}", file.display()));
        assert!(to_file.status.success(), "{args:?}: {}", stderr(&to_file));
        let written: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(
            written.as_object().map(|o| o.keys().collect::<Vec<_>>()),
            v.as_object().map(|o| o.keys().collect::<Vec<_>>()),
            "{args:?}: the same report"
        );
        assert!(written.is_array() == v.is_array());
        let text = stdout(&to_file);
        assert!(
            !text.trim_start().starts_with(['{', '[']),
            "{args:?}: the text beside: {text}"
        );
        assert!(!text.is_empty(), "{args:?}");
        let mut a = vec![args[0], "--json", "report.json"];
        a.extend_from_slice(&args[1..]);
        let o = run(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?} {}", stderr(&o));
        assert!(stderr(&o).contains("--json=report.json"), "{}", stderr(&o));
        // Without the extension, before the input or after it: the argument too many is the
        // destination, and said to be.
        let mut before = vec![args[0], "--json", "report"];
        before.extend_from_slice(&args[1..]);
        let mut after = args.clone();
        after.extend(["--json", "report"]);
        for a in [before, after] {
            let o = run(&a);
            assert_eq!(o.status.code(), Some(2), "{a:?} {}", stderr(&o));
            assert!(
                stderr(&o).contains("--json=report") && !stderr(&o).contains("unexpected"),
                "{a:?}: {}",
                stderr(&o)
            );
        }
    }
    // CSV the same way: `--csv` or `--csv=-` is the phases table instead of the text,
    // `--csv=DIR` the tables beside it; `--csv DIR` is refused, and so are two reports on
    // standard output.
    let alone = run(&["analyze", "--no-mrc", "--csv", t]);
    assert!(alone.status.success(), "{}", stderr(&alone));
    assert!(
        stdout(&alone).starts_with("phase,records,"),
        "{}",
        stdout(&alone)
    );
    assert_eq!(
        run(&["analyze", "--no-mrc", "--csv=-", t]).stdout,
        alone.stdout
    );
    let tables = dir.path().join("tables");
    let beside = run(&[
        "analyze",
        "--no-mrc",
        "--json",
        &format!("--csv={}", tables.display()),
        t,
    ]);
    assert!(beside.status.success(), "{}", stderr(&beside));
    serde_json::from_slice::<Value>(&beside.stdout).expect("the JSON on stdout");
    assert_eq!(
        std::fs::read(tables.join("phases.csv")).unwrap(),
        alone.stdout
    );
    let o = run(&["analyze", "--csv", "tables", t]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--csv=tables"), "{}", stderr(&o));
    let o = run(&["analyze", "--json", "--csv", t]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("both on standard output"),
        "{}",
        stderr(&o)
    );
}

/// Issue 47, point 4: a path need not be UTF-8. Before, any such argument panicked in the
/// argument pre-parser (exit 101), so a store there could not be used at all; and a control
/// character of a path in an error reached the terminal as it was.
#[test]
fn a_store_at_a_path_that_is_not_utf8_is_usable_and_errors_escape_control_characters() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = store_dir();
    let store = dir.path().join(OsStr::from_bytes(b"st\xff\x01re"));
    let o = bin()
        .args(["gen", "--quiet", "--preset", "tiny", "--out"])
        .arg(&store)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    for cmd in [&["check"][..], &["gc", "--no-atime-check"], &["survey"]] {
        let o = bin().args(cmd).arg(&store).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{cmd:?}: {}", stderr(&o));
    }
    let json = dir.path().join(OsStr::from_bytes(b"report\xfe.json"));
    let o = bin()
        .arg("check")
        .arg({
            let mut a = std::ffi::OsString::from("--json=");
            a.push(&json);
            a
        })
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(json.is_file());
    let hostile = dir.path().join("no\x1b[31mred\ttrace");
    let o = bin().arg("analyze").arg(&hostile).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(!err.contains('\x1b') && !err.contains('\t'), "{err:?}");
    assert!(err.contains("no\\u{1b}[31mred\\ttrace"), "{err}");
}

/// Issue 49, point 2: every option that writes is checked before any work. A directory
/// where a file goes, a missing directory, a read-only place: exit 2, one error naming the
/// option and the path, before the input is even looked at (every input here is missing,
/// and the error is still the output's), and nothing left anywhere (`survey --out DIR`
/// used to survey, then fail, leaving its temporary file beside DIR).
#[test]
fn every_output_option_is_checked_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ro = d.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let _ro = TmpfsMount::on(&ro, libc::MS_RDONLY);
    let file = d.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let missing = d.join("missing");
    let gone = missing.to_str().unwrap();
    // (command line before the output, the output option, whether it takes '=', what it is)
    let cases: &[(&[&str], &str, bool, bool)] = &[
        (&["survey", gone], "--out", false, false),
        (&["survey", gone], "--json", true, false),
        (&["gc", gone], "--json", true, false),
        (&["gc", gone], "--task-log", false, false),
        (&["check", gone], "--json", true, false),
        (&["simulate", "--store", gone], "--trace", false, false),
        (&["simulate", "--store", gone], "--json", true, false),
        (&["replay", gone], "--json", true, false),
        (&["analyze", gone], "--csv", true, true),
        (&["analyze", gone], "--parquet", true, true),
        (&["analyze", gone], "--svg", false, true),
        (
            &["calibrate", gone, "--survey", gone],
            "--out",
            false,
            false,
        ),
        (&["trace", "export", gone], "--output", false, false),
        (&["trace", "import", gone], "--out", false, false),
        (&["trace", "device", gone], "--svg", false, true),
        (
            &["mount", "--store", gone, "--mountpoint", gone],
            "--trace",
            false,
            false,
        ),
        (
            &["mount", "--store", gone, "--mountpoint", gone],
            "--log",
            false,
            false,
        ),
        (
            &["mount", "--store", gone, "--mountpoint", gone],
            "--stats",
            false,
            false,
        ),
        (&["gen"], "--out", false, true),
        (&["testbed"], "--out", false, true),
        (&["demo", "--simulate"], "--out", false, true),
    ];
    for &(before, flag, equals, dir_kind) in cases {
        let bad = [
            // A file option given a directory, a directory option given a file.
            (
                if dir_kind {
                    file.clone()
                } else {
                    d.to_path_buf()
                },
                if dir_kind {
                    "not a directory"
                } else {
                    "a directory; give a file name"
                },
            ),
            (
                missing.join("x/out"),
                if dir_kind { "" } else { "does not exist" },
            ),
            (ro.join("out"), "cannot write in"),
        ];
        for (path, want) in bad {
            if want.is_empty() {
                continue; // a directory option creates its missing parents
            }
            let mut args: Vec<String> = before.iter().map(|s| s.to_string()).collect();
            let p = path.to_str().unwrap();
            if equals {
                args.push(format!("{flag}={p}"));
            } else {
                args.push(flag.into());
                args.push(p.into());
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = run(&args);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains(flag) && err.contains(p) && err.contains(want),
                "{args:?}: {err}"
            );
            assert_eq!(
                err.lines().count(),
                1,
                "{args:?}: one error, before any work: {err}"
            );
        }
    }
    let left: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "nothing beside the two made here: {left:?}");
}
