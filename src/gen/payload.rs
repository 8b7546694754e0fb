//! Chunk data for a content id: deterministic, unique, and compressible like real data.
//!
//! A compressible chunk is `entropy·len` random bytes followed by zeros, so zstd stores it at
//! about `entropy` of its size (thread 000's store: 4 MiB logical chunks averaged 1.902 MiB on
//! disk, about 0.47). A fraction of chunks is random throughout and is stored uncompressed,
//! so both unencrypted blob kinds occur. Dynamic chunks (pxar, catalog) have log-uniform sizes
//! in `[chunk_size/4, 4·chunk_size]`, the bounds of PBS's chunker around its average.

use super::history::ContentId;
use crate::rng::{hash, unit, SplitMix};

/// How a content's chunk data is made (deterministic per content).
#[derive(Clone, Copy, Debug)]
pub struct PayloadModel {
    /// The generator's seed.
    pub seed: u64,
    /// The fixed chunk size, bytes (dynamic chunks average about this).
    pub chunk_size: u32,
    /// Fraction of a compressible chunk's bytes that are random (the rest are zeros).
    pub entropy: f64,
    /// Fraction of chunks that are all random (stored uncompressed).
    pub incompressible: f64,
}

impl PayloadModel {
    /// Length of the data of `c`.
    pub fn len(&self, c: ContentId) -> usize {
        if !c.is_dynamic() {
            return self.chunk_size as usize;
        }
        let u = unit(hash(&[self.seed, 30, c.0]));
        let min = (self.chunk_size / 4).max(1) as f64;
        (min * 16f64.powf(u)).round() as usize
    }

    /// Writes the data of `c` into `buf` (cleared first).
    pub fn fill(&self, c: ContentId, buf: &mut Vec<u8>) {
        let len = self.len(c);
        buf.clear();
        buf.resize(len, 0);
        if c == ContentId::ZERO {
            return;
        }
        let h = hash(&[self.seed, 31, c.0]);
        let random = if unit(mix_bits(h)) < self.incompressible {
            len
        } else {
            ((len as f64 * self.entropy) as usize).clamp(8.min(len), len)
        };
        SplitMix(h).fill(&mut buf[..random]);
    }
}

fn mix_bits(h: u64) -> u64 {
    crate::rng::mix(h ^ 0x5555_5555_5555_5555)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::blob;

    #[test]
    fn sizes_and_compression() {
        let m = PayloadModel {
            seed: 1,
            chunk_size: 4096,
            entropy: 0.44,
            incompressible: 0.0,
        };
        let mut buf = Vec::new();
        m.fill(ContentId::ZERO, &mut buf);
        assert!(buf.len() == 4096 && buf.iter().all(|&b| b == 0));
        m.fill(ContentId(0x1234_5670), &mut buf);
        let raw = blob::encode(&buf, true);
        let ratio = raw.len() as f64 / buf.len() as f64;
        assert!((0.43..0.47).contains(&ratio), "{ratio}");
        let dynamic = ContentId(0x1234_5671);
        let lens: Vec<usize> = (0..200u64)
            .map(|i| m.len(ContentId(dynamic.0 + (i << 8))))
            .collect();
        assert!(lens.iter().all(|&l| (1024..=16384).contains(&l)));
        assert!(lens.iter().any(|&l| l < 2048) && lens.iter().any(|&l| l > 8192));
        let m = PayloadModel {
            incompressible: 1.0,
            ..m
        };
        m.fill(ContentId(0x1234_5670), &mut buf);
        assert_eq!(blob::encode(&buf, true).len(), 4096 + 12);
    }
}
