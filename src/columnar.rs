//! Tables of typed columns, written as CSV or as Parquet: the analysis's tables
//! (`analyze --csv`, `--parquet`) and the trace export (`trace export --format parquet`)
//! share them, so a column has one name and one type in both files.
//!
//! A [`Frame`] holds rows column by column (integers as `i64`, text in one byte buffer), so
//! a row costs no allocation once the buffers have grown. Parquet (with the `parquet`
//! feature) uses the parquet crate's column writers directly, without Arrow: integers are
//! INT64/INT32 with their signedness, text is UTF-8 `BYTE_ARRAY` (dictionary-encoded where
//! the column asks for it), times are `TIMESTAMP(NANOS)`, every page zstd-compressed.

use std::io::{self, Write};

use crate::table::csv_field;

/// What a column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// Unsigned 64-bit integer (Parquet INT64, `INTEGER(64, false)`).
    UInt64,
    /// Unsigned 32-bit integer (Parquet INT32, `INTEGER(32, false)`).
    UInt32,
    /// Signed 64-bit integer.
    Int64,
    /// A double.
    Float64,
    /// UTF-8 text.
    Text,
    /// ns since the Unix epoch, UTC (Parquet `TIMESTAMP(NANOS, true)`; CSV: the integer).
    TimestampNs,
}

/// A column of a table: its name, type, whether it may be empty, and whether Parquet should
/// dictionary-encode it (few distinct values: operation names, errnos).
#[derive(Clone, Copy, Debug)]
pub struct Column {
    /// Its header (CSV) or field name (Parquet).
    pub name: &'static str,
    /// What it holds.
    pub ty: Type,
    /// Whether a row may leave it empty.
    pub nullable: bool,
    /// Whether Parquet dictionary-encodes it.
    pub dictionary: bool,
}

impl Column {
    const fn new(name: &'static str, ty: Type) -> Column {
        Column {
            name,
            ty,
            nullable: false,
            dictionary: false,
        }
    }
    /// A required [`Type::UInt64`] column.
    pub const fn u64(name: &'static str) -> Column {
        Column::new(name, Type::UInt64)
    }
    /// A required [`Type::UInt32`] column.
    pub const fn u32(name: &'static str) -> Column {
        Column::new(name, Type::UInt32)
    }
    /// A required [`Type::Int64`] column.
    pub const fn i64(name: &'static str) -> Column {
        Column::new(name, Type::Int64)
    }
    /// A required [`Type::Float64`] column.
    pub const fn f64(name: &'static str) -> Column {
        Column::new(name, Type::Float64)
    }
    /// A required [`Type::Text`] column.
    pub const fn text(name: &'static str) -> Column {
        Column::new(name, Type::Text)
    }
    /// A required [`Type::TimestampNs`] column.
    pub const fn timestamp_ns(name: &'static str) -> Column {
        Column::new(name, Type::TimestampNs)
    }
    /// The column may hold [`Value::Null`] (Parquet OPTIONAL; an empty CSV field).
    pub const fn nullable(mut self) -> Column {
        self.nullable = true;
        self
    }
    /// Parquet dictionary-encodes the column.
    pub const fn dictionary(mut self) -> Column {
        self.dictionary = true;
        self
    }
}

/// One cell, as [`Frame::push`] takes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// For unsigned and timestamp columns.
    U(u64),
    /// For [`Type::Int64`].
    I(i64),
    /// For [`Type::Float64`].
    F(f64),
    /// For [`Type::Text`].
    T(&'a str),
    /// None, in a nullable column.
    Null,
}

#[derive(Debug)]
enum Data {
    /// Integers of any width and timestamps (unsigned ones as their bit pattern).
    Int(Vec<i64>),
    Float(Vec<f64>),
    /// Values end to end, and where each ends.
    Text {
        bytes: Vec<u8>,
        ends: Vec<usize>,
    },
}

impl Data {
    fn clear(&mut self) {
        match self {
            Data::Int(v) => v.clear(),
            Data::Float(v) => v.clear(),
            Data::Text { bytes, ends } => {
                bytes.clear();
                ends.clear();
            }
        }
    }
}

/// Rows of a fixed set of columns, stored column by column.
#[derive(Debug)]
pub struct Frame {
    name: &'static str,
    columns: &'static [Column],
    data: Vec<Data>,
    /// Per nullable column: 1 where a row has a value, 0 where it is null (Parquet's
    /// definition levels); empty for a required column.
    defined: Vec<Vec<i16>>,
    rows: usize,
}

impl Frame {
    /// An empty table named `name` (its file's stem).
    pub fn new(name: &'static str, columns: &'static [Column]) -> Frame {
        let data = columns
            .iter()
            .map(|c| match c.ty {
                Type::Float64 => Data::Float(Vec::new()),
                Type::Text => Data::Text {
                    bytes: Vec::new(),
                    ends: Vec::new(),
                },
                _ => Data::Int(Vec::new()),
            })
            .collect();
        Frame {
            name,
            columns,
            data,
            defined: columns.iter().map(|_| Vec::new()).collect(),
            rows: 0,
        }
    }

    /// Its name, the stem of its file.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its columns.
    pub fn columns(&self) -> &'static [Column] {
        self.columns
    }

    /// Rows pushed since it was made or cleared.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Adds a row, one value per column in order. A value of the wrong kind for its column,
    /// a null in a required column or a wrong count is a bug of the caller: it panics.
    pub fn push(&mut self, row: &[Value]) {
        assert_eq!(
            row.len(),
            self.columns.len(),
            "{}: a row of {} values for {} columns",
            self.name,
            row.len(),
            self.columns.len()
        );
        for (i, (c, v)) in self.columns.iter().zip(row).enumerate() {
            if c.nullable {
                self.defined[i].push(i16::from(*v != Value::Null));
            }
            match (&mut self.data[i], c.ty, *v) {
                (_, _, Value::Null) if c.nullable => {}
                (Data::Int(d), Type::UInt64 | Type::TimestampNs, Value::U(x)) => d.push(x as i64),
                (Data::Int(d), Type::UInt32, Value::U(x)) if x <= u64::from(u32::MAX) => {
                    d.push(x as i64)
                }
                (Data::Int(d), Type::Int64, Value::I(x)) => d.push(x),
                (Data::Float(d), _, Value::F(x)) => d.push(x),
                (Data::Text { bytes, ends }, _, Value::T(s)) => {
                    bytes.extend_from_slice(s.as_bytes());
                    ends.push(bytes.len());
                }
                (_, ty, v) => panic!("{}.{}: {v:?} in a {ty:?} column", self.name, c.name),
            }
        }
        self.rows += 1;
    }

    /// Forgets the rows, keeping the buffers.
    pub fn clear(&mut self) {
        self.data.iter_mut().for_each(Data::clear);
        self.defined.iter_mut().for_each(Vec::clear);
        self.rows = 0;
    }

    /// The table as CSV: a header line of the column names, then one line per row (text
    /// quoted where it must be, nulls empty, floats in Rust's shortest exact form).
    pub fn write_csv(&self, out: &mut impl Write) -> io::Result<()> {
        let names: Vec<&str> = self.columns.iter().map(|c| c.name).collect();
        writeln!(out, "{}", names.join(","))?;
        // Where each column's next value is (nulls take none).
        let mut next = vec![0usize; self.columns.len()];
        for row in 0..self.rows {
            for (i, c) in self.columns.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                if c.nullable && self.defined[i][row] == 0 {
                    continue;
                }
                let k = next[i];
                next[i] += 1;
                match (&self.data[i], c.ty) {
                    (Data::Int(d), Type::Int64) => write!(out, "{}", d[k])?,
                    (Data::Int(d), _) => write!(out, "{}", d[k] as u64)?,
                    (Data::Float(d), _) => write!(out, "{}", d[k])?,
                    (Data::Text { bytes, ends }, _) => {
                        let start = if k == 0 { 0 } else { ends[k - 1] };
                        // Pushed as &str, cut at the same boundaries: always UTF-8.
                        let s = std::str::from_utf8(&bytes[start..ends[k]]).unwrap_or_default();
                        out.write_all(csv_field(s).as_bytes())?;
                    }
                }
            }
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}

/// Writes each frame as `DIR/<name>.csv`; returns the files.
pub fn write_csv_files(
    dir: &std::path::Path,
    frames: &[Frame],
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut files = Vec::new();
    for f in frames {
        let path = dir.join(format!("{}.csv", f.name));
        let mut body = Vec::with_capacity(f.rows * 64);
        f.write_csv(&mut body)?;
        crate::fsutil::write_whole(&path, |file| file.write_all(&body))
            .with_context(|| format!("cannot write {}", path.display()))?;
        files.push(path);
    }
    Ok(files)
}

#[cfg(feature = "parquet")]
pub use self::parquet_files::{write_parquet_files, ParquetWriter};

#[cfg(feature = "parquet")]
mod parquet_files {
    use std::io::Write;
    use std::sync::Arc;

    use anyhow::{Context, Result};
    use parquet::basic::{Compression, LogicalType, Repetition, TimeUnit, Type as Physical};
    use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
    use parquet::file::metadata::KeyValue;
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::types::{ColumnPath, Type as Schema};

    use super::{Column, Data, Frame, Type};

    /// A Parquet file of one set of columns, written a row group per [`Frame`].
    pub struct ParquetWriter<W: Write + Send> {
        columns: &'static [Column],
        inner: SerializedFileWriter<W>,
    }

    fn schema(columns: &[Column]) -> Result<Schema> {
        let fields = columns
            .iter()
            .map(|c| {
                let (physical, logical) = match c.ty {
                    Type::UInt64 => (Physical::INT64, Some(LogicalType::integer(64, false))),
                    Type::UInt32 => (Physical::INT32, Some(LogicalType::integer(32, false))),
                    Type::Int64 => (Physical::INT64, None),
                    Type::Float64 => (Physical::DOUBLE, None),
                    Type::Text => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
                    Type::TimestampNs => (
                        Physical::INT64,
                        Some(LogicalType::timestamp(true, TimeUnit::NANOS)),
                    ),
                };
                let repetition = if c.nullable {
                    Repetition::OPTIONAL
                } else {
                    Repetition::REQUIRED
                };
                Schema::primitive_type_builder(c.name, physical)
                    .with_repetition(repetition)
                    .with_logical_type(logical)
                    .build()
                    .map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Schema::group_type_builder("chunkscope")
            .with_fields(fields)
            .build()?)
    }

    impl<W: Write + Send> ParquetWriter<W> {
        /// A writer of `columns` to `out`, with `metadata` as the file's key-value pairs
        /// (where the rows came from).
        pub fn new(
            out: W,
            columns: &'static [Column],
            metadata: Vec<(String, String)>,
        ) -> Result<Self> {
            let mut props = WriterProperties::builder()
                .set_created_by(format!("chunkscope {}", env!("CARGO_PKG_VERSION")))
                .set_compression(Compression::ZSTD(parquet::basic::ZstdLevel::try_new(1)?))
                .set_dictionary_enabled(false)
                .set_key_value_metadata(Some(
                    metadata
                        .into_iter()
                        .map(|(k, v)| KeyValue::new(k, v))
                        .collect(),
                ));
            for c in columns.iter().filter(|c| c.dictionary) {
                props = props.set_column_dictionary_enabled(ColumnPath::from(c.name), true);
            }
            let inner = SerializedFileWriter::new(
                out,
                Arc::new(schema(columns)?),
                Arc::new(props.build()),
            )?;
            Ok(ParquetWriter { columns, inner })
        }

        /// Writes `frame`'s rows as one row group (nothing for an empty frame).
        pub fn write(&mut self, frame: &Frame) -> Result<()> {
            assert!(
                std::ptr::eq(frame.columns, self.columns),
                "{}: a frame of other columns",
                frame.name
            );
            if frame.rows == 0 {
                return Ok(());
            }
            let mut group = self.inner.next_row_group()?;
            for (i, c) in self.columns.iter().enumerate() {
                let mut column = group
                    .next_column()?
                    .context("the Parquet schema has fewer columns than the frame")?;
                let defined = c.nullable.then_some(frame.defined[i].as_slice());
                match (&frame.data[i], c.ty) {
                    (Data::Int(v), Type::UInt32) => {
                        let v: Vec<i32> = v.iter().map(|&x| x as u32 as i32).collect();
                        column.typed::<Int32Type>().write_batch(&v, defined, None)?;
                    }
                    (Data::Int(v), _) => {
                        column.typed::<Int64Type>().write_batch(v, defined, None)?;
                    }
                    (Data::Float(v), _) => {
                        column.typed::<DoubleType>().write_batch(v, defined, None)?;
                    }
                    (Data::Text { bytes, ends }, _) => {
                        // One copy of the group's text; each value is a slice of it.
                        let all = bytes::Bytes::copy_from_slice(bytes);
                        let mut start = 0;
                        let values: Vec<ByteArray> = ends
                            .iter()
                            .map(|&end| {
                                let v = ByteArray::from(all.slice(start..end));
                                start = end;
                                v
                            })
                            .collect();
                        column
                            .typed::<ByteArrayType>()
                            .write_batch(&values, defined, None)?;
                    }
                }
                column.close()?;
            }
            group.close()?;
            Ok(())
        }

        /// Writes the footer; gives the output back.
        pub fn finish(self) -> Result<W> {
            // `into_inner` writes the footer (a `finish` before it would make it fail).
            Ok(self.inner.into_inner()?)
        }
    }

    /// Writes each frame as `DIR/<name>.parquet`; returns the files.
    pub fn write_parquet_files(
        dir: &std::path::Path,
        frames: &[Frame],
        metadata: &[(String, String)],
    ) -> Result<Vec<std::path::PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut files = Vec::new();
        for f in frames {
            let path = dir.join(format!("{}.parquet", f.name));
            crate::fsutil::write_whole(&path, |file| -> Result<()> {
                let mut w = ParquetWriter::new(
                    std::io::BufWriter::new(file),
                    f.columns,
                    metadata.to_vec(),
                )?;
                w.write(f)?;
                w.finish()?.flush()?;
                Ok(())
            })
            .with_context(|| format!("cannot write {}", path.display()))?;
            files.push(path);
        }
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMNS: [Column; 4] = [
        Column::u64("n"),
        Column::f64("x"),
        Column::text("s").nullable().dictionary(),
        Column::i64("d"),
    ];

    fn frame() -> Frame {
        let mut f = Frame::new("t", &COLUMNS);
        f.push(&[
            Value::U(u64::MAX),
            Value::F(0.25),
            Value::T("a,b"),
            Value::I(-3),
        ]);
        f.push(&[Value::U(0), Value::F(1e-9), Value::Null, Value::I(7)]);
        f.push(&[Value::U(5), Value::F(2.0), Value::T(""), Value::I(0)]);
        f
    }

    #[test]
    fn csv_quotes_text_leaves_nulls_empty_and_keeps_unsigned_values() {
        let mut out = Vec::new();
        frame().write_csv(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "n,x,s,d\n18446744073709551615,0.25,\"a,b\",-3\n0,0.000000001,,7\n5,2,,0\n"
        );
    }

    #[test]
    fn clear_keeps_the_columns_and_forgets_the_rows() {
        let mut f = frame();
        f.clear();
        assert_eq!(f.rows(), 0);
        f.push(&[Value::U(1), Value::F(1.5), Value::T("z"), Value::I(1)]);
        let mut out = Vec::new();
        f.write_csv(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "n,x,s,d\n1,1.5,z,1\n");
    }

    #[test]
    #[should_panic(expected = "t.n")]
    fn a_null_in_a_required_column_is_a_bug() {
        Frame::new("t", &COLUMNS).push(&[Value::Null, Value::F(0.0), Value::Null, Value::I(0)]);
    }

    #[test]
    #[should_panic(expected = "t.s")]
    fn a_value_of_the_wrong_kind_is_a_bug() {
        Frame::new("t", &COLUMNS).push(&[Value::U(1), Value::F(0.0), Value::U(2), Value::I(0)]);
    }

    #[cfg(feature = "parquet")]
    #[test]
    fn parquet_keeps_types_nulls_and_values() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use parquet::record::Field;
        let dir = tempfile::tempdir().unwrap();
        let files = write_parquet_files(
            dir.path(),
            &[frame()],
            &[("source".to_string(), "test".to_string())],
        )
        .unwrap();
        let r = SerializedFileReader::new(std::fs::File::open(&files[0]).unwrap()).unwrap();
        let kv = r.metadata().file_metadata().key_value_metadata().unwrap();
        assert_eq!(kv[0].key, "source");
        let rows: Vec<Vec<Field>> = r
            .get_row_iter(None)
            .unwrap()
            .map(|row| {
                row.unwrap()
                    .get_column_iter()
                    .map(|(_, f)| f.clone())
                    .collect()
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                vec![
                    Field::ULong(u64::MAX),
                    Field::Double(0.25),
                    Field::Str("a,b".into()),
                    Field::Long(-3)
                ],
                vec![
                    Field::ULong(0),
                    Field::Double(1e-9),
                    Field::Null,
                    Field::Long(7)
                ],
                vec![
                    Field::ULong(5),
                    Field::Double(2.0),
                    Field::Str(String::new()),
                    Field::Long(0)
                ],
            ]
        );
    }
}
