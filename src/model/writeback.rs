//! The model's requests to its disk and its write-back: where a block lies (a copy-on-write
//! block where it was last written), reads and writes served by [`crate::disk::Disk`], syncs
//! of the transaction groups (home, through a journal, or copy-on-write taking turns with the
//! reads), the throttle.

use super::{Cost, Model};

impl Model {
    /// Serves `n` blocks from where `block` lies on the model's disk, arriving at `at`;
    /// returns when it is done.
    pub(super) fn device(&mut self, at: u64, block: u64, n: u64, write: bool) -> u64 {
        let Some(span) = self.disk.as_ref().map(|d| d.params().span) else {
            return at + if write { self.write_ns } else { self.miss_ns };
        };
        let offset = self.offset(block, span);
        let len = n * self.params.read_len();
        let disk = self.disk.as_mut().expect("checked");
        disk.serve(at, 0, offset, len, write).done_ns
    }

    /// Where `block` lies on a disk of `span` bytes: where copy-on-write last put it, a
    /// micro ZAP's sector, or its place in the geometry.
    pub(super) fn offset(&self, block: u64, span: u64) -> u64 {
        let p = &self.params;
        if p.placement.zfs_sector > 0 {
            if let Some(&at) = self.moved.get(&block) {
                return at;
            }
            let micro = super::place::dir_of_header(block)
                .filter(|d| !self.fat_dirs.contains(d))
                .and_then(|d| p.placement.zfs_micro_zap(d, span));
            if let Some(at) = micro {
                return at;
            }
        }
        p.placement.offset(&p.layout, p.block_bytes, block, span)
    }

    /// Copy-on-write: serves the syncs' writes that the disk reaches by `now` (the one it
    /// is on when a read arrives is served first); when the last is done, the sync ends.
    pub(super) fn cow_writes_due(&mut self, now: u64) {
        let len = self.params.read_len();
        let Some(disk) = self.disk.as_mut() else {
            return;
        };
        let mut last = None;
        while let Some(&(offset, queued)) = self.cow_writes.front() {
            let start = disk.free_ns().max(queued);
            if start > now {
                break;
            }
            last = Some(disk.serve(start, 0, offset, len, true).done_ns);
            self.cow_writes.pop_front();
        }
        if let (Some(done), true) = (last, self.cow_writes.is_empty()) {
            self.totals.writeback_ns += done.saturating_sub(self.cow_sync_start);
            self.sync_end_ns = done;
        }
    }

    /// Copy-on-write: queues the dirty blocks' copies at the allocation frontier from `at`
    /// (first copies after what the pool has allocated, second copies as far again on).
    pub(super) fn sync_cow(&mut self, at: u64) {
        let span = self.disk.as_ref().map_or(0, |d| d.params().span);
        let len = self.params.read_len();
        if self.frontier == (0, 0) {
            let first = self.params.placement.zfs_allocated.min(span / 2);
            self.frontier = (first, (2 * first).min(span.saturating_sub(len)));
        }
        let mut blocks: Vec<Option<u64>> = self.dirty.iter().map(|&b| Some(b)).collect();
        blocks.sort_unstable();
        // What the allocation itself writes: space maps, the MOS, the indirect blocks above.
        blocks.extend((0..self.params.cow_sync_extra_blocks).map(|_| None));
        for b in blocks {
            let (first, second) = self.frontier;
            if let Some(b) = b {
                self.moved.insert(b, first);
            }
            self.cow_writes.push_back((first, at));
            for copy in 1..self.params.cow_copies {
                self.cow_writes.push_back((second + (copy - 1) * len, at));
            }
            let next = |o: u64, by: u64| if o + by + len > span { 0 } else { o + by };
            let by = len * self.params.cow_copies.saturating_sub(1).max(1);
            self.frontier = (next(first, len), next(second, by));
        }
        self.cow_sync_start = at;
    }

    /// With a disk, writes `blocks` (sorted) to their homes from `at`, runs of neighbours
    /// as one request of at most 512 KiB; returns when the last is done.
    pub(super) fn write_home(&mut self, at: u64, blocks: &[u64]) -> u64 {
        let per_io = ((512 << 10) / self.params.block_bytes.max(1)).max(1);
        let mut done = at;
        let mut i = 0;
        while i < blocks.len() {
            let mut n = 1;
            while i + (n as usize) < blocks.len()
                && blocks[i + n as usize] == blocks[i] + n
                && n < per_io
            {
                n += 1;
            }
            done = self.device(at, blocks[i], n, true);
            i += n as usize;
        }
        done
    }

    /// Writes the blocks whose home writes are due by `now`.
    pub(super) fn home_writes_due(&mut self, now: u64) {
        while self.home_writes.front().is_some_and(|(due, _)| *due <= now) {
            let (due, blocks) = self.home_writes.pop_front().expect("checked");
            self.write_home(due, &blocks);
        }
    }

    /// Serves one log write of `len` bytes at `offset` from the journal's start.
    pub(super) fn log_write(&mut self, at: u64, offset: u64, len: u64) -> u64 {
        let journal = self.journal_offset();
        self.disk
            .as_mut()
            .map_or(at, |d| d.serve(at, 0, journal + offset, len, true).done_ns)
    }

    /// The journal's first byte on the model's disk.
    pub(super) fn journal_offset(&self) -> u64 {
        let span = self.disk.as_ref().map_or(0, |d| d.params().span);
        self.params.placement.journal(span)
    }

    pub(super) fn dirty(&mut self, block: u64, c: &mut Cost) {
        self.log_bytes += self.params.log_bytes_per_change;
        if self.dirty.insert(block) {
            c.dirtied += 1;
            if self.dirty.len() as u64 == self.params.sync_dirty_blocks {
                self.dirty_full_ns = self.clock_ns;
            }
        }
    }

    /// When a sync that returned at `end` ends: then, or once its copy-on-write writes are
    /// served ([`Model::cow_writes_due`] sets it).
    pub(super) fn sync_ended(&self, end: u64) -> u64 {
        if self.cow_writes.is_empty() {
            end
        } else {
            u64::MAX
        }
    }

    /// Writes the dirty blocks (a transaction-group sync) from `at`; returns its duration.
    pub(super) fn sync(&mut self, at: u64) -> u64 {
        let n = self.dirty.len() as u64;
        let cow = self.params.cow_copies > 0 && self.disk.is_some();
        let ns = if cow {
            // Its time is known when its writes are served (`cow_writes_due`).
            if n > 0 {
                self.sync_cow(at);
            }
            0
        } else if self.disk.is_some() {
            if n == 0 {
                0
            } else {
                self.sync_to_disk(at)
            }
        } else {
            let qd = self.params.queue_depth.max(1);
            // Copy-on-write puts a group's blocks one after the other: with aggregation they
            // go out in I/Os of the limit's size.
            let ios = n.div_ceil(self.params.blocks_per_io());
            ios.div_ceil(qd) * self.write_ns + (n - ios) * self.transfer_ns / qd
        };
        self.totals.txg_syncs += 1;
        self.totals.blocks_written += match cow && n > 0 {
            true => (n + self.params.cow_sync_extra_blocks) * self.params.cow_copies,
            false => n,
        };
        self.totals.writeback_ns += ns;
        self.totals.dirty_per_txg.push(n);
        self.dirty.clear();
        self.dirty_full_ns = u64::MAX;
        ns
    }

    /// A sync on the model's disk: to the journal (a descriptor block, the blocks, a commit
    /// block, one after the other) and home later, or home at once.
    pub(super) fn sync_to_disk(&mut self, at: u64) -> u64 {
        let mut blocks: Vec<u64> = self.dirty.iter().copied().collect();
        let p = &self.params;
        let span = self.disk.as_ref().map_or(0, |d| d.params().span);
        blocks.sort_unstable_by_key(|&b| p.placement.offset(&p.layout, p.block_bytes, b, span));
        if self.params.home_write_delay_ns == 0 {
            return self.write_home(at, &blocks) - at;
        }
        self.home_writes_due(at);
        // The journal: the blocks themselves with a descriptor and a commit block (jbd2), or
        // the changes' log records (logical logging) in log-buffer-sized writes that wait for
        // the reads to take turns with.
        let (bytes, io) = match self.params.log_bytes_per_change {
            0 => ((blocks.len() as u64 + 2) * self.params.block_bytes, 0),
            per => (
                std::mem::take(&mut self.log_bytes).max(per),
                self.params.log_io_bytes,
            ),
        };
        // A 64 MiB journal, written round.
        if self.journal_head + bytes > 64 << 20 {
            self.journal_head = 0;
        }
        let mut done = at;
        if io == 0 {
            done = self.log_write(at, self.journal_head, bytes);
        } else {
            // What the previous push left in flight goes first.
            while let Some((offset, len)) = self.log_writes.pop_front() {
                done = self.log_write(at, offset, len);
            }
            let mut off = 0;
            while off < bytes {
                let len = io.min(bytes - off);
                self.log_writes.push_back((self.journal_head + off, len));
                off += len;
            }
        }
        self.journal_head += bytes;
        self.home_writes
            .push_back((at + self.params.home_write_delay_ns, blocks));
        done - at
    }

    /// With logical logging, a push when the changes' log records reach the push size: a
    /// group ends early (its writes go out between the next reads).
    pub(super) fn push_log_if_full(&mut self, now: u64) {
        let limit = self.params.log_push_bytes;
        if limit > 0 && self.log_bytes >= limit && self.disk.is_some() {
            let ns = self.sync(now);
            self.sync_end_ns = self.sync_ended(now + ns);
            self.txg_start_ns = now;
        }
    }

    /// Syncs every transaction group that ended before now. A group ends `txg_ns` after it
    /// opened, or when the previous group's sync has finished writing, whichever is later;
    /// with `sync_dirty_blocks`, also once it holds that many dirty blocks and the previous
    /// sync has ended.
    pub(super) fn advance_txgs(&mut self) {
        let txg = self.params.txg_ns.max(1);
        self.cow_writes_due(self.clock_ns);
        loop {
            let timed = if self.params.txg_after_sync {
                self.sync_end_ns.saturating_add(txg)
            } else {
                (self.txg_start_ns + txg).max(self.sync_end_ns)
            };
            let due = timed.min(self.dirty_full_ns.max(self.sync_end_ns));
            if self.clock_ns < due {
                break;
            }
            let ns = self.sync(due);
            self.sync_end_ns = self.sync_ended(due + ns);
            self.txg_start_ns = due;
            self.cow_writes_due(self.clock_ns);
        }
        if self.disk.is_some() {
            self.home_writes_due(self.clock_ns);
        }
    }

    pub(super) fn throttle(&mut self, c: &mut Cost) {
        let limit = self.params.dirty_limit_blocks.max(1) as f64;
        let dirty = self.dirty.len() as f64;
        let start = self.params.throttle_start * limit;
        if dirty >= limit {
            // At the limit the operation waits for the running sync to end, then for a sync
            // of everything dirty.
            self.cow_writes_due(u64::MAX);
            let wait = self.sync_end_ns.saturating_sub(self.clock_ns);
            let ns = self.sync(self.clock_ns + wait);
            self.cow_writes_due(u64::MAX);
            let ns = match self.sync_end_ns {
                u64::MAX => ns,
                end => ns.max(end.saturating_sub(self.clock_ns + wait)),
            };
            c.throttle_ns += wait + ns;
            self.sync_end_ns = self.clock_ns + wait + ns;
            self.txg_start_ns = self.clock_ns + wait;
        } else if dirty > start {
            c.throttle_ns +=
                (self.params.delay_scale_ns as f64 * (dirty - start) / (limit - dirty)) as u64;
        }
    }
}
