//! Issue 3: the overlay passes everything through faithfully and records every request with
//! backing inode numbers. Every test mounts for real (root and /dev/fuse), on its own
//! mountpoint, and unmounts through `Mount`'s drop guard, panic or not.

use crate::common;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use chunkscope::datastore::paths::chunk_rel_path;
use chunkscope::datastore::{Digest, IndexFile};
use chunkscope::trace::{Name, Op, TraceReader};
use common::*;

fn tiny_store(dir: &Path) -> std::path::PathBuf {
    gen(dir, "store", &["--preset", "tiny"]).0
}

/// Relative path -> (inode, mode, size, mtime) of every entry below `root`.
fn tree(root: &Path) -> BTreeMap<String, (u64, u32, u64, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            assert_eq!(
                e.ino(),
                m.ino(),
                "d_ino equals st_ino for {}",
                e.path().display()
            );
            if m.is_dir() {
                stack.push(e.path());
            }
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            out.insert(rel, (m.ino(), m.mode(), m.size(), m.mtime()));
        }
    }
    out
}

fn a_chunk(store: &Path) -> Digest {
    let order = chunkscope::datastore::snapshots::phase1_order(store).unwrap();
    IndexFile::open(&order.expected[0]).unwrap().digest(0)
}

#[test]
fn passthrough_shows_the_backing_store_with_backing_inodes() {
    let dir = store_dir();
    let store = tiny_store(dir.path());
    let before = tree(&store);
    let m = Mount::start(&store, dir.path(), false, &[]);
    // Same names, inode numbers (st_ino and d_ino), modes, sizes and mtimes.
    assert_eq!(tree(&m.mnt), before);
    assert_eq!(
        std::fs::metadata(&m.mnt).unwrap().ino(),
        std::fs::metadata(&store).unwrap().ino()
    );
    // Every file reads back byte for byte.
    let mut files = 0;
    for (rel, (_, mode, _, _)) in &before {
        if mode & libc::S_IFMT == libc::S_IFREG {
            let through = std::fs::read(m.mnt.join(rel)).unwrap();
            assert_eq!(through, std::fs::read(store.join(rel)).unwrap(), "{rel}");
            files += 1;
        }
    }
    assert!(files > 2000, "{files}");
    // statfs passes through.
    let s = |p: &Path| {
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a plain C struct; all zeroes is a valid value of it.
        let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C string and out pointer.
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut v) }, 0);
        (v.f_blocks, v.f_files, v.f_bsize)
    };
    assert_eq!(s(&m.mnt), s(&store));
}

#[test]
fn stat_and_touch_are_traced_with_backing_inodes() {
    let dir = store_dir();
    let store = tiny_store(dir.path());
    let d = a_chunk(&store);
    let rel = chunk_rel_path(&d);
    let backing = std::fs::metadata(store.join(&rel)).unwrap();
    let mut m = Mount::start(&store, dir.path(), true, &[]);

    let st = std::fs::symlink_metadata(m.mnt.join(&rel)).unwrap();
    assert_eq!(st.ino(), backing.ino());
    // utimensat(UTIME_NOW, UTIME_OMIT), as PBS touches a chunk.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let c = CString::new(m.mnt.join(&rel).as_os_str().as_bytes()).unwrap();
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
        unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        },
        0
    );
    let after = std::fs::metadata(store.join(&rel)).unwrap();
    assert!(after.atime() > backing.atime(), "backing atime moved");
    assert_eq!(
        (after.mtime(), after.mtime_nsec()),
        (backing.mtime(), backing.mtime_nsec()),
        "mtime untouched"
    );
    // The mount shows the new atime at once (attr TTL 0).
    assert_eq!(
        std::fs::metadata(m.mnt.join(&rel)).unwrap().atime(),
        after.atime()
    );
    let log = m.stop();

    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    let chunks_ino = ino(&store.join(".chunks"));
    let subdir_ino = ino(&store.join(rel.parent().unwrap()));
    let mut r = TraceReader::open(m.trace.as_ref().unwrap()).unwrap();
    assert_eq!(
        r.meta().store,
        store.canonicalize().unwrap().display().to_string()
    );
    assert_eq!(r.meta().options["attr_ttl_s"], 0.0);
    let mut lookups = Vec::new();
    let mut setattrs = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        match rec.op() {
            Some(Op::Lookup) => lookups.push(rec),
            Some(Op::Setattr) => setattrs.push(rec),
            _ => {}
        }
    }
    assert_eq!(r.truncated_bytes(), None, "{log}");
    // One lookup per path component, parent and child as backing inode numbers.
    let want = [
        (ino(&store), chunks_ino, Name::Text(".chunks".into())),
        (chunks_ino, subdir_ino, Name::Text(d.to_hex()[..4].into())),
        (subdir_ino, backing.ino(), Name::Digest(d)),
    ];
    for (parent, child, name) in want {
        assert!(
            lookups
                .iter()
                .any(|l| l.parent == parent && l.ino == child && l.name == name && l.errno == 0),
            "no lookup of {name:?} under {parent} -> {child} in {lookups:?}"
        );
    }
    assert_eq!(setattrs.len(), 1, "{setattrs:?}");
    let s = &setattrs[0];
    assert_eq!(
        (s.ino, s.errno, s.flags),
        (
            backing.ino(),
            0,
            chunkscope::trace::format::flags::SET_ATIME
        )
    );
    assert_eq!(
        s.arg,
        after.atime() as u64 * 1_000_000_000 + after.atime_nsec() as u64
    );
}

/// `utimensat(UTIME_NOW, UTIME_OMIT)` on `path`, as PBS touches a chunk.
fn touch(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let omit = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_OMIT,
    };
    let now = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_NOW,
    };
    let times = [now, omit];
    // SAFETY: valid path and times.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(rc, 0, "touch {}", path.display());
}

/// Issue 21, point 1: on a datastore the kernel keeps the skeleton's entries (the default
/// --dir-ttl): a touch after the first in its chunk directory is two requests, the chunk's
/// lookup and setattr, and every chunk lookup, stat and touch is still traced; --dir-ttl 0
/// traces every path component again. A directory made or removed through the mount is seen
/// at once (the kernel drops what it cached), and one made behind the mount too (no negative
/// entries). The trace header says the policy; a plain directory is not cached by default.
#[test]
fn the_kernel_keeps_the_skeleton_and_every_chunk_request_is_traced() {
    let dir = store_dir();
    let store = tiny_store(dir.path());
    // A few chunks of one chunk directory, and one of another.
    let order = chunkscope::datastore::snapshots::phase1_order(&store).unwrap();
    let idx = IndexFile::open(&order.expected[0]).unwrap();
    let mut digests: Vec<Digest> = idx.digests().collect();
    digests.sort_by_key(|d| d.0);
    digests.dedup();
    let prefix = |d: &Digest| d.to_hex()[..4].to_string();
    let first = prefix(&digests[0]);
    let mut chunks: Vec<Digest> = digests
        .iter()
        .filter(|d| prefix(d) == first)
        .copied()
        .collect();
    chunks.truncate(3);
    chunks.push(*digests.iter().find(|d| prefix(d) != first).unwrap());
    const PASSES: usize = 3;
    let inos: Vec<u64> = chunks
        .iter()
        .map(|c| {
            std::fs::metadata(store.join(chunk_rel_path(c)))
                .unwrap()
                .ino()
        })
        .collect();
    let count = |trace: &Path| {
        let mut r = TraceReader::open(trace).unwrap();
        let ttl = r.meta().kernel_cache().unwrap().dir_ttl_s;
        let (mut dir_lookups, mut chunk_lookups, mut getattrs, mut setattrs) = (0, 0, 0, 0);
        while let Some(rec) = r.next_record().unwrap() {
            let chunk = matches!(rec.name, Name::Digest(_));
            match rec.op() {
                Some(Op::Lookup) if chunk => chunk_lookups += 1,
                Some(Op::Lookup) => dir_lookups += 1,
                Some(Op::Getattr) if inos.contains(&rec.ino) => getattrs += 1,
                Some(Op::Setattr) if inos.contains(&rec.ino) => setattrs += 1,
                _ => {}
            }
        }
        (ttl, dir_lookups, chunk_lookups, getattrs, setattrs)
    };
    let n = chunks.len() * PASSES;
    for (args, ttl, dir_lookups) in [
        (&[][..], 600.0, 1 + 2), // .chunks once, each chunk directory once
        (&["--dir-ttl", "0"][..], 0.0, 2 * 2 * n), // .chunks and XXXX, for stat and touch
    ] {
        let d = dir.path().join(format!("ttl{ttl}"));
        let mut m = Mount::start(&store, &d, true, args);
        for _ in 0..PASSES {
            for c in &chunks {
                let p = m.mnt.join(chunk_rel_path(c));
                std::fs::symlink_metadata(&p).unwrap();
                touch(&p);
            }
        }
        m.stop();
        let got = count(m.trace.as_ref().unwrap());
        assert_eq!(
            got,
            (ttl, dir_lookups, 2 * n, n, n),
            "{args:?}: (ttl, dir lookups, chunk lookups, getattrs, setattrs)"
        );
    }

    // Directories made and removed through the mount, and behind it.
    let d = dir.path().join("changes");
    let m = Mount::start(&store, &d, false, &[]);
    let ns = m.mnt.join("scratch");
    std::fs::create_dir(&ns).unwrap();
    assert!(std::fs::metadata(&ns).unwrap().is_dir());
    std::fs::remove_dir(&ns).unwrap();
    assert!(
        std::fs::metadata(&ns).is_err(),
        "removed through the mount: gone at once"
    );
    std::fs::create_dir(store.join("scratch")).unwrap();
    assert!(
        std::fs::metadata(&ns).unwrap().is_dir(),
        "made behind the mount: seen at once"
    );
    std::fs::remove_dir(store.join("scratch")).unwrap();
    drop(m);

    // A plain directory keeps TTL 0 by default.
    let plain = dir.path().join("plain");
    std::fs::create_dir_all(plain.join("a")).unwrap();
    let d = dir.path().join("plain-mount");
    let mut m = Mount::start(&plain, &d, true, &[]);
    std::fs::metadata(m.mnt.join("a")).unwrap();
    std::fs::metadata(m.mnt.join("a")).unwrap();
    m.stop();
    let r = TraceReader::open(m.trace.as_ref().unwrap()).unwrap();
    assert_eq!(r.meta().kernel_cache().unwrap().dir_ttl_s, 0.0);
}

#[test]
fn pbs_insert_protocol_touch_rm_and_locks_behave_as_on_the_store() {
    let dir = store_dir();
    let store = tiny_store(dir.path());
    let m = Mount::start(&store, dir.path(), true, &[]);

    // Chunk insert: temp file in the chunk directory, write, fsync, rename over the name.
    let data = b"new chunk data".repeat(100);
    let d = Digest::of(&data);
    let raw = chunkscope::datastore::blob::encode(&data, true);
    let final_rel = chunk_rel_path(&d);
    let tmp = m.mnt.join(format!("{}.tmp_Ab12Cd", final_rel.display()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .unwrap();
    f.write_all(&raw).unwrap();
    f.sync_all().unwrap();
    drop(f);
    std::fs::rename(&tmp, m.mnt.join(&final_rel)).unwrap();
    assert_eq!(std::fs::read(store.join(&final_rel)).unwrap(), raw);
    assert!(!store
        .join(format!("{}.tmp_Ab12Cd", final_rel.display()))
        .exists());
    assert_eq!(
        std::fs::metadata(m.mnt.join(&final_rel)).unwrap().ino(),
        std::fs::metadata(store.join(&final_rel)).unwrap().ino()
    );

    // rm through the mount removes the backing file; the name is gone from listings.
    std::fs::remove_file(m.mnt.join(&final_rel)).unwrap();
    assert!(!store.join(&final_rel).exists());
    let listed: Vec<_> = std::fs::read_dir(m.mnt.join(final_rel.parent().unwrap()))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(!listed.iter().any(|n| n.as_bytes() == d.to_hex().as_bytes()));

    // A POSIX record lock taken through the mount conflicts with one on the backing file.
    let through = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.mnt.join(".lock"))
        .unwrap();
    // SAFETY: a plain C struct; all zeroes is a valid value of it.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    assert_eq!(
        // SAFETY: a valid descriptor and lock struct.
        unsafe { libc::fcntl(through.as_raw_fd(), libc::F_SETLK, &fl) },
        0
    );
    let direct = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(store.join(".lock"))
        .unwrap();
    // SAFETY: a plain C struct; all zeroes is a valid value of it.
    let mut ofd: libc::flock = unsafe { std::mem::zeroed() };
    ofd.l_type = libc::F_RDLCK as libc::c_short;
    ofd.l_whence = libc::SEEK_SET as libc::c_short;
    assert_eq!(
        // SAFETY: a valid descriptor and lock struct.
        unsafe { libc::fcntl(direct.as_raw_fd(), libc::F_OFD_SETLK, &ofd) },
        -1,
        "conflicts"
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EAGAIN)
    );
    fl.l_type = libc::F_UNLCK as libc::c_short;
    assert_eq!(
        // SAFETY: a valid descriptor and lock struct.
        unsafe { libc::fcntl(through.as_raw_fd(), libc::F_SETLK, &fl) },
        0
    );
    assert_eq!(
        // SAFETY: a valid descriptor and lock struct.
        unsafe { libc::fcntl(direct.as_raw_fd(), libc::F_OFD_SETLK, &ofd) },
        0,
        "free after unlock"
    );
    drop(through);
    drop(direct);

    // mkdir, symlink, readlink, rmdir.
    std::fs::create_dir(m.mnt.join("scratch")).unwrap();
    std::os::unix::fs::symlink("../outside", m.mnt.join("scratch/link")).unwrap();
    assert_eq!(
        std::fs::read_link(store.join("scratch/link")).unwrap(),
        Path::new("../outside")
    );
    assert_eq!(
        std::fs::read_link(m.mnt.join("scratch/link")).unwrap(),
        Path::new("../outside")
    );
    std::fs::remove_file(m.mnt.join("scratch/link")).unwrap();
    std::fs::remove_dir(m.mnt.join("scratch")).unwrap();
    assert!(!store.join("scratch").exists());
    let mut s = String::new();
    std::fs::File::open(
        m.mnt
            .join("vm")
            .read_dir()
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path()
            .join("owner"),
    )
    .unwrap()
    .read_to_string(&mut s)
    .unwrap();
    assert_eq!(s, "root@pam\n");
}

#[test]
fn deep_check_through_the_mount_passes() {
    let dir = store_dir();
    let store = tiny_store(dir.path());
    let m = Mount::start(&store, dir.path(), false, &["--threads", "4"]);
    let (code, report) = check(&m.mnt, true);
    assert_eq!(code, 0, "{report:#}");
    let (_, direct) = check(&store, false);
    assert_eq!(report["referenced_chunks"], direct["referenced_chunks"]);
    assert_eq!(report["chunk_files"], direct["chunk_files"]);
}

#[test]
fn bad_mount_arguments_are_refused_clearly() {
    let dir = store_dir();
    let o = run(&[
        "mount",
        "--store",
        dir.path().join("none").to_str().unwrap(),
        "--mountpoint",
        "/tmp",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--store") && stderr(&o).contains("none"),
        "{}",
        stderr(&o)
    );
    std::fs::create_dir(dir.path().join("s")).unwrap();
    std::fs::create_dir(dir.path().join("s/inner")).unwrap();
    let o = run(&[
        "mount",
        "--store",
        dir.path().join("s").to_str().unwrap(),
        "--mountpoint",
        dir.path().join("s/inner").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is inside the store"), "{}", stderr(&o));
    // The store itself (not empty, since it holds `inner`): said to be the store, not to be
    // not empty.
    let s = dir.path().join("s");
    let o = run(&[
        "mount",
        "--store",
        s.to_str().unwrap(),
        "--mountpoint",
        s.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is the store itself") && !stderr(&o).contains("not empty"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_mountpoint_in_use_is_said_to_be_a_mount_of_its_store_and_its_process() {
    let dir = store_dir();
    let store = tiny_store(dir.path());
    let m = Mount::start(&store, dir.path(), false, &[]);
    let pid = m.pid().unwrap();
    let again = |extra: &[&str]| {
        let mut a = vec![
            "mount",
            "--store",
            store.to_str().unwrap(),
            "--mountpoint",
            m.mnt.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        run(&a)
    };
    // With --nonempty too: the advice that "not empty" gave would fail on the control socket.
    for extra in [&[][..], &["--nonempty"]] {
        let o = again(extra);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(
            e.contains(&format!(
                "{} is already a chunkscope mount of {}, served by pid {pid}",
                m.mnt.display(),
                store.canonicalize().unwrap().display()
            )),
            "{extra:?}: {e}"
        );
        assert!(
            !e.contains("not empty") && !e.contains("control socket"),
            "{extra:?}: {e}"
        );
    }
    assert!(m.is_live(), "the first mount is untouched");
}

#[test]
fn readdirplus_lists_the_same_with_backing_inodes() {
    let dir = store_dir();
    let store = tiny_store(dir.path());
    let mut m = Mount::start(&store, dir.path(), true, &["--readdirplus"]);
    let before = tree(&store.join("vm"));
    assert_eq!(tree(&m.mnt.join("vm")), before);
    m.stop();
    let mut r = TraceReader::open(m.trace.as_ref().unwrap()).unwrap();
    assert_eq!(r.meta().options["readdirplus"], true);
    let mut plus = 0;
    while let Some(rec) = r.next_record().unwrap() {
        plus += (rec.op() == Some(Op::Readdirplus) && rec.errno == 0) as usize;
    }
    assert!(plus > 0, "the kernel used READDIRPLUS");
}

/// 4 client threads, 100,000 operations: every request gets exactly one record, none dropped.
#[test]
fn load_four_clients_hundred_thousand_ops_every_request_recorded() {
    let dir = store_dir();
    let store = tiny_store(dir.path());
    let mut m = Mount::start(&store, dir.path(), true, &["--threads", "4"]);
    let order = chunkscope::datastore::snapshots::phase1_order(&store).unwrap();
    let digests: Vec<Digest> = IndexFile::open(&order.expected[0])
        .unwrap()
        .digests()
        .collect();
    let (touches, listings) = (
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
    );
    std::thread::scope(|s| {
        for t in 0..4usize {
            let (m, digests, touches, listings) = (&m, &digests, &touches, &listings);
            s.spawn(move || {
                for i in 0..25_000usize {
                    let d = digests[(i * 7 + t) % digests.len()];
                    let p = m.mnt.join(chunk_rel_path(&d));
                    match i % 4 {
                        0 => {
                            std::fs::symlink_metadata(&p).unwrap();
                        }
                        1 => {
                            let c = CString::new(p.as_os_str().as_bytes()).unwrap();
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
                            // SAFETY: a valid C string and two timespecs.
                            let rc = unsafe {
                                libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0)
                            };
                            assert_eq!(rc, 0);
                            touches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        2 => {
                            std::fs::read_dir(p.parent().unwrap())
                                .unwrap()
                                .for_each(|e| drop(e.unwrap()));
                            listings.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        _ => {
                            std::fs::read(&p).unwrap();
                        }
                    }
                }
            });
        }
    });
    // Still responsive.
    assert!(std::fs::metadata(m.mnt.join(".chunks")).unwrap().is_dir());
    let log = m.stop();
    let line = log
        .lines()
        .find(|l| l.contains("records ("))
        .unwrap_or_else(|| panic!("{log}"));
    let before = &line[..line.find(" records (").unwrap()];
    // Printed with thousands separators.
    let written: u64 = before
        .rsplit(' ')
        .next()
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap();
    assert!(line.contains("0 lost"), "{line}");

    let mut r = TraceReader::open(m.trace.as_ref().unwrap()).unwrap();
    let mut seqs = Vec::new();
    let (mut setattr, mut opendir) = (0u64, 0u64);
    let mut dirents = 0u64;
    let mut per_listing = std::collections::HashMap::new();
    while let Some(rec) = r.next_record().unwrap() {
        if rec.op() == Some(Op::Dirent) {
            // Not requests: entries of the listing whose seq they carry.
            dirents += 1;
            *per_listing.entry(rec.seq).or_insert(0u64) += 1;
            continue;
        }
        if rec.op() == Some(Op::Readdir) {
            // arg counts "." and ".." too, which get no dirent record.
            assert!(rec.arg >= per_listing.get(&rec.seq).copied().unwrap_or(0));
        }
        seqs.push(rec.seq);
        setattr += (rec.op() == Some(Op::Setattr)) as u64;
        opendir += (rec.op() == Some(Op::Opendir)) as u64;
    }
    assert_eq!(r.truncated_bytes(), None);
    assert_eq!(
        seqs.len() as u64 + dirents,
        written,
        "trace reads back whole"
    );
    assert!(dirents > 0, "listings recorded their entries");
    seqs.sort_unstable();
    assert!(
        seqs.iter().enumerate().all(|(i, &s)| s == i as u64),
        "one record per request number"
    );
    // Exactly one SETATTR per touch, one OPENDIR per listing: nothing lost or doubled.
    assert_eq!(setattr, touches.into_inner());
    assert_eq!(opendir, listings.into_inner());
}

/// Everything that could change: inode, size, mode, atime, mtime, ctime (with nanoseconds).
type Snapshot = BTreeMap<String, (u64, u64, u32, (i64, i64), (i64, i64), (i64, i64))>;

fn full_listing(root: &Path) -> Snapshot {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.insert(
                e.path().strip_prefix(root).unwrap().display().to_string(),
                (
                    m.ino(),
                    m.size(),
                    m.mode(),
                    (m.atime(), m.atime_nsec()),
                    (m.mtime(), m.mtime_nsec()),
                    (m.ctime(), m.ctime_nsec()),
                ),
            );
        }
    }
    out
}

#[test]
fn shadow_mode_leaves_the_backing_store_unchanged() {
    let dir = store_dir();
    let store = tiny_store(dir.path());
    // The first walk settles directory atimes (relatime updates them once); the second records.
    full_listing(&store);
    let before = full_listing(&store);
    let mut m = Mount::start(&store, dir.path(), true, &["--shadow"]);

    let order = chunkscope::datastore::snapshots::phase1_order(&store).unwrap();
    let digests: Vec<Digest> = IndexFile::open(&order.expected[0])
        .unwrap()
        .digests()
        .take(20)
        .collect();
    let touched = chunk_rel_path(&digests[0]);
    let removed = chunk_rel_path(&digests[1]);
    let c = CString::new(m.mnt.join(&touched).as_os_str().as_bytes()).unwrap();
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
    for d in &digests {
        let p = CString::new(m.mnt.join(chunk_rel_path(d)).as_os_str().as_bytes()).unwrap();
        assert_eq!(
            // SAFETY: a valid C string and two timespecs.
            unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), 0) },
            0
        );
    }
    assert_eq!(
        // SAFETY: a valid C string and two timespecs.
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) },
        0
    );
    // The mount shows the new atime; the store does not have it.
    let seen = std::fs::metadata(m.mnt.join(&touched)).unwrap();
    let backing = std::fs::metadata(store.join(&touched)).unwrap();
    assert!(
        seen.atime() > backing.atime(),
        "shadowed atime visible through the mount"
    );
    assert_eq!(seen.mtime(), backing.mtime());

    // Unlink: gone from lookups and listings of the mount, still in the store.
    std::fs::remove_file(m.mnt.join(&removed)).unwrap();
    assert_eq!(
        std::fs::metadata(m.mnt.join(&removed)).unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
    let name = removed.file_name().unwrap().to_owned();
    let listed: Vec<_> = std::fs::read_dir(m.mnt.join(removed.parent().unwrap()))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(!listed.contains(&name));
    assert!(store.join(&removed).exists());
    assert_eq!(
        std::fs::remove_file(m.mnt.join(&removed))
            .unwrap_err()
            .kind(),
        std::io::ErrorKind::NotFound
    );

    // Reads and listings through the mount do not touch the store's atimes either.
    for idx in order.iter().take(5) {
        std::fs::read(m.mnt.join(idx.strip_prefix(&store).unwrap())).unwrap();
    }
    full_listing(&m.mnt);

    // Every other change is refused with EROFS.
    let erofs =
        |r: std::io::Result<()>| assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EROFS));
    erofs(std::fs::write(m.mnt.join("new-file"), b"x"));
    erofs(std::fs::create_dir(m.mnt.join("new-dir")));
    erofs(std::fs::rename(m.mnt.join(&touched), m.mnt.join("renamed")));
    erofs(
        std::fs::OpenOptions::new()
            .write(true)
            .open(m.mnt.join(&touched))
            .map(drop),
    );
    erofs(std::fs::set_permissions(
        m.mnt.join(&touched),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    ));
    erofs(std::os::unix::fs::symlink("x", m.mnt.join("link")));
    erofs(std::fs::remove_dir(m.mnt.join(".chunks/0000")));
    m.stop();

    assert_eq!(full_listing(&store), before, "backing store unchanged");
    // The trace marks the shadowed effects.
    let mut r = TraceReader::open(m.trace.as_ref().unwrap()).unwrap();
    let mut shadowed = 0;
    while let Some(rec) = r.next_record().unwrap() {
        if rec.flags & chunkscope::trace::format::flags::SHADOW != 0 && rec.errno == 0 {
            shadowed += 1;
        }
    }
    assert_eq!(
        shadowed,
        digests.len() + 1 + 1,
        "touches, the repeated touch and the unlink"
    );
    assert_eq!(r.meta().options["shadow"], true);
}

#[test]
fn markers_through_the_control_channel_cut_the_trace() {
    use chunkscope::overlay::control::{default_socket, Client};
    let dir = store_dir();
    let store = tiny_store(dir.path());
    let mut m = Mount::start(&store, dir.path(), true, &[]);
    let socket = default_socket(&m.mnt).unwrap();
    let mut c = Client::connect(&socket).unwrap();
    c.mark("phase1 start strategy=lru").unwrap();
    std::fs::metadata(m.mnt.join(".chunks/0000")).unwrap();
    let o = run(&["ctl", m.mnt.to_str().unwrap(), "mark", "phase1", "end"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stats = run(&["ctl", m.mnt.to_str().unwrap(), "stats"]);
    let v: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(v["lost"], 0);
    assert!(v["records"].as_u64().unwrap() >= 3);
    assert!(c
        .request("frobnicate")
        .unwrap_err()
        .to_string()
        .contains("unknown request"));
    drop(c);
    m.stop();
    assert!(!socket.exists(), "socket removed at unmount");

    let mut r = TraceReader::open(m.trace.as_ref().unwrap()).unwrap();
    let (mut markers, mut lookup_0000) = (Vec::new(), None);
    while let Some(rec) = r.next_record().unwrap() {
        if rec.op() == Some(Op::Marker) {
            markers.push((rec.seq, rec.name.clone(), rec.pid));
        }
        if rec.op() == Some(Op::Lookup) && rec.name == Name::Text("0000".into()) {
            lookup_0000 = Some(rec.seq);
        }
    }
    assert_eq!(markers.len(), 2);
    assert_eq!(markers[0].1, Name::Text("phase1 start strategy=lru".into()));
    assert_eq!(markers[1].1, Name::Text("phase1 end".into()));
    assert_eq!(
        markers[0].2,
        std::process::id(),
        "the marker carries the requesting pid"
    );
    let l = lookup_0000.expect("the stat between the markers was traced");
    assert!(
        markers[0].0 < l && l < markers[1].0,
        "markers bracket the work done between them"
    );
}

#[test]
fn sigint_unmounts_and_flushes_the_trace() {
    let dir = store_dir();
    let store = tiny_store(dir.path());
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let trace = dir.path().join("int.trace");
    let mut child = bin()
        .args([
            "mount",
            "--store",
            store.to_str().unwrap(),
            "--mountpoint",
            mnt.to_str().unwrap(),
        ])
        .args(["--trace", trace.to_str().unwrap()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let m = Mount::adopt(&mnt);
    std::fs::metadata(mnt.join(".chunks/00ff")).unwrap();
    // SAFETY: the pid of the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!m.is_live(), "unmounted");
    let mut r = TraceReader::open(&trace).unwrap();
    let mut n = 0;
    while r.next_record().unwrap().is_some() {
        n += 1;
    }
    // The lookups of .chunks and 00ff at least (their attributes came with them).
    assert!(n >= 2 && r.truncated_bytes().is_none(), "{n} records");
}

#[test]
fn forget_shrinks_the_inode_table() {
    use chunkscope::overlay::control::{default_socket, Client};
    let dir = store_dir();
    let store = tiny_store(dir.path());
    let m = Mount::start(&store, dir.path(), false, &[]);
    for e in std::fs::read_dir(m.mnt.join(".chunks")).unwrap().take(3000) {
        std::fs::metadata(e.unwrap().path()).unwrap();
    }
    let mut c = Client::connect(&default_socket(&m.mnt).unwrap()).unwrap();
    let inodes = |c: &mut Client| -> u64 {
        let v: serde_json::Value = serde_json::from_str(&c.request("stats").unwrap()).unwrap();
        v["inodes"].as_u64().unwrap()
    };
    let known = inodes(&mut c);
    assert!(known >= 3000, "{known}");
    // Dropping the kernel's dentries and inodes makes it send FORGET.
    std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while inodes(&mut c) > known / 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "table did not shrink: {}",
            inodes(&mut c)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn fidx_writer_protocol_with_shared_mmap_works_through_the_mount() {
    let dir = store_dir();
    let store = tiny_store(dir.path());
    let m = Mount::start(&store, dir.path(), false, &[]);
    let group = m
        .mnt
        .join("vm")
        .read_dir()
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let snap = group
        .read_dir()
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    let tmp = snap.join("drive-scsi9.img.tmp_fidx");
    let digests: Vec<Digest> = (0..3u8).map(|i| Digest::of(&[i])).collect();
    let bytes =
        chunkscope::datastore::index::fixed_index_bytes([7; 16], 1, 3 * 4096, 4096, &digests);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .unwrap();
    f.set_len(bytes.len() as u64).unwrap();
    // SAFETY: a shared writable mapping of a file we own, unmapped below.
    unsafe {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let p = libc::mmap(
            std::ptr::null_mut(),
            bytes.len(),
            prot,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p as *mut u8, bytes.len());
        assert_eq!(libc::msync(p, bytes.len(), libc::MS_SYNC), 0);
        assert_eq!(libc::munmap(p, bytes.len()), 0);
    }
    drop(f);
    let done = snap.join("drive-scsi9.img.fidx");
    std::fs::rename(&tmp, &done).unwrap();
    let backing = store.join(done.strip_prefix(&m.mnt).unwrap());
    assert_eq!(std::fs::read(&backing).unwrap(), bytes);
    assert_eq!(
        IndexFile::open(&backing)
            .unwrap()
            .digests()
            .collect::<Vec<_>>(),
        digests
    );
}

/// A filesystem mounted below the store is never entered through the overlay.
#[test]
fn submounts_below_the_store_are_refused() {
    let dir = store_dir();
    let store = tiny_store(dir.path());
    let sub = store.join("elsewhere");
    std::fs::create_dir(&sub).unwrap();
    let _guard = TmpfsMount::on(&sub, 0);
    std::fs::write(sub.join("secret"), b"x").unwrap();
    let m = Mount::start(&store, dir.path(), false, &[]);
    let e = std::fs::metadata(m.mnt.join("elsewhere/secret")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{e}");
}

/// Issue 40, point 2: a request whose handler panics (a fault rule's `panic` action) is
/// answered EIO, logged once with its operation and inode, counted in `ctl stats`, and the
/// mount goes on serving, even with one worker thread (whose death would have hung it).
#[test]
fn a_panicking_request_is_answered_eio_and_the_mount_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::write(store.join("f"), b"x").unwrap();
    let ino = std::fs::metadata(store.join("f")).unwrap().ino();
    let mut m = Mount::start(
        &store,
        dir.path(),
        false,
        &["--threads", "1", "--fault", "getattr path=f panic nth=3"],
    );
    let results: Vec<Option<i32>> = (0..10)
        .map(|_| {
            std::fs::metadata(m.path("f"))
                .err()
                .and_then(|e| e.raw_os_error())
        })
        .collect();
    assert_eq!(
        results.iter().filter(|r| r.is_some()).collect::<Vec<_>>(),
        vec![&Some(libc::EIO)],
        "{results:?}"
    );
    let socket = chunkscope::overlay::control::socket_for(&m.mnt);
    let stats = chunkscope::overlay::control::Client::connect(&socket)
        .unwrap()
        .stats()
        .unwrap();
    assert_eq!(stats.panics, 1);
    assert_eq!(std::fs::read(m.path("f")).unwrap(), b"x", "still serving");
    let log = m.stop();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("panicked")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains(&format!("the getattr request on inode {ino} panicked"))
            && lines[0].contains("injected by fault rule 1")
            && lines[0].contains("answered EIO"),
        "{log}"
    );
}

/// Issue 40, point 2: times before 1970 pass through as on the disk (they became 1970).
#[test]
fn times_before_1970_pass_through_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::write(store.join("f"), b"x").unwrap();
    std::fs::write(dir.path().join("plain"), b"x").unwrap();
    let m = Mount::start(&store, dir.path(), false, &[]);
    for target in [m.path("f"), dir.path().join("plain")] {
        for args in [
            ["-a", "-d", "1960-01-01 UTC"],
            ["-m", "-d", "1950-01-01 00:00:00.5 UTC"],
        ] {
            let o = std::process::Command::new("touch")
                .args(args)
                .arg(&target)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
    }
    drop(m);
    let times = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.atime(), m.atime_nsec(), m.mtime(), m.mtime_nsec())
    };
    assert_eq!(
        times(&store.join("f")),
        (-315_619_200, 0, -631_152_000, 500_000_000)
    );
    assert_eq!(times(&store.join("f")), times(&dir.path().join("plain")));
}

/// Issue 40, point 6: stopping a busy mount is explicit. The first SIGINT while a file is open
/// through the mount refuses and names the process holding it; a second within the window
/// forces the unmount, and the mount exits non-zero.
#[test]
fn a_busy_mount_refuses_the_first_signal_and_a_second_forces_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::write(store.join("f"), b"x").unwrap();
    let mut m = Mount::start(&store, dir.path(), false, &[]);
    let pid = m.pid().unwrap() as i32;
    let open = std::fs::File::open(m.path("f")).unwrap();
    let refused = |log: &str| log.contains("not unmounting");
    // SAFETY: a signal to the mount this test started.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !refused(&m.log()) {
        assert!(std::time::Instant::now() < deadline, "{}", m.log());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let log = m.log();
    assert!(
        log.contains(&format!("pid {} (", std::process::id())) && log.contains("1 open"),
        "names the holder: {log}"
    );
    assert!(m.is_live(), "still serving");
    assert_eq!(std::fs::read(m.path("f")).unwrap(), b"x");
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGINT) };
    // The mount goes by itself (the helper's own unmount would race the daemon's).
    while m.is_live() {
        assert!(
            std::time::Instant::now() < deadline,
            "{}\n{}",
            m.log(),
            std::fs::read_to_string("/proc/self/mountinfo").unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (code, log) = m.stop_with_status();
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("forcing the unmount") && log.contains("by force"),
        "{log}"
    );
    drop(open);
}

/// open(O_TRUNC) of a file that is already empty still sets its mtime, as on the disk (a
/// conformance case found it: the kernel turned the open into a setattr of size 0 without a
/// time, and an empty file kept the mtime set before). On tmpfs, where a truncate to the same
/// size changes no time by itself.
#[test]
fn open_with_o_trunc_sets_the_mtime_of_an_empty_file() {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = store_dir();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let m = Mount::start(&store, dir.path(), false, &[]);
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    for (name, bytes) in [("empty", &b""[..]), ("full", &b"abc"[..])] {
        let p = m.mnt.join(name);
        std::fs::write(&p, bytes).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), old);
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_TRUNC)
            .open(&p)
            .unwrap();
        let backing = std::fs::metadata(store.join(name)).unwrap();
        assert_eq!(backing.len(), 0, "{name}");
        assert!(backing.modified().unwrap() > old, "{name}: the mtime moved");
    }
}
