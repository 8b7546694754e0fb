//! Unit tests of the survey file.
use super::*;

/// A model of the surveyed filesystem takes its geometry and the disk spans it; a model
/// with a disk of another filesystem keeps its own and is named; an assumed layout, or a
/// model without a disk of another filesystem (a ZFS pool's, asked on purpose), changes
/// nothing but the span.
#[test]
fn a_model_is_fitted_to_the_surveyed_filesystem() {
    use crate::model::{place::Placement, ModelParams};
    let xfs = Layout::Xfs {
        per_block: 32,
        inopb_log: 2,
        agino_log: 24,
        ag_blocks: 2_396_746,
        shortform_entries: 11,
    };
    let header = |filesystem: &str, layout: Layout, assumed: bool| FileHeader {
        store: "/s".into(),
        filesystem: filesystem.into(),
        layout,
        surveyed_at: 0,
        chunk_dirs: 65_536,
        filesystem_bytes: 64 << 30,
        layout_assumed: assumed,
        placement: None,
        block_bytes: 32 << 10,
        bucket: None,
    };
    let mut m = ModelParams::preset("xfs-hdd").unwrap();
    assert_eq!(header("xfs", xfs, false).fit_model(&mut m), None);
    assert_eq!((m.layout, m.block_bytes), (xfs, 32 << 10));
    assert_eq!(m.disk.as_ref().unwrap().span, 64 << 30);

    let mut m = ModelParams::preset("ext4-hdd").unwrap();
    let before = m.clone();
    let note = header("xfs", xfs, false).fit_model(&mut m).unwrap();
    assert!(
        note.contains("--model xfs-hdd") && note.contains("ext4-hdd"),
        "{note}"
    );
    assert_eq!(
        (m.layout, m.block_bytes),
        (before.layout, before.block_bytes)
    );

    let ext4 = Layout::Ext4 {
        inodes_per_group: 4096,
        per_block: 16,
    };
    let placed = Placement {
        itable_start: 1065,
        ..Placement::default()
    };
    let mut h = header("ext4", ext4, false);
    (h.placement, h.block_bytes) = (Some(placed), 4096);
    let mut m = ModelParams::preset("ext4-hdd").unwrap();
    assert_eq!(h.fit_model(&mut m), None);
    assert_eq!((m.layout, m.placement), (ext4, placed));

    let mut m = ModelParams::preset("xfs-hdd").unwrap();
    let before = m.clone();
    assert_eq!(
        header("tmpfs", Layout::Zfs { per_block: 32 }, true).fit_model(&mut m),
        None
    );
    assert_eq!(
        (m.layout, m.block_bytes),
        (before.layout, before.block_bytes)
    );
    // A survey from before `layout_assumed`: ZFS's layout assumed on XFS.
    assert_eq!(
        header("xfs", Layout::Zfs { per_block: 32 }, false).fit_model(&mut m),
        None
    );
    assert_eq!(
        (m.layout, m.block_bytes),
        (before.layout, before.block_bytes)
    );
    let mut m = ModelParams::preset("zfs-hdd").unwrap();
    assert_eq!(header("xfs", xfs, false).fit_model(&mut m), None);
    assert_eq!(m, ModelParams::preset("zfs-hdd").unwrap());
}

fn sample(dir: &Path) -> (PathBuf, SurveyFile) {
    let header = FileHeader {
        store: "/s".into(),
        filesystem: "tmpfs".into(),
        layout: Layout::Zfs { per_block: 32 },
        surveyed_at: 1_800_000_000,
        chunk_dirs: 3,
        filesystem_bytes: 1 << 30,
        layout_assumed: false,
        placement: None,
        block_bytes: 0,
        bucket: Some("s3://pbs at http://127.0.0.1:9000".into()),
    };
    let d = |b: u8| Digest([b; 32]);
    let dest = dir.join("s.survey");
    let mut w = SurveyWriter::create(&dest, &header).unwrap();
    w.chunks(
        &[2, 0, 1],
        &[100, 101, 102],
        [(d(1), 10), (d(2), 11), (d(3), 5)].into_iter(),
    )
    .unwrap();
    let entries = vec![(b"vm".to_vec(), EntryKind::Dir, 7)];
    w.dir(Path::new(""), 2, &entries).unwrap();
    w.reference(ChunkRef::Listed(2));
    w.reference(ChunkRef::NotListed(d(9)));
    w.end_index(Path::new("vm/1/x.fidx"), true, 5 << 20, 4 << 20)
        .unwrap();
    w.reference(ChunkRef::Listed(0));
    w.drop_index();
    let unref = [Unreferenced {
        number: 1,
        atime: -5,
        size: 4096,
    }];
    w.end_walk().unwrap();
    w.unreferenced(&unref[0]).unwrap();
    let objects = [
        SurveyObject {
            digest: d(1),
            bad_suffix: None,
            size: 17,
        },
        SurveyObject {
            digest: d(1),
            bad_suffix: Some(*b".0.bad"),
            size: 18,
        },
        SurveyObject {
            digest: d(8),
            bad_suffix: None,
            size: 1 << 40,
        },
    ];
    for o in &objects {
        w.object(o).unwrap();
    }
    w.using(&d(9)).unwrap();
    w.bad_copy(&d(1), 0, 1_700_000_000).unwrap();
    w.finish().unwrap();
    let expected = SurveyFile {
        header,
        dir_chunks: vec![2, 0, 1],
        dir_inos: vec![100, 101, 102],
        chunks: vec![(d(1), 10), (d(2), 11), (d(3), 5)],
        dirs: vec![DirRecord {
            path: "".into(),
            ino: 2,
            entries: vec![("vm".into(), EntryKind::Dir, 7)],
        }],
        indexes: vec![IndexRecord {
            path: "vm/1/x.fidx".into(),
            fixed: true,
            size: 5 << 20,
            chunk_size: 4 << 20,
            refs: vec![2, 3],
        }],
        not_listed: vec![d(9)],
        unreferenced: unref.to_vec(),
        bucket: Some(SurveyBucket {
            objects: objects.to_vec(),
            using: vec![d(9)],
            bad: vec![(d(1), 0, 1_700_000_000)],
        }),
    };
    (dest, expected)
}

/// `body` (a version-3 file's, with no bucket) as a file of `version`.
fn older(bytes: &[u8], mut body: Vec<u8>, version: u32) -> Vec<u8> {
    // No bucket section (its end tag) and no object count in the trailer.
    let len = body.len();
    body.truncate(len - 8);
    body.remove(len - 8 - 3 * 8 - 1);
    let mut enc = zstd::Encoder::new(Vec::new(), 3).unwrap();
    enc.include_checksum(true).unwrap();
    std::io::Write::write_all(&mut enc, &body).unwrap();
    let mut out = bytes[..8].to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&enc.finish().unwrap());
    out
}

/// The sample written without its bucket: (file bytes, decompressed body).
fn without_bucket(dir: &Path) -> (Vec<u8>, Vec<u8>, SurveyFile) {
    let (dest, mut expected) = sample(dir);
    let mut f = SurveyFile::read(&dest).unwrap();
    f.header.bucket = None;
    let plain = dir.join("plain.survey");
    let mut w = SurveyWriter::create(&plain, &f.header).unwrap();
    w.chunks(&f.dir_chunks, &f.dir_inos, f.chunks.iter().copied())
        .unwrap();
    for d in &f.dirs {
        let entries: Vec<_> = d
            .entries
            .iter()
            .map(|(n, k, i)| (n.as_bytes().to_vec(), *k, *i))
            .collect();
        w.dir(&d.path, d.ino, &entries).unwrap();
    }
    for i in &f.indexes {
        for &r in &i.refs {
            w.reference(f.chunk_ref(r));
        }
        w.end_index(&i.path, i.fixed, i.size, i.chunk_size).unwrap();
    }
    w.end_walk().unwrap();
    for u in &f.unreferenced {
        w.unreferenced(u).unwrap();
    }
    w.finish().unwrap();
    (expected.header.bucket, expected.bucket) = (None, None);
    let bytes = std::fs::read(&plain).unwrap();
    let body = zstd::decode_all(&bytes[12..]).unwrap();
    (bytes, body, expected)
}

/// A version-1 file (no content bytes per index) still reads, its indexes taken as
/// 4 MiB a reference; a version-2 file (no bucket) reads as it was written.
#[test]
fn older_files_read_version_1_with_4_mib_a_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let (bytes, body, expected) = without_bucket(tmp.path());
    assert_eq!(
        SurveyFile::read(&tmp.path().join("plain.survey")).unwrap(),
        expected
    );
    let v2 = tmp.path().join("v2.survey");
    std::fs::write(&v2, older(&bytes, body.clone(), 2)).unwrap();
    assert_eq!(SurveyFile::read(&v2).unwrap(), expected);

    // The index record: its path, the kind byte, then the 16 bytes version 1 lacks.
    let mut body = body;
    let path = b"vm/1/x.fidx";
    let at = body.windows(path.len()).position(|w| w == path).unwrap() + path.len() + 1;
    body.drain(at..at + 16);
    let old = tmp.path().join("v1.survey");
    std::fs::write(&old, older(&bytes, body, 1)).unwrap();
    let got = SurveyFile::read(&old).unwrap();
    assert_eq!(got.indexes[0].size, 2 * (4 << 20));
    assert_eq!(got.indexes[0].chunk_size, 4 << 20);
    assert_eq!(got.indexes[0].refs, expected.indexes[0].refs);
    assert_eq!(got.chunks, expected.chunks);
    assert_eq!(got.bucket, None);
}

/// What is written is read back; nothing of the temporary file is left.
#[test]
fn a_survey_file_reads_back_what_was_written() {
    let tmp = tempfile::tempdir().unwrap();
    let (dest, expected) = sample(tmp.path());
    let read = SurveyFile::read(&dest).unwrap();
    assert_eq!(read, expected);
    assert_eq!(read.chunk_ref(2), ChunkRef::Listed(2));
    assert_eq!(read.chunk_ref(3), ChunkRef::NotListed(Digest([9; 32])));
    let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "only the survey file");
}

/// A truncated, damaged, foreign or newer file is an error naming it; a writer dropped
/// before it finished leaves nothing.
#[test]
fn bad_survey_files_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let (dest, _) = sample(tmp.path());
    let bytes = std::fs::read(&dest).unwrap();
    let err = |b: &[u8]| {
        let p = tmp.path().join("bad.survey");
        std::fs::write(&p, b).unwrap();
        let e = format!("{:#}", SurveyFile::read(&p).unwrap_err());
        assert!(e.contains("bad.survey"), "{e}");
        e
    };
    for cut in [3, 12, 20, bytes.len() - 6, bytes.len() - 1] {
        let e = err(&bytes[..cut]);
        assert!(
            e.contains("truncated") || e.contains("shorter") || e.contains("damaged"),
            "cut at {cut}: {e}"
        );
    }
    let mut flipped = bytes.clone();
    let at = bytes.len() - 10;
    flipped[at] ^= 0x40;
    err(&flipped);
    assert!(err(b"PK\x03\x04 not a survey").contains("not a chunkscope survey file"));
    let mut newer = bytes.clone();
    newer[8] = 9;
    assert!(err(&newer).contains("version 9"));
    let header = SurveyFile::read(&dest).unwrap().header;
    let w = SurveyWriter::create(&tmp.path().join("gone.survey"), &header).unwrap();
    drop(w);
    assert!(!tmp.path().join("gone.survey").exists());
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 2);
}
