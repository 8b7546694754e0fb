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
            (None, Some(t)) if v.op() != Op::Marker as u16 => NameClass::of_text(t),
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

/// What a running mount's GC is doing, as [`Watch`] sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GcView {
    /// The phase the last phase marker opened (a chunkscope GC), `None` after its end.
    pub marked_phase: Option<u8>,
    /// Its strategy.
    pub marked_strategy: Option<String>,
    /// Phase markers seen.
    pub phase_markers: u64,
    /// Whether phases are inferred (only a traced mount infers them: the inference reads
    /// the records on the trace writer's thread).
    pub inferring: bool,
    /// The phase inferred from the requests, `None` between GCs.
    pub inferred_phase: Option<u8>,
    /// Whether the inferred phase 2 is still tentative (see [`Inference`]).
    pub tentative: bool,
    /// When the current phase (marked, else inferred) began, ns on the trace's clock.
    pub phase_start_ns: u64,
    /// Index files looked up, chunks touched, directories swept, unlinks of the inferred GC.
    pub progress: Progress,
}

impl GcView {
    /// The phase running now: a marked one, else an inferred one; and whether inferred.
    pub fn phase(&self) -> Option<(u8, bool)> {
        match (self.marked_phase, self.inferred_phase) {
            (Some(n), _) => Some((n, false)),
            (None, Some(n)) if self.phase_markers == 0 => Some((n, true)),
            _ => None,
        }
    }

    /// Takes in a marker's text (a phase's start or end).
    pub fn marker(&mut self, text: &str, now_ns: u64) {
        if let Marker::Phase {
            number,
            start,
            strategy,
        } = Marker::decode(text)
        {
            self.phase_markers += 1;
            self.phase_start_ns = now_ns;
            if start {
                self.marked_phase = Some(number);
                self.marked_strategy = Some(strategy);
            } else {
                self.marked_phase = None;
            }
        }
    }
}

/// The inference over a live stream of records (the trace writer's), which arrive a little
/// out of request order: a ring of slots by request number puts them back in order, with
/// each listing's entries, and an [`Inference`] takes them in. The slots and their entry
/// lists are reused: after the first laps, taking a record in allocates nothing.
pub struct Watch {
    inference: Inference,
    ring: Vec<Slot>,
    next: u64,
    /// Requests handed to the inference, and the listing entries with them.
    released: (u64, u64),
    phase: Option<(u8, bool)>,
    phase_start_ns: u64,
}

#[derive(Default)]
struct Slot {
    /// The request numbered `seq`, once its record came.
    req: Option<Request>,
    seq: u64,
    dirents: Vec<u64>,
}

/// Request numbers the ring holds: a record that comes this far ahead of a missing one
/// gives it up (its record was lost).
const REORDER_SLOTS: u64 = 4096;

impl Default for Watch {
    fn default() -> Self {
        Watch {
            inference: Inference::new(),
            ring: (0..REORDER_SLOTS).map(|_| Slot::default()).collect(),
            next: 0,
            released: (0, 0),
            phase: None,
            phase_start_ns: 0,
        }
    }
}

impl Watch {
    /// Takes in one record as the writer got it.
    pub fn push(&mut self, r: &super::RawRecord) {
        let op = r.op;
        if r.seq < self.next || matches!(op, Op::NewName | Op::OldName) {
            return;
        }
        // Too far ahead: give up the missing ones before it.
        while r.seq >= self.next + REORDER_SLOTS {
            self.release_next(true);
        }
        let slot = &mut self.ring[(r.seq % REORDER_SLOTS) as usize];
        if slot.seq != r.seq || (slot.req.is_none() && slot.dirents.is_empty()) {
            slot.seq = r.seq;
            slot.req = None;
            slot.dirents.clear();
        }
        if op == Op::Dirent {
            slot.dirents.push(r.ino);
            return;
        }
        slot.req = Some(Request {
            seq: r.seq,
            start_ns: r.start_ns,
            op: op as u16,
            pid: r.pid,
            ino: r.ino,
            parent: r.parent,
            flags: r.flags,
            errno: r.errno,
            name: if op == Op::Marker {
                NameClass::None
            } else {
                NameClass::of_raw(r.name())
            },
        });
        while self.release_next(false) {}
    }

    /// Hands the next request number's record to the inference, if it came (or, with
    /// `skip`, gives it up when it did not); false when there is nothing to release.
    fn release_next(&mut self, skip: bool) -> bool {
        let slot = &mut self.ring[(self.next % REORDER_SLOTS) as usize];
        let here = slot.seq == self.next && slot.req.is_some();
        if !here {
            if skip {
                self.next += 1;
            }
            return skip;
        }
        let req = slot.req.take().expect("checked");
        self.inference.push(&req, &slot.dirents);
        self.released.0 += 1;
        self.released.1 += slot.dirents.len() as u64;
        slot.dirents.clear();
        self.next += 1;
        let phase = self.inference.phase();
        if phase.map(|p| p.0) != self.phase.map(|p| p.0) {
            self.phase_start_ns = req.start_ns;
        }
        self.phase = phase;
        true
    }

    /// What it found so far, into `view` (its marked fields are left as they are).
    pub fn update(&self, view: &mut GcView) {
        view.inferring = true;
        view.inferred_phase = self.phase.map(|p| p.0);
        view.tentative = self.phase.is_some_and(|p| p.1);
        view.progress = self.inference.progress();
        if view.phase_markers == 0 {
            view.phase_start_ns = self.phase_start_ns;
        }
    }
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
            .then(|| v.text().cloned())
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
mod tests {
    use super::*;

    struct Stream {
        seq: u64,
        ns: u64,
        inf: Inference,
    }

    impl Stream {
        fn new(inf: Inference) -> Stream {
            Stream { seq: 0, ns: 0, inf }
        }

        fn req(&mut self, op: Op, pid: u32, ino: u64, parent: u64, name: NameClass) -> u64 {
            self.req_full(op, pid, ino, parent, name, 0, 0, &[])
        }

        #[allow(clippy::too_many_arguments)]
        fn req_full(
            &mut self,
            op: Op,
            pid: u32,
            ino: u64,
            parent: u64,
            name: NameClass,
            flags: u8,
            errno: i32,
            dirents: &[u64],
        ) -> u64 {
            let r = Request {
                seq: self.seq,
                start_ns: self.ns,
                op: op as u16,
                pid,
                ino,
                parent,
                flags,
                errno,
                name,
            };
            self.inf.push(&r, dirents);
            self.seq += 1;
            self.ns += 1_000_000;
            r.seq
        }

        fn touch(&mut self, pid: u32, ino: u64) -> u64 {
            self.req_full(
                Op::Setattr,
                pid,
                ino,
                0,
                NameClass::None,
                flags::SET_ATIME,
                0,
                &[],
            )
        }

        fn sleep(&mut self, ns: u64) {
            self.ns += ns;
        }

        fn edges(&self) -> Vec<(u64, u8, bool)> {
            self.inf
                .boundaries()
                .iter()
                .map(|b| {
                    let (n, s) = b.marker.phase_edge().expect("a phase edge");
                    (b.seq, n, s)
                })
                .collect()
        }
    }

    const GC: u32 = 100;
    const ROOT: u64 = 3;
    const CHUNKS: u64 = 4;
    const ZERO: u64 = 50;
    const DIR0: u64 = 10;
    const DIRF: u64 = 11;

    /// A store's skeleton and the atime check, as chunkscope gc does it on a new store.
    fn checked(s: &mut Stream) {
        s.req(Op::Lookup, GC, CHUNKS, ROOT, NameClass::ChunkStore);
        s.req(Op::Lookup, GC, 0, 7, NameClass::ZeroChunk);
        s.req(Op::Create, GC, ZERO, 7, NameClass::ZeroChunk);
        s.req(Op::Write, GC, ZERO, 0, NameClass::None);
        s.req(Op::Release, 0, ZERO, 0, NameClass::None);
        s.sleep(1_000_000_000);
        s.req(Op::Lookup, GC, ZERO, 7, NameClass::ZeroChunk);
        s.req(Op::Getattr, GC, ZERO, 0, NameClass::None);
        s.touch(GC, ZERO);
        s.req(Op::Getattr, GC, ZERO, 0, NameClass::None);
        // Something else on the mount meanwhile.
        s.req(Op::Getattr, 7777, ROOT, 0, NameClass::None);
    }

    fn sweep_of_two_dirs(s: &mut Stream) -> (u64, u64) {
        let start = s.req(Op::Lookup, GC, DIR0, CHUNKS, NameClass::ChunkDir(0));
        s.req(Op::Opendir, GC, DIR0, 0, NameClass::None);
        s.req_full(Op::Readdir, GC, DIR0, 0, NameClass::None, 0, 0, &[60, 61]);
        s.req(Op::Lookup, GC, 60, DIR0, NameClass::Chunk);
        s.req(Op::Getattr, GC, 60, 0, NameClass::None);
        s.req(Op::Unlink, GC, 60, DIR0, NameClass::Chunk);
        s.touch(4242, 70); // a backup's insert of an existing chunk, during the sweep
        s.req(Op::Releasedir, 0, DIR0, 0, NameClass::None);
        s.req(Op::Lookup, GC, DIRF, CHUNKS, NameClass::ChunkDir(0xffff));
        s.req(Op::Opendir, GC, DIRF, 0, NameClass::None);
        s.req_full(Op::Readdir, GC, DIRF, 0, NameClass::None, 0, 0, &[62]);
        s.req(Op::Lookup, GC, 62, DIRF, NameClass::Chunk);
        s.req(Op::Getattr, GC, 62, 0, NameClass::None);
        s.req(Op::Releasedir, 0, DIRF, 0, NameClass::None);
        let end = s.req(Op::Flush, GC, 5, 0, NameClass::None);
        (start, end)
    }

    #[test]
    fn a_checked_gc_gives_both_phases_at_their_first_requests() {
        let mut s = Stream::new(Inference::new());
        checked(&mut s);
        assert_eq!(s.inf.phase(), None, "the check is outside the phases");
        let walk = s.req(Op::Opendir, GC, ROOT, 0, NameClass::None);
        s.req(Op::Lookup, GC, 20, 21, NameClass::Index);
        // A touch of a chunk in directory 0000: the lookup of 0000 is not the sweep.
        s.req(Op::Lookup, GC, DIR0, CHUNKS, NameClass::ChunkDir(0));
        assert_eq!(s.inf.phase(), Some((2, true)), "tentative");
        s.req(Op::Lookup, GC, 60, DIR0, NameClass::Chunk);
        assert_eq!(s.inf.phase(), Some((1, false)), "reverted");
        s.touch(GC, 60);
        let (sweep, end) = sweep_of_two_dirs(&mut s);
        assert_eq!(
            s.edges(),
            vec![
                (walk, 1, true),
                (sweep, 1, false),
                (sweep, 2, true),
                (end, 2, false)
            ]
        );
        assert_eq!(s.inf.phase(), None);
        let p = s.inf.progress();
        assert_eq!((p.gcs, p.indexes, p.touches), (1, 1, 1));
        assert_eq!((p.dirs_swept, p.unlinks), (0x10000, 1));
    }

    #[test]
    fn listings_between_touches_do_not_end_phase_1() {
        // Inode order: the whole batch's directories are read, then the touches come.
        let mut s = Stream::new(Inference::new());
        checked(&mut s);
        s.req(Op::Lookup, GC, 20, 21, NameClass::Index);
        s.req(Op::Opendir, GC, DIR0, 0, NameClass::None); // unknown yet: not a chunk dir
        s.req(Op::Lookup, GC, DIR0, CHUNKS, NameClass::ChunkDir(0));
        s.req(Op::Opendir, GC, DIR0, 0, NameClass::None);
        s.req_full(Op::Readdir, GC, DIR0, 0, NameClass::None, 0, 0, &[60]);
        s.req(Op::Lookup, GC, DIRF, CHUNKS, NameClass::ChunkDir(0xffff));
        s.req(Op::Opendir, GC, DIRF, 0, NameClass::None);
        s.req_full(Op::Readdir, GC, DIRF, 0, NameClass::None, 0, 0, &[62]);
        // A backup's request here does not end the tentative sweep.
        s.req(Op::Getattr, 4242, 99, 0, NameClass::None);
        s.req(Op::Lookup, GC, 62, DIRF, NameClass::Chunk);
        s.touch(GC, 62);
        assert_eq!(s.inf.phase(), Some((1, false)));
        assert_eq!(s.edges().len(), 1, "{:?}", s.edges());
        let (sweep, end) = sweep_of_two_dirs(&mut s);
        assert_eq!(
            &s.edges()[1..],
            &[(sweep, 1, false), (sweep, 2, true), (end, 2, false)]
        );
    }

    #[test]
    fn a_zero_chunk_insert_by_a_backup_is_not_a_check() {
        let mut s = Stream::new(Inference::new());
        s.req(Op::Lookup, 300, CHUNKS, ROOT, NameClass::ChunkStore);
        s.req(Op::Lookup, 300, ZERO, 7, NameClass::ZeroChunk);
        s.touch(300, ZERO); // an insert of an existing chunk touches it, without sleeping
        s.req(Op::Lookup, 300, 20, 21, NameClass::Other);
        s.sleep(2_000_000_000);
        s.touch(300, ZERO);
        s.req(Op::Lookup, 300, 20, 21, NameClass::Index);
        s.touch(300, 60);
        assert_eq!(s.edges(), vec![]);
        assert_eq!(s.inf.phase(), None);
    }

    #[test]
    fn prefetch_helpers_start_phase_1_and_never_the_sweep() {
        let mut s = Stream::new(Inference::new());
        checked(&mut s);
        let pass = s.req(Op::Lookup, GC + 1, DIR0, CHUNKS, NameClass::ChunkDir(0)); // a helper
        s.req(Op::Opendir, GC + 1, DIR0, 0, NameClass::None);
        s.req_full(
            Op::Readdir,
            GC + 1,
            DIR0,
            0,
            NameClass::None,
            0,
            0,
            &[60, 61],
        );
        s.req(Op::Lookup, GC, 20, 21, NameClass::Index);
        s.req(Op::Lookup, GC, 60, DIR0, NameClass::Chunk);
        s.touch(GC, 60);
        let (sweep, end) = sweep_of_two_dirs(&mut s);
        assert_eq!(
            s.edges(),
            vec![
                (pass, 1, true),
                (sweep, 1, false),
                (sweep, 2, true),
                (end, 2, false)
            ]
        );
    }

    #[test]
    fn without_a_check_phase_1_starts_at_the_first_index() {
        let mut s = Stream::new(Inference::without_check());
        s.req(Op::Lookup, GC, CHUNKS, ROOT, NameClass::ChunkStore);
        s.req(Op::Opendir, GC, ROOT, 0, NameClass::None);
        let index = s.req(Op::Lookup, GC, 20, 21, NameClass::Index);
        s.touch(GC, 60);
        let (sweep, end) = sweep_of_two_dirs(&mut s);
        assert_eq!(
            s.edges(),
            vec![
                (index, 1, true),
                (sweep, 1, false),
                (sweep, 2, true),
                (end, 2, false)
            ]
        );
    }

    #[test]
    fn a_missing_last_directory_still_ends_the_sweep() {
        let mut s = Stream::new(Inference::new());
        checked(&mut s);
        s.req(Op::Lookup, GC, 20, 21, NameClass::Index);
        let sweep = s.req(Op::Lookup, GC, DIR0, CHUNKS, NameClass::ChunkDir(0));
        s.req(Op::Opendir, GC, DIR0, 0, NameClass::None);
        s.req_full(Op::Readdir, GC, DIR0, 0, NameClass::None, 0, 0, &[]);
        s.req_full(
            Op::Lookup,
            GC,
            0,
            CHUNKS,
            NameClass::ChunkDir(0xffff),
            0,
            2,
            &[],
        );
        let end = s.req(Op::Lookup, GC, 8, ROOT, NameClass::Other);
        assert_eq!(
            &s.edges()[1..],
            &[(sweep, 1, false), (sweep, 2, true), (end, 2, false)]
        );
    }

    #[test]
    fn the_watch_puts_records_back_in_order_and_gives_up_lost_ones() {
        let rec = |seq: u64, op: Op| {
            let mut r = super::super::RawRecord::new(op);
            r.seq = seq;
            r.pid = 7;
            r
        };
        let mut w = Watch::default();
        // 0, 2, 1 (with a listing's two entries before it), then 3; 4 never comes.
        w.push(&rec(0, Op::Lookup));
        w.push(&rec(2, Op::Getattr));
        assert_eq!(w.released, (1, 0), "2 waits for 1");
        w.push(&rec(1, Op::Dirent));
        w.push(&rec(1, Op::Dirent));
        w.push(&rec(1, Op::Readdir));
        w.push(&rec(3, Op::Lookup));
        assert_eq!(w.released, (4, 2));
        w.push(&rec(5, Op::Lookup));
        assert_eq!(w.released.0, 4, "5 waits for 4");
        w.push(&rec(5 + REORDER_SLOTS, Op::Lookup));
        assert_eq!(w.released.0, 5, "4 is given up, 5 goes through");
        assert_eq!(w.next, 6);
        for seq in 6..5 + REORDER_SLOTS {
            w.push(&rec(seq, Op::Getattr));
        }
        assert_eq!(w.released.0, REORDER_SLOTS + 5, "the ring's lap goes on");
    }

    #[test]
    fn names_are_classed() {
        assert_eq!(NameClass::of_text(".chunks"), NameClass::ChunkStore);
        assert_eq!(NameClass::of_text("00ff"), NameClass::ChunkDir(0xff));
        assert_eq!(NameClass::of_text("00FF"), NameClass::Other);
        assert_eq!(NameClass::of_text("drive-scsi0.img.fidx"), NameClass::Index);
        assert_eq!(
            NameClass::of_text(&format!("{ZERO_CHUNK_HEX}.tmp_csgc64")),
            NameClass::ZeroChunk
        );
        assert_eq!(NameClass::of_digest(&zero_digest()), NameClass::ZeroChunk);
        assert_eq!(NameClass::of_digest(&[1; 32]), NameClass::Chunk);
        assert_eq!(
            NameClass::of_raw(ZERO_CHUNK_HEX.as_bytes()),
            NameClass::ZeroChunk
        );
        assert_eq!(NameClass::of_raw(&[b'a'; 64]), NameClass::Chunk);
        assert_eq!(NameClass::of_raw(b"0000"), NameClass::ChunkDir(0));
        assert_eq!(NameClass::of_raw(b""), NameClass::None);
        assert_eq!(NameClass::of_raw(&[0xff, 0xfe]), NameClass::Other);
    }
}
