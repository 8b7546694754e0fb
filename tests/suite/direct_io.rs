//! Issue 48, point 1: direct I/O through the overlay. An `O_DIRECT` open is passed to the
//! backing file, whose reads and writes then need aligned memory: the overlay reads into and
//! writes from an aligned buffer. `dd oflag=direct` failed with EINVAL on every file of a
//! mount before, and so did every write to a loop device attached with `--direct-io=on`.
//! A backing filesystem that refuses `O_DIRECT` (squashfs) gets the open without it and the
//! kernel keeps no pages of the file (`FOPEN_DIRECT_IO`). Nothing here depends on inode
//! numbers.

use crate::common;

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

use common::run as run_cmd;

/// `len` bytes at a 4 KiB boundary of `v` (what `O_DIRECT` asks of a buffer).
fn aligned(v: &mut Vec<u8>, len: usize) -> &mut [u8] {
    v.resize(len + 4096, 0);
    let at = v.as_ptr().align_offset(4096);
    &mut v[at..at + len]
}

/// A pattern of `len` bytes that differs from block to block.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i / 512) as u8 ^ (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// Writes `data` to `path` with `O_DIRECT` in blocks of `block`, then reads it back the same
/// way; returns what was read.
fn direct_round_trip(path: &Path, data: &[u8], block: usize) -> std::io::Result<Vec<u8>> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let mut mem = Vec::new();
    for part in data.chunks(block) {
        let buf = aligned(&mut mem, part.len());
        buf.copy_from_slice(part);
        f.write_all(buf)?;
    }
    f.seek(SeekFrom::Start(0))?;
    let mut out = Vec::new();
    let mut mem = Vec::new();
    loop {
        let buf = aligned(&mut mem, block);
        let n = f.read(buf)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn direct_reads_and_writes_pass_through_on_ext4_and_tmpfs() {
    // Backing stores on both filesystems this machine has (/tmp is ext4, /dev/shm tmpfs).
    let ext4 = tempfile::tempdir().unwrap();
    let mut backings: Vec<tempfile::TempDir> = vec![ext4];
    backings.extend(tmpfs_dir());
    for dir in &backings {
        let store = dir.path().join("store");
        std::fs::create_dir(&store).unwrap();
        let m = Mount::start(&store, dir.path(), false, &[]);
        let data = pattern(1 << 20, 7);
        let path = m.mnt.join("image");
        let back = direct_round_trip(&path, &data, 64 << 10)
            .unwrap_or_else(|e| panic!("O_DIRECT through the mount over {:?}: {e}", dir.path()));
        assert!(back == data, "read back differs over {:?}", dir.path());
        assert!(
            std::fs::read(store.join("image")).unwrap() == data,
            "the backing file holds what was written"
        );
        // Direct I/O stays direct I/O: a length the backing store cannot take directly is
        // refused as the backing store refuses it, not served from a cache.
        let odd = |p: &Path| {
            let mut f = OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(p)
                .unwrap();
            let mut mem = Vec::new();
            let buf = aligned(&mut mem, 100);
            f.write(buf).map_err(|e| e.raw_os_error())
        };
        assert_eq!(
            odd(&path),
            odd(&store.join("image")),
            "a 100-byte direct write through the mount as on {:?}",
            dir.path()
        );
    }
}

/// A loop device, detached on drop (and on panic).
struct Loop(String);

impl Loop {
    fn attach(image: &Path) -> Loop {
        let o = Command::new("losetup")
            .args(["--direct-io=on", "--find", "--show"])
            .arg(image)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "losetup --direct-io=on {image:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Loop(String::from_utf8(o.stdout).unwrap().trim().to_string())
    }

    fn dio(&self) -> String {
        let o = Command::new("losetup")
            .args(["--list", "--noheadings", "--output", "DIO", &self.0])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn a_loop_device_attached_with_direct_io_works_through_the_mount() {
    let dir = tempfile::tempdir().unwrap(); // ext4: the backing store supports O_DIRECT
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let m = Mount::start(&store, dir.path(), false, &[]);
    let image = m.mnt.join("disk.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    let lo = Loop::attach(&image);
    assert_eq!(lo.dio(), "1", "the loop device uses direct I/O");
    let data = pattern(4 << 20, 3);
    let dev = PathBuf::from(&lo.0);
    let back = direct_round_trip(&dev, &data, 1 << 20)
        .unwrap_or_else(|e| panic!("direct I/O on {dev:?} over the mount: {e}"));
    assert_eq!(back.len(), 32 << 20, "the whole device reads back");
    assert!(back[..data.len()] == data[..], "read back differs");
    // mkfs writes through it (what the testbed does with the image).
    let o = Command::new(require("mkfs.ext4"))
        .args(["-q", "-F", &lo.0])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    drop(lo);
    let on_disk = std::fs::read(store.join("disk.img")).unwrap();
    // ext4's superblock magic at 1024 + 56.
    assert_eq!(
        &on_disk[1024 + 56..1024 + 58],
        &[0x53, 0xef],
        "mkfs reached the backing file"
    );
}

/// A backing filesystem without direct I/O (squashfs, read-only: the kernel refuses an
/// `O_DIRECT` open there with EINVAL): the open through the mount falls back to buffered I/O
/// on the backing file and tells the kernel to keep no pages of it, and direct reads through
/// the mount return the file's bytes.
/// In the long suite: of the filesystems that refuse direct I/O, the mount needs one with file
/// handles (ramfs and cramfs have none), and squashfs's image needs mksquashfs.
#[test]
#[ignore = "long suite: needs mksquashfs (squashfs-tools; README.md, Requirements)"]
fn a_backing_store_without_direct_io_gets_the_documented_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // squashfs numbers inodes from 1, which the mount refuses (the root's node id): the
    // first file takes it.
    std::fs::write(src.join("0pad"), b"x").unwrap();
    let data = pattern(256 << 10, 9);
    std::fs::write(src.join("image"), &data).unwrap();
    let image = dir.path().join("store.sqfs");
    let o = Command::new(require("mksquashfs"))
        .arg(&src)
        .arg(&image)
        .args(["-quiet", "-noappend"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let _squashfs = LoopMount::image(&image, &store, Some("squashfs"), ",ro");
    let direct = |p: &Path| {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(p)
    };
    assert_eq!(
        direct(&store.join("image"))
            .map(drop)
            .map_err(|e| e.raw_os_error()),
        Err(Some(libc::EINVAL)),
        "squashfs refuses O_DIRECT"
    );
    let m = Mount::start(&store, dir.path(), false, &[]);
    let mut f = direct(&m.mnt.join("image")).unwrap();
    let mut back = Vec::new();
    let mut mem = Vec::new();
    loop {
        let buf = aligned(&mut mem, 16 << 10);
        let n = f.read(buf).unwrap();
        if n == 0 {
            break;
        }
        back.extend_from_slice(&buf[..n]);
    }
    assert!(
        back == data,
        "direct reads through the mount return the file"
    );
    drop(f);
    drop(m);
}

/// Issue 48, point 2: a mount with a disk under its files (`--disk`). Each direct read waits
/// as the disk model says, from where the last one left the head: a sequential stream is
/// served from the drive's read-ahead, reads at scattered places seek and wait for the
/// platter; without the drive's cache each synchronous read of a stream waits most of a turn.
/// The trace keeps each read's offset and length (the device's access order) and the time the
/// disk added.
#[test]
fn a_disk_under_the_mount_makes_random_reads_cost_seeks_and_turns() {
    use chunkscope::trace::{Op, TraceReader};
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap(); // ext4: direct I/O on the backing file
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::File::create(store.join("disk.img"))
        .unwrap()
        .set_len(256 << 20)
        .unwrap();
    // 32 sequential reads of 64 KiB, then 32 of 4 KiB at scattered places.
    let mut want = Vec::new();
    for i in 0..32u64 {
        want.push((i * 65536, 65536u64));
    }
    let mut x = 7u64;
    for _ in 0..32 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        want.push(((x >> 24) % (256 << 20) / 4096 * 4096, 4096));
    }
    // (mean time the disk added to the sequential reads but the first, to the scattered).
    let run = |disk: &str| {
        let sub = dir.path().join(disk);
        std::fs::create_dir(&sub).unwrap();
        let mut m = Mount::start(&store, &sub, true, &["--disk", disk]);
        let f = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(m.mnt.join("disk.img"))
            .unwrap();
        let mut mem = Vec::new();
        for &(at, len) in &want {
            let buf = aligned(&mut mem, len as usize);
            assert_eq!(f.read_at(buf, at).unwrap(), len as usize);
        }
        drop(f);
        let log = m.stop();
        assert!(
            log.contains("disk (7200 rpm") && log.contains("64 reads"),
            "the unmount sums up the disk's work: {log}"
        );
        let mut reads = Vec::new();
        for r in TraceReader::open(m.trace.as_ref().unwrap()).unwrap() {
            let r = r.unwrap();
            if r.op() == Some(Op::Read) {
                reads.push((r.offset, r.arg, r.injected_ns));
            }
        }
        let got: Vec<(u64, u64)> = reads.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(
            got, want,
            "the trace keeps each read's offset and length in order"
        );
        // `trace device` sums it up: no GC ran, so all of it is outside any phase; the 31
        // reads after the first of the stream began where the one before ended.
        let o = run_cmd(&[
            "trace",
            "device",
            "--json",
            m.trace.as_ref().unwrap().to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(!stderr(&o).contains("torn"), "{}", stderr(&o));
        let dev: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        // Issue 63, point 8: a torn copy is read up to its tear, and said to be torn.
        let bytes = std::fs::read(m.trace.as_ref().unwrap()).unwrap();
        let torn = m.trace.as_ref().unwrap().with_extension("torn");
        std::fs::write(&torn, &bytes[..bytes.len() - 10]).unwrap();
        let o = run_cmd(&["trace", "device", torn.to_str().unwrap()]);
        assert!(stderr(&o).contains("its end is torn"), "{}", stderr(&o));
        let p = &dev[0];
        assert_eq!(p["label"], "outside phases");
        assert_eq!(p["reads"], 64);
        assert_eq!(p["read_bytes"], 32 * 65536 + 32 * 4096);
        assert!(p["sequential"].as_u64().unwrap() >= 31, "{p}");
        assert_eq!(p["points"].as_array().unwrap().len(), 64);
        let disk_ns: u64 = reads.iter().map(|r| r.2).sum();
        assert_eq!(p["disk_ns"], disk_ns);
        let sequential = reads[1..32].iter().map(|r| r.2).sum::<u64>() / 31;
        let scattered = reads[32..].iter().map(|r| r.2).sum::<u64>() / 32;
        (sequential, scattered)
    };
    let (sequential, scattered) = run("hdd-7200");
    // 64 KiB at 180 MB/s is 0.36 ms; a scattered read seeks (about 1 ms here: the image is a
    // sliver of a 4 TB disk) and waits half a turn on average (4.2 ms).
    assert!(
        sequential < 600_000,
        "sequential reads: {sequential} ns each"
    );
    assert!(
        (2_000_000..9_000_000).contains(&scattered),
        "scattered reads: {scattered} ns each"
    );
    let (sequential, _) = run("hdd-7200,cache=0");
    assert!(
        (4_000_000..8_800_000).contains(&sequential),
        "without the drive's cache a synchronous stream waits most of a turn a read: \
         {sequential} ns"
    );
    let mnt = dir.path().join("mnt-refused");
    std::fs::create_dir(&mnt).unwrap();
    let o = run_cmd(&[
        "mount",
        "--store",
        store.to_str().unwrap(),
        "--mountpoint",
        mnt.to_str().unwrap(),
        "--disk",
        "floppy",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown disk 'floppy'") && stderr(&o).contains("hdd-7200"),
        "{}",
        stderr(&o)
    );
}

/// Issue 64: zfs-fuse reads its file vdev without `O_DIRECT` (its fd's flags say so), so the
/// kernel's readahead and page cache stood between it and the disk model: a cold 4 KiB read
/// reached the mount as a 16-128 KiB one, and a second read of it not at all. `--direct-io`
/// keeps no page of any file: each plain read reaches the mount as it was made, every time.
#[test]
fn a_direct_io_mount_sees_every_plain_read_as_it_was_made() {
    use chunkscope::trace::{Op, TraceReader};
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap(); // ext4 /tmp
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::write(store.join("disk.img"), pattern(1 << 20, 3)).unwrap();
    let reads_of = |extra: &[&str], sub: &str| -> Vec<(u64, u64)> {
        let sub = dir.path().join(sub);
        std::fs::create_dir(&sub).unwrap();
        let mut m = Mount::start(&store, &sub, true, extra);
        // Plain reads, as zfs-fuse makes them: 4 KiB at 0, at 64 KiB, then at 0 again.
        let f = std::fs::File::open(m.mnt.join("disk.img")).unwrap();
        let mut buf = vec![0u8; 4096];
        for at in [0u64, 65536, 0] {
            assert_eq!(f.read_at(&mut buf, at).unwrap(), 4096);
            assert_eq!(buf, pattern(1 << 20, 3)[at as usize..at as usize + 4096]);
        }
        drop(f);
        m.stop();
        TraceReader::open(m.trace.as_ref().unwrap())
            .unwrap()
            .map(|r| r.unwrap())
            .filter(|r| r.op() == Some(Op::Read))
            .map(|r| (r.offset, r.arg))
            .collect()
    };
    assert_eq!(
        reads_of(&["--direct-io"], "direct"),
        [(0, 4096), (65536, 4096), (0, 4096)]
    );
    // Without it the kernel reads ahead and caches: fewer, larger reads.
    let cached = reads_of(&[], "cached");
    assert!(
        cached.len() < 3 && cached.iter().any(|r| r.1 > 4096),
        "the page cache's reads: {cached:?}"
    );
}
