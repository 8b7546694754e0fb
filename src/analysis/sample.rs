//! What the analysis reads of each record, and the batches that carry records from the
//! reading thread to the analysing one.

use crate::trace::{Name, Op, Record};

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
    Other,
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
    pub(super) fn push(&mut self, rec: &Record, dirents: &[u64]) {
        let mut s = Sample::of(rec);
        if !dirents.is_empty() {
            s.extra = (self.dirents.len() as u32, dirents.len() as u32);
            self.dirents.extend_from_slice(dirents);
        } else if let (Some(Op::Marker), Name::Text(t)) = (rec.op(), &rec.name) {
            s.extra = (self.markers.len() as u32, t.len() as u32);
            self.markers.push_str(t);
        }
        self.samples.push(s);
    }

    pub(super) fn clear(&mut self) {
        self.samples.clear();
        self.dirents.clear();
        self.markers.clear();
    }

    pub(super) fn feed(&self, a: &mut Analyzer) {
        for s in &self.samples {
            let (at, n) = (s.extra.0 as usize, s.extra.1 as usize);
            if s.op == Op::Marker as u16 {
                a.push_sample(s, &[], &self.markers[at..at + n]);
            } else {
                a.push_sample(s, &self.dirents[at..at + n], "");
            }
        }
    }
}

impl Sample {
    /// The sample of `rec`, without its listing's entries or its marker's text.
    pub(crate) fn of(rec: &Record) -> Sample {
        let (name, digest_key) = match &rec.name {
            Name::None => (SampleName::None, 0),
            Name::Digest(d) => (
                SampleName::Digest,
                u64::from_le_bytes(d.0[8..16].try_into().expect("8")),
            ),
            Name::Text(t) => {
                let index = t.ends_with(".fidx") || t.ends_with(".didx");
                let kind = if index {
                    SampleName::Index
                } else {
                    SampleName::Other
                };
                (kind, 0)
            }
        };
        Sample {
            start_ns: rec.start_ns,
            duration_ns: rec.duration_ns,
            ino: rec.ino,
            parent: rec.parent,
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
