//! GC phases inferred from the requests of a trace without markers.
//!
//! `chunkscope gc` on a mount marks its phases; a real PBS does not, and its whole GC would
//! land in one section. [`Inference`] reads the request stream in request order and finds
//! the phases from what PBS's GC does (`pbs-format.md` 3.2-3.4), one request at a time, so
//! the same code serves a finished trace ([`infer_file`]) and a running mount (`top`):
//!
//! * **The atime safety check** opens a GC: a request on the all-zero chunk (its digest, its
//!   temporary file, its inode), then, at least half a second later (the check sleeps 1 s),
//!   a touch of it by the same thread. A backup that inserts the zero chunk does not sleep
//!   and goes on with other files: that is not a check.
//! * **Phase 1** starts at that thread's first request after the check that is not on the
//!   zero chunk, or at a chunk directory's listing by another thread (the prefetch pass's
//!   helpers). Its walkers are the threads that look up index files or touch chunks.
//! * **Phase 2** starts when a walker looks up or opens chunk directory `0000`, the sweep's
//!   first. Batched and inode-order strategies read chunk directories in phase 1 too, so the
//!   sweep stays tentative until that thread unlinks or stats a listed entry; a touch, or a
//!   lookup of a chunk in a directory the sweep has not listed, before that reverts it (the
//!   boundaries are taken back).
//! * **Phase 2 ends** at the sweeping thread's first request outside directory `ffff` (the
//!   sweep's last) once it got there.
//!
//! Without an atime check anywhere in the trace (`gc-atime-safety-check=false`), phase 1
//! starts at the first index lookup, touch or chunk-directory listing instead: any reader of
//! an index before the GC (a restore, a verify) would start it early. Requests of the kernel
//! itself (pid 0: releases, forgets) never move a boundary; threads other than the GC's
//! (backups running during the GC) do not either, except the prefetch helpers as said.
//! A sweep-only run (`chunkscope gc --phase sweep`) reads every index before it sweeps: that
//! reading is inferred as phase 1.

use std::path::Path;

use anyhow::Result;
use hashbrown::{HashMap, HashSet};

use super::format::flags;
use super::ordered::{FromView, Ordered};
use super::{Marker, Op, RecordView, TraceReader};

mod watch;

pub use watch::{GcView, Watch};

/// The all-zero 4 MiB chunk's digest (SHA-256 of its data), the atime check's chunk.
pub const ZERO_CHUNK_HEX: &str = "bb9f8df61474d25e71fa00722318cd387396ca1736605e1248821cc0de3d3af8";

/// How long the atime check waits between inserting the zero chunk and touching it, at
/// least (PBS sleeps 1 s); a zero-chunk touch sooner than this after the first request on
/// it is an insert, not the check.
const CHECK_SLEEP_NS: u64 = 500_000_000;

/// The last chunk directory the sweep lists (`ffff`).
const LAST_CHUNK_DIR: u16 = 0xffff;

/// Entries the tentative sweep remembers (for its confirmation), at most.
const MAX_REMEMBERED: usize = 1 << 20;

/// What a request's name is to the inference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NameClass {
    /// No name.
    #[default]
    None,
    /// The zero chunk: its digest, or a name beginning with its hex (its temporary file).
    ZeroChunk,
    /// Another chunk's digest.
    Chunk,
    /// `.chunks`.
    ChunkStore,
    /// Four lowercase hex digits: a chunk directory's name, with its number.
    ChunkDir(u16),
    /// An index file (`.fidx`, `.didx`).
    Index,
    /// Anything else.
    Other,
}

impl NameClass {
    /// The class of a chunk digest.
    pub fn of_digest(d: &[u8; 32]) -> NameClass {
        if *d == zero_digest() {
            NameClass::ZeroChunk
        } else {
            NameClass::Chunk
        }
    }

    /// The class of a name as a request gave it (a digest as its 64 lowercase hex digits).
    pub fn of_raw(name: &[u8]) -> NameClass {
        if name.is_empty() {
            NameClass::None
        } else if name.len() == 64 && name.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            if name == ZERO_CHUNK_HEX.as_bytes() {
                NameClass::ZeroChunk
            } else {
                NameClass::Chunk
            }
        } else {
            std::str::from_utf8(name).map_or(NameClass::Other, NameClass::of_text)
        }
    }

    /// The class of any other name.
    pub fn of_text(t: &str) -> NameClass {
        let b = t.as_bytes();
        if t == ".chunks" {
            NameClass::ChunkStore
        } else if b.len() == 4 && b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            NameClass::ChunkDir(u16::from_str_radix(t, 16).expect("four hex digits"))
        } else if t.ends_with(".fidx") || t.ends_with(".didx") {
            NameClass::Index
        } else if t.starts_with(ZERO_CHUNK_HEX) {
            NameClass::ZeroChunk
        } else {
            NameClass::Other
        }
    }
}

fn zero_digest() -> [u8; 32] {
    static ZERO: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    *ZERO.get_or_init(|| {
        hex::decode(ZERO_CHUNK_HEX)
            .expect("hex")
            .try_into()
            .expect("32 bytes")
    })
}

/// What the inference reads of a record.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request {
    /// Request number.
    pub seq: u64,
    /// Start, ns after the trace's start.
    pub start_ns: u64,
    /// Operation number (a marker's too).
    pub op: u16,
    /// The requesting thread (0: the kernel itself).
    pub pid: u32,
    /// Backing inode.
    pub ino: u64,
    /// Backing inode of the parent directory.
    pub parent: u64,
    /// The record's flags.
    pub flags: u8,
    /// 0 on success, else the errno.
    pub errno: i32,
    /// What the name is.
    pub name: NameClass,
}

impl FromView for Request {
    #[inline]
    fn from_view(v: &RecordView<'_>) -> Request {
        let name = match (v.digest(), v.text()) {
            (Some(d), _) => NameClass::of_digest(d),
            (None, Some(t)) if v.op() != Op::Marker as u16 => {
                t.as_str().map_or(NameClass::Other, NameClass::of_text)
            }
            _ => NameClass::None,
        };
        Request {
            seq: v.seq(),
            start_ns: v.start_ns(),
            op: v.op(),
            pid: v.pid(),
            ino: v.ino(),
            parent: v.parent(),
            flags: v.flags(),
            errno: v.errno(),
            name,
        }
    }
}

/// An inferred boundary: `marker` goes before the record numbered `seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// The first request of the new section.
    pub seq: u64,
    /// What starts or ends there ([`Marker::Inferred`]).
    pub marker: Marker,
}

/// How far the inferred GC has come.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Progress {
    /// GCs begun (atime checks passed, or phase 1 starts).
    pub gcs: u64,
    /// Index files looked up in phase 1.
    pub indexes: u64,
    /// Chunks touched in phase 1 (successful atime setattrs).
    pub touches: u64,
    /// Chunk directories the sweep has got to (the highest listed, plus one).
    pub dirs_swept: u32,
    /// Chunks the sweep removed.
    pub unlinks: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// No GC running.
    Idle,
    /// A request on the zero chunk by `pid` at `since`: maybe the atime check.
    Check {
        pid: u32,
        since: u64,
        passed: bool,
    },
    Mark,
    Sweep,
}

/// The phases of the GCs in a request stream, inferred as it goes (see the module's doc).
pub struct Inference {
    /// Start phase 1 without an atime check (at the first index, touch or chunk listing).
    without_check: bool,
    state: State,
    chunks_ino: u64,
    zero_ino: u64,
    /// Chunk directories by inode: their number.
    dirs: HashMap<u64, u16>,
    walkers: Vec<u32>,
    sweeper: u32,
    /// Where the tentative sweep's boundaries begin in `boundaries`.
    tentative: Option<usize>,
    /// The directories and entries the tentative sweep listed.
    listed: HashSet<u64>,
    entries: HashSet<u64>,
    /// Directory `ffff` once the sweep got there (its inode, 0 if it does not exist), and
    /// the entries it listed there.
    last_dir: Option<u64>,
    last_entries: HashSet<u64>,
    boundaries: Vec<Boundary>,
    mark_progress: Progress,
    progress: Progress,
}

impl Inference {
    /// An inference that starts a GC at its atime check only.
    pub fn new() -> Inference {
        Inference::with_check(true)
    }

    /// An inference for a trace without an atime check: phase 1 starts at the first index
    /// lookup, touch or chunk-directory listing.
    pub fn without_check() -> Inference {
        Inference::with_check(false)
    }

    fn with_check(check: bool) -> Inference {
        Inference {
            without_check: !check,
            state: State::Idle,
            chunks_ino: 0,
            zero_ino: 0,
            dirs: HashMap::new(),
            walkers: Vec::new(),
            sweeper: 0,
            tentative: None,
            listed: HashSet::new(),
            entries: HashSet::new(),
            last_dir: None,
            last_entries: HashSet::new(),
            boundaries: Vec::new(),
            mark_progress: Progress::default(),
            progress: Progress::default(),
        }
    }

    /// The boundaries inferred so far, in order (a tentative sweep's included).
    pub fn boundaries(&self) -> &[Boundary] {
        &self.boundaries
    }

    /// The phase running now (1 or 2) and whether it is still tentative (a sweep not yet
    /// confirmed), or `None` between GCs.
    pub fn phase(&self) -> Option<(u8, bool)> {
        match self.state {
            State::Idle | State::Check { .. } => None,
            State::Mark => Some((1, false)),
            State::Sweep => Some((2, self.tentative.is_some())),
        }
    }

    /// How far the GC has come.
    pub fn progress(&self) -> Progress {
        self.progress
    }

    /// Takes in the next request, in request order, with a listing's entries.
    pub fn push(&mut self, r: &Request, dirents: &[u64]) {
        let Some(op) = Op::from_u16(r.op) else {
            return;
        };
        if op == Op::Marker {
            return;
        }
        self.learn(r, op);
        if r.pid == 0 {
            return; // the kernel's own (release, forget): after the fact, no signal
        }
        match self.state {
            State::Idle => self.idle(r, op),
            State::Check { pid, since, passed } => self.check(r, op, pid, since, passed),
            State::Mark => self.mark(r, op),
            State::Sweep => self.sweep(r, op, dirents),
        }
    }

    fn learn(&mut self, r: &Request, op: Op) {
        if r.errno != 0 || r.ino == 0 {
            return;
        }
        match r.name {
            NameClass::ChunkStore if op == Op::Lookup => self.chunks_ino = r.ino,
            NameClass::ChunkDir(_) => {
                if let Some(n) = self.chunk_dir_lookup(r, op) {
                    self.dirs.insert(r.ino, n);
                }
            }
            NameClass::ZeroChunk if matches!(op, Op::Lookup | Op::Create | Op::Mknod) => {
                self.zero_ino = r.ino
            }
            _ => {}
        }
    }

    fn is_zero(&self, r: &Request) -> bool {
        r.name == NameClass::ZeroChunk || (self.zero_ino != 0 && r.ino == self.zero_ino)
    }

    /// The chunk directory `r` looks up by name in `.chunks`, if it does.
    fn chunk_dir_lookup(&self, r: &Request, op: Op) -> Option<u16> {
        match r.name {
            NameClass::ChunkDir(n)
                if op == Op::Lookup && self.chunks_ino != 0 && r.parent == self.chunks_ino =>
            {
                Some(n)
            }
            _ => None,
        }
    }

    fn chunk_dir_listing(&self, r: &Request, op: Op) -> Option<u16> {
        matches!(op, Op::Opendir | Op::Readdir | Op::Readdirplus)
            .then(|| self.dirs.get(&r.ino).copied())
            .flatten()
    }

    fn idle(&mut self, r: &Request, op: Op) {
        if self.without_check {
            let index = op == Op::Lookup && r.name == NameClass::Index;
            if index
                || (touch(r, op) && !self.is_zero(r))
                || self.chunk_dir_listing(r, op).is_some()
            {
                self.start_mark(r, op);
            }
        } else if self.is_zero(r) {
            self.state = State::Check {
                pid: r.pid,
                since: r.start_ns,
                passed: false,
            };
        }
    }

    fn check(&mut self, r: &Request, op: Op, pid: u32, since: u64, passed: bool) {
        if r.pid != pid {
            let chunk_dir = self.chunk_dir_lookup(r, op).is_some();
            if passed && (chunk_dir || self.chunk_dir_listing(r, op).is_some()) {
                self.start_mark(r, op); // the prefetch pass's helpers
            }
            return;
        }
        if self.is_zero(r) {
            if touch(r, op) && r.start_ns >= since.saturating_add(CHECK_SLEEP_NS) {
                self.state = State::Check {
                    pid,
                    since,
                    passed: true,
                };
            }
        } else if passed {
            self.start_mark(r, op);
        } else {
            // That thread does other things: it was inserting the zero chunk, not checking.
            self.state = State::Idle;
            self.idle(r, op);
        }
    }

    fn start_mark(&mut self, r: &Request, op: Op) {
        self.boundaries.push(Boundary {
            seq: r.seq,
            marker: Marker::Inferred {
                number: 1,
                start: true,
            },
        });
        self.state = State::Mark;
        self.walkers.clear();
        self.progress = Progress {
            gcs: self.progress.gcs + 1,
            ..Progress::default()
        };
        self.mark(r, op);
    }

    fn mark(&mut self, r: &Request, op: Op) {
        let index = op == Op::Lookup && r.name == NameClass::Index;
        let touched = touch(r, op) && !self.is_zero(r);
        if index || touched {
            if !self.walkers.contains(&r.pid) && self.walkers.len() < 64 {
                self.walkers.push(r.pid);
            }
            if r.errno == 0 {
                self.progress.indexes += index as u64;
                self.progress.touches += touched as u64;
            }
            return;
        }
        if !self.walkers.contains(&r.pid) {
            return;
        }
        let first_dir = self.chunk_dir_lookup(r, op) == Some(0)
            || (op == Op::Opendir && self.dirs.get(&r.ino) == Some(&0));
        if first_dir {
            self.start_sweep(r, op);
        }
    }

    fn start_sweep(&mut self, r: &Request, op: Op) {
        self.tentative = Some(self.boundaries.len());
        for (number, start) in [(1, false), (2, true)] {
            self.boundaries.push(Boundary {
                seq: r.seq,
                marker: Marker::Inferred { number, start },
            });
        }
        self.state = State::Sweep;
        self.sweeper = r.pid;
        self.listed.clear();
        self.entries.clear();
        self.last_dir = None;
        self.last_entries.clear();
        self.mark_progress = self.progress;
        self.sweep(r, op, &[]);
    }

    fn revert(&mut self, r: &Request, op: Op) {
        let at = self.tentative.take().expect("a tentative sweep");
        self.boundaries.truncate(at);
        self.progress = self.mark_progress;
        self.state = State::Mark;
        self.mark(r, op);
    }

    fn sweep(&mut self, r: &Request, op: Op, dirents: &[u64]) {
        if r.pid != self.sweeper {
            return;
        }
        if self.tentative.is_some() {
            let unlisted_chunk = op == Op::Lookup
                && matches!(r.name, NameClass::Chunk | NameClass::ZeroChunk)
                && !self.listed.contains(&r.parent);
            if touch(r, op) || unlisted_chunk {
                return self.revert(r, op);
            }
        }
        let last_dir_name = self.chunk_dir_lookup(r, op) == Some(LAST_CHUNK_DIR);
        if let Some(d) = self.last_dir {
            let within = (d != 0 && (r.ino == d || r.parent == d))
                || self.last_entries.contains(&r.ino)
                || last_dir_name;
            if !within {
                self.boundaries.push(Boundary {
                    seq: r.seq,
                    marker: Marker::Inferred {
                        number: 2,
                        start: false,
                    },
                });
                self.tentative = None;
                self.state = State::Idle;
                return self.idle(r, op);
            }
        }
        if self.tentative.is_some()
            && (op == Op::Unlink || (op == Op::Getattr && self.entries.contains(&r.ino)))
        {
            self.tentative = None;
            self.listed = HashSet::new();
            self.entries = HashSet::new();
        }
        if op == Op::Unlink && r.errno == 0 {
            self.progress.unlinks += 1;
        }
        if last_dir_name {
            self.last_dir = Some(if r.errno == 0 { r.ino } else { 0 });
        }
        if let Some(n) = self.chunk_dir_listing(r, op) {
            self.progress.dirs_swept = self.progress.dirs_swept.max(n as u32 + 1);
            if self.tentative.is_some() {
                self.listed.insert(r.ino);
                if self.entries.len() < MAX_REMEMBERED {
                    self.entries.extend(dirents.iter().copied());
                }
            }
            if n == LAST_CHUNK_DIR {
                self.last_dir = Some(r.ino);
                self.last_entries.extend(dirents.iter().copied());
            }
        }
    }
}

impl Default for Inference {
    fn default() -> Self {
        Inference::new()
    }
}

fn touch(r: &Request, op: Op) -> bool {
    op == Op::Setattr && r.flags & flags::SET_ATIME != 0
}

/// A trace's phases as its markers give them and as its requests give them.
#[derive(Clone, Debug, Default)]
pub struct Phases {
    /// The phase edges its markers give (other markers left out), at each marker's number.
    pub marked: Vec<Boundary>,
    /// The boundaries inferred from its requests, as if it had no markers.
    pub inferred: Vec<Boundary>,
    /// Whether the inference found an atime check (else phase 1 starts at the first index,
    /// touch or chunk listing).
    pub checked: bool,
}

struct Item {
    req: Request,
    marker: Option<std::sync::Arc<str>>,
}

impl FromView for Item {
    #[inline]
    fn from_view(v: &RecordView<'_>) -> Item {
        let req = Request::from_view(v);
        let marker = (req.op == Op::Marker as u16)
            .then(|| v.text().map(|t| std::sync::Arc::from(&*t.shown())))
            .flatten();
        Item { req, marker }
    }
}

/// Reads the trace at `path` once and infers its phases; with `stop_at_marker`, stops at its
/// first phase marker (the markers say where its phases are: no inference is needed).
pub fn infer_trace(path: &Path, stop_at_marker: bool) -> Result<Phases> {
    let mut records = Ordered::<Item>::new(TraceReader::open(path)?);
    let mut checked = Inference::new();
    let mut unchecked = Inference::without_check();
    let mut marked = Vec::new();
    while let Some((item, dirents)) = records.next_record()? {
        if let Some(text) = &item.marker {
            let marker = Marker::decode(text);
            if marker.phase_edge().is_some() {
                marked.push(Boundary {
                    seq: item.req.seq,
                    marker,
                });
                if stop_at_marker {
                    break;
                }
            }
        }
        checked.push(&item.req, &dirents);
        unchecked.push(&item.req, &dirents);
    }
    let is_checked = !checked.boundaries().is_empty();
    let found = if is_checked { checked } else { unchecked };
    Ok(Phases {
        marked,
        inferred: found.boundaries,
        checked: is_checked,
    })
}

/// The phases of the trace at `path` inferred from its requests, or `None` when it has
/// phase markers (they say where its phases are). Reads it once, up to its first one.
pub fn infer_file(path: &Path) -> Result<Option<Vec<Boundary>>> {
    let p = infer_trace(path, true)?;
    Ok(p.marked.is_empty().then_some(p.inferred))
}

#[cfg(test)]
mod tests;
