//! One phase's accumulation: the requests of a phase counted as they come ([`PhaseAcc`]),
//! then finished into its [`Phase`] (latencies, locality, the digest cache's miss-ratio
//! curve, the what-if reorderings of its touches).

use super::*;

pub(super) struct OpAcc {
    pub(super) count: u64,
    pub(super) errors: std::collections::BTreeMap<String, u64>,
    pub(super) real: HdrCounts,
    pub(super) modeled: HdrCounts,
    pub(super) real_log2: [u64; 65],
    pub(super) modeled_log2: [u64; 65],
}

/// Evenly spaced samples of a stream of unknown length: every `stride`-th item, the stride
/// doubling (and every other kept item dropped) when `2 * max` are kept.
pub(super) struct Decimated {
    pub(super) max: usize,
    pub(super) stride: u64,
    pub(super) seen: u64,
    pub(super) kept: Vec<AccessPoint>,
}

impl Decimated {
    pub(super) fn push(&mut self, p: impl FnOnce(u64) -> AccessPoint) {
        let at = self.seen;
        self.seen += 1;
        if self.max == 0 || !at.is_multiple_of(self.stride) {
            return;
        }
        self.kept.push(p(at));
        if self.kept.len() >= 2 * self.max {
            let mut i = 0;
            self.kept.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stride *= 2;
        }
    }
}

pub(super) struct PhaseAcc {
    pub(super) name: String,
    pub(super) records: u64,
    /// Real time in this phase: the sum of its runs (a phase can be entered several times).
    pub(super) real_ns: u64,
    pub(super) run: Option<(u64, u64)>,
    pub(super) modeled_ns: u64,
    /// Indexed by op number.
    pub(super) ops: Vec<Option<Box<OpAcc>>>,
    pub(super) touches: LocalityAcc,
    pub(super) lookups: LocalityAcc,
    pub(super) digests: ReuseDistances,
    pub(super) blocks: ReuseDistances,
    // write-back
    pub(super) txg: Option<u64>,
    /// The transaction group each block was last dirtied in (numbered from 1, so a block's
    /// first dirtying in a group counts without clearing the map between groups).
    pub(super) dirty: IntMap<u32>,
    pub(super) txg_number: u32,
    pub(super) dirty_in_txg: u64,
    pub(super) per_txg: Vec<u64>,
    pub(super) txg_starts: Vec<u64>,
    pub(super) touches_per_txg: Vec<u64>,
    pub(super) touches_in_txg: u64,
    /// Every touch (inode, directory) and where each index's touches start.
    pub(super) touch_log: Vec<(u64, u64)>,
    pub(super) index_starts: Vec<usize>,
    pub(super) access: Decimated,
    // listings
    pub(super) listings: u64,
    pub(super) entries: u64,
    pub(super) ascending: u64,
    pub(super) pairs: u64,
    pub(super) dirs: DirListings,
    /// Requests to an S3 bucket, if any came.
    pub(super) s3: Option<S3Requests>,
}

/// Each directory's first listing, reduced as it comes: its entries, the distinct metadata
/// blocks they fall in, and the gaps between its sorted inode numbers (4 bytes a gap, the
/// only thing kept per entry: a sweep lists every chunk, 84 M on datastore A).
#[derive(Default)]
pub(super) struct DirListings {
    /// Directories listed (by inode).
    pub(super) seen: hashbrown::HashSet<u64>,
    pub(super) entries: u64,
    pub(super) blocks: u64,
    pub(super) with_2_or_more: u64,
    pub(super) without_shared_blocks: u64,
    /// Gaps between consecutive inode numbers within a directory (above `u32::MAX`: kept
    /// at it, which moves no median a store can have).
    pub(super) gaps: Vec<u32>,
    /// A listing's entries, sorted (reused).
    sorted: Vec<u64>,
}

impl DirListings {
    /// The first listing of directory `dir` that returned entries (later ones add nothing).
    fn first_listing(&mut self, dir: u64, dirents: &[u64], inodes_per_block: u64) {
        if !self.seen.insert(dir) {
            return;
        }
        self.sorted.clear();
        self.sorted.extend_from_slice(dirents);
        self.sorted.sort_unstable();
        let per_block = inodes_per_block.max(1);
        let mut blocks = 1;
        for w in self.sorted.windows(2) {
            blocks += (w[1] / per_block != w[0] / per_block) as u64;
        }
        let n = self.sorted.len() as u64;
        self.entries += n;
        self.blocks += blocks;
        if n >= 2 {
            self.with_2_or_more += 1;
            self.without_shared_blocks += (blocks == n) as u64;
            let gaps = self
                .sorted
                .windows(2)
                .map(|w| (w[1] - w[0]).min(u32::MAX as u64) as u32);
            self.gaps.extend(gaps);
        }
    }
}

impl PhaseAcc {
    pub(super) fn new(name: String, o: &Options) -> PhaseAcc {
        let mrc = |extra: &[u64]| {
            ReuseDistances::sampled(ReuseDistances::powers_of_two(1 << 26, extra), o.sample_rate)
        };
        PhaseAcc {
            name,
            records: 0,
            real_ns: 0,
            run: None,
            modeled_ns: 0,
            ops: Default::default(),
            touches: Default::default(),
            lookups: Default::default(),
            digests: mrc(&[PBS_CACHE_DEFAULT, PBS_CACHE_MAX]),
            blocks: mrc(&[]),
            txg: None,
            dirty: IntMap::default(),
            txg_number: 1,
            dirty_in_txg: 0,
            per_txg: Vec::new(),
            txg_starts: Vec::new(),
            touches_per_txg: Vec::new(),
            touches_in_txg: 0,
            touch_log: Vec::new(),
            index_starts: Vec::new(),
            access: Decimated {
                max: o.access_points,
                stride: 1,
                seen: 0,
                kept: Vec::new(),
            },
            listings: 0,
            entries: 0,
            ascending: 0,
            pairs: 0,
            dirs: DirListings::default(),
            s3: None,
        }
    }

    /// Counts a request and its times (real and modelled) under its operation.
    #[inline]
    pub(super) fn count_request(&mut self, rec: &Sample) {
        self.records += 1;
        let end = rec.start_ns + rec.duration_ns;
        let run = self.run.get_or_insert((rec.start_ns, end));
        run.1 = run.1.max(end);
        self.modeled_ns += rec.modeled_ns;
        let slot = rec.op as usize;
        if self.ops.len() <= slot {
            self.ops.resize_with(slot + 1, || None);
        }
        let a = self.ops[slot].get_or_insert_with(|| {
            Box::new(OpAcc {
                count: 0,
                errors: Default::default(),
                real: HdrCounts::default(),
                modeled: HdrCounts::default(),
                real_log2: [0; 65],
                modeled_log2: [0; 65],
            })
        });
        count_log2(&mut a.real_log2, rec.duration_ns);
        count_log2(&mut a.modeled_log2, rec.modeled_ns);
        a.count += 1;
        if rec.errno != 0 {
            *a.errors
                .entry(crate::units::errno_name(rec.errno))
                .or_insert(0) += 1;
        }
        a.real.record(rec.duration_ns);
        a.modeled.record(rec.modeled_ns);
    }

    /// Where the request falls: the touches (`touch`: the touched chunk's directory) and
    /// digest lookups by inode and block, the reuse streams of the miss-ratio curves, the
    /// sampled access pattern.
    #[inline]
    pub(super) fn note_locality(&mut self, op: Op, rec: &Sample, touch: Option<u64>, o: &Options) {
        let per_block = o.inodes_per_block.max(1);
        let ok = rec.errno == 0;
        if let Some(parent) = touch {
            self.touches.push(rec.ino, parent, per_block);
            self.touch_log.push((rec.ino, parent));
        }
        if op == Op::Lookup {
            if rec.name == SampleName::Index {
                self.index_starts.push(self.touch_log.len());
            }
            if rec.name == SampleName::Digest {
                if o.mrc {
                    self.digests.push(rec.digest_key);
                }
                if ok && rec.ino != 0 {
                    self.lookups.push(rec.ino, rec.parent, per_block);
                }
            }
        }
        if o.mrc
            && rec.ino != 0
            && matches!(op, Op::Lookup | Op::Getattr | Op::Setattr | Op::Unlink)
        {
            self.blocks.push(rec.ino / per_block);
        }
        if rec.ino != 0 && ok && charged_metadata(op) {
            self.access.push(|at| AccessPoint {
                at,
                ino: rec.ino,
                op: op.name(),
                chunk_dir: rec.name == super::sample::SampleName::ChunkDir,
            });
        }
    }

    /// Write-back: the request's time (`clock`) falls in a transaction group (a window of
    /// `o.txg_ns`); a touch or an unlink dirties its inode's block in that group.
    #[inline]
    pub(super) fn note_write_back(
        &mut self,
        op: Op,
        rec: &Sample,
        touch: bool,
        clock: u64,
        o: &Options,
    ) {
        let txg_ns = o.txg_ns.max(1);
        let txg = clock / txg_ns;
        if self.txg != Some(txg) {
            self.close_txg(txg_ns);
            self.txg = Some(txg);
        }
        if rec.errno == 0 && rec.ino != 0 && (touch || op == Op::Unlink) {
            let block = rec.ino / o.inodes_per_block.max(1);
            if self.dirty.insert(block, self.txg_number) != Some(self.txg_number) {
                self.dirty_in_txg += 1;
            }
            self.touches_in_txg += touch as u64;
        }
    }

    /// A listing of directory `dir` that returned `dirents` (inode numbers, in order).
    #[inline]
    pub(super) fn note_listing(&mut self, dir: u64, dirents: &[u64], o: &Options) {
        self.listings += 1;
        self.entries += dirents.len() as u64;
        for w in dirents.windows(2) {
            self.pairs += 1;
            self.ascending += (w[1] > w[0]) as u64;
        }
        if !dirents.is_empty() {
            self.dirs.first_listing(dir, dirents, o.inodes_per_block);
        }
    }

    pub(super) fn close_txg(&mut self, txg_ns: u64) {
        if let Some(t) = self.txg {
            self.per_txg.push(self.dirty_in_txg);
            self.txg_starts.push(t * txg_ns);
            self.touches_per_txg.push(self.touches_in_txg);
            self.txg_number += 1;
            self.dirty_in_txg = 0;
            self.touches_in_txg = 0;
        }
    }

    pub(super) fn end_run(&mut self) {
        if let Some((first, last)) = self.run.take() {
            self.real_ns += last - first;
        }
    }

    pub(super) fn finish(mut self, o: &Options) -> Phase {
        self.close_txg(o.txg_ns.max(1));
        self.end_run();
        let what_if = self.what_if(o);
        let ideal = what_if.last().map_or(0, |w| w.block_writes);
        let writes: u64 = self.per_txg.iter().sum();
        let d = &mut self.dirs;
        d.gaps.sort_unstable();
        let ndirs = d.seen.len().max(1) as f64;
        Phase {
            records: self.records,
            real_ns: self.real_ns,
            modeled_ns: self.modeled_ns,
            ops: self
                .ops
                .iter()
                .enumerate()
                .filter_map(|(op, a)| Some((op, a.as_ref()?)))
                .map(|(op, a)| OpStats {
                    op: Op::from_u16(op as u16).map_or("unknown", Op::name),
                    count: a.count,
                    errors: a.errors.clone(),
                    rate: a.count as f64 / (self.real_ns as f64 / 1e9).max(1e-9),
                    real: latency(&a.real),
                    modeled: latency(&a.modeled),
                    real_log2: trimmed(&a.real_log2),
                    modeled_log2: trimmed(&a.modeled_log2),
                })
                .collect(),
            touches: self.touches.report(o.inodes_per_block),
            lookups: self.lookups.report(o.inodes_per_block),
            digest_mrc: with_bytes(self.digests.curve(), |c, distinct| {
                pbs_digest_cache_bytes(c, distinct)
            }),
            block_mrc: with_bytes(self.blocks.curve(), |c, _| c * o.block_bytes),
            writeback: Writeback {
                clock: if self.modeled_ns > 0 {
                    "modelled"
                } else {
                    "real"
                },
                txgs: self.per_txg.len() as u64,
                block_writes: writes,
                max_per_txg: self.per_txg.iter().copied().max().unwrap_or(0),
                inode_order_block_writes: ideal,
                amplification: if ideal > 0 {
                    writes as f64 / ideal as f64
                } else {
                    f64::NAN // no touches to put in inode order (JSON: null)
                },
                dirty_per_txg: self.per_txg,
                txg_start_ns: self.txg_starts,
            },
            listings: Listings {
                count: self.listings,
                entries: self.entries,
                ascending_pairs: self.ascending as f64 / self.pairs.max(1) as f64,
                dirs_with_2_or_more: d.with_2_or_more,
                dirs_without_shared_blocks: d.without_shared_blocks,
                mean_entries_per_dir: d.entries as f64 / ndirs,
                mean_blocks_per_dir: d.blocks as f64 / ndirs,
                median_in_dir_gap: d.gaps.get(d.gaps.len() / 2).map_or(0, |&g| g as u64),
            },
            s3: self.s3.map(|r| S3Requests {
                cost: o.s3_prices.map(|p| r.cost_at(&p)),
                storage_cost: o
                    .s3_prices
                    .map(|p| S3Requests::storage_at(r.bytes_listed, &p)),
                storage_saved: o
                    .s3_prices
                    .map(|p| S3Requests::storage_at(r.bytes_deleted, &p)),
                ..r
            }),
            what_if,
            indexes: self.index_starts.len() as u64,
            access_stride: self.access.stride,
            access_of: self.access.seen,
            access: self.access.kept,
            name: self.name,
        }
    }

    /// The touches as recorded, sorted within each index, and sorted globally (the first and
    /// the last on the second core, on a copy).
    pub(super) fn what_if(&mut self, o: &Options) -> Vec<WhatIf> {
        let per_block = o.inodes_per_block.max(1);
        let distinct_inodes = self.touches.inodes.len() as u64;
        let same = SameTouches {
            distinct_inodes,
            distinct_blocks: distinct_blocks(&self.touches.inodes, per_block),
            per_txg: &self.touches_per_txg,
        };
        let mut touches = std::mem::take(&mut self.touch_log);
        let index_starts = &self.index_starts;
        std::thread::scope(|scope| {
            let mut sorted = touches.clone();
            let same = &same;
            let other = scope.spawn(move || {
                let recorded = same.figures("recorded", &sorted, o);
                sorted.sort_unstable_by_key(|t| t.0);
                (recorded, same.figures("global", &sorted, o))
            });
            let mut from = 0;
            for to in index_starts.iter().copied().chain([touches.len()]) {
                let to = to.min(touches.len());
                if to > from {
                    touches[from..to].sort_unstable_by_key(|t| t.0);
                }
                from = from.max(to);
            }
            let per_index = same.figures("per-index", &touches, o);
            let (recorded, global) = other.join().expect("what-if thread panicked");
            vec![recorded, per_index, global]
        })
    }
}

/// What every reordering of a phase's touches shares: the same inodes, the same blocks, and
/// the same number of touches per transaction group.
pub(super) struct SameTouches<'a> {
    pub(super) distinct_inodes: u64,
    pub(super) distinct_blocks: u64,
    pub(super) per_txg: &'a [u64],
}

impl SameTouches<'_> {
    pub(super) fn figures(
        &self,
        order: &'static str,
        touches: &[(u64, u64)],
        o: &Options,
    ) -> WhatIf {
        let per_block = o.inodes_per_block.max(1);
        let mut loc = LocalityAcc::reusing_distinct();
        let mut mrc =
            ReuseDistances::sampled(ReuseDistances::powers_of_two(1 << 26, &[]), o.sample_rate);
        for &(ino, dir) in touches {
            loc.push(ino, dir, per_block);
            if o.mrc {
                mrc.push(ino / per_block);
            }
        }
        // Each block once per transaction group, with the recorded touches per group.
        let mut writes = 0u64;
        let mut at = 0usize;
        let mut blocks: Vec<u64> = Vec::new();
        for &n in self.per_txg {
            let end = (at + n as usize).min(touches.len());
            blocks.clear();
            blocks.extend(touches[at..end].iter().map(|t| t.0 / per_block));
            blocks.sort_unstable();
            blocks.dedup();
            writes += blocks.len() as u64;
            at = end;
        }
        let mut touches = loc.report(per_block);
        touches.distinct_inodes = self.distinct_inodes;
        touches.distinct_blocks = self.distinct_blocks;
        touches.ideal_blocks = self.distinct_inodes.div_ceil(per_block);
        WhatIf {
            order,
            touches,
            block_mrc: with_bytes(mrc.curve(), |c, _| c * o.block_bytes),
            block_writes: writes,
        }
    }
}
