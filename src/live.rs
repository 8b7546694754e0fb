//! A running mount's live counters: requests, errors and latency per operation, counted on
//! the request path with relaxed atomic additions (no lock, no allocation), read by `ctl
//! stats`, `chunkscope top` and the Prometheus endpoint.
//!
//! Latencies go into log-linear histograms: 8 buckets per power of two (a bucket spans at
//! most 12.5% of its values), from 1 ns to 2^40 ns (18 minutes; longer ones count in the
//! last). A snapshot carries the non-empty buckets only; percentiles are read from them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::trace::phases::{GcView, Watch};
use crate::trace::{Observer, Op, RawRecord};

/// Sub-buckets per power of two (log2).
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// Powers of two covered.
const OCTAVES: usize = 40;
/// Buckets of a histogram: the first `SUB` hold 0..SUB exactly, then `SUB` per octave.
pub const BUCKETS: usize = SUB + (OCTAVES - SUB_BITS as usize) * SUB;

/// The bucket of `v` ns.
#[inline]
pub fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // v in [2^e, 2^(e+1)), e >= SUB_BITS
    let sub = ((v >> (e - SUB_BITS)) as usize) & (SUB - 1);
    let i = SUB + (e - SUB_BITS) as usize * SUB + sub;
    i.min(BUCKETS - 1)
}

/// The lowest value of bucket `i`.
pub fn bucket_low(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let e = (i - SUB) / SUB + SUB_BITS as usize;
    let sub = ((i - SUB) % SUB) as u64;
    (1u64 << e) + (sub << (e - SUB_BITS as usize))
}

/// The lowest value of the bucket after `i` (its exclusive upper bound).
pub fn bucket_high(i: usize) -> u64 {
    if i + 1 >= BUCKETS {
        u64::MAX
    } else {
        bucket_low(i + 1)
    }
}

/// A latency histogram updated by any thread.
pub struct Latency {
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }
}

impl Latency {
    /// Counts one value of `ns`.
    #[inline]
    pub fn record(&self, ns: u64) {
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(ns, Ordering::Relaxed);
    }

    /// The non-empty buckets now.
    pub fn snapshot(&self) -> Histogram {
        Histogram {
            sum: self.sum.load(Ordering::Relaxed),
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .filter_map(|(i, b)| {
                    let n = b.load(Ordering::Relaxed);
                    (n > 0).then_some((i as u16, n))
                })
                .collect(),
        }
    }
}

/// A histogram's non-empty buckets: (bucket, count), in bucket order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// (bucket index, values counted there), ascending.
    pub buckets: Vec<(u16, u64)>,
    /// The values' sum, ns.
    #[serde(default)]
    pub sum: u64,
}

impl Histogram {
    /// Values counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.1).sum()
    }

    /// The value at quantile `q` (0..=1): the upper bound of the bucket it falls in (an
    /// overestimate by at most 12.5%), `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for &(i, c) in &self.buckets {
            seen += c;
            if seen >= rank {
                return Some(bucket_high(i as usize).saturating_sub(1));
            }
        }
        None
    }

    /// Values below `le` ns or equal to it, exactly when `le + 1` is a bucket's lower bound
    /// (a power of two is: the Prometheus buckets are).
    pub fn at_most(&self, le: u64) -> u64 {
        self.buckets
            .iter()
            .filter(|&&(i, _)| bucket_high(i as usize) <= le.saturating_add(1))
            .map(|b| b.1)
            .sum()
    }

    /// What was counted since `earlier` (a snapshot of the same histogram taken before).
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let mut before = earlier.buckets.iter().peekable();
        let buckets = self
            .buckets
            .iter()
            .filter_map(|&(i, n)| {
                while before.next_if(|b| b.0 < i).is_some() {}
                let old = before.next_if(|b| b.0 == i).map_or(0, |b| b.1);
                (n > old).then_some((i, n - old))
            })
            .collect();
        Histogram {
            buckets,
            sum: self.sum.saturating_sub(earlier.sum),
        }
    }

    /// Both histograms' values.
    pub fn merged(&self, other: &Histogram) -> Histogram {
        let mut all: Vec<(u16, u64)> = self.buckets.iter().chain(&other.buckets).copied().collect();
        all.sort_unstable_by_key(|x| x.0);
        let mut buckets: Vec<(u16, u64)> = Vec::with_capacity(all.len());
        for (i, n) in all {
            match buckets.last_mut() {
                Some(last) if last.0 == i => last.1 += n,
                _ => buckets.push((i, n)),
            }
        }
        Histogram {
            buckets,
            sum: self.sum + other.sum,
        }
    }
}

/// One operation's counters.
#[derive(Default)]
struct OpCounters {
    requests: AtomicU64,
    errors: AtomicU64,
    injected: AtomicU64,
    real: Latency,
    modeled: Latency,
}

/// Requests, errors and latencies of every operation of a mount, and what its GC is doing.
pub struct Live {
    start: Instant,
    ops: Box<[OpCounters]>,
    gc: Mutex<GcView>,
    /// Index files in the store when it was mounted (`u64::MAX` until counted).
    index_files: AtomicU64,
}

impl Default for Live {
    fn default() -> Self {
        Live::new()
    }
}

/// One operation's counters, as a snapshot carries them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpSnapshot {
    /// The operation's name (`lookup`, `setattr` ...).
    pub op: String,
    /// Requests answered.
    pub requests: u64,
    /// Of them, answered with an error (injected ones included).
    pub errors: u64,
    /// Of them, errors a fault rule injected.
    pub injected_errors: u64,
    /// Real time from its arrival to its answer by the store, ns (a held reply's wait is not
    /// in it).
    pub real_ns: Histogram,
    /// What the cost model charged, ns (empty without a model).
    pub modeled_ns: Histogram,
}

impl Live {
    /// Counters at zero, the clock starting now.
    pub fn new() -> Live {
        let n = Op::ALL
            .iter()
            .map(|&o| o as usize)
            .filter(|&o| o < 100)
            .max();
        Live {
            start: Instant::now(),
            ops: (0..=n.unwrap_or(0))
                .map(|_| OpCounters::default())
                .collect(),
            gc: Mutex::new(GcView::default()),
            index_files: AtomicU64::new(u64::MAX),
        }
    }

    /// The GC's phase and progress now.
    pub fn gc(&self) -> GcView {
        self.gc.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes in a marker's text (`ctl mark`, a chunkscope GC's phase edges).
    pub fn marker(&self, text: &str) {
        let now = self.now_ns();
        self.gc
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .marker(text, now);
    }

    /// Index files in the store when it was mounted, once counted.
    pub fn index_files(&self) -> Option<u64> {
        Some(self.index_files.load(Ordering::Relaxed)).filter(|&n| n != u64::MAX)
    }

    /// Counts the index files of the datastore at `store` (its backing directory: the walk
    /// is not traced), on a thread of its own, for the progress of phase 1.
    pub fn count_index_files(self: &Arc<Live>, store: std::path::PathBuf) {
        let live = self.clone();
        let _ = std::thread::Builder::new()
            .name("index-count".into())
            .spawn(move || {
                let fs = crate::datastore::snapshots::Fs;
                if let Ok(found) = crate::datastore::snapshots::list_index_files(&fs, &store) {
                    live.index_files
                        .store(found.len() as u64, Ordering::Relaxed);
                }
            });
    }

    /// The observer that infers the GC's phases from the trace writer's records.
    pub fn observer(self: &Arc<Live>) -> Box<dyn Observer> {
        Box::new(GcObserver {
            watch: Watch::default(),
            live: self.clone(),
            published: Instant::now(),
        })
    }

    /// Nanoseconds since these counters started (a mount without a trace times requests on
    /// this clock).
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Counts a request of `op` answered with `errno` (`injected` if a fault rule chose it),
    /// after `real_ns`, charged `modeled_ns` by the model.
    #[inline]
    pub fn record(&self, op: Op, errno: i32, injected: bool, real_ns: u64, modeled_ns: u64) {
        let Some(c) = self.ops.get(op as usize) else {
            return;
        };
        c.requests.fetch_add(1, Ordering::Relaxed);
        if errno != 0 {
            c.errors.fetch_add(1, Ordering::Relaxed);
            if injected {
                c.injected.fetch_add(1, Ordering::Relaxed);
            }
        }
        c.real.record(real_ns);
        if modeled_ns > 0 {
            c.modeled.record(modeled_ns);
        }
    }

    /// The operations that had requests, with their counters now.
    pub fn snapshot(&self) -> Vec<OpSnapshot> {
        Op::ALL
            .iter()
            .filter_map(|&op| {
                let c = self.ops.get(op as usize)?;
                let requests = c.requests.load(Ordering::Relaxed);
                (requests > 0).then(|| OpSnapshot {
                    op: op.name().to_string(),
                    requests,
                    errors: c.errors.load(Ordering::Relaxed),
                    injected_errors: c.injected.load(Ordering::Relaxed),
                    real_ns: c.real.snapshot(),
                    modeled_ns: c.modeled.snapshot(),
                })
            })
            .collect()
    }
}

/// How often the observer publishes what it inferred.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);

struct GcObserver {
    watch: Watch,
    live: Arc<Live>,
    published: Instant,
}

impl Observer for GcObserver {
    fn record(&mut self, r: &RawRecord) {
        self.watch.push(r);
    }

    fn drained(&mut self) {
        if self.published.elapsed() < PUBLISH_EVERY {
            return;
        }
        self.published = Instant::now();
        let mut view = self.live.gc.lock().unwrap_or_else(|p| p.into_inner());
        self.watch.update(&mut view);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_narrow() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(7), 7);
        let mut last = 0;
        for v in (0..1u64 << 20).chain((20..40).flat_map(|e| [(1u64 << e) - 1, 1 << e])) {
            let i = bucket_of(v);
            assert!(i >= last, "monotonic at {v}");
            last = i;
            assert!(
                bucket_low(i) <= v && v < bucket_high(i),
                "{v} in bucket {i}"
            );
            let width = bucket_high(i) - bucket_low(i);
            assert!(width * 8 <= bucket_low(i).max(8), "{v}: width {width}");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_high(BUCKETS - 1), u64::MAX);
        for i in 0..BUCKETS - 1 {
            assert_eq!(bucket_of(bucket_low(i)), i);
        }
    }

    #[test]
    fn quantiles_and_counts_at_powers_of_two() {
        let l = Latency::default();
        for v in 1..=1000u64 {
            l.record(v * 1000); // 1 µs .. 1 ms
        }
        let h = l.snapshot();
        assert_eq!(h.count(), 1000);
        let p50 = h.quantile(0.5).unwrap();
        assert!((500_000..=562_500).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99).unwrap();
        assert!((990_000..=1_114_000).contains(&p99), "{p99}");
        assert_eq!(h.quantile(1.0), Some(bucket_high(bucket_of(1_000_000)) - 1));
        // 2^19 - 1 ns: values 1,000 .. 524,000 lie below 524,288.
        assert_eq!(h.at_most((1 << 19) - 1), 524);
        assert_eq!(h.at_most(u64::MAX), 1000);
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn a_later_snapshot_less_an_earlier_is_what_came_between() {
        let l = Latency::default();
        l.record(10);
        l.record(5000);
        let before = l.snapshot();
        l.record(5000);
        l.record(90_000);
        let d = l.snapshot().since(&before);
        assert_eq!(d.count(), 2);
        assert_eq!(d.sum, 95_000);
        assert_eq!(d.merged(&before).sum, 100_010);
        assert_eq!(d.merged(&before).count(), 4);
        assert_eq!(
            d.buckets,
            vec![(bucket_of(5000) as u16, 1), (bucket_of(90_000) as u16, 1)]
        );
    }

    #[test]
    fn counts_requests_and_errors_per_operation() {
        let live = Live::new();
        live.record(Op::Lookup, 0, false, 1000, 0);
        live.record(Op::Lookup, libc::ENOENT, false, 2000, 0);
        live.record(Op::Setattr, libc::EIO, true, 3000, 8_000_000);
        let s = live.snapshot();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].op.as_str(), s[0].requests, s[0].errors),
            ("lookup", 2, 1)
        );
        assert_eq!(s[1].injected_errors, 1);
        assert_eq!(s[1].modeled_ns.count(), 1);
        assert_eq!(s[0].modeled_ns.count(), 0);
    }
}
