//! Issue 3: the shell helpers in mount-scripts/ mount, run, unmount and report, and fail
//! clearly on bad arguments. Each test uses its own state directory and mountpoint.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use chunkscope::trace::{Name, Op, TraceReader};
use common::*;

fn script(name: &str, state: &Path, args: &[&str]) -> Output {
    Command::new(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("mount-scripts")
            .join(name),
    )
    .args(args)
    .env("CHUNKSCOPE", env!("CARGO_BIN_EXE_chunkscope"))
    .env("CHUNKSCOPE_STATE", state)
    .env("TMPDIR", state)
    .output()
    .unwrap()
}

fn mounted_under(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|m| m.starts_with(&dir.display().to_string()))
    })
}

#[test]
fn run_mounts_runs_unmounts_and_passes_the_status_on() {
    let dir = store_dir();
    let store = gen(dir.path(), "store", &["--preset", "tiny"]).0;
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let trace = dir.path().join("run.trace");
    let o = script(
        "chunkscope-run",
        &state,
        &[
            store.to_str().unwrap(),
            trace.to_str().unwrap(),
            "--threads",
            "2",
            "--",
            "sh",
            "-c",
            "stat \"$CHUNKSCOPE_MNT/.chunks\" >/dev/null && exit 7",
        ],
    );
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), trace.display().to_string());
    assert!(!mounted_under(dir.path()), "nothing left mounted");
    // Without a shell: the literal '$CHUNKSCOPE_MNT' of an argument is the mountpoint.
    let o = script(
        "chunkscope-run",
        &state,
        &[
            store.to_str().unwrap(),
            trace.to_str().unwrap(),
            "--",
            "stat",
            "$CHUNKSCOPE_MNT/.chunks",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!mounted_under(dir.path()), "nothing left mounted");
    let mut r = TraceReader::open(&trace).unwrap();
    let mut found = false;
    while let Some(rec) = r.next_record().unwrap() {
        found |= rec.op() == Some(Op::Lookup) && rec.name == Name::Text(".chunks".into());
    }
    assert!(found, "the command's stat was traced");
    assert_eq!(
        std::fs::read_dir(&state).unwrap().count(),
        0,
        "pid and log files removed, mountpoint gone"
    );
}

#[test]
fn umount_of_a_busy_mount_falls_back_to_lazy_and_says_so() {
    let dir = store_dir();
    let store = gen(dir.path(), "store", &["--preset", "tiny"]).0;
    let state = dir.path().join("state");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let o = script(
        "chunkscope-mount",
        &state,
        &[store.to_str().unwrap(), mnt.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let pid: i32 = stdout(&o).trim().parse().unwrap();
    let busy = std::fs::File::open(mnt.join(".lock")).unwrap();
    // Held until the script has detached the mount (lazily, as it is busy), not for a fixed
    // time: on a loaded machine the script may take longer than any delay to get there.
    let detached = mnt.clone();
    let closer = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let listed = |m: &std::path::Path| {
            let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
            let m = m.to_str().unwrap();
            mounts.lines().any(|l| l.split(' ').nth(1) == Some(m))
        };
        while listed(&detached) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        drop(busy);
    });
    let o = script("chunkscope-umount", &state, &[mnt.to_str().unwrap()]);
    closer.join().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("lazy unmount"), "{}", stderr(&o));
    assert!(!mounted_under(dir.path()));
    // The mount process (the pid the script printed) has exited.
    assert_ne!(unsafe { libc::kill(pid, 0) }, 0);
}

#[test]
fn scripts_refuse_bad_arguments() {
    let dir = store_dir();
    let state = dir.path();
    let o = script(
        "chunkscope-run",
        state,
        &["/nonexistent", "t", "--", "true"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("store '/nonexistent' is not a directory"),
        "{}",
        stderr(&o)
    );
    let o = script("chunkscope-run", state, &["/tmp", "t", "true", "x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing '--'"), "{}", stderr(&o));
    let o = script("chunkscope-mount", state, &["/tmp"]);
    assert!(
        stderr(&o).contains("usage: chunkscope-mount"),
        "{}",
        stderr(&o)
    );
    let o = script("chunkscope-umount", state, &[dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is not mounted"), "{}", stderr(&o));
}
