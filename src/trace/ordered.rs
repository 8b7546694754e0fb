//! Records in request order, each listing with its entries.
//!
//! Several worker threads feed the trace writer, so a file holds records a little out of
//! request-number order. [`Ordered`] restores the order with a small reorder buffer (a few
//! records per thread in practice) and attaches to each listing the inode numbers of its
//! `dirent` records, which the writer stores before the listing itself.

use std::collections::BTreeMap;

use anyhow::Result;

use super::{Op, Record, TraceReader};

#[derive(Default)]
struct Slot {
    rec: Option<Record>,
    dirents: Vec<u64>,
}

/// Streams `(record, dirent inodes)` in request-number order; markers included, dirents not.
pub struct Ordered {
    reader: TraceReader,
    pending: BTreeMap<u64, Slot>,
    next: u64,
    done: bool,
    missing: u64,
}

impl Ordered {
    /// Records of `reader`, in request order.
    pub fn new(reader: TraceReader) -> Ordered {
        Ordered {
            reader,
            pending: BTreeMap::new(),
            next: 0,
            done: false,
            missing: 0,
        }
    }

    /// The reader underneath (its header, its torn tail).
    pub fn reader(&self) -> &TraceReader {
        &self.reader
    }

    /// Request numbers that never appeared (a cut trace), known at the end.
    pub fn missing(&self) -> u64 {
        self.missing
    }

    fn take_next(&mut self) -> Option<(Record, Vec<u64>)> {
        self.pending.get(&self.next)?.rec.as_ref()?;
        let slot = self.pending.remove(&self.next).expect("present");
        self.next += 1;
        Some((slot.rec.expect("checked"), slot.dirents))
    }

    /// The next record in request order, with its listing's entries (empty otherwise).
    pub fn next_record(&mut self) -> Result<Option<(Record, Vec<u64>)>> {
        loop {
            if let Some(r) = self.take_next() {
                return Ok(Some(r));
            }
            if self.done {
                // What is left follows a gap: keep its order.
                let Some((&seq, _)) = self.pending.iter().find(|(_, s)| s.rec.is_some()) else {
                    return Ok(None);
                };
                self.missing += seq - self.next;
                self.next = seq;
                continue;
            }
            match self.reader.next_record()? {
                None => self.done = true,
                // The second name of a rename or link: its request is the record that follows.
                Some(rec) if matches!(rec.op(), Some(Op::NewName | Op::OldName)) => {}
                Some(rec) if rec.op() == Some(Op::Dirent) => {
                    self.pending
                        .entry(rec.seq)
                        .or_default()
                        .dirents
                        .push(rec.ino);
                }
                Some(rec) => {
                    if rec.seq < self.next {
                        continue; // a duplicate number; cannot happen with our writer
                    }
                    if rec.seq == self.next && !self.pending.contains_key(&rec.seq) {
                        self.next += 1;
                        return Ok(Some((rec, Vec::new())));
                    }
                    let seq = rec.seq;
                    self.pending.entry(seq).or_default().rec = Some(rec);
                }
            }
        }
    }
}
