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
r fallocate -l 8192 fa
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

const PBS_USER: u32 = 1234;

/// What PBS does to a datastore, as the user it runs as (`backup`): run by
/// `pbs_write_pattern_through_the_mount_is_the_disks`, in a child process as that user (this
/// test binary again, `--ignored --exact`). Deterministic, so two runs leave the same bytes.
#[test]
#[ignore = "a helper, run as another user by pbs_write_pattern_through_the_mount_is_the_disks"]
fn pbs_writer() {
    use chunkscope::datastore::{blob, index, paths, Digest};
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let Some(root) = std::env::var_os("CHUNKSCOPE_PBS_WRITER_STORE") else {
        return;
    };
    let root = std::path::PathBuf::from(root);
    // The datastore lock, as a backup session takes it (fcntl, shared).
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(root.join(".lock"))
        .unwrap();
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_RDLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    assert_eq!(
        unsafe { libc::fcntl(lock.as_raw_fd(), libc::F_SETLK, &fl) },
        0,
        "{}",
        std::io::Error::last_os_error()
    );
    // Chunks, PBS's way: a temporary file in the chunk directory, fsync, rename into place;
    // inserting a digest again finds it (same size) and touches it.
    let mut digests = Vec::new();
    for i in 0..40u32 {
        let data = format!("chunk {i} of the PBS writer ")
            .repeat(100)
            .into_bytes();
        let d = Digest::of(&data);
        let encoded = blob::encode(&data, true);
        for _ in 0..2 {
            let path = root.join(paths::chunk_rel_path(&d));
            match std::fs::symlink_metadata(&path) {
                Ok(m) => {
                    assert_eq!(m.len(), encoded.len() as u64);
                    // The touch of an existing chunk: utimensat(UTIME_NOW, UTIME_OMIT).
                    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
                    let times = [
                        libc::timespec {
                            tv_sec: 0,
                            tv_nsec: libc::UTIME_NOW,
                        },
                        libc::timespec {
                            tv_sec: 0,
                            tv_nsec: libc::UTIME_OMIT,
                        },
                    ];
                    assert_eq!(
                        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) },
                        0
                    );
                }
                Err(_) => {
                    let tmp = path.with_file_name(format!("{d}.tmp_w{i:04}"));
                    let mut f = std::fs::File::create(&tmp).unwrap();
                    f.write_all(&encoded).unwrap();
                    f.sync_all().unwrap();
                    drop(f);
                    std::fs::rename(&tmp, &path).unwrap();
                }
            }
        }
        digests.push(d);
    }
    // A namespace, group and snapshot; an index, a blob and the manifest via temporary names.
    let snap = root.join("ns/test/vm/100/2026-11-30T10:00:00Z");
    std::fs::create_dir_all(&snap).unwrap();
    let size = digests.len() as u64 * 4096;
    let idx = index::fixed_index_bytes([7; 16], 1_764_496_800, size, 4096, &digests);
    index::write_index_file(&snap.join("drive-scsi0.img.fidx"), &idx).unwrap();
    let conf = blob::encode(b"memory: 2048\n", true);
    let tmp = snap.join("qemu-server.conf.tmp");
    std::fs::write(&tmp, &conf).unwrap();
    std::fs::rename(&tmp, snap.join("qemu-server.conf.blob")).unwrap();
    let parsed = index::IndexFile::parse(idx).unwrap();
    let manifest = chunkscope::datastore::manifest::Manifest {
        backup_type: "vm".into(),
        backup_id: "100".into(),
        backup_time: 1_764_496_800,
        files: vec![
            chunkscope::datastore::manifest::ManifestFile {
                filename: "drive-scsi0.img.fidx".into(),
                crypt_mode: "none".into(),
                size,
                csum: hex::encode(parsed.stored_csum()),
            },
            chunkscope::datastore::manifest::ManifestFile {
                filename: "qemu-server.conf.blob".into(),
                crypt_mode: "none".into(),
                size: conf.len() as u64,
                csum: {
                    use sha2::Digest as _;
                    hex::encode(sha2::Sha256::digest(&conf))
                },
            },
        ],
        unprotected: serde_json::json!({}),
        signature: None,
    };
    let tmp = snap.join("index.json.tmp");
    std::fs::write(&tmp, manifest.to_blob()).unwrap();
    std::fs::rename(&tmp, snap.join("index.json.blob")).unwrap();
    drop(lock);
}

/// Everything below `base` but times: names, owners, modes, sizes, types, and contents.
fn tree_with_contents(base: &Path) -> String {
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(
            "find . -mindepth 1 ! -path './.chunks/*' -o -path './.chunks/*/*' | sort | \
             while read -r p; do stat -c '%n %u:%g %a %s %F' \"$p\"; \
             [ -f \"$p\" ] && sha256sum < \"$p\"; done",
        )
        .current_dir(base)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The helper above, as the PBS user, on `target` (a directory or a mount).
fn pbs_writer_as_user(target: &Path) {
    let o = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "pbs_writer", "--test-threads", "1"])
        .env("CHUNKSCOPE_PBS_WRITER_STORE", target)
        .uid(PBS_USER)
        .gid(PBS_USER)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && out.contains("1 passed"), "{out}");
}

#[test]
fn pbs_write_pattern_through_the_mount_is_the_disks() {
    let dir = store_dir();
    let (plain, store) = (dir.path().join("plain"), dir.path().join("store"));
    for d in [&plain, &store] {
        chunkscope::datastore::create::create_datastore(d, Some((PBS_USER, PBS_USER)), |_| {})
            .unwrap();
    }
    let m = Mount::start(&store, dir.path(), false, &["--allow-other"]);
    pbs_writer_as_user(&plain);
    pbs_writer_as_user(&m.mnt);
    // Then GC, as the same user, through the mount and on the plain directory.
    for target in [&plain, &m.mnt] {
        let o = bin()
            .args(["gc", target.to_str().unwrap()])
            .uid(PBS_USER)
            .gid(PBS_USER)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).contains("TASK OK"), "{}", stdout(&o));
    }
    drop(m);
    let (p, s) = (tree_with_contents(&plain), tree_with_contents(&store));
    assert!(
        p.contains("./ns/test/vm/100/2026-11-30T10:00:00Z/index.json.blob 1234:1234"),
        "{p}"
    );
    assert_eq!(s, p, "the backing store is what the plain directory is");
    let (code, r) = check(&store, true);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["referenced_chunks"], 40);
}

#[test]
fn a_rename_is_traced_with_both_names() {
    use chunkscope::trace::{Op, TraceReader};
    let dir = store_dir();
    let store = dir.path().join("store");
    std::fs::create_dir_all(store.join("d")).unwrap();
    std::fs::write(store.join("old-name"), b"x").unwrap();
    let mut m = Mount::start(&store, dir.path(), true, &[]);
    std::fs::rename(m.path("old-name"), m.path("d/new-name")).unwrap();
    m.stop();
    let mut r = TraceReader::open(m.trace.as_ref().unwrap()).unwrap();
    let mut records = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        records.push(rec);
    }
    let rename = records
        .iter()
        .find(|r| r.op() == Some(Op::Rename))
        .expect("a rename record");
    let new = records
        .iter()
        .find(|r| r.op() == Some(Op::NewName))
        .expect("its new name");
    assert_eq!(new.seq, rename.seq);
    assert_eq!(format!("{:?}", rename.name), "Text(\"old-name\")");
    assert_eq!(format!("{:?}", new.name), "Text(\"new-name\")");
    use std::os::unix::fs::MetadataExt;
    let d_ino = std::fs::metadata(store.join("d")).unwrap().ino();
    assert_eq!(
        (new.parent, rename.arg),
        (d_ino, d_ino),
        "the new directory"
    );
    // Readers that follow requests skip it: analyze still reads the trace.
    let o = run(&[
        "analyze",
        "--json",
        m.trace.as_ref().unwrap().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}
