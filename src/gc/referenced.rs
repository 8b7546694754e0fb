//! The set of referenced digests, collected while indexes are read, so that the sweep knows a
//! chunk is unreferenced before it removes it, whatever the atimes say (ARCHITECTURE.md,
//! invariant 9).
//!
//! Atimes are PBS's mechanism: a touch that failed with an injected or spurious ENOENT, a sweep
//! run without a mark, or a mark on a `--shadow` mount leave a referenced chunk with an old
//! atime, and PBS would remove it. This set is chunkscope's guarantee on top of that.
//!
//! It holds, for each digest, its first 9 bytes: the first picks one of 256 stripes, the next
//! 8 are a `u64` key in the stripe's vector. A garbage chunk is kept by mistake only when its
//! 72 leading bits equal a referenced digest's: false positives can only keep garbage, never
//! remove a referenced chunk, and with SHA-256 digests their chance is about `n / 2^72` per
//! garbage chunk for `n` referenced chunks (1.5e-14 at datastore A's 72 M).
//!
//! Inserting is a push to the stripe's vector (no hashing, no allocation once the vectors have
//! grown): the 256 vectors' ends are 256 cache lines, which stay in cache beside the GC's
//! digest LRU and the model's block cache (one vector per chunk directory, as before, wrote to
//! 65,536 lines at random and cost phase 1's two LRUs their cached lines: BENCHMARKS.md, "The
//! referenced set"). A vector is sorted and deduplicated in place when it fills, so duplicates
//! (the naive strategy inserts every reference) cost at most twice the distinct entries.
//! Only a [`SealedSet`] answers lookups: [`ReferencedSet::seal`] turns the set being filled
//! into one, so no lookup can meet keys that were never sorted (a set asked before its seal
//! would answer "not referenced").
//! Lookups in the sweep are a binary search among one chunk directory's keys (the seal notes
//! where each directory's keys start in its stripe). Memory: 8 bytes per referenced chunk at
//! best, 16 at worst (BENCHMARKS.md, "The referenced set").

use crate::datastore::Digest;

/// Stripes: one per value of a digest's first byte.
const STRIPES: usize = 256;

/// Referenced digests, by their first byte, as phase 1 inserts them; [`ReferencedSet::seal`]
/// makes the [`SealedSet`] the sweep asks.
pub struct ReferencedSet {
    stripes: Vec<Stripe>,
}

/// The referenced digests once every index was read: sorted, deduplicated, searchable.
pub struct SealedSet {
    stripes: Vec<Stripe>,
    /// Keys in the stripes before each one: a key's place among all ([`SealedSet::position`]).
    before: Vec<u64>,
}

#[derive(Default)]
struct Stripe {
    /// Keys; `..sorted` is sorted and free of duplicates, the rest was pushed since.
    keys: Vec<u64>,
    sorted: usize,
    /// In a [`SealedSet`]: where the keys of each value of the key's top byte (the
    /// digest's second: one chunk directory) start, and the end; empty before.
    starts: Vec<u32>,
}

/// The stripe and key of a digest: its first byte, and its next 8 as a big-endian `u64`.
#[inline]
fn split(d: &Digest) -> (usize, u64) {
    let key = u64::from_be_bytes(d.0[1..9].try_into().expect("8 bytes"));
    (d.0[0] as usize, key)
}

/// The key's top byte: which of the stripe's 256 chunk directories.
#[inline]
fn stripe_dir(key: u64) -> usize {
    (key >> 56) as usize
}

impl Stripe {
    fn compact(&mut self) {
        if self.sorted == self.keys.len() {
            return;
        }
        // A sorted run and an unsorted tail: the stable sort sorts the tail and merges the two.
        self.keys.sort();
        self.keys.dedup();
        self.sorted = self.keys.len();
    }

    #[inline]
    fn push(&mut self, key: u64) {
        if self.keys.len() == self.keys.capacity() && self.keys.len() >= 64 {
            // Full: make room by dropping duplicates before growing.
            self.compact();
            if self.keys.len() <= self.keys.capacity() / 2 {
                self.keys.push(key);
                return;
            }
        }
        self.keys.push(key);
    }
}

impl Default for ReferencedSet {
    fn default() -> Self {
        ReferencedSet::new()
    }
}

impl ReferencedSet {
    /// An empty set.
    pub fn new() -> ReferencedSet {
        ReferencedSet {
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
        }
    }

    /// Adds a referenced digest (duplicates are fine).
    #[inline]
    pub fn insert(&mut self, d: &Digest) {
        let (stripe, key) = split(d);
        self.stripes[stripe].push(key);
    }

    /// Sorts and deduplicates what was inserted: the set the sweep asks.
    pub fn seal(mut self) -> SealedSet {
        for s in &mut self.stripes {
            s.compact();
            s.keys.shrink_to_fit();
            // One chunk directory's keys, for a search in a few hundred rather than a stripe.
            s.starts.clear();
            s.starts
                .extend((0..=256u64).map(|b| s.keys.partition_point(|&k| k >> 56 < b) as u32));
        }
        let before = self
            .stripes
            .iter()
            .scan(0u64, |n, s| {
                let at = *n;
                *n += s.keys.len() as u64;
                Some(at)
            })
            .collect();
        SealedSet {
            stripes: self.stripes,
            before,
        }
    }

    /// Heap bytes held now.
    pub fn heap_bytes(&self) -> u64 {
        heap_bytes(&self.stripes)
    }
}

impl SealedSet {
    /// Whether `d` may be referenced: always true for a digest that was inserted; true for
    /// another one only by a collision of 72 bits.
    #[inline]
    pub fn contains(&self, d: &Digest) -> bool {
        let (stripe, key) = split(d);
        let s = &self.stripes[stripe];
        let range = &s.starts[stripe_dir(key)..stripe_dir(key) + 2];
        s.keys[range[0] as usize..range[1] as usize]
            .binary_search(&key)
            .is_ok()
    }

    /// Where `d` stands among the keys held, `0..len()`, if it is one of them: a place for a
    /// bit of one's own per referenced chunk (which of them a bucket's listing met).
    #[inline]
    pub fn position(&self, d: &Digest) -> Option<u64> {
        let (stripe, key) = split(d);
        let s = &self.stripes[stripe];
        let range = &s.starts[stripe_dir(key)..stripe_dir(key) + 2];
        let (from, to) = (range[0] as usize, range[1] as usize);
        let i = s.keys[from..to].binary_search(&key).ok()?;
        Some(self.before[stripe] + (from + i) as u64)
    }

    /// Distinct keys held.
    pub fn len(&self) -> u64 {
        self.stripes.iter().map(|s| s.keys.len() as u64).sum()
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> u64 {
        heap_bytes(&self.stripes)
    }

    /// Back to a set that takes inserts (its keys stay sorted; only new ones are pushed).
    pub fn reopen(self) -> ReferencedSet {
        ReferencedSet {
            stripes: self.stripes,
        }
    }
}

fn heap_bytes(stripes: &Vec<Stripe>) -> u64 {
    (stripes.capacity() * std::mem::size_of::<Stripe>()) as u64
        + stripes
            .iter()
            .map(|s| (s.keys.capacity() * 8 + s.starts.capacity() * 4) as u64)
            .sum::<u64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn digest(i: u64) -> Digest {
        Digest::of(&i.to_le_bytes())
    }

    #[test]
    fn holds_what_was_inserted_and_little_else() {
        let mut s = ReferencedSet::new();
        for _ in 0..5 {
            for i in 0..20_000 {
                s.insert(&digest(i));
            }
        }
        let s = s.seal();
        assert_eq!(s.len(), 20_000, "duplicates dropped");
        assert!((0..20_000).all(|i| s.contains(&digest(i))));
        assert!((20_000..40_000).all(|i| !s.contains(&digest(i))));
        // 8 bytes a digest, plus the vectors' headers.
        assert!(
            s.heap_bytes() < 20_000 * 8 + 65_536 * 40,
            "{}",
            s.heap_bytes()
        );
    }

    /// Each digest held has a place of its own in `0..len()`; others have none.
    #[test]
    fn positions_number_the_digests_held() {
        let mut s = ReferencedSet::new();
        for i in 0..5_000 {
            s.insert(&digest(i));
        }
        let s = s.seal();
        let mut seen = vec![false; s.len() as usize];
        for i in 0..5_000 {
            let p = s.position(&digest(i)).expect("held") as usize;
            assert!(!seen[p], "{i}: place {p} twice");
            seen[p] = true;
        }
        assert!(seen.iter().all(|&x| x));
        assert!((5_000..6_000).all(|i| s.position(&digest(i)).is_none()));
    }

    /// The set tells digests apart by their first 72 bits (the stripe's byte and the key's
    /// eight): a difference there is seen, one after it is not (a false positive, which only
    /// keeps garbage).
    #[test]
    fn compares_the_first_72_bits() {
        let mut s = ReferencedSet::new();
        let d = digest(1);
        s.insert(&d);
        let s = s.seal();
        for byte in 0..9 {
            let mut other = d;
            other.0[byte] ^= 0x01;
            assert!(!s.contains(&other), "byte {byte} differs");
        }
        let mut beyond = d;
        beyond.0[9] ^= 0xff;
        beyond.0[31] ^= 0xff;
        assert!(s.contains(&beyond), "bytes 9.. are not kept");
    }

    proptest! {
        #[test]
        // A seal after one insert in 50, about 20 a case between the stripes' growth: a seal
        // after every other insert made this test 15 s of the unit tests' 20 (0.8 s now).
        fn never_forgets_an_inserted_digest(ops in prop::collection::vec((0u64..300, prop::bool::weighted(0.02)), 0..2000)) {
            let mut s = ReferencedSet::new();
            let mut truth = std::collections::HashSet::new();
            for (i, seal) in ops {
                // Few stripes, so that they fill, compact and grow.
                let mut d = digest(i);
                d.0[0] = (i % 3) as u8;
                s.insert(&d);
                truth.insert(d);
                if seal {
                    let sealed = s.seal();
                    prop_assert!(truth.iter().all(|d| sealed.contains(d)));
                    s = sealed.reopen();
                }
            }
            let s = s.seal();
            prop_assert!(truth.iter().all(|d| s.contains(d)));
            prop_assert_eq!(s.len(), truth.len() as u64);
        }
    }
}
