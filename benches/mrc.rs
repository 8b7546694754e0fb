//! The exact LRU miss-ratio curve on 10 million references (issue 6's goal: under 10 s).
//!
//!     cargo bench --bench mrc
//!
//! The stream mimics phase 1's digest stream: 1,048,576 distinct keys, each referenced about
//! ten times, revisits drawn from a skewed (recent-heavy) distance so that every capacity
//! from 1 to 8Mi sees a different hit ratio.

use std::time::Instant;

use chunkscope::analysis::mrc::ReuseDistances;
use chunkscope::analysis::{PBS_CACHE_DEFAULT, PBS_CACHE_MAX};
use chunkscope::rng::{hash, skewed_reference};

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("mrc: run with `cargo bench --bench mrc` to measure");
        return;
    }
    let n = 10_000_000u64;
    let distinct = 1u64 << 20;
    let keys: Vec<u64> = (0..n)
        .map(|i| {
            let k = skewed_reference(7, i, n, distinct);
            k | (hash(&[k]) << 32)
        })
        .collect();
    for round in 0..3 {
        let t = Instant::now();
        let mut r = ReuseDistances::new(ReuseDistances::powers_of_two(
            1 << 24,
            &[PBS_CACHE_DEFAULT, PBS_CACHE_MAX],
        ));
        r.push_all(&keys);
        let c = r.curve();
        let secs = t.elapsed().as_secs_f64();
        println!(
            "round {round}: {} references, {} distinct, {:.2} s ({:.1} M references/s); hit ratio at 64Ki {:.3}, 1Mi {:.3}",
            c.references,
            c.distinct,
            secs,
            c.references as f64 / secs / 1e6,
            c.points.iter().find(|p| p.capacity == 1 << 16).unwrap().hit_ratio,
            c.points.iter().find(|p| p.capacity == 1 << 20).unwrap().hit_ratio,
        );
    }
}
