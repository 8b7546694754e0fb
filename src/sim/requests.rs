//! The simulator's requests: the FUSE requests a mount would receive for each store
//! operation (the table in [`super::store`]'s documentation), each through the same
//! instrumentation as a mount's ([`crate::instrument`]: fault rules, the model's charge, the
//! trace records), in that order, and counted by kind.

use super::dentries::Dentries;
use std::path::Path;

use crate::datastore::paths::{chunk_subdir_name, CHUNK_DIR};
use crate::datastore::Digest;
use crate::faults::Decision;
use crate::instrument::{Done, Instruments, Trace};
use crate::trace::format::flags;
use crate::trace::{Extra, ListingEntries, Op};

/// Whose modelled time a request before the first index file adds to: the calling thread's,
/// or a prefetch job's that the GC runs in turn with the others on one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lane {
    Thread(std::thread::ThreadId),
    Job(usize),
}
/// What one run changes: the chunks' atimes and removals, the model, the counts. Each
/// [`SimStore::fork`] has its own, so runs side by side share only what was built.
pub(super) struct State {
    /// Fault rules and the model, as a mount's (see [`crate::instrument`]).
    pub(super) inst: Instruments,
    /// Each chunk's atime, epoch seconds as `u32` (1970 to 2106), by chunk number.
    pub(super) atimes: Vec<u32>,
    /// Each chunk's removed flag, a bit by chunk number.
    pub(super) removed: Vec<u64>,
    pub(super) counts: RequestCounts,
    /// Listing scratch: the inodes a readdir returned.
    pub(super) listing: Vec<u64>,
    pub(super) trace: Option<Trace>,
    /// This process: the caller in the trace's records.
    pub(super) pid: u32,
    /// The model's clock when the first index file was opened since the reset.
    pub(super) first_index_ns: Option<u64>,
    /// Before the first index file: modelled time per calling thread (the prefetch pass's
    /// jobs), see [`State::end_pass`].
    pub(super) lanes: Vec<(Lane, u64)>,
    /// The prefetch job whose requests come now, when the GC runs its jobs in turn on one
    /// thread ([`crate::store::ChunkStore::prefetch_job`]).
    pub(super) job: Option<usize>,
    /// The directories the kernel of a mount with a directory TTL would have cached.
    pub(super) dentries: super::dentries::Dentries,
    /// Index files of a walk with a thread building ahead that the GC's thread built itself
    /// (0 unless that thread stopped early: a test checks it).
    pub(super) indexes_not_ahead: u64,
    /// The empty marker files of an S3 datastore's cache that are no chunk of the build.
    pub(super) markers: super::markers::Markers,
}

/// Requests emitted, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RequestCounts {
    /// Lookups.
    pub lookup: u64,
    /// Getattrs.
    pub getattr: u64,
    /// Setattrs (touches).
    pub setattr: u64,
    /// Opendirs.
    pub opendir: u64,
    /// Readdirs (two a listing: its entries, then the end).
    pub readdir: u64,
    /// Opens.
    pub open: u64,
    /// Unlinks.
    pub unlink: u64,
    /// Creates.
    pub create: u64,
}

/// What a simulated request names: nothing, a name, or a chunk file whose name (its digest's
/// hex, with `.N.bad` for a bad copy) is written out only when a trace or a fault rule reads it.
#[derive(Clone, Copy)]
pub(super) enum Name<'a> {
    None,
    Bytes(&'a [u8]),
    Chunk(&'a Digest),
    Bad(&'a Digest, u8),
}

/// Where a request is, relative to the store: its directory for a request with a name, else
/// its node. Made into a path only for a fault rule's glob.
#[derive(Clone, Copy)]
pub(super) enum At<'a> {
    /// A node of the index tree (or the root: empty).
    Tree(&'a Path),
    /// `.chunks`.
    Chunks,
    /// `.chunks/XXXX`.
    ChunkDir(u16),
    /// `.chunks/XXXX/<hex>`.
    Chunk(&'a Digest),
}

impl At<'_> {
    fn path(&self) -> Option<String> {
        Some(match self {
            At::Tree(p) => p.to_str()?.to_string(),
            At::Chunks => CHUNK_DIR.to_string(),
            At::ChunkDir(p) => format!("{CHUNK_DIR}/{}", chunk_subdir_name(*p)),
            At::Chunk(d) => format!("{CHUNK_DIR}/{}/{d}", chunk_subdir_name(d.prefix())),
        })
    }
}

/// A simulated request: what the kernel would send and what the store answered.
#[derive(Clone, Copy)]
pub(super) struct Req<'a> {
    pub(super) op: Op,
    pub(super) ino: u64,
    pub(super) parent: u64,
    /// What the store answers (before any injected error).
    pub(super) errno: i32,
    pub(super) name: Name<'a>,
    pub(super) at: At<'a>,
    pub(super) flags: u8,
    pub(super) arg: u64,
}

impl<'a> Req<'a> {
    /// A request about node `ino` (at `at`) that succeeds.
    pub(super) fn on(op: Op, ino: u64, at: At<'a>) -> Req<'a> {
        Req {
            op,
            ino,
            parent: 0,
            errno: 0,
            name: Name::None,
            at,
            flags: 0,
            arg: 0,
        }
    }

    /// A lookup of `name` in directory `parent` (at `at`): found as `ino`, or ENOENT (0).
    pub(super) fn lookup(parent: u64, name: Name<'a>, at: At<'a>, ino: Option<u64>) -> Req<'a> {
        Req {
            parent,
            name,
            errno: if ino.is_some() { 0 } else { libc::ENOENT },
            ..Req::on(Op::Lookup, ino.unwrap_or(0), at)
        }
    }
}

impl State {
    /// No requests yet, no chunks (the build adds them), no trace.
    pub(super) fn new(inst: Instruments) -> State {
        State {
            inst,
            atimes: Vec::new(),
            removed: Vec::new(),
            counts: RequestCounts::default(),
            listing: Vec::new(),
            trace: None,
            pid: std::process::id(),
            first_index_ns: None,
            lanes: Vec::new(),
            job: None,
            dentries: Default::default(),
            indexes_not_ahead: 0,
            markers: Default::default(),
        }
    }

    /// Chunk `i`'s atime in this run, epoch seconds.
    #[inline]
    pub(super) fn atime(&self, i: usize) -> i64 {
        self.atimes[i] as i64
    }

    /// Sets chunk `i`'s atime (epoch seconds, within `u32`: the store's own times are).
    #[inline]
    pub(super) fn set_atime(&mut self, i: usize, t: i64) {
        self.atimes[i] = t as u32;
    }

    /// Whether this run removed chunk `i`.
    #[inline]
    pub(super) fn is_removed(&self, i: usize) -> bool {
        self.removed[i / 64] & (1 << (i % 64)) != 0
    }

    #[inline]
    pub(super) fn set_removed(&mut self, i: usize, removed: bool) {
        let (w, bit) = (i / 64, 1u64 << (i % 64));
        if removed {
            self.removed[w] |= bit;
        } else {
            self.removed[w] &= !bit;
        }
    }

    /// A lookup of directory `node` (`r`), unless the kernel has its entry cached.
    #[inline]
    pub(super) fn lookup_dir(&mut self, node: u32, r: Req<'_>) -> Result<(), i32> {
        self.unless_cached(node, r, Dentries::entry_cached, Dentries::entered)
    }

    /// A getattr of directory `node` (`r`), unless the kernel has its attributes cached.
    #[inline]
    pub(super) fn getattr_dir(&mut self, node: u32, r: Req<'_>) -> Result<(), i32> {
        self.unless_cached(node, r, Dentries::attr_cached, Dentries::attr_read)
    }

    /// Request `r` about directory `node`, unless `cached` says the kernel answers it itself;
    /// `answered` records what its reply lets the kernel keep.
    #[inline]
    fn unless_cached(
        &mut self,
        node: u32,
        r: Req<'_>,
        cached: fn(&Dentries, u32, u64) -> bool,
        answered: fn(&mut Dentries, u32, u64),
    ) -> Result<(), i32> {
        if self.dentries.ttl_ns() == 0 {
            return self.req(r);
        }
        let now = self.model().clock_ns();
        if cached(&self.dentries, node, now) {
            return Ok(());
        }
        self.req(r)?;
        let now = self.model().clock_ns();
        answered(&mut self.dentries, node, now);
        Ok(())
    }

    /// The model (a simulation always has one).
    #[inline]
    pub(super) fn model(&mut self) -> &mut crate::model::Model {
        self.inst.model_mut().expect("a simulation has a model")
    }

    /// Adds a request's modelled time to the calling thread's lane (before the first index
    /// file only: the prefetch pass is the one part of a GC that runs on several threads).
    #[inline]
    pub(super) fn lane(&mut self, ns: u64) {
        if self.first_index_ns.is_some() {
            return;
        }
        let me = match self.job {
            Some(j) => Lane::Job(j),
            None => Lane::Thread(std::thread::current().id()),
        };
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
        let me = Lane::Thread(std::thread::current().id());
        let jobs = self.lanes.iter().filter(|l| l.0 != me);
        if jobs.clone().count() < 2 {
            return;
        }
        let busiest = jobs.map(|l| l.1).max().unwrap_or(0);
        let serial: u64 = self.lanes.iter().map(|l| l.1).sum();
        let own: u64 = self.lanes.iter().filter(|l| l.0 == me).map(|l| l.1).sum();
        self.model().overlap(serial, busiest + own);
    }

    /// A request: asks the fault rules, charges the model and writes its records through the
    /// instrumentation a mount uses; returns the errno the caller sees (an injected one, else
    /// the store's).
    #[inline]
    pub(super) fn req(&mut self, r: Req<'_>) -> Result<(), i32> {
        self.req_listing(r, None)
    }

    #[inline]
    fn req_listing(&mut self, r: Req<'_>, listing: Option<&[u64]>) -> Result<(), i32> {
        let mut buf = [0u8; 72];
        let consults = self.inst.consults(r.op);
        let wanted = self.trace.is_some() || consults;
        let name: &[u8] = match r.name {
            _ if !wanted => b"",
            Name::None => b"",
            Name::Bytes(b) => b,
            Name::Chunk(d) => {
                hex::encode_to_slice(d.0, &mut buf[..64]).expect("64 bytes for 32");
                &buf[..64]
            }
            Name::Bad(d, n) => {
                hex::encode_to_slice(d.0, &mut buf[..64]).expect("64 bytes for 32");
                buf[64..70].copy_from_slice(&[b'.', b'0' + n, b'.', b'b', b'a', b'd']);
                &buf[..70]
            }
        };
        let named = !matches!(r.name, Name::None);
        let dec = if consults {
            let node = if named { r.parent } else { r.ino };
            let atime = r.flags & flags::SET_ATIME != 0;
            let mtime = r.flags & flags::SET_MTIME != 0;
            let at = r.at;
            let mut path = || {
                let mut p = at.path()?;
                if named {
                    if !p.is_empty() {
                        p.push('/');
                    }
                    p.push_str(std::str::from_utf8(name).ok()?);
                }
                Some(p)
            };
            let mut dec = self.inst.admit(r.op, node, name, atime, mtime, &mut path);
            if dec.panic && dec.errno == 0 {
                dec.errno = libc::EIO; // what a mount answers for a handler that panicked
            }
            dec
        } else {
            Decision::default()
        };
        let (errno, ino) = if dec.errno != 0 {
            // Not performed: a request with a name did not find its inode.
            (dec.errno, if named { 0 } else { r.ino })
        } else {
            (r.errno, r.ino)
        };
        let d = Done {
            errno,
            ino,
            parent: r.parent,
            arg: r.arg,
            offset: 0,
            flags: r.flags,
            name,
            extra: Extra {
                listing: listing.map(|inos| ListingEntries {
                    inos,
                    ..ListingEntries::default()
                }),
                ..Extra::default()
            },
        };
        let c = self
            .inst
            .record_mut(self.trace.as_ref(), r.op, self.pid, 0, &d, dec);
        self.lane(c.modeled_ns);
        self.count(r.op);
        match errno {
            0 => Ok(()),
            e => Err(e),
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

    /// One `getdents` call on the directory `ino` (at `at`): a readdir returning the inodes
    /// in `self.listing` (traced with its entries; the simulator keeps no names), or, with
    /// none, the one that finds the end.
    pub(super) fn readdir(&mut self, ino: u64, at: At<'_>) -> Result<(), i32> {
        let listing = std::mem::take(&mut self.listing);
        let n = listing.len() as u64;
        let r = self.req_listing(
            Req {
                arg: n,
                ..Req::on(Op::Readdir, ino, at)
            },
            Some(&listing),
        );
        self.listing = listing;
        r
    }

    /// A whole listing of the directory `ino` in one call and the call that finds the end
    /// (a snapshot tree's directories, which PBS reads with `scandir` and walkdir).
    pub(super) fn read_whole_dir(&mut self, ino: u64, at: At<'_>) -> Result<(), i32> {
        self.readdir(ino, at)?;
        let entries = std::mem::take(&mut self.listing);
        let r = self.readdir(ino, at);
        self.listing = entries;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;
    use crate::model::{Model, ModelParams};
    use crate::trace::{TraceReader, TraceWriter};

    fn state(faults: Option<Faults>) -> State {
        let model = Model::new(ModelParams::preset("zfs-hdd").unwrap());
        State::new(Instruments::simulated(faults, model))
    }

    fn root() -> At<'static> {
        At::Tree(Path::new(""))
    }

    fn records(path: &Path) -> Vec<crate::trace::Record> {
        let mut r = TraceReader::open(path).unwrap();
        let mut seen = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            seen.push(rec);
        }
        seen
    }

    #[test]
    fn requests_are_counted_by_kind_and_charged_in_order() {
        let mut st = state(None);
        for ino in [10, 11, 12] {
            st.req(Req::lookup(ino - 1, Name::Bytes(b"x"), root(), Some(ino)))
                .unwrap();
        }
        st.req(Req::on(Op::Setattr, 12, root())).unwrap();
        assert_eq!(
            st.counts,
            RequestCounts {
                lookup: 3,
                setattr: 1,
                ..Default::default()
            }
        );
        let after_touch = st.model().clock_ns();
        assert!(after_touch > 0, "a cold pool charges the first lookups");
        // A request the model does not charge is still counted.
        st.req(Req::on(Op::Open, 12, root())).unwrap();
        assert_eq!(st.counts.open, 1);
        // A lookup that finds nothing answers ENOENT.
        let missing = Req::lookup(12, Name::Bytes(b"y"), root(), None);
        assert_eq!(st.req(missing), Err(libc::ENOENT));
    }

    #[test]
    fn a_whole_listing_is_two_readdirs_with_its_entries_traced_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        let (writer, sink) = TraceWriter::start(&path, Default::default()).unwrap();
        let mut st = state(None);
        st.trace = Some(crate::instrument::Trace::all(sink));
        st.listing = vec![5, 6, 7];
        st.read_whole_dir(100, At::ChunkDir(1)).unwrap();
        st.req(Req::lookup(
            100,
            Name::Bytes(b"c"),
            At::ChunkDir(1),
            Some(6),
        ))
        .unwrap();
        assert_eq!(st.counts.readdir, 2);
        assert_eq!(st.listing, [5, 6, 7], "the scratch is given back");
        drop(st); // the sink goes with the state
        writer.finish().unwrap();
        let seen: Vec<_> = records(&path)
            .iter()
            .map(|rec| (rec.op().unwrap(), rec.seq, rec.ino, rec.parent, rec.arg))
            .collect();
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

    /// An injected error replaces the request: the caller sees the errno, the record has the
    /// injected flag, and a named request did not find its inode. The rule's glob matches the
    /// path a mount would give (`.chunks/XXXX/<hex>`).
    #[test]
    fn a_fault_rule_fails_the_simulated_request_it_selects() {
        let rules = ["lookup path=.chunks/0001/* errno=EIO".to_string()];
        let faults = Faults::load(&rules, &[] as &[&str], 0).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        let (writer, sink) = TraceWriter::start(&path, Default::default()).unwrap();
        let mut st = state(Some(faults));
        st.trace = Some(crate::instrument::Trace::all(sink));
        let d = Digest([7; 32]);
        let elsewhere = Req::lookup(100, Name::Chunk(&d), At::ChunkDir(2), Some(9));
        assert_eq!(st.req(elsewhere), Ok(()));
        let selected = Req::lookup(100, Name::Chunk(&d), At::ChunkDir(1), Some(9));
        assert_eq!(st.req(selected), Err(libc::EIO));
        assert_eq!(st.counts.lookup, 2);
        let stats = st.inst.faults.as_ref().unwrap().stats();
        assert_eq!((stats[0].matches, stats[0].hits), (1, 1));
        drop(st);
        writer.finish().unwrap();
        let recs = records(&path);
        let injected = |r: &crate::trace::Record| r.flags & flags::INJECTED_ERROR != 0;
        assert_eq!(
            recs.iter()
                .map(|r| (r.errno, r.ino, injected(r)))
                .collect::<Vec<_>>(),
            [(0, 9, false), (libc::EIO, 0, true)]
        );
        assert_eq!(recs[1].name, crate::trace::Name::Digest(d));
    }
}
