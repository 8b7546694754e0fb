//! Traces: one fixed-size record per request, written off the request path.
//!
//! * [`format`](mod@format): the on-disk layout (the specification is that module's doc).
//! * [`writer`]: the writer thread and the request path's [`writer::TraceSink`].
//! * [`reader`]: a streaming reader that tolerates a torn last record.
//! * [`ordered`]: records in request order, listings with their entries.
//! * [`export`]: CSV and JSON Lines, the only place that knows those formats.
//! * [`marker`]: the markers' text; [`phases`]: GC phases inferred where there are none.
//!
//! This layer knows nothing about who produced the records (overlay, GC client, simulator).

pub mod export;
pub mod format;
pub mod marker;
pub mod ordered;
pub mod phases;
pub mod reader;
pub mod writer;

pub use format::{KernelCache, Name, Op, RawRecord, Record, Text, TraceMeta};
pub use marker::Marker;
pub use reader::{RecordView, TraceReader};
pub use writer::{Extra, ListingEntries, Observer, TraceSink, TraceWriter, WriterStats};
