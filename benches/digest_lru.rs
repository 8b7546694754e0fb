//! Phase 1's digest cache (`gc::lru::DigestLru`, PBS's 1 Mi-entry LRU) on a stream shaped like
//! thread 000's: 16 Mi references to 2 Mi distinct digests, revisits skewed towards the recent
//! past, so that most references hit and some miss and evict.
//!
//!     cargo bench --bench digest_lru

use std::time::Instant;

use chunkscope::datastore::Digest;
use chunkscope::gc::lru::DigestLru;
use chunkscope::rng::{hash, skewed_reference};

fn digest(k: u64) -> Digest {
    let mut d = [0u8; 32];
    for (i, part) in d.chunks_mut(8).enumerate() {
        part.copy_from_slice(&hash(&[k, i as u64]).to_le_bytes());
    }
    Digest(d)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("digest_lru: run with `cargo bench --bench digest_lru` to measure");
        return;
    }
    let n = 16u64 << 20;
    let distinct = 2u64 << 20;
    let stream: Vec<Digest> = (0..n)
        .map(|i| digest(skewed_reference(11, i, n, distinct)))
        .collect();
    for round in 0..3 {
        let mut lru = DigestLru::new(1 << 20);
        let t = Instant::now();
        let hits = stream.iter().filter(|&&d| lru.insert(d)).count();
        let s = t.elapsed().as_secs_f64();
        println!(
            "round {round}: {n} inserts in {s:.3} s ({:.1} ns each, {:.1} M/s), {:.1}% hits, {} MiB reserved",
            s * 1e9 / n as f64,
            n as f64 / s / 1e6,
            100.0 * hits as f64 / n as f64,
            lru.reserved_bytes() >> 20
        );
    }
}
