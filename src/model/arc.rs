//! An adaptive replacement cache of metadata block ids, as ZFS's ARC keeps its buffers.
//!
//! The ARC (Megiddo and Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST
//! 2003; ZFS's `arc.c` is built on it) splits the cache between two lists: blocks used once
//! since they came in (the recency list, ZFS's MRU) and blocks used again (the frequency list,
//! MFU). Each has a ghost list of the ids it evicted lately, which hold no data. A miss that
//! finds its id in the recency ghost list means the recency list was too short, and its
//! target share `p` grows; one found in the frequency ghost list shrinks it. A scan that
//! reads every block once (a GC's phase 1 over a store larger than the cache) therefore
//! cycles through the recency list and leaves the frequency list (the directories' leaves
//! and headers that every touch reads again) in place, where an LRU would evict them.
//!
//! Entries live in one vector, linked by index in four lists, with a hash table of entry
//! numbers; an entry moves between lists in place, so a full cache does not allocate.

use hashbrown::HashTable;

const NIL: u32 = u32::MAX;

/// The four lists: recency (T1), frequency (T2) and their ghosts (B1, B2).
const T1: u8 = 0;
const T2: u8 = 1;
const B1: u8 = 2;
const B2: u8 = 3;

#[derive(Clone)]
struct Entry {
    key: u64,
    prev: u32,
    next: u32,
    list: u8,
}

#[derive(Clone, Copy)]
struct List {
    /// Most recent.
    head: u32,
    /// Least recent.
    tail: u32,
    len: usize,
}

const EMPTY: List = List {
    head: NIL,
    tail: NIL,
    len: 0,
};

/// The same mixing as the LRU's block keys: block ids carry structure in both ends.
#[inline]
fn hash(key: u64) -> u64 {
    let x = (key ^ (key >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

/// An ARC of `capacity` blocks (and as many ghost ids).
#[derive(Clone)]
pub struct BlockArc {
    map: HashTable<u32>,
    entries: Vec<Entry>,
    lists: [List; 4],
    capacity: usize,
    /// Target size of the recency list (ZFS's `arc_p`).
    p: usize,
}

impl BlockArc {
    /// `capacity` blocks; 0 caches nothing. Room for up to `reserve` entries is allocated now.
    pub fn new(capacity: usize, reserve: usize) -> BlockArc {
        let reserve = reserve.min(capacity.saturating_mul(2));
        BlockArc {
            map: HashTable::with_capacity(reserve),
            entries: Vec::with_capacity(reserve),
            lists: [EMPTY; 4],
            capacity,
            p: 0,
        }
    }

    #[inline]
    fn find(&self, key: u64) -> Option<u32> {
        let entries = &self.entries;
        self.map
            .find(hash(key), |&i| entries[i as usize].key == key)
            .copied()
    }

    fn unlink(&mut self, i: u32) {
        let e = &self.entries[i as usize];
        let (p, n, l) = (e.prev, e.next, e.list as usize);
        if p == NIL {
            self.lists[l].head = n;
        } else {
            self.entries[p as usize].next = n;
        }
        if n == NIL {
            self.lists[l].tail = p;
        } else {
            self.entries[n as usize].prev = p;
        }
        self.lists[l].len -= 1;
    }

    fn push_front(&mut self, i: u32, list: u8) {
        let l = list as usize;
        let head = self.lists[l].head;
        let e = &mut self.entries[i as usize];
        e.prev = NIL;
        e.next = head;
        e.list = list;
        if head != NIL {
            self.entries[head as usize].prev = i;
        }
        self.lists[l].head = i;
        if self.lists[l].tail == NIL {
            self.lists[l].tail = i;
        }
        self.lists[l].len += 1;
    }

    fn move_to(&mut self, i: u32, list: u8) {
        self.unlink(i);
        self.push_front(i, list);
    }

    fn len_of(&self, list: u8) -> usize {
        self.lists[list as usize].len
    }

    /// Takes the least recent entry of `list` out of every list and the map, for reuse.
    fn take_lru(&mut self, list: u8) -> u32 {
        let t = self.lists[list as usize].tail;
        debug_assert_ne!(t, NIL);
        self.unlink(t);
        let old = self.entries[t as usize].key;
        if let Ok(slot) = self.map.find_entry(hash(old), |&j| j == t) {
            slot.remove();
        }
        t
    }

    /// Makes room in the cache: the least recent block of the recency list goes to its
    /// ghost list if that list is over its target, else the frequency list's does.
    fn replace(&mut self, in_b2: bool) {
        let t1 = self.len_of(T1);
        if t1 > 0 && (t1 > self.p || (in_b2 && t1 == self.p) || self.len_of(T2) == 0) {
            let t = self.lists[T1 as usize].tail;
            self.move_to(t, B1);
        } else if self.len_of(T2) > 0 {
            let t = self.lists[T2 as usize].tail;
            self.move_to(t, B2);
        }
    }

    fn cached(&self) -> usize {
        self.len_of(T1) + self.len_of(T2)
    }

    /// True if `block` was cached (it moves to the frequency list); false if not (it is
    /// brought in, evicting as the ARC does).
    pub fn access(&mut self, block: u64) -> bool {
        let c = self.capacity;
        if c == 0 {
            return false;
        }
        if let Some(i) = self.find(block) {
            match self.entries[i as usize].list {
                T1 | T2 => {
                    self.move_to(i, T2);
                    return true;
                }
                B1 => {
                    let delta = (self.len_of(B2) / self.len_of(B1).max(1)).max(1);
                    self.p = (self.p + delta).min(c);
                    if self.cached() >= c {
                        self.replace(false);
                    }
                }
                _ => {
                    let delta = (self.len_of(B1) / self.len_of(B2).max(1)).max(1);
                    self.p = self.p.saturating_sub(delta);
                    if self.cached() >= c {
                        self.replace(true);
                    }
                }
            }
            self.move_to(i, T2);
            return false;
        }
        let l1 = self.len_of(T1) + self.len_of(B1);
        let total = l1 + self.len_of(T2) + self.len_of(B2);
        let reuse = if l1 >= c {
            if self.len_of(T1) < c {
                let t = self.take_lru(B1);
                self.replace(false);
                Some(t)
            } else {
                Some(self.take_lru(T1))
            }
        } else if total >= c {
            let t = (total >= 2 * c).then(|| self.take_lru(B2));
            if self.cached() >= c {
                self.replace(false);
            }
            t
        } else {
            None
        };
        let i = match reuse {
            Some(t) => {
                self.entries[t as usize].key = block;
                t
            }
            None => {
                self.entries.push(Entry {
                    key: block,
                    prev: NIL,
                    next: NIL,
                    list: T1,
                });
                (self.entries.len() - 1) as u32
            }
        };
        let entries = &self.entries;
        self.map
            .insert_unique(hash(block), i, |&j| hash(entries[j as usize].key));
        self.push_front(i, T1);
        false
    }

    /// True if cached, without changing anything.
    pub fn contains(&self, block: u64) -> bool {
        self.find(block)
            .is_some_and(|i| matches!(self.entries[i as usize].list, T1 | T2))
    }

    /// Empties it, ghosts included (a cold pool).
    pub fn clear(&mut self) {
        self.map.clear();
        self.entries.clear();
        self.lists = [EMPTY; 4];
        self.p = 0;
    }

    /// Blocks cached (ghosts not counted).
    pub fn len(&self) -> usize {
        self.cached()
    }

    /// True when it caches none.
    pub fn is_empty(&self) -> bool {
        self.cached() == 0
    }

    /// The recency list's target size.
    pub fn target(&self) -> usize {
        self.p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(a: &BlockArc) {
        let c = a.capacity;
        assert!(a.cached() <= c, "cached {} > {c}", a.cached());
        assert!(a.len_of(T1) + a.len_of(B1) <= c);
        assert!(a.cached() + a.len_of(B1) + a.len_of(B2) <= 2 * c);
        assert!(a.p <= c);
        assert_eq!(
            a.map.len(),
            a.lists.iter().map(|l| l.len).sum::<usize>(),
            "every listed entry is mapped"
        );
    }

    #[test]
    fn a_block_used_twice_survives_a_scan_that_an_lru_would_not() {
        // Cache of 4: two blocks used twice, then a scan of 100 blocks used once.
        let mut a = BlockArc::new(4, 16);
        let mut lru = super::super::cache::BlockLru::new(4);
        for b in [1u64, 2, 1, 2] {
            a.access(b);
            lru.access(b);
        }
        for b in 100..200u64 {
            assert!(!a.access(b));
            lru.access(b);
            check(&a);
        }
        assert!(a.contains(1) && a.contains(2), "frequency list kept");
        assert!(!lru.contains(1) && !lru.contains(2), "the LRU evicted them");
        assert!(a.access(1) && a.access(2));
        assert_eq!(a.len(), 4);
    }

    #[test]
    fn a_ghost_hit_moves_the_target_towards_its_list() {
        let mut a = BlockArc::new(2, 8);
        // 1 used twice (frequency list), 2 once (recency list); 3 evicts 2 to the recency
        // ghosts, the recency list being over its target (0).
        for b in [1u64, 1, 2, 3] {
            a.access(b);
        }
        assert!(!a.contains(2) && a.contains(1) && a.contains(3));
        assert_eq!(a.target(), 0);
        // 2 again: a miss, found in the recency ghosts: the recency list's target grows, and
        // the frequency list gives up its least recent (1) to make room.
        assert!(!a.access(2));
        assert_eq!(a.target(), 1);
        assert!(a.contains(2) && a.contains(3) && !a.contains(1));
        check(&a);
        // With the recency list full and no ghosts, its least recent is dropped outright.
        let mut a = BlockArc::new(2, 8);
        for b in [7u64, 8, 9] {
            a.access(b);
        }
        assert!(!a.contains(7));
        assert_eq!((a.len_of(B1), a.len_of(B2)), (0, 0));
        // Frequency ghosts: 1 and 4 used twice fill the frequency list, a scan pushes one
        // out to the frequency ghosts, and a hit there lowers the target again.
        let mut a = BlockArc::new(2, 8);
        for b in [1u64, 1, 4, 4] {
            a.access(b);
        }
        assert_eq!((a.len_of(T1), a.len_of(T2)), (0, 2));
        a.access(5); // evicts the frequency list's least recent (1) to B2
        assert!(!a.contains(1) && a.contains(4) && a.contains(5));
        a.p = 1;
        assert!(!a.access(1));
        assert_eq!(a.target(), 0, "a frequency ghost hit lowers the target");
        check(&a);
    }

    #[test]
    fn invariants_hold_on_a_mixed_stream_and_clear_empties_it() {
        let mut a = BlockArc::new(64, 16);
        let mut x = 12345u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Half the accesses to 32 hot blocks, half over 10,000 cold ones.
            let b = if x >> 63 == 0 {
                (x >> 20) % 32
            } else {
                1000 + (x >> 20) % 10_000
            };
            a.access(b);
            check(&a);
        }
        let hot = (0..32).filter(|&b| a.contains(b)).count();
        assert!(hot >= 28, "the hot blocks stay cached: {hot} of 32");
        assert!(a.entries.len() <= 128, "no more entries than 2c");
        a.clear();
        assert!(a.is_empty() && !a.contains(3));
        assert!(!BlockArc::new(0, 0).access(1));
    }
}
