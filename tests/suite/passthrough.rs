//! Issue 19: the overlay as a faithful passthrough. The same shell steps, run as unprivileged
//! users on a plain directory and through an `--allow-other` mount of an identical one, give
//! the same results and leave the same trees (owners, modes, link counts, sizes, types).
//! Both directories are on tmpfs (`store_dir`); nothing here depends on inode numbers.

use crate::common;

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
    // SAFETY: a plain C struct; all zeroes is a valid value of it.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_RDLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    assert_eq!(
        // SAFETY: a valid descriptor and lock struct.
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
                        // SAFETY: a valid C string and two timespecs.
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
    let o = test_binary_for_others()
        .args([
            "--ignored",
            "--exact",
            "passthrough::pbs_writer",
            "--test-threads",
            "1",
        ])
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
        let o = bin_for_others()
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
fn a_rename_and_a_link_are_traced_with_both_names() {
    use chunkscope::trace::{Op, TraceReader};
    let dir = store_dir();
    let store = dir.path().join("store");
    std::fs::create_dir_all(store.join("d")).unwrap();
    std::fs::create_dir_all(store.join("e/f")).unwrap();
    std::fs::write(store.join("old-name"), b"x").unwrap();
    std::fs::write(store.join("e/f/source"), b"y").unwrap();
    let mut m = Mount::start(&store, dir.path(), true, &[]);
    std::fs::rename(m.path("old-name"), m.path("d/new-name")).unwrap();
    std::fs::hard_link(m.path("e/f/source"), m.path("d/linked")).unwrap();
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
    // A link's request names only the inode: the overlay records a name it had beside the
    // new one.
    let link = records
        .iter()
        .find(|r| r.op() == Some(Op::Link))
        .expect("a link record");
    let old = records
        .iter()
        .find(|r| r.op() == Some(Op::OldName))
        .expect("its source name");
    let src = std::fs::metadata(store.join("e/f/source")).unwrap();
    let f_ino = std::fs::metadata(store.join("e/f")).unwrap().ino();
    assert_eq!(old.seq, link.seq);
    assert_eq!(format!("{:?}", link.name), "Text(\"linked\")");
    assert_eq!(format!("{:?}", old.name), "Text(\"source\")");
    assert_eq!((link.ino, link.parent), (src.ino(), d_ino), "the new name");
    assert_eq!((old.ino, old.parent), (src.ino(), f_ino), "the source name");
    // Readers that follow requests skip both: analyze still reads the trace.
    let o = run(&[
        "analyze",
        "--json",
        m.trace.as_ref().unwrap().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// The overlay's inode table across thousands of renames, links and unlinks, with the kernel
/// made to FORGET every inode it caches every 100 calls: every name reached through the mount
/// is the file the store has under it (same inode, same content, same link count), files kept
/// open read what they held after their names went, and the table shrinks back. On `/tmp`
/// (ext4 here), which hands freed inode numbers to new files at once, so node ids are reused
/// while the kernel may still hold the old ones; the test counts the reuses and needs some.
#[test]
fn names_stay_right_through_renames_links_unlinks_and_forgets() {
    use chunkscope::overlay::control::{default_socket, Client};
    use std::collections::HashMap;
    use std::io::{Read, Seek};
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap(); // /tmp: ext4 here (reuses inode numbers)
    let store = dir.path().join("store");
    let dirs = ["", "a", "b", "a/c"];
    for d in dirs {
        std::fs::create_dir_all(store.join(d)).unwrap();
    }
    let names: Vec<String> = dirs
        .iter()
        .flat_map(|d| {
            (0..4).map(move |i| format!("{d}{}f{i}", if d.is_empty() { "" } else { "/" }))
        })
        .collect();
    let m = Mount::start(&store, dir.path(), false, &["--threads", "4"]);
    // name -> the id written into its file when it was created.
    let mut model: HashMap<String, u64> = HashMap::new();
    let mut open: Vec<(std::fs::File, u64)> = Vec::new();
    let mut held: Vec<std::fs::File> = Vec::new();
    let mut ino_of_id: HashMap<u64, u64> = HashMap::new();
    let mut id_of_ino: HashMap<u64, u64> = HashMap::new();
    let mut reused = 0;
    // The project's generator, seeded: a failure repeats.
    let mut rng = chunkscope::rng::SplitMix(19);
    let mut below = |n: usize| (rng.next_u64() % n as u64) as usize;
    let content = |id: u64| format!("file {id}\n");
    let check = |name: &str, model: &HashMap<String, u64>| {
        let through = std::fs::symlink_metadata(m.path(name));
        let backing = std::fs::symlink_metadata(store.join(name));
        match (through, backing, model.get(name)) {
            (Ok(t), Ok(b), Some(&id)) => {
                assert_eq!(
                    (t.ino(), t.nlink(), t.size()),
                    (b.ino(), b.nlink(), b.size()),
                    "{name}"
                );
                assert_eq!(
                    std::fs::read_to_string(m.path(name)).unwrap(),
                    content(id),
                    "{name}"
                );
            }
            (Err(t), Err(b), None) => {
                assert_eq!(t.raw_os_error(), b.raw_os_error(), "{name}");
                assert_eq!(t.raw_os_error(), Some(libc::ENOENT), "{name}");
            }
            (t, b, want) => panic!("{name}: through {t:?}, store {b:?}, model {want:?}"),
        }
    };
    for step in 0..3000u64 {
        let a = names[below(names.len())].clone();
        let b = names[below(names.len())].clone();
        match below(7) {
            0 | 1 => {
                // A new file under `a` (a new inode, replacing what was there).
                let _ = std::fs::remove_file(m.path(&a));
                std::fs::write(m.path(&a), content(step)).unwrap();
                model.insert(a.clone(), step);
                let ino = std::fs::symlink_metadata(store.join(&a)).unwrap().ino();
                if id_of_ino.insert(ino, step).is_some() {
                    reused += 1;
                }
                ino_of_id.insert(step, ino);
            }
            2 => {
                let r = std::fs::rename(m.path(&a), m.path(&b));
                assert_eq!(r.is_ok(), model.contains_key(&a), "rename {a} {b}: {r:?}");
                // Two names of one file: rename does nothing (POSIX).
                if model.get(&a) != model.get(&b) {
                    if let Some(id) = model.remove(&a) {
                        model.insert(b.clone(), id);
                    }
                }
            }
            3 => {
                let r = std::fs::hard_link(m.path(&a), m.path(&b));
                let ok = model.contains_key(&a) && !model.contains_key(&b);
                assert_eq!(r.is_ok(), ok, "link {a} {b}: {r:?}");
                if ok {
                    model.insert(b.clone(), model[&a]);
                }
            }
            4 => {
                let r = std::fs::remove_file(m.path(&a));
                assert_eq!(r.is_ok(), model.remove(&a).is_some(), "unlink {a}: {r:?}");
            }
            _ if below(2) == 0 => {
                // Keep `a` open (up to 8 files), or close one.
                if let (Some(&id), true) = (model.get(&a), open.len() < 8) {
                    open.push((std::fs::File::open(m.path(&a)).unwrap(), id));
                } else if !open.is_empty() {
                    open.swap_remove(below(open.len()));
                }
            }
            _ => {
                // An O_PATH descriptor: the kernel keeps the node (no FORGET), the overlay
                // opens nothing, so once the name goes the store frees the inode and its
                // number comes back for a new file while the kernel still knows the old node.
                use std::os::unix::fs::OpenOptionsExt;
                if model.contains_key(&a) && held.len() < 8 {
                    let f = std::fs::OpenOptions::new()
                        .read(true)
                        .custom_flags(libc::O_PATH)
                        .open(m.path(&a))
                        .unwrap();
                    held.push(f);
                } else if !held.is_empty() {
                    held.swap_remove(below(held.len()));
                }
            }
        }
        check(&a, &model);
        check(&b, &model);
        for (f, id) in &mut open {
            let mut s = String::new();
            f.rewind().unwrap();
            f.read_to_string(&mut s).unwrap();
            assert_eq!(s, content(*id), "an open file after step {step}");
            assert_eq!(f.metadata().unwrap().ino(), ino_of_id[id]);
        }
        if step % 100 == 99 {
            // The kernel drops its dentries and inodes and sends FORGET for them.
            std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
        }
    }
    for n in &names {
        check(n, &model);
    }
    assert!(model.len() > 3, "a vacuous run: {} names left", model.len());
    if statfs_type(dir.path()) == Some(0xEF53) {
        assert!(reused > 10, "inode numbers reused {reused} times");
    }
    drop(open);
    drop(held);
    let mut c = Client::connect(&default_socket(&m.mnt).unwrap()).unwrap();
    // The typed reply (`Client::stats`), as the demo reads it.
    let inodes = |c: &mut Client| -> u64 { c.stats().unwrap().inodes };
    std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while inodes(&mut c) > 8 {
        assert!(
            std::time::Instant::now() < deadline,
            "the table kept {} inodes",
            inodes(&mut c)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A FUSE mount is nodev and nosuid unless told otherwise; the overlay takes the store's own
/// flags, so a device node, a set-uid file and an executable behave as on the store.
#[test]
fn the_mount_takes_the_stores_dev_suid_and_exec_flags() {
    let dir = store_dir();
    for (case, flags) in [
        ("plain", 0),
        (
            "restricted",
            libc::MS_NODEV | libc::MS_NOSUID | libc::MS_NOEXEC,
        ),
    ] {
        let base = dir.path().join(case);
        let fs = base.join("fs");
        std::fs::create_dir_all(&fs).unwrap();
        let _fs = TmpfsMount::on(&fs, flags);
        let store = fs.join("store");
        std::fs::create_dir(&store).unwrap();
        std::fs::copy("/bin/true", store.join("true")).unwrap();
        let m = Mount::start(&store, &base, false, &[]);
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let line = info
            .lines()
            .find(|l| l.split(' ').nth(4) == Some(m.mnt.to_str().unwrap()))
            .expect("the mount in mountinfo");
        let opts: Vec<&str> = line.split(' ').nth(5).unwrap().split(',').collect();
        let restricted = flags != 0;
        for o in ["nodev", "nosuid", "noexec"] {
            assert_eq!(opts.contains(&o), restricted, "{case}: {line}");
        }
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: valid C string; a character device (1, 3) made through the mount.
        let node = std::ffi::CString::new(m.path("null").as_os_str().as_bytes()).unwrap();
        assert_eq!(
            // SAFETY: a valid C string.
            unsafe { libc::mknod(node.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) },
            0
        );
        let opened = std::fs::OpenOptions::new().write(true).open(m.path("null"));
        let ran = std::process::Command::new(m.path("true")).status();
        if restricted {
            assert_eq!(
                opened.unwrap_err().raw_os_error(),
                Some(libc::EACCES),
                "{case}"
            );
            assert_eq!(
                ran.unwrap_err().raw_os_error(),
                Some(libc::EACCES),
                "{case}"
            );
        } else {
            opened.unwrap();
            assert!(ran.unwrap().success(), "{case}");
        }
    }
}

/// A worker thread keeps its last caller's credentials until the next request (the switch is
/// lazy), so every request must take its own: here root and an unprivileged user work through
/// one worker thread at the same time. Root's writes keep its file's set-uid bit (root may), as
/// on the disk; what each creates is its own.
#[test]
fn concurrent_callers_each_get_their_own_credentials() {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let dir = store_dir();
    let store = dir.path().join("store");
    lay_out(&store);
    let m = Mount::start(
        &store,
        dir.path(),
        false,
        &["--allow-other", "--threads", "1"],
    );
    let suid = m.path("pub/suid");
    std::fs::write(&suid, b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let user = std::process::Command::new("sh")
        .arg("-c")
        .arg("umask 022; i=0; while [ $i -lt 1500 ]; do echo x > pub/u$i; cat pub/u$i >/dev/null; i=$((i+1)); done")
        .current_dir(&m.mnt)
        .uid(1000)
        .gid(1000)
        .spawn()
        .unwrap();
    let mut user = ChildGuard(user);
    let mut rounds = 0;
    while user.0.try_wait().unwrap().is_none() || rounds < 200 {
        let mut f = std::fs::OpenOptions::new().write(true).open(&suid).unwrap();
        f.write_all(b"#").unwrap();
        let mode = f.metadata().unwrap().mode();
        drop(f);
        assert_eq!(
            mode & 0o7777,
            0o4755,
            "root's write kept the set-uid bit (round {rounds})"
        );
        std::fs::write(m.path(&format!("pub/r{rounds}")), b"r").unwrap();
        rounds += 1;
    }
    assert!(user.0.wait().unwrap().success());
    for e in std::fs::read_dir(store.join("pub")).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let uid = e.metadata().unwrap().uid();
        match name.as_bytes()[0] {
            b'u' => assert_eq!(uid, 1000, "{name}"),
            _ => assert_eq!(uid, 0, "{name}"),
        }
    }
    assert_eq!(
        std::fs::read_dir(store.join("pub")).unwrap().count(),
        1 + 1500 + rounds
    );
}

/// Kills (by its own pid) and reaps a child this test started if the test fails first.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Issue 40, point 7 (pjdfstest chmod/12.t): a write by another user clears the file's
/// set-user-ID and set-group-ID bits, through the mount as on the disk; that user still may
/// not clear them with chmod. (Through the mount the write failed with EIO and the bits stayed:
/// the kernel's request to drop them came as the writer, who does not own the file.)
#[test]
fn a_write_by_another_user_clears_set_id_bits_as_on_the_disk() {
    use std::os::unix::fs::MetadataExt;
    let dir = store_dir();
    let (plain, store) = (dir.path().join("plain"), dir.path().join("store"));
    lay_out(&plain);
    lay_out(&store);
    let m = Mount::start(&store, dir.path(), false, &["--allow-other"]);
    let mut results = Vec::new();
    for base in [plain.clone(), m.mnt.clone()] {
        for (name, mode) in [("both", 0o6777), ("uid", 0o4777), ("gid", 0o2777)] {
            let f = base.join("pub").join(name);
            std::fs::write(&f, b"x").unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let out = run_as(
            1000,
            1000,
            &base,
            "r sh -c 'echo y >> pub/both'\nr sh -c 'echo y >> pub/uid'\nr chmod g-s pub/gid",
        );
        let modes: Vec<u32> = ["both", "uid", "gid"]
            .iter()
            .map(|n| std::fs::metadata(base.join("pub").join(n)).unwrap().mode() & 0o7777)
            .collect();
        results.push((out, modes));
    }
    assert_eq!(results[0].1, vec![0o777, 0o777, 0o2777], "{:?}", results[0]);
    assert_eq!(results[1], results[0], "through the mount as on the disk");
}
