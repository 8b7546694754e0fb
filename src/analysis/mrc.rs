//! Exact LRU miss-ratio curves from reuse distances, in one pass.
//!
//! The reuse (stack) distance of a reference is the number of distinct keys referenced since
//! the previous reference to the same key; an LRU cache of capacity `c` hits exactly the
//! references whose distance is below `c` (Mattson et al. 1970). Distances come from a Fenwick
//! tree over positions holding a 1 at each key's most recent position: the distance is the
//! number of ones after the key's previous position. O(log n) per reference, 4 bytes per
//! position, one map entry per distinct key.
//!
//! The curve is kept at chosen capacities (the report's points), so it is exact there and the
//! memory does not grow with the largest distance.

use hashbrown::HashMap;
use serde::Serialize;

/// A Fenwick (binary indexed) tree of counts over positions 1..=n, growing on demand.
struct Fenwick {
    t: Vec<u32>,
}

impl Fenwick {
    fn add(&mut self, pos: usize, v: i32) {
        let mut i = pos;
        while i < self.t.len() {
            self.t[i] = (self.t[i] as i64 + v as i64) as u32;
            i += i & i.wrapping_neg();
        }
    }

    /// Sum over positions 1..=pos.
    fn prefix(&self, pos: usize) -> u64 {
        let mut i = pos.min(self.t.len() - 1);
        let mut s = 0u64;
        while i > 0 {
            s += self.t[i] as u64;
            i -= i & i.wrapping_neg();
        }
        s
    }

    /// Doubles the capacity, keeping the tree valid (rebuilds it from the point values).
    fn grow(&mut self) {
        let n = self.t.len() - 1;
        let mut values = vec![0u32; n + 1];
        for (i, v) in values.iter_mut().enumerate().skip(1) {
            *v = (self.prefix(i) - self.prefix(i - 1)) as u32;
        }
        let mut t = vec![0u32; 2 * n + 1];
        for i in 1..=n {
            t[i] += values[i];
            let j = i + (i & i.wrapping_neg());
            if j <= 2 * n {
                t[j] += t[i];
            }
        }
        self.t = t;
    }
}

/// Reuse distances of a key stream, summarised at fixed capacities.
pub struct ReuseDistances {
    last: HashMap<u64, u32>,
    tree: Fenwick,
    now: u32,
    /// Sorted capacities; `hits[i]` counts references with distance < `capacities[i]`... kept
    /// as a histogram over the intervals between capacities, summed at the end.
    capacities: Vec<u64>,
    between: Vec<u64>,
    cold: u64,
    refs: u64,
}

/// The miss ratio at one capacity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MrcPoint {
    pub capacity: u64,
    pub hit_ratio: f64,
    pub miss_ratio: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mrc {
    pub references: u64,
    pub distinct: u64,
    pub points: Vec<MrcPoint>,
}

impl ReuseDistances {
    /// Summarises at `capacities` (deduplicated and sorted here).
    pub fn new(mut capacities: Vec<u64>) -> ReuseDistances {
        capacities.retain(|&c| c > 0);
        capacities.sort_unstable();
        capacities.dedup();
        ReuseDistances {
            last: HashMap::new(),
            tree: Fenwick {
                t: vec![0; 1 << 16],
            },
            now: 0,
            between: vec![0; capacities.len() + 1],
            capacities,
            cold: 0,
            refs: 0,
        }
    }

    /// Powers of two from 1 to `max`, plus `extra`.
    pub fn powers_of_two(max: u64, extra: &[u64]) -> Vec<u64> {
        let mut v: Vec<u64> = (0..64)
            .map(|k| 1u64 << k)
            .take_while(|&c| c <= max)
            .collect();
        v.extend_from_slice(extra);
        v
    }

    /// Adds one reference; returns its distance (None: first reference).
    pub fn push(&mut self, key: u64) -> Option<u64> {
        self.refs += 1;
        self.now += 1;
        let now = self.now as usize;
        while now >= self.tree.t.len() {
            self.tree.grow();
        }
        let d = match self.last.insert(key, self.now) {
            Some(prev) => {
                let prev = prev as usize;
                let d = self.tree.prefix(now - 1) - self.tree.prefix(prev);
                self.tree.add(prev, -1);
                // The first capacity above d: a cache that large hits.
                let i = self.capacities.partition_point(|&c| c <= d);
                self.between[i] += 1;
                Some(d)
            }
            None => {
                self.cold += 1;
                None
            }
        };
        self.tree.add(now, 1);
        d
    }

    pub fn references(&self) -> u64 {
        self.refs
    }

    pub fn distinct(&self) -> u64 {
        self.last.len() as u64
    }

    /// The curve at the capacities given to [`ReuseDistances::new`].
    pub fn curve(&self) -> Mrc {
        let mut hits = 0u64;
        let points = self
            .capacities
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                hits += self.between[i];
                let h = hits as f64 / self.refs.max(1) as f64;
                MrcPoint {
                    capacity: c,
                    hit_ratio: h,
                    miss_ratio: 1.0 - h,
                }
            })
            .collect();
        Mrc {
            references: self.refs,
            distinct: self.distinct(),
            points,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cache::BlockLru;
    use proptest::prelude::*;

    #[test]
    fn distances_of_a_small_stream() {
        let mut r = ReuseDistances::new(vec![1, 2, 3]);
        let d: Vec<Option<u64>> = [1, 2, 1, 3, 2, 1, 1].iter().map(|&k| r.push(k)).collect();
        assert_eq!(
            d,
            vec![None, None, Some(1), None, Some(2), Some(2), Some(0)]
        );
        let c = r.curve();
        // capacity 1 hits distance 0 (1 ref); 2: nothing more; 3: distances 1, 2, 2.
        let hits: Vec<f64> = c.points.iter().map(|p| p.hit_ratio * 7.0).collect();
        assert_eq!(hits, vec![1.0, 2.0, 4.0]);
        assert_eq!((c.references, c.distinct), (7, 3));
    }

    proptest! {
        #[test]
        fn curve_equals_a_brute_force_lru(
            keys in proptest::collection::vec(0u64..300, 1..3000),
        ) {
            let caps = vec![1u64, 2, 5, 17, 64, 150, 299, 1000];
            let mut r = ReuseDistances::new(caps.clone());
            for &k in &keys {
                r.push(k);
            }
            let curve = r.curve();
            for (p, &c) in curve.points.iter().zip(&caps) {
                let mut lru = BlockLru::new(c as usize);
                let hits = keys.iter().filter(|&&k| lru.access(k)).count();
                prop_assert!((p.hit_ratio * keys.len() as f64 - hits as f64).abs() < 1e-6,
                    "capacity {}: {} vs {}", c, p.hit_ratio * keys.len() as f64, hits);
            }
        }
    }

    #[test]
    fn the_tree_grows() {
        let mut r = ReuseDistances::new(vec![10, 100_000]);
        for i in 0..200_000u64 {
            r.push(i % 70_000);
        }
        let c = r.curve();
        assert_eq!(c.points[0].hit_ratio, 0.0);
        let expect = (200_000 - 70_000) as f64 / 200_000.0;
        assert!((c.points[1].hit_ratio - expect).abs() < 1e-12);
    }
}
