//! The counts of an HDR histogram of three significant digits, kept without the histogram's
//! per-value bookkeeping: the analysis records two or three values per trace record, and
//! `Histogram::record` (not inlined, with its resize check, minimum, maximum and total) was a
//! tenth of the pass. The counts use the histogram's own bucket layout (lowest discernible
//! value 1, 2,048 sub-buckets a power of two), so [`HdrCounts::histogram`] gives the very
//! histogram that recording each value would have: the same percentiles, mean, minimum and
//! maximum (the histogram reports those from its buckets).

use hdrhistogram::Histogram;

/// Significant digits kept.
pub(crate) const SIGNIFICANT_DIGITS: u8 = 3;
/// log2 of half the sub-buckets of a bucket: 2 * 10^3 values need 2^11 sub-buckets.
const HALF_MAGNITUDE: u32 = 10;
/// Values below this all land in bucket 0, one sub-bucket each.
const SUB_BUCKET_MASK: u64 = (2 << HALF_MAGNITUDE) - 1;
/// 64 minus the magnitude of the sub-bucket count (unit magnitude 0).
const LEADING_ZERO_BASE: u32 = 64 - (HALF_MAGNITUDE + 1);

/// Counts by histogram index.
#[derive(Clone, Default)]
pub(crate) struct HdrCounts {
    counts: Vec<u64>,
}

/// The histogram index of `v`: its bucket (how many powers of two it is above bucket 0's
/// range) and its sub-bucket, as `Histogram` computes them.
#[inline]
fn index_of(v: u64) -> usize {
    let bucket = LEADING_ZERO_BASE - (v | SUB_BUCKET_MASK).leading_zeros();
    ((bucket as usize) << HALF_MAGNITUDE) + (v >> bucket) as usize
}

/// The lowest value of index `i` (the inverse of [`index_of`]).
fn value_of(i: usize) -> u64 {
    let half = 1usize << HALF_MAGNITUDE;
    if i < 2 * half {
        return i as u64;
    }
    let bucket = (i >> HALF_MAGNITUDE) - 1;
    let sub = (i & (half - 1)) + half;
    (sub as u64) << bucket
}

impl HdrCounts {
    /// Counts `v` once.
    #[inline]
    pub(crate) fn record(&mut self, v: u64) {
        let i = index_of(v);
        if i >= self.counts.len() {
            self.counts.resize((i + 1).next_power_of_two(), 0);
        }
        self.counts[i] += 1;
    }

    /// The histogram of the values counted.
    pub(crate) fn histogram(&self) -> Histogram<u64> {
        let mut h = Histogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits is valid");
        for (i, &n) in self.counts.iter().enumerate().filter(|(_, &n)| n > 0) {
            h.record_n(value_of(i), n).expect("auto-resizing");
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::mix;

    /// Values spread over 60 powers of two (and the edges of buckets), recorded one by one
    /// into a histogram and through the counts: every figure the analysis reports agrees.
    #[test]
    fn gives_the_histogram_of_the_values() {
        let mut direct = Histogram::<u64>::new(SIGNIFICANT_DIGITS).unwrap();
        let mut counts = HdrCounts::default();
        let mut values: Vec<u64> = (0..200_000u64)
            .map(|i| mix(i) >> (mix(i ^ 77) % 64))
            .collect();
        for k in 0..63 {
            values.extend([(1u64 << k) - 1, 1 << k, (1 << k) + 1]);
        }
        values.push(u64::MAX >> 1);
        for &v in &values {
            direct.record(v).unwrap();
            counts.record(v);
        }
        let via = counts.histogram();
        assert_eq!(via.len(), direct.len());
        assert_eq!(via.min(), direct.min());
        assert_eq!(via.max(), direct.max());
        assert_eq!(via.mean(), direct.mean());
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(
                via.value_at_quantile(q),
                direct.value_at_quantile(q),
                "q {q}"
            );
        }
        for &v in values.iter().step_by(97) {
            assert_eq!(value_of(index_of(v)), direct.lowest_equivalent(v), "{v}");
        }
    }
}
