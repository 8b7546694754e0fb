//! Locality of a stream of inode operations: how far apart consecutive inodes are, how many
//! metadata blocks they touch, how often the chunk directory changes.

use serde::Serialize;

use super::hdr::HdrCounts;
use super::intmap::IntSet;
use super::{count_log2, trimmed};

/// Locality of one stream of inode operations.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Locality {
    /// Operations.
    pub count: u64,
    /// Distinct inodes they were about.
    pub distinct_inodes: u64,
    /// Distinct metadata blocks those inodes are in.
    pub distinct_blocks: u64,
    /// ceil(distinct inodes / inodes per block): the fewest blocks that could hold them.
    pub ideal_blocks: u64,
    /// |Δino| between consecutive operations.
    pub gap_p10: u64,
    /// Median gap.
    pub gap_p50: u64,
    /// 90th-percentile gap.
    pub gap_p90: u64,
    /// `gap_log2[k]`: gaps in [2^(k-1), 2^k) (`gap_log2[0]`: gap 0).
    pub gap_log2: Vec<u64>,
    /// Consecutive operations on the same metadata block, as a fraction of all but the first.
    pub same_block: f64,
    /// Changes of chunk directory per 1000 operations.
    pub dir_switches_per_1000: f64,
}

pub(super) struct LocalityAcc {
    count: u64,
    prev: Option<(u64, u64)>,
    gaps: HdrCounts,
    log2: [u64; 65],
    same_block: u64,
    switches: u64,
    pub(super) inodes: IntSet,
    /// Whether to keep the distinct inodes (a what-if order reuses the recorded counts).
    distinct: bool,
}

impl Default for LocalityAcc {
    fn default() -> LocalityAcc {
        LocalityAcc {
            count: 0,
            prev: None,
            gaps: HdrCounts::default(),
            log2: [0; 65],
            same_block: 0,
            switches: 0,
            inodes: IntSet::default(),
            distinct: true,
        }
    }
}

impl LocalityAcc {
    /// One that does not keep the distinct inodes (a what-if order reuses the recorded counts).
    pub(super) fn reusing_distinct() -> LocalityAcc {
        LocalityAcc {
            distinct: false,
            ..LocalityAcc::default()
        }
    }

    pub(super) fn push(&mut self, ino: u64, dir: u64, per_block: u64) {
        self.count += 1;
        if self.distinct {
            self.inodes.add(ino);
        }
        if let Some((p, pdir)) = self.prev {
            let gap = ino.abs_diff(p);
            self.gaps.record(gap);
            count_log2(&mut self.log2, gap);
            self.same_block += (p / per_block == ino / per_block) as u64;
            self.switches += (dir != pdir) as u64;
        }
        self.prev = Some((ino, dir));
    }

    pub(super) fn report(&self, per_block: u64) -> Locality {
        let gaps = self.gaps.histogram();
        let q = |x| gaps.value_at_quantile(x);
        let pairs = self.count.saturating_sub(1).max(1) as f64;
        Locality {
            count: self.count,
            distinct_inodes: self.inodes.len() as u64,
            distinct_blocks: distinct_blocks(&self.inodes, per_block),
            ideal_blocks: (self.inodes.len() as u64).div_ceil(per_block),
            gap_p10: q(0.1),
            gap_p50: q(0.5),
            gap_p90: q(0.9),
            gap_log2: trimmed(&self.log2),
            same_block: self.same_block as f64 / pairs,
            dir_switches_per_1000: 1000.0 * self.switches as f64 / pairs,
        }
    }
}

pub(super) fn distinct_blocks(inodes: &IntSet, per_block: u64) -> u64 {
    let mut blocks = IntSet::default();
    for i in inodes.keys() {
        blocks.add(i / per_block);
    }
    blocks.len() as u64
}
