//! Unit tests of the cost model.
use super::cache::Policy;
use super::*;

fn params() -> ModelParams {
    ModelParams {
        name: "test".into(),
        layout: Layout::Zfs { per_block: 32 },
        block_bytes: 16 << 10,
        cache_bytes: 4 * (16 << 10), // 4 blocks
        miss_ns: 1000,
        queue_depth: 2,
        write_ns: 100,
        txg_ns: 1_000_000,
        dirty_limit_blocks: 10,
        throttle_start: 0.6,
        delay_scale_ns: 500,
        op_ns: 0,
        ..ModelParams::default()
    }
}

fn op(op: Op, ino: u64, parent: u64) -> ModelOp {
    ModelOp {
        op,
        ino,
        parent,
        errno: 0,
    }
}

#[test]
fn layouts() {
    assert_eq!(Layout::Zfs { per_block: 32 }.block(31), 0);
    assert_eq!(Layout::Zfs { per_block: 32 }.block(32), 1);
    let e = Layout::Ext4 {
        inodes_per_group: 8192,
        per_block: 16,
    };
    assert_eq!(e.block(1), 0);
    assert_eq!(e.block(17), 1);
    assert_eq!(e.block(8193), 1 << 24);
    assert_eq!(e.block(8192 + 33), (1 << 24) | 2);
}

#[test]
fn sequential_scan_misses_once_per_block() {
    let mut m = Model::new(params());
    let total: u64 = (32..96)
        .map(|i| m.charge(&op(Op::Getattr, i, 0)).misses)
        .sum();
    assert_eq!(total, 2);
    assert_eq!(m.totals().hits, 62);
    assert_eq!(m.clock_ns(), 2000);
}

#[test]
fn round_robin_over_more_blocks_than_the_cache_always_misses() {
    let mut m = Model::new(params());
    // 5 blocks, cache of 4: LRU thrashes on a cyclic pattern.
    for _ in 0..3 {
        for b in 0..5u64 {
            assert_eq!(m.charge(&op(Op::Getattr, (b + 1) * 32, 0)).misses, 1);
        }
    }
    assert_eq!(m.totals().misses, 15);
}

#[test]
fn lookup_reads_the_directory_block_then_the_inode_block() {
    let mut m = Model::new(params());
    assert_eq!(m.charge(&op(Op::Lookup, 100, 7)).misses, 2);
    assert_eq!(
        m.charge(&op(Op::Lookup, 101, 7)).misses,
        0,
        "same dir block, same dnode block"
    );
    let failed = ModelOp {
        op: Op::Lookup,
        ino: 0,
        parent: 9,
        errno: libc::ENOENT,
    };
    assert_eq!(
        m.charge(&failed).misses,
        1,
        "a failed lookup reads only the directory"
    );
}

#[test]
fn listing_prefetches_entry_blocks_queue_depth_at_a_time() {
    let mut m = Model::new(params());
    let c = m.charge(&op(Op::Readdir, 5, 0));
    assert_eq!(c.misses, 1);
    // Entries in 3 distinct blocks: ceil(3 / 2) = 2 reads of 1000 ns.
    let c = m.charge_listing(5, &[64, 65, 96, 128, 130]);
    assert_eq!((c.prefetched, c.ns), (3, 2000));
    // Now a stat of any of them hits.
    assert_eq!(m.charge(&op(Op::Getattr, 130, 0)).misses, 0);
    assert_eq!(
        m.charge_listing(5, &[64, 96]).prefetched,
        0,
        "already cached"
    );
}

#[test]
fn dirty_blocks_are_written_once_per_txg() {
    let mut p = params();
    p.miss_ns = 100_000; // each touch advances the clock by 0.1 ms of reads at most
    let mut m = Model::new(p);
    for i in 0..10u64 {
        m.charge(&op(Op::Setattr, (i % 2 + 1) * 32, 0)); // 2 blocks, touched 5 times each
    }
    assert_eq!(m.totals().dirtied, 2);
    // Jump past the txg boundary: the next operation first syncs the group.
    let mut far = op(Op::Getattr, 1 << 20, 0);
    far.ino = 1 << 20;
    while m.clock_ns() < 1_000_000 {
        m.charge(&far);
        far.ino += 32;
    }
    m.charge(&op(Op::Setattr, 32, 0));
    assert_eq!(m.totals().txg_syncs, 1);
    assert_eq!(m.totals().dirty_per_txg, vec![2]);
    assert_eq!(m.totals().blocks_written, 2);
    assert_eq!(
        m.totals().writeback_ns,
        100,
        "2 blocks, queue depth 2: one write time"
    );
    m.flush();
    assert_eq!(m.totals().dirty_per_txg, vec![2, 1]);
}

#[test]
fn throttle_above_sixty_percent_and_sync_at_the_limit() {
    let mut m = Model::new(params());
    let mut delays = Vec::new();
    for b in 0..11u64 {
        delays.push(m.charge(&op(Op::Setattr, (b + 1) * 32, 0)).throttle_ns);
    }
    // Dirty before each op: 0..=10, start = 6, limit = 10:
    // 7 -> 500*1/3 = 166, 8 -> 500*2/2 = 500, 9 -> 500*3/1 = 1500, 10 -> forced sync.
    assert_eq!(&delays[..7], &[0; 7]);
    assert_eq!(delays[7], 166);
    assert_eq!(delays[8], 500);
    assert_eq!(delays[9], 1500);
    assert_eq!(
        delays[10], 500,
        "sync of 10 blocks at queue depth 2, 100 ns each"
    );
    assert_eq!(m.totals().dirty_per_txg, vec![10]);
}

#[test]
fn fat_zap_directories_read_a_header_and_the_entrys_leaf() {
    let mut p = params();
    p.cache_bytes = 64 * (16 << 10);
    p.zap_leaf_entries = 10;
    p.dir_entries = 40; // 4 leaves
    let mut m = Model::new(p.clone());
    assert_eq!(m.leaves, 4);
    assert_eq!(
        m.charge(&op(Op::Lookup, 100, 7)).misses,
        3,
        "header, leaf, dnode block"
    );
    // Entries of the same dnode block spread over the leaves: each new leaf is one miss.
    let leaves: HashSet<u64> = (96..128).filter_map(|i| m.leaf(7, i)).collect();
    assert_eq!(leaves.len(), 4, "32 names hash to all 4 leaves");
    let misses: u64 = (96..128)
        .map(|i| m.charge(&op(Op::Lookup, i, 7)).misses)
        .sum();
    assert_eq!(misses, 3, "the 3 leaves not read yet");
    // A listing prefetches the leaves with the entries' blocks.
    let mut m = Model::new(p.clone());
    assert_eq!(m.charge(&op(Op::Readdir, 7, 0)).misses, 1, "the header");
    let c = m.charge_listing(7, &(96..128).collect::<Vec<_>>());
    assert_eq!(c.prefetched, 1 + 4, "one dnode block and four leaves");
    assert_eq!(m.charge(&op(Op::Lookup, 100, 7)).misses, 0);
    // An unlink dirties the header, the leaf and the dnode block.
    assert_eq!(m.charge(&op(Op::Unlink, 100, 7)).dirtied, 3);
    // Freeing the data reads the file's indirect block, which nothing had cached.
    let mut q = p.clone();
    q.unlink_reads_indirect = true;
    let mut m = Model::new(q);
    m.charge(&op(Op::Lookup, 101, 7));
    let c = m.charge(&op(Op::Unlink, 101, 7));
    assert_eq!((c.misses, c.dirtied), (1, 3), "the indirect block only");
    // Without an entry count the layout still has one leaf; without leaves, none.
    p.dir_entries = 0;
    assert_eq!(Model::new(p.clone()).leaves, 1);
    p.zap_leaf_entries = 0;
    assert_eq!(Model::new(p).charge(&op(Op::Lookup, 100, 7)).misses, 2);
}

#[test]
fn async_prefetch_waits_only_for_the_previous_listings_reads() {
    let mut p = params(); // miss 1000 ns, queue depth 2
    p.cache_bytes = 1 << 30;
    p.async_prefetch = true;
    let mut m = Model::new(p);
    // 4 blocks: 2000 ns of pool time, not waited for.
    let c = m.charge_listing(5, &[32, 64, 96, 128]);
    assert_eq!((c.prefetched, c.ns), (4, 0));
    // The next listing, 500 ns later, waits for the rest of them, then queues its own.
    m.charge(&op(Op::Getattr, 32, 0)); // op_ns 0, a hit: no time
    m.clock_ns += 500;
    let c = m.charge_listing(6, &[160, 192]);
    assert_eq!((c.prefetched, c.ns), (2, 1500));
    // A listing after its reads were served waits for nothing.
    m.clock_ns += 10_000;
    assert_eq!(m.charge_listing(7, &[224]).ns, 0);
}

#[test]
fn a_sync_longer_than_the_txg_delays_the_next_one() {
    let mut p = params();
    p.write_ns = 1_000_000; // 2 blocks at queue depth 2 take 1 ms: as long as a txg
    p.miss_ns = 10_000;
    p.dirty_limit_blocks = 1 << 20;
    p.cache_bytes = 1 << 30;
    let mut m = Model::new(p);
    // 4 dirty blocks in the first txg: their sync takes 2 ms, from 1 ms to 3 ms.
    for b in 1..=4u64 {
        m.charge(&op(Op::Setattr, b * 32, 0));
    }
    let mut b = 5u64;
    let mut step = |m: &mut Model| {
        m.charge(&op(Op::Setattr, b * 32, 0));
        b += 1;
    };
    while m.clock_ns() < 1_000_000 {
        step(&mut m);
    }
    step(&mut m);
    assert_eq!(m.totals().txg_syncs, 1);
    let first = m.totals().dirty_per_txg[0];
    let first_ns = first.div_ceil(2) * 1_000_000;
    // The second group stays open until the first sync ends, not at 2 ms.
    while m.clock_ns() < 1_000_000 + first_ns {
        assert_eq!(m.totals().txg_syncs, 1, "at {} ns", m.clock_ns());
        step(&mut m);
    }
    step(&mut m);
    assert_eq!(m.totals().txg_syncs, 2);
    assert!(
        m.totals().dirty_per_txg[1] > first,
        "the delayed group collected more: {:?}",
        m.totals().dirty_per_txg
    );
}

#[test]
fn warm_caches_inodes_then_directories() {
    let mut p = params();
    p.zap_leaf_entries = 10;
    p.dir_entries = 10; // one leaf
    let mut m = Model::new(p); // 4 blocks
                               // Two dnode blocks, then a directory's header and leaf: all four fit.
    m.warm([32u64, 64, 65].into_iter(), &[7]);
    assert_eq!(
        m.totals().misses + m.totals().hits,
        0,
        "warming counts nothing"
    );
    assert_eq!(m.clock_ns(), 0);
    assert_eq!(m.charge(&op(Op::Lookup, 64, 7)).misses, 0);
    // A third dnode block evicts the least recent (block 1, inode 32).
    m.warm([96u64].into_iter(), &[]);
    assert_eq!(m.charge(&op(Op::Getattr, 32, 0)).misses, 1);
}

#[test]
fn creation_order_places_scattered_inodes_together() {
    // ext4-like numbers 1000 apart, created one after the other: one ZFS block by rank.
    let inos: Vec<u64> = (1..=32).map(|i| i * 1000).collect();
    let mut m = Model::with_order(params(), order::InodeOrder::from_creation(inos.clone()));
    let misses: u64 = inos
        .iter()
        .map(|&i| m.charge(&op(Op::Getattr, i, 0)).misses)
        .sum();
    assert_eq!(misses, 2, "ranks 1..=31 in block 0, rank 32 in block 1");
    let mut native = Model::new(params());
    let misses: u64 = inos
        .iter()
        .map(|&i| native.charge(&op(Op::Getattr, i, 0)).misses)
        .sum();
    assert_eq!(misses, 32);
    // A file created later gets the next rank (33: block 1, already cached).
    assert_eq!(
        m.charge(&op(Op::Create, 5, 1)).misses,
        1,
        "the parent's block"
    );
    assert_eq!(m.charge(&op(Op::Getattr, 5, 0)).misses, 0);
}

#[test]
fn deterministic_and_presets() {
    let run = || {
        let mut m = Model::new(ModelParams::preset("zfs-hdd").unwrap());
        for i in 0..10_000u64 {
            m.charge(&op(
                if i % 3 == 0 { Op::Setattr } else { Op::Lookup },
                (i * 7919) % 50_000 + 1,
                i % 97,
            ));
        }
        m.flush();
        m.totals().clone()
    };
    assert_eq!(run(), run());
    for p in PRESETS {
        ModelParams::preset(p).unwrap();
    }
    assert!(ModelParams::preset("btrfs")
        .unwrap_err()
        .to_string()
        .contains("zfs-hdd"));
    let mut none = Model::new(ModelParams::preset("none").unwrap());
    assert_eq!(none.charge(&op(Op::Lookup, 5, 1)).ns, 0);
}

#[test]
fn the_prefetch_flag_is_cleared_by_a_listing_and_set_by_a_lookup() {
    let mut p = params(); // miss 1000 ns, queue depth 2
    p.cache_bytes = 1 << 30;
    p.readdir_prefetch_flag = true;
    let mut m = Model::new(p.clone());
    // A directory just loaded has the flag: its first getdents prefetches the entries.
    assert_eq!(m.charge_listing(7, &[32, 64]).prefetched, 2);
    // The next getdents of the same listing finds it cleared: nothing prefetched, no time.
    let c = m.charge_listing(7, &[96, 128]);
    assert_eq!((c.prefetched, c.ns), (0, 0));
    assert_eq!(
        m.charge(&op(Op::Getattr, 96, 0)).misses,
        1,
        "not prefetched"
    );
    // Other directories keep their own flag.
    assert_eq!(m.charge_listing(8, &[160]).prefetched, 1);
    // A lookup that fails does not set it; one that finds an entry does.
    let failed = ModelOp {
        op: Op::Lookup,
        ino: 0,
        parent: 7,
        errno: libc::ENOENT,
    };
    m.charge(&failed);
    assert_eq!(m.charge_listing(7, &[192]).prefetched, 0);
    m.charge(&op(Op::Lookup, 32, 7));
    assert_eq!(m.charge_listing(7, &[224, 256]).prefetched, 2);
    assert_eq!(m.charge_listing(7, &[288]).prefetched, 0, "cleared again");
    // Dropping the caches drops the znodes: reloaded, every directory has the flag.
    m.drop_caches();
    assert_eq!(m.charge_listing(7, &[32]).prefetched, 1);
    // ZAP leaves are prefetched with or without the flag (zap_iterate_prefetch).
    let mut q = p.clone();
    q.zap_leaf_entries = 10;
    q.dir_entries = 40;
    let mut m = Model::new(q);
    m.charge_listing(7, &[32]);
    let names: Vec<u64> = (1000..1032).collect();
    let c = m.charge_listing(7, &names);
    assert!(c.prefetched >= 1 && c.prefetched <= 4, "leaves only: {c:?}");
    // Off: every listing prefetches its entries.
    p.readdir_prefetch_flag = false;
    let mut m = Model::new(p);
    m.charge_listing(7, &[32]);
    assert_eq!(m.charge_listing(7, &[64]).prefetched, 1);
}

#[test]
fn adjacent_prefetch_reads_aggregate_up_to_the_limit_and_across_the_read_gap() {
    let mut p = params(); // miss 1000 ns, queue depth 2, 16 KiB blocks, 32 dnodes a block
    p.cache_bytes = 1 << 30;
    p.aggregation_limit_bytes = 4 * (16 << 10); // 4 blocks an I/O
    p.read_gap_bytes = 16 << 10; // one block of gap
    p.transfer_ns = 10;
    let mut m = Model::new(p.clone());
    // Blocks 1..=6 and 8 (one block gap after 6), then 20: runs [1-4], [5-8], [20].
    let inos: Vec<u64> = [1u64, 2, 3, 4, 5, 6, 8, 20]
        .iter()
        .map(|b| b * 32)
        .collect();
    let c = m.charge_listing(9, &inos);
    assert_eq!(c.prefetched, 8);
    assert_eq!(m.totals().prefetch_ios, 3);
    // ceil(3 / 2) seeks of 1000 ns, and 5 extra blocks of 10 ns over 2 queues.
    assert_eq!(c.ns, 2 * 1000 + 5 * 10 / 2);
    // A cached block in a run is part of the gap, not of the reads.
    let mut m = Model::new(p.clone());
    m.charge(&op(Op::Getattr, 2 * 32, 0)); // block 2 cached
    let c = m.charge_listing(9, &[32, 64, 96]);
    assert_eq!((c.prefetched, m.totals().prefetch_ios), (2, 1));
    // Blocks three apart (two between) exceed a one-block gap.
    let mut m = Model::new(p.clone());
    m.charge_listing(9, &[32, 128]);
    assert_eq!(m.totals().prefetch_ios, 2);
    // Without aggregation every block is an I/O, as before.
    p.aggregation_limit_bytes = 0;
    let mut m = Model::new(p.clone());
    let c = m.charge_listing(9, &inos);
    assert_eq!((m.totals().prefetch_ios, c.ns), (8, 4 * 1000));
}

#[test]
fn a_groups_writes_go_out_in_aggregated_ios() {
    let mut p = params(); // write 100 ns, queue depth 2
    p.cache_bytes = 1 << 30;
    p.dirty_limit_blocks = 1 << 20;
    p.aggregation_limit_bytes = 4 * (16 << 10);
    p.transfer_ns = 10;
    let mut m = Model::new(p);
    // 10 dirty blocks scattered over the object numbers: copy-on-write writes them in a row.
    for b in 0..10u64 {
        m.charge(&op(Op::Setattr, (b * 1000 + 1) * 32, 0));
    }
    m.flush();
    // ceil(10 / 4) = 3 I/Os, 2 rounds at queue depth 2; 7 extra blocks of 10 ns over 2.
    assert_eq!(m.totals().blocks_written, 10);
    assert_eq!(m.totals().writeback_ns, 2 * 100 + 7 * 10 / 2);
}

#[test]
fn the_arc_keeps_directory_blocks_that_a_scan_of_dnodes_would_evict_from_an_lru() {
    let run = |policy| {
        let mut p = params(); // 4 blocks of cache
        p.cache_policy = policy;
        let mut m = Model::new(p);
        let dir = |d: u64| ModelOp {
            op: Op::Lookup,
            ino: 0,
            parent: d,
            errno: libc::ENOENT,
        };
        // Two directories read twice each, then a scan: each step reads one of them again
        // and three dnode blocks read once.
        for d in [1, 1, 2, 2] {
            m.charge(&dir(d));
        }
        let mut dir_misses = 0;
        for i in 0..200u64 {
            dir_misses += m.charge(&dir(1 + i % 2)).misses;
            for k in 0..3 {
                m.charge(&op(Op::Getattr, (10 + 3 * i + k) * 32, 0));
            }
        }
        dir_misses
    };
    assert_eq!(run(Policy::Arc), 0, "the frequency list keeps them");
    // Seven other blocks between two reads of one: all but the first step miss.
    assert_eq!(run(Policy::Lru), 199);
}

#[test]
fn the_metadata_limit_and_the_backups_shrink_the_cache_and_stretch_the_disks() {
    let mut p = params();
    p.cache_bytes = 100 * (16 << 10);
    assert_eq!(p.cache_blocks(), 100);
    p.metadata_limit = 0.75;
    assert_eq!(p.cache_blocks(), 75);
    p.backup_cache_share = 0.2;
    assert_eq!(p.cache_blocks(), 60);
    p.backup_disk_share = 0.5;
    p.validate().unwrap();
    let mut m = Model::new(p.clone());
    // A demand read of 1000 ns takes twice as long with the disks busy half the time.
    assert_eq!(m.charge(&op(Op::Getattr, 32, 0)).ns, 2000);
    assert_eq!(
        p.mechanisms(),
        ["metadata-limit", "backup-load"],
        "named for reports"
    );
    for (field, bad) in [
        ("metadata_limit", {
            let mut q = p.clone();
            q.metadata_limit = 1.5;
            q
        }),
        ("backup_disk_share", {
            let mut q = p.clone();
            q.backup_disk_share = 1.0;
            q
        }),
        ("backup_cache_share", {
            let mut q = p.clone();
            q.backup_cache_share = -0.1;
            q
        }),
        ("aggregation_limit_bytes", {
            let mut q = p.clone();
            q.aggregation_limit_bytes = 512;
            q
        }),
    ] {
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains(field), "{e}");
    }
    // A model file from before these options reads as an idle pool with none of them.
    let old = r#"{"name":"old","layout":{"kind":"zfs","per_block":32},"block_bytes":16384,
        "cache_bytes":1048576,"miss_ns":8000000,"queue_depth":8,"write_ns":8000000,
        "txg_ns":5000000000,"dirty_limit_blocks":262144,"throttle_start":0.6,
        "delay_scale_ns":500000,"op_ns":2000}"#;
    let q: ModelParams = serde_json::from_str(old).unwrap();
    assert!(q.mechanisms().is_empty());
    assert_eq!(q.cache_policy, Policy::Lru);
}

/// A live snapshot's copy keeps every counter and only the newest groups' dirty blocks.
#[test]
fn a_recent_copy_keeps_the_counters_and_the_last_groups() {
    let t = Totals {
        ops: 7,
        misses: 3,
        txg_syncs: 5,
        blocks_written: 15,
        dirty_per_txg: vec![1, 2, 3, 4, 5],
        ..Totals::default()
    };
    let r = t.recent(2);
    assert_eq!(r.dirty_per_txg, [4, 5]);
    assert_eq!(
        Totals {
            dirty_per_txg: t.dirty_per_txg.clone(),
            ..r
        },
        t
    );
    assert_eq!(t.recent(10), t, "fewer groups than asked: all of them");
}

/// ext4 on one disk, as the `ext4-hdd` preset, over a 2 GiB filesystem.
fn ext4_disk() -> ModelParams {
    let mut p = ModelParams::preset("ext4-hdd").unwrap();
    p.disk.as_mut().unwrap().span = 2 << 30;
    p.io_ns = 0;
    p
}

/// The chunk directories' blocks lie in the order of their inode numbers: lookups that go
/// directory by directory (batched, inode-order) stream them off the disk, while the same
/// lookups in digest-hash order (naive) seek each time: same reads, several times the time.
#[test]
fn with_a_disk_reads_in_layout_order_cost_less_than_the_same_reads_at_random() {
    let dirs: Vec<u64> = (15..15 + 2000u64).map(|i| i * 24).collect();
    let time = |order: &[u64]| {
        let mut m = Model::new(ext4_disk());
        for &d in order {
            m.charge(&op(Op::Readdir, d, 13));
        }
        (m.clock_ns(), m.totals().misses)
    };
    let (sorted_ns, sorted_reads) = time(&dirs);
    let mut shuffled = dirs.clone();
    let mut x = 7u64;
    for i in (1..shuffled.len()).rev() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        shuffled.swap(i, (x >> 33) as usize % (i + 1));
    }
    let (random_ns, random_reads) = time(&shuffled);
    assert_eq!(sorted_reads, random_reads);
    assert!(
        random_ns > 3 * sorted_ns,
        "random {random_ns} ns, in order {sorted_ns} ns"
    );
    // Random reads within 200 MiB of a 2 GiB disk: a short seek and half a turn, 5-12 ms.
    let each = random_ns / random_reads;
    assert!((5_000_000..12_000_000).contains(&each), "{each} ns a read");
}

/// A miss on an inode-table block reads its aligned window of 32 table blocks in one I/O
/// (ext4's inode_readahead_blks): the inodes of the next 31 blocks then cost nothing.
#[test]
fn inode_table_readahead_reads_the_window_in_one_io() {
    let mut m = Model::new(ext4_disk());
    let first = m.charge(&op(Op::Getattr, 1 + 16 * 64, 0));
    assert_eq!(first.misses, 1);
    assert_eq!(first.prefetched, 31);
    for b in 64..96u64 {
        let c = m.charge(&op(Op::Getattr, 1 + 16 * b, 0));
        assert_eq!(c.misses, 0, "table block {b}");
    }
    assert_eq!(m.charge(&op(Op::Getattr, 1 + 16 * 96, 0)).misses, 1);
    assert_eq!(m.totals().prefetch_ios, 2);
    let mut off = ext4_disk();
    off.inode_readahead_blocks = 0;
    let mut m = Model::new(off);
    m.charge(&op(Op::Getattr, 1 + 16 * 64, 0));
    assert_eq!(m.charge(&op(Op::Getattr, 1 + 16 * 65, 0)).misses, 1);
}

/// Under relatime a listing updates the directory's atime: its inode block is dirtied and
/// written, to the journal at the group's commit and home 30 s later. ext4's readdir
/// prefetches no inode.
#[test]
fn ext4_listings_dirty_the_directories_inodes_and_prefetch_nothing() {
    let mut m = Model::new(ext4_disk());
    for d in 17..17 + 64u64 {
        m.charge(&op(Op::Readdir, d, 13));
        let c = m.charge_listing(d, &[100_000 + d, 200_000 + d]);
        assert_eq!(c.prefetched, 0);
    }
    // 64 directories' inodes: 4 table blocks.
    assert_eq!(m.dirty_blocks(), 4);
    m.flush();
    assert_eq!(m.totals().blocks_written, 4);
    let disk = m.disk.as_ref().unwrap().totals();
    assert_eq!(
        disk.writes, 2,
        "the journal, then the blocks' home: {disk:?}"
    );
    let mut off = ext4_disk();
    off.dir_atime = false;
    let mut m = Model::new(off);
    m.charge(&op(Op::Readdir, 15, 13));
    assert_eq!(m.dirty_blocks(), 0);
}

/// The journal's commit goes out at the group's sync; the blocks' home writes wait 30 s and
/// then delay the reads queued behind them.
#[test]
fn home_writes_follow_the_journal_after_the_delay() {
    let mut m = Model::new(ext4_disk());
    m.charge(&op(Op::Setattr, 20, 0));
    // A read after the sync (5 s): the journal write is done by then.
    m.clock_ns = 6_000_000_000;
    m.charge(&op(Op::Getattr, 100_000, 0));
    let d = m.disk.as_ref().unwrap().totals();
    assert_eq!(d.writes, 1, "the journal only");
    m.clock_ns = 40_000_000_000;
    m.charge(&op(Op::Getattr, 200_000, 0));
    assert_eq!(m.disk.as_ref().unwrap().totals().writes, 2, "and home");
}

/// XFS on one disk, as the `xfs-hdd` preset, with one chunk a directory (short form).
fn xfs_disk() -> ModelParams {
    let mut p = ModelParams::preset("xfs-hdd").unwrap();
    p.disk.as_mut().unwrap().span = 2 << 30;
    p.dir_entries = 1;
    p
}

/// A short-form directory's entries are in its inode: listing it after a lookup of it reads
/// nothing more, and 32 directories in one inode cluster are one read. A directory too large
/// for its inode has a block of its own.
#[test]
fn xfs_short_form_directories_are_read_with_their_inodes() {
    let mut m = Model::new(xfs_disk());
    let base = 2_228_352;
    for d in base..base + 32 {
        m.charge(&op(Op::Lookup, d, 13));
        m.charge(&op(Op::Readdir, d, 13));
    }
    // The parent's inode cluster (the model takes every directory to be the size of a chunk
    // directory) and the one cluster of the 32.
    assert_eq!(m.totals().misses, 2);
    let mut large = xfs_disk();
    large.dir_entries = 100;
    let mut m = Model::new(large);
    m.charge(&op(Op::Lookup, base, 13));
    m.charge(&op(Op::Readdir, base, 13));
    assert_eq!(m.totals().misses, 3);
}

/// XFS logs changes, not blocks: 224 bytes each, pushed at 8 MiB in 32 KiB writes that take
/// turns with the reads after the push (each then costs a seek to the log and back).
#[test]
fn xfs_pushes_its_log_at_the_threshold_in_writes_between_the_reads() {
    let mut m = Model::new(xfs_disk());
    // Directory listings until the push: 37,450 atime changes are the first 8 MiB of log.
    let base = 2_228_352;
    let mut d = base;
    while m.totals().txg_syncs == 0 {
        m.charge(&op(Op::Readdir, d, 13));
        d += 1;
    }
    assert_eq!(d - base, 37_450);
    // 8,388,800 bytes in 32 KiB writes.
    let pending = m.log_writes.len();
    assert_eq!(pending, 257);
    // Each read from now on lets one log write go first.
    let before = m.disk.as_ref().unwrap().totals().writes;
    for d in 0..10 {
        m.charge(&op(Op::Getattr, 3_145_856 + 64 * d, 0));
    }
    assert_eq!(m.disk.as_ref().unwrap().totals().writes, before + 10);
    assert_eq!(m.log_writes.len(), pending - 10);
    m.flush();
    assert!(m.log_writes.is_empty());
}

/// ZFS on one disk as the testbed's pool is (BENCHMARKS.md, "ZFS on the testbed"): sectors of
/// 4 KiB, 400 MiB allocated, metadata written twice, copy-on-write.
fn zfs_disk() -> ModelParams {
    let mut p = ModelParams {
        name: "zfs on a disk".into(),
        cache_bytes: 1 << 30,
        disk: Some(crate::disk::DiskParams::parse("hdd-7200,span=2GiB").unwrap()),
        read_bytes: 4096,
        cow_copies: 2,
        txg_ns: 1_000_000_000,
        txg_after_sync: true,
        ..ModelParams::default()
    };
    p.placement.zfs_sector = 4096;
    p.placement.zfs_allocated = 400 << 20;
    p
}

/// Issue 64: an empty directory is a micro ZAP in the sector it got when it was made, so a
/// sweep of the datastore's empty chunk directories reads them one after the other; a
/// directory that holds entries is a fat ZAP, rewritten since and spread over the pool.
#[test]
fn zfs_empty_directories_lie_in_creation_order_and_fat_ones_are_spread() {
    let span = 2 << 30;
    let sweep = |fat: bool| {
        let mut m = Model::new(zfs_disk());
        if fat {
            // As a lookup that finds an entry marks them (without reading anything: the
            // drive's cache would then hold the blocks).
            for d in 100..1100u64 {
                m.holds_entries(d);
            }
        }
        let start = m.clock_ns();
        for d in 100..1100u64 {
            m.charge(&op(Op::Readdir, d, 0));
        }
        (m.clock_ns() - start, m.offset(dir_block(500), span))
    };
    let (empty_ns, empty_at) = sweep(false);
    let (fat_ns, fat_at) = sweep(true);
    assert_eq!(empty_at, 500 * 4096, "a micro ZAP's sector");
    assert!(
        fat_at >= (65_536 + 64) * 4096,
        "{fat_at}: after the micro ZAPs"
    );
    assert!(
        fat_at < 400 << 20,
        "{fat_at}: within what the pool allocated"
    );
    assert!(
        empty_ns * 5 < fat_ns,
        "a sweep of empty directories {empty_ns} ns, of fat ones {fat_ns} ns"
    );
    // Without the pool's geometry, every directory is spread (the older model).
    let mut p = zfs_disk();
    p.placement.zfs_sector = 0;
    let m = Model::new(p);
    assert_ne!(m.offset(dir_block(500), span), 500 * 4096);
}

/// Issue 64: copy-on-write writes each dirty block twice at the allocation frontier, one
/// request at a time taking turns with the reads (a read waits for one write, not the whole
/// group), reads a written block from its new place, and with `txg_after_sync` closes the
/// next group a `txg_ns` after the last write.
#[test]
fn zfs_copy_on_write_takes_turns_with_the_reads_and_moves_the_blocks() {
    let span = 2 << 30;
    let mut m = Model::new(zfs_disk());
    let lone = m.charge(&op(Op::Getattr, 5_000_000, 0)).ns;
    for k in 0..100u64 {
        m.charge(&op(Op::Setattr, 32 * (k + 1), 0));
    }
    let block = m.block(32 * 7);
    let home = m.offset(block, span);
    // Past the group's end: it syncs 200 writes; the next read waits for one of them.
    let mut i = 0;
    while m.cow_writes.is_empty() {
        m.charge(&op(Op::Getattr, 6_000_000 + 64 * i, 0));
        i += 1;
        assert!(i < 200_000, "no sync");
    }
    let queued = m.cow_writes.len();
    assert!(queued > 150, "{queued}");
    let during = m.charge(&op(Op::Getattr, 9_000_000, 0)).ns;
    assert!(
        during < 40_000_000,
        "{during} ns: a read waits for the write under way, not for {queued} ({lone} ns alone)"
    );
    let served = queued - m.cow_writes.len();
    assert!((1..=2).contains(&served), "{served} writes before the read");
    assert_eq!(
        m.sync_end_ns,
        u64::MAX,
        "the sync runs until its writes are done"
    );
    m.cow_writes_due(u64::MAX);
    assert!(m.cow_writes.is_empty());
    let end = m.sync_end_ns;
    assert!(end > m.clock_ns() && end < u64::MAX, "{end}");
    let moved = m.offset(block, span);
    assert_ne!(moved, home);
    assert!(moved >= 400 << 20, "{moved}: at the frontier");
    assert_eq!(m.totals().blocks_written, 200);
    // The next group closes a txg_ns after the writes ended, not before.
    m.charge(&op(Op::Setattr, 32 * 500, 0));
    let syncs = m.totals().txg_syncs;
    while m.clock_ns() < end + 900_000_000 {
        m.charge(&op(Op::Getattr, 5_000_000, 0));
    }
    assert_eq!(m.totals().txg_syncs, syncs, "closed early");
    while m.clock_ns() < end + 1_100_000_000 {
        m.charge(&op(Op::Getattr, 5_000_000, 0));
    }
    assert_eq!(m.totals().txg_syncs, syncs + 1);
}

/// Issue 64: a copy-on-write sync also writes what the allocation itself needs (space maps,
/// the MOS), each with its copies, and a group with nothing dirty writes nothing.
#[test]
fn zfs_a_sync_writes_its_extra_blocks_with_their_copies() {
    let mut p = zfs_disk();
    p.cow_sync_extra_blocks = 10;
    let mut m = Model::new(p);
    for k in 0..20u64 {
        m.charge(&op(Op::Setattr, 32 * (k + 1), 0));
    }
    m.flush();
    assert_eq!(m.totals().blocks_written, (20 + 10) * 2);
    assert_eq!(
        m.moved.len(),
        20,
        "the extra blocks are no block the model reads"
    );
    let syncs = m.totals().txg_syncs;
    m.flush();
    assert_eq!(
        m.totals().blocks_written,
        60,
        "nothing dirty, nothing written"
    );
    assert_eq!(m.totals().txg_syncs, syncs);
}

/// Issue 64: with `sync_dirty_blocks` a group closes once it holds that many dirty blocks,
/// long before its `txg_ns` (zfs-fuse's write limit: a sync every ~450 device writes while
/// a strategy dirties fast), and not while the previous sync's writes are still going out.
#[test]
fn zfs_a_group_closes_when_it_holds_enough_dirty_blocks() {
    let mut p = zfs_disk();
    p.txg_ns = 60_000_000_000;
    p.sync_dirty_blocks = 50;
    let mut m = Model::new(p);
    // 49 dirty blocks (a dnode block each): the group stays open.
    for k in 0..49u64 {
        m.charge(&op(Op::Setattr, 32 * (k + 1), 0));
    }
    m.charge(&op(Op::Getattr, 5_000_000, 0));
    assert_eq!(m.totals().txg_syncs, 0, "closed below the limit");
    // The 50th closes it at the next request: a sync of 50 blocks, twice each.
    m.charge(&op(Op::Setattr, 32 * 50, 0));
    m.charge(&op(Op::Getattr, 5_000_001, 0));
    assert_eq!(m.totals().txg_syncs, 1);
    assert_eq!(m.totals().dirty_per_txg, vec![50]);
    assert_eq!(m.totals().blocks_written, 100);
    // 50 more while those writes go out: the next group waits for them, then closes.
    for k in 100..150u64 {
        m.charge(&op(Op::Setattr, 32 * (k + 1), 0));
    }
    assert!(
        !m.cow_writes.is_empty(),
        "the first sync's writes still going out"
    );
    assert_eq!(
        m.totals().txg_syncs,
        1,
        "closed while the previous sync ran"
    );
    let mut i = 0;
    while m.totals().txg_syncs == 1 {
        m.charge(&op(Op::Getattr, 6_000_000 + 64 * i, 0));
        i += 1;
        assert!(i < 200_000, "no second sync");
    }
    assert_eq!(m.totals().dirty_per_txg, vec![50, 50]);
    assert!(m.clock_ns() < 60_000_000_000, "not the timer's");
    // Without the limit, 100 dirty blocks wait for the timer.
    let mut p = zfs_disk();
    p.txg_ns = 60_000_000_000;
    let mut m = Model::new(p);
    for k in 0..100u64 {
        m.charge(&op(Op::Setattr, 32 * (k + 1), 0));
    }
    m.charge(&op(Op::Getattr, 5_000_000, 0));
    assert_eq!(m.totals().txg_syncs, 0);
}
