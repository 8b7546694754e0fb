//! Analysis of traces: access order and metadata locality, as numbers.
//!
//! One streaming pass over a trace in request order ([`crate::trace::ordered`]), cut into
//! phases at the trace's markers (`phase1 start strategy=lru` opens "phase1 strategy=lru",
//! the matching `end` closes it). Per phase:
//!
//! * operations: count, errors by errno, rate, real and modelled latency percentiles;
//! * locality of two streams, the atime updates ("touches": setattr setting the atime) and the
//!   chunk lookups (lookups of a digest name that found an inode): the gap |Δino| between
//!   consecutive operations, the fraction on the same metadata block as the previous one,
//!   distinct blocks against the ideal (distinct inodes / inodes per block), directory
//!   switches per 1000 operations;
//! * reuse ([`mrc`]): the exact LRU miss-ratio curve of the digest stream (what PBS's digest
//!   cache would hit at each capacity) and of the metadata-block stream;
//! * write-back: distinct blocks dirtied per transaction group (windows of modelled time when
//!   the trace carries a model, else of real time), against the same touches in inode order;
//! * listings: chunk directories listed, entries per listing, and how far readdir order is
//!   from inode order.
//!
//! Memory grows with distinct inodes and digests, not with the trace's length.

pub mod device;
mod hdr;
mod intmap;
mod locality;
mod phase;
use phase::PhaseAcc;
pub mod mrc;
mod sample;
pub mod tables;

pub(crate) use sample::{Batch, Sample, SampleName, Sampled};
#[cfg(feature = "plot")]
pub mod plot;
pub mod zfs_blocks;

use hashbrown::HashMap;
use serde::Serialize;

use crate::trace::format::flags;
use crate::trace::ordered::Ordered;
use crate::trace::{Marker, Name, Op, Record, TraceReader};
use hdr::HdrCounts;
use intmap::IntMap;
pub use locality::Locality;
use locality::{distinct_blocks, LocalityAcc};
use mrc::{Mrc, ReuseDistances};

/// A phase with the label its series carry.
pub struct Labelled<'a> {
    /// The legend's label.
    pub label: String,
    /// The analysed phase.
    pub phase: &'a Phase,
}

/// PBS's default and maximum digest-cache capacities (`gc-cache-capacity`).
pub const PBS_CACHE_DEFAULT: u64 = 1_048_576;
/// PBS's maximum digest-cache capacity.
pub const PBS_CACHE_MAX: u64 = 8_388_608;

/// How a trace is analysed.
#[derive(Clone, Debug)]
pub struct Options {
    /// Inodes per metadata block (ZFS: 32 dnodes per 16 KiB block).
    pub inodes_per_block: u64,
    /// Bytes per metadata block (for the miss-ratio curves' memory axis).
    pub block_bytes: u64,
    /// Transaction-group length for the write-back figures.
    pub txg_ns: u64,
    /// SHARDS sampling rate for the miss-ratio curves (1: exact).
    pub sample_rate: f64,
    /// Points kept per phase for the access-pattern plot (decimated evenly).
    pub access_points: usize,
    /// Compute the miss-ratio curves (the costliest part of the pass).
    pub mrc: bool,
    /// Prices of S3 requests, for what each phase's requests cost.
    pub s3_prices: Option<S3Prices>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            inodes_per_block: 32,
            block_bytes: 16 << 10,
            txg_ns: 5_000_000_000,
            sample_rate: 1.0,
            access_points: 20_000,
            mrc: true,
            s3_prices: None,
        }
    }
}

/// Latency summary, nanoseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    /// Smallest.
    pub min: u64,
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
}

fn latency(counts: &HdrCounts) -> Latency {
    let h = counts.histogram();
    if h.is_empty() {
        return Latency::default();
    }
    Latency {
        min: h.min(),
        avg: h.mean(),
        p50: h.value_at_quantile(0.5),
        p90: h.value_at_quantile(0.9),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        max: h.max(),
    }
}

/// One operation's figures in a phase.
#[derive(Clone, Debug, Serialize)]
pub struct OpStats {
    /// The operation's name (`lookup`, `setattr`, ...).
    pub op: &'static str,
    /// Requests.
    pub count: u64,
    /// Requests that failed, by errno name.
    pub errors: std::collections::BTreeMap<String, u64>,
    /// Per second of the phase's real duration.
    pub rate: f64,
    /// Latency on the wall clock (what the trace's durations say).
    pub real: Latency,
    /// Latency the model charged.
    pub modeled: Latency,
    /// `real_log2[k]`: operations whose real latency in ns is in [2^(k-1), 2^k) (k = 0: 0 ns).
    pub real_log2: Vec<u64>,
    /// `modeled_log2[k]`: the same for the modelled latency.
    pub modeled_log2: Vec<u64>,
}

/// The log2 bucket of `v`: 0 for 0, else k with 2^(k-1) <= v < 2^k.
#[inline]
pub fn log2_bucket(v: u64) -> usize {
    64 - v.leading_zeros() as usize
}

#[inline]
fn count_log2(h: &mut [u64; 65], v: u64) {
    h[log2_bucket(v)] += 1;
}

/// A log2 histogram without its empty tail.
fn trimmed(h: &[u64]) -> Vec<u64> {
    let n = h.iter().rposition(|&c| c > 0).map_or(0, |i| i + 1);
    h[..n].to_vec()
}

/// Dirty blocks per transaction group.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Writeback {
    /// Which clock groups operations into transaction groups: `modelled` when the trace has modelled costs, else `real`.
    pub clock: &'static str,
    /// Transaction groups with operations.
    pub txgs: u64,
    /// Block writes: each block once per transaction group that dirtied it.
    pub block_writes: u64,
    /// The most blocks one transaction group wrote.
    pub max_per_txg: u64,
    /// The same touches in inode order, with as many touches per transaction group.
    pub inode_order_block_writes: u64,
    /// `block_writes / inode_order_block_writes` (NaN, null in JSON, without touches).
    pub amplification: f64,
    /// Dirty blocks per transaction group, in order.
    pub dirty_per_txg: Vec<u64>,
    /// Start of each transaction group in `dirty_per_txg` on the clock, ns (groups without
    /// operations are left out).
    pub txg_start_ns: Vec<u64>,
}

/// The phase's touches in another order: as recorded, sorted by inode within each index
/// (between the lookups of two index files), or sorted by inode over the whole phase.
#[derive(Clone, Debug, Serialize)]
pub struct WhatIf {
    /// `recorded`, `per-index` (sorted by inode within each index) or `global` (sorted by
    /// inode over the phase).
    pub order: &'static str,
    /// The locality of the touches in that order.
    pub touches: Locality,
    /// The touched blocks, by LRU capacity in blocks.
    pub block_mrc: Mrc,
    /// Block writes with as many touches per transaction group as recorded.
    pub block_writes: u64,
}

/// A point of the access-pattern plot: the operation's position in its phase and its inode.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct AccessPoint {
    /// Position of the operation in its phase (records before it).
    pub at: u64,
    /// Its inode.
    pub ino: u64,
    /// Its operation.
    pub op: &'static str,
    /// Whether it names a chunk directory (`.chunks/XXXX`).
    pub chunk_dir: bool,
}

/// The phase's directory listings (readdir with their dirent records).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Listings {
    /// Listings.
    pub count: u64,
    /// Entries they returned.
    pub entries: u64,
    /// Fraction of consecutive entries in ascending inode order (0.5: random, 1: inode order).
    pub ascending_pairs: f64,
    /// Chunk directories listed with at least 2 entries, and in how many of them no two
    /// entries share a metadata block.
    pub dirs_with_2_or_more: u64,
    /// Of `dirs_with_2_or_more`, those in which no two entries share a metadata block.
    pub dirs_without_shared_blocks: u64,
    /// Entries per chunk directory listed: mean, and distinct blocks per directory: mean.
    pub mean_entries_per_dir: f64,
    /// Distinct metadata blocks per chunk directory listed, mean.
    pub mean_blocks_per_dir: f64,
    /// Median gap between a directory's inode numbers, sorted (thread 001's "median gap").
    pub median_in_dir_gap: u64,
}

/// What an S3 provider charges per 1,000 requests of each kind and per GB-month stored, in
/// the admin's currency (`analyze --s3-prices`): no price is built in, as none is true for
/// every provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct S3Prices {
    /// `ListObjectsV2`.
    pub list: f64,
    /// `DeleteObjects` / `DeleteObject` (free on AWS, not everywhere).
    pub delete: f64,
    /// `PutObject`.
    pub put: f64,
    /// `GetObject`.
    pub get: f64,
    /// `HeadObject` / `HeadBucket`.
    pub head: f64,
    /// Anything else.
    pub other: f64,
    /// A GB (2^30 bytes, as S3 bills) stored for a month.
    pub storage: f64,
}

/// Bytes in a GB as S3 providers bill storage (2^30).
pub const BILLED_GB: f64 = (1u64 << 30) as f64;

impl S3Prices {
    /// `list=0.005,delete=0,put=0.005,get=0.0004,head=0.0004,other=0.005,storage=0.023`:
    /// prices per 1,000 requests, and per GB-month; a kind left out costs nothing.
    pub fn parse(spec: &str) -> anyhow::Result<S3Prices> {
        let mut p = S3Prices::default();
        for part in spec.split(',').filter(|x| !x.trim().is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("'{part}': expected KIND=PRICE"))?;
            let v: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| anyhow::anyhow!("'{part}': a price is a number of 0 or more"))?;
            let slot = match k.trim() {
                "list" => &mut p.list,
                "delete" => &mut p.delete,
                "put" => &mut p.put,
                "get" => &mut p.get,
                "head" => &mut p.head,
                "other" => &mut p.other,
                "storage" => &mut p.storage,
                other => anyhow::bail!(
                    "'{other}': not a kind of request (list, delete, put, get, head, other) \
                     nor storage"
                ),
            };
            *slot = v;
        }
        Ok(p)
    }
}

/// A phase's requests to an S3 bucket (an S3 datastore's GC, recorded by `s3-record`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct S3Requests {
    /// `ListObjectsV2` pages.
    pub list_pages: u64,
    /// Keys those pages returned.
    pub keys_listed: u64,
    /// Bytes of the objects those pages returned (a GC's phase 2 lists the bucket's chunks
    /// once: what the bucket stores of them).
    pub bytes_listed: u64,
    /// `DeleteObjects` (and `DeleteObject`) requests.
    pub delete_requests: u64,
    /// Keys they named.
    pub keys_deleted: u64,
    /// Bytes of the objects they removed, as the listings before them gave their sizes.
    pub bytes_deleted: u64,
    /// `PutObject` requests, and the bytes they sent.
    pub puts: u64,
    /// Bytes the puts sent.
    pub put_bytes: u64,
    /// `GetObject` requests.
    pub gets: u64,
    /// Bytes the gets received.
    pub get_bytes: u64,
    /// `HeadObject` and `HeadBucket` requests.
    pub heads: u64,
    /// Any other request.
    pub other: u64,
    /// Requests answered with a status of 400 or more.
    pub failed: u64,
    /// Of all, the ones a fault rule answered or cut.
    pub injected: u64,
    /// Time spent waiting on the server, summed over the requests, ns.
    pub busy_ns: u64,
    /// What the requests cost at `--s3-prices` (none without).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// What storing `bytes_listed` costs a month at `--s3-prices`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_cost: Option<f64>,
    /// What the deletes save a month at `--s3-prices` (`bytes_deleted` no longer stored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_saved: Option<f64>,
}

impl S3Requests {
    /// Every request.
    pub fn requests(&self) -> u64 {
        self.list_pages + self.delete_requests + self.puts + self.gets + self.heads + self.other
    }

    /// What the requests cost at `p`.
    pub fn cost_at(&self, p: &S3Prices) -> f64 {
        (self.list_pages as f64 * p.list
            + self.delete_requests as f64 * p.delete
            + self.puts as f64 * p.put
            + self.gets as f64 * p.get
            + self.heads as f64 * p.head
            + self.other as f64 * p.other)
            / 1000.0
    }

    /// What storing `bytes` costs a month at `p`.
    pub fn storage_at(bytes: u64, p: &S3Prices) -> f64 {
        bytes as f64 / BILLED_GB * p.storage
    }

    /// Counts one S3 request's record.
    fn count(&mut self, rec: &sample::Sample, op: Op) {
        let (arg, bytes) = (rec.arg, rec.offset);
        match op {
            Op::S3List => {
                self.list_pages += 1;
                self.keys_listed += arg;
                self.bytes_listed += bytes;
            }
            Op::S3Delete => {
                self.delete_requests += 1;
                self.keys_deleted += arg;
                self.bytes_deleted += bytes;
            }
            Op::S3Put => {
                self.puts += 1;
                self.put_bytes += arg;
            }
            Op::S3Get => {
                self.gets += 1;
                self.get_bytes += arg;
            }
            Op::S3Head => self.heads += 1,
            _ => self.other += 1,
        }
        self.failed += (rec.parent >= 400) as u64;
        self.injected += (rec.flags & flags::INJECTED_ERROR != 0) as u64;
        self.busy_ns += rec.duration_ns;
    }
}

/// One section of a trace (a GC phase between its markers, or what came before or between).
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// The section's name (`phase1 strategy=lru`, ...).
    pub name: String,
    /// Records in it.
    pub records: u64,
    /// Its wall duration, ns: from its first request to its last, summed over the times the
    /// trace entered it.
    pub real_ns: u64,
    /// What the model charged its requests, ns.
    pub modeled_ns: u64,
    /// Per operation.
    pub ops: Vec<OpStats>,
    /// Locality of the touches (atime setattrs).
    pub touches: Locality,
    /// Locality of the lookups.
    pub lookups: Locality,
    /// The digests looked up, by LRU capacity in digests.
    pub digest_mrc: Mrc,
    /// The metadata blocks of every inode operation, by LRU capacity in blocks.
    pub block_mrc: Mrc,
    /// Write-back per transaction group.
    pub writeback: Writeback,
    /// The directory listings.
    pub listings: Listings,
    /// Its requests to an S3 bucket, when the trace has them (`s3-record`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Requests>,
    /// The touches as recorded, per index in inode order, and globally in inode order.
    pub what_if: Vec<WhatIf>,
    /// Index files opened in the phase (lookups of `*.fidx` / `*.didx`).
    pub indexes: u64,
    /// A decimated sample of the metadata operations, for the access-pattern plot.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub access: Vec<AccessPoint>,
    /// The sample's stride: one operation in this many is in `access`.
    #[serde(skip)]
    pub access_stride: u64,
    /// The metadata operations the sample was taken of.
    #[serde(skip)]
    pub access_of: u64,
}

/// The section of the records outside every marked phase.
pub const OUTSIDE_PHASES: &str = "(outside phases)";

impl Phase {
    /// Whether this is the section outside the marked phases with nothing of a GC in it (no
    /// touch, no chunk lookup, no listing, no S3 request: the mount's own requests before the first marker,
    /// say), which the tables leave out when the trace has marked phases.
    pub fn is_background(&self) -> bool {
        self.name == OUTSIDE_PHASES
            && self.touches.count == 0
            && self.lookups.count == 0
            && self.listings.count == 0
            && self.s3.is_none()
    }

    /// Requests of operation `op` (by name) in the phase.
    pub fn op_count(&self, op: &str) -> u64 {
        self.ops
            .iter()
            .filter(|o| o.op == op)
            .map(|o| o.count)
            .sum()
    }
}

/// The analysis of a trace.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The trace's path.
    pub trace: String,
    /// The store it was recorded on (its header).
    pub store: String,
    /// Inodes per metadata block used.
    pub inodes_per_block: u64,
    /// Bytes per metadata block used.
    pub block_bytes: u64,
    /// The sections, in order.
    pub phases: Vec<Phase>,
    /// Request numbers that never appeared (a cut trace).
    pub missing_requests: u64,
    /// Bytes of a torn tail the reader skipped, if any.
    pub truncated_bytes: Option<u64>,
    /// The kernel's caching on the mount (a mount's trace only): with a TTL or READDIRPLUS,
    /// the lookups and stats the kernel answered itself are not counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_cache: Option<crate::trace::KernelCache>,
    /// The trace has no phase markers: its phases were inferred from its requests
    /// ([`crate::trace::phases`]), in sections named `phase1 (inferred)` ...
    pub inferred_phases: bool,
}

impl Report {
    /// The phases a table shows: all but a background section beside marked phases (see
    /// [`Phase::is_background`]); JSON and CSV keep every section.
    pub fn shown_phases(&self) -> impl Iterator<Item = &Phase> {
        let marked = self.phases.iter().any(|p| p.name != OUTSIDE_PHASES);
        self.phases
            .iter()
            .filter(move |p| !(marked && p.is_background()))
    }
}

/// Fills in each point's memory with `bytes(capacity, distinct keys)`.
fn with_bytes(mut m: Mrc, bytes: impl Fn(u64, u64) -> u64) -> Mrc {
    for p in &mut m.points {
        p.bytes = bytes(p.capacity, m.distinct);
    }
    m
}

/// Memory of PBS's phase-1 digest cache (`pbs-tools` LruCache<[u8; 32], ()>) of `capacity`
/// holding up to `distinct` digests, by the format document's computation (3.9): a hash table
/// reserved up front, `next_power_of_two(capacity * 8 / 7)` buckets of 32 + 8 bytes plus a
/// control byte, and a 64-byte heap node per cached digest.
pub fn pbs_digest_cache_bytes(capacity: u64, distinct: u64) -> u64 {
    let buckets = if capacity < 8 {
        if capacity < 4 {
            4
        } else {
            8
        }
    } else {
        (capacity * 8 / 7).next_power_of_two()
    };
    buckets * 41 + 64 * capacity.min(distinct)
}

/// Operations on an inode's metadata that the access-pattern plot shows.
fn charged_metadata(op: Op) -> bool {
    matches!(
        op,
        Op::Lookup | Op::Getattr | Op::Setattr | Op::Unlink | Op::Readdir | Op::Readdirplus
    )
}

/// The analysis of one trace.
pub struct Analyzer {
    o: Options,
    phases: Vec<PhaseAcc>,
    current: Option<usize>,
    names: HashMap<String, usize>,
    parent_of: IntMap<u64>,
    modeled_clock: u64,
}

impl Analyzer {
    /// An analysis with options `o`, before any record.
    pub fn new(o: Options) -> Analyzer {
        Analyzer {
            o,
            phases: Vec::new(),
            current: None,
            names: HashMap::new(),
            parent_of: IntMap::default(),
            modeled_clock: 0,
        }
    }

    fn phase(&mut self, name: &str) -> usize {
        if let Some(&i) = self.names.get(name) {
            return i;
        }
        self.phases.push(PhaseAcc::new(name.to_string(), &self.o));
        self.names.insert(name.to_string(), self.phases.len() - 1);
        self.phases.len() - 1
    }

    /// Asks the CPU for the table slots that [`Self::push_sample`] will touch for `s`, a few
    /// samples ahead of it: the maps of inodes outgrow the cache, and a miss per map and
    /// record is what bounded the pass.
    #[inline]
    pub(crate) fn prefetch(&self, s: &Sample) {
        if s.ino == 0 {
            return;
        }
        let (lookup, setattr) = (s.op == Op::Lookup as u16, s.op == Op::Setattr as u16);
        if lookup || setattr {
            self.parent_of.prefetch(s.ino);
        }
        let Some(i) = self.current else {
            return;
        };
        let p = &self.phases[i];
        if setattr {
            p.touches.inodes.prefetch(s.ino);
        }
        if lookup && s.name == SampleName::Digest {
            p.lookups.inodes.prefetch(s.ino);
        }
        if setattr || s.op == Op::Unlink as u16 {
            p.dirty.prefetch(s.ino / self.o.inodes_per_block.max(1));
        }
    }

    /// Adds one record (in request order) with its listing's entries.
    pub fn push(&mut self, rec: &Record, dirents: &[u64]) {
        let marker = match &rec.name {
            Name::Text(t) => t.as_str().unwrap_or(""),
            _ => "",
        };
        self.push_sample(&Sample::of(rec), dirents, marker);
    }

    /// [`Self::push`] for a record already reduced to what the analysis reads; `marker` is a
    /// marker's text.
    pub(crate) fn push_sample(&mut self, rec: &Sample, dirents: &[u64], marker: &str) {
        let Some(op) = Op::from_u16(rec.op) else {
            return;
        };
        if op == Op::Marker {
            self.enter_section(marker);
            return;
        }
        let i = self.current_phase();
        if op == Op::Lookup && rec.ino != 0 {
            self.parent_of.insert(rec.ino, rec.parent);
        }
        self.modeled_clock += rec.modeled_ns;
        let clock = if self.modeled_clock > 0 {
            self.modeled_clock
        } else {
            rec.start_ns
        };
        let touch = op == Op::Setattr
            && rec.flags & flags::SET_ATIME != 0
            && rec.errno == 0
            && rec.ino != 0;
        let parent = if touch {
            self.parent_of.get(rec.ino).unwrap_or(0)
        } else {
            0
        };
        let p = &mut self.phases[i];
        p.count_request(rec);
        if op.is_s3() {
            p.s3.get_or_insert_with(Default::default).count(rec, op);
            return;
        }
        p.note_locality(op, rec, touch.then_some(parent), &self.o);
        p.note_write_back(op, rec, touch, clock, &self.o);
        if matches!(op, Op::Readdir | Op::Readdirplus) && rec.errno == 0 {
            p.note_listing(rec.ino, dirents, &self.o);
        }
    }

    /// A marker: the run of the current section ends; the records that follow belong to the
    /// section it opens (none for a marker that opens no section).
    fn enter_section(&mut self, marker: &str) {
        if let Some(i) = self.current {
            self.phases[i].end_run();
        }
        self.current = Marker::decode(marker).section().map(|n| self.phase(&n));
    }

    /// The section the next record belongs to: records before any marker are outside the
    /// phases.
    #[inline]
    fn current_phase(&mut self) -> usize {
        match self.current {
            Some(i) => i,
            None => {
                let i = self.phase(OUTSIDE_PHASES);
                self.current = Some(i);
                i
            }
        }
    }

    /// The phases, analysed, once every record was seen.
    pub fn finish(self) -> Vec<Phase> {
        let o = self.o;
        self.phases.into_iter().map(|p| p.finish(&o)).collect()
    }
}

/// Analyses the trace at `path`. Reading and decoding run on a second thread, handing over
/// batches of records, so the pass costs the slower of the two rather than their sum.
pub fn analyze(path: &std::path::Path, o: Options) -> anyhow::Result<Report> {
    const BATCH: usize = 4096;
    // Without markers (a real PBS's GC), the phases come from the requests: one more pass.
    let inferred = crate::trace::phases::infer_file(path)?;
    let reader = TraceReader::open(path)?;
    let store = reader.meta().store.clone();
    let kernel_cache = reader.meta().kernel_cache();
    let mut a = Analyzer::new(o.clone());
    let inferred_phases = inferred.as_ref().is_some_and(|b| !b.is_empty());
    let mut edges = inferred.unwrap_or_default().into_iter().peekable();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(8);
    // Emptied batches go back to the reader: no fresh pages per batch.
    let (back_tx, back_rx) = std::sync::mpsc::channel::<Batch>();
    let (missing, truncated) = std::thread::scope(|scope| {
        let reading = scope.spawn(move || -> anyhow::Result<(u64, Option<u64>)> {
            let mut records = Ordered::<Sampled>::new(reader);
            let mut batch = Batch::default();
            while let Some((rec, dirents)) = records.next_record()? {
                while let Some(edge) = edges.next_if(|e| e.seq <= rec.seq) {
                    batch.push(Sampled::marker(edge.seq, &edge.marker.encode()), &[]);
                }
                batch.push(rec, &dirents);
                if batch.len() == BATCH {
                    let next = back_rx.try_recv().unwrap_or_default();
                    if tx.send(std::mem::replace(&mut batch, next)).is_err() {
                        break;
                    }
                }
            }
            if !batch.samples.is_empty() {
                let _ = tx.send(batch);
            }
            Ok((records.missing(), records.reader().truncated_bytes()))
        });
        for mut batch in rx {
            batch.feed(&mut a);
            batch.clear();
            let _ = back_tx.send(batch);
        }
        reading.join().expect("the trace reader thread panicked")
    })?;
    let phases = a.finish();
    Ok(Report {
        trace: path.display().to_string(),
        store,
        inodes_per_block: o.inodes_per_block,
        block_bytes: o.block_bytes,
        phases,
        missing_requests: missing,
        truncated_bytes: truncated,
        kernel_cache,
        inferred_phases,
    })
}

#[cfg(test)]
mod tests;
