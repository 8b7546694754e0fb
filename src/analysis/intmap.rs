//! A map from `u64` keys for the analysis's per-record work: open addressing with linear
//! probing, key and value in one slot, so a lookup touches one cache line (a SwissTable reads
//! its control bytes, then the slot: two misses once the table outgrows the cache), and the
//! slot of a key further on in the stream can be prefetched ([`IntMap::prefetch`]), so several
//! misses are in flight at once. Kept at most half full; no removal (the analysis keeps every
//! key it counts). Key 0 marks an empty slot; a 0 key itself is held beside the table.

use crate::rng::mix;

/// Keys to values; see the module documentation.
pub(crate) struct IntMap<V: Copy + Default> {
    slots: Vec<(u64, V)>,
    /// Keys in `slots` (key 0 is in `zero`).
    len: usize,
    zero: Option<V>,
}

/// A set of `u64`: a map with nothing beside each key (8-byte slots).
pub(crate) type IntSet = IntMap<()>;

impl<V: Copy + Default> Default for IntMap<V> {
    fn default() -> Self {
        IntMap {
            slots: vec![(0, V::default()); 1 << 10],
            len: 0,
            zero: None,
        }
    }
}

impl<V: Copy + Default> IntMap<V> {
    /// Keys held.
    pub(crate) fn len(&self) -> usize {
        self.len + self.zero.is_some() as usize
    }

    /// Where `key`'s probe starts (its bits are mixed: inode and block numbers are small and
    /// dense).
    #[inline]
    fn home(&self, key: u64) -> usize {
        mix(key) as usize & (self.slots.len() - 1)
    }

    /// Asks the CPU to bring `key`'s slot into the cache.
    #[inline]
    pub(crate) fn prefetch(&self, key: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let p = self.slots.as_ptr().wrapping_add(self.home(key));
            // SAFETY: a prefetch is a hint; it never faults, whatever the address.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    p.cast::<i8>(),
                )
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = key;
    }

    /// `key`'s value.
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<V> {
        if key == 0 {
            return self.zero;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let (k, v) = self.slots[i];
            if k == key {
                return Some(v);
            }
            if k == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Sets `key`'s value; returns the one it had.
    #[inline]
    pub(crate) fn insert(&mut self, key: u64, value: V) -> Option<V> {
        if key == 0 {
            return self.zero.replace(value);
        }
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let s = &mut self.slots[i];
            if s.0 == key {
                return Some(std::mem::replace(&mut s.1, value));
            }
            if s.0 == 0 {
                *s = (key, value);
                self.len += 1;
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let bigger = vec![(0, V::default()); self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, bigger);
        let mask = self.slots.len() - 1;
        for s in old.into_iter().filter(|s| s.0 != 0) {
            let mut i = self.home(s.0);
            while self.slots[i].0 != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }

    /// The keys, in no particular order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.zero
            .map(|_| 0)
            .into_iter()
            .chain(self.slots.iter().filter(|s| s.0 != 0).map(|s| s.0))
    }
}

impl IntSet {
    /// Adds `key`; whether it was new.
    #[inline]
    pub(crate) fn add(&mut self, key: u64) -> bool {
        self.insert(key, ()).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Against std's map on a stream with repeats, key 0 and growth past many doublings.
    #[test]
    fn holds_what_a_map_holds() {
        let mut ours = IntMap::<u32>::default();
        let mut theirs = HashMap::new();
        for i in 0..50_000u64 {
            let key = mix(i) % 20_000; // repeats, and 0 among them
            let v = i as u32;
            assert_eq!(ours.insert(key, v), theirs.insert(key, v), "insert {key}");
            let probe = mix(i ^ 0xabc) % 30_000;
            assert_eq!(ours.get(probe), theirs.get(&probe).copied(), "get {probe}");
        }
        assert!(theirs.contains_key(&0));
        assert_eq!(ours.len(), theirs.len());
        let mut keys: Vec<u64> = ours.keys().collect();
        keys.sort_unstable();
        let mut want: Vec<u64> = theirs.keys().copied().collect();
        want.sort_unstable();
        assert_eq!(keys, want);
    }

    #[test]
    fn a_set_counts_each_key_once() {
        let mut s = IntSet::default();
        assert!(s.add(0));
        assert!(!s.add(0));
        assert!(s.add(u64::MAX));
        assert!(s.add(7));
        assert!(!s.add(7));
        assert_eq!(s.len(), 3);
    }
}
