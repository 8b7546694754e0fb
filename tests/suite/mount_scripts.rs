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

/// Whether anything is mounted below `dir` (not `dir` itself: a store directory is a tmpfs).
fn mounted_under(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let below = format!("{}/", dir.display());
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(&below)))
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
    // SAFETY: signal 0 sends nothing; it only asks whether the pid exists.
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
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let o = script("chunkscope-umount", state, &[plain.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is not mounted"), "{}", stderr(&o));
}

#[test]
fn scripts_run_by_a_user_without_root_say_that_they_need_it() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // The scripts copied where `nobody` can read them (the checkout may be in a 0700 home).
    let dir = store_dir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mount-scripts");
    let scripts = dir.path().join("mount-scripts");
    std::fs::create_dir(&scripts).unwrap();
    for e in std::fs::read_dir(&here).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), scripts.join(e.file_name())).unwrap();
    }
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o_s = open.to_str().unwrap();
    for (name, args) in [
        ("chunkscope-mount", vec![o_s, o_s]),
        ("chunkscope-run", vec![o_s, "t", "--", "true"]),
        ("chunkscope-umount", vec![o_s]),
    ] {
        let o = Command::new(scripts.join(name))
            .args(&args)
            .env_remove("CHUNKSCOPE_STATE")
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {e}");
        assert!(
            e.starts_with(&format!("{name}: needs root (CAP_")) && e.contains("run it with sudo"),
            "{name}: {e}"
        );
        assert!(!e.contains("Permission denied"), "{name}: {e}");
    }
    // Root with a state directory it cannot write (a read-only place): said, with the remedy.
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let _ro = TmpfsMount::on(&ro, libc::MS_RDONLY);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let o = script(
        "chunkscope-mount",
        &ro.join("state"),
        &[dir.path().to_str().unwrap(), mnt.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot write the state directory")
            && stderr(&o).contains("CHUNKSCOPE_STATE"),
        "{}",
        stderr(&o)
    );
    assert!(!mounted_under(&mnt));
}

/// The pid a chunkscope-mount in `state` recorded for its mount.
fn mount_pid(state: &Path) -> u32 {
    let pid = std::fs::read_dir(state)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().ends_with(".pid"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .expect("a pid file");
    pid.trim().parse().unwrap()
}

fn wait_gone(pid: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // SAFETY: signal 0 only asks whether the process exists.
    while unsafe { libc::kill(pid as i32, 0) } == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "mount process {pid} still running"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A trace that was written to its end: whole records, some of them.
fn assert_complete(trace: &Path) {
    let mut r = TraceReader::open(trace).unwrap();
    let mut n = 0;
    while r.next_record().unwrap().is_some() {
        n += 1;
    }
    assert!(n > 0, "{} is empty", trace.display());
    assert_eq!(
        r.truncated_bytes(),
        None,
        "{} has a torn tail",
        trace.display()
    );
}

/// Issue 23, point 7: the helper mount(8) runs for an /etc/fstab line of type
/// fuse.chunkscope, called as mount(8) calls it.
#[test]
fn the_fstab_helper_mounts_with_the_line_s_options_and_umount_ends_it() {
    let dir = store_dir();
    let store = gen(dir.path(), "store", &["--preset", "tiny"]).0;
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let trace = dir.path().join("fstab.trace");
    let opts = format!(
        "rw,nofail,_netdev,x-systemd.automount,trace={},model=zfs-hdd,time-scale=0,readdirplus",
        trace.display()
    );
    let (s, m) = (store.to_str().unwrap(), mnt.to_str().unwrap());
    // mount -f: everything but the mount.
    let o = script("mount.fuse.chunkscope", &state, &[s, m, "-f", "-o", &opts]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!mounted_under(dir.path()));
    let o = script(
        "mount.fuse.chunkscope",
        &state,
        &[s, m, "-n", "-o", &opts, "-t", "fuse.chunkscope"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(mounted_under(dir.path()));
    let pid = mount_pid(&state);
    let _guard = Mount::adopt(&mnt);
    let st: serde_json::Value = serde_json::from_slice(&run(&["ctl", m, "stats"]).stdout).unwrap();
    assert_eq!(
        st["model"]["name"], "zfs-hdd",
        "model=zfs-hdd became --model zfs-hdd"
    );
    std::fs::read_dir(mnt.join(".chunks")).unwrap().count();
    let u = Command::new("umount").arg(&mnt).output().unwrap();
    assert!(u.status.success(), "{u:?}");
    wait_gone(pid);
    assert_complete(&trace);
    let header = TraceReader::open(&trace)
        .unwrap()
        .meta()
        .kernel_cache()
        .unwrap();
    assert!(header.readdirplus, "a flag option became --readdirplus");
    // A bad option fails the mount, with the daemon's message.
    let o = script(
        "mount.fuse.chunkscope",
        &state,
        &[s, m, "-o", "model=nonesuch"],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nonesuch"), "{}", stderr(&o));
    assert!(!mounted_under(dir.path()));
}

/// Issue 23, point 7: the systemd unit's command, run as systemd runs it (its `$$` a `$`,
/// the environment file's variables set), mounts; SIGTERM, what `systemctl stop` sends,
/// unmounts and flushes the trace. The example environment file sets what the unit reads.
#[test]
fn the_systemd_unit_s_command_mounts_and_its_stop_flushes_the_trace() {
    let scripts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mount-scripts");
    let unit = std::fs::read_to_string(scripts.join("chunkscope-mount@.service")).unwrap();
    let line = |key: &str| -> String {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= in the unit"))
            .to_string()
    };
    assert_eq!(line("EnvironmentFile"), "/etc/chunkscope/%i.env");
    assert_eq!(line("KillSignal"), "SIGTERM");
    let shell = |cmd: String| -> String {
        let script = cmd
            .strip_prefix("/bin/sh -c '")
            .and_then(|c| c.strip_suffix('\''))
            .unwrap_or_else(|| panic!("not a /bin/sh -c '...' command: {cmd}"));
        script.replace("$$", "$")
    };
    let (start, post) = (shell(line("ExecStart")), shell(line("ExecStartPost")));
    // systemd's own check of the unit (Debian's systemd brings it; README's requirements).
    let d = tempfile::tempdir().unwrap();
    let copy = d.path().join("chunkscope-mount@test.service");
    std::fs::write(&copy, &unit).unwrap();
    let o = Command::new(require("systemd-analyze"))
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    assert!(o.status.success() && o.stderr.is_empty(), "{o:?}");
    let example = std::fs::read_to_string(scripts.join("chunkscope.env.example")).unwrap();
    let keys: Vec<&str> = example
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('=').next().unwrap())
        .collect();
    assert_eq!(keys, ["STORE", "MOUNTPOINT", "TRACE", "OPTIONS"]);
    for k in &keys {
        assert!(
            start.contains(&format!("${k}")) || start.contains(&format!("{{{k}")),
            "{k}"
        );
    }

    let dir = store_dir();
    let store = gen(dir.path(), "store", &["--preset", "tiny"]).0;
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let trace = dir.path().join("service.trace");
    let log = dir.path().join("service.log");
    let env = |c: &mut Command| {
        c.env("CHUNKSCOPE", env!("CARGO_BIN_EXE_chunkscope"))
            .env("STORE", &store)
            .env("MOUNTPOINT", &mnt)
            .env("TRACE", &trace)
            .env(
                "OPTIONS",
                format!("--model zfs-hdd --time-scale 0 --log {}", log.display()),
            );
    };
    let mut c = Command::new("/bin/sh");
    c.args(["-c", &start]);
    env(&mut c);
    let mut child = c.spawn().unwrap();
    let mut p = Command::new("/bin/sh");
    p.args(["-c", &post]);
    env(&mut p);
    let o = p.output().unwrap();
    assert!(o.status.success(), "ExecStartPost: {}", stderr(&o));
    let _guard = Mount::adopt(&mnt);
    std::fs::read_dir(mnt.join(".chunks")).unwrap().count();
    // systemctl stop: ExecStop with MAINPID, the service's process (sh exec'd the mount: the
    // same pid, the child this test started); it signals it and waits for it to exit.
    let o = Command::new("/bin/sh")
        .args(["-c", &shell(line("ExecStop"))])
        .env("MAINPID", child.id().to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "ExecStop: {}", stderr(&o));
    let status = child.wait().unwrap();
    assert!(status.success(), "the mount exited {status}");
    assert!(!mounted_under(dir.path()));
    assert_complete(&trace);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("chunkscope: unmounted; trace"), "{text}");
}
