//! Phase 2 of an S3 datastore (PBS 4, format document 3.7): list the bucket's chunk objects
//! page by page, judge each by its local marker, delete in batches.
//!
//! Per key, in key order (digest order): the local file `.chunks/XXXX/<name>` is stat'ed. None
//! there and a `<hex>.using` marker: the marker goes, a zero-length marker takes its place and
//! the chunk is in use. None and no `.using`: the object is garbage. A local file: PBS's
//! cutoff rule on its atime, with the object's size; a removal unlinks the local file and
//! queues the key. The queue is sent as one `DeleteObjects` when it holds
//! [`DELETE_BATCH_KEYS`] keys or its oldest key has waited [`DELETE_DEFER_SECS`], and at the end.
//!
//! chunkscope's rules on top of PBS's: an object whose digest an index references is never
//! deleted (kept, counted and named, as the local sweep does); before a batch is sent each
//! key's local file is looked at again, and a key whose marker came back (a backup inserted
//! the chunk meanwhile: PBS holds per-chunk locks against that) is taken out of the batch;
//! the removal counters count what the server says it deleted, and any key it did not delete,
//! or a request that failed, stops the run with an error naming it.

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, bail, Result};

use super::log::TaskLog;
use super::sweep::Guard;
use super::{GcReport, KeptChunk, KeptReason, KEPT_NAMED};
use crate::bucket::{
    Bucket, Listing, ObjectName, CHUNK_PREFIX, DELETE_BATCH_KEYS, DELETE_DEFER_SECS, LIST_PAGE_KEYS,
};
use crate::datastore::paths::chunk_subdir_name;
use crate::datastore::Digest;
use crate::store::{ChunkDir, ChunkStore, EntryStat};
use crate::units::HumanByte;
use serde::Serialize;

/// The order an S3 GC's phase 2 takes each listing page's objects in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum PageOrder {
    /// As listed: key order, which is digest order (PBS 4).
    #[default]
    Key,
    /// The page's local files in inode order (each chunk directory the page names listed
    /// once for the inode numbers), objects without a local file last.
    Inode,
}

/// One garbage collection of an S3 datastore (PBS 4, format document 3.7), `store` its local
/// cache and `bucket` its objects: the bucket reached first (`HeadBucket`), phase 1 as on a
/// filesystem but leaving a `.using` marker for a referenced chunk with no local file, phase
/// 2 over the bucket's listing ([`sweep_bucket`]), phase 3 over the local markers.
pub fn run_s3<S: ChunkStore>(
    store: &S,
    bucket: &dyn Bucket,
    opts: &super::GcOptions,
    log: &mut TaskLog,
    hooks: super::Hooks<'_>,
) -> Result<GcReport> {
    if opts.shadow && !opts.dry_run {
        anyhow::bail!(
            "{} is a --shadow mount: its local changes stay in memory, but the deletions from \
             the bucket {} would be real; trace an S3 datastore's GC with --dry-run (nothing \
             deleted, the same requests on the local store) or through a mount that is not \
             --shadow",
            store.root().display(),
            bucket.describe()
        );
    }
    let opts = super::GcOptions {
        s3: true,
        ..opts.clone()
    };
    super::run_with(store, Some(bucket), &opts, log, hooks)
}

/// The referenced chunks whose object the listing did not meet (a bucket that lost them, or a
/// store whose cache was never uploaded), found again by their indexes, the rare case that
/// pays for a second walk of them. One with no whole local copy either is nowhere: a warning
/// naming it and an index that needs it, as a missing chunk of a filesystem store is (exit
/// 1); one whole in the local cache alone is counted.
fn unlisted_referenced<S: ChunkStore>(s: &mut BucketSweep<'_, '_, '_, S>) -> Result<()> {
    use crate::datastore::IndexFile;
    use crate::store::{IndexOrigin, Phase1Visitor};
    struct Unlisted<'v, 'a, 'g, 'l, S> {
        s: &'v mut BucketSweep<'a, 'g, 'l, S>,
        failed: Option<anyhow::Error>,
    }
    impl<S: ChunkStore> Phase1Visitor for Unlisted<'_, '_, '_, '_, S> {
        fn start(&mut self, _: usize) {}
        fn index(&mut self, path: &Path, index: IndexFile, _: IndexOrigin) -> Result<()> {
            let s = &mut *self.s;
            let failed = &mut self.failed;
            index.for_each_digest(&mut |d| -> Result<()> {
                let Some(p) = s.guard.referenced.position(&d) else {
                    return Ok(());
                };
                if !s.mark_listed(p) {
                    return Ok(()); // listed, or named already
                }
                match s.whole_local_copy(&d) {
                    Ok(true) => s.report.counters.referenced_only_local += 1,
                    Ok(false) => {
                        s.report.counters.referenced_nowhere += 1;
                        s.log.warn(&format!(
                            "warning: referenced chunk {d} has no object in the bucket and no \
                             whole local copy, required by {}",
                            path.display()
                        ));
                    }
                    Err(e) => *failed = Some(e),
                }
                Ok(())
            })?;
            self.failed.take().map_or(Ok(()), Err)
        }
    }
    let store = s.store;
    let mut v = Unlisted { s, failed: None };
    store.walk_indexes(&mut v)?;
    let only_local = v.s.report.counters.referenced_only_local;
    if only_local > 0 {
        v.s.log.info(&format!(
            "Referenced chunks whose object is missing but whose whole copy is in the local \
             cache: {only_local}"
        ));
    }
    Ok(())
}

/// Objects not at a chunk's key named one by one in the task log; the rest are counted.
const FOREIGN_NAMED: usize = 10;

/// A key waiting in the delete queue.
struct Queued {
    key: String,
    size: u64,
    bad: bool,
}

/// Phase 2 of an S3 datastore, counting into `report`; `dry_run` counts what it would delete
/// and changes nothing.
#[allow(clippy::too_many_arguments)]
pub fn sweep_bucket<S: ChunkStore>(
    store: &S,
    bucket: &dyn Bucket,
    min_atime: i64,
    oldest_writer: i64,
    dry_run: bool,
    guard: &Guard<'_>,
    log: &mut TaskLog,
    report: &mut GcReport,
) -> Result<()> {
    let started = Instant::now();
    let page_order = report.options.s3_page_order;
    let mut s = BucketSweep {
        store,
        bucket,
        min_atime,
        oldest_writer,
        dry_run,
        guard,
        log,
        report,
        queue: Vec::with_capacity(DELETE_BATCH_KEYS),
        oldest_queued: None,
        listed: vec![0; guard.referenced.len().div_ceil(64) as usize],
    };
    let mut listing = Listing::new(bucket, CHUNK_PREFIX, LIST_PAGE_KEYS);
    let mut dir: Option<(u16, S::Dir<'_>)> = None;
    let mut foreign = Vec::new();
    loop {
        // As the sweep of a filesystem store, every page: the local store is still the one
        // opened (a mount over it meanwhile stops the run before deleting anything more).
        store.check_identity(false)?;
        let page = listing
            .next_page()
            .map_err(|e| anyhow!("listing the bucket {} failed - {e}", bucket.describe()))?;
        let Some(page) = page else { break };
        s.report.counters.list_pages += 1;
        let order = match page_order {
            PageOrder::Key => (0..page.objects.len()).collect(),
            PageOrder::Inode => {
                drop(dir.take());
                s.inode_order(&page.objects)?
            }
        };
        for i in order {
            let object = &page.objects[i];
            let basename = object.key.rsplit('/').next().unwrap_or("");
            // Only a chunk's canonical key is PBS's to judge; any other key under .chunks/
            // (another directory, uppercase hex) is kept and named.
            let Some(name) = ObjectName::from_key(&object.key) else {
                s.report.counters.foreign_objects += 1;
                if foreign.len() < FOREIGN_NAMED {
                    foreign.push(object.key.clone());
                }
                continue;
            };
            s.report.counters.listed_objects += 1;
            s.report.counters.chunk_count += 1;
            let prefix = name.digest().prefix();
            if dir.as_ref().map(|(p, _)| *p) != Some(prefix) {
                drop(dir.take()); // the previous directory is closed before the next is opened
                dir = match open_local(store, prefix)? {
                    Some(d) => Some((prefix, d)),
                    None => bail!(
                        "chunk directory {} is missing: the local store is not this bucket's",
                        s.dir_path(prefix)
                    ),
                };
            }
            let (_, d) = dir.as_mut().expect("opened above");
            s.object(d, name, basename, &object.key, object.size)?;
            if s.queue.len() >= DELETE_BATCH_KEYS
                || s.oldest_queued
                    .is_some_and(|t: Instant| t.elapsed().as_secs() >= DELETE_DEFER_SECS)
            {
                dir = None;
                s.flush()?;
            }
        }
    }
    drop(dir);
    s.flush()?;
    let listed: u64 = s.listed.iter().map(|w| w.count_ones() as u64).sum();
    if listed < s.guard.referenced.len() {
        unlisted_referenced(&mut s)?;
    }
    let foreign_count = s.report.counters.foreign_objects;
    for key in &foreign {
        s.log.warn(&format!(
            "warning: object {key} is under {CHUNK_PREFIX} but not at a chunk's key \
             ({CHUNK_PREFIX}XXXX/<digest in lowercase hex>): kept, not judged"
        ));
    }
    if foreign_count > foreign.len() as u64 {
        s.log.warn(&format!(
            "warning: {} more objects not at a chunk's key kept ({foreign_count} in all)",
            foreign_count - foreign.len() as u64
        ));
    }
    let c = &mut s.report.counters;
    if c.kept_referenced as usize > s.report.kept_referenced.len() {
        s.log.warn(&format!(
            "warning: {} more referenced chunks kept that PBS would have removed ({} in all, {})",
            c.kept_referenced as usize - s.report.kept_referenced.len(),
            c.kept_referenced,
            HumanByte(c.kept_referenced_bytes)
        ));
    }
    c.phase2_seconds = started.elapsed().as_secs_f64();
    let n = c.chunk_count;
    s.log.info(&format!("processed {n} total chunks"));
    Ok(())
}

/// Local chunk directory `prefix`, for messages.
fn dir_path<S: ChunkStore>(store: &S, prefix: u16) -> String {
    store
        .root()
        .join(crate::datastore::paths::CHUNK_DIR)
        .join(chunk_subdir_name(prefix))
        .display()
        .to_string()
}

/// Local chunk directory `prefix`, `None` if there is none.
fn open_local<S: ChunkStore>(store: &S, prefix: u16) -> Result<Option<S::Dir<'_>>> {
    store.open_dir(prefix).map_err(|e| {
        anyhow!(
            "opening chunk directory {} failed - {e}",
            dir_path(store, prefix)
        )
    })
}

struct BucketSweep<'a, 'g, 'l, S> {
    store: &'a S,
    bucket: &'a dyn Bucket,
    min_atime: i64,
    oldest_writer: i64,
    dry_run: bool,
    guard: &'a Guard<'g>,
    log: &'a mut TaskLog<'l>,
    report: &'a mut GcReport,
    queue: Vec<Queued>,
    oldest_queued: Option<Instant>,
    /// A bit for each referenced chunk ([`crate::gc::referenced::SealedSet::position`]): set
    /// when the listing met its object.
    listed: Vec<u64>,
}

impl<S: ChunkStore> BucketSweep<'_, '_, '_, S> {
    /// A page's objects in the inode order of their local files (those without one last,
    /// in key order): each chunk directory the page names is listed once for its entries'
    /// inode numbers. chunkscope's variant, not PBS's (`--s3-page-order inode`).
    fn inode_order(&mut self, objects: &[crate::bucket::Listed]) -> Result<Vec<usize>> {
        let mut by_dir: hashbrown::HashMap<u16, Vec<usize>> = hashbrown::HashMap::new();
        for (i, o) in objects.iter().enumerate() {
            if let Some(name) = ObjectName::from_key(&o.key) {
                by_dir.entry(name.digest().prefix()).or_default().push(i);
            }
        }
        let mut inodes = vec![u64::MAX; objects.len()];
        let mut prefixes: Vec<u16> = by_dir.keys().copied().collect();
        prefixes.sort_unstable();
        for prefix in prefixes {
            let wanted = &by_dir[&prefix];
            let Some(mut dir) = open_local(self.store, prefix)? else {
                continue;
            };
            let c = &mut self.report.counters;
            c.sweep_listings += 1;
            let mut entries = 0u64;
            dir.list(&mut |name, ino| {
                entries += 1;
                for &i in wanted {
                    if objects[i].key.rsplit('/').next().map(str::as_bytes) == Some(name) {
                        inodes[i] = ino;
                    }
                }
            })
            .map_err(|e| {
                anyhow!(
                    "listing chunk directory {} failed - {e}",
                    self.dir_path(prefix)
                )
            })?;
            self.report.counters.sweep_entries += entries;
        }
        let mut order: Vec<usize> = (0..objects.len()).collect();
        order.sort_by_key(|&i| (inodes[i], i));
        Ok(order)
    }

    fn dir_path(&self, prefix: u16) -> String {
        dir_path(self.store, prefix)
    }

    fn local_path(&self, prefix: u16, name: &str) -> String {
        format!("{}/{name}", self.dir_path(prefix))
    }

    /// One chunk object: judged by its local file, kept, or queued for deletion.
    fn object(
        &mut self,
        dir: &mut S::Dir<'_>,
        name: ObjectName,
        basename: &str,
        key: &str,
        size: u64,
    ) -> Result<()> {
        let prefix = name.digest().prefix();
        self.report.counters.stat_calls += 1;
        let st = dir
            .stat(basename.as_bytes())
            .map_err(|e| anyhow!("stat of {} failed - {e}", self.local_path(prefix, basename)))?;
        let referenced = match name {
            ObjectName::Chunk(d) => self.guard.referenced.position(&d).map(|p| {
                self.mark_listed(p);
                d
            }),
            _ => None,
        };
        let Some(st) = st else {
            return self.without_local_file(dir, name, basename, key, size, referenced);
        };
        let c = &mut self.report.counters;
        if !st.is_file {
            c.irregular_chunks += 1;
            self.log.warn(&format!(
                "warning: {} is not a regular file: its object {key} is kept",
                self.local_path(prefix, basename)
            ));
            return Ok(());
        }
        let bad = matches!(name, ObjectName::Bad(_));
        let st = EntryStat { size, ..st };
        if self.dry_run && referenced.is_some() {
            c.disk_chunks += 1;
            c.disk_bytes += size;
            return Ok(());
        }
        if st.atime < self.min_atime {
            if let Some(d) = referenced {
                self.keep_referenced(d, st, self.guard.reason(&d));
                return Ok(());
            }
            if !self.dry_run {
                dir.unlink(basename.as_bytes()).map_err(|e| {
                    anyhow!(
                        "removing the local marker {} failed - {e}",
                        self.local_path(prefix, basename)
                    )
                })?;
                self.report.counters.unlinks += 1;
            }
            self.queue(key, size, bad);
        } else if st.atime < self.oldest_writer {
            if bad {
                c.still_bad += 1;
            } else {
                c.pending_chunks += 1;
            }
            c.pending_bytes += size;
        } else {
            if !bad {
                c.disk_chunks += 1;
            }
            c.disk_bytes += size;
        }
        Ok(())
    }

    /// An object with no local file: kept by a `.using` marker (which a zero-length marker
    /// replaces), else garbage, unless referenced.
    fn without_local_file(
        &mut self,
        dir: &mut S::Dir<'_>,
        name: ObjectName,
        basename: &str,
        key: &str,
        size: u64,
        referenced: Option<Digest>,
    ) -> Result<()> {
        let digest = name.digest();
        let prefix = digest.prefix();
        let using = format!("{}.using", digest.to_hex());
        self.report.counters.stat_calls += 1;
        let has_using = dir
            .stat(using.as_bytes())
            .map_err(|e| anyhow!("stat of {} failed - {e}", self.local_path(prefix, &using)))?;
        if has_using.is_some() {
            if !self.dry_run {
                dir.unlink(using.as_bytes()).map_err(|e| {
                    anyhow!(
                        "removing the marker {} failed - {e}",
                        self.local_path(prefix, &using)
                    )
                })?;
                self.store
                    .create_marker(
                        &digest,
                        if matches!(name, ObjectName::Bad(_)) {
                            &basename.as_bytes()[64..]
                        } else {
                            b""
                        },
                    )
                    .map_err(|e| {
                        anyhow!(
                            "creating the marker {} failed - {e}",
                            self.local_path(prefix, basename)
                        )
                    })?;
                let c = &mut self.report.counters;
                c.unlinks += 1;
                c.markers_created += 1;
            }
            let c = &mut self.report.counters;
            c.disk_chunks += 1;
            c.disk_bytes += size;
            return Ok(());
        }
        if self.dry_run && referenced.is_some() {
            // A GC's phase 1 would have left a `.using` for it (a dry run touches nothing).
            let c = &mut self.report.counters;
            c.disk_chunks += 1;
            c.disk_bytes += size;
            return Ok(());
        }
        if let Some(d) = referenced {
            let st = EntryStat {
                atime: 0,
                size,
                is_file: true,
            };
            self.keep_referenced(d, st, KeptReason::NoLocalFile);
            return Ok(());
        }
        self.queue(key, size, matches!(name, ObjectName::Bad(_)));
        Ok(())
    }

    fn queue(&mut self, key: &str, size: u64, bad: bool) {
        if self.dry_run {
            let c = &mut self.report.counters;
            if bad {
                c.removed_bad += 1;
            } else {
                c.removed_chunks += 1;
            }
            c.removed_bytes += size;
            return;
        }
        if self.queue.is_empty() {
            self.oldest_queued = Some(Instant::now());
        }
        self.queue.push(Queued {
            key: key.to_string(),
            size,
            bad,
        });
    }

    /// Sends the queued keys as one `DeleteObjects`, after taking out those whose local file
    /// came back; counts what the server deleted; any key it did not delete stops the run.
    fn flush(&mut self) -> Result<()> {
        self.oldest_queued = None;
        if self.queue.is_empty() {
            return Ok(());
        }
        let mut batch = std::mem::take(&mut self.queue);
        let mut i = 0;
        while i < batch.len() {
            if self.came_back(&batch[i].key)? {
                let q = batch.swap_remove(i);
                self.report.counters.delete_withdrawn += 1;
                self.log.warn(&format!(
                    "warning: {} came back while its deletion was queued (a backup inserted \
                     it): its object is kept",
                    q.key
                ));
            } else {
                i += 1;
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = batch.iter().map(|q| q.key.clone()).collect();
        self.report.counters.delete_requests += 1;
        let outcome = self.bucket.delete(&keys).map_err(|e| {
            anyhow!(
                "deleting {} objects from the bucket {} failed - {e}",
                keys.len(),
                self.bucket.describe()
            )
        })?;
        let deleted: hashbrown::HashSet<&str> =
            outcome.deleted.iter().map(|k| k.as_str()).collect();
        let c = &mut self.report.counters;
        for q in &batch {
            if deleted.contains(q.key.as_str()) {
                c.deleted_objects += 1;
                if q.bad {
                    c.removed_bad += 1;
                } else {
                    c.removed_chunks += 1;
                }
                c.removed_bytes += q.size;
            }
        }
        if !outcome.errors.is_empty() || deleted.len() < batch.len() {
            let failed: Vec<String> = outcome
                .errors
                .iter()
                .take(3)
                .map(|(k, code, msg)| format!("{k}: {code} {msg}"))
                .collect();
            let unanswered = batch.len() - deleted.len() - outcome.errors.len().min(batch.len());
            bail!(
                "deleting objects from the bucket {} failed: {} of {} keys not deleted{}{}",
                self.bucket.describe(),
                batch.len() - deleted.len(),
                batch.len(),
                if failed.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", failed.join("; "))
                },
                if unanswered > 0 {
                    format!(", {unanswered} not mentioned in the answer")
                } else {
                    String::new()
                }
            );
        }
        Ok(())
    }

    /// Sets the bit of the referenced chunk at `p`; whether it was clear.
    fn mark_listed(&mut self, p: u64) -> bool {
        let (word, bit) = ((p / 64) as usize, 1u64 << (p % 64));
        let clear = self.listed[word] & bit == 0;
        self.listed[word] |= bit;
        clear
    }

    /// Whether the local cache holds chunk `d` whole (a regular file that is not a marker).
    fn whole_local_copy(&mut self, d: &Digest) -> Result<bool> {
        let Some(mut dir) = open_local(self.store, d.prefix())? else {
            return Ok(false);
        };
        let name = d.to_hex();
        self.report.counters.stat_calls += 1;
        let st = dir.stat(name.as_bytes()).map_err(|e| {
            anyhow!(
                "stat of {} failed - {e}",
                self.local_path(d.prefix(), &name)
            )
        })?;
        Ok(st.is_some_and(|st| st.is_file && st.size > 0))
    }

    /// Whether the local file of a queued key is there again.
    fn came_back(&mut self, key: &str) -> Result<bool> {
        let basename = key.rsplit('/').next().unwrap_or("");
        let Some(name) = ObjectName::from_key(key) else {
            return Ok(false);
        };
        let prefix = name.digest().prefix();
        let Some(mut dir) = open_local(self.store, prefix)? else {
            return Ok(false);
        };
        self.report.counters.stat_calls += 1;
        let st = dir
            .stat(basename.as_bytes())
            .map_err(|e| anyhow!("stat of {} failed - {e}", self.local_path(prefix, basename)))?;
        Ok(st.is_some_and(|st| st.atime >= self.min_atime))
    }

    /// A referenced chunk PBS would have deleted: kept, counted as in use, named.
    #[cold]
    fn keep_referenced(&mut self, d: Digest, st: EntryStat, reason: KeptReason) {
        let c = &mut self.report.counters;
        c.kept_referenced += 1;
        c.kept_referenced_bytes += st.size;
        c.disk_chunks += 1;
        c.disk_bytes += st.size;
        if self.report.kept_referenced.len() < KEPT_NAMED {
            self.log.warn(&format!(
                "warning: kept referenced chunk {d} ({}): PBS would have deleted its object",
                reason.describe(),
            ));
            self.report.kept_referenced.push(KeptChunk {
                digest: d.to_hex(),
                reason,
                atime: st.atime,
                size: st.size,
            });
        }
    }
}

/// Phase 3 of an S3 datastore: the local sweep over the markers (`.using` leftovers removed,
/// expired markers removed, referenced ones never). PBS counts it into a status it throws
/// away; chunkscope keeps its counts apart (`phase3_*`), so the summary is phase 2's.
#[allow(clippy::too_many_arguments)]
pub(super) fn sweep_markers<S: ChunkStore>(
    store: &S,
    min_atime: i64,
    oldest_writer: i64,
    opts: &super::GcOptions,
    guard: &Guard<'_>,
    log: &mut TaskLog,
    report: &mut GcReport,
) -> Result<()> {
    let started = std::time::Instant::now();
    let mut local = GcReport {
        counters: super::Counters::default(),
        kept_referenced: Vec::new(),
        ..report.clone()
    };
    let swept = super::sweep::sweep(
        store,
        min_atime,
        oldest_writer,
        opts.dry_run,
        guard,
        log,
        &mut local,
    );
    let c = &mut report.counters;
    let l = &local.counters;
    c.phase3_chunk_count = l.chunk_count;
    c.phase3_unlinks = l.unlinks;
    c.phase3_listings = l.sweep_listings;
    c.phase3_entries = l.sweep_entries;
    c.phase3_stat_calls = l.stat_calls;
    c.unlinks += l.unlinks;
    c.phase3_seconds = started.elapsed().as_secs_f64();
    swept
}

/// Before the atime check on an S3 datastore: the zero chunk's object, if its local file is
/// missing (PBS uploads it first, so that the check's chunk is the bucket's too).
pub(super) fn upload_zero_chunk<S: ChunkStore>(store: &S, b: &dyn Bucket) -> Result<()> {
    let (digest, blob) = super::zero_chunk();
    if store.stat_chunk(&digest)?.is_none() {
        let key = crate::datastore::paths::chunk_rel_path(&digest)
            .to_string_lossy()
            .into_owned();
        b.put(&key, &blob)
            .map_err(|e| anyhow!("uploading the zero chunk to {} failed - {e}", b.describe()))?;
    }
    Ok(())
}
