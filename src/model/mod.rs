//! The metadata cost model: a pure, clock-free function from a sequence of operations to
//! modelled costs, so that a store on a fast disk can be charged like a cold ZFS pool on HDDs,
//! live in the overlay and offline on a recorded trace, with the same results.
//!
//! * **Layout** ([`Layout`]): which metadata block holds an inode. ZFS keeps 32 dnodes of 512
//!   bytes in a 16 KiB block and numbers objects in creation order, so block = `ino >> 5`.
//!   ext4 keeps 16 inodes of 256 bytes per 4 KiB block in per-group tables, block =
//!   (`(ino-1) / inodes_per_group`, `((ino-1) % inodes_per_group) / 16`).
//! * **Cache** ([`cache::BlockLru`]): metadata blocks, LRU (ZFS's ARC is not an LRU; see there).
//!   A demand miss costs `miss_ns` and is serialised (a GC touches one chunk at a time).
//! * **Directories**: a directory's entries live in its own block (its ZAP header / htree
//!   block), read by a lookup or listing and dirtied by an unlink or create. With
//!   `zap_leaf_entries` set, a directory is a ZFS fat ZAP: the header block plus one leaf per
//!   `zap_leaf_entries` entries (`dir_entries` per directory, which the simulator and the
//!   mount fill in from the store); a lookup, unlink or create also reads (and dirties) the
//!   leaf its name hashes to, and a listing prefetches the leaves with the entries' blocks.
//! * **Readdir prefetch**: a listing brings the blocks of the entries it returned into the
//!   cache, as `zfs_readdir` prefetches dnodes; these reads go `queue_depth` at a time.
//! * **Write-back**: setattr, unlink and create dirty blocks; every `txg_ns` of modelled time
//!   (or at the dirty limit) the dirty blocks are written, `queue_depth` at a time, off the
//!   request path. A sync that takes longer than `txg_ns` delays the next one (ZFS syncs one
//!   transaction group at a time), so the open group keeps collecting dirty blocks. Above
//!   `throttle_start` of the limit each dirtying operation is delayed as ZFS's write throttle
//!   does: `delay_scale_ns * (dirty - start) / (limit - dirty)`. At the limit the operation
//!   waits for the running sync, then for a sync of everything dirty.
//!
//! Same operations, same order, same parameters: same costs. Modelled time is a number;
//! sleeping is the overlay's business.

pub mod arc;
pub mod cache;
pub mod order;

use hashbrown::HashSet;
use serde::{Deserialize, Serialize};

use crate::trace::Op;
use cache::{MetaCache, Policy};
use order::InodeOrder;

/// Where an inode's metadata lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Layout {
    /// Blocks of `per_block` dnodes in object-number (creation) order.
    Zfs {
        /// Dnodes per metadata block (32 in a 16 KiB block).
        per_block: u64,
    },
    /// Inode tables per block group.
    Ext4 {
        /// Inodes per block group.
        inodes_per_group: u64,
        /// Inodes per inode-table block.
        per_block: u64,
    },
}

impl Layout {
    /// The inode-table block of `ino` (directory blocks use the high bit, see [`dir_block`]).
    pub fn block(&self, ino: u64) -> u64 {
        match *self {
            Layout::Zfs { per_block } => ino / per_block.max(1),
            Layout::Ext4 {
                inodes_per_group,
                per_block,
            } => {
                let i = ino.saturating_sub(1);
                let group = i / inodes_per_group.max(1);
                let within = (i % inodes_per_group.max(1)) / per_block.max(1);
                (group << 24) | within
            }
        }
    }
}

/// The block holding directory `dir`'s entries (its ZAP header, with `zap_leaf_entries`).
pub fn dir_block(dir: u64) -> u64 {
    (1 << 63) | dir
}

/// The indirect block of file `ino`'s data (read to free the data when it is removed).
pub fn indirect_block(ino: u64) -> u64 {
    (1 << 61) | ino
}

/// Leaf `leaf` of directory `dir`'s fat ZAP (leaves are below 2^16, inode numbers below 2^46).
pub fn zap_leaf_block(dir: u64, leaf: u64) -> u64 {
    (1 << 63) | (1 << 62) | (dir << 16) | (leaf & 0xffff)
}

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
}

/// `zfs-hdd`, the default model: a cold ZFS pool of HDDs (8 ms a demand read, 8 at a time, a
/// 256 MiB metadata cache, 5 s transaction groups with ZFS's dirty limit and throttle), with
/// every optional mechanism off. The other presets start from it.
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
pub const PRESETS: [&str; 7] = [
    "none",
    "zfs-hdd",
    "zfs-ssd",
    "ext4-hdd",
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
            "zfs-hdd" => zfs,
            "zfs-ssd" => ModelParams {
                miss_ns: 150_000,
                queue_depth: 32,
                write_ns: 50_000,
                ..zfs
            },
            "ext4-hdd" => ModelParams {
                layout: Layout::Ext4 {
                    inodes_per_group: 8192,
                    per_block: 16,
                },
                block_bytes: 4 << 10,
                queue_depth: 4,
                dirty_limit_blocks: (1u64 << 30) / (4 << 10),
                ..zfs
            },
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

    /// A preset name, or a JSON file of [`ModelParams`] (as `chunkscope replay --print-model`
    /// writes one).
    pub fn load(spec: &str) -> anyhow::Result<ModelParams> {
        use anyhow::Context;
        if PRESETS.contains(&spec) || !std::path::Path::new(spec).exists() {
            return ModelParams::preset(spec);
        }
        let text =
            std::fs::read_to_string(spec).with_context(|| format!("reading model file {spec}"))?;
        let p: ModelParams = serde_json::from_str(&text)
            .with_context(|| format!("model file {spec}: not a valid model (JSON)"))?;
        p.validate().with_context(|| format!("model file {spec}"))?;
        Ok(p)
    }

    /// Rejects parameters the model cannot use.
    pub fn validate(&self) -> anyhow::Result<()> {
        let per_block = match self.layout {
            Layout::Zfs { per_block } => per_block,
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
    fn disk_ns(&self, ns: u64) -> u64 {
        if self.backup_disk_share == 0.0 {
            ns
        } else {
            (ns as f64 / (1.0 - self.backup_disk_share)).round() as u64
        }
    }

    /// Blocks per aggregated I/O (1: no aggregation).
    fn blocks_per_io(&self) -> u64 {
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
        m
    }
}

/// True for the metadata operations the model charges. The others (data reads and writes,
/// releases, forgets, markers, ...) cost nothing and leave the model untouched: several of
/// them reach a FUSE server asynchronously, and they must not make the totals depend on
/// timing.
pub fn charges(op: Op) -> bool {
    matches!(
        op,
        Op::Lookup
            | Op::Getattr
            | Op::Setattr
            | Op::Readlink
            | Op::Mknod
            | Op::Mkdir
            | Op::Unlink
            | Op::Rmdir
            | Op::Symlink
            | Op::Rename
            | Op::Link
            | Op::Open
            | Op::Opendir
            | Op::Readdir
            | Op::Readdirplus
            | Op::Access
            | Op::Create
            | Op::Getxattr
            | Op::Listxattr
            | Op::Setxattr
            | Op::Removexattr
    )
}

/// What the model needs of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelOp {
    /// The operation.
    pub op: Op,
    /// Backing inode (0: none, e.g. a failed lookup).
    pub ino: u64,
    /// Backing inode of the parent directory (0: none).
    pub parent: u64,
    /// Its errno (a failed lookup reads, but finds no inode).
    pub errno: i32,
}

/// The modelled cost of one operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Cost {
    /// Modelled time the operation took (reads, throttle, forced sync, CPU).
    pub ns: u64,
    /// Metadata blocks read on demand.
    pub misses: u64,
    /// Metadata blocks read ahead (readdir prefetch).
    pub prefetched: u64,
    /// Blocks it dirtied for the first time in the transaction group.
    pub dirtied: u64,
    /// Time the write throttle delayed it.
    pub throttle_ns: u64,
}

/// Running totals of a model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Totals {
    /// Operations charged.
    pub ops: u64,
    /// Modelled time of all of them.
    pub ns: u64,
    /// Demand reads (cache misses).
    pub misses: u64,
    /// Cache hits.
    pub hits: u64,
    /// Prefetch reads (blocks).
    pub prefetched: u64,
    /// The I/Os the prefetch reads took (fewer than the blocks with aggregation).
    #[serde(default)]
    pub prefetch_ios: u64,
    /// Blocks dirtied (once per transaction group each).
    pub dirtied: u64,
    /// Time the write throttle added.
    pub throttle_ns: u64,
    /// Transaction groups synced.
    pub txg_syncs: u64,
    /// Blocks written at syncs (each dirty block once per transaction group).
    pub blocks_written: u64,
    /// Time the syncs' writes took.
    pub writeback_ns: u64,
    /// Dirty blocks of each transaction group, in order.
    pub dirty_per_txg: Vec<u64>,
}

impl Totals {
    /// Metadata blocks read from the disks: demand misses and prefetch reads.
    pub fn reads(&self) -> u64 {
        self.misses + self.prefetched
    }
}

/// The metadata cost model: charges operations in order, keeps its own clock and totals.
pub struct Model {
    params: ModelParams,
    cache: MetaCache,
    /// Directories whose prefetch flag a listing cleared and no lookup has set since
    /// (`readdir_prefetch_flag`; a directory not here has it set).
    prefetch_cleared: HashSet<u64>,
    /// A demand read's and a block write's time, and an aggregated I/O's per extra block, as
    /// the GC sees them (stretched by the backups' share of the disks).
    miss_ns: u64,
    write_ns: u64,
    transfer_ns: u64,
    dirty: HashSet<u64>,
    clock_ns: u64,
    txg_start_ns: u64,
    /// When the running sync's writes end (the next sync cannot start before).
    sync_end_ns: u64,
    /// When the asynchronous prefetch reads issued so far are all served.
    prefetch_end_ns: u64,
    /// Leaves per directory (0: a directory is one block).
    leaves: u64,
    totals: Totals,
    /// Reused by [`Model::charge_listing`].
    scratch: Vec<u64>,
    /// Creation ranks used as object ids (see [`order`]), for backing stores whose inode
    /// numbers do not follow creation order.
    order: Option<InodeOrder>,
}

impl Model {
    /// A cold model (empty cache, clock at 0) with `params`.
    pub fn new(params: ModelParams) -> Model {
        let leaves = match params.zap_leaf_entries {
            0 => 0,
            per => params.dir_entries.div_ceil(per).clamp(1, 1 << 16),
        };
        Model {
            cache: MetaCache::new(params.cache_policy, params.cache_blocks()),
            prefetch_cleared: HashSet::new(),
            miss_ns: params.disk_ns(params.miss_ns),
            write_ns: params.disk_ns(params.write_ns),
            transfer_ns: params.disk_ns(params.transfer_ns),
            params,
            dirty: HashSet::new(),
            clock_ns: 0,
            txg_start_ns: 0,
            sync_end_ns: 0,
            prefetch_end_ns: 0,
            leaves,
            totals: Totals::default(),
            scratch: Vec::new(),
            order: None,
        }
    }

    /// A model that places inodes by their creation rank instead of their number.
    pub fn with_order(params: ModelParams, order: InodeOrder) -> Model {
        Model {
            order: Some(order),
            ..Model::new(params)
        }
    }

    /// The metadata block holding inode `ino`.
    #[inline]
    fn block(&self, ino: u64) -> u64 {
        match &self.order {
            Some(o) => self.params.layout.block(o.rank(ino)),
            None => self.params.layout.block(ino),
        }
    }

    /// Its parameters.
    pub fn params(&self) -> &ModelParams {
        &self.params
    }

    /// What it has charged so far.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// Modelled time since the start.
    pub fn clock_ns(&self) -> u64 {
        self.clock_ns
    }

    /// Empties the cache (a cold pool), as `chunkscope ctl MNT drop-caches` asks.
    pub fn drop_caches(&mut self) {
        self.cache.clear();
        // The directories' znodes go with the caches; reloaded, they have the flag set.
        self.prefetch_cleared.clear();
    }

    /// Warms the cache with the metadata of `inodes` (in that order, so the last ones are the
    /// most recently used) and of `dirs` after them: every directory's header and leaves and
    /// every inode's block, as far as the cache holds them, as a previous pass would leave
    /// it. Costs nothing and counts nothing.
    pub fn warm(&mut self, inodes: impl Iterator<Item = u64>, dirs: &[u64]) {
        for ino in inodes {
            let b = self.block(ino);
            self.cache.access(b);
        }
        for &d in dirs {
            for leaf in 0..self.leaves {
                self.cache.access(zap_leaf_block(d, leaf));
            }
            self.cache.access(dir_block(d));
        }
    }

    /// The ZAP leaf holding entry `ino` of `dir`, if directories have leaves. The leaf of a
    /// name is a hash of the name; a hash of the inode number stands in for it (both are
    /// uncorrelated with everything else the model sees).
    #[inline]
    fn leaf(&self, dir: u64, ino: u64) -> Option<u64> {
        (self.leaves > 0).then(|| {
            let h = (ino ^ (dir << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            zap_leaf_block(dir, (h >> 32) % self.leaves)
        })
    }

    fn read(&mut self, block: u64, c: &mut Cost) {
        if self.cache.access(block) {
            self.totals.hits += 1;
        } else {
            c.misses += 1;
            c.ns += self.miss_ns;
        }
    }

    fn dirty(&mut self, block: u64, c: &mut Cost) {
        if self.dirty.insert(block) {
            c.dirtied += 1;
        }
    }

    /// Writes the dirty blocks (a transaction-group sync); returns its duration.
    fn sync(&mut self) -> u64 {
        let n = self.dirty.len() as u64;
        let qd = self.params.queue_depth.max(1);
        // Copy-on-write puts a group's blocks one after the other: with aggregation they go
        // out in I/Os of the limit's size.
        let ios = n.div_ceil(self.params.blocks_per_io());
        let ns = ios.div_ceil(qd) * self.write_ns + (n - ios) * self.transfer_ns / qd;
        self.totals.txg_syncs += 1;
        self.totals.blocks_written += n;
        self.totals.writeback_ns += ns;
        self.totals.dirty_per_txg.push(n);
        self.dirty.clear();
        ns
    }

    /// Syncs every transaction group that ended before now. A group ends `txg_ns` after it
    /// opened, or when the previous group's sync has finished writing, whichever is later.
    fn advance_txgs(&mut self) {
        let txg = self.params.txg_ns.max(1);
        loop {
            let due = (self.txg_start_ns + txg).max(self.sync_end_ns);
            if self.clock_ns < due {
                break;
            }
            let ns = self.sync();
            self.sync_end_ns = due + ns;
            self.txg_start_ns = due;
        }
    }

    fn throttle(&mut self, c: &mut Cost) {
        let limit = self.params.dirty_limit_blocks.max(1) as f64;
        let dirty = self.dirty.len() as f64;
        let start = self.params.throttle_start * limit;
        if dirty >= limit {
            // At the limit the operation waits for the running sync to end, then for a sync
            // of everything dirty.
            let wait = self.sync_end_ns.saturating_sub(self.clock_ns);
            let ns = self.sync();
            c.throttle_ns += wait + ns;
            self.sync_end_ns = self.clock_ns + wait + ns;
            self.txg_start_ns = self.clock_ns + wait;
        } else if dirty > start {
            c.throttle_ns +=
                (self.params.delay_scale_ns as f64 * (dirty - start) / (limit - dirty)) as u64;
        }
    }

    fn finish(&mut self, mut c: Cost) -> Cost {
        c.ns += c.throttle_ns;
        self.clock_ns += c.ns;
        self.totals.ops += 1;
        self.totals.ns += c.ns;
        self.totals.misses += c.misses;
        self.totals.prefetched += c.prefetched;
        self.totals.dirtied += c.dirtied;
        self.totals.throttle_ns += c.throttle_ns;
        c
    }

    /// Charges one operation and advances the modelled clock.
    pub fn charge(&mut self, op: &ModelOp) -> Cost {
        if !charges(op.op) {
            return Cost::default();
        }
        self.advance_txgs();
        let mut c = Cost {
            ns: self.params.op_ns,
            ..Cost::default()
        };
        let ok = op.errno == 0;
        let creates = matches!(op.op, Op::Create | Op::Mkdir | Op::Symlink | Op::Mknod);
        if let (true, true, Some(o)) = (ok && op.ino != 0, creates, self.order.as_mut()) {
            o.created(op.ino);
        }
        match op.op {
            Op::Lookup => {
                self.read(dir_block(op.parent), &mut c);
                // A failed lookup reads the leaf its name hashes to as well (with no inode to
                // hash, the hash of 0 stands in).
                if let Some(l) = self.leaf(op.parent, op.ino) {
                    self.read(l, &mut c);
                }
                if ok && op.ino != 0 {
                    self.read(self.block(op.ino), &mut c);
                    // zfs_dirlook: finding an entry sets the directory's prefetch flag.
                    if self.params.readdir_prefetch_flag && !self.prefetch_cleared.is_empty() {
                        self.prefetch_cleared.remove(&op.parent);
                    }
                }
            }
            Op::Getattr
            | Op::Access
            | Op::Readlink
            | Op::Open
            | Op::Opendir
            | Op::Getxattr
            | Op::Listxattr
                if op.ino != 0 =>
            {
                self.read(self.block(op.ino), &mut c);
            }
            Op::Readdir | Op::Readdirplus => self.read(dir_block(op.ino), &mut c),
            Op::Setattr if op.ino != 0 => {
                self.read(self.block(op.ino), &mut c);
                if ok {
                    self.throttle(&mut c);
                    self.dirty(self.block(op.ino), &mut c);
                }
            }
            Op::Unlink
            | Op::Rmdir
            | Op::Create
            | Op::Mkdir
            | Op::Symlink
            | Op::Link
            | Op::Mknod
            | Op::Rename => {
                self.read(dir_block(op.parent), &mut c);
                let leaf = self.leaf(op.parent, op.ino);
                if let Some(l) = leaf {
                    self.read(l, &mut c);
                }
                if ok && op.op == Op::Unlink && op.ino != 0 && self.params.unlink_reads_indirect {
                    self.read(indirect_block(op.ino), &mut c);
                }
                if ok {
                    self.throttle(&mut c);
                    self.dirty(dir_block(op.parent), &mut c);
                    if let Some(l) = leaf {
                        self.dirty(l, &mut c);
                    }
                    if op.ino != 0 {
                        self.dirty(self.block(op.ino), &mut c);
                    }
                }
            }
            _ => {}
        }
        self.finish(c)
    }

    /// Charges the prefetch of a listing of `dir`'s entries: their blocks (and, with ZAP
    /// leaves, the leaves holding them) not yet cached are read `queue_depth` at a time and
    /// then cached.
    pub fn charge_listing(&mut self, dir: u64, entries: &[u64]) -> Cost {
        self.advance_txgs();
        let mut c = Cost::default();
        let mut blocks = std::mem::take(&mut self.scratch);
        blocks.clear();
        // With the prefetch flag, a listing prefetches its entries' dnodes only while the
        // directory has it set, and clears it.
        let dnodes = !self.params.readdir_prefetch_flag || self.prefetch_cleared.insert(dir);
        if dnodes {
            blocks.extend(entries.iter().map(|&i| self.block(i)));
        }
        if self.leaves > 0 {
            blocks.extend(entries.iter().filter_map(|&i| self.leaf(dir, i)));
        }
        blocks.sort_unstable();
        blocks.dedup();
        // The reads (blocks not cached), aggregated: a run of blocks at most the read gap
        // apart and within the aggregation limit is one I/O.
        let per_io = self.params.blocks_per_io();
        let gap = self.params.read_gap_bytes / self.params.block_bytes.max(1);
        let mut ios = 0u64;
        let mut run: Option<(u64, u64)> = None; // (first, last) block of the open I/O
        for &b in &blocks {
            if self.cache.contains(b) {
                self.cache.access(b);
                continue;
            }
            self.cache.access(b);
            c.prefetched += 1;
            run = match run {
                Some((first, last)) if per_io > 1 && b - last <= gap + 1 && b - first < per_io => {
                    Some((first, b))
                }
                _ => {
                    ios += 1;
                    Some((b, b))
                }
            };
        }
        self.scratch = blocks;
        self.totals.prefetch_ios += ios;
        let qd = self.params.queue_depth.max(1);
        let extra = (c.prefetched - ios) * self.transfer_ns;
        if self.params.async_prefetch {
            // Wait for the previous listing's reads, then queue this one's behind them.
            c.ns = self.prefetch_end_ns.saturating_sub(self.clock_ns);
            let busy = (ios * self.miss_ns + extra) / qd;
            self.prefetch_end_ns = self.clock_ns + c.ns + busy;
        } else {
            c.ns = ios.div_ceil(qd) * self.miss_ns + extra / qd;
        }
        let c = self.finish(c);
        self.totals.ops -= 1; // part of the listing, not an operation of its own
        c
    }

    /// Charges one request as the overlay and `replay` both do: the operation, then for a
    /// listing the prefetch of the entries it returned. Returns the request's modelled time.
    pub fn charge_request(&mut self, op: &ModelOp, listing: Option<&[u64]>) -> u64 {
        let mut ns = self.charge(op).ns;
        if let Some(entries) = listing {
            ns += self.charge_listing(op.ino, entries).ns;
        }
        ns
    }

    /// Blocks dirtied in the open transaction group (written at its sync).
    pub fn dirty_blocks(&self) -> u64 {
        self.dirty.len() as u64
    }

    /// Takes `ns` back from the clock: requests the caller charged one after another that
    /// in fact overlapped (the simulator's parallel prefetch pass). Everything scheduled on
    /// the clock (the open group's start, the running sync's end, the prefetch reads' end)
    /// moves back with it; totals keep their sums.
    pub fn rewind(&mut self, ns: u64) {
        let ns = ns.min(self.clock_ns);
        self.clock_ns -= ns;
        self.txg_start_ns = self.txg_start_ns.saturating_sub(ns);
        self.sync_end_ns = self.sync_end_ns.saturating_sub(ns);
        self.prefetch_end_ns = self.prefetch_end_ns.saturating_sub(ns);
    }

    /// Requests charged one after another for `serial_ns` ran side by side instead (jobs
    /// that wait for their reads in parallel, as a prefetch pass's): they took as long as the
    /// busiest path through them, `parallel_ns`, or as long as the pool needs to serve every
    /// read so far `queue_depth` at a time, whichever is longer. The clock goes back by the
    /// rest.
    pub fn overlap(&mut self, serial_ns: u64, parallel_ns: u64) {
        let ios = self.totals.misses + self.totals.prefetch_ios;
        let device = ios.div_ceil(self.params.queue_depth.max(1)) * self.miss_ns;
        let parallel = parallel_ns.max(device);
        if parallel < serial_ns {
            self.rewind(serial_ns - parallel);
        }
    }

    /// Ends the run: the last transaction group is synced.
    pub fn flush(&mut self) {
        if !self.dirty.is_empty() {
            self.sync();
        }
    }
}

#[cfg(test)]
mod tests;
