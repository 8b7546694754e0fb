//! Shared helpers for integration tests: run the binary, generate stores.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_chunkscope"))
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run chunkscope")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Generates a store into `dir/name` and returns (store path, ground truth JSON).
pub fn gen(dir: &Path, name: &str, extra: &[&str]) -> (PathBuf, serde_json::Value) {
    let store = dir.join(name);
    let mut args = vec!["gen", "--quiet", "--out", store.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(o.status.success(), "gen failed: {}", stderr(&o));
    let truth_path = dir.join(format!("{name}.truth.json"));
    let truth =
        serde_json::from_slice(&std::fs::read(&truth_path).expect("truth beside the store"))
            .unwrap();
    (store, truth)
}

/// Runs `check --json -` and returns (exit code, report).
pub fn check(store: &Path, deep: bool) -> (i32, serde_json::Value) {
    let mut args = vec!["check", "--json", "-", store.to_str().unwrap()];
    if deep {
        args.insert(1, "--deep");
    }
    let o = run(&args);
    let report =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    (o.status.code().unwrap(), report)
}

/// A temporary directory on tmpfs when there is one (inode numbers follow creation order there).
pub fn tmpfs_dir() -> Option<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let statfs = nix_statfs_type(shm)?;
    (statfs == 0x0102_1994).then(|| tempfile::tempdir_in(shm).unwrap()) // TMPFS_MAGIC
}

fn nix_statfs_type(p: &Path) -> Option<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out pointer.
    (unsafe { libc::statfs(c.as_ptr(), &mut s) } == 0).then_some(s.f_type as i64)
}

/// A temporary directory for a store: tmpfs when there is one (fast to create 65536
/// directories in), else the default temporary directory. Tests that depend on the
/// filesystem's inode numbering use [`tmpfs_dir`] or say so.
pub fn store_dir() -> tempfile::TempDir {
    tmpfs_dir().unwrap_or_else(|| tempfile::tempdir().unwrap())
}
