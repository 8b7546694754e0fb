//! The LRU under both of chunkscope's caches: the GC's digest cache ([`crate::gc::lru`]) and
//! the cost model's metadata blocks ([`crate::model::cache`]).
//!
//! Entries live in one vector, linked by index, with a hash table of entry numbers (4 bytes a
//! slot; the key is compared in its entry, whose line a hit reads and relinks anyway). The
//! least recently used entry is reused in place: once full, the cache never allocates.

use hashbrown::HashTable;

const NIL: u32 = u32::MAX;

/// A key of an [`Lru`]: its own hash (keys here are digests, uniform already, or block
/// numbers, which only need mixing).
pub trait LruKey: Copy + Eq {
    /// The key's hash (uniform over the 64 bits).
    fn lru_hash(&self) -> u64;
}

#[derive(Clone)]
struct Entry<K> {
    key: K,
    prev: u32,
    next: u32,
}

/// An LRU set of at most a fixed number of keys: entries in one vector, linked by index; no allocation once full.
#[derive(Clone)]
pub struct Lru<K> {
    map: HashTable<u32>,
    entries: Vec<Entry<K>>,
    head: u32,
    tail: u32,
    capacity: usize,
}

impl<K: LruKey> Lru<K> {
    /// `capacity` entries (0 caches nothing), with room for `reserve` of them allocated now.
    pub fn new(capacity: usize, reserve: usize) -> Lru<K> {
        let reserve = reserve.min(capacity);
        Lru {
            map: HashTable::with_capacity(reserve),
            entries: Vec::with_capacity(reserve),
            head: NIL,
            tail: NIL,
            capacity,
        }
    }

    fn unlink(&mut self, i: u32) {
        let (p, n) = (self.entries[i as usize].prev, self.entries[i as usize].next);
        if p == NIL {
            self.head = n;
        } else {
            self.entries[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.entries[n as usize].prev = p;
        }
    }

    fn push_front(&mut self, i: u32) {
        self.entries[i as usize].prev = NIL;
        self.entries[i as usize].next = self.head;
        if self.head != NIL {
            self.entries[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    #[inline]
    fn find(&self, key: &K) -> Option<u32> {
        let entries = &self.entries;
        self.map
            .find(key.lru_hash(), |&i| entries[i as usize].key == *key)
            .copied()
    }

    /// True if `key` was cached (a hit: it becomes the most recent); false if not (it is
    /// added as the most recent, evicting the least recent when full).
    pub fn insert(&mut self, key: K) -> bool {
        if let Some(i) = self.find(&key) {
            if i != self.head {
                self.unlink(i);
                self.push_front(i);
            }
            return true;
        }
        if self.capacity == 0 {
            return false;
        }
        let i = if self.entries.len() < self.capacity {
            self.entries.push(Entry {
                key,
                prev: NIL,
                next: NIL,
            });
            (self.entries.len() - 1) as u32
        } else {
            let t = self.tail;
            self.unlink(t);
            // The tail's own entry number is what the map holds for its key.
            let old = self.entries[t as usize].key.lru_hash();
            if let Ok(slot) = self.map.find_entry(old, |&j| j == t) {
                slot.remove();
            }
            self.entries[t as usize].key = key;
            t
        };
        let entries = &self.entries;
        self.map
            .insert_unique(key.lru_hash(), i, |&j| entries[j as usize].key.lru_hash());
        self.push_front(i);
        false
    }

    /// True if cached, without changing recency.
    pub fn contains(&self, key: &K) -> bool {
        self.find(key).is_some()
    }

    /// Forgets every key (the capacity stays allocated).
    pub fn clear(&mut self) {
        self.map.clear();
        self.entries.clear();
        self.head = NIL;
        self.tail = NIL;
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Bytes reserved: the hash table and the entry vector at their allocated sizes.
    pub fn reserved_bytes(&self) -> u64 {
        let slot = std::mem::size_of::<u32>() + 1; // entry number plus control byte
        (self.map.capacity() * slot + self.entries.capacity() * std::mem::size_of::<Entry<K>>())
            as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    impl LruKey for u16 {
        fn lru_hash(&self) -> u64 {
            (*self as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        }
    }

    proptest! {
        /// Against a list kept in recency order, capacity 0 included.
        #[test]
        fn matches_a_recency_list(
            ops in prop::collection::vec(0u16..40, 0..3000),
            cap in 0usize..24,
        ) {
            let mut c = Lru::<u16>::new(cap, 8);
            let mut model: Vec<u16> = Vec::new(); // most recent last
            for x in ops {
                let hit = model.contains(&x);
                prop_assert_eq!(c.insert(x), hit);
                prop_assert_eq!(c.contains(&x), cap > 0);
                model.retain(|&y| y != x);
                if cap > 0 {
                    model.push(x);
                }
                if model.len() > cap {
                    model.remove(0);
                }
            }
            prop_assert_eq!(c.len(), model.len());
            for y in 0u16..40 {
                prop_assert_eq!(c.contains(&y), model.contains(&y));
            }
        }
    }
}
