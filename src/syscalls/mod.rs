//! A real GC's system calls as a chunkscope trace: `trace import` of an `strace` log (or the
//! log of `mount-scripts/gc-syscalls.bt`, bpftrace on syscall tracepoints), for a PBS whose
//! datastore cannot be put under a mount.
//!
//! Each call on the store becomes the requests a chunkscope mount of it would have recorded
//! for it (the simulator's table, `src/sim/ops.rs`, with the kernel's directory cache
//! answering the lookups of directories), its path joined with its inode number from a
//! survey of the store ([`SurveyInodes`]) or a `stat` at import time ([`StatInodes`]; a
//! `stat` changes no atime):
//!
//! | call | records |
//! |---|---|
//! | `utimensat` of a chunk | lookup (chunk), setattr (atime) |
//! | `newfstatat`/`statx` of a chunk, by path or in its directory | lookup (chunk), getattr |
//! | `newfstatat`/`statx` of an open directory (`AT_EMPTY_PATH`) | getattr |
//! | `unlinkat` in a chunk directory | lookup (chunk), unlink |
//! | `openat` of a directory | lookup (its name), opendir |
//! | `openat` of an index file (or any file of the store) | lookup, open |
//! | `openat(O_CREAT)` of a chunk's temporary file | create |
//! | `getdents64` | readdir (entries: the call's count; in a chunk directory with a survey, a dirent record each, from the survey's readdir order) |
//!
//! Calls outside the store (libraries, `/proc`) are skipped. Each record keeps the call's
//! thread, start and duration; phases are inferred from them as for any trace without
//! markers (`trace::phases`). What a syscall log cannot say: the entries a listing
//! returned (from a survey for chunk directories, "." and ".." taken to come first, as every
//! filesystem of a datastore lists them; none otherwise, nor from bpftrace, which gives no
//! count), and the inodes of chunks removed before the import when no survey was taken
//! before the GC (inode 0, counted as unresolved).

pub mod bpftrace;
pub mod strace;

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use hashbrown::HashMap;
use serde::Serialize;

use crate::datastore::paths::CHUNK_DIR;
use crate::datastore::Digest;
use crate::trace::format::{flags, RawRecord};
use crate::trace::{Extra, Op, TraceMeta, TraceSink, TraceWriter};

/// The system calls imported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `utimensat`.
    #[default]
    Utimensat,
    /// `newfstatat` (`fstatat`).
    Fstatat,
    /// `statx`.
    Statx,
    /// `getdents64`.
    Getdents,
    /// `unlinkat`.
    Unlinkat,
    /// `openat`.
    Openat,
}

impl Kind {
    /// The call of a name as strace and the tracepoints name it.
    pub fn from_name(name: &str) -> Option<Kind> {
        Some(match name {
            "utimensat" => Kind::Utimensat,
            "newfstatat" | "fstatat64" => Kind::Fstatat,
            "statx" => Kind::Statx,
            "getdents64" => Kind::Getdents,
            "unlinkat" => Kind::Unlinkat,
            "openat" => Kind::Openat,
            _ => return None,
        })
    }
}

/// One system call of a log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Syscall {
    /// The calling thread.
    pub tid: u32,
    /// When it started, ns (since the epoch if `epoch`, else since midnight).
    pub time_ns: u64,
    /// Whether `time_ns` counts from the epoch.
    pub epoch: bool,
    /// How long it took, ns.
    pub duration_ns: u64,
    /// Which call.
    pub kind: Kind,
    /// Its descriptor argument's path (`None`: `-1`, or unknown).
    pub dir: Option<String>,
    /// Its path argument.
    pub path: Option<String>,
    /// Its result (-1 on an error).
    pub ret: i64,
    /// The error (0: none).
    pub errno: i32,
    /// `openat`: the path of the descriptor it returned.
    pub result_path: Option<String>,
    /// `openat` with `O_CREAT`.
    pub create: bool,
    /// `openat` with `O_DIRECTORY`.
    pub directory: bool,
    /// A stat of the descriptor itself (`AT_EMPTY_PATH` and an empty path).
    pub empty_path: bool,
    /// `getdents64`: the entries it returned, if the log says.
    pub entries: Option<u64>,
}

/// Inode numbers of the store's paths.
pub trait Inodes {
    /// The chunk `d`'s inode (`None`: unknown).
    fn chunk(&mut self, d: &Digest) -> Option<u64>;
    /// The inode of the path `rel` below the store's root (empty: the root).
    fn path(&mut self, rel: &Path) -> Option<u64>;
    /// The inodes of chunk directory `prefix`'s chunks in readdir order, if known (a
    /// survey's), for the entries of a listing.
    fn listing(&self, prefix: u16) -> Option<&[u64]> {
        let _ = prefix;
        None
    }
}

/// Inode numbers from a survey taken before the GC (chunks it removed included).
pub struct SurveyInodes {
    chunks: HashMap<Digest, u64>,
    paths: HashMap<PathBuf, u64>,
    /// Every chunk's inode in readdir order, directory by directory; `starts[p]` where
    /// directory `p`'s begin.
    listed: Vec<u64>,
    starts: Vec<usize>,
}

impl SurveyInodes {
    /// The inodes a survey saw.
    pub fn new(f: &crate::survey::file::SurveyFile) -> SurveyInodes {
        let chunks = f.chunks.iter().map(|&(d, ino)| (d, ino)).collect();
        let mut paths = HashMap::new();
        for d in &f.dirs {
            paths.insert(d.path.clone(), d.ino);
            for (name, _, ino) in &d.entries {
                paths.insert(d.path.join(name), *ino);
            }
        }
        for (p, &ino) in f.dir_inos.iter().enumerate() {
            let name = crate::datastore::paths::chunk_subdir_name(p as u16);
            paths.insert(Path::new(CHUNK_DIR).join(name), ino);
        }
        let listed = f.chunks.iter().map(|c| c.1).collect();
        let mut starts = Vec::with_capacity(f.dir_chunks.len() + 1);
        let mut at = 0usize;
        starts.push(0);
        for &n in &f.dir_chunks {
            at += n as usize;
            starts.push(at);
        }
        SurveyInodes {
            chunks,
            paths,
            listed,
            starts,
        }
    }
}

impl Inodes for SurveyInodes {
    fn chunk(&mut self, d: &Digest) -> Option<u64> {
        self.chunks.get(d).copied()
    }
    fn path(&mut self, rel: &Path) -> Option<u64> {
        self.paths.get(rel).copied()
    }
    fn listing(&self, prefix: u16) -> Option<&[u64]> {
        let (a, b) = (
            *self.starts.get(prefix as usize)?,
            *self.starts.get(prefix as usize + 1)?,
        );
        Some(&self.listed[a..b])
    }
}

/// Inode numbers from `first`, else from `then` (a survey, then a stat for what was created
/// after it: the atime check's zero chunk, a backup's new chunks).
pub struct Fallback<A, B>(pub A, pub B);

impl<A: Inodes, B: Inodes> Inodes for Fallback<A, B> {
    fn chunk(&mut self, d: &Digest) -> Option<u64> {
        self.0.chunk(d).or_else(|| self.1.chunk(d))
    }
    fn path(&mut self, rel: &Path) -> Option<u64> {
        self.0.path(rel).or_else(|| self.1.path(rel))
    }
    fn listing(&self, prefix: u16) -> Option<&[u64]> {
        self.0.listing(prefix).or_else(|| self.1.listing(prefix))
    }
}

/// Inode numbers from an `lstat` at import time (a stat reads no data: no atime changes),
/// each path once.
pub struct StatInodes {
    root: PathBuf,
    cache: HashMap<PathBuf, Option<u64>>,
}

impl StatInodes {
    /// Stats below `root`.
    pub fn new(root: &Path) -> StatInodes {
        StatInodes {
            root: root.to_path_buf(),
            cache: HashMap::new(),
        }
    }
}

impl Inodes for StatInodes {
    fn chunk(&mut self, d: &Digest) -> Option<u64> {
        let rel = crate::datastore::paths::chunk_rel_path(d);
        self.path(&rel)
    }
    fn path(&mut self, rel: &Path) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        if let Some(&ino) = self.cache.get(rel) {
            return ino;
        }
        let ino = std::fs::symlink_metadata(self.root.join(rel))
            .ok()
            .map(|m| m.ino());
        self.cache.insert(rel.to_path_buf(), ino);
        ino
    }
}

/// The log formats read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Format {
    /// `strace -f -tt -T -y` (or `-ttt`).
    Strace,
    /// `mount-scripts/gc-syscalls.bt`'s lines.
    Bpftrace,
}

/// What an import read and wrote.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ImportReport {
    /// Lines read.
    pub lines: u64,
    /// Calls on the store imported, by name.
    pub calls: std::collections::BTreeMap<String, u64>,
    /// Calls of the log outside the store (skipped).
    pub outside: u64,
    /// Lines that were no call of the imported kinds (other calls, signals, exits).
    pub other_lines: u64,
    /// Records written.
    pub records: u64,
    /// Records whose inode was not known (0 in the trace).
    pub unresolved: u64,
    /// Of those, records of chunk files (the others are of other paths: the atime check's
    /// temporary file, ...).
    pub unresolved_chunks: u64,
    /// Calls relative to a directory descriptor whose path the log does not give (strace
    /// without `-y`): they cannot be placed in the store, and the import refuses them.
    pub unplaced: u64,
    /// Calls with a duration (strace's `-T`).
    pub timed: u64,
    /// The GC's phases the log shows: `mark` (touches) and `sweep` (chunk-directory
    /// listings).
    pub phases_seen: Vec<String>,
    /// Events the recorder said it dropped (bpftrace's `Lost N events` lines: its ring
    /// buffer was full): the trace lacks that many calls' halves.
    pub lost_events: u64,
    /// The store's root the calls were matched against.
    pub store: String,
}

/// Where a path is in the store.
enum Place {
    Chunk(Digest),
    /// A chunk's temporary file (`<hex>.tmp_XXXXXX`).
    ChunkTemp,
    Other,
}

fn place(rel: &Path) -> Place {
    let mut c = rel.components();
    let first = c.next().and_then(|x| x.as_os_str().to_str());
    let (Some(CHUNK_DIR), Some(_dir), Some(name), None) = (
        first,
        c.next(),
        c.next().and_then(|x| x.as_os_str().to_str()),
        c.next(),
    ) else {
        return Place::Other;
    };
    match crate::datastore::paths::ChunkName::classify(name.as_bytes()) {
        crate::datastore::paths::ChunkName::Chunk(d) => Place::Chunk(d),
        _ if name.contains(".tmp_") => Place::ChunkTemp,
        _ => Place::Other,
    }
}

/// The chunk directory `rel` is (`.chunks/XXXX`).
fn chunk_dir(rel: &Path) -> Option<u16> {
    let name = rel.strip_prefix(CHUNK_DIR).ok()?.to_str()?;
    (name.len() == 4)
        .then(|| u16::from_str_radix(name, 16).ok())
        .flatten()
}

/// Whether the first lines of `log` are calls without a time stamp (`PID NAME(...` or
/// `NAME(...`: strace without `-tt`).
fn untimed_calls(log: &Path) -> bool {
    use std::io::BufRead;
    let Ok((f, _)) = crate::fsutil::open_noatime(log) else {
        return false;
    };
    std::io::BufReader::new(f)
        .lines()
        .take(1000)
        .map_while(Result::ok)
        .any(|l| {
            let call = match l.split_once(' ') {
                Some((pid, rest)) if pid.parse::<u32>().is_ok() => rest.trim_start(),
                _ => l.as_str(),
            };
            call.split_once('(')
                .is_some_and(|(name, _)| Kind::from_name(name).is_some())
        })
}

/// Turns calls into records.
struct Importer<'a> {
    root: PathBuf,
    inodes: &'a mut dyn Inodes,
    sink: TraceSink,
    /// Time of the first call (ns, in the log's clock).
    t0: Option<u64>,
    /// The day the time of day wrapped at, added (`-tt` logs across midnight).
    day_ns: u64,
    last_ns: u64,
    /// Per chunk directory being listed, the entries its listing has returned ("." and ".."
    /// included: the first call returns them first).
    listed: HashMap<u16, usize>,
    report: ImportReport,
    /// Whether the call being imported is about a chunk file.
    on_chunk: bool,
}

const DAY_NS: u64 = 86_400 * 1_000_000_000;

impl Importer<'_> {
    fn rel<'p>(&self, p: &'p Path) -> Option<&'p Path> {
        p.strip_prefix(&self.root).ok()
    }

    fn ino(&mut self, rel: &Path) -> u64 {
        match place(rel) {
            Place::Chunk(d) => self.inodes.chunk(&d),
            _ => self.inodes.path(rel),
        }
        .unwrap_or(0)
    }

    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        s: &Syscall,
        op: Op,
        ino: u64,
        parent: u64,
        name: &[u8],
        fl: u8,
        arg: u64,
        errno: i32,
    ) {
        self.emit_with(s, op, ino, parent, name, fl, arg, errno, Extra::default());
    }

    /// [`Importer::emit`] with the records a request carries beyond its own (a listing's).
    #[allow(clippy::too_many_arguments)]
    fn emit_with(
        &mut self,
        s: &Syscall,
        op: Op,
        ino: u64,
        parent: u64,
        name: &[u8],
        fl: u8,
        arg: u64,
        errno: i32,
        extra: Extra<'_>,
    ) {
        let mut r = RawRecord::new(op);
        r.seq = self.sink.next_seq();
        r.start_ns = self.start_ns(s);
        r.duration_ns = s.duration_ns;
        r.ino = ino;
        r.parent = parent;
        r.arg = arg;
        r.pid = s.tid;
        r.flags = fl;
        r.errno = errno;
        r.set_name(name);
        self.report.records += 1;
        if ino == 0 && errno == 0 && op != Op::Create {
            self.report.unresolved += 1;
            self.report.unresolved_chunks += u64::from(self.on_chunk);
        }
        self.sink.record_request(r, extra);
    }

    fn start_ns(&mut self, s: &Syscall) -> u64 {
        let mut t = s.time_ns + self.day_ns;
        if !s.epoch && t + DAY_NS / 2 < self.last_ns {
            self.day_ns += DAY_NS; // past midnight
            t += DAY_NS;
        }
        self.last_ns = t;
        let t0 = *self.t0.get_or_insert(t);
        t.saturating_sub(t0)
    }

    /// A lookup of `rel`'s last component in its directory, found as `ino` (or failing with
    /// `errno`).
    fn lookup(&mut self, s: &Syscall, rel: &Path, ino: u64, errno: i32) {
        let parent = rel.parent().map_or(0, |p| self.inodes.path(p).unwrap_or(0));
        let name = rel.file_name().map_or(&[][..], |n| n.as_encoded_bytes());
        let found = if errno == 0 { ino } else { 0 };
        self.emit(s, Op::Lookup, found, parent, name, 0, 0, errno);
    }

    fn call(&mut self, s: &Syscall) {
        // The path the call is about.
        let dir = s.dir.as_deref().map(Path::new);
        let target: Option<PathBuf> = match (&s.path, dir) {
            (Some(p), _) if p.starts_with('/') => Some(PathBuf::from(p)),
            (Some(p), Some(d)) if !p.is_empty() => Some(d.join(p)),
            (_, Some(d)) if s.empty_path || s.kind == Kind::Getdents => Some(d.to_path_buf()),
            _ => None,
        };
        let Some(target) = target else {
            if dir.is_none() && (s.path.is_some() || s.kind == Kind::Getdents) {
                self.report.unplaced += 1;
            } else {
                self.report.other_lines += 1;
            }
            return;
        };
        if s.duration_ns > 0 {
            self.report.timed += 1;
        }
        let Some(rel) = self.rel(&target).map(Path::to_path_buf) else {
            self.report.outside += 1;
            return;
        };
        *self
            .report
            .calls
            .entry(format!("{:?}", s.kind).to_lowercase())
            .or_default() += 1;
        let ok = s.errno == 0;
        let ino = self.ino(&rel);
        self.on_chunk = matches!(place(&rel), Place::Chunk(_));
        match (s.kind, place(&rel)) {
            (Kind::Utimensat, _) => {
                self.lookup(s, &rel, ino, s.errno);
                if ok {
                    let now = self.start_ns(s);
                    self.emit(s, Op::Setattr, ino, 0, b"", flags::SET_ATIME, now, 0);
                }
            }
            (Kind::Fstatat | Kind::Statx, _) if s.empty_path => {
                self.emit(s, Op::Getattr, ino, 0, b"", 0, 0, s.errno);
            }
            (Kind::Fstatat | Kind::Statx, _) => {
                self.lookup(s, &rel, ino, s.errno);
                if ok {
                    self.emit(s, Op::Getattr, ino, 0, b"", 0, 0, 0);
                }
            }
            (Kind::Unlinkat, _) => {
                self.lookup(s, &rel, ino, s.errno);
                if ok {
                    let parent = rel.parent().map_or(0, |p| self.inodes.path(p).unwrap_or(0));
                    let name = rel
                        .file_name()
                        .map_or(&[][..], |n| n.as_encoded_bytes())
                        .to_vec();
                    self.emit(s, Op::Unlink, ino, parent, &name, 0, 0, 0);
                }
            }
            (Kind::Getdents, _) => {
                let n = s.entries.unwrap_or(0);
                let entries = chunk_dir(&rel).and_then(|p| {
                    // The next `n` entries of the directory's readdir order, "." and ".."
                    // first (where every filesystem of a datastore lists them).
                    let at = self.listed.entry(p).or_insert(0);
                    let (from, to) = (*at, *at + n as usize);
                    *at = to;
                    let all = self.inodes.listing(p)?;
                    let skip = |i: usize| i.saturating_sub(2).min(all.len());
                    Some(all[skip(from)..skip(to)].to_vec())
                });
                let extra = Extra {
                    listing: entries.as_deref().map(|inos| crate::trace::ListingEntries {
                        inos,
                        ..Default::default()
                    }),
                    ..Extra::default()
                };
                self.emit_with(s, Op::Readdir, ino, 0, b"", 0, n, s.errno, extra);
            }
            (Kind::Openat, Place::ChunkTemp) if s.create => {
                let parent = rel.parent().map_or(0, |p| self.inodes.path(p).unwrap_or(0));
                let name = rel
                    .file_name()
                    .map_or(&[][..], |n| n.as_encoded_bytes())
                    .to_vec();
                self.emit(s, Op::Create, 0, parent, &name, 0, 0, s.errno);
            }
            (Kind::Openat, _) => {
                if let Some(p) = chunk_dir(&rel) {
                    self.listed.remove(&p); // a new listing starts at its first entry
                }
                let is_dir = s.directory
                    || rel == Path::new(CHUNK_DIR)
                    || rel.parent() == Some(Path::new(CHUNK_DIR));
                if !rel.as_os_str().is_empty() {
                    self.lookup(s, &rel, ino, s.errno);
                }
                if ok {
                    let op = if is_dir { Op::Opendir } else { Op::Open };
                    self.emit(s, op, ino, 0, b"", 0, 0, 0);
                }
            }
        }
    }
}

/// The store root of a log: `store` if given, else the directory above the first
/// `.chunks` in a path of it.
fn find_root(lines: &mut dyn Iterator<Item = Result<Line>>) -> Result<Option<PathBuf>> {
    for line in lines {
        let Some(s) = line?.call else { continue };
        for p in [
            s.path.as_deref(),
            s.dir.as_deref(),
            s.result_path.as_deref(),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(at) = p.find(&format!("/{CHUNK_DIR}")) {
                let end = at + 1 + CHUNK_DIR.len();
                if p.len() == end || p.as_bytes()[end] == b'/' {
                    return Ok(Some(PathBuf::from(&p[..at.max(1)])));
                }
            }
        }
    }
    Ok(None)
}

/// The store a log's calls are on: the directory above the first `.chunks` in its paths.
pub fn store_of(log: &Path, format: Format) -> Result<PathBuf> {
    find_root(&mut calls(log, format)?)?.with_context(|| {
        format!(
            "{}: no call on a datastore's .chunks in it: not a {} log of a GC? (--store \
             names the store)",
            log.display(),
            match format {
                Format::Strace => "strace",
                Format::Bpftrace => "gc-syscalls.bt",
            }
        )
    })
}

/// One line of a log, read.
struct Line {
    /// Its number, from 1.
    n: u64,
    /// The call it completes.
    call: Option<Syscall>,
    /// Events the recorder says it dropped here (bpftrace's `Lost N events`).
    lost: u64,
}

/// The longest line a log may have: strace prints a path whole (4,096 bytes, each byte up
/// to four when escaped) and a string argument cut at `-s`; a longer line is not a log's.
const MAX_LINE: usize = 1 << 20;

/// Reads the calls of `log` in `format`, line by line; a read error or a line longer than
/// [`MAX_LINE`] ends it with an error naming the log and the line.
fn calls(log: &Path, format: Format) -> Result<impl Iterator<Item = Result<Line>>> {
    // Without moving its atime: a file handed here by mistake may be a chunk.
    let (f, _) =
        crate::fsutil::open_noatime(log).with_context(|| format!("opening {}", log.display()))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, f);
    let mut strace = strace::Parser::default();
    let mut bpf = bpftrace::Parser::default();
    let mut n = 0u64;
    let mut raw = Vec::new();
    let mut failed = false;
    let log = log.to_path_buf();
    Ok(std::iter::from_fn(move || {
        if failed {
            return None;
        }
        raw.clear();
        n += 1;
        let read =
            std::io::Read::take(&mut reader, MAX_LINE as u64 + 1).read_until(b'\n', &mut raw);
        match read {
            Ok(0) => return None,
            Ok(_) if raw.len() > MAX_LINE => {
                failed = true;
                return Some(Err(anyhow::anyhow!(
                    "{}: line {n} is longer than {MAX_LINE} bytes: not a syscall log",
                    crate::fsutil::shown(&log)
                )));
            }
            Ok(_) => {}
            Err(e) => {
                failed = true;
                return Some(Err(anyhow::anyhow!(
                    "{}: reading line {n}: {e}",
                    crate::fsutil::shown(&log)
                )));
            }
        }
        if raw.last() == Some(&b'\n') {
            raw.pop();
        }
        let line = String::from_utf8_lossy(&raw);
        let (call, lost) = match format {
            Format::Strace => (strace.line(&line), 0),
            Format::Bpftrace => (bpf.line(&line), bpftrace::lost_events(&line).unwrap_or(0)),
        };
        Some(Ok(Line { n, call, lost }))
    }))
}

/// Imports `log` (of `format`) into a trace at `out`; the store is `store` (or found in the
/// log), its inodes from `inodes`.
pub fn import(
    log: &Path,
    format: Format,
    store: Option<&Path>,
    inodes: &mut dyn Inodes,
    out: &Path,
) -> Result<ImportReport> {
    let root = match store {
        Some(s) => std::path::absolute(s)?,
        None => store_of(log, format)?,
    };
    // The trace's start: the first call's time (since the epoch with -ttt or bpftrace's
    // wall clock; with -tt, the day of the log's last change).
    let mut first = None;
    for line in calls(log, format)? {
        if let Some(c) = line?.call {
            first = Some(c);
            break;
        }
    }
    let Some(first) = first else {
        if format == Format::Strace && untimed_calls(log) {
            bail!(
                "{}: its calls have no time stamps: record with strace -f -tt -T -y",
                log.display()
            );
        }
        bail!(
            "{}: no utimensat, fstatat, statx, getdents64, unlinkat or openat call in it",
            log.display()
        );
    };
    let start_epoch_ns = if first.epoch {
        first.time_ns
    } else {
        let mtime = std::fs::metadata(log)?
            .modified()?
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as u64;
        mtime - mtime % DAY_NS + first.time_ns
    };
    let mut meta = TraceMeta {
        store: root.display().to_string(),
        start_epoch_ns,
        ..Default::default()
    };
    meta.options
        .insert("imported".into(), log.display().to_string().into());
    meta.options
        .insert("format".into(), format!("{format:?}").to_lowercase().into());
    let (writer, sink) = TraceWriter::start(out, meta)
        .with_context(|| format!("creating the trace {}", out.display()))?;
    let mut im = Importer {
        root: root.clone(),
        inodes,
        sink,
        t0: None,
        day_ns: 0,
        last_ns: 0,
        listed: HashMap::new(),
        report: ImportReport {
            store: root.display().to_string(),
            ..Default::default()
        },
        on_chunk: false,
    };
    for line in calls(log, format)? {
        let line = line?;
        im.report.lines = line.n;
        im.report.lost_events += line.lost;
        match line.call {
            Some(s) => im.call(&s),
            None => im.report.other_lines += 1,
        }
    }
    let mut report = im.report;
    drop(im.sink);
    for (phase, call) in [("mark", "utimensat"), ("sweep", "getdents")] {
        if report.calls.get(call).is_some_and(|&n| n > 0) {
            report.phases_seen.push(phase.to_string());
        }
    }
    let stats = writer.finish()?;
    if report.unplaced > 0 {
        let _ = std::fs::remove_file(out);
        let how = match format {
            Format::Strace => {
                "the log was recorded without strace's -y, which prints each descriptor's \
                 path: record it again with strace -f -tt -T -y"
            }
            Format::Bpftrace => "the log does not give their directories",
        };
        bail!(
            "{}: {} calls name their directory by a bare descriptor, so they cannot be placed \
             in the store (a GC's sweep lists, stats and removes that way: the trace would \
             lack it); {how}. Nothing was written to {}",
            crate::fsutil::shown(log),
            report.unplaced,
            crate::fsutil::shown(out)
        );
    }
    if report.timed == 0 && report.records > 0 && format == Format::Strace {
        tracing::warn!(
            "{}: no call has a duration (strace's -T): the trace's latencies are all 0",
            crate::fsutil::shown(log)
        );
    }
    if stats.lost > 0 {
        bail!(
            "{}: {} records could not be written",
            out.display(),
            stats.lost
        );
    }
    Ok(report)
}
