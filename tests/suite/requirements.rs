//! Issue 61: the README's test command passes on a fresh machine with only what the README
//! lists. The README's requirements table is the one list: `.ci/run` installs its rows and
//! names no package of its own; every tool the tests and chunkscope run is a row of it; a
//! test that needs a tool of the long suite's rows is in the long suite and, without the tool,
//! fails naming its package. The long test here runs the README's test command in a copy of
//! the checkout with every tool of the `long` rows out of reach (a PATH without them). Nothing
//! here depends on inode numbers.

use crate::common::*;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The string literals that follow `prefix` in `text` (`Command::new("` → `sh`, ...).
fn literals_after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.match_indices(prefix)
        .filter_map(|(i, _)| {
            let rest = &text[i + prefix.len()..];
            rest.find('"').map(|end| &rest[..end])
        })
        .collect()
}

/// The table's rows are well formed, and every tool a test or chunkscope itself runs by name
/// is a command of one of them: a test that runs a tool the table does not list would fail on
/// a machine that has only the table.
#[test]
fn every_tool_the_tests_and_chunkscope_run_is_a_row_of_the_readme_table() {
    let rows = requirements();
    assert!(rows.len() >= 10, "{rows:?}");
    for r in &rows {
        assert!(
            ["default", "long"].contains(&r.suite.as_str()),
            "suite of {r:?}"
        );
        assert!(
            ["apt", "cargo", "pip"].contains(&r.from.as_str()),
            "source of {r:?}"
        );
        assert!(!r.package.is_empty() && !r.commands.is_empty(), "{r:?}");
    }
    let listed: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.from != "pip")
        .flat_map(|r| r.commands.iter().map(String::as_str))
        .collect();
    let mut files = Vec::new();
    rust_files(&Path::new(REPO).join("tests"), &mut files);
    rust_files(&Path::new(REPO).join("src"), &mut files);
    let mut run = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        // `.run("zpool", ...)`: the ZFS testbed's commands in its daemon's namespace.
        let mut found: Vec<String> = ["Command::new(\"", "require(\"", "require_in(\"", ".run(\""]
            .iter()
            .flat_map(|p| literals_after(&text, p))
            .map(str::to_string)
            .collect();
        // The testbed runs its filesystem's mkfs by a name from a table.
        found.extend(
            literals_after(&text, "(\"mkfs.")
                .iter()
                .map(|t| format!("mkfs.{t}")),
        );
        for tool in found {
            // A name or an absolute path (`/bin/sh`); anything else is not a literal tool.
            let tool = tool.rsplit('/').next().unwrap();
            if !tool.is_empty()
                && tool
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
            {
                run.insert((tool.to_string(), f.clone()));
            }
        }
    }
    assert!(
        ["losetup", "mkfs.xfs", "zpool", "zfs"]
            .iter()
            .all(|want| run.iter().any(|(t, _)| t == want)),
        "the scan finds the tools: {run:?}"
    );
    let unlisted: Vec<_> = run
        .iter()
        .filter(|(t, _)| !listed.contains(t.as_str()) && t != "no-such-tool")
        .collect();
    assert!(
        unlisted.is_empty(),
        "run by name but not in README.md's requirements table: {unlisted:?}"
    );
}

/// `.ci/run` installs the table and nothing else: no package name of the table stands in it
/// outside comments (a second list would drift), and it reads the table's markers.
#[test]
fn ci_installs_the_readme_table_and_names_no_package_of_its_own() {
    let ci = std::fs::read_to_string(Path::new(REPO).join(".ci/run")).unwrap();
    assert!(ci.contains("<!-- requirements: begin") && ci.contains("README.md"));
    let code: Vec<&str> = ci
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    for r in requirements() {
        // The names an installer takes: apt's packages, a crate or module without version.
        let names: Vec<&str> = match r.from.as_str() {
            "apt" => r.package.split_whitespace().collect(),
            _ => vec![r.package.split(['@', '=', ' ']).next().unwrap()],
        };
        for name in names {
            let word = |l: &str| {
                l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'))
                    .any(|w| w == name)
            };
            assert!(
                !code.iter().any(|l| word(l)),
                ".ci/run names {name} itself: it must install only README.md's table"
            );
        }
    }
}

/// A tool that is missing fails with the package that brings it and how to install it; one
/// the table does not list fails saying so; one that is there is found.
#[test]
fn a_missing_tool_fails_naming_its_package() {
    let none = OsStr::new("/nonexistent");
    let e = require_in("mkfs.xfs", none).unwrap_err();
    assert!(
        e.contains("`mkfs.xfs`") && e.contains("apt-get install xfsprogs") && e.contains("long"),
        "{e}"
    );
    let e = require_in("s3s-fs", none).unwrap_err();
    assert!(
        e.contains("cargo install --locked s3s-fs@0.14.1 --features binary"),
        "{e}"
    );
    let e = require_in("no-such-tool", none).unwrap_err();
    assert!(e.contains("not in README.md's requirements table"), "{e}");
    let sh = require_in("sh", &std::env::var_os("PATH").unwrap()).unwrap();
    assert!(sh.ends_with("sh"), "{}", sh.display());
}

/// The files of the working tree that git tracks or would track (uncommitted changes
/// included, ignored files such as `target/` left out), copied to `to`.
fn copy_checkout(to: &Path) {
    let o = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(REPO)
        .output()
        .expect("git, to list the checkout's files");
    assert!(o.status.success(), "{}", stderr(&o));
    let mut n = 0;
    for name in o.stdout.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        use std::os::unix::ffi::OsStrExt;
        let rel = Path::new(OsStr::from_bytes(name));
        let from = Path::new(REPO).join(rel);
        if !from.is_file() {
            continue; // deleted in the working tree, not yet in the index
        }
        let dest = to.join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&from, &dest).unwrap();
        n += 1;
    }
    assert!(n > 50, "copied {n} files");
}

/// A directory of links to every command on this PATH but `hidden`, and to this toolchain's
/// own `cargo` and `rustc` (not rustup's proxies, which put cargo's bin directory, where
/// `cargo install` leaves s3s-fs, back on the PATH).
fn path_without(bin: &Path, hidden: &BTreeSet<String>) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir(bin).unwrap();
    let cargo = PathBuf::from(std::env::var_os("CARGO").expect("cargo runs the tests"));
    let toolchain = cargo.parent().unwrap().to_path_buf();
    let cargo_home_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .map(|c| c.join("bin"));
    let path = std::env::var_os("PATH").unwrap();
    let dirs = std::iter::once(toolchain.clone())
        .chain(std::env::split_paths(&path).filter(|d| Some(d) != cargo_home_bin.as_ref()));
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(s) = name.to_str() else { continue };
            let link = bin.join(&name);
            let executable = std::fs::metadata(e.path())
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
            if !executable || hidden.contains(s) || link.symlink_metadata().is_ok() {
                continue;
            }
            std::os::unix::fs::symlink(e.path(), &link).unwrap();
        }
    }
}

/// The commands of the table's `long` rows, and every file the long rows' Debian packages
/// installed (`dpkg -L`): what the default suite must do without.
fn long_suite_tools() -> BTreeSet<String> {
    let mut hidden = BTreeSet::new();
    for r in requirements().iter().filter(|r| r.suite == "long") {
        hidden.extend(r.commands.iter().cloned());
        if r.from == "apt" {
            for package in r.package.split_whitespace() {
                let Ok(o) = Command::new("dpkg").args(["-L", package]).output() else {
                    continue;
                };
                for line in String::from_utf8_lossy(&o.stdout).lines() {
                    if let Some(name) = Path::new(line).file_name().and_then(OsStr::to_str) {
                        if line.contains("/bin/") || line.contains("/sbin/") {
                            hidden.insert(name.to_string());
                        }
                    }
                }
            }
        }
    }
    hidden
}

/// The README's test command in a copy of this checkout, with a PATH that has none of the
/// long rows' tools (and the long rows' cargo binaries out of reach): every test passes. Then
/// two long-suite tests whose tools are missing fail, each naming its package.
#[test]
#[ignore = "long suite: builds a copy of the checkout and runs its default suite whole (10 to 15 minutes; .ci/run runs it alone)"]
fn the_readme_test_command_passes_without_the_long_suite_s_tools() {
    let tmp = tempfile::tempdir().unwrap();
    let clone = tmp.path().join("chunkscope");
    copy_checkout(&clone);
    let hidden = long_suite_tools();
    assert!(
        hidden.contains("mkfs.xfs") && hidden.contains("s3s-fs"),
        "{hidden:?}"
    );
    let bin = tmp.path().join("bin");
    path_without(&bin, &hidden);
    for r in requirements()
        .iter()
        .filter(|r| r.suite == "long" && r.from != "pip")
    {
        for tool in &r.commands {
            assert!(
                require_in(tool, bin.as_os_str()).is_err(),
                "{tool} is still reachable"
            );
        }
    }
    let cargo = |args: &[&str], log: &str| {
        let out = std::fs::File::create(tmp.path().join(log)).unwrap();
        let status = Command::new(bin.join("cargo"))
            .args(args)
            .current_dir(&clone)
            .env("PATH", &bin)
            .env("CARGO_TARGET_DIR", tmp.path().join("target"))
            .env_remove("CHUNKSCOPE_S3S_FS")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .status()
            .unwrap();
        (
            status,
            std::fs::read_to_string(tmp.path().join(log)).unwrap(),
        )
    };
    let (status, log) = cargo(&["test", "--all-targets"], "default.log");
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.ends_with("FAILED") || l.contains("panicked"))
        .collect();
    let tail: String = log.lines().rev().take(60).collect::<Vec<_>>().join("\n");
    assert!(
        status.success() && failed.is_empty(),
        "the README's test command failed without the long suite's tools: {failed:#?}\n\
         (the end of its output, last line first:)\n{tail}"
    );
    let passed: u64 = log
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|l| l.split(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(passed > 300, "only {passed} tests ran:\n{tail}");

    let (status, log) = cargo(
        &[
            "test",
            "--test",
            "suite",
            "--",
            "--ignored",
            "--exact",
            "survey::a_survey_reads_the_xfs_geometry_and_the_model_takes_it",
            "s3::the_client_lists_in_pages_and_deletes_in_batches_on_a_real_server",
        ],
        "long.log",
    );
    assert!(!status.success(), "{log}");
    assert!(log.contains("2 failed"), "{log}");
    assert!(
        log.contains("needs `mkfs.xfs`") && log.contains("apt-get install xfsprogs"),
        "{log}"
    );
    assert!(
        log.contains("needs `s3s-fs`")
            && log.contains("cargo install --locked s3s-fs@0.14.1 --features binary"),
        "{log}"
    );
}
