//! Phase 1: mark every referenced chunk by setting its atime, with one of the strategies of
//! the pbs-devel threads. The strategies differ only in *when and in what order* they touch;
//! every one of them touches every referenced, existing chunk at least once.
//!
//! | strategy | what it does per reference |
//! |---|---|
//! | `naive` | touch (PBS before 3.3.5) |
//! | `lru` | touch unless the digest is in the LRU (PBS since 3.3.5, thread 000) |
//! | `prefetch` | list all 65,536 chunk directories first, then `lru` (thread 001) |
//! | `batched` | LRU misses go into a batch; a full batch is grouped by directory, each directory listed once per run, then touched directory by directory (thread 003) |
//! | `inode-order` | as `batched`, but each batch is touched in ascending inode number (thread 001's idea) |

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};
use hashbrown::HashMap;

use super::log::TaskLog;
use super::lru::DigestLru;
use super::referenced::{ReferencedSet, SealedSet};
use super::{Counters, GcOptions, Strategy};
use crate::datastore::paths::CHUNK_SUBDIRS;
use crate::datastore::{Digest, IndexFile};
use crate::store::{ChunkDir, ChunkStore, IndexOrder, IndexOrigin, Phase1Visitor};

/// Phase-1 state: the strategy's structures and the counters.
pub struct Marker<'s, 'l, S: ChunkStore> {
    store: &'s S,
    opts: &'s GcOptions,
    /// What phase 1 counted so far.
    pub counters: Counters,
    log: &'s mut TaskLog<'l>,
    lru: Option<DigestLru>,
    /// Every digest an index referenced (the sweep's guarantee, not PBS's).
    referenced: ReferencedSet,
    /// Referenced digests phase 1 found missing (touch said ENOENT).
    missing: hashbrown::HashSet<Digest>,
    /// Digests that missed the cache, with the index that referenced them (batched kinds).
    batch: Vec<(Digest, u32)>,
    /// Chunk directories already read this run.
    warmed: Vec<bool>,
    /// inode-order: (first 8 digest bytes, inode) of the entries of each directory read.
    dir_inodes: HashMap<u16, Vec<(u64, u64)>>,
    /// Paths of the indexes seen, to name them in warnings.
    indexes: Vec<PathBuf>,
    scanned: usize,
    expected_done: usize,
    last_percent: usize,
    unexpected: usize,
    /// Called after each index is marked (tests use it to change the store mid-phase).
    pub after_index: Option<Box<dyn FnMut(usize) + 's>>,
}

/// What phase 1 leaves for the sweep.
pub struct Marked {
    /// What phase 1 counted.
    pub counters: Counters,
    /// Every referenced digest.
    pub referenced: SealedSet,
    /// Referenced digests whose chunk phase 1 found missing.
    pub missing: hashbrown::HashSet<Digest>,
}

/// Reads every index (PBS's phase-1 order) and collects the referenced digests without
/// touching anything: a dry run's phase 1, and what a sweep run without a mark verifies
/// against. Nothing is found missing (no chunk is looked at).
pub fn collect<S: ChunkStore>(store: &S) -> Result<Marked> {
    let mut counters = Counters::default();
    let referenced = collect_references(store, &mut counters)?;
    Ok(Marked {
        counters,
        referenced,
        missing: Default::default(),
    })
}

fn collect_references<S: ChunkStore>(store: &S, counters: &mut Counters) -> Result<SealedSet> {
    struct Collect<'a> {
        set: ReferencedSet,
        counters: &'a mut Counters,
    }
    impl Phase1Visitor for Collect<'_> {
        fn start(&mut self, _: usize) {}
        fn index(&mut self, _: &Path, index: IndexFile, _: IndexOrigin) -> Result<()> {
            self.counters.count_index(&index);
            let set = &mut self.set;
            index.for_each_digest(&mut |d| {
                set.insert(&d);
                Ok(())
            })
        }
    }
    let mut v = Collect {
        set: ReferencedSet::new(),
        counters,
    };
    store.walk_indexes(&mut v)?;
    Ok(v.set.seal())
}

fn head(d: &Digest) -> u64 {
    u64::from_be_bytes(d.0[..8].try_into().expect("8"))
}

impl<'s, 'l, S: ChunkStore> Marker<'s, 'l, S> {
    /// Phase 1 of a run with `opts` on `store`, logging to `log`.
    pub fn new(store: &'s S, opts: &'s GcOptions, log: &'s mut TaskLog<'l>) -> Self {
        let lru = (!opts.strategy.uncached() && opts.cache_capacity > 0)
            .then(|| DigestLru::new(opts.cache_capacity));
        Marker {
            store,
            opts,
            counters: Counters::default(),
            log,
            lru,
            referenced: ReferencedSet::new(),
            missing: hashbrown::HashSet::new(),
            batch: Vec::new(),
            warmed: vec![false; CHUNK_SUBDIRS],
            dir_inodes: HashMap::new(),
            indexes: Vec::new(),
            scanned: 0,
            expected_done: 0,
            last_percent: 0,
            unexpected: 0,
            after_index: None,
        }
    }

    /// Runs phase 1 to the end; an error means "do not sweep".
    pub fn run(mut self) -> Result<Marked> {
        let started = Instant::now();
        if self.opts.strategy == Strategy::Prefetch {
            self.prefetch()?;
        }
        let store = self.store;
        store.walk_indexes(&mut self)?;
        self.flush()?;
        if self.unexpected > 0 {
            self.log.warn(&format!(
                "Found {} index files outside of expected directory scheme",
                self.unexpected
            ));
        }
        if let Some(lru) = &self.lru {
            self.counters.cache_reserved_bytes = lru.reserved_bytes();
        }
        self.counters.phase1_seconds = started.elapsed().as_secs_f64();
        Ok(Marked {
            counters: self.counters,
            referenced: self.referenced.seal(),
            missing: self.missing,
        })
    }

    /// Thread 001: read every chunk directory once before phase 1, split over jobs.
    fn prefetch(&mut self) -> Result<()> {
        let jobs = self.opts.prefetch_jobs.max(1);
        let store = self.store;
        let dirs = store.chunk_dirs();
        if jobs > 1 && store.prefetch_job(Some(0)) {
            // The jobs in turn, one directory each, as the store asked.
            let mut step = 0;
            loop {
                let mut any = false;
                for j in 0..jobs {
                    let prefix = dirs * j / jobs + step;
                    if prefix >= dirs * (j + 1) / jobs {
                        continue;
                    }
                    any = true;
                    store.prefetch_job(Some(j));
                    if let Some(mut dir) = store.open_dir(prefix as u16)? {
                        let entries = &mut self.counters.entries_listed;
                        dir.list(&mut |_, _| *entries += 1)?;
                        self.counters.listings += 1;
                    }
                }
                if !any {
                    break;
                }
                step += 1;
            }
            store.prefetch_job(None);
            self.counters.prefetch_listings = self.counters.listings;
            self.warmed.iter_mut().for_each(|w| *w = true);
            return Ok(());
        }
        let results: Vec<Result<(u64, u64)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..jobs)
                .map(|j| {
                    s.spawn(move || -> Result<(u64, u64)> {
                        let (lo, hi) = (dirs * j / jobs, dirs * (j + 1) / jobs);
                        let (mut listings, mut entries) = (0u64, 0u64);
                        for prefix in lo..hi {
                            if let Some(mut dir) = store.open_dir(prefix as u16)? {
                                dir.list(&mut |_, _| entries += 1)?;
                                listings += 1;
                            }
                        }
                        Ok((listings, entries))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("prefetch thread panicked"))
                .collect()
        });
        for r in results {
            let (l, e) = r?;
            self.counters.listings += l;
            self.counters.entries_listed += e;
        }
        self.counters.prefetch_listings = self.counters.listings;
        self.warmed.iter_mut().for_each(|w| *w = true);
        Ok(())
    }

    /// One reference of `digest` by index number `index`.
    #[inline]
    fn reference(&mut self, digest: Digest, index: u32) -> Result<()> {
        if let Some(lru) = &mut self.lru {
            if lru.insert(digest) {
                // Inserted into the referenced set on its miss.
                self.counters.cache_hits += 1;
                return Ok(());
            }
            self.counters.cache_misses += 1;
        }
        self.referenced.insert(&digest);
        match self.opts.strategy {
            Strategy::Unpatched | Strategy::Naive | Strategy::Lru | Strategy::Prefetch => {
                self.touch(digest, index)
            }
            Strategy::Batched | Strategy::InodeOrder => {
                self.batch.push((digest, index));
                if self.batch.len() >= self.opts.batch_size.max(1) {
                    self.flush()?;
                }
                Ok(())
            }
        }
    }

    fn touch(&mut self, digest: Digest, index: u32) -> Result<()> {
        self.counters.utimensat_calls += 1;
        match self.store.touch(&digest) {
            Ok(true) => {
                self.counters.touched += 1;
                Ok(())
            }
            Ok(false) => {
                // A store that vanished under the GC (a mount detached) has every chunk
                // missing: say that once, rather than warn of each.
                self.store.check_identity(false)?;
                // Missing: touch its .bad copies (a re-upload may still come), warn, go on.
                let mut bad_copies = 0;
                for n in 0..10 {
                    self.counters.utimensat_calls += 1;
                    match self.store.touch_bad(&digest, n) {
                        Ok(true) => bad_copies += 1,
                        Ok(false) => {}
                        Err(e) => bail!(
                            "update atime failed for chunk/file {}.{n}.bad - {e}",
                            digest
                        ),
                    }
                }
                self.counters.bad_touched += bad_copies;
                self.counters.missing_chunks += 1;
                self.missing.insert(digest);
                if self.opts.s3 {
                    // An S3 datastore's cache need not hold the chunk: its object is expected
                    // (format document 1.5), and phase 2 keeps an object with a `.using`.
                    if bad_copies == 0 {
                        match self.store.create_marker(&digest, b".using") {
                            Ok(true) => self.counters.using_created += 1,
                            Ok(false) => {}
                            Err(e) => {
                                bail!("creating the marker {digest}.using failed - {e}")
                            }
                        }
                    }
                    return Ok(());
                }
                let path = &self.indexes[index as usize];
                self.log.warn(&format!(
                    "warning: unable to access non-existent chunk {digest}, required by {:?}",
                    path.display().to_string()
                ));
                Ok(())
            }
            Err(e) => bail!("update atime failed for chunk {digest} - {e}"),
        }
    }

    /// Reads a chunk directory once per run; for inode-order, remembers its inode numbers.
    fn warm(&mut self, prefix: u16) -> Result<()> {
        if self.warmed[prefix as usize] {
            return Ok(());
        }
        self.warmed[prefix as usize] = true;
        let keep = self.opts.strategy == Strategy::InodeOrder;
        let mut inodes = Vec::new();
        if let Some(mut dir) = self.store.open_dir(prefix)? {
            let mut entries = 0u64;
            dir.list(&mut |name, ino| {
                entries += 1;
                if keep && name.len() == 64 {
                    if let Some(d) = Digest::from_hex_bytes(name) {
                        inodes.push((head(&d), ino));
                    }
                }
            })?;
            self.counters.listings += 1;
            self.counters.entries_listed += entries;
        }
        if keep {
            inodes.sort_unstable();
            self.dir_inodes.insert(prefix, inodes);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.counters.batch_flushes += 1;
        let mut batch = std::mem::take(&mut self.batch);
        // By directory (stable: index order within a directory), each digest once.
        batch.sort_by_key(|(d, _)| d.prefix());
        let mut seen = hashbrown::HashSet::with_capacity(batch.len());
        batch.retain(|(d, _)| seen.insert(*d));
        let mut start = 0;
        while start < batch.len() {
            let prefix = batch[start].0.prefix();
            let end = start
                + batch[start..]
                    .iter()
                    .take_while(|(d, _)| d.prefix() == prefix)
                    .count();
            self.warm(prefix)?;
            if self.opts.strategy == Strategy::Batched {
                for &(d, idx) in &batch[start..end] {
                    self.touch(d, idx)?;
                }
            }
            start = end;
        }
        if self.opts.strategy == Strategy::InodeOrder {
            // Ascending inode number over the whole batch; unknown (missing) ones last, as
            // PBS's verify orders them.
            let ino_of = |d: &Digest| -> u64 {
                let list = &self.dir_inodes[&d.prefix()];
                let h = head(d);
                match list.binary_search_by_key(&h, |e| e.0) {
                    Ok(i) => list[i].1,
                    Err(_) => u64::MAX,
                }
            };
            let mut ordered: Vec<(u64, Digest, u32)> =
                batch.iter().map(|&(d, i)| (ino_of(&d), d, i)).collect();
            ordered.sort_unstable_by_key(|e| (e.0, e.1));
            for (_, d, idx) in ordered {
                self.touch(d, idx)?;
            }
        }
        batch.clear();
        self.batch = batch;
        Ok(())
    }
}

impl<S: ChunkStore> Phase1Visitor for Marker<'_, '_, S> {
    fn order(&self) -> IndexOrder {
        self.opts
            .index_order
            .unwrap_or(self.opts.strategy.index_order())
    }

    fn start(&mut self, scanned: usize) {
        self.scanned = scanned;
        self.log.progress_start("marked", scanned as u64);
    }

    fn index(&mut self, path: &Path, index: IndexFile, origin: IndexOrigin) -> Result<()> {
        let n = self.indexes.len() as u32;
        self.indexes.push(path.to_path_buf());
        self.counters.count_index(&index);
        index.for_each_digest(&mut |d| self.reference(d, n))?;
        match origin {
            IndexOrigin::Expected | IndexOrigin::New => {
                if origin == IndexOrigin::New {
                    self.scanned += 1;
                    self.log.info(&format!(
                        "Encountered new index file '{:?}', increment total index file count",
                        path.display().to_string()
                    ));
                }
                self.expected_done += 1;
                let percent = self.expected_done * 100 / self.scanned.max(1);
                self.log
                    .progress(self.expected_done as u64, self.scanned as u64);
                if percent > self.last_percent {
                    self.last_percent = percent;
                    self.log.progress_line(&format!(
                        "marked {percent}% ({} of {} index files)",
                        self.expected_done, self.scanned
                    ));
                }
            }
            IndexOrigin::Unexpected => {
                self.unexpected += 1;
                self.log.warn(&format!(
                    "Marked chunks for unexpected index file at '{:?}'",
                    path.display().to_string()
                ));
            }
        }
        if let Some(f) = &mut self.after_index {
            f(self.indexes.len());
        }
        Ok(())
    }
}
