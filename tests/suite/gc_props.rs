//! Property test: on random small stores — missing chunks, `.bad` files, temp files, an index
//! created while phase 1 runs — every strategy marks exactly the referenced, existing chunks
//! and removes only unreferenced old ones. Nothing referenced is ever removed.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use chunkscope::datastore::index::{fixed_index_bytes, write_index_file};
use chunkscope::datastore::paths::{bad_chunk_rel_path, chunk_rel_path};
use chunkscope::datastore::{blob, Digest};
use chunkscope::fsutil::{set_file_times, Timestamp};
use chunkscope::gc::{self, log::TaskLog, GcOptions, Hooks, Strategy as GcStrategy};
use chunkscope::store::dir::DirStore;
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Spec {
    chunks: usize,
    /// groups -> snapshots -> chunk numbers
    groups: Vec<Vec<Vec<usize>>>,
    missing: BTreeSet<usize>,
    bad: BTreeSet<usize>,
    tmp: usize,
    /// A chunk referenced only by the index created during phase 1.
    late: usize,
}

fn spec() -> impl Strategy<Value = Spec> {
    (4usize..40).prop_flat_map(|chunks| {
        (
            Just(chunks),
            prop::collection::vec(
                prop::collection::vec(prop::collection::vec(0..chunks, 1..12), 1..4),
                2..4,
            ),
            prop::collection::btree_set(0..chunks, 0..3),
            prop::collection::btree_set(0..chunks, 0..3),
            0usize..3,
            0..chunks,
        )
            .prop_map(|(chunks, groups, missing, bad, tmp, late)| Spec {
                chunks,
                groups,
                missing,
                bad,
                tmp,
                late,
            })
    })
}

fn digest(i: usize) -> (Digest, Vec<u8>) {
    let data = format!("chunk number {i}").repeat(20).into_bytes();
    (Digest::of(&data), data)
}

fn write_file(root: &Path, rel: &Path, bytes: &[u8], atime: i64) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, bytes).unwrap();
    let f = std::fs::File::options().write(true).open(&p).unwrap();
    set_file_times(&f, Timestamp::new(atime, 0), Timestamp::new(atime, 0)).unwrap();
}

fn index(root: &Path, group: usize, snap: usize, chunks: &[usize]) -> PathBuf {
    let t = 1_700_000_000 + snap as i64 * 86_400;
    let dir = root
        .join("vm")
        .join(format!("{}", 100 + group))
        .join(chunkscope::time::rfc3339_utc(t));
    std::fs::create_dir_all(&dir).unwrap();
    let digests: Vec<Digest> = chunks.iter().map(|&c| digest(c).0).collect();
    let path = dir.join("drive-scsi0.img.fidx");
    let bytes = fixed_index_bytes(
        [group as u8; 16],
        t,
        digests.len() as u64 * 4096,
        4096,
        &digests,
    );
    write_index_file(&path, &bytes).unwrap();
    path
}

fn build(root: &Path, s: &Spec, old: i64) {
    std::fs::create_dir_all(root.join(".chunks")).unwrap();
    std::fs::write(root.join(".lock"), b"").unwrap();
    for c in 0..s.chunks {
        let (d, data) = digest(c);
        if !s.missing.contains(&c) {
            write_file(root, &chunk_rel_path(&d), &blob::encode(&data, true), old);
        }
        if s.bad.contains(&c) {
            write_file(root, &bad_chunk_rel_path(&d, 0), b"corrupt", old);
        }
    }
    for t in 0..s.tmp {
        let (d, _) = digest(1000 + t);
        let mut rel = chunk_rel_path(&d);
        rel.set_file_name(format!("{d}.tmp_abc{t:03}"));
        write_file(root, &rel, b"partial", old);
    }
    for (g, snaps) in s.groups.iter().enumerate() {
        for (k, chunks) in snaps.iter().enumerate() {
            index(root, g, k, chunks);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn every_strategy_marks_exactly_the_referenced_chunks(s in spec(), cap in prop::sample::select(vec![0usize, 1, 3, 7, 64]), batch in 1usize..6) {
        for strategy in GcStrategy::ALL {
            let dir = common::store_dir();
            let root = dir.path().join("store");
            let old = chunkscope::fsutil::now_epoch() - 3 * 86_400;
            build(&root, &s, old);
            let store = DirStore::open(&root).unwrap();
            let opts = GcOptions { strategy, cache_capacity: cap, batch_size: batch, atime_check: false, ..GcOptions::default() };
            let mut log = TaskLog::new(Box::new(std::io::sink()), false);
            // After the first index, a backup adds a snapshot to the group visited last.
            let groups = chunkscope::datastore::snapshots::list_groups(&chunkscope::datastore::snapshots::Fs, &root).unwrap();
            let last_group: usize = groups.last().unwrap().file_name().unwrap().to_str().unwrap().parse::<usize>().unwrap() - 100;
            let (root2, late) = (root.clone(), s.late);
            let mut added = false;
            let hooks = Hooks {
                boundary: None,
                after_index: Some(Box::new(move |n| {
                    if n == 1 && !added {
                        added = true;
                        index(&root2, last_group, 50, &[late]);
                    }
                })),
                cutoff_fixed: None,
            };
            let start = chunkscope::fsutil::now_epoch_coarse();
            let report = gc::run(&store, &opts, &mut log, hooks).unwrap();

            let mut referenced: BTreeSet<usize> = s.groups.iter().flatten().flatten().copied().collect();
            referenced.insert(s.late);
            let present: BTreeSet<usize> = referenced.difference(&s.missing).copied().collect();
            for c in 0..s.chunks {
                let (d, _) = digest(c);
                let p = root.join(chunk_rel_path(&d));
                if present.contains(&c) {
                    let m = std::fs::metadata(&p).unwrap_or_else(|_| panic!("{strategy:?} removed referenced chunk {c}"));
                    prop_assert!(m.atime() >= start, "{:?}: chunk {} not marked", strategy, c);
                } else if !s.missing.contains(&c) {
                    prop_assert!(!p.exists(), "{:?}: unreferenced old chunk {} kept", strategy, c);
                }
            }
            let counters = &report.counters;
            // The marked *set* is checked through the atimes above; a small cache (or none)
            // may touch a digest more than once, never fewer than once.
            prop_assert!(counters.touched >= present.len() as u64);
            let missing_referenced = referenced.intersection(&s.missing).count() as u64;
            prop_assert!(counters.missing_chunks >= missing_referenced);
            if strategy != GcStrategy::Naive && cap >= s.chunks {
                prop_assert_eq!(counters.touched, present.len() as u64);
                prop_assert_eq!(counters.missing_chunks, missing_referenced);
            }
            prop_assert_eq!(counters.disk_chunks, present.len() as u64);
            // .bad copies: of a referenced missing chunk, touched and kept; otherwise removed.
            for c in &s.bad {
                let p = root.join(bad_chunk_rel_path(&digest(*c).0, 0));
                let kept_expected = referenced.contains(c) && s.missing.contains(c);
                prop_assert_eq!(p.exists(), kept_expected, "{:?}: bad copy of {}", strategy, c);
            }
        }
    }
}
