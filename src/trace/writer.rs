//! The trace writer: a thread that owns the file; request paths only hand it records.
//!
//! [`TraceSink::record`] copies a [`RawRecord`] (integers and an inline name, no allocation)
//! into a bounded channel; the writer polls it (it never sleeps *in* the channel, so senders
//! never have to wake it). If the channel is full the sender waits — records are never
//! dropped — and the wait is counted as a stall, so backpressure is visible. The writer thread
//! classifies names (64 lowercase hex → 32 raw digest bytes, anything else → string table),
//! encodes slots into a 1 MiB buffer, and flushes at least every second, so a live trace can
//! be read while it grows. Dropping every sink ends the thread after a final flush.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hashbrown::HashMap;

use super::format::{
    encode_header, encode_record, Op, RawRecord, TraceMeta, BLOCK_BYTES, BLOCK_HEADER, BLOCK_MAGIC,
    SLOT_SIZE, STRING_DEF, TRACE_VERSION, TRACE_VERSION_PLAIN,
};
use crate::datastore::Digest;

/// Records the channel holds before senders wait.
pub const CHANNEL_CAPACITY: usize = 16_384;
/// How long the writer sleeps when the channel is empty.
pub const NAP: Duration = Duration::from_millis(2);
/// The longest time between flushes.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    stalls: AtomicU64,
    lost: AtomicU64,
    seq: AtomicU64,
}

/// The request path's handle on a trace. Cheap to clone; every clone must be dropped for the
/// writer to finish.
#[derive(Clone)]
pub struct TraceSink {
    tx: SyncSender<RawRecord>,
    counters: Arc<Counters>,
    start: Instant,
}

/// What the writer did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WriterStats {
    /// Records handed to the writer.
    pub sent: u64,
    /// Records written to the file.
    pub written: u64,
    /// Times a sender had to wait for room in the channel.
    pub stalls: u64,
    /// Records that could not be delivered because the writer had failed.
    pub lost: u64,
    /// Strings defined in the file's string table.
    pub strings: u64,
    /// Bytes of the file.
    pub bytes: u64,
}

/// The entries a listing returned: their inodes and, where known, their names (`names`
/// holds them back to back, `name_ends[i]` is where entry `i`'s name ends; empty: no names).
#[derive(Clone, Copy, Default)]
pub struct ListingEntries<'a> {
    /// The entries' inodes, in listing order.
    pub inos: &'a [u64],
    /// Their names, back to back.
    pub names: &'a [u8],
    /// Where each name ends in `names`.
    pub name_ends: &'a [u32],
}

/// What a request's records carry beyond its own (see [`TraceSink::record_request`]).
#[derive(Clone, Copy, Default)]
pub struct Extra<'a> {
    /// A listing's entries: a `dirent` record each.
    pub listing: Option<ListingEntries<'a>>,
    /// A rename's new name: (new directory, name), a `newname` record.
    pub new_name: Option<(u64, &'a [u8])>,
    /// A link's source: (inode, directory, name), an `oldname` record.
    pub old_name: Option<(u64, u64, &'a [u8])>,
}

impl TraceSink {
    /// Nanoseconds since the trace started (monotonic clock).
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// The next request sequence number.
    #[inline]
    pub fn next_seq(&self) -> u64 {
        self.counters.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Hands a record to the writer, waiting (and counting a stall) if the channel is full.
    #[inline]
    pub fn record(&self, r: RawRecord) {
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        match self.tx.try_send(r) {
            Ok(()) => {}
            Err(TrySendError::Full(r)) => {
                self.counters.stalls.fetch_add(1, Ordering::Relaxed);
                if self.tx.send(r).is_err() {
                    self.counters.lost.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                self.counters.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Hands over one request's records in the order the format gives them (`format.rs`):
    /// the entries its listing returned, its second name (a rename's new one, a link's old
    /// one), then the request's own record `r`. The extra records take `r`'s number, start
    /// and pid. Used by the overlay and the simulator alike, so both write the same records.
    #[inline]
    pub fn record_request(&self, r: RawRecord, extra: Extra<'_>) {
        let related = |op: Op| {
            let mut x = RawRecord::new(op);
            x.seq = r.seq;
            x.start_ns = r.start_ns;
            x.pid = r.pid;
            x
        };
        if let Some(l) = extra.listing {
            let mut start = 0;
            for (i, &ino) in l.inos.iter().enumerate() {
                let mut d = related(Op::Dirent);
                d.ino = ino;
                d.parent = r.ino;
                d.arg = i as u64;
                if let Some(&end) = l.name_ends.get(i) {
                    d.set_name(&l.names[start..end as usize]);
                    start = end as usize;
                }
                self.record(d);
            }
        }
        if let Some((parent, name)) = extra.new_name {
            let mut n = related(Op::NewName);
            n.ino = r.ino;
            n.parent = parent;
            n.set_name(name);
            self.record(n);
        }
        if let Some((ino, parent, name)) = extra.old_name {
            let mut n = related(Op::OldName);
            n.ino = ino;
            n.parent = parent;
            n.set_name(name);
            self.record(n);
        }
        self.record(r);
    }

    /// Records so far: sent, stalls, lost.
    pub fn counts(&self) -> (u64, u64, u64) {
        let c = &self.counters;
        (
            c.sent.load(Ordering::Relaxed),
            c.stalls.load(Ordering::Relaxed),
            c.lost.load(Ordering::Relaxed),
        )
    }
}

/// Sees every record the writer writes, on the writer's thread (off the request path): a
/// running mount's phase inference.
pub trait Observer: Send {
    /// One record, as written.
    fn record(&mut self, r: &RawRecord);
    /// The channel is empty for now: a moment to publish what was seen.
    fn drained(&mut self) {}
}

/// The writer thread; [`TraceWriter::finish`] waits for it after every sink is dropped.
pub struct TraceWriter {
    handle: JoinHandle<Written>,
    counters: Arc<Counters>,
}

/// What the writer thread wrote: records, strings, bytes, and the write error that stopped
/// it (the records after it were counted as lost).
type Written = (u64, u64, u64, Option<io::Error>);

/// Opens `path` for one writer: created if missing, locked (`flock`, exclusive, held for as
/// long as the writer keeps it open) and only then emptied, so that a second writer given
/// the same path (another mount, an import, a simulation) refuses, naming the first one's
/// pid, instead of destroying its trace. Anything but a regular file (`/dev/null`, a FIFO)
/// is written as is, unlocked.
fn open_exclusive(path: &Path) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(file);
    }
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let holder = lock_holder(&meta)
                .map(|pid| format!(" (pid {pid})"))
                .unwrap_or_default();
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "{} is being written by another trace writer{holder}: give each its own \
                     path",
                    path.display()
                ),
            ));
        }
        // A filesystem without locks (some network ones): written unlocked, as before.
        tracing::debug!("{}: not locked ({e})", path.display());
    }
    file.set_len(0)?;
    Ok(file)
}

/// The pid holding a `flock` on the file of `meta`, from `/proc/locks`.
fn lock_holder(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let id = format!(
        "{:02x}:{:02x}:{}",
        libc::major(meta.dev()),
        libc::minor(meta.dev()),
        meta.ino()
    );
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF"
        (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&id.as_str()))
            .then(|| f.get(4)?.parse().ok())
            .flatten()
    })
}

impl TraceWriter {
    /// Creates `path` (truncating it), writes the header, starts the writer thread.
    pub fn start(path: &Path, meta: TraceMeta) -> io::Result<(TraceWriter, TraceSink)> {
        TraceWriter::start_observed(path, meta, None)
    }

    /// [`TraceWriter::start`], with an observer of every record on the writer's thread.
    pub fn start_observed(
        path: &Path,
        meta: TraceMeta,
        observer: Option<Box<dyn Observer>>,
    ) -> io::Result<(TraceWriter, TraceSink)> {
        TraceWriter::start_with(path, meta, observer, true)
    }

    /// [`TraceWriter::start_observed`], writing version 2 (compressed blocks) or, with
    /// `compress` false, version 1 (plain slots).
    pub fn start_with(
        path: &Path,
        mut meta: TraceMeta,
        observer: Option<Box<dyn Observer>>,
        compress: bool,
    ) -> io::Result<(TraceWriter, TraceSink)> {
        let file = open_exclusive(path)?;
        let start = Instant::now();
        meta.start_epoch_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        if meta.chunkscope.is_empty() {
            meta.chunkscope = env!("CARGO_PKG_VERSION").to_string();
        }
        let version = if compress {
            TRACE_VERSION
        } else {
            TRACE_VERSION_PLAIN
        };
        let header = encode_header(&meta, version);
        let (tx, rx) = mpsc::sync_channel(CHANNEL_CAPACITY);
        let counters = Arc::new(Counters::default());
        let (c, named) = (counters.clone(), path.to_path_buf());
        let handle = std::thread::Builder::new()
            .name("trace-writer".into())
            .spawn(move || write_loop(file, &header, rx, observer, compress, &c, &named))?;
        Ok((
            TraceWriter {
                handle,
                counters: counters.clone(),
            },
            TraceSink {
                tx,
                counters,
                start,
            },
        ))
    }

    /// Waits for the writer to drain and flush (every sink must have been dropped); a write
    /// error is an error.
    pub fn finish(self) -> io::Result<WriterStats> {
        match self.finish_all() {
            (stats, None) => Ok(stats),
            (_, Some(e)) => Err(e),
        }
    }

    /// [`TraceWriter::finish`], with what was written and lost even when a write failed
    /// (a full disk), and the error that stopped the writer.
    pub fn finish_all(self) -> (WriterStats, Option<io::Error>) {
        let (written, strings, bytes, error) = self.handle.join().unwrap_or_else(|_| {
            (
                0,
                0,
                0,
                Some(io::Error::other("trace writer thread panicked")),
            )
        });
        let c = &self.counters;
        let sent = c.sent.load(Ordering::Relaxed);
        let stats = WriterStats {
            sent,
            written,
            stalls: c.stalls.load(Ordering::Relaxed),
            // Every record handed over and not written, once the writer stopped.
            lost: c
                .lost
                .load(Ordering::Relaxed)
                .max(sent.saturating_sub(written)),
            strings,
            bytes,
        };
        (stats, error)
    }
}

/// Where encoded slots go: straight to the file (version 1), or into a block that is
/// compressed and written when full or flushed (version 2).
enum Sink {
    Plain(BufWriter<File>),
    Blocks(Blocks),
}

/// Version 2's block being filled, and what compresses it (both reused: no allocation
/// per block).
struct Blocks {
    file: File,
    slots: Vec<u8>,
    packed: Vec<u8>,
    zstd: zstd::bulk::Compressor<'static>,
}

/// Names the writer's string table holds at most before it starts again (each a
/// definition in the trace; a name used again after a restart is defined again).
pub const MAX_NAMES: usize = 65_536;

/// zstd's level for trace blocks: its fastest regular level (BENCHMARKS.md "Compressed
/// traces").
const ZSTD_LEVEL: i32 = 1;

impl Blocks {
    /// Compresses and writes the slots buffered so far as one block; returns its bytes.
    fn write_block(&mut self) -> io::Result<u64> {
        if self.slots.is_empty() {
            return Ok(0);
        }
        self.packed.clear();
        self.packed.resize(
            BLOCK_HEADER + zstd::zstd_safe::compress_bound(self.slots.len()),
            0,
        );
        let c = self
            .zstd
            .compress_to_buffer(&self.slots, &mut self.packed[BLOCK_HEADER..])?;
        let body = &self.packed[BLOCK_HEADER..BLOCK_HEADER + c];
        let crc = crc32fast::hash(body);
        let mut head = [0u8; BLOCK_HEADER];
        head[0..4].copy_from_slice(&BLOCK_MAGIC);
        head[4..8].copy_from_slice(&(c as u32).to_le_bytes());
        head[8..12].copy_from_slice(&(self.slots.len() as u32).to_le_bytes());
        head[12..16].copy_from_slice(&crc.to_le_bytes());
        self.packed[..BLOCK_HEADER].copy_from_slice(&head);
        self.file.write_all(&self.packed[..BLOCK_HEADER + c])?;
        self.slots.clear();
        Ok((BLOCK_HEADER + c) as u64)
    }
}

impl Sink {
    #[inline]
    fn put(&mut self, bytes: &[u8]) -> io::Result<u64> {
        match self {
            Sink::Plain(out) => out.write_all(bytes).map(|()| bytes.len() as u64),
            Sink::Blocks(b) => {
                b.slots.extend_from_slice(bytes);
                Ok(0)
            }
        }
    }

    /// After a whole record (or string definition): writes the block if it is full, so
    /// blocks hold whole slots.
    #[inline]
    fn end_record(&mut self) -> io::Result<u64> {
        match self {
            Sink::Blocks(b) if b.slots.len() >= BLOCK_BYTES => b.write_block(),
            _ => Ok(0),
        }
    }

    /// Writes what is buffered; returns the file bytes written.
    fn flush(&mut self) -> io::Result<u64> {
        match self {
            Sink::Plain(out) => out.flush().map(|()| 0),
            Sink::Blocks(b) => b.write_block(),
        }
    }

    fn file(&self) -> &File {
        match self {
            Sink::Plain(out) => out.get_ref(),
            Sink::Blocks(b) => &b.file,
        }
    }
}

struct Encoder {
    out: Sink,
    strings: HashMap<Box<[u8]>, u32>,
    slot: [u8; SLOT_SIZE],
    written: u64,
    /// Records in the file for sure: those of the blocks written and flushes done.
    durable: u64,
    /// String definitions written (the table holds at most [`MAX_NAMES`] of them).
    defined: u64,
    bytes: u64,
}

impl Encoder {
    /// The header written, an encoder for the records.
    fn start(mut file: File, header: &[u8], compress: bool) -> io::Result<Encoder> {
        file.write_all(header)?;
        let out = if compress {
            Sink::Blocks(Blocks {
                file,
                slots: Vec::with_capacity(BLOCK_BYTES + 8 * SLOT_SIZE + 4096),
                packed: Vec::new(),
                zstd: zstd::bulk::Compressor::new(ZSTD_LEVEL)?,
            })
        } else {
            Sink::Plain(BufWriter::with_capacity(1 << 20, file))
        };
        Ok(Encoder {
            out,
            strings: HashMap::new(),
            slot: [0; SLOT_SIZE],
            written: 0,
            durable: 0,
            defined: 0,
            bytes: header.len() as u64,
        })
    }

    fn write(&mut self, r: &RawRecord) -> io::Result<()> {
        let mut name = [0u8; 32];
        let raw = r.name();
        let kind = if raw.is_empty() {
            0
        } else if let Some(d) = Digest::from_lowercase_hex(raw) {
            // A chunk name (uppercase names stay text: the trace keeps the name as asked).
            name = d.0;
            1
        } else {
            let id = match self.strings.get(raw) {
                Some(&id) => id,
                None => self.define(raw)?,
            };
            name[..4].copy_from_slice(&id.to_le_bytes());
            2
        };
        encode_record(r, kind, &name, &mut self.slot);
        let slot = self.slot;
        self.bytes += self.out.put(&slot)?;
        let block = self.out.end_record()?;
        self.bytes += block;
        self.written += 1;
        if block > 0 {
            self.durable = self.written;
        }
        Ok(())
    }

    /// Writes what is buffered.
    fn flush(&mut self) -> io::Result<()> {
        self.bytes += self.out.flush()?;
        self.durable = self.written;
        Ok(())
    }

    fn define(&mut self, s: &[u8]) -> io::Result<u32> {
        if self.strings.len() >= MAX_NAMES {
            // Names by the million (PBS's `<digest>.tmp_XXXXXX`, each used once) must not
            // grow the table for a week: start again, ids from 0 (a reader takes the newest
            // definition of an id).
            self.strings.clear();
            self.strings.shrink_to(MAX_NAMES);
        }
        let id = self.strings.len() as u32;
        self.defined += 1;
        let mut head = [0u8; SLOT_SIZE];
        head[0..8].copy_from_slice(&(id as u64).to_le_bytes());
        head[8..16].copy_from_slice(&(s.len() as u64).to_le_bytes());
        // op lives at 68..70 in every slot, so a reader can tell definitions apart.
        head[68..70].copy_from_slice(&STRING_DEF.to_le_bytes());
        self.bytes += self.out.put(&head)?;
        let padded = s.len().div_ceil(SLOT_SIZE) * SLOT_SIZE;
        self.bytes += self.out.put(s)?;
        self.bytes += self.out.put(&[0u8; SLOT_SIZE][..padded - s.len()])?;
        self.bytes += self.out.end_record()?;
        self.strings.insert(s.into(), id);
        Ok(id)
    }
}

fn write_loop(
    file: File,
    header: &[u8],
    rx: Receiver<RawRecord>,
    mut observer: Option<Box<dyn Observer>>,
    compress: bool,
    counters: &Counters,
    path: &Path,
) -> Written {
    let mut enc = match Encoder::start(file, header, compress) {
        Ok(enc) => enc,
        Err(e) => return (0, 0, 0, Some(e)),
    };
    let mut failed: Option<io::Error> = None;
    let mut last_flush = Instant::now();
    // The writer never blocks in recv: a sender that finds a receiver waiting has to wake it
    // (a futex call and a context switch per record on a busy mount). It drains what is
    // queued, then naps; a full channel makes senders wait at most one nap.
    'run: loop {
        loop {
            match rx.try_recv() {
                Ok(r) => {
                    if failed.is_none() {
                        if let Err(e) = enc.write(&r) {
                            failed = Some(stop(e, path));
                        }
                    }
                    if failed.is_some() {
                        // Counted, not written: the file ends where the error struck (a torn
                        // tail at worst, which readers accept), and senders never wait on a
                        // writer that cannot write.
                        counters.lost.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Some(o) = &mut observer {
                        o.record(&r);
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => break 'run,
            }
        }
        if let Some(o) = &mut observer {
            o.drained();
        }
        if failed.is_none() && last_flush.elapsed() >= FLUSH_INTERVAL {
            if let Err(e) = enc.flush() {
                failed = Some(stop(e, path));
            }
            last_flush = Instant::now();
        }
        std::thread::sleep(NAP);
    }
    if failed.is_none() {
        if let Err(e) = enc.flush().and_then(|()| enc.out.file().sync_data()) {
            failed = Some(stop(e, path));
        }
    }
    // After a failure, only what surely reached the file counts as written.
    let written = if failed.is_some() {
        enc.durable
    } else {
        enc.written
    };
    (written, enc.defined, enc.bytes, failed)
}

/// The first write error: said at once (the file, the error, what happens now), kept for the
/// end.
fn stop(e: io::Error, path: &Path) -> io::Error {
    tracing::warn!(
        "writing the trace {} failed: {e}. The trace stops here (it stays readable up to its \
         last whole block); every record from now on is counted as lost (ctl stats, top, \
         /metrics); the mount goes on serving, and will exit with an error saying how many \
         were lost",
        path.display()
    );
    io::Error::new(e.kind(), format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 49, point 3: a second writer on a trace being written refuses, naming the
    /// first one's pid, and leaves the first trace whole; once the first is done the path is
    /// free again.
    #[test]
    fn a_trace_has_one_writer_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        let (w, sink) = TraceWriter::start(&path, TraceMeta::default()).unwrap();
        let second = TraceWriter::start(&path, TraceMeta::default());
        let e = second.err().expect("the second writer refuses");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        let text = e.to_string();
        assert!(
            text.contains(&format!("(pid {})", std::process::id())),
            "{text}"
        );
        assert!(text.contains("t.trace"), "{text}");
        drop(sink);
        w.finish().unwrap();
        let header = std::fs::read(&path).unwrap();
        assert!(header.len() > 16, "the first trace is whole");
        let (w, sink) = TraceWriter::start(&path, TraceMeta::default()).unwrap();
        drop(sink);
        w.finish().unwrap();
    }
}
