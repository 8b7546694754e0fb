//! The simulator's requests: the FUSE requests a mount would receive for each store
//! operation (the table in [`super::store`]'s documentation), charged to the model in that
//! order, counted by kind, and written as trace records when a trace is kept.

use crate::model::{Layout, ModelOp};
use crate::trace::{Extra, ListingEntries, Op, RawRecord, TraceSink};

use super::store::State;

/// Requests emitted, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RequestCounts {
    pub lookup: u64,
    pub getattr: u64,
    pub setattr: u64,
    pub opendir: u64,
    pub readdir: u64,
    pub open: u64,
    pub unlink: u64,
    pub create: u64,
}

/// The simulated requests as a trace (`simulate --trace`), in the format a mount writes, so
/// `analyze` reads simulated runs too. A sampled trace keeps the requests on a fraction of the
/// metadata blocks, chosen by a hash of the block number (as SHARDS samples keys): everything
/// that happens to a kept block is in it, with consecutive request numbers.
pub struct SimTrace {
    pub(super) sink: TraceSink,
    /// A request is kept when the hash of its block is below this (`u64::MAX`: all).
    pub(super) cut: u64,
    /// The model's layout: which metadata block an inode is in.
    pub(super) layout: Layout,
    pub(super) seq: u64,
}

impl SimTrace {
    /// `rate` in (0, 1]: the share of the metadata blocks of `layout` kept.
    pub fn new(sink: TraceSink, rate: f64, layout: Layout) -> SimTrace {
        let cut = if rate >= 1.0 {
            u64::MAX
        } else {
            (rate.max(0.0) * u64::MAX as f64) as u64
        };
        SimTrace {
            sink,
            cut,
            layout,
            seq: 0,
        }
    }

    pub(super) fn keep(&self, ino: u64) -> bool {
        self.cut == u64::MAX || crate::rng::hash(&[0x5349_4d54, self.layout.block(ino)]) < self.cut
    }

    pub(super) fn next(&mut self, op: Op, start: u64) -> RawRecord {
        let mut r = RawRecord::new(op);
        r.seq = self.seq;
        r.start_ns = start;
        r.pid = std::process::id();
        r
    }
}

impl State {
    /// No requests yet, no chunks (the build adds them), no trace.
    pub(super) fn new(model: crate::model::Model) -> State {
        State {
            model,
            chunks: Vec::new(),
            counts: RequestCounts::default(),
            listing: Vec::new(),
            trace: None,
            first_index_ns: None,
            lanes: Vec::new(),
        }
    }

    /// Adds a request's modelled time to the calling thread's lane (before the first index
    /// file only: the prefetch pass is the one part of a GC that runs on several threads).
    #[inline]
    pub(super) fn lane(&mut self, ns: u64) {
        if self.first_index_ns.is_some() {
            return;
        }
        let me = std::thread::current().id();
        match self.lanes.iter_mut().find(|l| l.0 == me) {
            Some(l) => l.1 += ns,
            None => self.lanes.push((me, ns)),
        }
    }

    /// The end of the part before the first index file, on the thread that opens it. The
    /// model charged the part's requests one after another; the prefetch pass's jobs (the
    /// other threads) wait for their reads side by side, so the pass took as long as its
    /// busiest job, or as long as the pool needs to serve all the reads `queue_depth` at a
    /// time, whichever is longer; this thread's own requests come after it. The clock goes
    /// back by the rest.
    pub(super) fn end_pass(&mut self) {
        let me = std::thread::current().id();
        let jobs = self.lanes.iter().filter(|l| l.0 != me);
        if jobs.clone().count() < 2 {
            return;
        }
        let busiest = jobs.map(|l| l.1).max().unwrap_or(0);
        let serial: u64 = self.lanes.iter().map(|l| l.1).sum();
        let own: u64 = self.lanes.iter().filter(|l| l.0 == me).map(|l| l.1).sum();
        let p = self.model.params();
        let t = self.model.totals();
        let device = t.reads().div_ceil(p.queue_depth.max(1)) * p.miss_ns;
        let parallel = (busiest + own).max(device);
        if parallel < serial {
            self.model.rewind(serial - parallel);
        }
    }

    #[inline]
    pub(super) fn req(&mut self, op: Op, ino: u64, parent: u64, errno: i32) {
        self.req_with(op, ino, parent, errno, |_| {});
    }

    /// A request; `fill` adds what a trace record carries beyond the numbers (a name, flags),
    /// and runs only when the request is traced.
    #[inline]
    pub(super) fn req_with(
        &mut self,
        op: Op,
        ino: u64,
        parent: u64,
        errno: i32,
        fill: impl FnOnce(&mut RawRecord),
    ) {
        let start = self.model.clock_ns();
        let ns = self.model.charge_request(
            &ModelOp {
                op,
                ino,
                parent,
                errno,
            },
            None,
        );
        self.lane(ns);
        self.count(op);
        if let Some(t) = &mut self.trace {
            if t.keep(if ino != 0 { ino } else { parent }) {
                let mut r = t.next(op, start);
                r.duration_ns = ns;
                r.modeled_ns = ns;
                r.ino = ino;
                r.parent = parent;
                r.errno = errno;
                fill(&mut r);
                t.sink.record(r);
                t.seq += 1;
            }
        }
    }

    #[inline]
    pub(super) fn count(&mut self, op: Op) {
        let c = &mut self.counts;
        match op {
            Op::Lookup => c.lookup += 1,
            Op::Getattr => c.getattr += 1,
            Op::Setattr => c.setattr += 1,
            Op::Opendir => c.opendir += 1,
            Op::Readdir => c.readdir += 1,
            Op::Open => c.open += 1,
            Op::Unlink => c.unlink += 1,
            Op::Create => c.create += 1,
            _ => {}
        }
    }

    /// A readdir returning the inodes in `self.listing`, then the one that finds the end.
    pub(super) fn readdir(&mut self, ino: u64) {
        let listing = std::mem::take(&mut self.listing);
        let m = ModelOp {
            op: Op::Readdir,
            ino,
            parent: 0,
            errno: 0,
        };
        let start = self.model.clock_ns();
        let ns = self.model.charge_request(&m, Some(&listing));
        let end_start = self.model.clock_ns();
        let end_ns = self.model.charge_request(&m, Some(&[]));
        self.lane(ns + end_ns);
        self.count(Op::Readdir);
        self.count(Op::Readdir);
        if let Some(t) = &mut self.trace {
            if t.keep(ino) {
                // The listing with its entries (the simulator keeps no names), then the
                // readdir that finds the end, as a mount records them.
                for (at, cost, n) in [(start, ns, listing.len()), (end_start, end_ns, 0)] {
                    let mut r = t.next(Op::Readdir, at);
                    r.ino = ino;
                    r.arg = n as u64;
                    r.duration_ns = cost;
                    r.modeled_ns = cost;
                    let entries = ListingEntries {
                        inos: &listing[..n],
                        ..Default::default()
                    };
                    let extra = Extra {
                        listing: (n > 0).then_some(entries),
                        ..Default::default()
                    };
                    t.sink.record_request(r, extra);
                    t.seq += 1;
                }
            }
        }
        self.listing = listing;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Model, ModelParams};
    use crate::trace::{TraceReader, TraceWriter};

    fn state() -> State {
        State::new(Model::new(ModelParams::preset("zfs-hdd").unwrap()))
    }

    #[test]
    fn requests_are_counted_by_kind_and_charged_in_order() {
        let mut st = state();
        for (op, ino) in [
            (Op::Lookup, 10),
            (Op::Lookup, 11),
            (Op::Lookup, 12),
            (Op::Setattr, 12),
        ] {
            st.req(op, ino, ino - 1, 0);
        }
        assert_eq!(
            st.counts,
            RequestCounts {
                lookup: 3,
                setattr: 1,
                ..Default::default()
            }
        );
        let after_touch = st.model.clock_ns();
        assert!(after_touch > 0, "a cold pool charges the first lookups");
        // A request the model does not charge is still counted.
        st.req(Op::Open, 12, 0, 0);
        assert_eq!(st.counts.open, 1);
    }

    #[test]
    fn a_listing_is_two_readdirs_with_its_entries_traced_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        let (writer, sink) = TraceWriter::start(&path, Default::default()).unwrap();
        let mut st = state();
        let layout = st.model.params().layout;
        st.trace = Some(SimTrace::new(sink, 1.0, layout));
        st.listing = vec![5, 6, 7];
        st.readdir(100);
        st.req(Op::Lookup, 6, 100, 0);
        assert_eq!(st.counts.readdir, 2);
        assert_eq!(st.listing, [5, 6, 7], "the scratch is given back");
        drop(st); // the sink goes with the state
        writer.finish().unwrap();
        let mut r = TraceReader::open(&path).unwrap();
        let mut seen = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            seen.push((rec.op().unwrap(), rec.seq, rec.ino, rec.parent, rec.arg));
        }
        assert_eq!(
            seen,
            [
                (Op::Dirent, 0, 5, 100, 0),
                (Op::Dirent, 0, 6, 100, 1),
                (Op::Dirent, 0, 7, 100, 2),
                (Op::Readdir, 0, 100, 0, 3),
                (Op::Readdir, 1, 100, 0, 0),
                (Op::Lookup, 2, 6, 100, 0),
            ]
        );
    }

    #[test]
    fn a_sampled_trace_keeps_or_drops_whole_metadata_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let (w, sink) = TraceWriter::start(&dir.path().join("t"), Default::default()).unwrap();
        let layout = ModelParams::preset("zfs-hdd").unwrap().layout;
        let t = SimTrace::new(sink, 0.3, layout);
        let kept = (0..100_000u64).filter(|&i| t.keep(i)).count();
        assert!(
            (15_000..45_000).contains(&kept),
            "{kept} of 100,000 kept at 30%"
        );
        for i in 0..100_000u64 {
            let same_block = (i + 1..i + 64).find(|&j| layout.block(j) == layout.block(i));
            if let Some(j) = same_block {
                assert_eq!(t.keep(i), t.keep(j), "inodes {i} and {j} share a block");
            }
        }
        drop(t);
        w.finish().unwrap();
    }
}
