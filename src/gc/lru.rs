//! The digest cache of GC phase 1: an LRU with PBS's `LruCache::insert` semantics.
//!
//! `insert` returns true on a hit (the digest moves to the front) and false on a miss (it is
//! added at the front, and the least recently used entry is evicted when over capacity).
//! Nodes live in one vector with indices for links and a free list, so the cache allocates
//! once at its full size and never in the marking loop. The hash table holds only node
//! numbers (4 bytes a slot, not the 32-byte digest again) and hashes a digest by mixing its
//! first 8 bytes: a SHA-256 digest is already uniform, so hashing it again is wasted work, and
//! the smaller table stays in the CPU's caches longer (BENCHMARKS.md, "The digest LRU").

use hashbrown::HashTable;

use crate::datastore::Digest;

const NIL: u32 = u32::MAX;

/// A digest's hash: its first 8 bytes, mixed (SHA-256 output is uniform already; the mix
/// keeps made-up test digests such as `[i; 32]` spread too).
#[inline]
fn hash(d: &Digest) -> u64 {
    let x = u64::from_le_bytes(d.0[..8].try_into().expect("8 bytes"));
    (x ^ (x >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

struct Node {
    digest: Digest,
    prev: u32,
    next: u32,
}

pub struct DigestLru {
    map: HashTable<u32>,
    nodes: Vec<Node>,
    head: u32,
    tail: u32,
    capacity: usize,
}

impl DigestLru {
    /// A cache of `capacity` digests (at least 1, as PBS forces).
    pub fn new(capacity: usize) -> DigestLru {
        let capacity = capacity.max(1);
        DigestLru {
            map: HashTable::with_capacity(capacity),
            nodes: Vec::with_capacity(capacity),
            head: NIL,
            tail: NIL,
            capacity,
        }
    }

    fn unlink(&mut self, i: u32) {
        let (p, n) = (self.nodes[i as usize].prev, self.nodes[i as usize].next);
        if p == NIL {
            self.head = n;
        } else {
            self.nodes[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.nodes[n as usize].prev = p;
        }
    }

    fn push_front(&mut self, i: u32) {
        self.nodes[i as usize].prev = NIL;
        self.nodes[i as usize].next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    /// True if `d` was cached (a hit).
    pub fn insert(&mut self, d: Digest) -> bool {
        let h = hash(&d);
        let nodes = &self.nodes;
        if let Some(&i) = self.map.find(h, |&j| nodes[j as usize].digest == d) {
            if self.head != i {
                self.unlink(i);
                self.push_front(i);
            }
            return true;
        }
        let i = if self.nodes.len() < self.capacity {
            self.nodes.push(Node {
                digest: d,
                prev: NIL,
                next: NIL,
            });
            (self.nodes.len() - 1) as u32
        } else {
            // Reuse the least recently used node.
            let t = self.tail;
            self.unlink(t);
            let old = hash(&self.nodes[t as usize].digest);
            if let Ok(e) = self.map.find_entry(old, |&j| j == t) {
                e.remove();
            }
            self.nodes[t as usize].digest = d;
            t
        };
        let nodes = &self.nodes;
        self.map
            .insert_unique(h, i, |&j| hash(&nodes[j as usize].digest));
        self.push_front(i);
        false
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Bytes reserved by the cache: its hash table and node vector at their allocated sizes.
    pub fn reserved_bytes(&self) -> u64 {
        let slot = std::mem::size_of::<u32>() + 1; // entry plus control byte
        (self.map.capacity() * slot + self.nodes.capacity() * std::mem::size_of::<Node>()) as u64
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
