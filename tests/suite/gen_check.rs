//! Issue 2: generated stores are valid, match their ground truth, and are reproducible;
//! `check` and `inspect` find what is wrong and say so.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::*;

/// Fields the generator's truth and `check`'s report must agree on.
const SAME_FIELDS: [&str; 9] = [
    "index_files",
    "fixed_indexes",
    "dynamic_indexes",
    "references",
    "referenced_chunks",
    "chunk_files",
    "index_data_bytes",
    "referenced_chunk_bytes",
    "chunk_dirs_with_referenced",
];

#[test]
fn tiny_store_checks_deep_and_matches_its_ground_truth() {
    let dir = store_dir();
    let (store, truth) = gen(dir.path(), "tiny", &["--preset", "tiny"]);
    let (code, report) = check(&store, true);
    assert_eq!(code, 0, "{report:#}");
    for f in SAME_FIELDS {
        assert_eq!(truth[f], report[f], "field {f}");
    }
    assert_eq!(truth["garbage"], report["garbage"]);
    assert_eq!(report["deep_verified"], truth["chunk_files"]);
    assert!(
        truth["garbage"]["removable"].as_u64().unwrap() > 0,
        "old garbage exists"
    );
    assert!(
        truth["garbage"]["pending"].as_u64().unwrap() > 0,
        "young garbage exists"
    );
    assert!(truth["snapshots"].as_u64().unwrap() > 20);
    assert!(
        report["chunk_files"].as_u64().unwrap() >= 2000,
        "a few thousand chunks"
    );

    // Dedup within 10% of the requested factor (exactly what the truth says it is).
    let requested = truth["requested_dedup"].as_f64().unwrap();
    let refs = report["references"].as_f64().unwrap();
    let distinct = report["referenced_chunks"].as_f64().unwrap();
    assert!(
        ((refs / distinct) - requested).abs() / requested < 0.10,
        "{} vs {requested}",
        refs / distinct
    );
}

#[test]
fn requested_dedup_is_honoured() {
    let dir = store_dir();
    let (store, truth) = gen(
        dir.path(),
        "d",
        &["--preset", "tiny", "--dedup", "3.5", "--seed", "9"],
    );
    let (code, report) = check(&store, false);
    assert_eq!(code, 0);
    let got =
        report["references"].as_f64().unwrap() / report["referenced_chunks"].as_f64().unwrap();
    assert!((got - 3.5).abs() / 3.5 < 0.10, "{got}");
    assert_eq!(truth["requested_dedup"].as_f64(), Some(3.5));
}

/// Relative path -> (size, SHA-256 of contents, mtime) for every file; dirs by name only.
fn listing(root: &Path) -> BTreeMap<String, (u64, String, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if m.is_dir() {
                stack.push(e.path());
                out.insert(rel, (0, String::new(), 0));
            } else {
                let data = chunkscope::fsutil::read_noatime(&e.path()).unwrap();
                let sum = chunkscope::datastore::Digest::of(&data).to_hex();
                out.insert(rel, (m.size(), sum, m.mtime()));
            }
        }
    }
    out
}

#[test]
fn same_seed_same_store_other_seed_other_store() {
    let dir = store_dir();
    let (a, ta) = gen(
        dir.path(),
        "a",
        &[
            "--preset", "tiny", "--seed", "5", "--tmp", "1", "--bad", "1",
        ],
    );
    let (b, tb) = gen(
        dir.path(),
        "b",
        &[
            "--preset", "tiny", "--seed", "5", "--tmp", "1", "--bad", "1",
        ],
    );
    let (c, _) = gen(dir.path(), "c", &["--preset", "tiny", "--seed", "6"]);
    let (la, lb) = (listing(&a), listing(&b));
    assert_eq!(la.len(), lb.len());
    // Contents and names identical; mtimes are shifted by the generation time only.
    let shift = ta["generated_at"].as_i64().unwrap() - tb["generated_at"].as_i64().unwrap();
    for ((pa, va), (pb, vb)) in la.iter().zip(&lb) {
        assert_eq!(pa, pb);
        assert_eq!((va.0, &va.1), (vb.0, &vb.1), "{pa}");
        if !va.1.is_empty() && !pa.ends_with("owner") {
            assert_eq!(va.2 - vb.2, shift, "{pa}");
        }
    }
    assert_ne!(
        listing(&c).keys().collect::<Vec<_>>(),
        la.keys().collect::<Vec<_>>()
    );
}

#[test]
fn damage_is_found_by_check() {
    // On the default temporary directory (ext4 here), not tmpfs: one store per filesystem kind.
    let dir = tempfile::tempdir().unwrap();
    let (store, truth) = gen(
        dir.path(),
        "dmg",
        &[
            "--preset",
            "tiny",
            "--missing",
            "3",
            "--bad",
            "5",
            "--tmp",
            "2",
        ],
    );
    let (code, report) = check(&store, true);
    assert_eq!(code, 1, "missing chunks are a problem");
    let missing: Vec<&str> = report["missing_chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    let expected: Vec<&str> = truth["missing_chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(missing.len(), 3);
    assert_eq!(missing, expected);
    for p in report["missing_chunks"].as_array().unwrap() {
        assert!(
            p["problem"].as_str().unwrap().starts_with("required by "),
            "{p}"
        );
    }
    assert_eq!(report["bad_files"], 5);
    assert_eq!(truth["bad_for_missing"], 3);
    assert_eq!(report["ignored_files"], 2);
    assert_eq!(
        report["corrupt_chunks"].as_array().unwrap().len(),
        0,
        "temp and bad files are not chunks"
    );
    // The human output names them too.
    let o = run(&["check", store.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert!(
        text.contains(&format!("missing chunk    {}", expected[0]))
            && text.contains("PROBLEMS FOUND"),
        "{text}"
    );
}

#[test]
fn corrupt_index_and_chunk_are_named() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "bad", &["--preset", "tiny"]);
    let order = chunkscope::datastore::snapshots::phase1_order(&store).unwrap();
    let idx = order.expected[0].clone();
    let mut bytes = std::fs::read(&idx).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&idx, &bytes).unwrap();
    // Corrupt one chunk's payload (keeps its name): CRC mismatch under --deep.
    let first = chunkscope::datastore::IndexFile::open(&order.expected[1])
        .unwrap()
        .digest(0);
    let chunk = chunkscope::datastore::paths::chunk_path(&store, &first);
    let mut raw = std::fs::read(&chunk).unwrap();
    let n = raw.len() - 1;
    raw[n] ^= 1;
    std::fs::write(&chunk, &raw).unwrap();

    let (code, report) = check(&store, true);
    assert_eq!(code, 1);
    let ci = &report["corrupt_indexes"][0];
    assert_eq!(ci["path"].as_str().unwrap(), idx.display().to_string());
    assert!(
        ci["problem"]
            .as_str()
            .unwrap()
            .contains("index checksum mismatch"),
        "{ci}"
    );
    let cc = &report["corrupt_chunks"][0];
    assert_eq!(cc["path"].as_str().unwrap(), chunk.display().to_string());
    assert!(
        cc["problem"].as_str().unwrap().contains("CRC mismatch"),
        "{cc}"
    );

    // inspect reports the checksum mismatch with exit status 1.
    let o = run(&["inspect", idx.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("MISMATCH"));
}

#[test]
fn inspect_prints_index_fields() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "ins", &["--preset", "tiny"]);
    let order = chunkscope::datastore::snapshots::phase1_order(&store).unwrap();
    for ext in ["fidx", "didx"] {
        let path = order
            .iter()
            .find(|p| p.extension().unwrap() == ext)
            .unwrap();
        let idx = chunkscope::datastore::IndexFile::open(path).unwrap();
        let o = run(&["inspect", path.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        for needle in [
            format!("({ext})"),
            "uuid ".into(),
            format!("ctime            {}", idx.ctime()),
            format!(
                "entries          {}",
                chunkscope::units::thousands(idx.entries() as u64)
            ),
            "distinct digests".into(),
            format!(
                "size             {} bytes",
                chunkscope::units::thousands(idx.index_bytes())
            ),
            " OK".into(),
        ] {
            assert!(text.contains(&needle), "{needle:?} not in\n{text}");
        }
        if ext == "fidx" {
            assert!(
                text.contains("chunk size       4,096 bytes (4 KiB)"),
                "{text}"
            );
        }
    }
    // A chunk blob: digest checked against its name.
    let d = chunkscope::datastore::IndexFile::open(&order.expected[0])
        .unwrap()
        .digest(0);
    let o = run(&[
        "inspect",
        chunkscope::datastore::paths::chunk_path(&store, &d)
            .to_str()
            .unwrap(),
    ]);
    assert!(
        stdout(&o).contains("OK (matches the name)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn bad_input_gets_a_clear_error_and_exit_2() {
    let dir = store_dir();
    let o = run(&["check", dir.path().join("nope").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is not a datastore") && stderr(&o).contains("nope"),
        "{}",
        stderr(&o)
    );

    let o = run(&[
        "gen",
        "--out",
        dir.path().join("x").to_str().unwrap(),
        "--preset",
        "galactic",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("galactic"), "{}", stderr(&o));

    let o = run(&[
        "gen",
        "--out",
        dir.path().join("x").to_str().unwrap(),
        "--chunk-size",
        "1000",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--chunk-size 1000 must be a power of two"),
        "{}",
        stderr(&o)
    );

    std::fs::write(dir.path().join("junk"), b"not a pbs file at all").unwrap();
    let o = run(&["inspect", dir.path().join("junk").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("not an index or blob file"),
        "{}",
        stderr(&o)
    );

    // gen refuses to write into a non-empty directory, and leaves it alone.
    std::fs::write(dir.path().join("keep"), b"x").unwrap();
    let o = run(&["gen", "--quiet", "--out", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not empty"), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.path().join("keep")).unwrap(), b"x");
}

#[test]
fn deep_check_leaves_atimes_alone() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "at", &["--preset", "tiny"]);
    let atimes = |root: &Path| -> BTreeMap<String, (i64, i64)> {
        let mut out = BTreeMap::new();
        for prefix in 0..65536u32 {
            let d = root.join(".chunks").join(format!("{prefix:04x}"));
            for e in std::fs::read_dir(&d).unwrap() {
                let m = e.as_ref().unwrap().metadata().unwrap();
                out.insert(
                    e.unwrap().file_name().into_string().unwrap(),
                    (m.atime(), m.atime_nsec()),
                );
            }
        }
        out
    };
    let before = atimes(&store);
    assert!(!before.is_empty());
    let (code, _) = check(&store, true);
    assert_eq!(code, 0);
    let o = run(&[
        "inspect",
        chunkscope::datastore::paths::chunk_path(
            &store,
            &chunkscope::datastore::Digest::from_hex(before.keys().next().unwrap()).unwrap(),
        )
        .to_str()
        .unwrap(),
    ]);
    assert!(o.status.success());
    assert_eq!(before, atimes(&store));
}

/// Relies on tmpfs numbering inodes in creation order: on a tmpfs of its own (ext4, as in
/// /tmp here, clusters them by directory).
#[test]
fn chunk_inodes_follow_backup_history_on_tmpfs() {
    let dir = PrivateTmpfs::new();
    let (store, _) = gen(dir.path(), "ino", &["--preset", "tiny"]);
    let mut chunks = Vec::new();
    for prefix in 0..65536u32 {
        for e in std::fs::read_dir(store.join(".chunks").join(format!("{prefix:04x}"))).unwrap() {
            let m = e.unwrap().metadata().unwrap();
            chunks.push((
                m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
                m.ino(),
            ));
        }
    }
    chunks.sort();
    // Creation order (mtime, strictly increasing) equals inode order.
    assert!(chunks
        .windows(2)
        .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
}

/// A chunk directory whose listing fails midway with ENOENT (a FUSE daemon's error, a flaky
/// disk) is an error of `check` naming it, not an empty directory whose referenced chunks it
/// would call missing: glibc's readdir takes that ENOENT for the end of the directory, so
/// `check` lists with getdents64 itself. The fault is a chunkscope mount's.
#[test]
fn a_chunk_directory_whose_listing_says_enoent_is_an_error_of_check() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny"]);
    let full = std::fs::read_dir(store.join(".chunks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|d| {
            std::fs::read_dir(store.join(".chunks").join(d))
                .unwrap()
                .count()
                > 0
        })
        .min()
        .unwrap();
    let rule = format!("readdir path=.chunks/{full} errno=ENOENT");
    let m = Mount::start(&store, dir.path(), false, &["--fault", &rule]);
    let o = bin().arg("check").arg(&m.mnt).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!(".chunks/{full}")), "{err}");
    assert!(!err.contains("missing"), "no chunk called missing: {err}");
    drop(m);
    let o = bin().arg("check").arg(&store).output().unwrap();
    assert!(
        o.status.success(),
        "the store itself is whole: {}",
        stderr(&o)
    );
}
