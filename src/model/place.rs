//! Where a metadata block lies on the disk, for a model with a disk ([`super::ModelParams::disk`]):
//! the disk prices a read by its distance from the one before, so the model needs each
//! block's byte offset, not only its identity.
//!
//! **ext4** (what `mke2fs` makes with its defaults, read off a testbed image with `dumpe2fs`
//! and `debugfs`: BENCHMARKS.md, "The model learns the disk"): groups of `blocks_per_group`
//! blocks; `flex_groups` groups share one flex group, whose inode tables lie one after the
//! other from block `itable_start` of its first group (after the superblock, the group
//! descriptors with their reserve and the bitmaps), so the inode-table block of inode `i` is
//! `itable_start + (i - 1) / per_block` within its flex group. A directory's first block is
//! allocated in its inode's flex group, after the inode tables, in creation order, which for
//! the 65,536 chunk directories that a datastore creates one after the other is the order of
//! their inode numbers: block `itable_start + tables + (d - 1)` within the flex group. The
//! journal lies in the middle of the filesystem.
//!
//! **XFS**: an inode number is its address: allocation group `ino >> agino_log`, block
//! `(ino & agino mask) >> inopb_log` in it. Directories' inodes are spread over the groups in
//! turn (the 65,536 chunk directories a quarter in each of a 2 GiB filesystem's four groups,
//! one after the other within a group: `ls -i` on a testbed image); a short-form directory
//! has no block of its own, a larger one's blocks lie near its inode.
//!
//! **ZFS**: copy-on-write puts blocks where there was space when they were last written. Without
//! a pool's figures ([`Placement::zfs_sector`] 0) a dnode block lies at its number times the
//! block size and directories' blocks are spread over the disk. With them (what `testbed --fs
//! zfs` showed, BENCHMARKS.md "ZFS on the testbed"): a directory without entries is a micro ZAP
//! of one sector allocated when the directory was made, so the chunk directories a datastore
//! makes one after the other lie one sector apart in creation order from the pool's start
//! (object `d` at `d` sectors: a sweep reads them nearly in sequence); every other metadata
//! block (dnode blocks, fat ZAPs, indirect blocks) was rewritten by later transaction groups
//! and lies spread over what the pool has allocated after them. Each read is one sector or a
//! few (lzjb-compressed metadata), [`super::ModelParams::read_bytes`].

use serde::{Deserialize, Serialize};

use super::Layout;

/// The geometry that places blocks on the disk (ext4's; ZFS needs none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Placement {
    /// Blocks per block group (32,768 of 4 KiB: 128 MiB).
    pub blocks_per_group: u64,
    /// Groups per flex group (`mke2fs -G`, 16).
    pub flex_groups: u64,
    /// The first inode-table block of a flex group, from its start: the boot block and
    /// superblock, the group descriptors and their reserve for growth, two bitmaps per group
    /// (289 on a 2 GiB filesystem).
    pub itable_start: u64,
    /// ZFS: the pool's sector (`ashift`), the size of a micro ZAP's block on the disk; 0: no
    /// ZFS geometry (directories spread over the disk, dnode blocks at their numbers).
    pub zfs_sector: u64,
    /// ZFS: the bytes the pool has allocated (the filesystem's used bytes): the blocks
    /// written after the chunk directories lie spread over them.
    pub zfs_allocated: u64,
}

impl Default for Placement {
    fn default() -> Placement {
        Placement {
            blocks_per_group: 32_768,
            flex_groups: 16,
            itable_start: 289,
            zfs_sector: 0,
            zfs_allocated: 0,
        }
    }
}

/// The directories made one after the other when a datastore is created: its 65,536 chunk
/// directories and the few before them (the store's root, `.chunks`, the pool's own).
const CHUNK_DIRS: u64 = 65_536 + 64;

/// Identifies the model's blocks by kind (see [`super::dir_block`] and its siblings).
const DIR: u64 = 1 << 63;
const LEAF: u64 = 1 << 62;

/// The directory whose header block (from [`super::dir_block`]) `block` is, if it is one.
#[inline]
pub fn dir_of_header(block: u64) -> Option<u64> {
    (block & (DIR | LEAF) == DIR).then_some(block & !DIR)
}
const INDIRECT: u64 = 1 << 61;

impl Placement {
    /// The byte offset on a disk of `span` bytes of the model's block `block` (an id from
    /// [`Layout::block`], [`super::dir_block`], [`super::zap_leaf_block`] or
    /// [`super::indirect_block`]).
    pub fn offset(&self, layout: &Layout, block_bytes: u64, block: u64, span: u64) -> u64 {
        let bytes = block_bytes.max(1);
        let blocks = (span / bytes).max(1);
        // What no geometry places: spread over the disk (a hash of the id).
        let spread = |id: u64| (id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17) % blocks * bytes;
        let at = |blk: u64| blk.min(blocks - 1) * bytes;
        match *layout {
            Layout::Zfs { .. } if self.zfs_sector > 0 => {
                // The micro ZAPs of the directories made with the datastore, then the rest.
                let micro = (CHUNK_DIRS * self.zfs_sector).min(span / 2);
                // A sector a block: compressed, each takes what it needs, no more. A fat
                // ZAP's leaves were written with its header, in the sectors after it.
                let sector = self.zfs_sector;
                let end = self
                    .zfs_allocated
                    .clamp(micro + sector, span.max(micro + sector));
                let (id, after) = match block & (DIR | LEAF) == DIR | LEAF {
                    true => (DIR | ((block & !(DIR | LEAF)) >> 16), 1 + (block & 0xffff)),
                    false => (block, 0),
                };
                let rest = ((end - micro) / sector).max(1);
                // Dnode blocks were written in the groups that made their objects, one
                // after the other: in creation order, a sector each.
                let slot = match id & (DIR | INDIRECT) {
                    0 => id,
                    _ => id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17,
                };
                let at = micro + slot % rest * sector;
                (at + after * sector).min(span.saturating_sub(sector))
            }
            Layout::Zfs { .. } => {
                if block & (DIR | INDIRECT) != 0 {
                    spread(block)
                } else {
                    at(block)
                }
            }
            Layout::Ext4 {
                inodes_per_group,
                per_block,
            } => {
                let ipg = inodes_per_group.max(1);
                let tables = ipg.div_ceil(per_block.max(1));
                let flex = self.flex_groups.max(1);
                let flex_start = |f: u64| f * flex * self.blocks_per_group + self.itable_start;
                if block & DIR != 0 && block & LEAF == 0 {
                    let d = (block & !DIR).saturating_sub(1);
                    let f = d / ipg / flex;
                    at(flex_start(f) + flex * tables + (d - f * flex * ipg))
                } else if block & (DIR | INDIRECT) != 0 {
                    spread(block)
                } else {
                    let (group, within) = (block >> 24, block & 0xff_ffff);
                    at(flex_start(group / flex) + (group % flex) * tables + within)
                }
            }
            Layout::Xfs {
                per_block,
                inopb_log,
                agino_log,
                ag_blocks,
                ..
            } => {
                // The filesystem block: inodes per cluster in `block_bytes`, 2^inopb_log a block.
                let fs_block = (bytes / per_block.max(1)) << inopb_log;
                let address = |ino: u64| {
                    let (ag, agino) = crate::model::xfs_split(ino, agino_log);
                    (ag * ag_blocks + (agino >> inopb_log)) * fs_block
                };
                if block & DIR != 0 && block & LEAF == 0 {
                    // A directory's blocks: in its inode's group, near its inode (1 MiB on).
                    (address(block & !DIR) + (1 << 20)).min(span.saturating_sub(bytes))
                } else if block & (DIR | INDIRECT) != 0 {
                    spread(block)
                } else {
                    address(block * per_block.max(1)).min(span.saturating_sub(bytes))
                }
            }
        }
    }

    /// ZFS: where directory `dir`'s micro ZAP lies, if the pool's geometry is known and the
    /// directory is among those made with the datastore (its sector in creation order).
    pub fn zfs_micro_zap(&self, dir: u64, span: u64) -> Option<u64> {
        let at = dir.checked_mul(self.zfs_sector)?;
        (self.zfs_sector > 0 && at < (CHUNK_DIRS * self.zfs_sector).min(span / 2)).then_some(at)
    }

    /// The journal's first byte: ext4 puts it in the middle of the filesystem.
    pub fn journal(&self, span: u64) -> u64 {
        span / 2 / (64 << 10) * (64 << 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{dir_block, Layout};

    /// The places `debugfs` showed on a 2 GiB testbed image (mke2fs defaults): inode 15's
    /// table block 289, inode 65,553's 4,386; directory 15's block 8,489, directory 65,550's
    /// 74,541 (the model is off by the blocks the root, `lost+found` and `.chunks` itself
    /// took among them).
    #[test]
    fn ext4_blocks_lie_where_mke2fs_put_them() {
        let layout = Layout::Ext4 {
            inodes_per_group: 8192,
            per_block: 16,
        };
        let p = Placement::default();
        let span = 2 << 30;
        let blk = |id: u64| p.offset(&layout, 4096, id, span) / 4096;
        assert_eq!(blk(layout.block(15)), 289);
        assert_eq!(blk(layout.block(65_553)), 4386);
        let d15 = blk(dir_block(15));
        assert!((8481..=8500).contains(&d15), "{d15}");
        let d = blk(dir_block(65_550));
        assert!((74_000..=74_541).contains(&d), "{d}");
        // The next flex group starts 16 groups (2 GiB) on.
        assert_eq!(
            p.offset(&layout, 4096, layout.block(16 * 8192 + 1), 1 << 40) / 4096,
            16 * 32_768 + 289,
            "flex group 1"
        );
        assert_eq!(p.journal(span) / 4096, 262_144);
    }

    /// An XFS inode number is its address: `ls -i` gave chunk directory 0000 of a 2 GiB
    /// testbed image inode 2,228,352, allocation group 2, its inode 131,200 there.
    #[test]
    fn xfs_inodes_lie_at_their_numbers() {
        let layout = Layout::Xfs {
            per_block: 32,
            inopb_log: 3,
            agino_log: 20,
            ag_blocks: 131_072,
            shortform_entries: 4,
        };
        let p = Placement::default();
        let span = 2 << 30;
        let ino = 2_228_352;
        let at = p.offset(&layout, 16 << 10, layout.block(ino), span);
        assert_eq!(at, (2 * 131_072 + 131_200 / 8) * 4096);
        // The next directory, in group 3, lies 512 MiB on; a cluster's 32 inodes together.
        let next = p.offset(&layout, 16 << 10, layout.block(3_145_856), span);
        assert_eq!(next / 4096, 3 * 131_072 + 128 / 8);
        assert_eq!(layout.block(ino), layout.block(ino + 31));
    }
}
