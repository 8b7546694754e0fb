//! Which metadata block an inode's metadata lives in, per filesystem: ZFS dnodes in 16 KiB
//! metadnode blocks (object id / 32 for 512-byte dnodes), ext4 inode-table blocks (from the
//! superblock's inode size, block size and inodes per group), and an assumption (stated in
//! the report) for filesystems without either.

use std::path::Path;

use anyhow::{bail, Result};

use crate::model::Layout;

/// How the survey maps inode numbers to metadata blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutChoice {
    /// From the filesystem the store is on: ZFS with `dnode_size`-byte dnodes, ext4 from its
    /// superblock, anything else as ZFS (stated in the report).
    Auto {
        /// Bytes per dnode on ZFS (512 unless the dataset's `dnodesize` is larger).
        dnode_size: u64,
    },
    /// ZFS: `16 KiB / dnode_size` dnodes a block, in object-id order.
    Zfs {
        /// Bytes per dnode.
        dnode_size: u64,
    },
    /// ext4: inode tables per block group.
    Ext4 {
        /// Bytes per inode (the superblock's when not given).
        inode_size: Option<u64>,
        /// Inodes per block group (the superblock's when not given).
        inodes_per_group: Option<u64>,
    },
}

/// A ZFS metadnode block (16 KiB).
const METADNODE_BLOCK: u64 = 16 * 1024;

/// Filesystem magic numbers (`statfs(2)`).
const ZFS_MAGIC: i64 = 0x2fc1_2fc1;
const EXT4_MAGIC: i64 = 0xef53;

/// The name of the filesystem holding `root`, and its magic.
fn filesystem(root: &Path) -> Result<(String, i64)> {
    let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(root.as_os_str()))?;
    // SAFETY: a plain C struct; zeroes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and out pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        bail!(
            "statfs {}: {}",
            root.display(),
            std::io::Error::last_os_error()
        );
    }
    let magic = st.f_type as i64;
    let name = match magic {
        ZFS_MAGIC => "zfs",
        EXT4_MAGIC => "ext4",
        0x0102_1994 => "tmpfs",
        0x5846_5342 => "xfs",
        0x9123_683e => "btrfs",
        0x6573_5546 => "fuse",
        0x6969 => "nfs",
        _ => "another filesystem",
    };
    Ok((name.to_string(), magic))
}

/// The ZFS layout of `dnode_size`-byte dnodes, described.
fn zfs(dnode_size: u64) -> Result<(Layout, String)> {
    if !dnode_size.is_power_of_two() || !(512..=METADNODE_BLOCK).contains(&dnode_size) {
        bail!("--dnode-size {dnode_size}: a power of two from 512 to 16384 bytes");
    }
    let per_block = METADNODE_BLOCK / dnode_size;
    Ok((
        Layout::Zfs { per_block },
        format!("ZFS: {per_block} dnodes of {dnode_size} bytes a 16 KiB metadnode block (object id / {per_block})"),
    ))
}

/// The geometry of an ext4 filesystem from its superblock (1024 bytes in): inode size, block
/// size, inodes per group.
pub(super) fn parse_ext4_superblock(sb: &[u8]) -> Option<(u64, u64, u64)> {
    let u32_at = |o: usize| u32::from_le_bytes(sb[o..o + 4].try_into().expect("4"));
    let u16_at = |o: usize| u16::from_le_bytes(sb[o..o + 2].try_into().expect("2"));
    if sb.len() < 1024 || u16_at(56) != 0xef53 {
        return None;
    }
    let block = 1024u64 << u32_at(24).min(6);
    let inodes_per_group = u32_at(40) as u64;
    let inode_size = if u32_at(76) == 0 {
        128
    } else {
        u16_at(88) as u64
    };
    (inode_size > 0 && inodes_per_group > 0).then_some((inode_size, block, inodes_per_group))
}

/// The superblock of the device the filesystem of `root` is mounted from, if it can be read.
fn ext4_geometry(root: &Path) -> Option<(u64, u64, u64)> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let dev = std::fs::metadata(root).ok()?.dev();
    let id = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let mount = crate::fsutil::mounts()
        .ok()?
        .into_iter()
        .find(|m| m.dev == id && m.source.starts_with('/'))?;
    let f = std::fs::File::open(&mount.source).ok()?;
    let mut sb = vec![0u8; 1024];
    f.read_exact_at(&mut sb, 1024).ok()?;
    parse_ext4_superblock(&sb)
}

/// Inodes per group of an ext4 filesystem of `files` inodes and `blocks` usable blocks of
/// `block` bytes (what `statfs` says, where the device cannot be read): it has `files /
/// groups` inodes in each of its groups of `8 * block` blocks, and at least as many groups
/// as its usable blocks fill (the overhead is not counted in them), so the smallest such
/// count that divides the inodes into whole inode-table blocks (of `per_block` inodes).
pub(super) fn inodes_per_group(files: u64, blocks: u64, block: u64, per_block: u64) -> Option<u64> {
    let least = blocks.div_ceil(8 * block).max(1);
    (least..least + least / 8 + 2)
        .find(|&g| files.is_multiple_of(g) && (files / g).is_multiple_of(per_block.max(1)))
        .map(|g| files / g)
}

/// The ext4 geometry of the filesystem of `root` from `statfs` (inode size assumed 256).
fn ext4_geometry_statfs(root: &Path) -> Option<(u64, u64, u64)> {
    let st = crate::fsutil::statvfs(root).ok()?;
    let block = st.f_bsize as u64;
    let ipg = inodes_per_group(st.f_files as u64, st.f_blocks as u64, block, block / 256)?;
    Some((256, block, ipg))
}

/// The filesystem of `root`, its layout under `choice`, a description, and whether the
/// layout was assumed rather than read.
pub fn choose(root: &Path, choice: &LayoutChoice) -> Result<(String, Layout, String, bool)> {
    let (fs, magic) = filesystem(root)?;
    let ext4 = |inode_size: Option<u64>, ipg: Option<u64>| -> Result<(Layout, String, bool)> {
        let on_ext4 = magic == EXT4_MAGIC;
        let read = on_ext4.then(|| ext4_geometry(root)).flatten();
        let from_statfs = match read {
            None if on_ext4 => ext4_geometry_statfs(root),
            _ => None,
        };
        let (size, block, per_group) = read.or(from_statfs).unwrap_or((256, 4096, 8192));
        let (size, per_group) = (inode_size.unwrap_or(size), ipg.unwrap_or(per_group));
        if !size.is_power_of_two() || size < 128 || size > block || per_group == 0 {
            bail!(
                "an ext4 inode size of {size} bytes in {block}-byte blocks, {per_group} inodes \
                 a group: not a valid geometry"
            );
        }
        let per_block = block / size;
        let assumed = read.is_none() && (inode_size.is_none() || ipg.is_none());
        let how = match from_statfs {
            _ if !assumed => "",
            Some(_) => {
                " (the superblock could not be read: inodes a group from statfs, the inode \
                 size assumed 256, mke2fs's default; --layout ext4 --inode-size to give it)"
            }
            None => " (mke2fs defaults: the superblock could not be read)",
        };
        Ok((
            Layout::Ext4 {
                inodes_per_group: per_group,
                per_block,
            },
            format!(
                "ext4: {per_block} inodes of {size} bytes a {block}-byte inode-table block, \
                 {per_group} inodes a group{how}"
            ),
            assumed,
        ))
    };
    let (layout, desc, assumed) = match *choice {
        LayoutChoice::Zfs { dnode_size } => {
            let (l, d) = zfs(dnode_size)?;
            (l, d, false)
        }
        LayoutChoice::Ext4 {
            inode_size,
            inodes_per_group,
        } => ext4(inode_size, inodes_per_group)?,
        LayoutChoice::Auto { dnode_size } => match magic {
            ZFS_MAGIC => {
                let (l, d) = zfs(dnode_size)?;
                (l, d, false)
            }
            EXT4_MAGIC => ext4(None, None)?,
            _ => {
                let (l, d) = zfs(dnode_size)?;
                let d = format!("{d}, assumed: {fs} has no inode blocks of its own (--layout zfs|ext4 to choose)");
                (l, d, true)
            }
        },
    };
    Ok((fs, layout, desc, assumed))
}

/// Block `ino`'s metadata lives in, numbered densely from 0 (for a bitmap of blocks): the
/// same blocks as [`Layout::block`], which numbers ext4's by group and block within it.
#[inline]
pub fn dense_block(layout: &Layout, ino: u64) -> u64 {
    match *layout {
        Layout::Zfs { per_block } => ino / per_block.max(1),
        // An allocation group's inode numbers are followed by a gap up to the next group's.
        Layout::Xfs {
            per_block,
            inopb_log,
            agino_log,
            ag_blocks,
            ..
        } => {
            let (ag, agino) = crate::model::xfs_split(ino, agino_log);
            ((ag * (ag_blocks << inopb_log)) + agino) / per_block.max(1)
        }
        // Inode tables fill whole blocks: groups follow each other without a gap.
        Layout::Ext4 { per_block, .. } => ino.saturating_sub(1) / per_block.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of a real superblock (mke2fs defaults: 4 KiB blocks, 256-byte inodes, 8192
    /// inodes a group); anything without the magic is not ext4.
    #[test]
    fn an_ext4_superblock_gives_the_inode_geometry() {
        let mut sb = vec![0u8; 1024];
        sb[24..28].copy_from_slice(&2u32.to_le_bytes());
        sb[40..44].copy_from_slice(&8192u32.to_le_bytes());
        sb[56..58].copy_from_slice(&0xef53u16.to_le_bytes());
        sb[76..80].copy_from_slice(&1u32.to_le_bytes());
        sb[88..90].copy_from_slice(&256u16.to_le_bytes());
        assert_eq!(parse_ext4_superblock(&sb), Some((256, 4096, 8192)));
        sb[76..80].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(parse_ext4_superblock(&sb), Some((128, 4096, 8192)));
        sb[56] = 0;
        assert_eq!(parse_ext4_superblock(&sb), None);
    }

    /// This machine's root filesystem: 16,777,216 inodes, 66,053,021 usable blocks of 4 KiB
    /// (2,048 groups of 8,192 inodes); a small one of 1 KiB blocks, 16 groups of 2,048.
    #[test]
    fn inodes_per_group_from_statfs() {
        assert_eq!(
            inodes_per_group(16_777_216, 66_053_021, 4096, 16),
            Some(8192)
        );
        assert_eq!(inodes_per_group(32_768, 120_000, 1024, 4), Some(2048));
        assert_eq!(inodes_per_group(7, 1, 4096, 16), None);
    }

    /// The dense numbering counts the blocks [`Layout::block`] tells apart.
    #[test]
    fn dense_blocks_are_the_layouts_blocks() {
        let ext4 = Layout::Ext4 {
            inodes_per_group: 8192,
            per_block: 16,
        };
        let zfs_layout = Layout::Zfs { per_block: 32 };
        for layout in [ext4, zfs_layout] {
            let inos = [1u64, 2, 16, 17, 31, 32, 8192, 8193, 100_000, 100_001];
            let mut a: Vec<u64> = inos.iter().map(|&i| layout.block(i)).collect();
            let mut b: Vec<u64> = inos.iter().map(|&i| dense_block(&layout, i)).collect();
            a.dedup();
            b.dedup();
            assert_eq!(a.len(), b.len(), "{layout:?}");
        }
        assert!(zfs(500).is_err() && zfs(1024).unwrap().1.contains("16 dnodes"));
    }
}
