//! Streaming trace reader: one slot at a time, never the whole file in memory.
//!
//! A regular file is mapped (`mmap`) and its slots decoded from the mapping, with the pages
//! already read given back every few MiB, so reading costs no copy through the kernel and
//! the resident set stays small; anything else (a pipe, `/dev/stdin`) is read through a
//! buffer. A mapped trace reads the length it had when opened: a mount still writing it adds
//! records the reader does not see. Truncating a trace while it is being read is not
//! supported (the mapping would fault).
//!
//! A torn last slot (a trace copied or read while its writer was mid-write, or cut short) ends
//! the stream cleanly; [`TraceReader::truncated_bytes`] then says how many bytes were ignored,
//! and callers print a warning. A file that is not a trace is refused with its magic shown.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use hashbrown::HashMap;

use super::format::{
    Name, Record, TraceMeta, MAX_STRING, SLOT_SIZE, STRING_DEF, TRACE_MAGIC, TRACE_VERSION,
};
use crate::datastore::Digest;

/// Where slots come from.
enum Source {
    Mapped {
        map: memmap2::Mmap,
        pos: usize,
        /// Start of the range not yet given back to the kernel.
        released: usize,
    },
    Stream(BufReader<File>),
}

/// Pages behind the read position are given back in steps of this many bytes.
const RELEASE_STEP: usize = 4 << 20;
/// The string table: ids are handed out from 0 by the writer, so they index a vector; a
/// (corrupt or foreign) id far beyond the strings seen goes to a map instead of a huge vector.
#[derive(Default)]
struct Strings {
    dense: Vec<Option<Arc<str>>>,
    sparse: HashMap<u32, Arc<str>>,
}

impl Strings {
    fn define(&mut self, id: u32, text: Arc<str>) {
        let i = id as usize;
        if i < self.dense.len() + 4096 {
            if self.dense.len() <= i {
                self.dense.resize(i + 1, None);
            }
            self.dense[i] = Some(text);
        } else {
            self.sparse.insert(id, text);
        }
    }

    fn get(&self, id: u32) -> Option<&Arc<str>> {
        match self.dense.get(id as usize) {
            Some(Some(s)) => Some(s),
            _ => self.sparse.get(&id),
        }
    }
}

/// Reads a trace file record by record (a mapped file decoded in place, or a pipe through a buffer); a torn last slot ends it with a warning.
pub struct TraceReader {
    path: PathBuf,
    source: Source,
    meta: TraceMeta,
    strings: Strings,
    truncated: Option<u64>,
    offset: u64,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads up to `buf.len()` bytes; returns how many (less only at end of file).
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl TraceReader {
    /// Opens a trace and reads its header.
    pub fn open(path: &Path) -> Result<TraceReader> {
        let file = File::open(path).with_context(|| format!("opening trace {}", path.display()))?;
        let mut input = BufReader::with_capacity(1 << 20, file);
        let mut fixed = [0u8; 20];
        let n = read_full(&mut input, &mut fixed)
            .with_context(|| format!("reading {}", path.display()))?;
        if n < 8 || fixed[..8] != TRACE_MAGIC {
            bail!(
                "{} is not a chunkscope trace: it starts with {} instead of the magic {}",
                path.display(),
                hex::encode(&fixed[..n.min(8)]),
                hex::encode(TRACE_MAGIC)
            );
        }
        if n < 20 {
            bail!(
                "{}: trace header truncated ({n} of 20 bytes)",
                path.display()
            );
        }
        let version = u32::from_le_bytes(fixed[8..12].try_into().expect("4"));
        let slot = u32::from_le_bytes(fixed[12..16].try_into().expect("4"));
        if version != TRACE_VERSION || slot as usize != SLOT_SIZE {
            bail!(
                "{}: trace version {version} with {slot}-byte slots; this chunkscope reads version \
                 {TRACE_VERSION} with {SLOT_SIZE}-byte slots",
                path.display()
            );
        }
        let json_len = u32::from_le_bytes(fixed[16..20].try_into().expect("4")) as usize;
        let padded = (20 + json_len).div_ceil(8) * 8 - 20;
        let mut json = vec![0u8; padded];
        if read_full(&mut input, &mut json)? < padded {
            bail!(
                "{}: trace header truncated (metadata of {json_len} bytes)",
                path.display()
            );
        }
        let meta: TraceMeta = serde_json::from_slice(&json[..json_len]).with_context(|| {
            format!(
                "{}: trace header metadata is not valid JSON",
                path.display()
            )
        })?;
        let header_len = 20 + padded;
        let source = match Self::map(input.get_ref(), header_len) {
            Some(map) => Source::Mapped {
                map,
                pos: header_len,
                released: 0,
            },
            None => Source::Stream(input),
        };
        Ok(TraceReader {
            path: path.to_path_buf(),
            source,
            meta,
            strings: Strings::default(),
            truncated: None,
            offset: (20 + padded) as u64,
        })
    }

    /// Maps a regular file longer than its header; `None` means "read it as a stream".
    fn map(file: &File, header_len: usize) -> Option<memmap2::Mmap> {
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.len() <= header_len as u64 {
            return None;
        }
        // SAFETY: the mapping is read-only and private; the trace writer only appends, so the
        // mapped range stays valid (truncating a trace while it is read is unsupported, see
        // the module documentation).
        let map = unsafe { memmap2::MmapOptions::new().map(file) }.ok()?;
        let _ = map.advise(memmap2::Advice::Sequential);
        Some(map)
    }

    /// The header's metadata.
    pub fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    /// Bytes ignored at the end because the last slot was incomplete.
    pub fn truncated_bytes(&self) -> Option<u64> {
        self.truncated
    }

    /// The trace's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads one slot; `None` at a clean end, or at a torn end (recorded in `truncated`).
    fn slot(&mut self, buf: &mut [u8; SLOT_SIZE]) -> Result<Option<()>> {
        let n = match &mut self.source {
            Source::Mapped { map, pos, .. } => {
                let n = (map.len() - *pos).min(SLOT_SIZE);
                buf[..n].copy_from_slice(&map[*pos..*pos + n]);
                *pos += n;
                n
            }
            Source::Stream(input) => {
                read_full(input, buf).with_context(|| format!("reading {}", self.path.display()))?
            }
        };
        self.offset += n as u64;
        match n {
            0 => Ok(None),
            SLOT_SIZE => Ok(Some(())),
            partial => {
                self.truncated = Some(self.truncated.unwrap_or(0) + partial as u64);
                Ok(None)
            }
        }
    }

    /// The next slot of a mapped trace, borrowed from the mapping; `None` when the trace is
    /// read as a stream or fewer than a slot's bytes are left (then [`Self::slot`] copies).
    fn mapped_slot(&mut self) -> Option<&[u8]> {
        let Source::Mapped { map, pos, released } = &mut self.source else {
            return None;
        };
        if map.len() - *pos < SLOT_SIZE {
            return None;
        }
        if *pos - *released >= 2 * RELEASE_STEP {
            let len = (*pos - *released - RELEASE_STEP) / RELEASE_STEP * RELEASE_STEP;
            // SAFETY: nothing borrows the mapping below `pos` (records are decoded from the
            // current slot only), and dropping the pages of a private read-only file mapping
            // only means they are read again from the file if touched.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, *released, len)
            };
            *released += len;
        }
        let at = *pos;
        *pos += SLOT_SIZE;
        self.offset += SLOT_SIZE as u64;
        Some(&map[at..at + SLOT_SIZE])
    }

    /// The next record, resolving string-table names; `None` at the end.
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        let mut copy = [0u8; SLOT_SIZE];
        loop {
            let at = self.offset;
            let buf: &[u8] = match self.mapped_slot() {
                Some(b) => b,
                None => {
                    if self.slot(&mut copy)?.is_none() {
                        return Ok(None);
                    }
                    &copy
                }
            };
            let op = u16::from_le_bytes([buf[68], buf[69]]);
            if op == STRING_DEF {
                let id = u64_at(buf, 0) as u32;
                let len = u64_at(buf, 8) as usize;
                if len > MAX_STRING {
                    bail!(
                        "{}: corrupt string definition at offset {at}: length {len}",
                        self.path.display()
                    );
                }
                let mut text = Vec::with_capacity(len);
                for _ in 0..len.div_ceil(SLOT_SIZE) {
                    if self.slot(&mut copy)?.is_none() {
                        let done = self.truncated.unwrap_or(0) + (SLOT_SIZE + text.len()) as u64;
                        self.truncated = Some(done);
                        return Ok(None);
                    }
                    text.extend_from_slice(&copy);
                }
                text.truncate(len);
                self.strings
                    .define(id, String::from_utf8_lossy(&text).into());
                continue;
            }
            let kind = buf[70];
            let mut rec = Record {
                seq: u64_at(buf, 0),
                start_ns: u64_at(buf, 8),
                duration_ns: u64_at(buf, 16),
                ino: u64_at(buf, 24),
                parent: u64_at(buf, 32),
                arg: u64_at(buf, 40),
                injected_ns: u64_at(buf, 48),
                modeled_ns: u64_at(buf, 56),
                pid: u32::from_le_bytes(buf[64..68].try_into().expect("4")),
                op,
                flags: buf[71],
                errno: i32::from_le_bytes(buf[72..76].try_into().expect("4")),
                name: Name::None,
            };
            let name: [u8; 32] = buf[80..112].try_into().expect("32");
            rec.name = match kind {
                0 => Name::None,
                1 => Name::Digest(Digest(name)),
                2 => {
                    let id = u32::from_le_bytes(name[..4].try_into().expect("4"));
                    match self.strings.get(id) {
                        Some(s) => Name::Text(s.clone()),
                        None => bail!(
                            "{}: record at offset {at} names undefined string {id}",
                            self.path.display()
                        ),
                    }
                }
                k => bail!(
                    "{}: record at offset {at} has unknown name kind {k}",
                    self.path.display()
                ),
            };
            return Ok(Some(rec));
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}
