//! An LRU of metadata block ids, allocated once at its capacity.
//!
//! ZFS's ARC is not an LRU (it balances recency and frequency lists and adapts between them);
//! an LRU is the simplest deterministic stand-in, and the one whose miss-ratio curve the
//! analysis computes, so model and analysis agree on what "cache size" means.

use hashbrown::HashTable;

const NIL: u32 = u32::MAX;

/// A cached block and its neighbours in recency order: one cache line holds what a hit
/// reads and relinks of it.
#[derive(Clone, Copy)]
struct Entry {
    block: u64,
    prev: u32,
    next: u32,
}

#[derive(Clone)]
pub struct BlockLru {
    /// Entry numbers, by a hash of their block.
    map: HashTable<u32>,
    entries: Vec<Entry>,
    head: u32,
    tail: u32,
    capacity: usize,
}

/// Block ids have structure in their high and low bits (kinds, directory and leaf numbers):
/// mixed, so that both ends of the hash vary.
#[inline]
fn mix(block: u64) -> u64 {
    let x = (block ^ (block >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

impl BlockLru {
    /// `capacity` blocks; 0 caches nothing.
    pub fn new(capacity: usize) -> BlockLru {
        BlockLru {
            map: HashTable::with_capacity(capacity.min(1 << 24)),
            entries: Vec::new(),
            head: NIL,
            tail: NIL,
            capacity,
        }
    }

    fn unlink(&mut self, i: u32) {
        let Entry { prev, next, .. } = self.entries[i as usize];
        if prev == NIL {
            self.head = next
        } else {
            self.entries[prev as usize].next = next
        }
        if next == NIL {
            self.tail = prev
        } else {
            self.entries[next as usize].prev = prev
        }
    }

    fn push_front(&mut self, i: u32) {
        let head = self.head;
        let e = &mut self.entries[i as usize];
        e.prev = NIL;
        e.next = head;
        if head != NIL {
            self.entries[head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    #[inline]
    fn find(&self, block: u64) -> Option<u32> {
        let entries = &self.entries;
        self.map
            .find(mix(block), |&i| entries[i as usize].block == block)
            .copied()
    }

    /// True if `block` was cached; either way it is now the most recent.
    pub fn access(&mut self, block: u64) -> bool {
        if let Some(i) = self.find(block) {
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
                block,
                prev: NIL,
                next: NIL,
            });
            (self.entries.len() - 1) as u32
        } else {
            let t = self.tail;
            self.unlink(t);
            // The tail's own entry number is what the map holds for its block.
            if let Ok(slot) = self
                .map
                .find_entry(mix(self.entries[t as usize].block), |&i| i == t)
            {
                slot.remove();
            }
            self.entries[t as usize].block = block;
            t
        };
        let entries = &self.entries;
        self.map
            .insert_unique(mix(block), i, |&j| mix(entries[j as usize].block));
        self.push_front(i);
        false
    }

    /// True if cached, without changing recency.
    pub fn contains(&self, block: u64) -> bool {
        self.find(block).is_some()
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.entries.clear();
        self.head = NIL;
        self.tail = NIL;
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_order() {
        let mut c = BlockLru::new(2);
        assert!(!c.access(1));
        assert!(!c.access(2));
        assert!(c.access(1));
        assert!(!c.access(3)); // evicts 2
        assert!(!c.access(2));
        assert!(c.contains(3) && !c.contains(1));
        let mut none = BlockLru::new(0);
        assert!(!none.access(1) && !none.access(1));
        c.clear();
        assert!(c.is_empty());
    }
}
