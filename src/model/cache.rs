//! An LRU of metadata block ids, allocated once at its capacity.
//!
//! ZFS's ARC is not an LRU (it balances recency and frequency lists and adapts between them);
//! an LRU is the simplest deterministic stand-in, and the one whose miss-ratio curve the
//! analysis computes, so model and analysis agree on what "cache size" means.

use super::arc::BlockArc;
use crate::lru::{Lru, LruKey};

/// A metadata block number ([`super::Layout::block`], [`super::dir_block`], ...).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Block(u64);

/// Block numbers have structure in their high and low bits (kinds, directory and leaf
/// numbers): mixed, so that both ends of the hash vary.
impl LruKey for Block {
    #[inline]
    fn lru_hash(&self) -> u64 {
        let x = (self.0 ^ (self.0 >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^ (x >> 29)
    }
}

/// The model's metadata cache: an LRU of block numbers.
#[derive(Clone)]
pub struct BlockLru(Lru<Block>);

impl BlockLru {
    /// `capacity` blocks; 0 caches nothing. Room for up to 16 Mi blocks is allocated now
    /// (a model's cache may be far larger than anything it will hold).
    pub fn new(capacity: usize) -> BlockLru {
        BlockLru(Lru::new(capacity, 1 << 24))
    }

    /// True if `block` was cached; either way it is now the most recent.
    #[inline]
    pub fn access(&mut self, block: u64) -> bool {
        self.0.insert(Block(block))
    }

    /// True if cached, without changing recency.
    pub fn contains(&self, block: u64) -> bool {
        self.0.contains(&Block(block))
    }

    /// Empties it (a cold pool).
    pub fn clear(&mut self) {
        self.0.clear()
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Which replacement policy the model's metadata cache follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Least recently used (the analysis's miss-ratio curves assume it).
    #[default]
    Lru,
    /// ZFS's adaptive replacement cache (recency and frequency lists, [`BlockArc`]).
    Arc,
}

/// The model's metadata cache, by policy.
#[derive(Clone)]
pub enum MetaCache {
    /// An LRU.
    Lru(BlockLru),
    /// An ARC.
    Arc(BlockArc),
}

impl MetaCache {
    /// `capacity` blocks under `policy`.
    pub fn new(policy: Policy, capacity: usize) -> MetaCache {
        match policy {
            Policy::Lru => MetaCache::Lru(BlockLru::new(capacity)),
            Policy::Arc => MetaCache::Arc(BlockArc::new(capacity, 1 << 24)),
        }
    }

    /// True if `block` was cached; either way it is cached now.
    #[inline]
    pub fn access(&mut self, block: u64) -> bool {
        match self {
            MetaCache::Lru(c) => c.access(block),
            MetaCache::Arc(c) => c.access(block),
        }
    }

    /// True if cached, without changing anything.
    #[inline]
    pub fn contains(&self, block: u64) -> bool {
        match self {
            MetaCache::Lru(c) => c.contains(block),
            MetaCache::Arc(c) => c.contains(block),
        }
    }

    /// Empties it.
    pub fn clear(&mut self) {
        match self {
            MetaCache::Lru(c) => c.clear(),
            MetaCache::Arc(c) => c.clear(),
        }
    }

    /// Blocks cached.
    pub fn len(&self) -> usize {
        match self {
            MetaCache::Lru(c) => c.len(),
            MetaCache::Arc(c) => c.len(),
        }
    }

    /// True when it caches none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
