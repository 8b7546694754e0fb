//! `chunkscope survey`: one read-only pass over a real datastore that reports its metadata
//! layout in the threads' terms and saves what the simulator needs to predict its GC.
//!
//! 1. **Listing** ([`table::ChunkTable::list`]): the 65,536 chunk directories with
//!    `getdents64`, keeping each chunk's digest and inode number (`d_ino`: no stat per chunk),
//!    and per directory the distinct metadata blocks of its chunks' inodes and the median gap
//!    between consecutive inode numbers.
//! 2. **Indexes**: PBS's phase-1 walk ([`crate::store::walk_indexes`]), each index file read
//!    once, its references marked in the table.
//! 3. **Unreferenced chunks**: a `stat` each (their atimes decide what a GC would remove).
//! 4. **The bucket** of an S3 datastore ([`bucket`], [`survey_s3`]): its chunk objects listed
//!    as a GC's phase 2 lists them, each set against the local cache.
//!
//! Nothing is changed: every open (directories too) with `O_NOATIME` where the kernel allows
//! it (the report counts the opens it refused), no lock, no write to the store. A live PBS
//! may write and prune meanwhile: a chunk listed and gone by its stat is counted as
//! vanished, a reference to a chunk not listed as such (created after its directory was
//! listed, or missing), an index file pruned meanwhile is skipped as PBS skips it; none of
//! them is an error. `*.tmp_*` files and index files being written (`*.tmp_fidx`,
//! `*.tmp_didx`) are never read, as PBS never reads them.

pub mod bucket;
pub mod file;
pub mod layout;
pub mod table;
mod tree;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::datastore::error::Problem;
use crate::datastore::paths::{CHUNK_DIR, CHUNK_SUBDIRS};
use crate::datastore::{Digest, IndexFile, IndexKind};
use crate::gen::truth::GarbageCounts;
use crate::store::{IndexOrigin, Phase1Visitor};
pub use layout::LayoutChoice;
use table::{ChunkTable, OtherEntries};

/// What to survey, and how.
#[derive(Clone, Debug)]
pub struct SurveyOptions {
    /// How inode numbers map to metadata blocks.
    pub layout: LayoutChoice,
    /// GC cutoff in minutes (PBS gc-atime-cutoff), for what a GC now would remove.
    pub cutoff_minutes: u64,
    /// "Now", epoch seconds.
    pub now: i64,
    /// Where to save the survey for the simulator (`--out`).
    pub out: Option<PathBuf>,
    /// Progress bars on standard error.
    pub progress: bool,
}

/// Smallest, median and largest of a count over the chunk directories.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Spread {
    /// The smallest.
    pub min: u64,
    /// The median.
    pub median: u64,
    /// The largest.
    pub max: u64,
}

/// The chunk directory at the median of chunks per directory: thread 001's line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MedianDir {
    /// Its path below the store (`.chunks/7a3f`).
    pub dir: String,
    /// Its chunks.
    pub chunks: u64,
    /// The distinct metadata blocks their inodes fall in.
    pub blocks: u64,
    /// The median gap between its consecutive inode numbers.
    pub median_gap: u64,
}

/// Seconds each step took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Timing {
    /// Listing the chunk directories.
    pub listing: f64,
    /// Reading the index files.
    pub indexes: f64,
    /// Stat of the unreferenced chunks.
    pub stats: f64,
    /// The whole survey.
    pub total: f64,
}

/// What a survey found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SurveyReport {
    /// The store surveyed.
    pub store: String,
    /// Its filesystem.
    pub filesystem: String,
    /// How inode numbers were mapped to metadata blocks.
    pub layout: String,
    /// Whether that mapping was assumed (a filesystem without inode blocks, or a superblock
    /// that could not be read) rather than read from the filesystem.
    pub layout_assumed: bool,
    /// When the survey started, epoch seconds.
    pub surveyed_at: i64,
    /// The GC cutoff a GC now would use, epoch seconds.
    pub cutoff: i64,
    /// Chunk files.
    pub chunks: u64,
    /// Chunk directories listed.
    pub chunk_dirs: u64,
    /// Chunk directories that were not there.
    pub missing_chunk_dirs: u64,
    /// Chunk directories that are not the store's own (not listed: a GC would refuse).
    pub odd_chunk_dirs: Vec<Problem>,
    /// Chunks per directory.
    pub chunks_per_dir: Spread,
    /// Distinct metadata blocks per directory, summed over the directories.
    pub blocks: u64,
    /// Distinct blocks divided by chunks, per directory, averaged over the directories with
    /// chunks: 1.0 means no two chunks of a directory share a block.
    pub blocks_per_chunk: f64,
    /// The median over the chunk directories of each one's median gap between consecutive
    /// inode numbers.
    pub median_inode_gap: u64,
    /// The directory at the median of chunks per directory.
    pub median_dir: MedianDir,
    /// Distinct metadata blocks of all chunks (over the store: what a sweep's stats read).
    pub store_blocks: u64,
    /// Distinct metadata blocks of the referenced chunks (what phase 1's touches read and
    /// rewrite).
    pub referenced_blocks: u64,
    /// Index files read.
    pub index_files: u64,
    /// Index files that could not be read (the references they hold are not marked: what a
    /// GC would do with their chunks is not known, and a GC would stop).
    pub unreadable_indexes: Vec<Problem>,
    /// References over all index files read.
    pub references: u64,
    /// The backup data the index files describe (fidx sizes, didx last ends): what a GC's
    /// task log calls "Original data usage".
    pub index_data_bytes: u64,
    /// Distinct chunks referenced (listed or not).
    pub referenced: u64,
    /// Of them, not listed: created after their directory was listed, or missing.
    pub referenced_not_listed: u64,
    /// Listed chunks no index references.
    pub unreferenced: u64,
    /// What a GC now would do with them, if it swept: see `gc_would_stop`.
    pub garbage: GarbageCounts,
    /// A GC now would stop before its sweep and remove none of `garbage` (an index file it
    /// cannot read, a chunk directory that is not the store's own).
    pub gc_would_stop: bool,
    /// Unreferenced chunks listed but gone by their stat (removed meanwhile).
    pub vanished: u64,
    /// What else the chunk directories held.
    #[serde(flatten)]
    pub other: OtherEntries,
    /// Opens the kernel refused `O_NOATIME` (not the owner, no `CAP_FOWNER`): the atimes of
    /// those directories or files changed.
    pub noatime_refused: u64,
    /// `stat` calls made (unreferenced chunks, and entries without a type).
    pub stat_calls: u64,
    /// Peak heap bytes of the chunk table.
    pub table_bytes: u64,
    /// Seconds per step.
    pub seconds: Timing,
    /// An S3 datastore's bucket against its local cache (`survey --s3-bucket`); `garbage`
    /// above is then the local cache's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3: Option<bucket::BucketSurvey>,
}

impl SurveyReport {
    /// True when the survey saw the whole store: every index read, every chunk directory
    /// its own.
    pub fn complete(&self) -> bool {
        self.unreadable_indexes.is_empty() && self.odd_chunk_dirs.is_empty()
    }
}

/// Surveys the datastore at `root`.
pub fn survey(root: &Path, opts: &SurveyOptions) -> Result<SurveyReport> {
    survey_with(root, opts, None)
}

/// Surveys the S3 datastore whose local cache is `root` and whose objects are in `bucket`
/// (PBS 4): the local survey, then the bucket's listing against it.
pub fn survey_s3(
    root: &Path,
    opts: &SurveyOptions,
    bucket: &dyn crate::bucket::Bucket,
) -> Result<SurveyReport> {
    survey_with(root, opts, Some(bucket))
}

fn survey_with(
    root: &Path,
    opts: &SurveyOptions,
    bucket: Option<&dyn crate::bucket::Bucket>,
) -> Result<SurveyReport> {
    let started = Instant::now();
    let root = std::path::absolute(root)?;
    crate::datastore::access::chunk_dir(&root)?;
    let chosen = layout::choose(&root, &opts.layout)?;
    let layout = chosen.layout;
    let mut report = SurveyReport {
        store: root.display().to_string(),
        filesystem: chosen.filesystem.clone(),
        layout: chosen.description.clone(),
        layout_assumed: chosen.assumed,
        surveyed_at: opts.now,
        cutoff: opts.now - opts.cutoff_minutes as i64 * 60,
        ..Default::default()
    };
    let skip = odd_dirs(&root, &mut report)?;

    // 1. The listing.
    let bar = crate::progress::Bar::new(
        opts.progress,
        CHUNK_SUBDIRS as u64,
        "listing chunk directories {wide_bar} {pos}/{len} {rate} ETA {eta}",
    );
    let mut table = ChunkTable::list(&root, &layout, &skip, &mut |p| {
        if p % 256 == 255 {
            bar.set_position(p as u64 + 1);
        }
    })?;
    bar.finish_and_clear();
    report.seconds.listing = started.elapsed().as_secs_f64();
    summarize_layout(&mut report, &table, &skip, &layout);

    let writer = match &opts.out {
        Some(dest) => Some(start_file(
            dest,
            &report,
            &chosen,
            &table,
            bucket.map(|b| b.describe()),
        )?),
        None => None,
    };
    let writer = RefCell::new(writer);

    // 2. The indexes, in phase-1 order.
    let indexes_started = Instant::now();
    let not_listed = mark_references(&root, &mut table, &writer, &mut report, opts.progress)?;
    report.referenced = table.referenced() + report.referenced_not_listed;
    report.unreferenced = table.len() as u64 - table.referenced();
    report.referenced_blocks = distinct_blocks(&table, &layout, true);
    report.seconds.indexes = indexes_started.elapsed().as_secs_f64();

    // 3. The unreferenced chunks' atimes and sizes.
    let stats_started = Instant::now();
    let mut writer = writer.into_inner();
    if let Some(w) = &mut writer {
        w.end_walk()?;
    }
    let mut atimes = Vec::new();
    stat_unreferenced(
        &root,
        &table,
        opts,
        &mut report,
        writer.as_mut(),
        bucket.is_some().then_some(&mut atimes),
    )?;
    report.seconds.stats = stats_started.elapsed().as_secs_f64();

    // 4. An S3 datastore's bucket.
    if let Some(bucket) = bucket {
        atimes.sort_unstable_by_key(|a| a.0);
        let local = bucket::Local {
            table: &table,
            not_listed: &not_listed,
            atimes: &atimes,
            referenced: report.referenced,
            cutoff: report.cutoff,
            chunks_dir: &root.join(CHUNK_DIR),
        };
        report.s3 = Some(bucket::survey_bucket(
            bucket,
            &local,
            writer.as_mut(),
            opts.progress,
        )?);
    }
    if let Some(w) = writer {
        w.finish()?;
    }
    report.noatime_refused += table.noatime_refused;
    report.stat_calls += table.stats;
    report.other = table.other;
    report.missing_chunk_dirs = table.missing_dirs.len() as u64;
    report.table_bytes = table.heap_bytes();
    report.seconds.total = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The chunk directories that are not the store's own, into the report; which to skip.
fn odd_dirs(root: &Path, report: &mut SurveyReport) -> Result<Vec<bool>> {
    let odd = crate::store::layout::odd_chunk_dirs(root)
        .with_context(|| format!("listing {}", root.join(CHUNK_DIR).display()))?;
    let mut skip = vec![false; CHUNK_SUBDIRS];
    for o in &odd {
        if let Some(p) = o
            .path
            .strip_prefix(CHUNK_DIR)
            .and_then(|p| p.strip_prefix('/'))
            .and_then(|p| u16::from_str_radix(p, 16).ok())
        {
            skip[p as usize] = true;
        }
    }
    report.odd_chunk_dirs = odd
        .into_iter()
        .map(|o| Problem {
            path: root.join(&o.path).display().to_string(),
            problem: o.what,
        })
        .collect();
    Ok(skip)
}

/// On ZFS, where a disk model finds its blocks ([`crate::model::place`]): the pool's sector
/// (an `ashift` of 12 taken, as a pool made for today's disks has: no property tells it) and
/// the extent of the blocks' first copies: the filesystem's used bytes less one copy of the
/// metadata, which ZFS writes twice (the chunk directories' micro ZAPs, a sector each, and the
/// dnodes of `objects`, 512 bytes compressed to about a quarter).
fn zfs_placement(
    store: &str,
    chosen: &layout::Chosen,
    chunks: u64,
) -> Option<crate::model::place::Placement> {
    const SECTOR: u64 = 4096;
    if !matches!(chosen.layout, crate::model::Layout::Zfs { .. }) || chosen.filesystem != "zfs" {
        return None;
    }
    let used = crate::fsutil::filesystem_used_bytes(Path::new(store)).ok()?;
    let dirs = CHUNK_SUBDIRS as u64;
    let metadata = dirs * SECTOR + (dirs + chunks) * 128;
    Some(crate::model::place::Placement {
        zfs_sector: SECTOR,
        zfs_allocated: used.saturating_sub(metadata).max(metadata),
        ..Default::default()
    })
}

/// The survey file at `dest`, its header and chunks written.
fn start_file(
    dest: &Path,
    report: &SurveyReport,
    chosen: &layout::Chosen,
    table: &ChunkTable,
    bucket: Option<String>,
) -> Result<file::SurveyWriter> {
    if table.len() >= u32::MAX as usize {
        anyhow::bail!(
            "{} chunks: a survey file holds at most 2^32 - 1",
            table.len()
        );
    }
    let header = file::FileHeader {
        store: report.store.clone(),
        filesystem: chosen.filesystem.clone(),
        layout: chosen.layout,
        surveyed_at: report.surveyed_at,
        chunk_dirs: CHUNK_SUBDIRS as u32,
        filesystem_bytes: crate::fsutil::filesystem_bytes(Path::new(&report.store)).unwrap_or(0),
        layout_assumed: chosen.assumed,
        placement: chosen
            .placement
            .or_else(|| zfs_placement(&report.store, chosen, table.len() as u64)),
        block_bytes: chosen.block_bytes,
        bucket,
    };
    let mut w = file::SurveyWriter::create(dest, &header)?;
    let counts: Vec<u32> = table.dirs.iter().map(|d| d.chunks).collect();
    let order = (0..CHUNK_SUBDIRS as u32).flat_map(|p| table.readdir_order(p as u16));
    w.chunks(
        &counts,
        &table.dir_inos,
        order.map(|i| (table.digest(i), table.ino(i))),
    )
    .with_context(|| format!("writing {}", dest.display()))?;
    Ok(w)
}

/// Phase 1's walk over the index files: their references marked in `table` (and written to
/// the survey file), what was read into the report; returns the chunks referenced but not
/// listed.
fn mark_references(
    root: &Path,
    table: &mut ChunkTable,
    writer: &RefCell<Option<file::SurveyWriter>>,
    report: &mut SurveyReport,
    progress: bool,
) -> Result<hashbrown::HashSet<Digest>> {
    let bar = crate::progress::Bar::new(
        progress,
        0,
        "reading index files {wide_bar} {pos}/{len} {rate} ETA {eta}",
    );
    let tree = tree::SurveyTree::new(root, writer);
    let mut marker = Marker {
        root,
        table,
        writer,
        not_listed: hashbrown::HashSet::new(),
        references: 0,
        index_files: 0,
        index_data_bytes: 0,
        unreadable: Vec::new(),
        bar: &bar,
    };
    let mut unreadable = Vec::new();
    crate::store::walk_indexes(
        &tree,
        root,
        &mut |p| match IndexFile::open(p) {
            Ok(i) => Ok(Some(i)),
            Err(e) if e.is_not_found() => Err(e),
            Err(e) => {
                unreadable.push(Problem {
                    path: p.display().to_string(),
                    problem: e.kind.to_string(),
                });
                Ok(None)
            }
        },
        &mut marker,
    )
    .with_context(|| format!("walking the index files of {}", root.display()))?;
    bar.finish_and_clear();
    unreadable.append(&mut marker.unreadable);
    report.unreadable_indexes = unreadable;
    report.gc_would_stop = !report.complete();
    report.index_files = marker.index_files;
    report.references = marker.references;
    report.index_data_bytes = marker.index_data_bytes;
    report.referenced_not_listed = marker.not_listed.len() as u64;
    report.noatime_refused += tree.noatime_refused();
    Ok(marker.not_listed)
}

/// The layout figures of the report from the listing.
fn summarize_layout(
    report: &mut SurveyReport,
    table: &ChunkTable,
    skip: &[bool],
    layout: &crate::model::Layout,
) {
    report.chunks = table.len() as u64;
    report.chunk_dirs =
        skip.iter().filter(|s| !**s).count() as u64 - table.missing_dirs.len() as u64;
    let listed: Vec<(usize, &table::DirSummary)> = table
        .dirs
        .iter()
        .enumerate()
        .filter(|(p, _)| !skip[*p] && table.missing_dirs.binary_search(&(*p as u16)).is_err())
        .collect();
    let mut counts: Vec<u64> = listed.iter().map(|(_, d)| d.chunks as u64).collect();
    report.chunks_per_dir = Spread {
        min: counts.iter().copied().min().unwrap_or(0),
        max: counts.iter().copied().max().unwrap_or(0),
        median: table::median(&mut counts),
    };
    report.blocks = listed.iter().map(|(_, d)| d.blocks as u64).sum();
    let with_chunks: Vec<_> = listed.iter().filter(|(_, d)| d.chunks > 0).collect();
    report.blocks_per_chunk = if with_chunks.is_empty() {
        0.0
    } else {
        with_chunks
            .iter()
            .map(|(_, d)| d.blocks as f64 / d.chunks as f64)
            .sum::<f64>()
            / with_chunks.len() as f64
    };
    let mut gaps: Vec<u64> = with_chunks
        .iter()
        .filter(|(_, d)| d.chunks > 1)
        .map(|(_, d)| d.median_gap)
        .collect();
    report.median_inode_gap = table::median(&mut gaps);
    // Thread 001's line: the directory whose chunk count is the median of the directories
    // with chunks (the first such, by prefix).
    let mut nonempty: Vec<u64> = with_chunks.iter().map(|(_, d)| d.chunks as u64).collect();
    let typical = table::median(&mut nonempty);
    if let Some((p, d)) = with_chunks.iter().find(|(_, d)| d.chunks as u64 == typical) {
        report.median_dir = MedianDir {
            dir: format!(
                "{CHUNK_DIR}/{}",
                crate::datastore::paths::chunk_subdir_name(*p as u16)
            ),
            chunks: d.chunks as u64,
            blocks: d.blocks as u64,
            median_gap: d.median_gap,
        };
    }
    report.store_blocks = distinct_blocks(table, layout, false);
}

/// Distinct metadata blocks of the table's chunks (the referenced ones only, if
/// `referenced`), counted in a bitmap over the blocks' range ([`layout::dense_block`]): a
/// bit a block, an eighth of a byte for each of the at most 32 inodes a block holds, where
/// a sorted copy of the blocks would take 8 bytes a chunk.
fn distinct_blocks(table: &ChunkTable, layout: &crate::model::Layout, referenced: bool) -> u64 {
    let chosen = |i: &usize| !referenced || table.is_referenced(*i);
    let max = (0..table.len())
        .filter(chosen)
        .map(|i| layout::dense_block(layout, table.ino(i)))
        .max();
    let Some(max) = max else {
        return 0;
    };
    if max / 8 > (64 << 20).max(table.len() as u64 * 2) {
        // Sparse inode numbers (object ids far beyond the store's count): a set of blocks.
        let set: hashbrown::HashSet<u64> = (0..table.len())
            .filter(chosen)
            .map(|i| layout::dense_block(layout, table.ino(i)))
            .collect();
        return set.len() as u64;
    }
    let mut bits = vec![0u64; (max / 64 + 1) as usize];
    let mut n = 0;
    for i in (0..table.len()).filter(chosen) {
        let b = layout::dense_block(layout, table.ino(i));
        let (w, m) = ((b / 64) as usize, 1u64 << (b % 64));
        if bits[w] & m == 0 {
            bits[w] |= m;
            n += 1;
        }
    }
    n
}

/// Marks the references of each index file phase 1 reaches.
struct Marker<'a> {
    root: &'a Path,
    table: &'a mut ChunkTable,
    writer: &'a RefCell<Option<file::SurveyWriter>>,
    not_listed: hashbrown::HashSet<Digest>,
    references: u64,
    index_files: u64,
    index_data_bytes: u64,
    unreadable: Vec<Problem>,
    bar: &'a crate::progress::Bar,
}

impl Phase1Visitor for Marker<'_> {
    fn start(&mut self, scanned: usize) {
        self.bar.set_length(scanned as u64);
    }

    fn index(&mut self, path: &Path, index: IndexFile, _origin: IndexOrigin) -> Result<()> {
        self.index_files += 1;
        self.bar.inc(1);
        let mut writer = self.writer.borrow_mut();
        let (table, not_listed) = (&mut *self.table, &mut self.not_listed);
        let mut references = 0u64;
        let read = index.for_each_digest(|d| -> Result<(), crate::datastore::error::FormatError> {
            references += 1;
            let r = match table.find(&d) {
                Some(i) => {
                    table.mark(i);
                    file::ChunkRef::Listed(table.number(i) as u32)
                }
                None => {
                    not_listed.insert(d);
                    file::ChunkRef::NotListed(d)
                }
            };
            if let Some(w) = writer.as_mut() {
                w.reference(r);
            }
            Ok(())
        });
        self.references += references;
        let rel = path.strip_prefix(self.root).unwrap_or(path);
        match read {
            Ok(()) => {
                self.index_data_bytes += index.index_bytes();
                if let Some(w) = writer.as_mut() {
                    w.end_index(
                        rel,
                        index.kind() == IndexKind::Fixed,
                        index.index_bytes(),
                        index.chunk_size().unwrap_or(0),
                    )?;
                }
            }
            Err(e) => {
                // Found bad while streamed: its references so far stay marked (that only
                // keeps chunks), and it is reported.
                if let Some(w) = writer.as_mut() {
                    w.drop_index();
                }
                self.unreadable.push(Problem {
                    path: path.display().to_string(),
                    problem: e.kind.to_string(),
                });
            }
        }
        Ok(())
    }
}

/// A `stat` of each unreferenced chunk, directory by directory in readdir order: what a GC
/// now would remove, keep as pending, or find gone; each one's atime into `atimes` (by table
/// index) when given.
fn stat_unreferenced(
    root: &Path,
    table: &ChunkTable,
    opts: &SurveyOptions,
    report: &mut SurveyReport,
    mut writer: Option<&mut file::SurveyWriter>,
    mut atimes: Option<&mut Vec<(u32, i64)>>,
) -> Result<()> {
    let chunks_dir = root.join(CHUNK_DIR);
    let bar = crate::progress::Bar::new(
        opts.progress,
        report.unreferenced,
        "stat of unreferenced chunks {wide_bar} {pos}/{len} {rate} ETA {eta}",
    );
    let cutoff = report.cutoff;
    for p in 0..CHUNK_SUBDIRS as u32 {
        let p = p as u16;
        let r = table.dir(p);
        if r.clone().all(|i| table.is_referenced(i)) {
            continue;
        }
        let name = crate::datastore::paths::chunk_subdir_name(p);
        let dir_path = || chunks_dir.join(&name);
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(
            dir_path().as_os_str(),
        ))?;
        let (fd, noatime) = match crate::fsutil::open_dir_noatime(libc::AT_FDCWD, &c) {
            Ok(x) => x,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                // The whole directory went: its chunks vanished.
                report.vanished += r.filter(|&i| !table.is_referenced(i)).count() as u64;
                continue;
            }
            Err(e) => anyhow::bail!("opening {}: {e}", dir_path().display()),
        };
        report.noatime_refused += u64::from(!noatime);
        for i in table.readdir_order(p) {
            if table.is_referenced(i) {
                continue;
            }
            bar.inc(1);
            report.stat_calls += 1;
            let hex = table.digest(i).hex_bytes();
            let st = match stat_at(&fd, &hex) {
                Ok(Some(st)) => st,
                Ok(None) => {
                    report.vanished += 1;
                    continue;
                }
                Err(e) => anyhow::bail!(
                    "stat of {}/{}: {e}",
                    dir_path().display(),
                    String::from_utf8_lossy(&hex)
                ),
            };
            if let Some(a) = atimes.as_deref_mut() {
                a.push((i as u32, st.0));
            }
            let g = &mut report.garbage;
            g.chunks += 1;
            g.bytes += st.1;
            if st.0 < cutoff {
                g.removable += 1;
            } else {
                g.pending += 1;
            }
            if let Some(w) = writer.as_deref_mut() {
                w.unreferenced(&file::Unreferenced {
                    number: table.number(i),
                    atime: st.0,
                    size: st.1,
                })?;
            }
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// Atime (seconds) and size of `name` in the directory `dir`, not following a link;
/// `None` when it is gone.
fn stat_at(dir: &std::os::fd::OwnedFd, name: &[u8]) -> std::io::Result<Option<(i64, u64)>> {
    use std::os::fd::AsRawFd;
    Ok(crate::fsutil::lstat_at(dir.as_raw_fd(), name)?.map(|st| (st.st_atime, st.st_size as u64)))
}
