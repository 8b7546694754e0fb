//! Streaming trace reader: one slot at a time, never the whole file in memory.
//!
//! A version-2 trace (the default) is read block by block: each block's CRC is checked and
//! its slots decompressed into a buffer reused for the next. A version-1 trace (plain
//! slots): a regular file is mapped (`mmap`) and its slots decoded from the mapping, with the pages
//! already read given back every few MiB, so reading costs no copy through the kernel and
//! the resident set stays small; anything else (a pipe, `/dev/stdin`) is read through a
//! buffer. A mapped trace reads the length it had when opened: a mount still writing it adds
//! records the reader does not see. Truncating a trace while it is being read is not
//! supported (the mapping would fault).
//!
//! A torn last slot or block (a trace copied or read while its writer was mid-write, or cut
//! short; a version-2 block cut or damaged at the end loses its records, at most a second's
//! worth, or its ~9,400 records) ends the stream cleanly; [`TraceReader::truncated_bytes`] then says how many bytes were ignored,
//! and callers print a warning. A file that is not a trace is refused with its magic shown.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use hashbrown::HashMap;

use super::format::{
    Name, Record, Text, TraceMeta, BLOCK_HEADER, BLOCK_MAGIC, MAX_STRING, SLOT_SIZE, STRING_DEF,
    TRACE_MAGIC, TRACE_VERSION, TRACE_VERSION_PLAIN,
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
    /// Version 2: compressed blocks, each decompressed in turn into a reused buffer.
    Blocks(Box<Blocks>),
}

/// A version-2 trace's blocks.
struct Blocks {
    input: BufReader<File>,
    /// The current block's slots, and how far they are read.
    slots: Vec<u8>,
    pos: usize,
    packed: Vec<u8>,
    zstd: zstd::bulk::Decompressor<'static>,
    /// Where the next block starts in the file.
    file_offset: u64,
}

/// What reading the next block found.
enum Block {
    Read,
    End,
    /// A torn last block: its bytes in the file.
    Torn(u64),
}

impl Blocks {
    /// Reads and decompresses the next block into `slots`.
    fn next(&mut self, path: &Path) -> Result<Block> {
        let at = self.file_offset;
        let mut head = [0u8; BLOCK_HEADER];
        let n = read_full(&mut self.input, &mut head)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            return Ok(Block::End);
        }
        if n < BLOCK_HEADER {
            return Ok(Block::Torn(n as u64));
        }
        if head[..4] != BLOCK_MAGIC {
            bail!(
                "{}: no block at offset {at} (it starts with {} instead of {})",
                path.display(),
                hex::encode(&head[..4]),
                hex::encode(BLOCK_MAGIC)
            );
        }
        let c = u32::from_le_bytes(head[4..8].try_into().expect("4")) as usize;
        let u = u32::from_le_bytes(head[8..12].try_into().expect("4")) as usize;
        let crc = u32::from_le_bytes(head[12..16].try_into().expect("4"));
        if !u.is_multiple_of(SLOT_SIZE) || u > 64 << 20 || c > 64 << 20 {
            bail!(
                "{}: corrupt block header at offset {at}: {c} bytes holding {u}",
                path.display()
            );
        }
        self.packed.resize(c, 0);
        let got = read_full(&mut self.input, &mut self.packed)
            .with_context(|| format!("reading {}", path.display()))?;
        if got < c {
            return Ok(Block::Torn((BLOCK_HEADER + got) as u64));
        }
        if crc32fast::hash(&self.packed) != crc {
            // The last block, damaged as it was written (a crash mid-write), is a torn tail;
            // a damaged block that more follow is corruption.
            let mut one = [0u8; 1];
            if read_full(&mut self.input, &mut one)? == 0 {
                return Ok(Block::Torn((BLOCK_HEADER + c) as u64));
            }
            bail!(
                "{}: block at offset {at} is damaged (CRC mismatch)",
                path.display()
            );
        }
        self.slots.clear();
        self.slots.reserve(u);
        let d = self
            .zstd
            .decompress_to_buffer(&self.packed, &mut self.slots)
            .with_context(|| {
                format!(
                    "{}: block at offset {at} does not decompress",
                    path.display()
                )
            })?;
        if d != u {
            bail!(
                "{}: block at offset {at} holds {d} bytes, its header says {u}",
                path.display()
            );
        }
        self.pos = 0;
        self.file_offset += (BLOCK_HEADER + c) as u64;
        Ok(Block::Read)
    }
}

/// Pages behind the read position are given back in steps of this many bytes.
const RELEASE_STEP: usize = 4 << 20;
/// The string table: ids are handed out from 0 by the writer, so they index a vector; a
/// (corrupt or foreign) id far beyond the strings seen goes to a map instead of a huge vector.
#[derive(Default)]
struct Strings {
    dense: Vec<Option<Text>>,
    sparse: HashMap<u32, Text>,
}

impl Strings {
    fn define(&mut self, id: u32, text: Text) {
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

    fn get(&self, id: u32) -> Option<&Text> {
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
    /// The last slot read through [`Self::slot`] (a stream, or a mapping's torn end).
    copy: [u8; SLOT_SIZE],
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

use crate::fsutil::read_full;

impl TraceReader {
    /// Opens a trace and reads its header.
    pub fn open(path: &Path) -> Result<TraceReader> {
        // Without moving its atime: a file handed here by mistake may be a chunk.
        let (file, _) = crate::fsutil::open_noatime(path)
            .with_context(|| format!("opening trace {}", path.display()))?;
        let mut input = BufReader::with_capacity(1 << 20, file);
        let mut fixed = [0u8; 20];
        let n = read_full(&mut input, &mut fixed)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            bail!(
                "{} is an empty file, not a chunkscope trace (was its writer stopped before \
                 it wrote the header?)",
                path.display()
            );
        }
        if n < 8 || fixed[..8] != TRACE_MAGIC {
            let what = crate::sniff::describe_file(path);
            if !what.is_empty() {
                bail!("{} is not a chunkscope trace{what}", path.display());
            }
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
        if ![TRACE_VERSION_PLAIN, TRACE_VERSION].contains(&version) || slot as usize != SLOT_SIZE {
            bail!(
                "{}: trace version {version} with {slot}-byte slots; this chunkscope reads versions \
                 {TRACE_VERSION_PLAIN} and {TRACE_VERSION} with {SLOT_SIZE}-byte slots",
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
        let source = if version == TRACE_VERSION {
            Source::Blocks(Box::new(Blocks {
                input,
                slots: Vec::new(),
                pos: 0,
                packed: Vec::new(),
                zstd: zstd::bulk::Decompressor::new()
                    .with_context(|| format!("{}: starting zstd", path.display()))?,
                file_offset: header_len as u64,
            }))
        } else {
            match Self::map(input.get_ref(), header_len) {
                Some(map) => Source::Mapped {
                    map,
                    pos: header_len,
                    released: 0,
                },
                None => Source::Stream(input),
            }
        };
        Ok(TraceReader {
            path: path.to_path_buf(),
            source,
            meta,
            strings: Strings::default(),
            truncated: None,
            offset: (20 + padded) as u64,
            copy: [0; SLOT_SIZE],
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

    /// Says (a warning) that the trace's end was torn, if it was: every command that reads a
    /// trace to its end calls this, so that a result built from part of a trace never passes
    /// for the whole.
    pub fn warn_if_torn(&self) {
        if let Some(bytes) = self.truncated {
            tracing::warn!(
                "{}: its end is torn ({bytes} bytes ignored: a last record or block cut \
                 short); read up to it",
                self.path.display()
            );
        }
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
            Source::Blocks(b) => {
                if b.pos == b.slots.len() {
                    match b.next(&self.path)? {
                        Block::Read => {}
                        Block::End => return Ok(None),
                        Block::Torn(n) => {
                            self.truncated = Some(self.truncated.unwrap_or(0) + n);
                            return Ok(None);
                        }
                    }
                }
                let n = (b.slots.len() - b.pos).min(SLOT_SIZE);
                buf[..n].copy_from_slice(&b.slots[b.pos..b.pos + n]);
                b.pos += n;
                n
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

    /// Steps past the next slot of a mapped trace and returns where it starts; `None` when
    /// the trace is read as a stream or fewer than a slot's bytes are left (then
    /// [`Self::slot`] copies).
    fn mapped_slot(&mut self) -> Option<usize> {
        if let Source::Blocks(b) = &mut self.source {
            if b.slots.len() - b.pos < SLOT_SIZE {
                return None; // the next block is read by `slot`, which copies
            }
            let at = b.pos;
            b.pos += SLOT_SIZE;
            self.offset += SLOT_SIZE as u64;
            return Some(at);
        }
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
        Some(at)
    }

    /// The bytes of the slot [`Self::next_view`] stepped past: in the mapping at `at`, or
    /// in the copy.
    fn slot_bytes(&self, at: Option<usize>) -> &[u8; SLOT_SIZE] {
        match (at, &self.source) {
            (Some(at), Source::Mapped { map, .. }) => {
                map[at..at + SLOT_SIZE].try_into().expect("a whole slot")
            }
            (Some(at), Source::Blocks(b)) => b.slots[at..at + SLOT_SIZE]
                .try_into()
                .expect("a whole slot"),
            _ => &self.copy,
        }
    }

    /// The next record, resolving string-table names; `None` at the end.
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        Ok(self.next_view()?.map(|v| v.to_record()))
    }

    /// The next record as it lies in its slot, borrowed (decoding only the fields a caller
    /// reads, and its name's string without a copy); `None` at the end. String definitions
    /// are taken in on the way; a name of an undefined string or of an unknown kind is an
    /// error that names the file and the offset.
    pub fn next_view(&mut self) -> Result<Option<RecordView<'_>>> {
        // The slot's place and its string's id, found before anything is borrowed for the
        // view (string definitions on the way change the table).
        let (mapped, text_id) = loop {
            let at = self.offset;
            let mapped = self.mapped_slot();
            if mapped.is_none() {
                let mut copy = [0u8; SLOT_SIZE];
                if self.slot(&mut copy)?.is_none() {
                    return Ok(None);
                }
                self.copy = copy;
            }
            let buf = self.slot_bytes(mapped);
            let (op, kind) = (u16::from_le_bytes([buf[68], buf[69]]), buf[70]);
            let (id, len) = (u64_at(buf, 0), u64_at(buf, 8) as usize);
            let name_id = u32::from_le_bytes(buf[80..84].try_into().expect("4"));
            if op == STRING_DEF {
                if len > MAX_STRING {
                    bail!(
                        "{}: corrupt string definition at offset {at}: length {len}",
                        self.path.display()
                    );
                }
                let mut text = Vec::with_capacity(len);
                let mut copy = [0u8; SLOT_SIZE];
                for _ in 0..len.div_ceil(SLOT_SIZE) {
                    if self.slot(&mut copy)?.is_none() {
                        let done = self.truncated.unwrap_or(0) + (SLOT_SIZE + text.len()) as u64;
                        self.truncated = Some(done);
                        return Ok(None);
                    }
                    text.extend_from_slice(&copy);
                }
                text.truncate(len);
                self.strings.define(id as u32, text.into());
                continue;
            }
            match kind {
                0 | 1 => break (mapped, None),
                2 if self.strings.get(name_id).is_some() => break (mapped, Some(name_id)),
                2 => bail!(
                    "{}: record at offset {at} names undefined string {name_id}",
                    self.path.display()
                ),
                k => bail!(
                    "{}: record at offset {at} has unknown name kind {k}",
                    self.path.display()
                ),
            }
        };
        Ok(Some(RecordView {
            slot: self.slot_bytes(mapped),
            text: text_id.and_then(|id| self.strings.get(id)),
        }))
    }
}

/// A record slot as the reader found it, borrowed from the reader: each field is decoded
/// when asked for, and a name from the string table is the table's own string.
#[derive(Clone, Copy)]
pub struct RecordView<'a> {
    slot: &'a [u8; SLOT_SIZE],
    text: Option<&'a Text>,
}

impl<'a> RecordView<'a> {
    /// As [`Record::seq`].
    #[inline]
    pub fn seq(&self) -> u64 {
        u64_at(self.slot, 0)
    }
    /// As [`Record::start_ns`].
    #[inline]
    pub fn start_ns(&self) -> u64 {
        u64_at(self.slot, 8)
    }
    /// As [`Record::duration_ns`].
    #[inline]
    pub fn duration_ns(&self) -> u64 {
        u64_at(self.slot, 16)
    }
    /// As [`Record::ino`].
    #[inline]
    pub fn ino(&self) -> u64 {
        u64_at(self.slot, 24)
    }
    /// As [`Record::parent`].
    #[inline]
    pub fn parent(&self) -> u64 {
        u64_at(self.slot, 32)
    }
    /// As [`Record::arg`].
    #[inline]
    pub fn arg(&self) -> u64 {
        u64_at(self.slot, 40)
    }
    /// As [`Record::offset`].
    #[inline]
    pub fn offset(&self) -> u64 {
        if self.slot[70] == 0 {
            u64_at(self.slot, 80)
        } else {
            crate::trace::format::decode_named_offset(u32::from_le_bytes(
                self.slot[76..80].try_into().expect("4"),
            ))
        }
    }
    /// As [`Record::modeled_ns`].
    #[inline]
    pub fn modeled_ns(&self) -> u64 {
        u64_at(self.slot, 56)
    }
    /// As [`Record::pid`].
    #[inline]
    pub fn pid(&self) -> u32 {
        u32::from_le_bytes(self.slot[64..68].try_into().expect("4"))
    }
    /// As [`Record::op`] (the raw number).
    #[inline]
    pub fn op(&self) -> u16 {
        u16::from_le_bytes([self.slot[68], self.slot[69]])
    }
    /// As [`Record::flags`].
    #[inline]
    pub fn flags(&self) -> u8 {
        self.slot[71]
    }
    /// As [`Record::errno`].
    #[inline]
    pub fn errno(&self) -> i32 {
        i32::from_le_bytes(self.slot[72..76].try_into().expect("4"))
    }
    /// The digest a chunk name carries.
    #[inline]
    pub fn digest(&self) -> Option<&'a [u8; 32]> {
        (self.slot[70] == 1).then(|| self.slot[80..112].try_into().expect("32"))
    }
    /// A name that is not a digest, or a marker's text.
    #[inline]
    pub fn text(&self) -> Option<&'a Text> {
        self.text
    }

    /// The record, owned.
    pub fn to_record(&self) -> Record {
        let b = self.slot;
        Record {
            seq: self.seq(),
            start_ns: self.start_ns(),
            duration_ns: self.duration_ns(),
            ino: self.ino(),
            parent: self.parent(),
            arg: u64_at(b, 40),
            offset: self.offset(),
            injected_ns: u64_at(b, 48),
            modeled_ns: self.modeled_ns(),
            pid: self.pid(),
            op: self.op(),
            flags: self.flags(),
            errno: self.errno(),
            name: match (self.digest(), self.text) {
                (Some(d), _) => Name::Digest(Digest(*d)),
                (None, Some(t)) => Name::Text(t.clone()),
                (None, None) => Name::None,
            },
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}
