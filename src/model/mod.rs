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
//!   waits for the running sync, then for a sync of everything dirty. With a disk and
//!   `cow_copies` (ZFS), a sync writes each dirty block's copies at the allocation frontier,
//!   one request at a time, each before the next read that arrives while it is due (so the
//!   GC's reads take turns with them), and the block is read from there after; the sync ends
//!   with its last write.
//!
//! Same operations, same order, same parameters: same costs. Modelled time is a number;
//! sleeping is the overlay's business.

pub mod arc;
pub mod cache;
pub mod order;
mod params;
pub mod place;
mod writeback;

pub use params::{model_help, ModelParams, PRESETS};

use hashbrown::HashSet;
use serde::{Deserialize, Serialize};

use crate::disk::Disk;
use crate::trace::Op;
use cache::MetaCache;
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
    /// XFS: an inode number is its address (allocation group, block in it, slot in the
    /// block), inodes are read a cluster buffer at a time, and a directory of at most
    /// `shortform_entries` entries keeps them in its inode (no block of its own).
    Xfs {
        /// Inodes per cluster buffer (32 of 512 bytes in 16 KiB).
        per_block: u64,
        /// log2 of inodes per filesystem block (`sb_inopblog`: 3 for 512-byte inodes in 4 KiB).
        inopb_log: u32,
        /// Bits of an inode number within its allocation group (`sb_agblklog + sb_inopblog`).
        agino_log: u32,
        /// Blocks per allocation group (`sb_agblocks`).
        ag_blocks: u64,
        /// Entries a short-form directory holds in its inode (4 names of 64 characters in a
        /// 512-byte inode's 336 bytes).
        shortform_entries: u64,
    },
}

impl Layout {
    /// The inode-table block of `ino` (directory blocks use the high bit, see [`dir_block`]).
    pub fn block(&self, ino: u64) -> u64 {
        match *self {
            Layout::Zfs { per_block } | Layout::Xfs { per_block, .. } => ino / per_block.max(1),
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

/// An XFS inode number's allocation group and its inode number within the group.
#[inline]
pub fn xfs_split(ino: u64, agino_log: u32) -> (u64, u64) {
    (ino >> agino_log, ino & ((1 << agino_log) - 1))
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
    /// A copy with the last `groups` entries of [`Totals::dirty_per_txg`] only: what a live
    /// view polls under the model's lock, which the requests wait for, stays the same size
    /// however long the mount runs (a group every 5 s: 17,280 a day).
    pub fn recent(&self, groups: usize) -> Totals {
        let from = self.dirty_per_txg.len().saturating_sub(groups);
        Totals {
            dirty_per_txg: self.dirty_per_txg[from..].to_vec(),
            ..*self
        }
    }

    /// Metadata blocks read from the disks: demand misses and prefetch reads.
    pub fn reads(&self) -> u64 {
        self.misses + self.prefetched
    }

    /// One line for a person: what the requests cost and where the time went.
    pub fn summary(&self) -> String {
        let n = crate::units::thousands;
        let lookups = self.hits + self.misses;
        let ratio = if lookups == 0 {
            String::new()
        } else {
            format!(
                " ({:.1}% of block lookups hit)",
                self.hits as f64 * 100.0 / lookups as f64
            )
        };
        format!(
            "{} requests charged {} of modelled time; {} demand reads and {} prefetched \
             blocks{ratio}; {} blocks written in {} transaction groups ({} of write-back, {} \
             of throttle)",
            n(self.ops),
            crate::units::duration_ns(self.ns),
            n(self.misses),
            n(self.prefetched),
            n(self.blocks_written),
            n(self.txg_syncs),
            crate::units::duration_ns(self.writeback_ns),
            crate::units::duration_ns(self.throttle_ns)
        )
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
    /// The disk that serves the reads and writes, with `params.disk`.
    disk: Option<Disk>,
    /// Blocks a sync sent to the journal, to be written home at the time given (with
    /// `home_write_delay_ns`), oldest first.
    home_writes: std::collections::VecDeque<(u64, Vec<u64>)>,
    /// Where the next journal write goes (bytes from the journal's start).
    journal_head: u64,
    /// With logical logging: log bytes of the changes since the last push, and the log
    /// writes pushed but not yet served (bytes from the journal's start, length).
    log_bytes: u64,
    log_writes: std::collections::VecDeque<(u64, u64)>,
    /// Copy-on-write: the syncs' writes not yet served (byte offsets, each `read_bytes`
    /// long), and when their sync started.
    cow_writes: std::collections::VecDeque<(u64, u64)>,
    /// Where copy-on-write put the blocks it wrote (byte offsets of their first copies).
    moved: hashbrown::HashMap<u64, u64>,
    /// Where the next first and second copies go.
    frontier: (u64, u64),
    /// ZFS with its geometry: the directories seen holding entries (fat ZAPs, spread over
    /// the pool); the others are micro ZAPs in creation order ([`place::Placement::zfs_micro_zap`]).
    fat_dirs: HashSet<u64>,
    /// When the copy-on-write sync whose writes are queued started.
    cow_sync_start: u64,
    /// When the open group reached `sync_dirty_blocks` (`u64::MAX`: it has not).
    dirty_full_ns: u64,
}

impl Model {
    /// A cold model (empty cache, clock at 0) with `params`.
    pub fn new(params: ModelParams) -> Model {
        let leaves = match params.zap_leaf_entries {
            0 => 0,
            per => params.dir_entries.div_ceil(per).clamp(1, 1 << 16),
        };
        let disk = params.disk.clone().map(Disk::new);
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
            disk,
            home_writes: std::collections::VecDeque::new(),
            journal_head: 0,
            log_bytes: 0,
            log_writes: std::collections::VecDeque::new(),
            cow_writes: std::collections::VecDeque::new(),
            moved: hashbrown::HashMap::new(),
            frontier: (0, 0),
            fat_dirs: HashSet::new(),
            cow_sync_start: 0,
            dirty_full_ns: u64::MAX,
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

    /// The block holding directory `d`'s entries: its own ([`dir_block`]), or on XFS, while
    /// the store's directories are short-form, its inode's.
    #[inline]
    fn dir(&self, d: u64) -> u64 {
        match self.params.layout {
            Layout::Xfs {
                shortform_entries, ..
            } if self.params.dir_entries <= shortform_entries && self.params.dir_entries > 0 => {
                self.block(d)
            }
            _ => dir_block(d),
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
            self.cache.access(self.dir(d));
        }
    }

    /// ZFS with its geometry: `dir` holds entries, so it is a fat ZAP (a chunk's name is too
    /// long for a micro ZAP), no longer in its creation-order sector.
    #[inline]
    fn holds_entries(&mut self, dir: u64) {
        if self.params.placement.zfs_sector > 0 && dir != 0 {
            self.fat_dirs.insert(dir);
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
            return;
        }
        c.misses += 1;
        if self.disk.is_none() {
            c.ns += self.miss_ns;
            return;
        }
        let at = self.clock_ns + c.ns;
        // A log write in flight reaches the disk before this read.
        if let Some((offset, len)) = self.log_writes.pop_front() {
            self.log_write(at, offset, len);
        }
        self.cow_writes_due(at);
        let mut done = at;
        if let Some((first, n)) = self.inode_readahead(block) {
            // ext4 submits the read-ahead of the table blocks around it, then the block
            // itself (a separate request, found in the drive's cache).
            done = self.device(at, first, n, false);
            c.prefetched += n.saturating_sub(1);
            self.totals.prefetch_ios += 1;
        }
        done = done.max(self.device(at, block, 1, false));
        c.ns += done - at + self.params.io_ns;
    }

    /// With inode-table read-ahead, the run of table blocks a miss on `block` reads ahead
    /// (the uncached ones of its aligned window, within its group's table), now cached:
    /// (first, blocks).
    fn inode_readahead(&mut self, block: u64) -> Option<(u64, u64)> {
        let ra = self.params.inode_readahead_blocks;
        let Layout::Ext4 {
            inodes_per_group,
            per_block,
        } = self.params.layout
        else {
            return None;
        };
        if ra < 2 || block >> 61 != 0 {
            return None;
        }
        let tables = inodes_per_group.div_ceil(per_block.max(1));
        let (group, within) = (block & !0xff_ffff, block & 0xff_ffff);
        let from = within / ra * ra;
        let (mut first, mut last) = (None, 0);
        for w in from..(from + ra).min(tables) {
            if w != within && self.cache.contains(group | w) {
                continue;
            }
            self.cache.access(group | w);
            first.get_or_insert(w);
            last = w;
        }
        let first = first?;
        (last > first).then(|| (group | first, last - first + 1))
    }

    fn finish(&mut self, mut c: Cost) -> Cost {
        c.ns += c.throttle_ns;
        self.push_log_if_full(self.clock_ns + c.ns);
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
                // An entry found: the directory holds entries (known before its block is
                // read: where that lies depends on it).
                if ok && op.ino != 0 {
                    self.holds_entries(op.parent);
                }
                self.read(self.dir(op.parent), &mut c);
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
            Op::Readdir | Op::Readdirplus => {
                self.read(self.dir(op.ino), &mut c);
                if ok && self.params.dir_atime && op.ino != 0 {
                    self.throttle(&mut c);
                    self.dirty(self.block(op.ino), &mut c);
                }
            }
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
                if ok && !matches!(op.op, Op::Unlink | Op::Rmdir) {
                    self.holds_entries(op.parent);
                }
                self.read(self.dir(op.parent), &mut c);
                let leaf = self.leaf(op.parent, op.ino);
                if let Some(l) = leaf {
                    self.read(l, &mut c);
                }
                if ok && op.op == Op::Unlink && op.ino != 0 && self.params.unlink_reads_indirect {
                    self.read(indirect_block(op.ino), &mut c);
                }
                if ok {
                    self.throttle(&mut c);
                    self.dirty(self.dir(op.parent), &mut c);
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
        let dnodes = self.params.readdir_prefetch
            && (!self.params.readdir_prefetch_flag || self.prefetch_cleared.insert(dir));
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
        // The (first, last) block of the open I/O.
        let mut run: Option<(u64, u64)> = None;
        // With a disk, the runs are served as they close, from when this listing's reads
        // start (after the previous listing's, with asynchronous prefetch).
        let at = if self.params.async_prefetch {
            self.prefetch_end_ns.max(self.clock_ns)
        } else {
            self.clock_ns
        };
        let mut done = at;
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
                closed => {
                    if let (Some((first, last)), true) = (closed, self.disk.is_some()) {
                        done = self.device(at, first, last - first + 1, false);
                    }
                    ios += 1;
                    Some((b, b))
                }
            };
        }
        if let (Some((first, last)), true) = (run, self.disk.is_some()) {
            done = self.device(at, first, last - first + 1, false);
        }
        self.scratch = blocks;
        self.totals.prefetch_ios += ios;
        let qd = self.params.queue_depth.max(1);
        let extra = (c.prefetched - ios) * self.transfer_ns;
        if self.disk.is_some() {
            if self.params.async_prefetch {
                c.ns = at - self.clock_ns;
                self.prefetch_end_ns = done;
            } else {
                c.ns = done - at + ios * self.params.io_ns;
            }
        } else if self.params.async_prefetch {
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
        if listing.is_some_and(|l| !l.is_empty()) {
            self.holds_entries(op.ino);
        }
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
        if self.sync_end_ns != u64::MAX {
            self.sync_end_ns = self.sync_end_ns.saturating_sub(ns);
        }
        for (_, queued) in self.cow_writes.iter_mut() {
            *queued = queued.saturating_sub(ns);
        }
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
            self.sync(self.clock_ns);
        }
        self.cow_writes_due(u64::MAX);
        while let Some((offset, len)) = self.log_writes.pop_front() {
            self.log_write(self.clock_ns, offset, len);
        }
        if self.disk.is_some() {
            self.home_writes_due(u64::MAX);
        }
    }
}

#[cfg(test)]
mod tests;
