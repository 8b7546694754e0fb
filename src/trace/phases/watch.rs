//! The phases of a running mount's GC, for `top` and the mount's stats: [`Watch`] feeds an
//! [`Inference`] the requests as they are served (reordered by sequence number within a
//! window) and keeps the markers a chunkscope GC writes; [`GcView`] is what it shows.

use super::*;

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
    pub(super) next: u64,
    /// Requests handed to the inference, and the listing entries with them.
    pub(super) released: (u64, u64),
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
pub(super) const REORDER_SLOTS: u64 = 4096;

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
    pub fn push(&mut self, r: &crate::trace::RawRecord) {
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
