//! The set of referenced digests, collected while indexes are read, so that the sweep knows a
//! chunk is unreferenced before it removes it, whatever the atimes say (ARCHITECTURE.md,
//! invariant 9).
//!
//! Atimes are PBS's mechanism: a touch that failed with an injected or spurious ENOENT, a sweep
//! run without a mark, or a mark on a `--shadow` mount leave a referenced chunk with an old
//! atime, and PBS would remove it. This set is chunkscope's guarantee on top of that.
//!
//! It holds, for each digest, 64 bits of it after the 16-bit chunk-directory prefix (bytes 2 to
//! 9), in one vector per chunk directory. A garbage chunk is kept by mistake only when its 80
//! leading bits equal a referenced digest's: false positives can only keep garbage, never remove
//! a referenced chunk, and with SHA-256 digests their chance is about `n / 2^80` per garbage
//! chunk for `n` referenced chunks (1e-16 at datastore A's 72 M).
//!
//! Inserting is a push to the directory's vector (no hashing, no allocation once the vectors
//! have grown); a vector is sorted and deduplicated in place when it fills, so duplicates (the
//! naive strategy inserts every reference) cost at most twice the distinct entries. Lookups in
//! the sweep are a binary search in one directory's few hundred entries. Memory: 8 bytes per
//! referenced chunk at best, 16 at worst (BENCHMARKS.md, "The referenced set").

use crate::datastore::paths::CHUNK_SUBDIRS;
use crate::datastore::Digest;

/// Referenced digests, by chunk directory.
pub struct ReferencedSet {
    dirs: Vec<Bucket>,
}

#[derive(Default)]
struct Bucket {
    /// Fingerprints; `..sorted` is sorted and free of duplicates, the rest was pushed since.
    fps: Vec<u64>,
    sorted: usize,
}

#[inline]
fn fingerprint(d: &Digest) -> u64 {
    u64::from_be_bytes(d.0[2..10].try_into().expect("8 bytes"))
}

impl Bucket {
    fn compact(&mut self) {
        if self.sorted == self.fps.len() {
            return;
        }
        self.fps.sort_unstable();
        self.fps.dedup();
        self.sorted = self.fps.len();
    }

    #[inline]
    fn push(&mut self, fp: u64) {
        if self.fps.len() == self.fps.capacity() && self.fps.len() >= 8 {
            // Full: make room by dropping duplicates before growing.
            self.compact();
            if self.fps.len() <= self.fps.capacity() / 2 {
                self.fps.push(fp);
                return;
            }
        }
        self.fps.push(fp);
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
            dirs: (0..CHUNK_SUBDIRS).map(|_| Bucket::default()).collect(),
        }
    }

    /// Adds a referenced digest (duplicates are fine).
    #[inline]
    pub fn insert(&mut self, d: &Digest) {
        self.dirs[d.prefix() as usize].push(fingerprint(d));
    }

    /// Sorts what was inserted since the last call; [`ReferencedSet::contains`] needs it.
    pub fn seal(&mut self) {
        for b in &mut self.dirs {
            b.compact();
            b.fps.shrink_to_fit();
        }
    }

    /// Whether `d` may be referenced: always true for a digest that was inserted (before the
    /// last [`ReferencedSet::seal`]); true for another one only by a fingerprint collision.
    #[inline]
    pub fn contains(&self, d: &Digest) -> bool {
        let b = &self.dirs[d.prefix() as usize];
        debug_assert_eq!(b.sorted, b.fps.len(), "seal() before contains()");
        b.fps[..b.sorted].binary_search(&fingerprint(d)).is_ok()
    }

    /// Distinct fingerprints held (after [`ReferencedSet::seal`]).
    pub fn len(&self) -> u64 {
        self.dirs.iter().map(|b| b.fps.len() as u64).sum()
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes held now.
    pub fn heap_bytes(&self) -> u64 {
        (self.dirs.capacity() * std::mem::size_of::<Bucket>()) as u64
            + self
                .dirs
                .iter()
                .map(|b| (b.fps.capacity() * 8) as u64)
                .sum::<u64>()
    }
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
        s.seal();
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

    proptest! {
        #[test]
        fn never_forgets_an_inserted_digest(ops in prop::collection::vec((0u64..300, any::<bool>()), 0..2000)) {
            let mut s = ReferencedSet::new();
            let mut truth = std::collections::HashSet::new();
            for (i, seal) in ops {
                // Few directories, so that buckets fill, compact and grow.
                let mut d = digest(i);
                d.0[0] = 0;
                d.0[1] = (i % 3) as u8;
                s.insert(&d);
                truth.insert(d);
                if seal {
                    s.seal();
                    prop_assert!(truth.iter().all(|d| s.contains(d)));
                }
            }
            s.seal();
            prop_assert!(truth.iter().all(|d| s.contains(d)));
            prop_assert_eq!(s.len(), truth.len() as u64);
        }
    }
}
