//! An LRU of metadata block ids, allocated once at its capacity.
//!
//! ZFS's ARC is not an LRU (it balances recency and frequency lists and adapts between them);
//! an LRU is the simplest deterministic stand-in, and the one whose miss-ratio curve the
//! analysis computes, so model and analysis agree on what "cache size" means.

use hashbrown::HashMap;

const NIL: u32 = u32::MAX;

#[derive(Clone)]
pub struct BlockLru {
    map: HashMap<u64, u32>,
    keys: Vec<u64>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    capacity: usize,
}

impl BlockLru {
    /// `capacity` blocks; 0 caches nothing.
    pub fn new(capacity: usize) -> BlockLru {
        BlockLru {
            map: HashMap::with_capacity(capacity.min(1 << 24)),
            keys: Vec::new(),
            prev: Vec::new(),
            next: Vec::new(),
            head: NIL,
            tail: NIL,
            capacity,
        }
    }

    fn unlink(&mut self, i: u32) {
        let (p, n) = (self.prev[i as usize], self.next[i as usize]);
        if p == NIL {
            self.head = n
        } else {
            self.next[p as usize] = n
        }
        if n == NIL {
            self.tail = p
        } else {
            self.prev[n as usize] = p
        }
    }

    fn push_front(&mut self, i: u32) {
        self.prev[i as usize] = NIL;
        self.next[i as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    /// True if `block` was cached; either way it is now the most recent.
    pub fn access(&mut self, block: u64) -> bool {
        if let Some(&i) = self.map.get(&block) {
            self.unlink(i);
            self.push_front(i);
            return true;
        }
        if self.capacity == 0 {
            return false;
        }
        let i = if self.keys.len() < self.capacity {
            self.keys.push(block);
            self.prev.push(NIL);
            self.next.push(NIL);
            (self.keys.len() - 1) as u32
        } else {
            let t = self.tail;
            self.unlink(t);
            self.map.remove(&self.keys[t as usize]);
            self.keys[t as usize] = block;
            t
        };
        self.map.insert(block, i);
        self.push_front(i);
        false
    }

    /// True if cached, without changing recency.
    pub fn contains(&self, block: u64) -> bool {
        self.map.contains_key(&block)
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.keys.clear();
        self.prev.clear();
        self.next.clear();
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
