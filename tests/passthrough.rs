//! Issue 19: the overlay as a faithful passthrough. The same shell steps, run as unprivileged
//! users on a plain directory and through an `--allow-other` mount of an identical one, give
//! the same results and leave the same trees (owners, modes, link counts, sizes, types).
//! Both directories are on tmpfs (`store_dir`); nothing here depends on inode numbers.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;

use common::*;

/// A tree an unprivileged user can work in: `pub` (0777) and `sticky` (1777).
fn lay_out(base: &Path) {
    for (d, mode) in [("pub", 0o777), ("sticky", 0o1777)] {
        std::fs::create_dir_all(base.join(d)).unwrap();
        std::fs::set_permissions(base.join(d), std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// Runs `script` with `sh` in `cwd` as uid:gid (no supplementary groups), umask 022; returns
/// what it printed.
fn run_as(uid: u32, gid: u32, cwd: &Path, script: &str) -> String {
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 022\nr() {{ \"$@\" 2>/dev/null; echo \"$* -> $?\"; }}\n{script}"
        ))
        .current_dir(cwd)
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// Names, owners, modes, link counts, sizes and types of everything below `base`.
fn tree(base: &Path) -> String {
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg("find . -mindepth 1 | sort | xargs stat -c '%n %u:%g %a %h %s %F'")
        .current_dir(base)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const FIRST_USER: &str = "
cd pub
r sh -c 'echo hi > f'
r chmod 640 f
r sh -c 'echo more >> f'
r mkdir -m 750 d
r ln f f2
r mv f2 f3
r mkfifo -m 600 p
r ln -s f s
r touch -a -d @1000000000 f3
r truncate -s 100 f3
r chmod 4755 f3
cd ../sticky
r sh -c 'echo x > mine'
r ln mine mine2
r mv mine2 mine3
r mkdir -m 700 private
";

const SECOND_USER: &str = "
r rm sticky/mine
r mv sticky/mine3 pub/stolen
r chmod 777 pub/f
r sh -c 'echo x >> pub/f'
r ls private
r sh -c 'cat pub/f'
r rm pub/f3
r mkdir pub/d/sub
r sh -c 'echo y > sticky/theirs'
";

#[test]
fn unprivileged_callers_get_the_backing_filesystems_answers_and_ownership() {
    let dir = store_dir();
    let (plain, store) = (dir.path().join("plain"), dir.path().join("store"));
    lay_out(&plain);
    lay_out(&store);
    let m = Mount::start(&store, dir.path(), false, &["--allow-other"]);
    let through = m.mnt.clone();

    let a_plain = run_as(1000, 1000, &plain, FIRST_USER);
    let a_mount = run_as(1000, 1000, &through, FIRST_USER);
    assert_eq!(a_mount, a_plain, "the first user's steps");
    assert!(!a_plain.contains("-> 1"), "every step succeeds: {a_plain}");
    let b_plain = run_as(1001, 1001, &plain, SECOND_USER);
    let b_mount = run_as(1001, 1001, &through, SECOND_USER);
    assert_eq!(b_mount, b_plain, "the second user's steps");
    assert!(
        b_plain.contains("rm sticky/mine -> 1"),
        "the sticky bit holds: {b_plain}"
    );

    let plain_tree = tree(&plain);
    assert_eq!(tree(&through), plain_tree, "as seen through the mount");
    drop(m);
    assert_eq!(tree(&store), plain_tree, "the backing store itself");
    assert!(
        plain_tree.contains("./pub/f 1000:1000 4755 1 100 regular file"),
        "{plain_tree}"
    );
    assert!(
        plain_tree.contains("./pub/p 1000:1000 600 1 0 fifo"),
        "{plain_tree}"
    );
}

#[test]
fn a_mountpoint_that_is_not_empty_is_refused_unless_asked() {
    let dir = store_dir();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(mnt.join("precious"), b"x").unwrap();
    let o = run(&[
        "mount",
        "--store",
        store.to_str().unwrap(),
        "--mountpoint",
        mnt.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("is not empty") && e.contains("--nonempty"),
        "{e}"
    );
    // With the option it mounts (and hides the file while mounted).
    let m = Mount::start(&store, dir.path(), false, &["--nonempty"]);
    assert!(!m.mnt.join("precious").exists());
    drop(m);
    assert!(mnt.join("precious").exists());
}
