//! Records in request order, each listing with its entries.
//!
//! Several worker threads feed the trace writer, so a file holds records a little out of
//! request-number order. [`Ordered`] restores the order with a small reorder buffer (a few
//! records per thread in practice) and attaches to each listing the inode numbers of its
//! `dirent` records, which the writer stores before the listing itself.

use std::collections::BTreeMap;

use anyhow::Result;

use super::{Op, Record, RecordView, TraceReader};

/// The widest gap in request numbers a trace may have and still be whole but cut: the
/// requests in flight when it was cut (the writer's channel holds 16,384 records) and far
/// fewer in practice.
const MAX_GAP: u64 = 1 << 20;

/// What [`Ordered`] hands out for each record: the whole [`Record`], or what a consumer
/// keeps of it, decoded straight from the slot.
pub trait FromView {
    /// The item for `view`.
    fn from_view(view: &RecordView<'_>) -> Self;
}

impl FromView for Record {
    fn from_view(view: &RecordView<'_>) -> Record {
        view.to_record()
    }
}

struct Slot<T> {
    rec: Option<T>,
    dirents: Vec<u64>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            rec: None,
            dirents: Vec::new(),
        }
    }
}

/// Streams `(record, dirent inodes)` in request-number order; markers included, dirents not.
/// `T` is what is kept of each record (the whole [`Record`] unless the consumer reads less).
pub struct Ordered<T = Record> {
    reader: TraceReader,
    pending: BTreeMap<u64, Slot<T>>,
    next: u64,
    done: bool,
    missing: u64,
}

impl<T: FromView> Ordered<T> {
    /// Records of `reader`, in request order.
    pub fn new(reader: TraceReader) -> Ordered<T> {
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

    fn take_next(&mut self) -> Option<(T, Vec<u64>)> {
        self.pending.get(&self.next)?.rec.as_ref()?;
        let slot = self.pending.remove(&self.next).expect("present");
        self.next += 1;
        Some((slot.rec.expect("checked"), slot.dirents))
    }

    /// The next record in request order, with its listing's entries (empty otherwise).
    pub fn next_record(&mut self) -> Result<Option<(T, Vec<u64>)>> {
        loop {
            if !self.pending.is_empty() {
                if let Some(r) = self.take_next() {
                    return Ok(Some(r));
                }
            }
            if self.done {
                // What is left follows a gap: keep its order. A cut trace leaves gaps of the
                // requests in flight when it was cut; one wider than any reorder window is a
                // damaged request number (a plain version-1 trace has no checksum).
                let Some((&seq, _)) = self.pending.iter().find(|(_, s)| s.rec.is_some()) else {
                    return Ok(None);
                };
                if seq - self.next > MAX_GAP {
                    anyhow::bail!(
                        "{}: the trace is damaged: request number {seq} follows {} (a jump of \
                         {}, more than a cut trace leaves); no record was left out silently",
                        self.reader.path().display(),
                        self.next.wrapping_sub(1),
                        seq - self.next
                    );
                }
                self.missing += seq - self.next;
                self.next = seq;
                continue;
            }
            let Some(view) = self.reader.next_view()? else {
                self.done = true;
                continue;
            };
            let (op, seq) = (view.op(), view.seq());
            if op == Op::NewName as u16 || op == Op::OldName as u16 {
                // The second name of a rename or link: its request is the record that follows.
            } else if op == Op::Dirent as u16 {
                let ino = view.ino();
                self.pending.entry(seq).or_default().dirents.push(ino);
            } else if seq < self.next {
                // Every request has one record: a number already passed is damage.
                anyhow::bail!(
                    "{}: the trace is damaged: a record has request number {seq}, which came \
                     before (the next expected is {}); no record was left out silently",
                    self.reader.path().display(),
                    self.next
                );
            } else if seq == self.next && !self.pending.contains_key(&seq) {
                let rec = T::from_view(&view);
                self.next += 1;
                return Ok(Some((rec, Vec::new())));
            } else {
                let rec = T::from_view(&view);
                self.pending.entry(seq).or_default().rec = Some(rec);
            }
        }
    }
}
