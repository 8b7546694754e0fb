//! Unit tests of the analysis.
use super::*;
use crate::datastore::Digest;

fn rec(seq: u64, op: Op, ino: u64, parent: u64) -> Record {
    Record {
        seq,
        start_ns: seq * 1000,
        duration_ns: 500,
        ino,
        parent,
        arg: 0,
        offset: 0,
        injected_ns: 0,
        modeled_ns: 0,
        pid: 1,
        op: op as u16,
        flags: if op == Op::Setattr {
            flags::SET_ATIME
        } else {
            0
        },
        errno: 0,
        name: Name::None,
    }
}

fn touches(inos: &[u64], dir_of: impl Fn(u64) -> u64) -> Phase {
    let mut a = Analyzer::new(Options::default());
    let mut seq = 0;
    for &i in inos {
        let mut l = rec(seq, Op::Lookup, i, dir_of(i));
        l.name = Name::Digest(Digest::of(&i.to_le_bytes()));
        a.push(&l, &[]);
        a.push(&rec(seq + 1, Op::Setattr, i, 0), &[]);
        seq += 2;
    }
    let mut p = a.finish();
    assert_eq!(p.len(), 1);
    p.remove(0)
}

#[test]
fn golden_sequential_scan() {
    // Inodes 32..=159: 4 blocks of 32, all gaps 1, 3 block changes in 127 steps.
    let inos: Vec<u64> = (32..160).collect();
    let p = touches(&inos, |i| 1000 + i / 8);
    let t = &p.touches;
    assert_eq!((t.count, t.distinct_blocks, t.ideal_blocks), (128, 4, 4));
    assert_eq!((t.gap_p10, t.gap_p50, t.gap_p90), (1, 1, 1));
    assert_eq!(t.gap_log2, vec![0, 127]);
    assert!((t.same_block - 124.0 / 127.0).abs() < 1e-12);
    // A new directory every 8 inodes: 15 switches in 127 steps.
    assert!((t.dir_switches_per_1000 - 1000.0 * 15.0 / 127.0).abs() < 1e-9);
    // One transaction group: each block written once, as in inode order.
    assert_eq!(
        (
            p.writeback.block_writes,
            p.writeback.inode_order_block_writes
        ),
        (4, 4)
    );
    assert_eq!(p.digest_mrc.distinct, 128);
    assert_eq!(p.digest_mrc.points.last().unwrap().hit_ratio, 0.0);
}

#[test]
fn golden_round_robin_over_directories() {
    // 4 directories, each with 8 chunks whose inodes are 32 apart (one block each);
    // touched round robin: every step changes directory and block.
    let mut inos = Vec::new();
    for k in 0..8u64 {
        for d in 0..4u64 {
            inos.push(1 + 32 * (d + 4 * k));
        }
    }
    // That is inode 1 + 32 * (d + 4k): block d + 4k, all distinct.
    assert_eq!(inos[..4], [1, 33, 65, 97]);
    let p = touches(&inos, |i| (i / 32) % 4);
    let t = &p.touches;
    assert_eq!((t.distinct_blocks, t.ideal_blocks), (32, 1));
    assert_eq!((t.gap_p50, t.same_block), (32, 0.0));
    assert_eq!(t.dir_switches_per_1000, 1000.0);
    assert_eq!(p.writeback.block_writes, 32);
    assert_eq!(
        p.writeback.inode_order_block_writes, 32,
        "32 blocks either way"
    );
}

#[test]
fn golden_random_order_and_repeats() {
    // The same 64 inodes (2 blocks) touched twice in a scrambled order, 4 txgs apart.
    let mut a = Analyzer::new(Options {
        txg_ns: 32_000, // 16 lookup+setattr pairs per transaction group
        ..Options::default()
    });
    let order: Vec<u64> = (0..64u64).map(|i| 32 + (i * 37) % 64).collect();
    let mut seq = 0;
    for _ in 0..2 {
        for &i in &order {
            a.push(&rec(seq, Op::Setattr, i, 0), &[]);
            seq += 2;
        }
    }
    let p = a.finish().remove(0);
    let w = &p.writeback;
    // 128 touches, 16 per group: 8 groups, each touching both blocks (37 is odd: the
    // order alternates between halves often).
    assert_eq!(w.txgs, 8);
    assert_eq!(w.block_writes, 16);
    // In inode order, 16 consecutive inodes of the sorted 128 (each twice) span one block.
    assert_eq!(w.inode_order_block_writes, 8);
    assert_eq!(w.amplification, 2.0);
    assert_eq!(p.touches.distinct_inodes, 64);
}

/// The mount's own requests before the first marker make a section the tables leave out; a
/// section outside the phases with touches in it is shown, and JSON keeps both.
#[test]
fn tables_leave_out_a_background_section_beside_marked_phases() {
    let report = |touch_outside: bool| {
        let mut a = Analyzer::new(Options::default());
        a.push(&rec(0, Op::Getattr, 1, 0), &[]);
        if touch_outside {
            a.push(&rec(1, Op::Setattr, 9, 0), &[]);
        }
        for (seq, start) in [(2, true), (5, false)] {
            let mut m = rec(seq, Op::Marker, 0, 0);
            m.name = Name::Text(Marker::phase(1, start, "lru").encode().into());
            a.push(&m, &[]);
            if start {
                let mut l = rec(3, Op::Lookup, 7, 2);
                l.name = Name::Digest(Digest::of(b"7"));
                a.push(&l, &[]);
                a.push(&rec(4, Op::Setattr, 7, 0), &[]);
            }
        }
        Report {
            trace: "t".into(),
            store: "s".into(),
            inodes_per_block: 32,
            block_bytes: 16 << 10,
            phases: a.finish(),
            missing_requests: 0,
            truncated_bytes: None,
            kernel_cache: None,
            inferred_phases: false,
        }
    };
    let quiet = report(false);
    assert_eq!(quiet.phases.len(), 2, "JSON keeps the background section");
    let shown: Vec<&str> = quiet.shown_phases().map(|p| p.name.as_str()).collect();
    assert_eq!(shown, ["phase1 strategy=lru"]);
    let busy = report(true);
    assert_eq!(
        busy.shown_phases().count(),
        2,
        "a touch outside the phases is shown"
    );
}

/// `--s3-prices`: each kind of request and the storage; a kind left out costs nothing; a
/// wrong kind or price is said.
#[test]
fn s3_prices_parse_and_price_requests_and_gb_months() {
    let p = S3Prices::parse("list=5, delete=1,storage=0.5").unwrap();
    assert_eq!((p.list, p.delete, p.put, p.storage), (5.0, 1.0, 0.0, 0.5));
    let r = S3Requests {
        list_pages: 2,
        delete_requests: 3,
        puts: 7,
        ..Default::default()
    };
    assert!((r.cost_at(&p) - 0.013).abs() < 1e-12);
    assert!((S3Requests::storage_at(3 << 30, &p) - 1.5).abs() < 1e-12);
    for (bad, says) in [
        ("egress=1", "not a kind of request"),
        ("list=-1", "0 or more"),
        ("list", "KIND=PRICE"),
        ("storage=NaN", "0 or more"),
    ] {
        let e = S3Prices::parse(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}
