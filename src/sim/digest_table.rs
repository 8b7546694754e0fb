//! Chunk numbers by digest, for the simulated store's touches: one cache line per lookup.
//!
//! A digest is a SHA-256 (or, for hashed digests, a 64-bit mix): its bits are uniform, so the
//! table hashes nothing. A slot holds a chunk number and a 32-bit tag, both taken from the
//! digest; a lookup reads the slot's line (8 slots), compares tags, and confirms the one
//! match against the chunk's own digest, which the caller reads next anyway (its record holds
//! the digest with the inode and atime). hashbrown's `HashTable<u32>` read its control bytes,
//! then its bucket, then the digest, then the record: four dependent cache misses a touch,
//! the better part of a naive touch's time at thread 000's scale (BENCHMARKS.md).
//!
//! Open addressing with linear probing, at most 7/8 full; no removal (a removed chunk keeps
//! its slot and is marked removed in its record).

const EMPTY: u64 = u64::MAX;

pub struct DigestTable {
    slots: Vec<u64>,
    /// `64 - log2(slots.len())`: a digest's slot is the top bits of its bytes 8..16.
    shift: u32,
    len: usize,
}

/// Bytes 8..16 choose the slot (bytes 0..2 choose the chunk directory).
#[inline]
fn slot_bits(d: &[u8; 32]) -> u64 {
    u64::from_be_bytes(d[8..16].try_into().expect("8 bytes"))
}

/// Bytes 16..20: the tag, independent of the slot.
#[inline]
fn tag(d: &[u8; 32]) -> u64 {
    u32::from_le_bytes(d[16..20].try_into().expect("4 bytes")) as u64
}

impl DigestTable {
    /// A table for `n` digests.
    pub fn with_capacity(n: usize) -> DigestTable {
        let slots = (n.saturating_mul(8) / 7 + 1).next_power_of_two().max(8);
        DigestTable {
            slots: vec![EMPTY; slots],
            shift: 64 - slots.trailing_zeros(),
            len: 0,
        }
    }

    /// Bytes of its slots.
    pub fn heap_bytes(&self) -> u64 {
        (self.slots.capacity() * std::mem::size_of::<u64>()) as u64
    }

    #[inline]
    fn home(&self, d: &[u8; 32]) -> usize {
        (slot_bits(d) >> self.shift) as usize
    }

    /// Adds chunk `chunk` under `digest`, which must not be in the table yet. Grows the
    /// table (rehashing with `digest_of`) when it would be more than 7/8 full.
    pub fn insert(&mut self, digest: &[u8; 32], chunk: u32, digest_of: impl Fn(u32) -> [u8; 32]) {
        assert!(chunk != u32::MAX, "chunk number out of range");
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            let mut bigger = DigestTable::with_capacity(self.slots.len());
            for &s in self.slots.iter().filter(|&&s| s != EMPTY) {
                let c = s as u32;
                bigger.put(&digest_of(c), c);
            }
            *self = bigger;
        }
        self.put(digest, chunk);
    }

    fn put(&mut self, digest: &[u8; 32], chunk: u32) {
        let mask = self.slots.len() - 1;
        let mut i = self.home(digest);
        while self.slots[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.slots[i] = tag(digest) << 32 | chunk as u64;
        self.len += 1;
    }

    /// The chunk stored under `digest`: `is_it(chunk)` confirms a candidate whose tag matches
    /// (it compares the chunk's full digest).
    #[inline]
    pub fn find(&self, digest: &[u8; 32], is_it: impl Fn(u32) -> bool) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let t = tag(digest);
        let mut i = self.home(digest);
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return None;
            }
            if s >> 32 == t && is_it(s as u32) {
                return Some(s as u32);
            }
            i = (i + 1) & mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(n: u64) -> [u8; 32] {
        let mut d = [0u8; 32];
        for (i, part) in d.chunks_mut(8).enumerate() {
            part.copy_from_slice(&crate::rng::hash(&[n, i as u64]).to_le_bytes());
        }
        d
    }

    #[test]
    fn finds_what_was_inserted_and_nothing_else() {
        let digests: Vec<[u8; 32]> = (0..10_000).map(digest).collect();
        // Starts small: grows (and rehashes) several times on the way.
        let mut t = DigestTable::with_capacity(4);
        for (i, d) in digests.iter().enumerate() {
            t.insert(d, i as u32, |c| digests[c as usize]);
        }
        assert_eq!(t.len, 10_000);
        assert!(t.slots.len() * 7 >= t.len * 8);
        for (i, d) in digests.iter().enumerate() {
            assert_eq!(t.find(d, |c| digests[c as usize] == *d), Some(i as u32));
        }
        for n in 10_000..20_000 {
            let d = digest(n);
            assert_eq!(t.find(&d, |c| digests[c as usize] == d), None);
        }
    }

    #[test]
    fn equal_slot_and_tag_are_told_apart_by_the_full_digest() {
        // Two digests that differ only after byte 20: same home slot, same tag.
        let a = digest(1);
        let mut b = a;
        b[31] ^= 1;
        let digests = [a, b];
        let mut t = DigestTable::with_capacity(2);
        t.insert(&a, 0, |c| digests[c as usize]);
        t.insert(&b, 1, |c| digests[c as usize]);
        assert_eq!(t.find(&a, |c| digests[c as usize] == a), Some(0));
        assert_eq!(t.find(&b, |c| digests[c as usize] == b), Some(1));
        let mut other = a;
        other[30] ^= 1;
        assert_eq!(t.find(&other, |c| digests[c as usize] == other), None);
    }
}
