//! Trace exports for other tools (pandas, DuckDB, spreadsheets): the only place that knows
//! these formats.
//!
//! Columns, in this order, for both CSV (with a header row) and JSON Lines (one object per
//! record, same keys):
//!
//! | column | meaning |
//! |---|---|
//! | `seq` | request number, in arrival order |
//! | `start_ns` | start, ns after the trace's start time (header `start_epoch_ns`) |
//! | `duration_ns` | real time to answer, ns |
//! | `op` | operation name (`lookup`, `getattr`, `setattr`, `readdir`, `unlink`, `marker`, ...) |
//! | `errno` | 0 on success, else the positive errno returned |
//! | `pid` | requesting process |
//! | `ino` | backing inode number (0: none) |
//! | `parent` | backing inode of the parent directory (0: none) |
//! | `arg` | op-specific: entries returned, atime set (ns since epoch), bytes |
//! | `injected_ns` | delay injected by a fault rule or the disk model, ns |
//! | `modeled_ns` | metadata cost computed by the model, ns |
//! | `flags` | bit set: 1 atime set, 2 mtime set, 4 other attribute, 8 shadow, 16 injected error |
//! | `name` | chunk digest (64 hex) or other name or marker text; empty when none (bytes that are not UTF-8 as `\xNN`, control characters escaped) |
//! | `offset` | a read's or write's file offset (0 for other requests) |
//!
//! `parquet` writes the same columns typed, and two more: `time` (`TIMESTAMP(NANOS)`, UTC:
//! `start_epoch_ns + start_ns`) after `start_ns`, and `errno` as its name (`ENOENT`; null on
//! success) instead of its number. Integers are unsigned (`pid` and `flags` 32-bit, the rest
//! 64-bit); `op`, `errno`, `pid`, `flags` and `name` are dictionary-encoded; `name` is null
//! when there is none. The file's key-value metadata carries the trace's header
//! (`chunkscope.store`, `chunkscope.start_epoch_ns`, `chunkscope.options`, ...). Rows go in
//! row groups of [`PARQUET_ROW_GROUP`] records, so the export holds one group in memory
//! whatever the trace's size.
//!
//! `chrome` writes the Chrome trace-event JSON (`{"traceEvents": [...]}`), which
//! ui.perfetto.dev and chrome://tracing open as a timeline: one complete event ("X") per
//! request on a track per requesting thread, the columns above as its args, and each marker as
//! a global instant event. Listing entries (`dirent`) are left out: the listing's event carries
//! their count. The whole file is loaded by the viewer, so it suits traces of up to a few
//! million records; slice bigger ones first (`trace export --format csv` and a filter).

use std::io::{self, Write};

use super::format::{Name, Record};

/// The CSV columns (and the JSON Lines keys), in order.
pub const COLUMNS: [&str; 14] = [
    "seq",
    "start_ns",
    "duration_ns",
    "op",
    "errno",
    "pid",
    "ino",
    "parent",
    "arg",
    "injected_ns",
    "modeled_ns",
    "flags",
    "name",
    "offset",
];

fn name_text(n: &Name) -> String {
    match n {
        Name::None => String::new(),
        Name::Digest(d) => d.to_hex(),
        Name::Text(s) => s.to_string(),
    }
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Format {
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object per record and line.
    Jsonl,
    /// Chrome trace-event JSON, for ui.perfetto.dev or chrome://tracing.
    #[cfg_attr(feature = "cli", value(alias = "perfetto"))]
    Chrome,
    /// Apache Parquet: typed columns, zstd, for DuckDB, pandas and Spark.
    #[cfg(feature = "parquet")]
    Parquet,
}

/// Writes records in `format`; the CSV header comes first.
pub struct Exporter<W: Write> {
    out: W,
    format: Format,
    /// Chrome: events written so far (for the separators).
    events: u64,
}

impl<W: Write> Exporter<W> {
    /// An exporter writing `format` to `out` (the CSV header, the Chrome preamble, now).
    pub fn new(mut out: W, format: Format) -> io::Result<Self> {
        match format {
            Format::Csv => writeln!(out, "{}", COLUMNS.join(","))?,
            Format::Jsonl => {}
            #[cfg(feature = "parquet")]
            Format::Parquet => {
                return Err(io::Error::other(
                    "Parquet is written by ParquetExporter, not Exporter",
                ))
            }
            Format::Chrome => {
                write!(out, "{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[")?;
                write!(
                    out,
                    "\n{{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{{\"name\":\"chunkscope mount\"}}}}"
                )?;
            }
        }
        Ok(Exporter {
            out,
            format,
            events: 1,
        })
    }

    /// Writes one record.
    pub fn write(&mut self, r: &Record) -> io::Result<()> {
        let name = name_text(&r.name);
        match self.format {
            Format::Chrome => {
                let op = r.op_name();
                if op == "dirent" {
                    return Ok(());
                }
                let ts = r.start_ns as f64 / 1000.0;
                let v = if op == "marker" {
                    serde_json::json!({
                        "ph": "i", "s": "g", "pid": 1, "tid": r.pid, "ts": ts,
                        "name": name, "args": {"seq": r.seq},
                    })
                } else {
                    let mut args = serde_json::json!({
                        "seq": r.seq, "ino": r.ino, "parent": r.parent, "arg": r.arg,
                        "errno": r.errno, "modeled_ns": r.modeled_ns,
                        "injected_ns": r.injected_ns, "flags": r.flags,
                    });
                    if !name.is_empty() {
                        args["name"] = name.into();
                    }
                    if r.offset != 0 {
                        args["offset"] = r.offset.into();
                    }
                    serde_json::json!({
                        "ph": "X", "pid": 1, "tid": r.pid, "ts": ts,
                        "dur": r.duration_ns as f64 / 1000.0, "name": op, "cat": "fuse",
                        "args": args,
                    })
                };
                self.events += 1;
                write!(self.out, ",\n{v}")
            }
            Format::Csv => {
                let quoted = crate::table::csv_field(&name);
                writeln!(
                    self.out,
                    "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    r.seq,
                    r.start_ns,
                    r.duration_ns,
                    r.op_name(),
                    r.errno,
                    r.pid,
                    r.ino,
                    r.parent,
                    r.arg,
                    r.injected_ns,
                    r.modeled_ns,
                    r.flags,
                    quoted,
                    r.offset
                )
            }
            #[cfg(feature = "parquet")]
            Format::Parquet => unreachable!("Exporter::new refuses Parquet"),
            Format::Jsonl => {
                let v = serde_json::json!({
                    "seq": r.seq, "start_ns": r.start_ns, "duration_ns": r.duration_ns,
                    "op": r.op_name(), "errno": r.errno, "pid": r.pid, "ino": r.ino,
                    "parent": r.parent, "arg": r.arg, "injected_ns": r.injected_ns,
                    "modeled_ns": r.modeled_ns, "flags": r.flags, "name": name,
                    "offset": r.offset,
                });
                writeln!(self.out, "{v}")
            }
        }
    }

    /// Ends the output (the Chrome trace's closing bracket) and gives the writer back.
    pub fn finish(mut self) -> io::Result<W> {
        if self.format == Format::Chrome {
            writeln!(self.out, "\n]}}")?;
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Records per row group of a Parquet export.
#[cfg(feature = "parquet")]
pub const PARQUET_ROW_GROUP: usize = 1 << 18;

/// The Parquet export's columns (see the module documentation).
#[cfg(feature = "parquet")]
pub const PARQUET_COLUMNS: [crate::columnar::Column; 15] = {
    use crate::columnar::Column;
    [
        Column::u64("seq"),
        Column::u64("start_ns"),
        Column::timestamp_ns("time"),
        Column::u64("duration_ns"),
        Column::text("op").dictionary(),
        Column::text("errno").nullable().dictionary(),
        Column::u32("pid").dictionary(),
        Column::u64("ino"),
        Column::u64("parent"),
        Column::u64("arg"),
        Column::u64("injected_ns"),
        Column::u64("modeled_ns"),
        Column::u32("flags").dictionary(),
        Column::text("name").nullable().dictionary(),
        Column::u64("offset"),
    ]
};

/// Writes records as Parquet, a row group at a time.
#[cfg(feature = "parquet")]
pub struct ParquetExporter<W: Write + Send> {
    writer: crate::columnar::ParquetWriter<W>,
    group: crate::columnar::Frame,
    start_epoch_ns: u64,
}

#[cfg(feature = "parquet")]
impl<W: Write + Send> ParquetExporter<W> {
    /// An exporter of the trace described by `meta` to `out`.
    pub fn new(out: W, meta: &super::format::TraceMeta) -> anyhow::Result<Self> {
        let metadata = vec![
            ("chunkscope.version".into(), meta.chunkscope.clone()),
            ("chunkscope.store".into(), meta.store.clone()),
            (
                "chunkscope.start_epoch_ns".into(),
                meta.start_epoch_ns.to_string(),
            ),
            (
                "chunkscope.options".into(),
                serde_json::Value::Object(meta.options.clone()).to_string(),
            ),
        ];
        Ok(ParquetExporter {
            writer: crate::columnar::ParquetWriter::new(out, &PARQUET_COLUMNS, metadata)?,
            group: crate::columnar::Frame::new("trace", &PARQUET_COLUMNS),
            start_epoch_ns: meta.start_epoch_ns,
        })
    }

    /// Adds one record (a full row group is written).
    pub fn write(&mut self, r: &Record) -> anyhow::Result<()> {
        use crate::columnar::Value::{Null, T, U};
        let mut hex = [0u8; 64];
        let shown;
        let name = match &r.name {
            Name::None => Null,
            Name::Digest(d) => {
                hex::encode_to_slice(d.0, &mut hex).expect("64 hex digits for 32 bytes");
                T(std::str::from_utf8(&hex).expect("hex is ASCII"))
            }
            Name::Text(s) => {
                shown = s.shown();
                T(&shown)
            }
        };
        let unknown;
        let errno = match r.errno {
            0 => Null,
            e => match crate::units::ERRNOS.iter().find(|(_, n)| *n == e) {
                Some((s, _)) => T(s),
                None => {
                    unknown = e.to_string();
                    T(&unknown)
                }
            },
        };
        self.group.push(&[
            U(r.seq),
            U(r.start_ns),
            U(self.start_epoch_ns.saturating_add(r.start_ns)),
            U(r.duration_ns),
            T(r.op_name()),
            errno,
            U(u64::from(r.pid)),
            U(r.ino),
            U(r.parent),
            U(r.arg),
            U(r.injected_ns),
            U(r.modeled_ns),
            U(u64::from(r.flags)),
            name,
            U(r.offset),
        ]);
        if self.group.rows() >= PARQUET_ROW_GROUP {
            self.writer.write(&self.group)?;
            self.group.clear();
        }
        Ok(())
    }

    /// Writes the last row group and the footer; gives the output back, flushed.
    pub fn finish(mut self) -> anyhow::Result<W> {
        self.writer.write(&self.group)?;
        let mut out = self.writer.finish()?;
        out.flush()?;
        Ok(out)
    }
}
