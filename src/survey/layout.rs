//! Which metadata block an inode's metadata lives in, per filesystem: ZFS dnodes in 16 KiB
//! metadnode blocks (object id / 32 for 512-byte dnodes), ext4 inode-table blocks (from the
//! superblock's inode size, block size and inodes per group, and where the tables lie), XFS
//! inode clusters (from `XFS_IOC_FSGEOMETRY`: allocation groups, inode size), and an
//! assumption (stated in the report) for filesystems without any of these. The survey file
//! keeps the geometry, and `simulate --survey` and `calibrate` give it to a model of the
//! same filesystem ([`super::file::FileHeader::fit_model`]).

use std::path::Path;

use anyhow::{bail, Result};

use crate::model::place::Placement;
use crate::model::Layout;

/// How the survey maps inode numbers to metadata blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutChoice {
    /// From the filesystem the store is on: ZFS with `dnode_size`-byte dnodes, ext4 from its
    /// superblock, anything else as ZFS (stated in the report).
    Auto {
        /// Bytes per dnode on ZFS; `None`: the dataset's `dnodesize` where `zfs get` reads
        /// it, else 512 (the pool version 23 of zfs-fuse has only 512-byte dnodes).
        dnode_size: Option<u64>,
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
const XFS_MAGIC: i64 = 0x5846_5342;
const FUSE_MAGIC: i64 = 0x6573_5546;

/// The name of the filesystem holding `root`, and its magic; zfs-fuse's (a FUSE mount of
/// type `fuse.zfs`) is ZFS's.
fn filesystem(root: &Path) -> Result<(String, i64)> {
    let (name, magic) = statfs_kind(root)?;
    if magic == FUSE_MAGIC && mount_of(root).is_some_and(|m| m.fstype == "fuse.zfs") {
        return Ok(("zfs".to_string(), ZFS_MAGIC));
    }
    Ok((name, magic))
}

/// The mount holding `root` (the one whose device `root` is on, the deepest such).
fn mount_of(root: &Path) -> Option<crate::fsutil::MountEntry> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(root).ok()?.dev();
    let want = format!("{}:{}", libc::major(dev), libc::minor(dev));
    crate::fsutil::mounts()
        .ok()?
        .into_iter()
        .filter(|m| m.dev == want && root.starts_with(&m.point))
        .max_by_key(|m| m.point.as_os_str().len())
}

/// What `zfs get` says of the dataset holding `root`: its name, dnode size (bytes; `None`
/// where the pool has no `dnodesize`, as version 23 has not: 512), record size and atime.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ZfsDataset {
    /// The dataset (`pool/name`), the mount's source.
    pub name: String,
    /// `dnodesize` in bytes.
    pub dnode_size: Option<u64>,
    /// `recordsize`, bytes.
    pub recordsize: Option<u64>,
    /// `atime` (and `relatime` where the pool has it), as `zfs get` prints them.
    pub atime: Option<String>,
    /// Why nothing was read, when nothing was.
    pub unread: Option<String>,
}

/// The dataset of the ZFS mount holding `root`, with what `zfs get -Hp` gives of it.
fn zfs_dataset(root: &Path) -> ZfsDataset {
    let Some(m) = mount_of(root) else {
        return ZfsDataset {
            unread: Some("no mount holds it in this process's mount table".into()),
            ..ZfsDataset::default()
        };
    };
    let mut d = ZfsDataset {
        name: m.source.clone(),
        ..ZfsDataset::default()
    };
    // One property a call: a pool version without one (`dnodesize`, `relatime`) fails the
    // whole list.
    let get = |prop: &str| -> std::result::Result<String, String> {
        let o = std::process::Command::new("zfs")
            .args(["get", "-Hp", "-o", "value", prop, &m.source])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("running zfs: {e}"))?;
        if o.status.success() {
            Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).trim().to_string())
        }
    };
    match get("recordsize") {
        Ok(v) => d.recordsize = v.parse().ok(),
        Err(e) => {
            d.unread = Some(format!("zfs get {}: {e}", m.source));
            return d;
        }
    }
    d.dnode_size = get("dnodesize").ok().and_then(|v| parse_dnode_size(&v));
    d.atime = get("atime").ok().map(|a| match get("relatime") {
        Ok(r) if a == "on" && r == "on" => "relatime".to_string(),
        _ => a,
    });
    d
}

/// `dnodesize`'s value in bytes: `legacy` 512, `auto` 1024 (what OpenZFS picks for a
/// dataset with extended attributes in system attributes), `1k` ... `16k`, or a number.
fn parse_dnode_size(v: &str) -> Option<u64> {
    match v {
        "legacy" => Some(512),
        "auto" => Some(1024),
        _ => v
            .strip_suffix('k')
            .and_then(|k| k.parse::<u64>().ok().map(|k| k << 10))
            .or_else(|| v.parse().ok()),
    }
}

/// `statfs`'s name and magic of the filesystem holding `root`.
fn statfs_kind(root: &Path) -> Result<(String, i64)> {
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
        XFS_MAGIC => "xfs",
        0x9123_683e => "btrfs",
        FUSE_MAGIC => "fuse",
        0x6969 => "nfs",
        _ => "another filesystem",
    };
    Ok((name.to_string(), magic))
}

/// The kernel ZFS module's statistics of its ARC.
const ARCSTATS: &str = "/proc/spl/kstat/zfs/arcstats";

/// The ARC's maximum size (`c_max`, bytes) in the text of an `arcstats` kstat: a header line,
/// a `name type data` line, then a line of those a statistic.
pub fn arc_max_bytes(arcstats: &str) -> Option<u64> {
    arcstats.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next()? == "c_max").then(|| f.nth(1)?.parse().ok())?
    })
}

/// Where the survey learns the ARC's size: the kernel module's `arcstats` (zfs-fuse has no
/// such file: its daemon's `--max-arc-size`).
fn arc_said(root: &Path) -> String {
    if fs_is_fuse(root) {
        return "its ARC's size: the daemon's --max-arc-size (calibrate --cache SIZE pins it)"
            .into();
    }
    match std::fs::read_to_string(ARCSTATS)
        .ok()
        .and_then(|t| arc_max_bytes(&t))
    {
        Some(b) => format!(
            "ARC at most {} (c_max in {ARCSTATS}: calibrate --cache {} pins it)",
            crate::units::human_bytes(b),
            b
        ),
        None => format!("its ARC's size unread ({ARCSTATS}: no c_max)"),
    }
}

/// Whether `root` is on a FUSE mount (zfs-fuse's pools are).
fn fs_is_fuse(root: &Path) -> bool {
    statfs_kind(root).is_ok_and(|(_, m)| m == FUSE_MAGIC)
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

/// Where an ext4 filesystem's inode tables and directory blocks lie, from its superblock
/// (1024 bytes in): blocks a group, groups a flex group, and the first inode-table block of
/// the first flex group (the superblock, the group descriptors and their reserve for growth,
/// then a block bitmap and an inode bitmap for each group of the flex group).
pub(super) fn ext4_placement(sb: &[u8]) -> Option<Placement> {
    let (_, block, _) = parse_ext4_superblock(sb)?;
    let u32_at = |o: usize| u32::from_le_bytes(sb[o..o + 4].try_into().expect("4")) as u64;
    let u16_at = |o: usize| u16::from_le_bytes(sb[o..o + 2].try_into().expect("2")) as u64;
    let per_group = u32_at(32);
    let first = u32_at(20);
    if per_group == 0 {
        return None;
    }
    let groups = u32_at(4).saturating_sub(first).div_ceil(per_group);
    // flex_bg (incompat 0x200) groups 2^s_log_groups_per_flex; 64bit (0x80) descriptors of
    // s_desc_size bytes, else 32.
    let incompat = u32_at(0x60);
    let flex = if incompat & 0x200 != 0 {
        1u64 << sb[0x174].min(31)
    } else {
        1
    };
    let desc = if incompat & 0x80 != 0 {
        u16_at(0xfe).max(32)
    } else {
        32
    };
    let descriptors = (groups * desc).div_ceil(block);
    Some(Placement {
        blocks_per_group: per_group,
        flex_groups: flex,
        itable_start: first + 1 + descriptors + u16_at(0xce) + 2 * flex,
        ..Placement::default()
    })
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
fn ext4_superblock(root: &Path) -> Option<Vec<u8>> {
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
    parse_ext4_superblock(&sb).map(|_| sb)
}

/// An XFS filesystem's geometry, as `XFS_IOC_FSGEOMETRY` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct XfsGeometry {
    /// Bytes a filesystem block.
    pub block: u64,
    /// Blocks an allocation group.
    pub ag_blocks: u64,
    /// Allocation groups.
    pub ag_count: u64,
    /// Bytes an inode.
    pub inode_size: u64,
    /// A version 5 superblock (metadata checksums: the default since xfsprogs 3.2.3).
    pub v5: bool,
}

/// `XFS_IOC_FSGEOMETRY_V1`, `_IOR('X', 100, struct xfs_fsop_geom_v1)` (112 bytes): the version
/// every kernel answers; the fields read here are the same in the later ones.
const XFS_IOC_FSGEOMETRY_V1: libc::c_ulong = 0x8070_5864;
/// `XFS_FSOP_GEOM_FLAGS_V5SB`.
const XFS_GEOM_V5SB: u32 = 0x8000;

/// The fields of `struct xfs_fsop_geom_v1` that place inodes.
pub(super) fn parse_xfs_geometry(g: &[u8; 112]) -> Option<XfsGeometry> {
    let u32_at = |o: usize| u32::from_ne_bytes(g[o..o + 4].try_into().expect("4"));
    let x = XfsGeometry {
        block: u32_at(0) as u64,
        ag_blocks: u32_at(8) as u64,
        ag_count: u32_at(12) as u64,
        inode_size: u32_at(24) as u64,
        v5: u32_at(92) & XFS_GEOM_V5SB != 0,
    };
    let sane = x.block.is_power_of_two()
        && x.inode_size.is_power_of_two()
        && (256..=x.block).contains(&x.inode_size)
        && x.ag_blocks > 1
        && x.ag_count > 0;
    sane.then_some(x)
}

/// The XFS geometry of the filesystem holding `root`.
fn xfs_geometry(root: &Path) -> Option<XfsGeometry> {
    use std::os::fd::AsRawFd;
    let dir = std::fs::File::open(root).ok()?;
    let mut g = [0u8; 112];
    // SAFETY: the ioctl writes at most 112 bytes (struct xfs_fsop_geom_v1) into `g`.
    let rc = unsafe { libc::ioctl(dir.as_raw_fd(), XFS_IOC_FSGEOMETRY_V1 as _, g.as_mut_ptr()) };
    (rc == 0).then(|| parse_xfs_geometry(&g)).flatten()
}

/// The model's layout of an XFS filesystem of geometry `x`, and its metadata block (an inode
/// cluster: 8 KiB of 256-byte inodes, scaled with the inode size on v5, so 32 inodes; 8 KiB
/// on v4). A short-form directory keeps in its inode's literal area (the inode less its core:
/// 176 bytes on v5, 100 on v4) a 6-byte header and, per entry, a name length, an offset, the
/// name (64 characters for a chunk), a file type on v5 and a 4-byte inode number.
pub(super) fn xfs_layout(x: &XfsGeometry) -> (Layout, u64) {
    let per_block = if x.v5 {
        32
    } else {
        (8192 / x.inode_size).max(1)
    };
    let inopb_log = (x.block / x.inode_size).trailing_zeros();
    let agblklog = 64 - (x.ag_blocks - 1).leading_zeros();
    let (core, entry) = if x.v5 { (176, 72) } else { (100, 71) };
    (
        Layout::Xfs {
            per_block,
            inopb_log,
            agino_log: agblklog + inopb_log,
            ag_blocks: x.ag_blocks,
            shortform_entries: x.inode_size.saturating_sub(core + 6) / entry,
        },
        per_block * x.inode_size,
    )
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

/// What the survey found of the filesystem under a store.
#[derive(Clone, Debug)]
pub struct Chosen {
    /// Its name (`zfs`, `ext4`, `xfs`, ...).
    pub filesystem: String,
    /// Where its inodes' metadata lives.
    pub layout: Layout,
    /// That, described.
    pub description: String,
    /// Whether the layout was assumed rather than read.
    pub assumed: bool,
    /// Where ext4's blocks lie, read from its superblock.
    pub placement: Option<Placement>,
    /// Bytes of a metadata block (an inode-table block, an XFS inode cluster); 0: not read.
    pub block_bytes: u64,
}

/// An XFS geometry and the layout it gives, described for the survey's report.
fn xfs_description(x: &XfsGeometry, layout: &Layout, cluster_bytes: u64) -> String {
    let agino_log = match *layout {
        Layout::Xfs { agino_log, .. } => agino_log,
        _ => 0,
    };
    format!(
        "XFS: inodes of {} bytes read {} KiB a cluster, {} allocation groups of {} blocks of \
         {} bytes (inode number = group << {agino_log} | inode in it)",
        x.inode_size,
        cluster_bytes >> 10,
        x.ag_count,
        x.ag_blocks,
        x.block
    )
}

/// The filesystem of `root`, its layout under `choice`, a description, and whether the
/// layout was assumed rather than read.
pub fn choose(root: &Path, choice: &LayoutChoice) -> Result<Chosen> {
    let (fs, magic) = filesystem(root)?;
    let sb = (magic == EXT4_MAGIC)
        .then(|| ext4_superblock(root))
        .flatten();
    let ext4 = |inode_size: Option<u64>, ipg: Option<u64>| -> Result<(Layout, String, bool)> {
        let on_ext4 = magic == EXT4_MAGIC;
        let read = sb.as_deref().and_then(parse_ext4_superblock);
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
    let xfs = (magic == XFS_MAGIC)
        .then(|| xfs_geometry(root))
        .flatten()
        .map(|x| (x, xfs_layout(&x)));
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
                let ds = zfs_dataset(root);
                let size = dnode_size.or(ds.dnode_size).unwrap_or(512);
                let (l, d) = zfs(size)?;
                let mut said = vec![format!("dataset {}", ds.name)];
                if let Some(r) = ds.recordsize {
                    said.push(format!("recordsize {}", crate::units::human_bytes(r)));
                }
                if let Some(a) = &ds.atime {
                    said.push(format!("atime {a}"));
                }
                if ds.unread.is_none() && ds.dnode_size.is_none() {
                    said.push("no dnodesize property (an older pool: 512-byte dnodes)".into());
                }
                if let Some(why) = &ds.unread {
                    said.push(format!(
                        "its properties unread ({why}): dnodes of {size} bytes (--dnode-size to give them)"
                    ));
                }
                said.push(arc_said(root));
                let fuse = if fs_is_fuse(root) { " (zfs-fuse)" } else { "" };
                (l, format!("{d}{fuse}; {}", said.join(", ")), false)
            }
            EXT4_MAGIC => ext4(None, None)?,
            XFS_MAGIC if xfs.is_some() => {
                let (x, (l, bytes)) = xfs.expect("checked");
                (l, xfs_description(&x, &l, bytes), false)
            }
            _ => {
                let (l, d) = zfs(dnode_size.unwrap_or(512))?;
                let d = format!("{d}, assumed: {fs} has no inode blocks of its own (--layout zfs|ext4 to choose)");
                (l, d, true)
            }
        },
    };
    let (placement, block_bytes) = match layout {
        Layout::Ext4 { .. } if magic == EXT4_MAGIC => (
            sb.as_deref().and_then(ext4_placement),
            sb.as_deref()
                .and_then(parse_ext4_superblock)
                .map_or(0, |(_, block, _)| block),
        ),
        Layout::Xfs { .. } => (None, xfs.map_or(0, |(_, (_, bytes))| bytes)),
        _ => (None, 0),
    };
    Ok(Chosen {
        filesystem: fs,
        layout,
        description: desc,
        assumed,
        placement,
        block_bytes,
    })
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

    fn xfs_geom(block: u32, ag_blocks: u32, ag_count: u32, inode: u32, flags: u32) -> [u8; 112] {
        let mut g = [0u8; 112];
        g[0..4].copy_from_slice(&block.to_ne_bytes());
        g[8..12].copy_from_slice(&ag_blocks.to_ne_bytes());
        g[12..16].copy_from_slice(&ag_count.to_ne_bytes());
        g[24..28].copy_from_slice(&inode.to_ne_bytes());
        g[92..96].copy_from_slice(&flags.to_ne_bytes());
        g
    }

    /// mkfs.xfs's defaults on 2 GiB (four groups of 131,072 blocks of 4 KiB, 512-byte v5
    /// inodes) give the `xfs-hdd` preset's layout and block exactly; `-d agcount=7 -i
    /// size=1024` on 64 GiB (what the survey of such a filesystem read) give 1 KiB inodes four
    /// a block, 32 KiB clusters, groups of 2,396,746 blocks (22 bits) and 11 chunk names in a
    /// short-form directory; a v4 filesystem 8 KiB clusters.
    #[test]
    fn an_xfs_geometry_gives_the_model_its_layout() {
        let x = parse_xfs_geometry(&xfs_geom(4096, 131_072, 4, 512, XFS_GEOM_V5SB)).unwrap();
        let preset = crate::model::ModelParams::preset("xfs-hdd").unwrap();
        assert_eq!(xfs_layout(&x), (preset.layout, preset.block_bytes));
        let x = parse_xfs_geometry(&xfs_geom(4096, 2_396_746, 7, 1024, XFS_GEOM_V5SB)).unwrap();
        let want = Layout::Xfs {
            per_block: 32,
            inopb_log: 2,
            agino_log: 24,
            ag_blocks: 2_396_746,
            shortform_entries: 11,
        };
        assert_eq!(xfs_layout(&x), (want, 32 << 10));
        let v4 = parse_xfs_geometry(&xfs_geom(4096, 131_072, 4, 256, 0)).unwrap();
        let (l, bytes) = xfs_layout(&v4);
        assert_eq!(bytes, 8 << 10);
        assert!(matches!(
            l,
            Layout::Xfs {
                per_block: 32,
                inopb_log: 4,
                agino_log: 21,
                shortform_entries: 2,
                ..
            }
        ));
        for bad in [
            xfs_geom(0, 131_072, 4, 512, 0),
            xfs_geom(4096, 131_072, 4, 100, 0),
            xfs_geom(4096, 1, 4, 512, 0),
            xfs_geom(4096, 131_072, 0, 512, 0),
        ] {
            assert_eq!(parse_xfs_geometry(&bad), None);
        }
    }

    /// The first inode-table block that `dumpe2fs` showed on two mke2fs-default images: 289
    /// on 2 GiB (one descriptor block, 255 reserved), 1,065 on 64 GiB (8 descriptor blocks,
    /// 1,024 reserved); both 32,768 blocks a group, 16 groups a flex group.
    #[test]
    fn an_ext4_superblock_places_the_inode_tables() {
        let sb = |blocks: u32, reserved: u16| {
            let mut sb = vec![0u8; 1024];
            sb[4..8].copy_from_slice(&blocks.to_le_bytes());
            sb[24..28].copy_from_slice(&2u32.to_le_bytes());
            sb[32..36].copy_from_slice(&32_768u32.to_le_bytes());
            sb[40..44].copy_from_slice(&8192u32.to_le_bytes());
            sb[56..58].copy_from_slice(&0xef53u16.to_le_bytes());
            sb[0x60..0x64].copy_from_slice(&0x2c2u32.to_le_bytes());
            sb[0xce..0xd0].copy_from_slice(&reserved.to_le_bytes());
            sb[0xfe..0x100].copy_from_slice(&64u16.to_le_bytes());
            sb[0x174] = 4;
            sb
        };
        let p = ext4_placement(&sb(524_288, 255)).unwrap();
        assert_eq!(p, Placement::default());
        let p = ext4_placement(&sb(16_777_216, 1024)).unwrap();
        assert_eq!(
            (p.blocks_per_group, p.flex_groups, p.itable_start),
            (32_768, 16, 1065)
        );
        let mut none = sb(524_288, 255);
        none[56] = 0;
        assert_eq!(ext4_placement(&none), None);
    }
}

#[cfg(test)]
mod zfs_tests {
    use super::*;

    #[test]
    fn dnode_sizes_read_as_zfs_prints_them() {
        for (v, want) in [
            ("legacy", Some(512)),
            ("auto", Some(1024)),
            ("1k", Some(1024)),
            ("16k", Some(16384)),
            ("2048", Some(2048)),
            ("-", None),
        ] {
            assert_eq!(parse_dnode_size(v), want, "{v}");
        }
    }

    /// Kernel ZFS's arcstats as OpenZFS 2.x prints it (its first lines): the survey reports
    /// `c_max`, what calibrate's `--cache` pins on ZFS; a text without it gives nothing.
    #[test]
    fn the_arc_maximum_reads_from_arcstats() {
        let text = "13 1 0x01 123 33456 6270452373 1125987447209\n\
                    name                            type data\n\
                    hits                            4    1620594\n\
                    c                               4    2046945280\n\
                    c_min                           4    262610944\n\
                    c_max                           4    8402862080\n\
                    size                            4    1984390504\n";
        assert_eq!(arc_max_bytes(text), Some(8_402_862_080));
        assert_eq!(arc_max_bytes("name type data\nc 4 100\n"), None);
        assert_eq!(arc_max_bytes("c_max 4 lots\n"), None);
    }
}
