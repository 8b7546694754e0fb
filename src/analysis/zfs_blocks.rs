//! What each byte of a ZFS pool's device holds, read from `zdb -ddddd` (every object of every
//! dataset with the block pointers of its indirect tree): so that each read and write of a
//! device trace is named by what it touched (a metadnode block, an indirect block, a chunk
//! directory's ZAP, chunk data, a space map, the labels) and a difference between the model and
//! the device points at a mechanism.
//!
//! A block pointer's DVA `vdev:offset:asize` lies `offset` bytes into the vdev's allocatable
//! space, which starts [`LABELS_FRONT`] into the device (two 256 KiB labels and the 3.5 MiB
//! boot block); two more labels fill the last [`LABELS_BACK`]. Only DVA[0] is mapped: reads go
//! there (a ditto copy is read only when the first is bad), and writes go to new places
//! (copy-on-write), which the map of the pool before the run does not know: "unmapped".

use std::io::BufRead;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Serialize;

/// The device's front labels and boot block (`VDEV_LABEL_START_SIZE`).
pub const LABELS_FRONT: u64 = 4 << 20;
/// The device's back labels (`VDEV_LABEL_END_SIZE`).
pub const LABELS_BACK: u64 = 512 << 10;

/// What a block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The labels (the uberblock ring) and the boot block.
    Labels,
    /// A dataset's or the MOS's objset block (its root block pointer's target).
    Objset,
    /// A leaf block of a dataset's metadnode: 32 dnodes of 512 bytes (16 KiB logical).
    MetaDnode,
    /// An indirect block (level 1 or above) of any object of a dataset, the metadnode's
    /// included.
    Indirect,
    /// A leaf block of a chunk directory (`.chunks/XXXX`): a micro ZAP or a fat ZAP's
    /// header, pointer table or leaf.
    ChunkDirZap,
    /// A leaf block of any other directory.
    DirZap,
    /// Data of a chunk file.
    ChunkData,
    /// Data of any other file (index files, the lock file, ...).
    FileData,
    /// A space map (the MOS's record of allocations and frees).
    SpaceMap,
    /// Any other block of the MOS (its metadnode, the config, the DSL's objects, ...).
    Mos,
    /// Any other object of a dataset (the master node, the delete queue, ...).
    Other,
    /// No block of the pool as mapped: free space then, or a block written since.
    Unmapped,
}

impl Kind {
    /// Every kind, in report order.
    pub const ALL: [Kind; 12] = [
        Kind::Labels,
        Kind::Objset,
        Kind::MetaDnode,
        Kind::Indirect,
        Kind::ChunkDirZap,
        Kind::DirZap,
        Kind::ChunkData,
        Kind::FileData,
        Kind::SpaceMap,
        Kind::Mos,
        Kind::Other,
        Kind::Unmapped,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Labels => "labels",
            Kind::Objset => "objset",
            Kind::MetaDnode => "meta-dnode",
            Kind::Indirect => "indirect",
            Kind::ChunkDirZap => "chunk-dir-zap",
            Kind::DirZap => "dir-zap",
            Kind::ChunkData => "chunk-data",
            Kind::FileData => "file-data",
            Kind::SpaceMap => "space-map",
            Kind::Mos => "mos",
            Kind::Other => "other",
            Kind::Unmapped => "unmapped",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// One mapped block: device bytes `[start, end)`, its kind and object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Its first byte on the device.
    pub start: u64,
    /// One past its last byte (its allocated size: whole sectors).
    pub end: u64,
    /// What it holds.
    pub kind: Kind,
    /// The object it belongs to (0 for objsets; -1 and -2 are a dataset's user and group
    /// space accounting).
    pub object: i64,
}

/// The blocks of a pool, sorted by place.
#[derive(Clone, Debug, Default)]
pub struct BlockMap {
    blocks: Vec<Block>,
    /// The device's size (the back labels lie at its end); 0: not known.
    pub device_bytes: u64,
}

/// What one object of `zdb`'s dump is, as far as the map cares.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ObjectType {
    Dnode,
    Directory,
    File,
    SpaceMap,
    Other,
}

impl BlockMap {
    /// The map of `zdb -ddddd POOL`'s output, for a device of `device_bytes`.
    pub fn from_zdb(text: impl BufRead, device_bytes: u64) -> Result<BlockMap> {
        let mut blocks = Vec::new();
        let mut mos = false;
        // The object being read: its id, type, path (from its bonus), whether its header
        // line comes next.
        let mut object = (0i64, ObjectType::Other);
        let mut path = String::new();
        let mut pending: Vec<(u64, u64, u8)> = Vec::new(); // (start, end, level) of `object`
        let mut header_next = false;
        let mut datasets = 0;
        let flush = |blocks: &mut Vec<Block>,
                     pending: &mut Vec<(u64, u64, u8)>,
                     object: (i64, ObjectType),
                     path: &str,
                     mos: bool| {
            let chunky = path.contains("/.chunks/");
            for (start, end, level) in pending.drain(..) {
                let kind = match (mos, level, object.1) {
                    (true, _, ObjectType::SpaceMap) => Kind::SpaceMap,
                    (true, _, _) => Kind::Mos,
                    (false, 1.., _) => Kind::Indirect,
                    (false, 0, ObjectType::Dnode) => Kind::MetaDnode,
                    (false, 0, ObjectType::Directory) if chunky => Kind::ChunkDirZap,
                    (false, 0, ObjectType::Directory) => Kind::DirZap,
                    (false, 0, ObjectType::File) if chunky => Kind::ChunkData,
                    (false, 0, ObjectType::File) => Kind::FileData,
                    (false, 0, _) => Kind::Other,
                };
                blocks.push(Block {
                    start,
                    end,
                    kind,
                    object: object.0,
                });
            }
        };
        for (n, line) in text.lines().enumerate() {
            let line = line.with_context(|| format!("zdb's output, line {}", n + 1))?;
            if let Some(rest) = line.strip_prefix("Dataset ") {
                flush(&mut blocks, &mut pending, object, &path, mos);
                datasets += 1;
                mos = rest.starts_with("mos ");
                if let Some(dva) = rest
                    .split("DVA[0]=<")
                    .nth(1)
                    .and_then(|d| d.split('>').next())
                {
                    let (start, end) = dva_range(dva).with_context(|| {
                        format!("zdb's output, line {}: a root block pointer '{dva}'", n + 1)
                    })?;
                    blocks.push(Block {
                        start,
                        end,
                        kind: Kind::Objset,
                        object: 0,
                    });
                }
                continue;
            }
            let t = line.trim_start();
            if t.starts_with("Object ") && t.contains(" type") {
                flush(&mut blocks, &mut pending, object, &path, mos);
                path.clear();
                header_next = true;
                continue;
            }
            if header_next {
                header_next = false;
                let f: Vec<&str> = t.split_whitespace().collect();
                let id = f.first().and_then(|v| v.parse().ok()).with_context(|| {
                    format!("zdb's output, line {}: no object id in '{t}'", n + 1)
                })?;
                // id lvl iblk dblk dsize lsize %full type...
                let ty = f.get(7..).map(|w| w.join(" ")).unwrap_or_default();
                let ty = match ty.as_str() {
                    "DMU dnode" => ObjectType::Dnode,
                    "ZFS directory" => ObjectType::Directory,
                    "ZFS plain file" => ObjectType::File,
                    "SPA space map" => ObjectType::SpaceMap,
                    _ => ObjectType::Other,
                };
                object = (id, ty);
                continue;
            }
            if let Some(p) = t.strip_prefix("path\t") {
                path = p.to_string();
                continue;
            }
            // "<offset> L<level> <vdev>:<offset>:<asize> <lsize>L/<psize>P F=.. B=../.."
            let mut w = t.split_whitespace();
            let (Some(_), Some(level), Some(dva)) = (w.next(), w.next(), w.next()) else {
                continue;
            };
            let Some(level) = level.strip_prefix('L').and_then(|l| l.parse::<u8>().ok()) else {
                continue;
            };
            if !dva.contains(':') || !w.next().is_some_and(|s| s.ends_with('P')) {
                continue;
            }
            let (start, end) = dva_range(dva).with_context(|| {
                format!("zdb's output, line {}: a block pointer '{dva}'", n + 1)
            })?;
            pending.push((start, end, level));
        }
        flush(&mut blocks, &mut pending, object, &path, mos);
        if datasets == 0 {
            bail!("zdb's output names no dataset: not the output of zdb -ddddd POOL");
        }
        blocks.sort_by_key(|b| b.start);
        Ok(BlockMap {
            blocks,
            device_bytes,
        })
    }

    /// The mapped blocks, by place.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// Blocks of each kind.
    pub fn counts(&self) -> Vec<(Kind, u64)> {
        let mut c = std::collections::BTreeMap::new();
        for b in &self.blocks {
            *c.entry(b.kind).or_insert(0u64) += 1;
        }
        c.into_iter().collect()
    }

    /// The kinds of the bytes `[offset, offset + len)` and how many bytes of each: the
    /// labels, the mapped blocks' kinds in place order, then what no block holds
    /// ([`Kind::Unmapped`]).
    pub fn classify(&self, offset: u64, len: u64, out: &mut Vec<(Kind, u64)>) {
        out.clear();
        let end = offset + len;
        let mut add = |k: Kind, n: u64| {
            if n == 0 {
                return;
            }
            match out.iter_mut().find(|(o, _)| *o == k) {
                Some((_, c)) => *c += n,
                None => out.push((k, n)),
            }
        };
        let back = self.device_bytes.saturating_sub(LABELS_BACK);
        let labels = overlap(offset, end, 0, LABELS_FRONT)
            + if self.device_bytes > 0 {
                overlap(offset, end, back, self.device_bytes)
            } else {
                0
            };
        add(Kind::Labels, labels);
        let mut mapped = 0;
        let first = self.blocks.partition_point(|b| b.end <= offset);
        for b in self.blocks[first..].iter().take_while(|b| b.start < end) {
            let n = overlap(offset, end, b.start, b.end);
            add(b.kind, n);
            mapped += n;
        }
        add(Kind::Unmapped, len.saturating_sub(labels + mapped));
    }

    /// Writes the map as text: a header line, then `start end kind object` a block (hex
    /// places), what [`BlockMap::load`] reads.
    pub fn save(&self, path: &Path) -> Result<()> {
        use std::io::Write;
        crate::fsutil::write_whole(path, |f| {
            let mut f = std::io::BufWriter::new(f);
            writeln!(
                f,
                "# chunkscope zfs block map: device {} bytes",
                self.device_bytes
            )?;
            for b in &self.blocks {
                writeln!(
                    f,
                    "{:x} {:x} {} {}",
                    b.start,
                    b.end,
                    b.kind.name(),
                    b.object
                )?;
            }
            f.flush()
        })
        .with_context(|| format!("writing {}", path.display()))
    }

    /// Reads a map [`BlockMap::save`] wrote.
    pub fn load(path: &Path) -> Result<BlockMap> {
        let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let mut lines = std::io::BufReader::new(f).lines();
        let head = lines.next().transpose()?.unwrap_or_default();
        let device_bytes = head
            .strip_prefix("# chunkscope zfs block map: device ")
            .and_then(|r| r.strip_suffix(" bytes"))
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("{}: not a chunkscope zfs block map", path.display()))?;
        let mut blocks = Vec::new();
        for (n, line) in lines.enumerate() {
            let line = line?;
            let bad = || {
                format!(
                    "{}, line {}: '{line}' is not 'start end kind object'",
                    path.display(),
                    n + 2
                )
            };
            let f: Vec<&str> = line.split_whitespace().collect();
            let [start, end, kind, object] = f[..] else {
                bail!("{}", bad());
            };
            let b = Block {
                start: u64::from_str_radix(start, 16).with_context(bad)?,
                end: u64::from_str_radix(end, 16).with_context(bad)?,
                kind: Kind::parse(kind).with_context(bad)?,
                object: object.parse().with_context(bad)?,
            };
            if b.end <= b.start || blocks.last().is_some_and(|p: &Block| p.start > b.start) {
                bail!("{} (out of order or empty)", bad());
            }
            blocks.push(b);
        }
        Ok(BlockMap {
            blocks,
            device_bytes,
        })
    }
}

/// Bytes `[a, b)` and `[c, d)` share.
fn overlap(a: u64, b: u64, c: u64, d: u64) -> u64 {
    b.min(d).saturating_sub(a.max(c))
}

/// The device bytes of a DVA `vdev:offset:asize` (hex), vdev 0 only.
fn dva_range(dva: &str) -> Result<(u64, u64)> {
    let mut p = dva.split(':');
    let (Some(vdev), Some(off), Some(size), None) = (p.next(), p.next(), p.next(), p.next()) else {
        bail!("not vdev:offset:size");
    };
    if vdev != "0" {
        bail!("vdev {vdev}: the testbed's pool has one vdev, 0");
    }
    let off = u64::from_str_radix(off, 16)?;
    let size = u64::from_str_radix(size, 16)?;
    Ok((LABELS_FRONT + off, LABELS_FRONT + off + size))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An excerpt of zdb 0.7.0's (zfs-fuse) `-ddddd` output of a testbed pool.
    const ZDB: &str = "\
Dataset mos [META], ID 0, cr_txg 4, 864K, 31 objects, rootbp DVA[0]=<0:14b11000:1000> DVA[1]=<0:4407f000:1000> [L0 DMU objset] fletcher4 lzjb LE contiguous unique triple size=800L/200P birth=35L/35P fill=31 cksum=1

    Object  lvl   iblk   dblk  dsize  lsize   %full  type
        27    1    16K     4K  12.0K     4K  100.00  SPA space map
\tdnode maxblkid: 0
Indirect blocks:
               0 L0 0:14b00000:1000 1000L/400P F=1 B=35/35

Dataset testbed [ZPL], ID 16, cr_txg 1, 594M, 68619 objects, rootbp DVA[0]=<0:14ad9000:1000> DVA[1]=<0:44047000:1000> [L0 DMU objset] fletcher4 lzjb LE contiguous unique double size=800L/200P birth=24L/24P fill=68619 cksum=1

    Object  lvl   iblk   dblk  dsize  lsize   %full  type
         0    7    16K    16K  17.1M  33.5M   99.97  DMU dnode
\tdnode flags: USED_BYTES 
Indirect blocks:
               0 L6       0:14ad5000:1000 4000L/400P F=68619 B=24/24
               0       L0 0:14ace000:1000 4000L/c00P F=31 B=24/24
            4000       L0 0:4d4000:1000 4000L/800P F=32 B=7/7

    Object  lvl   iblk   dblk  dsize  lsize   %full  type
         8    1    16K    512     8K    512  100.00  ZFS directory
                                        264   bonus  ZFS znode
\tpath\t/store/.chunks/0000
\tmicrozap: 512 bytes, 0 entries

Indirect blocks:
               0 L0 0:3a000:1000 200L/200P F=1 B=7/7

\t\tsegment [0000000000000000, 0000000000000200) size   512

    Object  lvl   iblk   dblk  dsize  lsize   %full  type
         9    2    16K   128K   256K   256K  100.00  ZFS plain file
\tpath\t/store/vm/100/2026-01-01T00:00:00Z/drive-scsi0.img.fidx
Indirect blocks:
               0 L1  0:7000000:2000 4000L/800P F=2 B=9/9
               0  L0 0:7002000:20000 20000L/20000P F=1 B=9/9
";

    #[test]
    fn every_block_pointer_is_named_by_its_object() {
        let m = BlockMap::from_zdb(ZDB.as_bytes(), 2 << 30).unwrap();
        let at = |dva: u64| {
            let mut v = Vec::new();
            m.classify(LABELS_FRONT + dva, 512, &mut v);
            v
        };
        assert_eq!(at(0x14b11000), [(Kind::Objset, 512)]);
        assert_eq!(at(0x14b00000), [(Kind::SpaceMap, 512)]);
        assert_eq!(at(0x14ad5000), [(Kind::Indirect, 512)]);
        assert_eq!(at(0x4d4000), [(Kind::MetaDnode, 512)]);
        assert_eq!(at(0x3a000), [(Kind::ChunkDirZap, 512)]);
        assert_eq!(at(0x7000000), [(Kind::Indirect, 512)]);
        assert_eq!(at(0x7002000), [(Kind::FileData, 512)]);
        assert_eq!(at(0x100), [(Kind::Unmapped, 512)]);
        // A 128 KiB read over a dnode block, a gap and the directory's sector.
        let mut v = Vec::new();
        m.classify(LABELS_FRONT + 0x3a000 - 0x1000, 0x3000, &mut v);
        assert_eq!(v, [(Kind::ChunkDirZap, 0x1000), (Kind::Unmapped, 0x2000)]);
        // The labels, front and back.
        m.classify(0, 8192, &mut v);
        assert_eq!(v, [(Kind::Labels, 8192)]);
        m.classify((2 << 30) - 4096, 4096, &mut v);
        assert_eq!(v, [(Kind::Labels, 4096)]);
        assert_eq!(m.blocks().iter().filter(|b| b.object == 8).count(), 1);
    }

    #[test]
    fn a_map_reads_back_as_written_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let m = BlockMap::from_zdb(ZDB.as_bytes(), 2 << 30).unwrap();
        let path = dir.path().join("blocks.map");
        m.save(&path).unwrap();
        let back = BlockMap::load(&path).unwrap();
        assert_eq!(back.blocks(), m.blocks());
        assert_eq!(back.device_bytes, 2 << 30);
        std::fs::write(
            &path,
            "# chunkscope zfs block map: device 10 bytes\n10 8 labels 0\n",
        )
        .unwrap();
        let e = format!("{:#}", BlockMap::load(&path).unwrap_err());
        assert!(e.contains("line 2") && e.contains("blocks.map"), "{e}");
        let e = format!(
            "{:#}",
            BlockMap::from_zdb("nothing\n".as_bytes(), 0).unwrap_err()
        );
        assert!(e.contains("no dataset"), "{e}");
    }
}
