//! The sweep's referenced set (`gc::referenced::ReferencedSet`) at datastore A's size: memory
//! per referenced chunk and time per insert, for the two extremes of what phase 1 inserts.
//!
//! * `lru`: each distinct digest once (what the LRU's misses insert when it holds the store).
//! * `naive`: every reference, 5.25 a chunk (A's references per chunk), in random order.
//!
//! Run:
//!
//!     cargo bench --bench referenced_set              # 72 M chunks (datastore A)
//!     cargo bench --bench referenced_set -- 10000000  # another size

use std::time::Instant;

use chunkscope::datastore::Digest;
use chunkscope::gc::referenced::ReferencedSet;
use chunkscope::rng::hash;

fn digest(k: u64) -> Digest {
    let mut d = [0u8; 32];
    for (i, part) in d.chunks_mut(8).enumerate() {
        part.copy_from_slice(&hash(&[k, i as u64]).to_le_bytes());
    }
    Digest(d)
}

fn run(label: &str, chunks: u64, inserts: u64, pick: impl Fn(u64) -> u64) {
    let mut set = ReferencedSet::new();
    let mut peak = 0;
    let t = Instant::now();
    for i in 0..inserts {
        set.insert(&digest(pick(i)));
        if i % (1 << 22) == 0 {
            peak = peak.max(set.heap_bytes());
        }
    }
    peak = peak.max(set.heap_bytes());
    let insert_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let set = set.seal();
    let seal_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let probes = chunks.min(10_000_000);
    let found = (0..probes).filter(|&k| set.contains(&digest(k))).count() as u64;
    let probe_s = t.elapsed().as_secs_f64();
    assert_eq!(found, probes, "every inserted digest is found");
    assert_eq!(set.len(), chunks);
    let sealed = set.heap_bytes();
    println!(
        "{label:<6} {chunks} chunks, {inserts} inserts: {:.1} ns an insert (digest made included), \
         seal {seal_s:.2} s, lookup {:.0} ns; peak {:.0} MiB ({:.1} B a chunk), sealed {:.0} MiB ({:.1} B a chunk)",
        insert_s * 1e9 / inserts as f64,
        probe_s * 1e9 / probes as f64,
        peak as f64 / (1 << 20) as f64,
        peak as f64 / chunks as f64,
        sealed as f64 / (1 << 20) as f64,
        sealed as f64 / chunks as f64,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        println!("referenced_set: run with `cargo bench --bench referenced_set` to measure");
        return;
    }
    let chunks: u64 = args
        .iter()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(72_000_000);
    run("lru", chunks, chunks, |i| i);
    let inserts = chunks * 21 / 4;
    run("naive", chunks, inserts, |i| {
        // Every chunk at least once, the rest at random.
        if i < chunks {
            i
        } else {
            hash(&[7, i]) % chunks
        }
    });
}
