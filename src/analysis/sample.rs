//! What the analysis reads of each record, and the batches that carry records from the
//! reading thread to the analysing one.

use std::sync::Arc;

use crate::trace::ordered::FromView;
use crate::trace::{Name, Op, Record, RecordView, Text};

use super::Analyzer;

/// What the analyzer needs of a record, decoded on the reading thread: plain integers, so a
/// batch crosses to the analysing thread without the names' shared strings (whose reference
/// counts would bounce between the two cores).
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    pub start_ns: u64,
    pub duration_ns: u64,
    pub ino: u64,
    pub parent: u64,
    /// The record's `arg` (an S3 request's keys or bytes).
    pub arg: u64,
    /// The record's `offset` (an S3 request's bytes).
    pub offset: u64,
    pub modeled_ns: u64,
    /// Bytes 8..16 of a digest name (the miss-ratio curves' key), 0 without a digest.
    pub digest_key: u64,
    pub errno: i32,
    pub op: u16,
    pub flags: u8,
    pub name: SampleName,
    /// Where a listing's entries or a marker's text are in its [`Batch`]: start and length.
    pub extra: (u32, u32),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum SampleName {
    #[default]
    None,
    Digest,
    /// An index file's name (`.fidx`, `.didx`): a GC reading it starts a new index.
    Index,
    /// A chunk directory's name (four hex digits).
    ChunkDir,
    Other,
}

/// What the reading thread keeps of a record, decoded straight from its slot: its sample,
/// and a marker's text (the only string the analysis reads).
pub(crate) struct Sampled {
    /// The record's request number.
    pub seq: u64,
    pub sample: Sample,
    pub marker: Option<Arc<str>>,
}

impl FromView for Sampled {
    #[inline]
    fn from_view(v: &RecordView<'_>) -> Sampled {
        let (name, digest_key) = match (v.digest(), v.text()) {
            (Some(d), _) => (SampleName::Digest, digest_key(d)),
            (None, Some(t)) => (text_kind(t), 0),
            (None, None) => (SampleName::None, 0),
        };
        let op = v.op();
        Sampled {
            seq: v.seq(),
            sample: Sample {
                start_ns: v.start_ns(),
                duration_ns: v.duration_ns(),
                ino: v.ino(),
                parent: v.parent(),
                arg: v.arg(),
                offset: v.offset(),
                modeled_ns: v.modeled_ns(),
                digest_key,
                errno: v.errno(),
                op,
                flags: v.flags(),
                name,
                extra: (0, 0),
            },
            marker: if op == Op::Marker as u16 {
                v.text().map(|t| Arc::from(&*t.shown()))
            } else {
                None
            },
        }
    }
}

/// The miss-ratio curves' key of a digest: its bytes 8..16.
#[inline]
fn digest_key(d: &[u8; 32]) -> u64 {
    u64::from_le_bytes(d[8..16].try_into().expect("8"))
}

/// What a name that is not a digest is to the analysis.
#[inline]
fn text_kind(t: &Text) -> SampleName {
    let t = t.as_bytes();
    if t.ends_with(b".fidx") || t.ends_with(b".didx") {
        SampleName::Index
    } else if t.len() == 4 && t.iter().all(u8::is_ascii_hexdigit) {
        SampleName::ChunkDir
    } else {
        SampleName::Other
    }
}

/// Records handed from the reading thread to the analysing one, with the entries of their
/// listings and the texts of their markers side by side (so a sample holds no pointer).
#[derive(Default)]
pub(crate) struct Batch {
    pub(super) samples: Vec<Sample>,
    dirents: Vec<u64>,
    markers: String,
}

impl Batch {
    #[inline]
    pub(super) fn push(&mut self, rec: Sampled, dirents: &[u64]) {
        let mut s = rec.sample;
        if !dirents.is_empty() {
            s.extra = (self.dirents.len() as u32, dirents.len() as u32);
            self.dirents.extend_from_slice(dirents);
        } else if let Some(t) = rec.marker {
            s.extra = (self.markers.len() as u32, t.len() as u32);
            self.markers.push_str(&t);
        }
        self.samples.push(s);
    }

    /// Samples held.
    pub(super) fn len(&self) -> usize {
        self.samples.len()
    }

    pub(super) fn clear(&mut self) {
        self.samples.clear();
        self.dirents.clear();
        self.markers.clear();
    }

    pub(super) fn feed(&self, a: &mut Analyzer) {
        /// How far ahead the maps' slots are prefetched: enough misses in flight to hide
        /// the memory's latency, few enough that the lines are still there when used.
        const AHEAD: usize = 16;
        for (i, s) in self.samples.iter().enumerate() {
            if let Some(next) = self.samples.get(i + AHEAD) {
                a.prefetch(next);
            }
            let (at, n) = (s.extra.0 as usize, s.extra.1 as usize);
            if s.op == Op::Marker as u16 {
                a.push_sample(s, &[], &self.markers[at..at + n]);
            } else {
                a.push_sample(s, &self.dirents[at..at + n], "");
            }
        }
    }
}

impl Sampled {
    /// A marker with `text` (an inferred phase's edge), numbered `seq`.
    pub(crate) fn marker(seq: u64, text: &str) -> Sampled {
        Sampled {
            seq,
            sample: Sample {
                op: Op::Marker as u16,
                ..Sample::default()
            },
            marker: Some(text.into()),
        }
    }
}

impl Sample {
    /// The sample of `rec`, without its listing's entries or its marker's text.
    pub(crate) fn of(rec: &Record) -> Sample {
        let (name, digest_key) = match &rec.name {
            Name::None => (SampleName::None, 0),
            Name::Digest(d) => (SampleName::Digest, digest_key(&d.0)),
            Name::Text(t) => (text_kind(t), 0),
        };
        Sample {
            start_ns: rec.start_ns,
            duration_ns: rec.duration_ns,
            ino: rec.ino,
            parent: rec.parent,
            arg: rec.arg,
            offset: rec.offset,
            modeled_ns: rec.modeled_ns,
            digest_key,
            errno: rec.errno,
            op: rec.op,
            flags: rec.flags,
            name,
            extra: (0, 0),
        }
    }
}
