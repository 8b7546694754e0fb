//! The model's parameters ([`ModelParams`]): the presets of the threads' pools and disks,
//! files that override them, and what each knob means.

use serde::{Deserialize, Serialize};

use super::cache::Policy;
use super::place::Placement;
use super::Layout;
use crate::disk::DiskParams;

/// Model parameters; see [`ModelParams::preset`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelParams {
    /// The preset's (or the model file's) name.
    pub name: String,
    /// Where inodes' metadata lives.
    pub layout: Layout,
    /// Bytes per metadata block (the cache's unit).
    pub block_bytes: u64,
    /// Metadata cache size.
    pub cache_bytes: u64,
    /// Cost of one demand read of a metadata block.
    pub miss_ns: u64,
    /// Reads (or writes) the device serves in parallel.
    pub queue_depth: u64,
    /// Cost of writing one dirty block at a transaction-group sync.
    pub write_ns: u64,
    /// Transaction-group interval.
    pub txg_ns: u64,
    /// Dirty blocks at which a sync is forced (ZFS's dirty data max, in blocks).
    pub dirty_limit_blocks: u64,
    /// Fraction of the dirty limit above which operations are throttled.
    pub throttle_start: f64,
    /// ZFS's `zfs_delay_scale`: how long the throttle delays an operation (see the module documentation).
    pub delay_scale_ns: u64,
    /// CPU and syscall cost of any metadata operation.
    pub op_ns: u64,
    /// Directory entries per ZAP leaf block (0: a directory is one block). A ZFS fat ZAP leaf
    /// of 16 KiB holds at most ~106 entries of a 64-character chunk name and splits when
    /// full, so leaves hold ~75 on average.
    #[serde(default)]
    pub zap_leaf_entries: u64,
    /// Entries per directory the ZAP layout assumes: a property of the store, not the pool
    /// (`simulate` and `mount` fill it in from the store when `zap_leaf_entries` is set).
    #[serde(default)]
    pub dir_entries: u64,
    /// Listing prefetches are asynchronous, as ZFS's `dmu_prefetch_dnode` is: a listing
    /// returns without waiting for them, and waits only for the previous listing's prefetch
    /// reads still in flight (the pool serves them `queue_depth` at a time, alongside). Off:
    /// a listing waits for its own prefetch reads (the older presets).
    #[serde(default)]
    pub async_prefetch: bool,
    /// Unlinking a file frees its data, which reads the file's indirect block: on ZFS every
    /// file of more than three records has one (a PBS chunk of 1-4 MiB at 128 KiB records
    /// does), and nothing else a GC does reads or caches it, so each removal is a demand
    /// read.
    #[serde(default)]
    pub unlink_reads_indirect: bool,
    /// The metadata cache's replacement policy: `lru`, or `arc` (ZFS's recency and
    /// frequency lists with their ghosts, [`arc::BlockArc`]).
    #[serde(default)]
    pub cache_policy: Policy,
    /// The share of `cache_bytes` that metadata may hold (ZFS's ARC metadata limit:
    /// `zfs_arc_meta_limit`, 75% of the ARC by default before OpenZFS 2.2); 0: all of it.
    #[serde(default)]
    pub metadata_limit: f64,
    /// `zfs_readdir` prefetches the dnodes of the entries it returns only while the
    /// directory's prefetch flag is set: each readdir clears it, a lookup that finds an entry
    /// in the directory sets it again, and a directory just brought into memory has it set.
    /// So a listing read in several `getdents` calls with no lookup between them prefetches
    /// the first call's entries only. ZAP leaves are prefetched either way
    /// (`zap_iterate_prefetch`). Off: every listing prefetches every entry.
    #[serde(default)]
    pub readdir_prefetch_flag: bool,
    /// The vdev queue's aggregation limit (`zfs_vdev_aggregation_limit`, 1 MiB on HDDs):
    /// reads queued together whose blocks lie within `read_gap_bytes` of each other go out as
    /// one I/O of at most this many bytes, and a transaction group's writes, which
    /// copy-on-write allocates one after the other, in I/Os of this size. 0: no aggregation.
    /// Only a listing's prefetch reads are queued together; demand reads go one at a time.
    #[serde(default)]
    pub aggregation_limit_bytes: u64,
    /// The read gap limit (`zfs_vdev_read_gap_limit`, 32 KiB): how far apart two queued
    /// reads may be and still be aggregated (the gap is read too).
    #[serde(default)]
    pub read_gap_bytes: u64,
    /// The time an aggregated I/O takes per block beyond its first (the transfer; the first
    /// block pays the seek and rotation, `miss_ns` or `write_ns`).
    #[serde(default)]
    pub transfer_ns: u64,
    /// A pool that is also serving backups: the share of the metadata cache their data and
    /// metadata hold (0: an idle pool).
    #[serde(default)]
    pub backup_cache_share: f64,
    /// The share of the disks' time the backups take: every read and write of the GC waits
    /// for the disks `1 / (1 - share)` times as long (0: an idle pool).
    #[serde(default)]
    pub backup_disk_share: f64,
    /// A disk under the model: demand reads and the writes of a sync are served by
    /// [`crate::disk::Disk`] at their blocks' places on it ([`Placement`]), one queue, so
    /// seeks, the platter's turn and the drive's read-ahead price them (`miss_ns`,
    /// `write_ns` and `transfer_ns` are then unused). None: every read costs `miss_ns`.
    #[serde(default)]
    pub disk: Option<DiskParams>,
    /// Where the blocks lie on that disk (ext4's geometry).
    #[serde(default)]
    pub placement: Placement,
    /// Host time of each read the disk serves, beyond the disk's own: the block layer and
    /// the driver (on the testbed, the loop device and the FUSE round trip to the disk
    /// model, which `testbed` measures).
    #[serde(default)]
    pub io_ns: u64,
    /// ext4's `inode_readahead_blks` (32): a miss on an inode-table block reads the aligned
    /// run of this many table blocks around it (within its group) in one I/O, and caches
    /// them. 0: off.
    #[serde(default)]
    pub inode_readahead_blocks: u64,
    /// A listing updates the directory's atime (relatime does once a day, and whenever the
    /// atime is not newer than the mtime: every chunk directory at every GC), dirtying its
    /// inode's block.
    #[serde(default)]
    pub dir_atime: bool,
    /// With a disk: a sync writes the dirty blocks to a journal (one sequential write at
    /// [`Placement::journal`]) and each block to its home this long later, as ext4's
    /// write-back of checkpointed buffers does (`dirty_expire_centisecs`, 30 s). 0: a sync
    /// writes the blocks to their homes at once.
    #[serde(default)]
    pub home_write_delay_ns: u64,
    /// A listing prefetches its entries' inode blocks, as `zfs_readdir` does (see
    /// `readdir_prefetch_flag`); ext4's readdir reads no inode.
    #[serde(default = "yes")]
    pub readdir_prefetch: bool,
    /// With a disk: the journal logs changes, not blocks (XFS's logical logging): this many
    /// bytes for each change (an inode's core and its item, ~224 bytes measured on the
    /// testbed: a sweep's 65,536 directory atimes made 14 MiB of log). 0: the journal
    /// holds the dirty blocks themselves (ext4's jbd2).
    #[serde(default)]
    pub log_bytes_per_change: u64,
    /// With logical logging: the log is written in requests of this size (XFS's 32 KiB log
    /// buffers), each queued before the next demand read, so that they take turns with the
    /// reads at the disk as the log buffers in flight and the GC's reads do.
    #[serde(default)]
    pub log_io_bytes: u64,
    /// With logical logging: the log is pushed when this many bytes are waiting (XFS's CIL
    /// push at an eighth of the log: 8 MiB of a 64 MiB log), as well as every `txg_ns`.
    #[serde(default)]
    pub log_push_bytes: u64,
    /// With a disk: the bytes a read of one metadata block moves (ZFS's metadata is
    /// lzjb-compressed: a 16 KiB dnode block is one 4 KiB sector on the disk, a micro ZAP
    /// 512 bytes in one). 0: `block_bytes`.
    #[serde(default)]
    pub read_bytes: u64,
    /// With a disk, copy-on-write (ZFS): a sync writes each dirty block this many times
    /// (metadata's ditto copies: 2), each copy a request of `read_bytes` at the pool's
    /// allocation frontier (the copies in two places), never where the block was; the block
    /// is read from its new place after. The writes go to the disk one at a time, each
    /// before the next demand read that arrives while it is due, so they take turns with
    /// the GC's reads. 0: blocks are written home.
    #[serde(default)]
    pub cow_copies: u64,
    /// The next transaction group closes `txg_ns` after the previous sync's writes end (as
    /// zfs-fuse's did on the testbed), not `txg_ns` after the previous one closed.
    #[serde(default)]
    pub txg_after_sync: bool,
    /// With `cow_copies`: blocks each sync writes beyond the dirty ones (the space maps of
    /// the metaslabs it allocated from and freed to, the MOS, the indirect blocks above the
    /// dirty ones), each with its copies.
    #[serde(default)]
    pub cow_sync_extra_blocks: u64,
    /// A transaction group also closes once it holds this many dirty blocks (then, or when
    /// the running sync ends): ZFS's write limit, which syncs a group early when its dirty
    /// data reaches it (zfs-fuse's pool version 23 on the testbed: a sync every ~450 device
    /// writes, every 6 s while batched's phase 1 dirtied fast, every 10 s in the sweeps,
    /// none for 18 s while naive's phase 1 dirtied less; OpenZFS's `zfs_dirty_data_sync`).
    /// 0: groups close on `txg_ns` only.
    #[serde(default)]
    pub sync_dirty_blocks: u64,
    /// The filesystem's readdir gives no entry types (zfs-fuse's `zfsfuse_readdir` sets no
    /// `d_type`), so the GC's layout check, before phase 1 and again before phase 2, stats
    /// every chunk directory: `simulate` charges a lookup of each (outside the phases).
    #[serde(default)]
    pub readdir_without_types: bool,
}

fn yes() -> bool {
    true
}

/// The base of the presets: a cold ZFS pool of HDDs (8 ms a demand read, 8 at a time, a
/// 256 MiB metadata cache, 5 s transaction groups with ZFS's dirty limit and throttle), with
/// every optional mechanism off. `zfs-hdd`, the default model, adds what every ZFS pool
/// holding a PBS store has ([`ModelParams::preset`]).
impl Default for ModelParams {
    fn default() -> ModelParams {
        ModelParams {
            name: "zfs-hdd".to_string(),
            layout: Layout::Zfs { per_block: 32 },
            block_bytes: 16 << 10,
            cache_bytes: 256 << 20,
            miss_ns: 8_000_000,
            queue_depth: 8,
            write_ns: 8_000_000,
            txg_ns: 5_000_000_000,
            dirty_limit_blocks: (4u64 << 30) / (16 << 10),
            throttle_start: 0.6,
            delay_scale_ns: 500_000,
            op_ns: 2_000,
            zap_leaf_entries: 0,
            dir_entries: 0,
            async_prefetch: false,
            unlink_reads_indirect: false,
            cache_policy: Policy::Lru,
            metadata_limit: 0.0,
            readdir_prefetch_flag: false,
            aggregation_limit_bytes: 0,
            read_gap_bytes: 0,
            transfer_ns: 0,
            backup_cache_share: 0.0,
            backup_disk_share: 0.0,
            disk: None,
            placement: Placement::default(),
            io_ns: 0,
            inode_readahead_blocks: 0,
            dir_atime: false,
            home_write_delay_ns: 0,
            readdir_prefetch: true,
            log_bytes_per_change: 0,
            log_io_bytes: 0,
            log_push_bytes: 0,
            read_bytes: 0,
            cow_copies: 0,
            txg_after_sync: false,
            cow_sync_extra_blocks: 0,
            sync_dirty_blocks: 0,
            readdir_without_types: false,
        }
    }
}

/// What `--model` takes, for help texts: the presets (the last two are the pools of the
/// pbs-devel threads) or a JSON model file.
pub fn model_help() -> String {
    format!(
        "Cost model: a preset ({}) or a JSON model file",
        PRESETS.join(", ")
    )
}

/// Names of the presets.
pub const PRESETS: [&str; 8] = [
    "none",
    "zfs-hdd",
    "zfs-ssd",
    "ext4-hdd",
    "xfs-hdd",
    "zfs-raidz-hdd",
    "zfs-raidz-hdd-busy",
    "zfs-special-ssd",
];

impl ModelParams {
    /// The preset called `name` (the threads' pools, ext4; see [`PRESETS`]), or an error naming the presets.
    pub fn preset(name: &str) -> anyhow::Result<ModelParams> {
        let zfs = ModelParams {
            name: name.to_string(),
            ..ModelParams::default()
        };
        // What ZFS itself does to any PBS store, as the testbed's zfs-fuse pool showed it
        // (BENCHMARKS.md, "The model learns ZFS" and "zfs-hdd takes what generalises"): a
        // chunk directory is a fat ZAP (64-character names do not fit a micro ZAP; about 75
        // entries a leaf), a listing writes its directory's atime (atime=on, ZFS's default;
        // with relatime, once a day: once a daily GC), and a transaction group closes once
        // its dirty data reaches 20% of the dirty limit (OpenZFS's
        // zfs_dirty_data_sync_percent). What is zfs-fuse's or the testbed's own stays in
        // the testbed's model file (`testbed::zfs::model`).
        let any_zfs = ModelParams {
            zap_leaf_entries: 75,
            dir_atime: true,
            sync_dirty_blocks: zfs.dirty_limit_blocks / 5,
            ..zfs.clone()
        };
        // What the two pools of the threads share (see their presets below): a 16 GiB ARC,
        // fat-ZAP directories, asynchronous listing prefetch, zfs_readdir's prefetch flag
        // (a directory of more than 371 chunks read without lookups between its getdents
        // calls prefetches the first call's dnodes only; no figure of B or thread 000
        // changes with it, A's do), removals that read the indirect block. Not used: the
        // ARC policy, a metadata limit, vdev aggregation (BENCHMARKS.md "Calibration").
        let pool = ModelParams {
            cache_bytes: 16 << 30,
            zap_leaf_entries: 75,
            async_prefetch: true,
            readdir_prefetch_flag: true,
            unlink_reads_indirect: true,
            ..zfs.clone()
        };
        Ok(match name {
            "none" => ModelParams {
                cache_bytes: u64::MAX / 2,
                miss_ns: 0,
                write_ns: 0,
                op_ns: 0,
                delay_scale_ns: 0,
                ..zfs
            },
            "zfs-hdd" => any_zfs,
            "zfs-ssd" => ModelParams {
                miss_ns: 150_000,
                queue_depth: 32,
                write_ns: 50_000,
                ..any_zfs
            },
            "ext4-hdd" | "xfs-hdd" => ModelParams::one_disk(name, zfs)?,
            // The pool of thread 001's datastore B, where its readdir and lstat figures were
            // measured: 7 raidz1 vdevs of 4 HDDs. Every value comes from the thread's hardware
            // and measurements, none from a result this model is compared with (BENCHMARKS.md,
            // "Calibration"): a demand read costs 8 ms (270.9 s for 33,944 demand misses);
            // 1.37 device reads per 16 KiB read over 28 disks serve ~20 reads at a time; the
            // ARC held everything the prefetch pass read (phase 1 after it read nothing):
            // ~5 GiB of dnodes and ~3 GiB of ZAP headers and leaves, so 16 GiB (the next power
            // of two; at 8 GiB the LRU would evict the pass before phase 1 used it);
            // copy-on-write writes go out aggregated, ~10 us of pool time per 16 KiB block
            // (200 us at 20 at a time); fat ZAP directories.
            // op_ns is the one fitted value: the warm phase 1 after the prefetch pass (9.85 M
            // touches in 11 min 59 s, no reads, no throttle) is 73 us per touch, for which
            // the model charges 2.47 requests (the kernel keeps the dentries; refitted from
            // 18 us, fitted at 4 requests a touch: `chunkscope fidelity` with op_ns 0 gives
            // that figure 0 s, with 18 us 438.8 s, so it is linear in op_ns).
            "zfs-raidz-hdd" => ModelParams {
                miss_ns: 8_000_000,
                queue_depth: 20,
                write_ns: 200_000,
                op_ns: 29_500,
                ..pool
            },
            // The same pool while it also serves the nightly backups, as datastore A's
            // production cycles (threads 001 and 003) ran: the backups take half the disks'
            // time. The share is fitted on one figure, v1's phase 1 on A (53.5 h); B's
            // figures were measured on a quiet pool and use the preset above.
            "zfs-raidz-hdd-busy" => ModelParams {
                name: name.to_string(),
                backup_disk_share: 0.5,
                ..ModelParams::preset("zfs-raidz-hdd")?
            },
            // Thread 000's pool: 3 mirrors of HDDs with a mirror of 2 NVMe SSDs as the special
            // vdev that holds all metadata. NVMe reads of 16 KiB take ~100 us, 32 at a time;
            // writes ~50 us; the same cache and layout as above. op_ns fitted on the thread's
            // capacity table with the thread's CPU outside the model (fidelity.rs,
            // THREAD000_CPU_S): the 1 Ki and 1 Mi rows, 66.2 s and 22.2 s, differ by 44.0 s
            // for 49.0 M requests the model charges (2 a touch, the kernel keeping the
            // dentries): 898 ns a request.
            "zfs-special-ssd" => ModelParams {
                miss_ns: 100_000,
                queue_depth: 32,
                write_ns: 50_000,
                op_ns: 900,
                ..pool
            },
            other => anyhow::bail!(
                "unknown model '{other}': choose one of {}",
                PRESETS.join(", ")
            ),
        })
    }

    /// The presets of one filesystem on one disk, checked on the testbed: `ext4-hdd`,
    /// `xfs-hdd` (`zfs` is the default preset they start from).
    fn one_disk(name: &str, zfs: ModelParams) -> anyhow::Result<ModelParams> {
        Ok(match name {
            // ext4 (mke2fs's defaults) on one 7,200 rpm disk, as the testbed measured it
            // (BENCHMARKS.md, "The model learns the disk"): every read and write served by
            // the disk model at its block's place, inode-table read-ahead, listings that
            // update the directories' atimes (relatime) and prefetch nothing, a journal
            // committed every 5 s and written home 30 s later. The disk's span is the
            // filesystem's size where `simulate --store` can read it.
            "ext4-hdd" => ModelParams {
                layout: Layout::Ext4 {
                    inodes_per_group: 8192,
                    per_block: 16,
                },
                block_bytes: 4 << 10,
                queue_depth: 1,
                dirty_limit_blocks: (1u64 << 30) / (4 << 10),
                disk: Some(DiskParams::preset("hdd-7200")?),
                io_ns: 20_000,
                inode_readahead_blocks: 32,
                dir_atime: true,
                home_write_delay_ns: 30_000_000_000,
                readdir_prefetch: false,
                ..zfs
            },
            // XFS (mkfs.xfs's defaults on 2 GiB: four allocation groups of 131,072 blocks,
            // 512-byte inodes read 32 to a 16 KiB cluster; `simulate --survey` takes the
            // surveyed filesystem's instead) on one 7,200 rpm disk, as the
            // testbed showed it (BENCHMARKS.md, "The model learns the disk"): short-form
            // chunk directories (their entries in their inodes), directories spread over the
            // groups in turn, a logical log in the middle group (224 bytes a change, pushed
            // at 8 MiB or every 30 s, written 32 KiB at a time between the reads) and the
            // inodes written home later, listings that update atimes and prefetch nothing.
            "xfs-hdd" => ModelParams {
                layout: Layout::Xfs {
                    per_block: 32,
                    inopb_log: 3,
                    agino_log: 20,
                    ag_blocks: 131_072,
                    shortform_entries: 4,
                },
                name: name.to_string(),
                block_bytes: 16 << 10,
                dirty_limit_blocks: (1u64 << 30) / (16 << 10),
                // The log worker's interval (`xfssyncd_centisecs`, 30 s) or a push at 8 MiB.
                txg_ns: 30_000_000_000,
                log_bytes_per_change: 224,
                log_io_bytes: 32 << 10,
                log_push_bytes: 8 << 20,
                ..ModelParams::one_disk("ext4-hdd", zfs.clone())?
            },
            other => anyhow::bail!("{other}: not a one-disk preset"),
        })
    }

    /// A preset name, or a JSON file of [`ModelParams`] (as `chunkscope replay --print-model`
    /// writes one).
    pub fn load(spec: &str) -> anyhow::Result<ModelParams> {
        use anyhow::Context;
        if PRESETS.contains(&spec) || !std::path::Path::new(spec).exists() {
            return ModelParams::preset(spec);
        }
        // A model file is a few hundred bytes of JSON; 1 MiB is far more than any needs.
        let text = crate::fsutil::read_regular_bounded(std::path::Path::new(spec), 1 << 20)
            .with_context(|| format!("reading model file {spec}"))?;
        let p: ModelParams = serde_json::from_slice(&text)
            .with_context(|| format!("model file {spec}: not a valid model (JSON)"))?;
        p.validate().with_context(|| format!("model file {spec}"))?;
        Ok(p)
    }

    /// Rejects parameters the model cannot use.
    pub fn validate(&self) -> anyhow::Result<()> {
        let per_block = match self.layout {
            Layout::Zfs { per_block } => per_block,
            Layout::Xfs {
                per_block,
                inopb_log,
                agino_log,
                ag_blocks,
                ..
            } => {
                anyhow::ensure!(
                    inopb_log < agino_log && agino_log < 48 && ag_blocks > 0,
                    "an xfs layout needs inopb_log < agino_log < 48 and ag_blocks above 0"
                );
                per_block
            }
            Layout::Ext4 {
                per_block,
                inodes_per_group,
            } => {
                anyhow::ensure!(inodes_per_group > 0, "inodes_per_group must be above 0");
                per_block
            }
        };
        anyhow::ensure!(per_block > 0, "layout per_block must be above 0");
        anyhow::ensure!(self.block_bytes > 0, "block_bytes must be above 0");
        anyhow::ensure!(self.queue_depth > 0, "queue_depth must be above 0");
        anyhow::ensure!(self.txg_ns > 0, "txg_ns must be above 0");
        anyhow::ensure!(
            self.dirty_limit_blocks > 0,
            "dirty_limit_blocks must be above 0"
        );
        anyhow::ensure!(
            (0.0..1.0).contains(&self.throttle_start),
            "throttle_start must be in [0, 1)"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.metadata_limit),
            "metadata_limit must be in [0, 1] (0: no limit)"
        );
        anyhow::ensure!(
            (0.0..1.0).contains(&self.backup_cache_share),
            "backup_cache_share must be in [0, 1)"
        );
        anyhow::ensure!(
            (0.0..1.0).contains(&self.backup_disk_share),
            "backup_disk_share must be in [0, 1)"
        );
        anyhow::ensure!(
            self.aggregation_limit_bytes == 0 || self.aggregation_limit_bytes >= self.block_bytes,
            "aggregation_limit_bytes must be 0 (off) or at least block_bytes"
        );
        Ok(())
    }

    /// The bytes a read of one metadata block moves on the disk (`read_bytes`, else a block).
    pub fn read_len(&self) -> u64 {
        if self.read_bytes > 0 {
            self.read_bytes
        } else {
            self.block_bytes
        }
    }

    /// The metadata cache in blocks: `cache_bytes`, less what the metadata limit and the
    /// backups leave it.
    pub fn cache_blocks(&self) -> usize {
        let block = self.block_bytes.max(1);
        if self.metadata_limit == 0.0 && self.backup_cache_share == 0.0 {
            // Exact in integers where nothing scales it (`none`'s cache is 2^62 bytes).
            return (self.cache_bytes / block).min(usize::MAX as u64 / 2) as usize;
        }
        let mut bytes = self.cache_bytes as f64;
        if self.metadata_limit > 0.0 {
            bytes *= self.metadata_limit;
        }
        bytes *= 1.0 - self.backup_cache_share;
        (bytes / block as f64).min(usize::MAX as f64 / 4.0) as usize
    }

    /// `ns` of disk time as the GC sees it on a pool that also serves backups.
    pub(super) fn disk_ns(&self, ns: u64) -> u64 {
        if self.backup_disk_share == 0.0 {
            ns
        } else {
            (ns as f64 / (1.0 - self.backup_disk_share)).round() as u64
        }
    }

    /// Whether the model needs [`ModelParams::dir_entries`] filled in from the store (fat ZAP
    /// leaves, XFS short-form directories).
    pub fn needs_dir_entries(&self) -> bool {
        self.dir_entries == 0
            && (self.zap_leaf_entries > 0 || matches!(self.layout, Layout::Xfs { .. }))
    }

    /// Blocks per aggregated I/O (1: no aggregation).
    pub(super) fn blocks_per_io(&self) -> u64 {
        (self.aggregation_limit_bytes / self.block_bytes.max(1)).max(1)
    }

    /// The mechanisms these parameters switch on, by name (for reports and `--print-model`).
    pub fn mechanisms(&self) -> Vec<&'static str> {
        let mut m = Vec::new();
        if self.zap_leaf_entries > 0 {
            m.push("fat-zap-leaves");
        }
        if self.async_prefetch {
            m.push("async-prefetch");
        }
        if self.readdir_prefetch_flag {
            m.push("readdir-prefetch-flag");
        }
        if self.unlink_reads_indirect {
            m.push("unlink-reads-indirect");
        }
        if self.cache_policy == Policy::Arc {
            m.push("arc");
        }
        if self.metadata_limit > 0.0 {
            m.push("metadata-limit");
        }
        if self.aggregation_limit_bytes > 0 {
            m.push("vdev-aggregation");
        }
        if self.backup_cache_share > 0.0 || self.backup_disk_share > 0.0 {
            m.push("backup-load");
        }
        if self.disk.is_some() {
            m.push("disk");
        }
        if self.inode_readahead_blocks > 1 {
            m.push("inode-readahead");
        }
        if self.dir_atime {
            m.push("dir-atime");
        }
        if self.disk.is_some() && self.home_write_delay_ns > 0 {
            m.push("journal");
        }
        if self.disk.is_some() && self.log_bytes_per_change > 0 {
            m.push("logical-log");
        }
        if !self.readdir_prefetch {
            m.push("no-readdir-prefetch");
        }
        m
    }
}
