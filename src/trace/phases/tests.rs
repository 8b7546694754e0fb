//! The inference on made-up request streams and on real traces.

use super::watch::REORDER_SLOTS;
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
