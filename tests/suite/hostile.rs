//! Issue 18, point 4: readers are bounded by the format, not by the input. Every hostile file
//! gets a clear error naming the file and the rule, exit 2 (or 1 where `check` or `inspect`
//! found a problem), and no process here grows past 200 MiB, measured with `wait4`'s rusage
//! of the child itself.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use chunkscope::datastore::blob::{COMPRESSED_BLOB_MAGIC_1_0, UNCOMPRESSED_BLOB_MAGIC_1_0};
use chunkscope::datastore::index::{
    dynamic_index_bytes, DYNAMIC_SIZED_CHUNK_INDEX_1_0, FIXED_SIZED_CHUNK_INDEX_1_0,
};
use chunkscope::datastore::Digest;
use common::*;

const RSS_LIMIT_KIB: i64 = 200 * 1024;

/// Runs the binary and returns (exit code, stdout + stderr, peak RSS of that child in KiB).
/// The child is reaped by `wait4` (which std's `wait` cannot give the rusage of).
#[allow(clippy::zombie_processes)]
fn run_measured(args: &[&str]) -> (i32, String, i64) {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut cmd = bin();
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    // A regression that allocates without bound fails here instead of taking the machine's
    // memory: 4 GiB of address space is far above any bounded run (arenas and stacks
    // included) and far below what an unbounded one reaches.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = String::new();
    let mut err = String::new();
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t = std::thread::spawn(move || {
        let mut e = String::new();
        se.read_to_string(&mut e).unwrap();
        e
    });
    so.read_to_string(&mut out).unwrap();
    err.push_str(&t.join().unwrap());
    let mut status = 0;
    // SAFETY: a plain C struct; all zeroes is a valid value of it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our child's, not yet reaped; valid out pointers.
    let rc = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert_eq!(rc, child.id() as i32);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -libc::WTERMSIG(status)
    };
    (code, out + &err, ru.ru_maxrss)
}

fn expect(args: &[&str], code: i32, needles: &[&str]) -> String {
    let (got, out, rss) = run_measured(args);
    assert_eq!(got, code, "{args:?}: {out}");
    for n in needles {
        assert!(out.contains(n), "{args:?}: wants {n:?} in: {out}");
    }
    assert!(
        rss < RSS_LIMIT_KIB,
        "{args:?}: peak RSS {rss} KiB, over {RSS_LIMIT_KIB}"
    );
    out
}

/// A blob whose zstd frame has no content size and decodes to `size` zero bytes.
fn zstd_bomb(size: usize) -> Vec<u8> {
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..size >> 20 {
        enc.write_all(&zeros).unwrap();
    }
    let payload = enc.finish().unwrap();
    let mut raw = COMPRESSED_BLOB_MAGIC_1_0.to_vec();
    raw.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    raw.extend_from_slice(&payload);
    raw
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn write(p: &Path, bytes: &[u8]) -> PathBuf {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
    p.to_path_buf()
}

/// A fixed index header claiming `entries` chunks of 4 MiB, left sparse after the header.
fn sparse_fidx(p: &Path, entries: u64) -> PathBuf {
    let mut h = vec![0u8; 4096];
    h[..8].copy_from_slice(&FIXED_SIZED_CHUNK_INDEX_1_0);
    h[64..72].copy_from_slice(&(entries * (4 << 20)).to_le_bytes());
    h[72..80].copy_from_slice(&(4u64 << 20).to_le_bytes());
    let p = write(p, &h);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(4096 + entries * 32)
        .unwrap();
    p
}

#[test]
fn hostile_files_get_named_errors_in_bounded_memory() {
    let dir = store_dir();
    let d = dir.path();

    // A zstd bomb named as a chunk: decoding stops at the chunk limit (16 MiB).
    let bomb = zstd_bomb(256 << 20);
    assert!(bomb.len() < 64 << 10, "a small file: {}", bomb.len());
    let chunk = write(&d.join(format!("{}", Digest::of(b"x"))), &bomb);
    expect(
        &["inspect", s(&chunk)],
        2,
        &[
            s(&chunk),
            "chunk data larger than the format allows",
            "16777216",
        ],
    );
    // The same bomb as a blob: stopped at 128 MiB.
    let blob = write(&d.join("qemu-server.conf.blob"), &bomb);
    expect(
        &["inspect", s(&blob)],
        2,
        &[
            s(&blob),
            "blob data larger than the format allows",
            "134217728",
        ],
    );

    // A sparse 10 GiB dynamic index: its first end offset (0) breaks the format at once.
    let mut h = vec![0u8; 4096];
    h[..8].copy_from_slice(&DYNAMIC_SIZED_CHUNK_INDEX_1_0);
    let didx = write(&d.join("root.pxar.didx"), &h);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&didx)
        .unwrap()
        .set_len(4096 + 40 * (1 << 28))
        .unwrap();
    expect(
        &["inspect", s(&didx)],
        2,
        &[s(&didx), "end offsets must grow strictly", "entry 0"],
    );

    // Backwards end offsets with a valid checksum.
    let backwards = dynamic_index_bytes(
        [1; 16],
        1,
        &[(100, Digest::of(b"a")), (50, Digest::of(b"b"))],
    );
    let back = write(&d.join("back.didx"), &backwards);
    expect(
        &["inspect", s(&back)],
        2,
        &[s(&back), "entry 1 ends at 50, the one before at 100"],
    );

    // A sparse 256 MiB fixed index whose header is consistent: streamed, its checksum wrong.
    let fidx = sparse_fidx(&d.join("drive-scsi0.img.fidx"), 1 << 23);
    expect(&["inspect", s(&fidx)], 1, &["checksum", "MISMATCH"]);
    // Its header says more than the file holds: refused before reading.
    let short = sparse_fidx(&d.join("short.fidx"), 4);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&short)
        .unwrap()
        .set_len(4096 + 3 * 32)
        .unwrap();
    expect(
        &["inspect", s(&short)],
        2,
        &[s(&short), "needs 4 digests", "body has 96 bytes"],
    );

    // Not regular files: refused without reading (a FIFO without a writer would block).
    expect(
        &["inspect", "/dev/zero"],
        2,
        &["/dev/zero", "a character device"],
    );
    let fifo = d.join("fifo.fidx");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    expect(&["inspect", s(&fifo)], 2, &[s(&fifo), "a FIFO"]);

    // Truncated and bit-flipped files.
    let good = chunkscope::datastore::blob::encode(&b"data".repeat(1000), true);
    let trunc = write(&d.join("trunc.blob"), &good[..good.len() - 3]);
    expect(&["inspect", s(&trunc)], 1, &["crc32", "MISMATCH"]);
    let mut flipped = good.clone();
    flipped[20] ^= 4;
    let flip = write(&d.join("flip.blob"), &flipped);
    expect(&["inspect", s(&flip)], 1, &["MISMATCH"]);
    let tiny = write(&d.join("tiny.blob"), &UNCOMPRESSED_BLOB_MAGIC_1_0[..6]);
    expect(
        &["inspect", s(&tiny)],
        2,
        &[s(&tiny), "not an index or blob file"],
    );
}

#[test]
fn a_store_with_hostile_files_is_checked_and_collected_in_bounded_memory() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "11"]);
    let order = chunkscope::datastore::snapshots::phase1_order(&store).unwrap();
    // A chunk that is a zstd bomb.
    let victim = chunkscope::datastore::IndexFile::open(&order.expected[0])
        .unwrap()
        .digest(0);
    let chunk = store.join(chunkscope::datastore::paths::chunk_rel_path(&victim));
    std::fs::write(&chunk, zstd_bomb(64 << 20)).unwrap();
    // A sparse 256 MiB index in a snapshot (consistent header, wrong checksum).
    let snap = order.expected[0].parent().unwrap();
    let giant = sparse_fidx(&snap.join("drive-giant.img.fidx"), 1 << 23);

    let out = expect(
        &["check", "--deep", s(&store)],
        1,
        &[
            s(&giant),
            "index checksum mismatch",
            s(&chunk),
            "chunk data larger than the format allows",
        ],
    );
    assert!(out.contains("PROBLEMS FOUND"), "{out}");
    // The GC reads the giant index streaming and stops before the sweep.
    expect(
        &["gc", "--no-atime-check", s(&store)],
        2,
        &[
            s(&giant),
            "index checksum mismatch",
            "aborted in phase 1 before anything was removed",
        ],
    );
}

#[test]
fn check_verifies_every_blob_the_manifest_lists() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "12"]);
    let (code, _) = check(&store, false);
    assert_eq!(code, 0);
    let order = chunkscope::datastore::snapshots::phase1_order(&store).unwrap();
    let conf = order
        .expected
        .iter()
        .map(|p| p.parent().unwrap().join("qemu-server.conf.blob"))
        .find(|p| p.exists())
        .expect("a VM snapshot with its config blob");
    let good = std::fs::read(&conf).unwrap();

    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 1;
    for (bytes, needle) in [
        (Vec::new(), "size 0 differs from the manifest's"),
        (flipped, "checksum"),
    ] {
        std::fs::write(&conf, &bytes).unwrap();
        let (code, r) = check(&store, true);
        assert_eq!(code, 1, "{r}");
        let problems = r["manifest_problems"].as_array().unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p["path"] == s(&conf) && p["problem"].as_str().unwrap().contains(needle)),
            "{r}"
        );
    }
    std::fs::remove_file(&conf).unwrap();
    let (code, r) = check(&store, false);
    assert_eq!(code, 1);
    assert!(r["manifest_problems"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["problem"] == "listed in the manifest, but missing"));
}

/// A careless pipe: `chunkscope check STORE | head -0`. The reader is gone before the first
/// line; the report commands stop quietly with exit 0 (no panic, no backtrace).
#[test]
fn a_reader_that_went_away_ends_a_report_quietly() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "3"]);
    let index = walk_files(&store)
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "fidx"))
        .expect("a fixed index");
    for args in [
        vec!["check", s(&store)],
        vec!["inspect", s(&index)],
        vec!["gc", "--dry-run", "--no-lock", s(&store)],
    ] {
        let mut fds = [0i32; 2];
        // SAFETY: a plain syscall with a valid array; both ends are owned right after.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: pipe() just returned these two descriptors, owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        drop(read);
        let o = bin()
            .args(&args)
            .stdout(Stdio::from(write))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Every file under `dir`.
fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Issue 47, point 3: a well-formed trace whose records carry inode numbers near 2^64 (here a
/// traced GC's, each inode and parent moved up by the same amount) is simulated in bounded
/// memory; with one lookup more that puts the store's root inside one of its own directories
/// (what made `simulate --store-trace` grow without limit: the tree walk never ended), it is
/// named damaged, still in bounded memory.
#[test]
fn a_trace_with_inode_numbers_near_2_64_is_simulated_within_bounds() {
    use chunkscope::trace::{Name, Op, RawRecord, TraceReader, TraceWriter};
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "12"]);
    let d = dir.path().join("mount");
    std::fs::create_dir(&d).unwrap();
    let mut m = Mount::start(&store, &d, true, &["--shadow"]);
    let (code, _, out) = gc(&m.mnt, &["--no-lock", "--strategy", "naive"]);
    assert_eq!(code, 0, "{out}");
    m.stop();
    let trace = m.trace.clone().unwrap();
    let up = |ino: u64| {
        if ino == 0 {
            0
        } else {
            ino.wrapping_add(u64::MAX - (1 << 40))
        }
    };
    // The traced GC moved up, and with `cycle` a lookup of the root under its first child.
    let hostile = |name: &str, cycle: bool| {
        let path = dir.path().join(name);
        let mut reader = TraceReader::open(&trace).unwrap();
        let (writer, sink) =
            TraceWriter::start_with(&path, reader.meta().clone(), None, true).unwrap();
        let (mut root, mut child, mut last) = (0, 0, (0, 0));
        while let Some(r) = reader.next_record().unwrap() {
            let Some(mut raw) = r.to_raw() else {
                continue;
            };
            raw.ino = up(r.ino);
            raw.parent = up(r.parent);
            sink.record(raw);
            last = (r.seq, r.start_ns);
            if let (Some(Op::Lookup), Name::Text(t)) = (Op::from_u16(r.op), &r.name) {
                if *t == ".chunks" {
                    root = r.parent;
                } else if r.parent == root && child == 0 && r.errno == 0 {
                    child = r.ino;
                }
            }
        }
        if cycle {
            assert!(
                root != 0 && child != 0,
                "the trace looks up .chunks and a directory"
            );
            let mut raw = RawRecord::new(Op::Lookup);
            raw.seq = last.0 + 1;
            raw.start_ns = last.1 + 1;
            raw.ino = up(root);
            raw.parent = up(child);
            raw.set_name(b"back");
            sink.record(raw);
        }
        drop(sink);
        writer.finish().unwrap();
        path
    };
    for (cycle, want) in [(false, 0), (true, 2)] {
        let path = hostile(if cycle { "cycle.trace" } else { "high.trace" }, cycle);
        let (code, out, peak_kib) = run_measured(&[
            "simulate",
            "--strategy",
            "naive,lru,inode-order",
            "--store-trace",
            path.to_str().unwrap(),
        ]);
        assert_eq!(code, want, "cycle {cycle}: {out}");
        assert!(!out.contains("panicked"), "{out}");
        assert!(
            peak_kib < 200 * 1024,
            "cycle {cycle}: peak {peak_kib} KiB: {out}"
        );
        if cycle {
            assert!(
                out.contains("the trace is damaged") && out.contains("cannot contain itself"),
                "{out}"
            );
            assert!(
                out.contains(path.to_str().unwrap()),
                "names the trace: {out}"
            );
        }
    }
}

/// Issue 47, point 3: every file a command reads is bounded by what its format allows. A
/// model file, an inode ranking and a syscall log at `/dev/zero` (or a FIFO) were read
/// without end; now each is refused by name, in bounded memory, without blocking.
#[test]
fn model_files_rankings_and_syscall_logs_are_read_within_their_formats_bounds() {
    use chunkscope::trace::{Op, RawRecord, TraceMeta, TraceWriter};
    let dir = store_dir();
    let d = dir.path();
    let fifo = d.join("fifo");
    mknod(&fifo, libc::S_IFIFO | 0o600, 0);
    let big = write(&d.join("big.json"), &vec![b' '; (1 << 20) + 1]);
    for model in ["/dev/zero", s(&fifo)] {
        expect(
            &["simulate", "--preset", "tiny", "--model", model],
            2,
            &["reading model file", model],
        );
    }
    expect(
        &["simulate", "--preset", "tiny", "--model", s(&big)],
        2,
        &[s(&big), "more than the 1048576 bytes allowed"],
    );

    let trace = d.join("t.trace");
    let (writer, sink) = TraceWriter::start(&trace, TraceMeta::default()).unwrap();
    sink.record(RawRecord::new(Op::Getattr));
    drop(sink);
    writer.finish().unwrap();
    for order in ["/dev/zero", s(&fifo)] {
        expect(
            &["replay", s(&trace), "--model", "zfs-hdd", "--order", order],
            2,
            &["reading inode order", order],
        );
    }

    // A log without a line end: refused at its first line, not read into memory whole.
    let store = d.join("store");
    std::fs::create_dir_all(store.join(".chunks")).unwrap();
    let long = write(&d.join("long.log"), &vec![b'x'; (1 << 20) + 10]);
    for log in ["/dev/zero", s(&long)] {
        expect(
            &[
                "trace",
                "import",
                "--format",
                "strace",
                "--store",
                s(&store),
                "--out",
                s(&d.join("imported.trace")),
                log,
            ],
            2,
            &[log, "line 1 is longer than 1048576 bytes"],
        );
    }
}
