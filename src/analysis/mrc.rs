//! Exact LRU miss-ratio curves from reuse distances, in one pass.
//!
//! The reuse (stack) distance of a reference is the number of distinct keys referenced since
//! the previous reference to the same key; an LRU cache of capacity `c` hits exactly the
//! references whose distance is below `c` (Mattson et al. 1970). Distances come from the set
//! of positions holding each key's most recent reference: the distance is the number of them
//! after the key's previous position, counted with a bitmap and a Fenwick tree over its cache
//! lines (`LiveSet`). O(log n) per reference in a tree that fits the cache, one bit per
//! position, one map entry per distinct key.
//!
//! The curve is kept at chosen capacities (the report's points), so it is exact there and the
//! memory does not grow with the largest distance.
//!
//! For streams too large to do exactly, SHARDS (Waldspurger et al., FAST 2015) samples keys
//! by a hash of the key: a key is kept with probability R, all of its references or none, and
//! each sampled distance is scaled by 1/R. The "adjusted" variant corrects the first bucket by
//! the difference between the expected (N·R) and the actual number of sampled references. The
//! hash is SplitMix64 of the key, so it is independent of whatever the key's bits mean (a
//! digest's first bytes pick its chunk directory).

use hashbrown::HashMap;

use super::intmap::IntMap;
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

    /// Doubles the capacity, keeping the tree valid. With n positions, n a power of two, the
    /// new nodes n+1..2n-1 cover only new (zero) positions and node 2n covers everything, so
    /// it holds the old total.
    fn grow(&mut self) {
        let n = self.t.len() - 1;
        debug_assert!(n.is_power_of_two());
        let total = self.prefix(n);
        self.t.resize(2 * n + 1, 0);
        self.t[2 * n] = total as u32;
    }
}

impl Fenwick {
    /// The smallest position whose prefix sum reaches 1 (the oldest live position); the tree's
    /// size must be a power of two plus one.
    fn first_one(&self) -> usize {
        let n = self.t.len() - 1;
        let (mut pos, mut rest) = (0usize, 1u64);
        let mut step = n.next_power_of_two();
        while step > 0 {
            if pos + step <= n && (self.t[pos + step] as u64) < rest {
                pos += step;
                rest -= self.t[pos] as u64;
            }
            step >>= 1;
        }
        pos + 1
    }
}

/// The positions that hold a key's most recent reference, as a bitmap with a Fenwick tree of
/// counts over its 512-bit lines (one cache line each). Counting the ones before a position
/// walks the small tree (one count per 512 positions: 80 KB for 10 M positions, which stays
/// in the L2 cache) and counts the bits of one line, where a tree of one counter per
/// position (40 MB) missed the cache at most of its steps.
struct LiveSet {
    bits: Vec<u64>,
    /// Ones per line; its size is the number of lines (a power of two) plus one.
    lines: Fenwick,
    ones: u64,
}

/// Words of the bitmap per line of [`LiveSet`] (512 bits, 64 bytes).
const LINE_WORDS: usize = 8;
const LINE_SHIFT: u32 = 9;

impl LiveSet {
    fn new() -> LiveSet {
        let lines = 256;
        LiveSet {
            bits: vec![0; lines * LINE_WORDS],
            lines: Fenwick {
                t: vec![0; lines + 1],
            },
            ones: 0,
        }
    }

    /// Makes room for position `pos` (doubling).
    #[inline]
    fn reserve(&mut self, pos: usize) {
        while pos >= self.bits.len() * 64 {
            self.lines.grow();
            self.bits.resize(self.bits.len() * 2, 0);
        }
    }

    #[inline]
    fn set(&mut self, pos: usize) {
        self.bits[pos >> 6] |= 1 << (pos & 63);
        self.lines.add((pos >> LINE_SHIFT) + 1, 1);
        self.ones += 1;
    }

    #[inline]
    fn clear(&mut self, pos: usize) {
        self.bits[pos >> 6] &= !(1 << (pos & 63));
        self.lines.add((pos >> LINE_SHIFT) + 1, -1);
        self.ones -= 1;
    }

    /// The ones at positions after `pos`.
    #[inline]
    fn after(&self, pos: usize) -> u64 {
        let line = pos >> LINE_SHIFT;
        let mut before = self.lines.prefix(line);
        let (first, word) = (line * LINE_WORDS, pos >> 6);
        for w in &self.bits[first..word] {
            before += w.count_ones() as u64;
        }
        // The bits of `pos`'s word up to and including `pos`.
        let upto = self.bits[word] & (u64::MAX >> (63 - (pos & 63)));
        before += upto.count_ones() as u64;
        self.ones - before
    }
}

/// Exact reuse distances below `k`: an LRU stack of the `k` most recent keys, numbered by
/// position in a fixed Fenwick tree that is renumbered when full. Keys that fall out of the top
/// `k` are forgotten, so memory is O(k) whatever the stream.
struct NearDistances {
    k: usize,
    last: HashMap<u64, u32>,
    key_at: Vec<u64>,
    tree: Fenwick,
    now: u32,
}

impl NearDistances {
    fn new(k: usize) -> NearDistances {
        let size = (4 * k).next_power_of_two();
        NearDistances {
            k,
            last: HashMap::with_capacity(k + 1),
            key_at: vec![0; size + 1],
            tree: Fenwick {
                t: vec![0; size + 1],
            },
            now: 0,
        }
    }

    /// Renumbers the live keys 1..=live in recency order.
    fn compact(&mut self) {
        let mut live: Vec<(u32, u64)> = self.last.iter().map(|(&k, &p)| (p, k)).collect();
        live.sort_unstable();
        self.tree.t.fill(0);
        for (i, &(_, key)) in live.iter().enumerate() {
            let pos = i + 1;
            self.key_at[pos] = key;
            self.last.insert(key, pos as u32);
            self.tree.add(pos, 1);
        }
        self.now = live.len() as u32;
    }

    /// The distance of `key` if it is below `k`.
    #[inline]
    fn push(&mut self, key: u64) -> Option<u64> {
        if self.now as usize + 1 >= self.key_at.len() {
            self.compact();
        }
        self.now += 1;
        let now = self.now as usize;
        let d = match self.last.insert(key, self.now) {
            Some(prev) => {
                let prev = prev as usize;
                let d = self.tree.prefix(now - 1) - self.tree.prefix(prev);
                self.tree.add(prev, -1);
                Some(d)
            }
            None => {
                if self.last.len() > self.k {
                    let oldest = self.tree.first_one();
                    self.tree.add(oldest, -1);
                    self.last.remove(&self.key_at[oldest]);
                }
                None
            }
        };
        self.key_at[now] = key;
        self.tree.add(now, 1);
        d
    }
}

/// Reuse distances of a key stream, summarised at fixed capacities.
pub struct ReuseDistances {
    /// Each key's most recent position (one slot a key, prefetched ahead of its push).
    last: IntMap<u32>,
    live: LiveSet,
    now: u32,
    /// Sorted capacities; `hits[i]` counts references with distance < `capacities[i]`... kept
    /// as a histogram over the intervals between capacities, summed at the end.
    capacities: Vec<u64>,
    /// `by_len[b]`: how many capacities have fewer than `b` significant bits (see
    /// [`ReuseDistances::bucket`]).
    by_len: [u8; 66],
    between: Vec<u64>,
    cold: u64,
    refs: u64,
    /// SHARDS: keep a key when `mix(key) & (MODULUS - 1) < threshold`; `rate = threshold /
    /// MODULUS` (1: exact).
    threshold: u64,
    rate: f64,
    sampled: u64,
    /// When sampling: distances below `near.k` are counted exactly on the whole stream
    /// (`near_between`, per capacity interval), because SHARDS cannot resolve distances below
    /// about 1/R; `sampled_below_near` counts sampled references with scaled distance below k.
    near: Option<NearDistances>,
    near_between: Vec<u64>,
    sampled_below_near: u64,
}

const MODULUS: u64 = 1 << 24;

/// How many keys ahead a stream of pushes prefetches: enough misses in flight to cover the
/// memory latency, few enough that the lines are still cached when their push comes.
pub const PREFETCH_AHEAD: usize = 16;

/// The miss ratio at one capacity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MrcPoint {
    /// The cache's capacity (keys).
    pub capacity: u64,
    /// Share of references an LRU of that capacity hits.
    pub hit_ratio: f64,
    /// Share it misses (1 - hit ratio).
    pub miss_ratio: f64,
    /// Memory a cache of this capacity takes, where the caller knows it (0 otherwise).
    pub bytes: u64,
}

/// A miss-ratio curve: the miss ratio of an LRU cache by capacity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mrc {
    /// References (accesses) the curve is over.
    pub references: u64,
    /// Distinct keys (estimated from the sample when `sample_rate` < 1).
    pub distinct: u64,
    /// SHARDS sampling rate (1: exact).
    pub sample_rate: f64,
    /// The curve, by increasing capacity.
    pub points: Vec<MrcPoint>,
}

impl Mrc {
    /// The hit ratio at `capacity` if the curve has that point (0 otherwise).
    pub fn hit_at(&self, capacity: u64) -> f64 {
        self.points
            .iter()
            .find(|x| x.capacity == capacity)
            .map_or(0.0, |x| x.hit_ratio)
    }
}

impl ReuseDistances {
    /// Summarises at `capacities` (deduplicated and sorted here), exactly.
    pub fn new(capacities: Vec<u64>) -> ReuseDistances {
        ReuseDistances::sampled(capacities, 1.0)
    }

    /// Summarises with SHARDS at `rate` (in (0, 1]; 1 is exact; rounded to a multiple of 2^-24).
    pub fn sampled(mut capacities: Vec<u64>, rate: f64) -> ReuseDistances {
        let threshold = ((rate.clamp(0.0, 1.0) * MODULUS as f64).round() as u64).max(1);
        capacities.retain(|&c| c > 0);
        capacities.sort_unstable();
        capacities.dedup();
        let mut by_len = [0u8; 66];
        for (b, n) in by_len.iter_mut().enumerate() {
            let below = capacities.partition_point(|&c| 64 - c.leading_zeros() < b as u32);
            *n = below.min(u8::MAX as usize) as u8;
        }
        assert!(
            capacities.len() < u8::MAX as usize,
            "at most 254 capacities"
        );
        ReuseDistances {
            by_len,
            last: IntMap::default(),
            live: LiveSet::new(),
            now: 0,
            between: vec![0; capacities.len() + 1],
            capacities,
            cold: 0,
            refs: 0,
            threshold,
            rate: threshold as f64 / MODULUS as f64,
            sampled: 0,
            near: (threshold < MODULUS).then(|| {
                NearDistances::new(
                    ((64.0 * MODULUS as f64 / threshold as f64) as usize).clamp(4096, 1 << 20),
                )
            }),
            near_between: Vec::new(),
            sampled_below_near: 0,
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

    /// Adds one reference; returns its distance (None: first reference, or a key outside the
    /// sample). Sampled distances are in the sample's units (scaled by 1/rate when counted).
    #[inline]
    pub fn push(&mut self, key: u64) -> Option<u64> {
        self.refs += 1;
        if let Some(near) = &mut self.near {
            if let Some(d) = near.push(key) {
                let i = self.bucket(d);
                if self.near_between.is_empty() {
                    self.near_between = vec![0; self.capacities.len() + 1];
                }
                self.near_between[i] += 1;
            }
            if crate::rng::mix(key) & (MODULUS - 1) >= self.threshold {
                return None;
            }
        }
        self.sampled += 1;
        self.now += 1;
        let now = self.now as usize;
        self.live.reserve(now);
        let d = match self.last.insert(key, self.now) {
            Some(prev) => {
                let prev = prev as usize;
                // The keys referenced since: each has its one live position after `prev`.
                let d = self.live.after(prev);
                self.live.clear(prev);
                // The first capacity above d: a cache that large hits.
                let scaled = if self.threshold < MODULUS {
                    (d as f64 / self.rate) as u64
                } else {
                    d
                };
                if let Some(near) = &self.near {
                    self.sampled_below_near += (scaled < near.k as u64) as u64;
                }
                let i = self.bucket(scaled);
                self.between[i] += 1;
                Some(d)
            }
            None => {
                self.cold += 1;
                None
            }
        };
        self.live.set(now);
        d
    }

    /// How many capacities are at most `d` (the interval of `between` that `d` falls in):
    /// those shorter in bits than `d` all are, longer ones none; of those as long, a few
    /// compares (a binary search over all of them was a sixth of a push).
    #[inline]
    fn bucket(&self, d: u64) -> usize {
        let b = (64 - d.leading_zeros()) as usize;
        let (mut i, end) = (self.by_len[b] as usize, self.by_len[b + 1] as usize);
        while i < end && self.capacities[i] <= d {
            i += 1;
        }
        i
    }

    /// Brings what [`ReuseDistances::push`] of `key` reads into the cache: call it for a key
    /// a few pushes ahead, so that the pushes in between hide its memory latency.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        self.last.prefetch(key);
    }

    /// Pushes every key of `keys`, in order, each prefetched [`PREFETCH_AHEAD`] keys before.
    pub fn push_all(&mut self, keys: &[u64]) {
        for (i, &k) in keys.iter().enumerate() {
            if let Some(&ahead) = keys.get(i + PREFETCH_AHEAD) {
                self.prefetch(ahead);
            }
            self.push(k);
        }
    }

    /// References counted so far.
    pub fn references(&self) -> u64 {
        self.refs
    }

    /// Distinct keys (estimated from the sample when sampling).
    pub fn distinct(&self) -> u64 {
        (self.last.len() as f64 / self.rate).round() as u64
    }

    /// The curve at the capacities given to [`ReuseDistances::new`].
    pub fn curve(&self) -> Mrc {
        // Exact: hits / refs. Sampled: below k, the exact near distances; from k on, those plus
        // the sampled references whose scaled distance is in [k, c), over the references the
        // sample should hold (refs·R; SHARDS-adj's correction falls below k, where it cancels).
        let refs = self.refs.max(1) as f64;
        let expected = (self.refs as f64 * self.rate).max(1e-9);
        let near_total: u64 = self.near_between.iter().sum();
        let (mut hits, mut near_hits) = (0u64, 0u64);
        let points = self
            .capacities
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                hits += self.between[i];
                near_hits += self.near_between.get(i).copied().unwrap_or(0);
                let h = match &self.near {
                    None => hits as f64 / refs,
                    Some(near) if c <= near.k as u64 => near_hits as f64 / refs,
                    Some(_) => {
                        near_total as f64 / refs
                            + (hits.saturating_sub(self.sampled_below_near)) as f64 / expected
                    }
                };
                let h = h.clamp(0.0, 1.0);
                MrcPoint {
                    capacity: c,
                    hit_ratio: h,
                    miss_ratio: 1.0 - h,
                    bytes: 0,
                }
            })
            .collect();
        Mrc {
            references: self.refs,
            distinct: self.distinct(),
            sample_rate: self.rate,
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

    /// A seeded stream shaped like phase 1: indexes that share most of their digests with the
    /// previous backup of the same group (a sliding window over a growing key space), some
    /// repeats inside an index (zero chunks), and a hot set.
    fn gc_like_stream(refs: usize, seed: u64) -> Vec<u64> {
        use crate::rng::{hash, unit};
        let mut out = Vec::with_capacity(refs);
        let mut i = 0u64;
        while out.len() < refs {
            let h = hash(&[seed, i]);
            let u = unit(h);
            let key = if u < 0.6 {
                // Sliding window: the last 200k keys, recent ones likelier.
                let back = (unit(hash(&[seed, i, 1])).powi(3) * 200_000.0) as u64;
                (i / 3).saturating_sub(back)
            } else if u < 0.9 {
                i / 3 + 1_000_000
            } else {
                2_000_000 + (unit(hash(&[seed, i, 2])) * 5_000.0) as u64
            };
            out.push(key);
            i += 1;
        }
        out
    }

    #[test]
    fn shards_at_one_percent_is_within_a_hundredth_of_exact() {
        let keys = gc_like_stream(3_000_000, 42);
        let caps = ReuseDistances::powers_of_two(1 << 22, &[]);
        let mut exact = ReuseDistances::new(caps.clone());
        let mut shards = ReuseDistances::sampled(caps, 0.01);
        for &k in &keys {
            exact.push(k);
            shards.push(k);
        }
        let (e, s) = (exact.curve(), shards.curve());
        assert!(
            shards.last.len() < exact.last.len() / 50,
            "the sample is small"
        );
        assert!((s.sample_rate - 0.01).abs() < 1e-6);
        let errors: Vec<f64> = e
            .points
            .iter()
            .zip(&s.points)
            .map(|(a, b)| (a.miss_ratio - b.miss_ratio).abs())
            .collect();
        let mae = errors.iter().sum::<f64>() / errors.len() as f64;
        // The curve is not trivial: it falls from near 1 to well below.
        assert!(e.points[0].miss_ratio > 0.8 && e.points.last().unwrap().miss_ratio < 0.6);
        eprintln!("SHARDS 1%: mean absolute error {mae:.5}");
        assert!(mae < 0.01, "mean absolute error {mae}: {errors:?}");
        let d = s.distinct as f64 / e.distinct as f64;
        assert!((0.9..1.1).contains(&d), "distinct estimate off by {d}");
    }

    proptest! {
        #[test]
        fn near_distances_are_exact_below_k(
            keys in proptest::collection::vec(0u64..40, 1..2000),
            k in 1usize..20,
        ) {
            let mut near = NearDistances::new(k);
            let mut exact = ReuseDistances::new(vec![1]);
            for &key in &keys {
                let e = exact.push(key).filter(|&d| d < k as u64);
                prop_assert_eq!(near.push(key), e);
                prop_assert!(near.last.len() <= k);
            }
        }
    }

    proptest! {
        /// The bitmap and its line counts agree with a plain set, across lines and growth.
        #[test]
        fn the_live_set_counts_what_is_after_a_position(
            ops in proptest::collection::vec((0usize..300_000, any::<bool>()), 1..400),
        ) {
            let mut live = LiveSet::new();
            let mut plain = std::collections::BTreeSet::new();
            for &(pos, set) in &ops {
                live.reserve(pos);
                match (set, plain.contains(&pos)) {
                    (true, false) => { live.set(pos); plain.insert(pos); }
                    (false, true) => { live.clear(pos); plain.remove(&pos); }
                    _ => {}
                }
                let want = plain.range(pos + 1..).count() as u64;
                prop_assert_eq!(live.after(pos), want);
                prop_assert_eq!(live.ones, plain.len() as u64);
            }
        }
    }

    proptest! {
        /// The bucket of a distance is where a binary search over the capacities puts it.
        #[test]
        fn buckets_are_the_capacities_at_most_the_distance(
            caps in proptest::collection::vec(1u64..u64::MAX, 0..40),
            ds in proptest::collection::vec(any::<u64>(), 1..50),
            small in proptest::collection::vec(0u64..5000, 1..50),
        ) {
            let r = ReuseDistances::new(caps.into_iter().chain([1, 2, 3, 1000, 4096]).collect());
            for d in ds.into_iter().chain(small).chain([0, 1, 2, 4095, 4096, u64::MAX]) {
                prop_assert_eq!(r.bucket(d), r.capacities.partition_point(|&c| c <= d), "d {}", d);
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
