//! The instrumentation under the overlay and the simulator: what happens to a request besides
//! its answer.
//!
//! Before a request is performed the fault rules decide about it ([`Instruments::admit`]: an
//! injected error replaces it, a delay holds its reply). After it, under the model's lock, it
//! takes its number in the trace and the model charges it; then its records are written (a
//! listing's entries or a second name first, then the request) and the time its reply is held
//! is known ([`Instruments::record`]). The overlay (a FUSE request) and the simulator (each
//! request a mount would receive for a store operation) both come through here, so a mount and
//! a simulation of the same store make their traces, model totals and injected faults with the
//! same code.
//!
//! The two differ only in their clock ([`Clock`]): a mount's records carry wall times; a
//! simulation's carry the model's, each request lasting what the model charged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::faults::{Decision, Faults, Request as FaultRequest};
use crate::model::{charges, Layout, Model, ModelOp};
use crate::trace::format::flags;
use crate::trace::{Extra, Op, RawRecord, TraceSink};

/// Which clock the records' times are on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The trace's monotonic clock (a mount): a request lasts what the backing call took.
    Wall,
    /// The model's clock (a simulation): a request starts where the model's clock stands and
    /// lasts what the model charged it. Fault rules' `after=` counts modelled time.
    Model,
}

/// What a request did, for its records and the model's charge.
#[derive(Clone, Copy, Default)]
pub struct Done<'a> {
    /// The errno it answered (0: success), injected or not.
    pub errno: i32,
    /// The backing inode it is about (0: none, e.g. a failed lookup).
    pub ino: u64,
    /// The directory of its name (0: no name).
    pub parent: u64,
    /// Its argument: offset, size, entries listed, new directory, time set (see the format).
    pub arg: u64,
    /// A read's or write's file offset.
    pub offset: u64,
    /// Record flags ([`crate::trace::format::flags`]); an injected error's flag is added here.
    pub flags: u8,
    /// Its name (lookup, create, unlink, ...), empty for none.
    pub name: &'a [u8],
    /// A listing's entries, a rename's or link's second name.
    pub extra: Extra<'a>,
}

/// What recording a request found: its modelled cost and how long its reply is held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Charge {
    /// What the model charged (0 without a model).
    pub modeled_ns: u64,
    /// The injected delay plus `time_scale` times the modelled cost.
    pub hold_ns: u64,
}

/// Where a request's records go: a trace, whole or a sample of its metadata blocks.
pub struct Trace {
    /// The writer's handle.
    pub sink: TraceSink,
    /// A request is kept when the hash of its block is below `cut` (`u64::MAX`: all).
    cut: u64,
    /// Which metadata block an inode is in (a sampled trace's unit).
    layout: Option<Layout>,
}

impl Trace {
    /// Every request.
    pub fn all(sink: TraceSink) -> Trace {
        Trace {
            sink,
            cut: u64::MAX,
            layout: None,
        }
    }

    /// The requests on a share `rate` in (0, 1] of the metadata blocks of `layout`, chosen
    /// by a hash of the block number (as SHARDS samples keys): everything that happens to a
    /// kept block is in it, with consecutive request numbers.
    pub fn sampled(sink: TraceSink, rate: f64, layout: Layout) -> Trace {
        let cut = if rate >= 1.0 {
            u64::MAX
        } else {
            (rate.max(0.0) * u64::MAX as f64) as u64
        };
        Trace {
            sink,
            cut,
            layout: Some(layout),
        }
    }

    /// Whether the requests about inode `ino` are kept.
    #[inline]
    pub fn keeps(&self, ino: u64) -> bool {
        match self.layout {
            Some(l) if self.cut != u64::MAX => {
                crate::rng::hash(&[0x5349_4d54, l.block(ino)]) < self.cut
            }
            _ => true,
        }
    }
}

/// Fault rules and the cost model, shared by every request of a mount or a simulation.
pub struct Instruments {
    /// The fault rules (none: no request is consulted).
    pub faults: Option<Faults>,
    model: Option<Mutex<Model>>,
    /// Replies wait `time_scale` times their modelled cost (0: account only).
    pub time_scale: f64,
    clock: Clock,
    /// Requests the backing store answered EMFILE or ENFILE (the daemon ran out of file
    /// descriptors); injected ones are not counted.
    fd_exhausted: AtomicU64,
    /// Requests whose handler panicked (answered EIO; the mount went on).
    panics: AtomicU64,
    /// A mount's live counters (a simulation has none).
    live: Option<std::sync::Arc<crate::live::Live>>,
}

impl Instruments {
    /// A mount's: wall times, replies held `time_scale` times their modelled cost.
    pub fn new(faults: Option<Faults>, model: Option<Model>, time_scale: f64) -> Instruments {
        Instruments {
            faults: faults.filter(|f| !f.is_empty()),
            model: model.map(Mutex::new),
            time_scale,
            clock: Clock::Wall,
            fd_exhausted: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            live: Some(std::sync::Arc::new(crate::live::Live::new())),
        }
    }

    /// A simulation's: the model's times, nothing held.
    pub fn simulated(faults: Option<Faults>, model: Model) -> Instruments {
        Instruments {
            clock: Clock::Model,
            live: None,
            ..Instruments::new(faults, Some(model), 0.0)
        }
    }

    /// Whether a reply can be held (an injected delay, or time scaled from the model).
    pub fn delays(&self) -> bool {
        self.faults.is_some() || (self.model.is_some() && self.time_scale > 0.0)
    }

    /// Whether there is a model to charge.
    pub fn has_model(&self) -> bool {
        self.model.is_some()
    }

    /// The model, locked.
    pub fn model(&self) -> Option<MutexGuard<'_, Model>> {
        self.model
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The model, when the caller holds these instruments alone (no lock taken).
    pub fn model_mut(&mut self) -> Option<&mut Model> {
        self.model
            .as_mut()
            .map(|m| m.get_mut().unwrap_or_else(|p| p.into_inner()))
    }

    /// Replaces the model (a simulation's next run starts cold).
    pub fn set_model(&mut self, model: Model) {
        self.model = Some(Mutex::new(model));
    }

    /// A mount's live counters.
    pub fn live(&self) -> Option<&std::sync::Arc<crate::live::Live>> {
        self.live.as_ref()
    }

    /// The time now on the clock of a request's arrival `t0`: the trace's, else the live
    /// counters'.
    #[inline]
    pub fn now_ns(&self, trace: Option<&Trace>) -> u64 {
        match (trace, &self.live) {
            (Some(t), _) => t.sink.now_ns(),
            (None, Some(l)) => l.now_ns(),
            (None, None) => 0,
        }
    }

    /// Requests the store answered EMFILE or ENFILE.
    pub fn fd_exhausted(&self) -> u64 {
        self.fd_exhausted.load(Ordering::Relaxed)
    }

    /// Counts a request whose handler panicked; returns how many have so far.
    pub fn count_panic(&self) -> u64 {
        self.panics.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Requests whose handler panicked.
    pub fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    /// True if a fault rule could select `op` (a request it cannot select skips the rest).
    #[inline]
    pub fn consults(&self, op: Op) -> bool {
        self.faults.as_ref().is_some_and(|f| f.selects(op))
    }

    /// Asks the fault rules about a request before it is performed. `node` is the backing
    /// inode the request is about, or its directory for a request with a `name` (whose inode
    /// is not known before it is performed); `path` resolves the store-relative path, only if
    /// a rule's glob needs it.
    #[inline]
    pub fn admit(
        &self,
        op: Op,
        node: u64,
        name: &[u8],
        set_atime: bool,
        set_mtime: bool,
        path: &mut dyn FnMut() -> Option<String>,
    ) -> Decision {
        let Some(f) = self.faults.as_ref().filter(|f| f.selects(op)) else {
            return Decision::default();
        };
        let (ino, parent) = if name.is_empty() {
            (node, 0)
        } else {
            (0, node)
        };
        let r = FaultRequest {
            op,
            ino,
            parent,
            name,
            set_atime,
            set_mtime,
        };
        match self.clock {
            Clock::Wall => f.decide(&r, path),
            Clock::Model => {
                let now = || Duration::from_nanos(self.model().map_or(0, |m| m.clock_ns()));
                f.decide_at(&r, &now, path)
            }
        }
    }

    /// Records a request: numbers it and charges the model under the model's lock, writes its
    /// records to `trace`, and says how long its reply is held. `pid` is its caller; `t0`,
    /// on the wall clock, when it arrived (unused on the model's clock).
    #[inline]
    pub fn record(
        &self,
        trace: Option<&Trace>,
        op: Op,
        pid: u32,
        t0: u64,
        d: &Done<'_>,
        dec: Decision,
    ) -> Charge {
        self.count_fd_exhaustion(d, dec);
        let keep = trace.filter(|t| t.keeps(subject(d)));
        let taken = match &self.model {
            Some(m) if charges(op) || self.clock == Clock::Model => {
                let mut m = m.lock().unwrap_or_else(|p| p.into_inner());
                take(Some(&mut m), self.clock, keep, op, t0, d)
            }
            _ => take(None, self.clock, keep, op, t0, d),
        };
        let charge = self.finish(keep, op, pid, d, dec, taken);
        if let Some(live) = &self.live {
            let real = self.now_ns(trace).saturating_sub(t0);
            live.record(op, d.errno, dec.errno != 0, real, taken.modeled_ns);
        }
        charge
    }

    /// [`Instruments::record`] for a caller that holds these instruments alone (a simulated
    /// store, under its own lock): the model is reached without locking it.
    #[inline]
    pub fn record_mut(
        &mut self,
        trace: Option<&Trace>,
        op: Op,
        pid: u32,
        t0: u64,
        d: &Done<'_>,
        dec: Decision,
    ) -> Charge {
        self.count_fd_exhaustion(d, dec);
        let keep = trace.filter(|t| t.keeps(subject(d)));
        let clock = self.clock;
        let taken = take(self.model_mut(), clock, keep, op, t0, d);
        self.finish(keep, op, pid, d, dec, taken)
    }

    /// A marker record (a GC phase's boundary, a user's text) at the clock's time now; returns
    /// its request number.
    pub fn marker(&self, trace: &Trace, pid: u32, text: &[u8]) -> u64 {
        let mut r = RawRecord::new(Op::Marker);
        r.start_ns = match self.clock {
            Clock::Wall => trace.sink.now_ns(),
            Clock::Model => self.model().map_or(0, |m| m.clock_ns()),
        };
        r.seq = trace.sink.next_seq();
        r.pid = pid;
        r.set_name(text);
        let seq = r.seq;
        trace.sink.record(r);
        seq
    }

    /// A request another process made and timed (the S3 recorder's), ending now: `r` is
    /// numbered, placed on the trace's clock (its start `r.duration_ns` before now, on a
    /// wall clock) and recorded; returns its request number.
    pub fn external(&self, trace: &Trace, pid: u32, mut r: RawRecord) -> u64 {
        r.start_ns = match self.clock {
            Clock::Wall => trace.sink.now_ns().saturating_sub(r.duration_ns),
            Clock::Model => self.model().map_or(0, |m| m.clock_ns()),
        };
        r.seq = trace.sink.next_seq();
        r.pid = pid;
        let seq = r.seq;
        trace.sink.record(r);
        seq
    }

    #[inline]
    fn count_fd_exhaustion(&self, d: &Done<'_>, dec: Decision) {
        if (d.errno == libc::EMFILE || d.errno == libc::ENFILE) && dec.errno == 0 {
            self.fd_exhausted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Writes the request's records (after the model's lock is released) and its hold time.
    #[inline]
    fn finish(
        &self,
        keep: Option<&Trace>,
        op: Op,
        pid: u32,
        d: &Done<'_>,
        dec: Decision,
        taken: Taken,
    ) -> Charge {
        if let Some(t) = keep {
            let mut r = RawRecord::new(op);
            r.seq = taken.seq;
            r.start_ns = taken.start_ns;
            r.duration_ns = match self.clock {
                Clock::Wall => t.sink.now_ns().saturating_sub(taken.start_ns),
                Clock::Model => taken.modeled_ns,
            };
            r.pid = pid;
            r.errno = d.errno;
            r.ino = d.ino;
            r.parent = d.parent;
            r.arg = d.arg;
            r.offset = d.offset;
            r.flags = d.flags;
            if dec.errno != 0 {
                r.flags |= flags::INJECTED_ERROR;
            }
            r.injected_ns = dec.delay_ns;
            r.modeled_ns = taken.modeled_ns;
            r.set_name(d.name);
            t.sink.record_request(r, d.extra);
        }
        Charge {
            modeled_ns: taken.modeled_ns,
            hold_ns: dec.delay_ns + (taken.modeled_ns as f64 * self.time_scale) as u64,
        }
    }
}

/// The inode a sampled trace decides a request by: its own, else its directory's.
#[inline]
fn subject(d: &Done<'_>) -> u64 {
    if d.ino != 0 {
        d.ino
    } else {
        d.parent
    }
}

/// A request's number, start and modelled cost.
#[derive(Clone, Copy)]
struct Taken {
    seq: u64,
    start_ns: u64,
    modeled_ns: u64,
}

/// Numbers a request (when it is kept) and charges the model, both under the model's lock
/// when there is a model: the trace's order is the order the model saw.
#[inline]
fn take(
    model: Option<&mut Model>,
    clock: Clock,
    keep: Option<&Trace>,
    op: Op,
    t0: u64,
    d: &Done<'_>,
) -> Taken {
    let seq = keep.map_or(0, |t| t.sink.next_seq());
    let Some(m) = model else {
        return Taken {
            seq,
            start_ns: t0,
            modeled_ns: 0,
        };
    };
    let start_ns = match clock {
        Clock::Wall => t0,
        Clock::Model => m.clock_ns(),
    };
    let mop = ModelOp {
        op,
        ino: d.ino,
        parent: d.parent,
        errno: d.errno,
    };
    let modeled_ns = m.charge_request(&mop, d.extra.listing.map(|l| l.inos));
    Taken {
        seq,
        start_ns,
        modeled_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelParams;
    use crate::trace::{ListingEntries, TraceReader, TraceWriter};

    fn model() -> Model {
        Model::new(ModelParams::preset("zfs-hdd").unwrap())
    }

    fn read(path: &std::path::Path) -> Vec<crate::trace::format::Record> {
        let mut r = TraceReader::open(path).unwrap();
        let mut out = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            out.push(rec);
        }
        out
    }

    #[test]
    fn the_model_clock_times_a_simulated_request_by_its_charge() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let (w, sink) = TraceWriter::start(&path, Default::default()).unwrap();
        let trace = Trace::all(sink);
        let mut inst = Instruments::simulated(None, model());
        let d = Done {
            ino: 12,
            parent: 11,
            name: b"c",
            ..Done::default()
        };
        let first = inst.record_mut(Some(&trace), Op::Lookup, 7, 999, &d, Decision::default());
        assert!(first.modeled_ns > 0, "a cold pool charges a lookup");
        assert_eq!(first.hold_ns, 0, "a simulation holds nothing");
        let second = inst.record(Some(&trace), Op::Getattr, 7, 999, &d, Decision::default());
        let clock = inst.model().unwrap().clock_ns();
        inst.marker(&trace, 7, b"end");
        drop(trace);
        w.finish().unwrap();
        let recs = read(&path);
        let times: Vec<_> = recs
            .iter()
            .map(|r| (r.seq, r.start_ns, r.duration_ns, r.modeled_ns))
            .collect();
        assert_eq!(
            times,
            [
                (0, 0, first.modeled_ns, first.modeled_ns),
                (1, first.modeled_ns, second.modeled_ns, second.modeled_ns),
                (2, clock, 0, 0),
            ]
        );
    }

    #[test]
    fn a_mount_holds_a_reply_for_its_delay_and_scaled_cost_and_flags_injected_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let (w, sink) = TraceWriter::start(&path, Default::default()).unwrap();
        let trace = Trace::all(sink);
        let inst = Instruments::new(None, Some(model()), 2.0);
        let d = Done {
            errno: libc::EIO,
            ino: 40,
            ..Done::default()
        };
        let dec = Decision {
            errno: libc::EIO,
            delay_ns: 1_000,
            rule: 1,
            ..Decision::default()
        };
        let c = inst.record(Some(&trace), Op::Getattr, 3, trace.sink.now_ns(), &d, dec);
        assert_eq!(c.hold_ns, 1_000 + 2 * c.modeled_ns);
        // Listing entries come before their request, with its number.
        let listing = Done {
            ino: 50,
            arg: 2,
            extra: Extra {
                listing: Some(ListingEntries {
                    inos: &[51, 52],
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Done::default()
        };
        let l = inst.record(
            Some(&trace),
            Op::Readdir,
            3,
            0,
            &listing,
            Decision::default(),
        );
        assert!(l.modeled_ns > 0);
        drop(trace);
        w.finish().unwrap();
        let recs = read(&path);
        let seen: Vec<_> = recs
            .iter()
            .map(|r| {
                (
                    r.op().unwrap(),
                    r.seq,
                    r.ino,
                    r.flags & flags::INJECTED_ERROR != 0,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (Op::Getattr, 0, 40, true),
                (Op::Dirent, 1, 51, false),
                (Op::Dirent, 1, 52, false),
                (Op::Readdir, 1, 50, false),
            ]
        );
        assert_eq!(recs[0].injected_ns, 1_000);
    }

    #[test]
    fn the_backing_stores_fd_exhaustion_is_counted_and_an_injected_one_is_not() {
        let inst = Instruments::new(None, None, 0.0);
        let d = Done {
            errno: libc::EMFILE,
            ..Done::default()
        };
        inst.record(None, Op::Open, 1, 0, &d, Decision::default());
        let injected = Decision {
            errno: libc::EMFILE,
            ..Decision::default()
        };
        inst.record(None, Op::Open, 1, 0, &d, injected);
        assert_eq!(inst.fd_exhausted(), 1);
    }

    #[test]
    fn a_fault_is_decided_by_the_request_whoever_asks() {
        let rules = || {
            Faults::load(
                &["lookup,setattr prob=0.5 delay=1ms".to_string()],
                &[] as &[&str],
                9,
            )
            .unwrap()
        };
        let mount = Instruments::new(Some(rules()), None, 0.0);
        let sim = Instruments::simulated(Some(rules()), model());
        let mut fired = 0;
        for ino in 0..200u64 {
            let name = ino.to_string();
            let a = mount.admit(Op::Lookup, 5, name.as_bytes(), false, false, &mut || None);
            let b = sim.admit(Op::Lookup, 5, name.as_bytes(), false, false, &mut || None);
            assert_eq!(a, b, "lookup {name}");
            let a = mount.admit(Op::Setattr, ino, b"", true, false, &mut || None);
            let b = sim.admit(Op::Setattr, ino, b"", true, false, &mut || None);
            assert_eq!(a, b, "setattr {ino}");
            fired += (a.delay_ns > 0) as u32;
        }
        assert!((50..150).contains(&fired), "{fired} of 200 at 50%");
        assert_eq!(
            mount.admit(Op::Getattr, 5, b"", false, false, &mut || None),
            Decision::default(),
            "a rule that does not select the operation"
        );
    }

    #[test]
    fn a_sampled_trace_keeps_or_drops_whole_metadata_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let (w, sink) = TraceWriter::start(&dir.path().join("t"), Default::default()).unwrap();
        let layout = ModelParams::preset("zfs-hdd").unwrap().layout;
        let t = Trace::sampled(sink, 0.3, layout);
        let kept = (0..100_000u64).filter(|&i| t.keeps(i)).count();
        assert!(
            (15_000..45_000).contains(&kept),
            "{kept} of 100,000 kept at 30%"
        );
        for i in 0..100_000u64 {
            let same_block = (i + 1..i + 64).find(|&j| layout.block(j) == layout.block(i));
            if let Some(j) = same_block {
                assert_eq!(t.keeps(i), t.keeps(j), "inodes {i} and {j} share a block");
            }
        }
        drop(t);
        w.finish().unwrap();
    }
}
