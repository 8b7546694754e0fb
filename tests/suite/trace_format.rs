//! Issue 3 (trace part): records written by the writer thread read back whole, in order, never
//! dropped under load; torn tails and foreign files are handled with clear words.

use crate::common;

use std::path::Path;
use std::time::Duration;

use chunkscope::datastore::Digest;
use chunkscope::trace::{Name, Op, RawRecord, TraceMeta, TraceReader, TraceWriter};
use common::*;

fn meta() -> TraceMeta {
    let mut m = TraceMeta {
        store: "/srv/store".into(),
        ..Default::default()
    };
    m.options.insert("attr_ttl_ms".into(), 0.into());
    m.options.insert("readdirplus".into(), false.into());
    m
}

fn rec(op: Op, seq: u64, name: &[u8]) -> RawRecord {
    let mut r = RawRecord::new(op);
    r.seq = seq;
    r.start_ns = seq * 10;
    r.duration_ns = 1000 + seq;
    r.ino = 1_000_000 + seq;
    r.parent = 77;
    r.arg = u64::MAX - seq;
    r.injected_ns = 5;
    r.modeled_ns = 6;
    r.pid = 4242;
    r.flags = 1;
    r.errno = if seq.is_multiple_of(7) {
        libc::ENOENT
    } else {
        0
    };
    r.set_name(name);
    r
}

fn read_all(path: &Path) -> (Vec<chunkscope::trace::Record>, Option<u64>) {
    let mut r = TraceReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(x) = r.next_record().unwrap() {
        out.push(x);
    }
    (out, r.truncated_bytes())
}

/// `bytes` read as a trace through a pipe (a stream, not a mapped file).
fn read_through_pipe(bytes: Vec<u8>) -> (Vec<chunkscope::trace::Record>, Option<u64>) {
    let mut fds = [0; 2];
    // SAFETY: an array of two descriptors for pipe(2) to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        use std::os::fd::FromRawFd;
        // SAFETY: the pipe's write end, owned by this thread from here on.
        let mut w = unsafe { std::fs::File::from_raw_fd(fds[1]) };
        w.write_all(&bytes).unwrap();
    });
    let pipe = std::path::PathBuf::from(format!("/proc/self/fd/{}", fds[0]));
    let read = read_all(&pipe);
    feeder.join().unwrap();
    // SAFETY: the read end, not used after this.
    unsafe { libc::close(fds[0]) };
    read
}

#[test]
fn records_round_trip_with_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.trace");
    let (writer, sink) = TraceWriter::start(&path, meta()).unwrap();
    let d = Digest::of(b"chunk");
    let long = vec![b'x'; 255];
    let names: Vec<Vec<u8>> = vec![
        d.to_hex().into_bytes(),
        d.to_hex().to_uppercase().into_bytes(), // not a canonical digest name: kept as text
        b".chunks".to_vec(),
        long.clone(),
        b".chunks".to_vec(),
        vec![],
        b"phase1 start strategy=lru".to_vec(),
    ];
    let ops = [
        Op::Lookup,
        Op::Lookup,
        Op::Getattr,
        Op::Lookup,
        Op::Readdir,
        Op::Statfs,
        Op::Marker,
    ];
    for (i, (op, n)) in ops.iter().zip(&names).enumerate() {
        sink.record(rec(*op, i as u64, n));
    }
    drop(sink);
    let stats = writer.finish().unwrap();
    assert_eq!((stats.sent, stats.written, stats.lost), (7, 7, 0));
    assert_eq!(
        stats.strings, 4,
        "each distinct non-digest name defined once"
    );

    let r = TraceReader::open(&path).unwrap();
    assert_eq!(r.meta().store, "/srv/store");
    assert_eq!(r.meta().options["readdirplus"], false);
    assert!(r.meta().start_epoch_ns > 0);
    let (recs, truncated) = read_all(&path);
    assert_eq!(truncated, None);
    assert_eq!(recs.len(), 7);
    for (i, r) in recs.iter().enumerate() {
        let want = rec(ops[i], i as u64, &names[i]);
        assert_eq!(
            (r.seq, r.start_ns, r.duration_ns, r.ino, r.parent),
            (
                want.seq,
                want.start_ns,
                want.duration_ns,
                want.ino,
                want.parent
            )
        );
        assert_eq!(
            (r.arg, r.injected_ns, r.modeled_ns, r.pid, r.flags, r.errno),
            (want.arg, 5, 6, 4242, 1, want.errno)
        );
        assert_eq!(r.op(), Some(ops[i]));
    }
    assert_eq!(recs[0].name, Name::Digest(d));
    assert_eq!(recs[1].name, Name::Text(d.to_hex().to_uppercase().into()));
    assert_eq!(
        recs[3].name,
        Name::Text(String::from_utf8(long).unwrap().into())
    );
    assert_eq!(recs[5].name, Name::None);
    assert_eq!(recs[6].name, Name::Text("phase1 start strategy=lru".into()));
}

#[test]
fn four_threads_hundred_thousand_records_none_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("load.trace");
    let (writer, sink) = TraceWriter::start(&path, meta()).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let sink = sink.clone();
            s.spawn(move || {
                let d = Digest::of(b"x").to_hex();
                for i in 0..100_000u64 {
                    let seq = sink.next_seq();
                    let name = if i % 3 == 0 {
                        d.as_bytes()
                    } else {
                        b"0a1b".as_slice()
                    };
                    sink.record(rec(Op::Getattr, seq, name));
                }
            });
        }
    });
    drop(sink);
    let stats = writer.finish().unwrap();
    assert_eq!(
        (stats.sent, stats.written, stats.lost),
        (400_000, 400_000, 0),
        "{stats:?}"
    );
    let (recs, truncated) = read_all(&path);
    assert_eq!(truncated, None);
    assert_eq!(recs.len(), 400_000);
    let mut seqs: Vec<u64> = recs.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    assert!(
        seqs.iter().enumerate().all(|(i, &s)| s == i as u64),
        "every request number once"
    );
}

/// The writer flushes at least once a second: records become visible while the sink is
/// open (waited for, not timed: a loaded machine may take longer than the second).
#[test]
fn live_trace_is_flushed_while_the_sink_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.trace");
    let (writer, sink) = TraceWriter::start(&path, meta()).unwrap();
    for i in 0..10 {
        sink.record(rec(Op::Lookup, i, b"0000"));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // Records readable so far (none while the header is not written yet).
    let visible = || {
        let Ok(mut r) = TraceReader::open(&path) else {
            return 0;
        };
        let mut n = 0;
        while let Ok(Some(_)) = r.next_record() {
            n += 1;
        }
        n
    };
    while visible() < 10 {
        assert!(std::time::Instant::now() < deadline, "never flushed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (recs, _) = read_all(&path);
    assert_eq!(
        recs.len(),
        10,
        "records visible while the sink is still open"
    );
    drop(sink);
    writer.finish().unwrap();
}

#[test]
fn torn_tail_reads_to_the_last_whole_record_with_a_warning() {
    // Version 1 (plain slots): a torn slot.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("torn.trace");
    let (writer, sink) = TraceWriter::start_with(&path, meta(), None, false).unwrap();
    for i in 0..50 {
        sink.record(rec(
            Op::Setattr,
            i,
            Digest::of(&i.to_le_bytes()).to_hex().as_bytes(),
        ));
    }
    drop(sink);
    writer.finish().unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 40).unwrap(); // cut the last record in the middle
    let (recs, truncated) = read_all(&path);
    assert_eq!(recs.len(), 49);
    assert_eq!(truncated, Some(72));
    let o = run(&["trace", "stats", path.to_str().unwrap()]);
    assert!(o.status.success());
    assert!(
        stdout(&o).contains("setattr") && stdout(&o).contains("49"),
        "{}",
        stdout(&o)
    );
    assert!(
        stderr(&o).contains("its end is torn (72 bytes ignored"),
        "{}",
        stderr(&o)
    );
}

/// A file is mapped, a pipe is read through a buffer: both give the same records, the same
/// string names, and the same torn tail, over more than one release step of the mapping.
#[test]
fn mapped_and_streamed_reads_agree() {
    // Version 1 (plain slots, mapped when a file).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("both.trace");
    let (writer, sink) = TraceWriter::start_with(&path, meta(), None, false).unwrap();
    let n = 100_000u64; // 11 MiB: the mapped reader gives pages back every 4 MiB
    for i in 0..n {
        let name = match i % 3 {
            0 => Digest::of(&i.to_le_bytes()).to_hex().into_bytes(),
            1 => format!("{:04x}", i % 50).into_bytes(),
            _ => Vec::new(),
        };
        sink.record(rec(Op::Lookup, i, &name));
    }
    drop(sink);
    writer.finish().unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 100).unwrap();
    let (mapped, mapped_torn) = read_all(&path);

    let (streamed, streamed_torn) = read_through_pipe(std::fs::read(&path).unwrap());

    assert_eq!(mapped.len() as u64, n - 1);
    assert_eq!(mapped_torn, Some(12));
    assert_eq!(streamed_torn, mapped_torn);
    assert_eq!(streamed, mapped);
    assert_eq!(mapped[4].name, Name::Text("0004".into()));
    assert_eq!(
        mapped[n as usize - 4].name,
        Name::Digest(Digest::of(&(n - 4).to_le_bytes()))
    );
}

#[test]
fn a_file_that_is_not_a_trace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, b"hello, this is not a trace").unwrap();
    let e = TraceReader::open(&path).err().unwrap().to_string();
    assert!(
        e.contains("is not a chunkscope trace") && e.contains("notes.txt"),
        "{e}"
    );
    let o = run(&["trace", "dump", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is not a chunkscope trace"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn export_csv_and_jsonl_have_the_documented_columns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.trace");
    let (writer, sink) = TraceWriter::start(&path, meta()).unwrap();
    sink.record(rec(Op::Unlink, 3, b"a,b"));
    sink.record(rec(Op::Readdir, 4, b""));
    drop(sink);
    writer.finish().unwrap();
    let o = run(&["trace", "export", "--format", "csv", path.to_str().unwrap()]);
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], chunkscope::trace::export::COLUMNS.join(","));
    assert_eq!(
        lines[1],
        format!(
            "3,30,1003,unlink,0,4242,1000003,77,{},5,6,1,\"a,b\",0",
            u64::MAX - 3
        )
    );
    assert_eq!(lines.len(), 3);
    let o = run(&[
        "trace",
        "export",
        "--format",
        "jsonl",
        path.to_str().unwrap(),
    ]);
    let first: serde_json::Value =
        serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    assert_eq!(first["op"], "unlink");
    assert_eq!(first["name"], "a,b");
    assert_eq!(first.as_object().unwrap().len(), 14);
}

#[test]
fn chrome_export_is_one_json_document_of_trace_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.trace");
    let (writer, sink) = TraceWriter::start(&path, meta()).unwrap();
    sink.record(rec(Op::Marker, 1, b"phase1 start strategy=lru"));
    sink.record(rec(Op::Dirent, 2, b""));
    sink.record(rec(Op::Setattr, 3, b"x"));
    drop(sink);
    writer.finish().unwrap();
    for format in ["chrome", "perfetto"] {
        let o = run(&[
            "trace",
            "export",
            "--format",
            format,
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let events = doc["traceEvents"].as_array().unwrap();
        // process name, the marker (instant), the setattr (complete); no dirent.
        assert_eq!(events.len(), 3, "{doc}");
        assert_eq!(events[1]["ph"], "i");
        assert_eq!(events[1]["name"], "phase1 start strategy=lru");
        let x = &events[2];
        assert_eq!(
            (x["ph"].as_str(), x["name"].as_str()),
            (Some("X"), Some("setattr"))
        );
        assert_eq!(x["ts"].as_f64(), Some(0.03));
        assert_eq!(x["dur"].as_f64(), Some(1.003));
        assert_eq!(x["args"]["ino"], 1000003);
        assert_eq!(x["args"]["modeled_ns"], 6);
    }
}

/// The kernel's cache settings are typed metadata: a mount's trace carries them under the
/// keys older traces have, and `analyze` warns when the kernel answered requests itself.
#[test]
fn analyze_warns_when_the_kernel_cache_hid_requests() {
    use chunkscope::trace::KernelCache;
    let dir = tempfile::tempdir().unwrap();
    for (name, cache, warned) in [
        (
            "cached",
            KernelCache {
                entry_ttl_s: 1.0,
                attr_ttl_s: 0.5,
                dir_ttl_s: 0.0,
                readdirplus: false,
            },
            true,
        ),
        ("uncached", KernelCache::default(), false),
        (
            "directories",
            KernelCache {
                dir_ttl_s: 600.0,
                ..KernelCache::default()
            },
            false,
        ),
    ] {
        let path = dir.path().join(name);
        let mut m = meta();
        m.set_kernel_cache(&cache);
        assert_eq!(
            m.options["entry_ttl_s"], cache.entry_ttl_s,
            "the key older traces have"
        );
        let (writer, sink) = TraceWriter::start(&path, m).unwrap();
        sink.record(rec(Op::Lookup, 0, b"x"));
        drop(sink);
        writer.finish().unwrap();
        assert_eq!(
            TraceReader::open(&path).unwrap().meta().kernel_cache(),
            Some(cache)
        );
        let o = run(&["analyze", "--json", path.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["kernel_cache"]["entry_ttl_s"], cache.entry_ttl_s);
        let err = stderr(&o);
        assert_eq!(err.contains("not in the trace"), warned, "{name}: {err}");
        assert_eq!(
            err.contains("kept directories for 600 s"),
            cache.dir_ttl_s > 0.0,
            "{name}: the note on cached directories: {err}"
        );
    }
    // A trace from before the directory TTL traced every directory lookup.
    let mut m = meta();
    m.set_kernel_cache(&KernelCache::default());
    m.options.remove("dir_ttl_s");
    assert_eq!(m.kernel_cache(), Some(KernelCache::default()));
}

/// Version 2: blocks of compressed slots. A trace cut anywhere in its last block reads
/// every earlier block's records and reports the cut; a pipe reads what a file does; a
/// damaged block that more blocks follow is an error naming its offset; and the blocks
/// take a fraction of the plain slots' bytes.
#[test]
fn compressed_blocks_read_back_tolerate_a_torn_tail_and_refuse_damage() {
    use chunkscope::trace::format::{BLOCK_BYTES, BLOCK_HEADER, SLOT_SIZE};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blocks.trace");
    let plain = dir.path().join("plain.trace");
    let per_block = (BLOCK_BYTES / SLOT_SIZE) as u64;
    let n = 2 * per_block + 500; // two full blocks and a partial one
    for (p, compress) in [(&path, true), (&plain, false)] {
        let (writer, sink) = TraceWriter::start_with(p, meta(), None, compress).unwrap();
        for i in 0..n {
            let name = match i % 3 {
                0 => Digest::of(&i.to_le_bytes()).to_hex().into_bytes(),
                1 => format!("{:04x}", i % 50).into_bytes(),
                _ => Vec::new(),
            };
            sink.record(rec(Op::Lookup, i, &name));
        }
        drop(sink);
        writer.finish().unwrap();
    }
    let (whole, torn) = read_all(&path);
    assert_eq!(torn, None);
    assert_eq!(
        whole,
        read_all(&plain).0,
        "version 2 reads as version 1 does"
    );
    let (len, plain_len) = (
        std::fs::metadata(&path).unwrap().len(),
        std::fs::metadata(&plain).unwrap().len(),
    );
    assert!(
        len * 5 <= plain_len,
        "{len} bytes against {plain_len} plain"
    );

    // The blocks' offsets, from their headers.
    let bytes = std::fs::read(&path).unwrap();
    let mut starts = Vec::new();
    let mut at = bytes.windows(4).position(|w| w == b"CSZB").unwrap();
    while at < bytes.len() {
        starts.push(at);
        let c = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        at += BLOCK_HEADER + c;
    }
    assert_eq!(starts.len(), 3, "two full blocks and the rest");
    let last = *starts.last().unwrap() as u64;
    // Cut where the last block starts: a clean end after the first two blocks' records.
    let cut_bytes = |cut: u64| {
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(cut).unwrap();
    };
    cut_bytes(last);
    let (first_two, torn) = read_all(&path);
    assert_eq!(torn, None);
    let before_last = first_two.len();
    assert!(before_last as u64 > per_block && (before_last as u64) < 2 * per_block + 1);
    std::fs::write(&path, &bytes).unwrap();
    for cut in [len - 1, len - 40, last + 20, last + 3] {
        cut_bytes(cut);
        let (recs, torn) = read_all(&path);
        assert_eq!(recs.len(), before_last, "cut at {cut}");
        assert_eq!(torn, Some(cut - last), "cut at {cut}");
        assert_eq!(recs[..], whole[..before_last]);
    }
    // A pipe reads the same (a cut file).
    let (streamed, streamed_torn) = read_through_pipe(std::fs::read(&path).unwrap());
    assert_eq!(streamed.len(), before_last);
    assert_eq!(streamed_torn, Some(3));
    // A damaged first block, with more after it: an error that names the offset.
    let mut damaged = bytes.clone();
    damaged[starts[0] + BLOCK_HEADER + 10] ^= 0xff;
    std::fs::write(&path, &damaged).unwrap();
    let mut r = TraceReader::open(&path).unwrap();
    let err = loop {
        match r.next_record() {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("a damaged block read as the end"),
            Err(e) => break format!("{e:#}"),
        }
    };
    assert!(
        err.contains(&format!("block at offset {} is damaged", starts[0])),
        "{err}"
    );
    // Damage in the last block is a torn tail.
    let mut damaged = bytes.clone();
    let k = bytes.len() - 5;
    damaged[k] ^= 0xff;
    std::fs::write(&path, &damaged).unwrap();
    let (recs, torn) = read_all(&path);
    assert_eq!(recs.len(), before_last);
    assert_eq!(torn, Some(bytes.len() as u64 - last));
}

/// Issue 23, point 5: `trace export --format parquet` holds what the CSV export holds, typed:
/// every cell of every row equal (the errno by its name, null where there is none; no name
/// null), `time` the trace's start plus `start_ns`, the trace's header as the file's
/// metadata, rows in groups of `PARQUET_ROW_GROUP`; standard output (a pipe) gets the bytes
/// the file does.
#[test]
fn parquet_export_holds_what_the_csv_export_holds_typed() {
    use chunkscope::trace::export::PARQUET_ROW_GROUP;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.trace");
    let (writer, sink) = TraceWriter::start(&path, meta()).unwrap();
    let n = PARQUET_ROW_GROUP as u64 + 1000;
    for i in 0..n {
        let name = match i % 4 {
            0 => Digest::of(&i.to_le_bytes()).to_hex().into_bytes(),
            1 => format!("{:04x}", i % 50).into_bytes(),
            2 => b"a,\"quoted\" name".to_vec(),
            _ => Vec::new(),
        };
        let op = [Op::Lookup, Op::Setattr, Op::Unlink, Op::Readdir][(i % 4) as usize];
        let mut r = rec(op, i, &name);
        r.errno = match i % 5 {
            0 => libc::ENOENT,
            1 => libc::EIO,
            2 => 200, // no name: its number
            _ => 0,
        };
        r.flags = (i % 32) as u8;
        sink.record(r);
    }
    drop(sink);
    writer.finish().unwrap();
    let (csv_path, pq_path) = (dir.path().join("p.csv"), dir.path().join("p.parquet"));
    for (format, out) in [("csv", &csv_path), ("parquet", &pq_path)] {
        let o = run(&[
            "trace",
            "export",
            "--format",
            format,
            "-o",
            out.to_str().unwrap(),
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{format}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{format}: the file has it");
    }
    let (csv_header, csv_rows) = csv_table(&csv_path);
    let pq = parquet_table(std::fs::read(&pq_path).unwrap());
    assert_eq!(csv_rows.len() as u64, n);
    assert_eq!(pq.rows.len() as u64, n);
    assert_eq!(pq.row_groups, 2);
    let epoch = TraceReader::open(&path).unwrap().meta().start_epoch_ns;
    assert!(epoch > 0);
    let kv = |k: &str| {
        pq.metadata
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no {k} in {:?}", pq.metadata))
    };
    assert_eq!(kv("chunkscope.store"), "/srv/store");
    assert_eq!(kv("chunkscope.start_epoch_ns"), epoch.to_string());
    let options: serde_json::Value = serde_json::from_str(&kv("chunkscope.options")).unwrap();
    assert_eq!(options["readdirplus"], false);
    let mut header = csv_header.clone();
    header.insert(2, "time".into());
    assert_eq!(pq.header, header, "the CSV's columns and the time");
    let errno = csv_header.iter().position(|c| c == "errno").unwrap();
    for (k, (c, p)) in csv_rows.iter().zip(&pq.rows).enumerate() {
        let mut want = c.clone();
        want.insert(2, (epoch + c[1].parse::<u64>().unwrap()).to_string());
        want[errno + 1] = match c[errno].parse().unwrap() {
            0 => String::new(),
            e => chunkscope::units::errno_name(e),
        };
        assert_eq!(p, &want, "row {k}: csv {c:?}");
    }
    assert_eq!(pq.rows[2][errno + 1], "200");
    assert_eq!(pq.rows[1][errno + 1], "EIO");
    let o = run(&[
        "trace",
        "export",
        "--format",
        "parquet",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        o.stdout == std::fs::read(&pq_path).unwrap(),
        "standard output and -o FILE differ"
    );
}

/// An export that fails (a damaged block in the middle of the trace) says which trace and
/// where it was going, exits non-zero and leaves neither a half file nor a temporary one;
/// a destination that was there is as it was.
#[test]
fn a_failed_export_leaves_the_destination_as_it_was() {
    use chunkscope::trace::format::{BLOCK_BYTES, BLOCK_HEADER, SLOT_SIZE};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.trace");
    let (writer, sink) = TraceWriter::start(&path, meta()).unwrap();
    for i in 0..(2 * BLOCK_BYTES / SLOT_SIZE) as u64 + 10 {
        sink.record(rec(
            Op::Lookup,
            i,
            &Digest::of(&i.to_le_bytes()).to_hex().into_bytes(),
        ));
    }
    drop(sink);
    writer.finish().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let first = bytes.windows(4).position(|w| w == b"CSZB").unwrap();
    bytes[first + BLOCK_HEADER + 10] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let old = out.join("old.parquet");
    std::fs::write(&old, b"the last export").unwrap();
    for (format, to) in [("parquet", "old.parquet"), ("csv", "new.csv")] {
        let dest = out.join(to);
        let o = run(&[
            "trace",
            "export",
            "--format",
            format,
            "-o",
            dest.to_str().unwrap(),
            path.to_str().unwrap(),
        ]);
        assert!(!o.status.success(), "{format}: a damaged trace exported");
        let err = stderr(&o);
        assert!(
            err.contains(path.to_str().unwrap()) && err.contains("damaged"),
            "{format}: {err}"
        );
        let left: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["old.parquet"], "{format}: {err}");
        assert_eq!(std::fs::read(&old).unwrap(), b"the last export");
    }
    // A destination in a directory that is not there: named.
    let o = run(&[
        "trace",
        "export",
        "-o",
        "/nonexistent/x.csv",
        path.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("/nonexistent"), "{}", stderr(&o));
}

/// Issue 40, point 3: a trace on a full disk (a 16 KiB tmpfs). The mount keeps serving, says
/// at once which file failed and why, shows the lost records while it runs (`ctl stats`),
/// writes `--stats` anyway and exits non-zero saying how many were lost; the trace reads up
/// to where the error struck. Output files inside the store or under the mountpoint are
/// refused before anything is written.
#[test]
fn a_full_disk_under_the_trace_loses_nothing_silently() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    for i in 0..2000 {
        std::fs::write(store.join(format!("f{i:05}")), b"x").unwrap();
    }
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let _full = TmpfsMount::sized(&small, 0, Some(16 * 1024));
    let trace = small.join("t.trace");
    let stats = dir.path().join("stats.json");
    let mount_dir = dir.path().join("m");
    std::fs::create_dir(&mount_dir).unwrap();
    let mut m = Mount::start(
        &store,
        &mount_dir,
        false,
        &[
            "--trace",
            trace.to_str().unwrap(),
            "--stats",
            stats.to_str().unwrap(),
        ],
    );
    let socket = chunkscope::overlay::control::socket_for(&m.mnt);
    let mut client = chunkscope::overlay::control::Client::connect(&socket).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // Requests until the writer has failed and counts what it cannot write.
    while client.stats().unwrap().lost == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the trace never failed"
        );
        for e in std::fs::read_dir(&m.mnt).unwrap() {
            std::fs::metadata(e.unwrap().path()).unwrap();
        }
    }
    assert_eq!(
        std::fs::read(m.path("f00000")).unwrap(),
        b"x",
        "still serving"
    );
    let log = m.log();
    assert!(
        log.contains(&format!("writing the trace {} failed", trace.display()))
            && log.contains("No space left on device")
            && log.contains("counted as lost"),
        "said at once: {log}"
    );
    let (code, log) = m.stop_with_status();
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("is incomplete") && log.contains("records lost"),
        "{log}"
    );
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let (sent, written, lost) = (
        s["trace"]["sent"].as_u64().unwrap(),
        s["trace"]["written"].as_u64().unwrap(),
        s["trace"]["lost"].as_u64().unwrap(),
    );
    assert!(lost > 0 && written + lost == sent, "{s}");
    assert!(
        s["trace_error"].as_str().unwrap().contains("No space left"),
        "{s}"
    );
    // The trace reads (a torn tail at worst) and holds what was counted written.
    let (records, _) = read_all(&trace);
    assert_eq!(records.len() as u64, written);

    // Outputs where the mount would write into what it watches are refused.
    for (flag, inside) in [
        ("--trace", store.join("t.trace")),
        ("--stats", m.mnt.join("s.json")),
        ("--log", store.join("mount.log")),
    ] {
        let o = run(&[
            "mount",
            "--store",
            store.to_str().unwrap(),
            "--mountpoint",
            m.mnt.to_str().unwrap(),
            flag,
            inside.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2));
        let e = stderr(&o);
        assert!(e.contains(flag) && e.contains("put it elsewhere"), "{e}");
        assert!(!inside.exists(), "nothing written: {}", inside.display());
    }
}

/// Issue 40, point 4: the writer's name table is bounded. Past 65,536 names it starts again
/// (ids from 0), and every record still reads back with its own name, a name seen before the
/// restart included.
#[test]
fn names_past_the_writers_table_read_back_with_their_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("names.trace");
    let (writer, sink) = TraceWriter::start(&path, meta()).unwrap();
    let max = chunkscope::trace::writer::MAX_NAMES as u64;
    let name = |i: u64| format!("{:064x}.tmp_{i:06}", i).into_bytes();
    let n = 2 * max + 10;
    for i in 0..n {
        sink.record(rec(Op::Lookup, i, &name(i)));
    }
    // The first name again, after two restarts of the table.
    sink.record(rec(Op::Lookup, n, &name(0)));
    drop(sink);
    let stats = writer.finish().unwrap();
    assert_eq!(
        stats.strings,
        n + 1,
        "every name defined, the first one twice"
    );
    let (recs, torn) = read_all(&path);
    assert_eq!(torn, None);
    assert_eq!(recs.len() as u64, n + 1);
    for (i, r) in recs.iter().enumerate() {
        let want = name(if i as u64 == n { 0 } else { i as u64 });
        match &r.name {
            Name::Text(t) => assert_eq!(t.as_bytes(), &want[..], "record {i}"),
            other => panic!("record {i}: {other:?}"),
        }
    }
}

/// Issue 47, point 5: a plain (version 1) trace has no checksum; a damaged request number
/// made `analyze` drop the record without a word (a number already passed) and `replay`
/// count 2^64-sized gaps as missing requests (a number far ahead). Both now stop, naming
/// the file and the damage.
#[test]
fn a_damaged_request_number_in_a_plain_trace_is_named_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.trace");
    let (writer, sink) = TraceWriter::start_with(&path, meta(), None, false).unwrap();
    for i in 0..50 {
        sink.record(rec(
            Op::Setattr,
            i,
            Digest::of(&i.to_le_bytes()).to_hex().as_bytes(),
        ));
    }
    drop(sink);
    writer.finish().unwrap();
    let whole = std::fs::read(&path).unwrap();
    // Record 20's slot: its seq, start and duration as written.
    let pattern: Vec<u8> = [20u64, 200, 1020]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let at = whole
        .windows(pattern.len())
        .position(|w| w == pattern)
        .expect("record 20's slot");
    for bad in [5u64, 1 << 62] {
        let mut damaged = whole.clone();
        damaged[at..at + 8].copy_from_slice(&bad.to_le_bytes());
        let p = dir.path().join(format!("damaged-{bad}.trace"));
        std::fs::write(&p, &damaged).unwrap();
        for cmd in [&["analyze"][..], &["replay", "--model", "zfs-hdd"]] {
            let mut a = cmd.to_vec();
            a.push(p.to_str().unwrap());
            let o = run(&a);
            assert_eq!(o.status.code(), Some(2), "{cmd:?} {bad}: {}", stderr(&o));
            let e = stderr(&o);
            assert!(
                e.contains("the trace is damaged") && e.contains(p.to_str().unwrap()),
                "{cmd:?} {bad}: {e}"
            );
        }
    }
}

/// Issue 47, point 4: names are kept byte for byte. Two names that differ only in bytes that
/// are not UTF-8 read back as two names (they were both read as "vm-\u{fffd}" before); the
/// dump and the exports show such bytes as `\xNN` and escape control characters.
#[test]
fn names_that_are_not_utf8_read_back_byte_exact_and_are_escaped_when_shown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("names.trace");
    let (writer, sink) = TraceWriter::start(&path, meta()).unwrap();
    let names: [&[u8]; 3] = [b"vm-\xff", b"vm-\xfe", b"ct-\x1b[2J"];
    for (i, n) in names.iter().enumerate() {
        sink.record(rec(Op::Lookup, i as u64, n));
    }
    drop(sink);
    writer.finish().unwrap();
    let (recs, torn) = read_all(&path);
    assert_eq!(torn, None);
    let got: Vec<&[u8]> = recs
        .iter()
        .map(|r| match &r.name {
            Name::Text(t) => t.as_bytes(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, names.to_vec());
    assert_ne!(recs[0].name, recs[1].name);
    let o = run(&["trace", "export", "--format", "csv", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = stdout(&o);
    for want in ["vm-\\xff", "vm-\\xfe", "ct-\\u{1b}[2J"] {
        assert!(csv.contains(want), "{want} in {csv}");
    }
    assert!(
        !csv.contains('\u{fffd}') && !csv.contains('\u{1b}'),
        "{csv}"
    );
    let o = run(&["trace", "dump", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let dump = stdout(&o);
    assert!(
        dump.contains("vm-\\xff") && dump.contains("vm-\\xfe"),
        "{dump}"
    );
    assert!(!dump.contains('\u{1b}'), "{dump}");
}

/// Issue 48, point 2: a read's or write's offset is kept where a name would be, and a record
/// copied through `Record::to_raw` reads back the same, offset included; a named record's
/// offset (issue 50: an S3 request's bytes) in the slot's 4 spare bytes.
#[test]
fn read_and_write_offsets_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rw.trace");
    let (writer, sink) = TraceWriter::start(&path, meta()).unwrap();
    let mut r = rec(Op::Read, 1, b"");
    r.offset = (7 << 30) + 4096;
    r.arg = 65536;
    sink.record(r);
    let mut w = rec(Op::Write, 2, b"");
    w.offset = u64::MAX - 511;
    sink.record(w);
    sink.record(rec(Op::Lookup, 3, b"name"));
    // A named record (an S3 request's bytes): exact below 2 GiB, in KiB above.
    for (seq, bytes) in [(4, 123_456_789), (5, (5 << 30) + 1023), (6, u64::MAX)] {
        let mut s3 = rec(Op::S3List, seq, b".chunks/");
        s3.offset = bytes;
        sink.record(s3);
    }
    let mut digest = rec(Op::Lookup, 7, "07".repeat(32).as_bytes());
    digest.offset = 99;
    sink.record(digest);
    drop(sink);
    writer.finish().unwrap();
    let (recs, _) = read_all(&path);
    assert_eq!(
        recs.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [
            (7 << 30) + 4096,
            u64::MAX - 511,
            0,
            123_456_789,
            5 << 30,
            ((1 << 31) - 1) << 10,
            99
        ]
    );
    let copy = dir.path().join("copy.trace");
    let (writer, sink) = TraceWriter::start(&copy, meta()).unwrap();
    for r in &recs {
        sink.record(r.to_raw().unwrap());
    }
    drop(sink);
    writer.finish().unwrap();
    assert_eq!(
        read_all(&copy).0,
        recs,
        "a copy reads back the same records"
    );
}

/// Issue 49, point 3: a mount's trace has one writer. A simulation, then a second mount,
/// given the same `--trace` refuse at start naming the mount's pid, and the mount's trace is
/// whole after its unmount (before, the second writer emptied it: "no block at offset 304").
#[test]
fn a_second_writer_of_a_mounts_trace_is_refused_and_the_trace_kept() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "store", &[]);
    let mut m = Mount::start(&store, &dir.path().join("a"), true, &[]);
    let trace = m.trace.clone().unwrap();
    let pid = m.pid().unwrap();
    std::fs::read_dir(m.path(".chunks")).unwrap().count();
    let o = run(&[
        "simulate",
        "--preset",
        "tiny",
        "--strategy",
        "lru",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("(pid {pid})")),
        "{}",
        stderr(&o)
    );
    let mnt2 = dir.path().join("b");
    std::fs::create_dir(&mnt2).unwrap();
    let o = run(&[
        "mount",
        "--store",
        store.to_str().unwrap(),
        "--mountpoint",
        mnt2.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("(pid {pid})")),
        "{}",
        stderr(&o)
    );
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(mnt2.to_str().unwrap()),
        "the second mount did not mount"
    );
    m.stop();
    let (records, _) = read_all(&trace);
    assert!(
        records.iter().any(|r| r.op == Op::Readdir as u16),
        "the first mount's listing is in its trace"
    );
}
