//! Property tests of the format layer: whatever is written reads back identically, and any
//! single corrupted body byte is caught by the checksum (indexes) or the CRC (blobs).

use chunkscope::datastore::index::{dynamic_index_bytes, fixed_index_bytes};
use chunkscope::datastore::{blob, Digest, IndexFile, IndexKind};
use proptest::prelude::*;

fn digest() -> impl Strategy<Value = Digest> {
    any::<[u8; 32]>().prop_map(Digest)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn fixed_index_round_trip(
        digests in prop::collection::vec(digest(), 1..64),
        shift in 6u32..23,
        short in 0u64..4096,
        uuid in any::<[u8; 16]>(),
        ctime in any::<i64>(),
        flip in any::<prop::sample::Index>(),
    ) {
        let chunk = 1u64 << shift;
        let size = digests.len() as u64 * chunk - (short % chunk);
        let bytes = fixed_index_bytes(uuid, ctime, size, chunk, &digests);
        let idx = IndexFile::parse(bytes.clone()).unwrap();
        prop_assert_eq!(idx.kind(), IndexKind::Fixed);
        prop_assert_eq!(idx.uuid(), uuid);
        prop_assert_eq!(idx.ctime(), ctime);
        prop_assert_eq!(idx.index_bytes(), size);
        prop_assert_eq!(idx.digests().collect::<Vec<_>>(), digests);
        let mut bad = bytes;
        let at = 4096 + flip.index(bad.len() - 4096);
        bad[at] ^= 0x10;
        let e = IndexFile::parse(bad).err().unwrap().to_string();
        prop_assert!(e.contains("index checksum mismatch"), "{}", e);
    }

    #[test]
    fn dynamic_index_round_trip(
        entries in prop::collection::vec((1u64..1 << 24, digest()), 0..64),
        uuid in any::<[u8; 16]>(),
        ctime in any::<i64>(),
    ) {
        let mut end = 0;
        let entries: Vec<(u64, Digest)> = entries.into_iter().map(|(len, d)| { end += len; (end, d) }).collect();
        let idx = IndexFile::parse(dynamic_index_bytes(uuid, ctime, &entries)).unwrap();
        prop_assert_eq!(idx.entries(), entries.len());
        prop_assert_eq!(idx.index_bytes(), end);
        for (i, (e, d)) in entries.iter().enumerate() {
            prop_assert_eq!(idx.end(i), Some(*e));
            prop_assert_eq!(idx.digest(i), *d);
        }
    }

    #[test]
    fn blob_round_trip(data in prop::collection::vec(any::<u8>(), 0..5000), zeros in 0usize..5000, compress in any::<bool>(), flip in any::<prop::sample::Index>()) {
        let mut data = data;
        data.extend(std::iter::repeat_n(0u8, zeros));
        let raw = blob::encode(&data, compress);
        prop_assert_eq!(blob::decode(&raw).unwrap(), data.clone());
        prop_assert!(blob::verify_chunk(&raw, &Digest::of(&data)).is_ok());
        if raw.len() > 12 {
            let mut bad = raw.clone();
            let at = 12 + flip.index(raw.len() - 12);
            bad[at] ^= 0x01;
            let e = blob::decode(&bad).err().unwrap().to_string();
            prop_assert!(e.contains("CRC mismatch"), "{}", e);
        }
    }
}
