//! The digest cache of GC phase 1: an LRU with PBS's `LruCache::insert` semantics.
//!
//! `insert` returns true on a hit (the digest moves to the front) and false on a miss (it is
//! added at the front, and the least recently used entry is evicted when over capacity).
//! The cache is [`crate::lru::Lru`], allocated once at its full size, so never in the marking
//! loop. Its hash table holds only entry numbers (4 bytes a slot, not the 32-byte digest
//! again) and hashes a digest by mixing its first 8 bytes: a SHA-256 digest is already
//! uniform, so hashing it again is wasted work, and the smaller table stays in the CPU's
//! caches longer (BENCHMARKS.md, "The digest LRU").

use crate::datastore::Digest;
use crate::lru::{Lru, LruKey};

/// A digest's hash: its first 8 bytes, mixed (SHA-256 output is uniform already; the mix
/// keeps made-up test digests such as `[i; 32]` spread too).
impl LruKey for Digest {
    #[inline]
    fn lru_hash(&self) -> u64 {
        let x = u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes"));
        (x ^ (x >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}

/// PBS's cache of recently touched digests (`gc-cache-capacity`): a touch is skipped for a digest it holds.
pub struct DigestLru(Lru<Digest>);

impl DigestLru {
    /// A cache of `capacity` digests (at least 1, as PBS forces), allocated in full now.
    pub fn new(capacity: usize) -> DigestLru {
        let capacity = capacity.max(1);
        DigestLru(Lru::new(capacity, capacity))
    }

    /// True if `d` was cached (a hit).
    #[inline]
    pub fn insert(&mut self, d: Digest) -> bool {
        self.0.insert(d)
    }

    /// Digests held.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Bytes reserved by the cache: its hash table and node vector at their allocated sizes.
    pub fn reserved_bytes(&self) -> u64 {
        self.0.reserved_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn d(i: u8) -> Digest {
        Digest([i; 32])
    }

    #[test]
    fn evicts_least_recently_used() {
        let mut c = DigestLru::new(2);
        assert!(!c.insert(d(1)));
        assert!(!c.insert(d(2)));
        assert!(c.insert(d(1))); // 1 is now most recent
        assert!(!c.insert(d(3))); // evicts 2
        assert!(c.insert(d(1)));
        assert!(!c.insert(d(2)));
        assert_eq!(c.len(), 2);
        let mut one = DigestLru::new(0);
        assert!(!one.insert(d(1)) && one.insert(d(1)));
    }

    proptest! {
        #[test]
        fn matches_a_naive_model(ops in prop::collection::vec(0u8..20, 0..300), cap in 1usize..10) {
            let mut c = DigestLru::new(cap);
            let mut model: Vec<u8> = Vec::new(); // most recent last
            for x in ops {
                let hit = model.contains(&x);
                prop_assert_eq!(c.insert(d(x)), hit);
                model.retain(|&y| y != x);
                model.push(x);
                if model.len() > cap {
                    model.remove(0);
                }
            }
            prop_assert_eq!(c.len(), model.len());
        }
    }
}
