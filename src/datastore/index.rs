//! Index files: `.fidx` (fixed-size chunks, VM disks) and `.didx` (dynamic chunks, archives).
//!
//! Both start with a 4096-byte header (format document 2.1 to 2.3), all integers little endian:
//!
//! ```text
//! offset  size   field
//! 0       8      magic        fidx 2f7f41ed91fd0fcd, didx 1c914ea519bab3cd
//! 8       16     uuid
//! 24      8      ctime        i64, epoch seconds
//! 32      32     index_csum   SHA-256 of the body (every byte after offset 4096)
//! 64      8      size         fidx only: content size in bytes
//! 72      8      chunk_size   fidx only: a power of two
//! ..      ..     reserved, zero
//! 4096    ..     body         fidx: n digests of 32 bytes, n = ceil(size / chunk_size)
//!                             didx: n entries { end: u64 LE, digest: [u8; 32] }
//! ```
//!
//! [`IndexFile::parse`] validates everything listed there (length, magic, chunk size, body length,
//! checksum, at least one entry for fidx) and says which rule failed with expected vs found.
//! The writers produce files byte-compatible with PBS's writers, via a `.tmp_[fd]idx` + rename.

use std::fs;
use std::io::Write;
use std::path::Path;

use sha2::{Digest as _, Sha256};

use super::error::{FormatError, FormatErrorKind};
use super::Digest;

/// Size of the index header.
pub const INDEX_HEADER_SIZE: usize = 4096;
/// "Proxmox Backup fixed sized chunk index v1.0"
pub const FIXED_SIZED_CHUNK_INDEX_1_0: [u8; 8] = [47, 127, 65, 237, 145, 253, 15, 205];
/// "Proxmox Backup dynamic sized chunk index v1.0"
pub const DYNAMIC_SIZED_CHUNK_INDEX_1_0: [u8; 8] = [28, 145, 78, 165, 25, 186, 179, 205];
/// Size of one `.didx` body entry.
pub const DYNAMIC_ENTRY_SIZE: usize = 40;

/// Which of the two index formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexKind {
    /// `.fidx`: chunks of one size, digests only (VM disks).
    Fixed,
    /// `.didx`: chunks of any size, end offsets with the digests (file archives).
    Dynamic,
}

impl IndexKind {
    /// From the last extension, as PBS's `ArchiveType::from_path` (`fidx`, `didx`).
    pub fn from_path(path: &Path) -> Option<IndexKind> {
        match path.extension()?.to_str()? {
            "fidx" => Some(IndexKind::Fixed),
            "didx" => Some(IndexKind::Dynamic),
            _ => None,
        }
    }

    /// Its magic number.
    pub fn magic(self) -> [u8; 8] {
        match self {
            IndexKind::Fixed => FIXED_SIZED_CHUNK_INDEX_1_0,
            IndexKind::Dynamic => DYNAMIC_SIZED_CHUNK_INDEX_1_0,
        }
    }

    fn entry_size(self) -> usize {
        match self {
            IndexKind::Fixed => 32,
            IndexKind::Dynamic => DYNAMIC_ENTRY_SIZE,
        }
    }

    /// Its name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Fixed => "fixed index (fidx)",
            IndexKind::Dynamic => "dynamic index (didx)",
        }
    }
}

/// Bodies up to this size are read whole; larger ones are streamed (see [`IndexFile::open`]).
pub const IN_MEMORY_BODY_LIMIT: u64 = 16 << 20;

/// Bytes read at a time from a streamed body: a whole number of entries of either kind.
const STREAM_BUFFER: usize = 32 * DYNAMIC_ENTRY_SIZE * 1024;

/// A validated index file: header and body in memory, or (a body over
/// [`IN_MEMORY_BODY_LIMIT`]) the header in memory and the body streamed from the open file, so
/// that no index, however large or hostile, costs more memory than the format's header plus a
/// buffer.
pub struct IndexFile {
    kind: IndexKind,
    /// The whole file, or only its header when `stream` is set.
    bytes: Vec<u8>,
    stream: Option<Streamed>,
}

/// A body left in the file.
struct Streamed {
    file: std::fs::File,
    path: std::path::PathBuf,
    body_len: u64,
    /// didx: the last entry's end offset, read at open.
    last_end: u64,
}

/// The checks of the header that need no body: length, magic, fidx chunk size and body length
/// against the size its header implies, didx body a whole number of entries. `header` holds at
/// least the first 4096 bytes of a file of `len` bytes (or the whole file, if shorter).
fn validate_header(header: &[u8], len: u64) -> Result<IndexKind, FormatError> {
    if header.len() < INDEX_HEADER_SIZE || len < INDEX_HEADER_SIZE as u64 {
        return Err(FormatErrorKind::TooShort {
            what: "index header",
            need: INDEX_HEADER_SIZE as u64,
            found: len,
        }
        .into());
    }
    let kind = match &header[..8] {
        m if m == FIXED_SIZED_CHUNK_INDEX_1_0 => IndexKind::Fixed,
        m if m == DYNAMIC_SIZED_CHUNK_INDEX_1_0 => IndexKind::Dynamic,
        m => {
            return Err(FormatErrorKind::BadMagic {
                expected: "a fixed (2f7f41ed91fd0fcd) or dynamic (1c914ea519bab3cd) index magic",
                found: m.try_into().expect("8 bytes"),
            }
            .into())
        }
    };
    let body = len - INDEX_HEADER_SIZE as u64;
    match kind {
        IndexKind::Fixed => {
            let size = u64::from_le_bytes(header[64..72].try_into().expect("8 bytes"));
            let chunk_size = u64::from_le_bytes(header[72..80].try_into().expect("8 bytes"));
            if !chunk_size.is_power_of_two() {
                return Err(FormatErrorKind::ChunkSizeNotPowerOfTwo { chunk_size }.into());
            }
            let entries = size.div_ceil(chunk_size);
            if entries.checked_mul(32) != Some(body) {
                return Err(FormatErrorKind::BodyLength {
                    detail: format!(
                        "size {size} / chunk size {chunk_size} needs {entries} digests \
                         ({} bytes), body has {body} bytes",
                        entries as u128 * 32
                    ),
                }
                .into());
            }
            if entries == 0 {
                return Err(FormatErrorKind::NoEntries.into());
            }
        }
        IndexKind::Dynamic => {
            if !body.is_multiple_of(DYNAMIC_ENTRY_SIZE as u64) {
                return Err(FormatErrorKind::BodyLength {
                    detail: format!(
                        "{body} bytes is not a multiple of the {DYNAMIC_ENTRY_SIZE}-byte entry"
                    ),
                }
                .into());
            }
        }
    }
    Ok(kind)
}

/// didx: end offsets must grow strictly (every chunk holds at least one byte). Called for
/// each entry in order with the previous end (0 before the first).
#[inline]
fn check_end(entry: u64, prev: u64, end: u64) -> Result<(), FormatError> {
    if end <= prev {
        return Err(FormatErrorKind::EndOffsets { entry, prev, end }.into());
    }
    Ok(())
}

impl IndexFile {
    /// Opens, validates and (up to [`IN_MEMORY_BODY_LIMIT`]) reads an index file; the kind
    /// comes from its magic.
    ///
    /// Only a regular file is opened (a FIFO, device, directory or symbolic link is refused,
    /// without blocking on it or following it: an index of a store is read where it is). The
    /// header is checked against the file's size before the body is read: a fixed index must
    /// be exactly as long as its size and chunk size imply. A larger body stays in
    /// the file and is streamed by [`IndexFile::for_each_digest`], which verifies end offsets
    /// and the checksum as it goes; a smaller one is verified here.
    ///
    /// Index files are not chunks, so their atime is not GC state; they are still opened with
    /// `O_NOATIME` where permitted so that inspection leaves no trace.
    pub fn open(path: &Path) -> Result<IndexFile, FormatError> {
        let index = IndexFile::open_file(path, IN_MEMORY_BODY_LIMIT, true)?;
        if index.stream.is_none() {
            index.verify().map_err(|e| e.in_file(path))?;
        }
        Ok(index)
    }

    /// [`IndexFile::open`] without verifying an in-memory body (for `inspect`, which reports a
    /// mismatch instead of refusing the file), with the in-memory limit given.
    /// A symbolic link is followed here (a file named on the command line), unlike in
    /// [`IndexFile::open`].
    pub fn open_with_limit(path: &Path, limit: u64) -> Result<IndexFile, FormatError> {
        IndexFile::open_file(path, limit, false)
    }

    fn open_file(path: &Path, limit: u64, in_store: bool) -> Result<IndexFile, FormatError> {
        use std::io::Read;
        use std::os::unix::fs::FileExt;
        let io = |e| FormatError::io(path, e);
        let (mut file, len) = if in_store {
            crate::fsutil::open_regular_noatime_in_store(path)
        } else {
            crate::fsutil::open_regular_noatime(path)
        }
        .map_err(io)?;
        let mut header = vec![0u8; INDEX_HEADER_SIZE.min(len as usize)];
        file.read_exact(&mut header).map_err(io)?;
        let kind = validate_header(&header, len).map_err(|e| e.in_file(path))?;
        let body_len = len - INDEX_HEADER_SIZE as u64;
        if body_len <= limit {
            let mut bytes = header;
            bytes.reserve_exact(body_len as usize);
            (&mut file)
                .take(body_len + 1)
                .read_to_end(&mut bytes)
                .map_err(io)?;
            if bytes.len() as u64 != len {
                return Err(FormatError::new(FormatErrorKind::BodyLength {
                    detail: format!(
                        "the file changed size while read: {len} bytes, then {}",
                        bytes.len()
                    ),
                })
                .in_file(path));
            }
            return IndexFile::parse_unverified(bytes).map_err(|e| e.in_file(path));
        }
        let mut last_end = 0;
        if kind == IndexKind::Dynamic {
            let mut e = [0u8; 8];
            file.read_exact_at(&mut e, len - DYNAMIC_ENTRY_SIZE as u64)
                .map_err(io)?;
            last_end = u64::from_le_bytes(e);
        }
        Ok(IndexFile {
            kind,
            bytes: header,
            stream: Some(Streamed {
                file,
                path: path.to_path_buf(),
                body_len,
                last_end,
            }),
        })
    }

    /// Validates `bytes` as an index of either kind: structure, didx end offsets, checksum.
    pub fn parse(bytes: Vec<u8>) -> Result<IndexFile, FormatError> {
        let index = IndexFile::parse_unverified(bytes)?;
        index.verify()?;
        Ok(index)
    }

    /// The checks of an in-memory body: didx end offsets, then the checksum.
    fn verify(&self) -> Result<(), FormatError> {
        self.check_ends()?;
        let computed = self.compute_csum();
        if computed != self.stored_csum() {
            return Err(FormatErrorKind::IndexChecksum {
                stored: hex::encode(self.stored_csum()),
                computed: hex::encode(computed),
            }
            .into());
        }
        Ok(())
    }

    /// didx end offsets strictly increasing (in-memory body).
    pub fn check_ends(&self) -> Result<(), FormatError> {
        if self.kind == IndexKind::Dynamic {
            let mut prev = 0;
            for i in 0..self.entries() {
                let end = self.end(i).expect("dynamic");
                check_end(i as u64, prev, end)?;
                prev = end;
            }
        }
        Ok(())
    }

    /// Validates the structure (length, magic, chunk size, body length) but neither the end
    /// offsets nor the checksum, for tools that report a mismatch rather than refuse the file
    /// and for bytes built by this program.
    pub fn parse_unverified(bytes: Vec<u8>) -> Result<IndexFile, FormatError> {
        let kind = validate_header(&bytes, bytes.len() as u64)?;
        Ok(IndexFile {
            kind,
            bytes,
            stream: None,
        })
    }

    /// Whether the body is streamed from the file rather than held in memory.
    pub fn is_streamed(&self) -> bool {
        self.stream.is_some()
    }

    /// Calls `f` with every digest in index order. A streamed body is verified as it is read
    /// (end offsets, then the checksum at the end, which returns an error after `f` has seen
    /// every digest: a caller must treat an error as "this index is not valid"); an in-memory
    /// one was verified when it was opened or parsed.
    pub fn for_each_digest<E: From<FormatError>>(
        &self,
        mut f: impl FnMut(Digest) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.stream.is_none() {
            for d in self.digests() {
                f(d)?;
            }
            return Ok(());
        }
        let computed = self.scan(&mut f)?;
        if computed != self.stored_csum() {
            let path = &self.stream.as_ref().expect("streamed").path;
            return Err(FormatError::new(FormatErrorKind::IndexChecksum {
                stored: hex::encode(self.stored_csum()),
                computed: hex::encode(computed),
            })
            .in_file(path)
            .into());
        }
        Ok(())
    }

    /// Every digest in order through `f`, checking didx end offsets; returns the body's
    /// SHA-256 (what `index_csum` must be). Reads a streamed body in fixed-size pieces.
    pub fn scan<E: From<FormatError>>(
        &self,
        f: &mut impl FnMut(Digest) -> Result<(), E>,
    ) -> Result<[u8; 32], E> {
        let Some(st) = &self.stream else {
            self.check_ends()?;
            for d in self.digests() {
                f(d)?;
            }
            return Ok(self.compute_csum());
        };
        use std::os::unix::fs::FileExt;
        let in_file = |e: FormatError| e.in_file(&st.path);
        let esize = self.kind.entry_size();
        let mut buf = vec![0u8; STREAM_BUFFER];
        let mut hasher = Sha256::new();
        let (mut at, mut entry, mut prev) = (0u64, 0u64, 0u64);
        while at < st.body_len {
            let want = (st.body_len - at).min(buf.len() as u64) as usize;
            let piece = &mut buf[..want];
            st.file
                .read_exact_at(piece, INDEX_HEADER_SIZE as u64 + at)
                .map_err(|e| in_file(FormatError::io(&st.path, e)))?;
            hasher.update(&*piece);
            for e in piece.chunks_exact(esize) {
                let d = match self.kind {
                    IndexKind::Fixed => e,
                    IndexKind::Dynamic => {
                        let end = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
                        check_end(entry, prev, end).map_err(in_file)?;
                        prev = end;
                        &e[8..]
                    }
                };
                f(Digest(d.try_into().expect("32 bytes")))?;
                entry += 1;
            }
            at += want as u64;
        }
        Ok(hasher.finalize().into())
    }

    /// Which format it is.
    pub fn kind(&self) -> IndexKind {
        self.kind
    }

    /// The header's UUID.
    pub fn uuid(&self) -> [u8; 16] {
        self.bytes[8..24].try_into().expect("16 bytes")
    }

    /// The header's creation time (epoch seconds).
    pub fn ctime(&self) -> i64 {
        i64::from_le_bytes(self.bytes[24..32].try_into().expect("8 bytes"))
    }

    /// The `index_csum` field of the header.
    pub fn stored_csum(&self) -> [u8; 32] {
        self.bytes[32..64].try_into().expect("32 bytes")
    }

    /// SHA-256 of an in-memory body, what `index_csum` must be (a streamed body: [`IndexFile::scan`]).
    pub fn compute_csum(&self) -> [u8; 32] {
        Sha256::digest(self.body()).into()
    }

    /// The in-memory body. Only the digest accessors of an in-memory index use it.
    fn body(&self) -> &[u8] {
        assert!(
            self.stream.is_none(),
            "a streamed index is read with for_each_digest or scan"
        );
        &self.bytes[INDEX_HEADER_SIZE..]
    }

    fn fixed_size(&self) -> u64 {
        u64::from_le_bytes(self.bytes[64..72].try_into().expect("8 bytes"))
    }

    fn fixed_chunk_size(&self) -> u64 {
        u64::from_le_bytes(self.bytes[72..80].try_into().expect("8 bytes"))
    }

    /// The fixed chunk size (fidx only).
    pub fn chunk_size(&self) -> Option<u64> {
        (self.kind == IndexKind::Fixed).then(|| self.fixed_chunk_size())
    }

    /// Number of entries (references) in the index.
    pub fn entries(&self) -> usize {
        let body = match &self.stream {
            Some(st) => st.body_len,
            None => (self.bytes.len() - INDEX_HEADER_SIZE) as u64,
        };
        (body / self.kind.entry_size() as u64) as usize
    }

    /// The digest of entry `i` (an in-memory index: every index the simulator builds, and
    /// every file whose body is at most [`IN_MEMORY_BODY_LIMIT`]).
    pub fn digest(&self, i: usize) -> Digest {
        let _ = self.body();
        let at = INDEX_HEADER_SIZE
            + i * self.kind.entry_size()
            + if self.kind == IndexKind::Dynamic {
                8
            } else {
                0
            };
        Digest(self.bytes[at..at + 32].try_into().expect("32 bytes"))
    }

    /// All digests, in index order (the order phase 1 touches them); an in-memory index only,
    /// as [`IndexFile::digest`].
    pub fn digests(&self) -> impl ExactSizeIterator<Item = Digest> + '_ {
        (0..self.entries()).map(|i| self.digest(i))
    }

    /// The end offset of entry `i` (didx only).
    pub fn end(&self, i: usize) -> Option<u64> {
        let _ = self.body();
        (self.kind == IndexKind::Dynamic).then(|| {
            let at = INDEX_HEADER_SIZE + i * DYNAMIC_ENTRY_SIZE;
            u64::from_le_bytes(self.bytes[at..at + 8].try_into().expect("8 bytes"))
        })
    }

    /// Content bytes the index describes: fidx `size`, didx the last `end` (0 if empty).
    /// This is what GC adds to "Original data usage".
    pub fn index_bytes(&self) -> u64 {
        match self.kind {
            IndexKind::Fixed => self.fixed_size(),
            IndexKind::Dynamic => match (&self.stream, self.entries()) {
                (Some(st), _) => st.last_end,
                (None, 0) => 0,
                (None, n) => self.end(n - 1).expect("dynamic"),
            },
        }
    }
}

fn header(kind: IndexKind, uuid: [u8; 16], ctime: i64) -> Vec<u8> {
    let mut out = vec![0u8; INDEX_HEADER_SIZE];
    out[..8].copy_from_slice(&kind.magic());
    out[8..24].copy_from_slice(&uuid);
    out[24..32].copy_from_slice(&ctime.to_le_bytes());
    out
}

fn finish(mut bytes: Vec<u8>) -> Vec<u8> {
    let csum: [u8; 32] = Sha256::digest(&bytes[INDEX_HEADER_SIZE..]).into();
    bytes[32..64].copy_from_slice(&csum);
    bytes
}

/// The bytes of a `.fidx`: `size` content bytes in chunks of `chunk_size` (a power of two).
///
/// Panics if the digest count does not match, which is a bug in the caller.
pub fn fixed_index_bytes(
    uuid: [u8; 16],
    ctime: i64,
    size: u64,
    chunk_size: u64,
    digests: &[Digest],
) -> Vec<u8> {
    assert!(
        chunk_size.is_power_of_two(),
        "chunk size must be a power of two"
    );
    assert_eq!(
        size.div_ceil(chunk_size),
        digests.len() as u64,
        "digests for size"
    );
    let mut out = header(IndexKind::Fixed, uuid, ctime);
    out[64..72].copy_from_slice(&size.to_le_bytes());
    out[72..80].copy_from_slice(&chunk_size.to_le_bytes());
    out.reserve(digests.len() * 32);
    for d in digests {
        out.extend_from_slice(&d.0);
    }
    finish(out)
}

/// The bytes of a `.didx` from `(end, digest)` entries; `end` is cumulative and exclusive.
pub fn dynamic_index_bytes(uuid: [u8; 16], ctime: i64, entries: &[(u64, Digest)]) -> Vec<u8> {
    let mut out = header(IndexKind::Dynamic, uuid, ctime);
    out.reserve(entries.len() * DYNAMIC_ENTRY_SIZE);
    for (end, d) in entries {
        out.extend_from_slice(&end.to_le_bytes());
        out.extend_from_slice(&d.0);
    }
    finish(out)
}

/// Writes index bytes the way PBS does: to `<name>.tmp_fidx|tmp_didx`, then renamed over `path`.
pub fn write_index_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("idx");
    let tmp = path.with_extension(format!("tmp_{ext}"));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digests(n: usize) -> Vec<Digest> {
        (0..n).map(|i| Digest::of(&i.to_le_bytes())).collect()
    }

    #[test]
    fn fixed_round_trip() {
        let ds = digests(5);
        // The last chunk is short: 4 full chunks of 4096 and one of 100 bytes.
        let bytes = fixed_index_bytes([3; 16], 1_700_000_000, 4 * 4096 + 100, 4096, &ds);
        assert_eq!(bytes.len(), 4096 + 5 * 32);
        let idx = IndexFile::parse(bytes).unwrap();
        assert_eq!(idx.kind(), IndexKind::Fixed);
        assert_eq!(idx.uuid(), [3; 16]);
        assert_eq!(idx.ctime(), 1_700_000_000);
        assert_eq!(idx.entries(), 5);
        assert_eq!(idx.chunk_size(), Some(4096));
        assert_eq!(idx.index_bytes(), 4 * 4096 + 100);
        assert_eq!(idx.digests().collect::<Vec<_>>(), ds);
        assert_eq!(idx.end(0), None);
    }

    #[test]
    fn dynamic_round_trip() {
        let ds = digests(3);
        let entries: Vec<(u64, Digest)> = vec![(1000, ds[0]), (5000, ds[1]), (5001, ds[2])];
        let bytes = dynamic_index_bytes([9; 16], -5, &entries);
        assert_eq!(bytes.len(), 4096 + 3 * 40);
        let idx = IndexFile::parse(bytes).unwrap();
        assert_eq!(idx.kind(), IndexKind::Dynamic);
        assert_eq!(idx.ctime(), -5);
        assert_eq!(idx.entries(), 3);
        assert_eq!(idx.end(1), Some(5000));
        assert_eq!(idx.index_bytes(), 5001);
        assert_eq!(idx.chunk_size(), None);
        assert_eq!(idx.digests().collect::<Vec<_>>(), ds);

        let empty = IndexFile::parse(dynamic_index_bytes([0; 16], 0, &[])).unwrap();
        assert_eq!((empty.entries(), empty.index_bytes()), (0, 0));
    }

    fn err(bytes: Vec<u8>) -> String {
        IndexFile::parse(bytes)
            .err()
            .expect("must be refused")
            .to_string()
    }

    #[test]
    fn each_class_of_bad_index_is_named() {
        let good = fixed_index_bytes([1; 16], 1, 3 * 4096, 4096, &digests(3));

        let e = err(good[..4000].to_vec());
        assert!(
            e.contains("too short") && e.contains("4096") && e.contains("4000"),
            "{e}"
        );

        let mut b = good.clone();
        b[0] = 0;
        assert!(err(b).contains("bad magic"));

        let mut b = good.clone();
        b.truncate(b.len() - 1);
        let e = err(b);
        assert!(
            e.contains("body length") && e.contains("needs 3 digests"),
            "{e}"
        );

        let mut b = good.clone();
        b[72..80].copy_from_slice(&4095u64.to_le_bytes());
        assert!(err(b).contains("chunk size 4095 is not a power of two"));

        let mut b = good.clone();
        let last = b.len() - 1;
        b[last] ^= 0x40;
        let e = err(b);
        assert!(e.contains("index checksum mismatch"), "{e}");

        let zero = fixed_index_bytes([1; 16], 1, 0, 4096, &[]);
        assert!(err(zero).contains("no entries"));

        let dynamic = dynamic_index_bytes([1; 16], 1, &[(10, digests(1)[0])]);
        let mut b = dynamic.clone();
        b.push(0);
        assert!(err(b).contains("not a multiple of the 40-byte entry"));
        let mut b = dynamic;
        b[4096] ^= 1;
        assert!(err(b).contains("index checksum mismatch"));
    }

    fn streamed(path: &Path) -> IndexFile {
        let idx = IndexFile::open_with_limit(path, 0).unwrap();
        assert!(idx.is_streamed());
        idx
    }

    fn collect(idx: &IndexFile) -> Result<Vec<Digest>, FormatError> {
        let mut v = Vec::new();
        idx.for_each_digest(|d| -> Result<(), FormatError> {
            v.push(d);
            Ok(())
        })?;
        Ok(v)
    }

    #[test]
    fn a_streamed_body_gives_the_same_digests_and_is_verified_as_read() {
        let dir = tempfile::tempdir().unwrap();
        // More entries than one read buffer holds, of both kinds.
        let ds = digests(40_000);
        let fidx = dir.path().join("a.fidx");
        std::fs::write(
            &fidx,
            fixed_index_bytes([1; 16], 1, 40_000 * 4096 - 7, 4096, &ds),
        )
        .unwrap();
        let idx = streamed(&fidx);
        assert_eq!(
            (idx.entries(), idx.index_bytes()),
            (40_000, 40_000 * 4096 - 7)
        );
        assert_eq!(collect(&idx).unwrap(), ds);
        let entries: Vec<(u64, Digest)> = ds
            .iter()
            .enumerate()
            .map(|(i, d)| (i as u64 * 10 + 10, *d))
            .collect();
        let didx = dir.path().join("a.didx");
        let mut bytes = dynamic_index_bytes([2; 16], 1, &entries);
        std::fs::write(&didx, &bytes).unwrap();
        let idx = streamed(&didx);
        assert_eq!(idx.index_bytes(), 400_000);
        assert_eq!(collect(&idx).unwrap(), ds);

        // A flipped digest byte: every digest is still seen, then the checksum fails.
        let at = bytes.len() - 3;
        bytes[at] ^= 1;
        std::fs::write(&didx, &bytes).unwrap();
        let e = collect(&streamed(&didx)).unwrap_err().to_string();
        assert!(
            e.starts_with(&didx.display().to_string()) && e.contains("index checksum mismatch"),
            "{e}"
        );
        // An end offset going backwards: refused where it happens.
        let mut back = entries.clone();
        back[30_000].0 = 5;
        std::fs::write(&didx, dynamic_index_bytes([2; 16], 1, &back)).unwrap();
        let e = collect(&streamed(&didx)).unwrap_err().to_string();
        assert!(
            e.contains("entry 30000 ends at 5, the one before at 300000"),
            "{e}"
        );
        // In memory, the same rule at open.
        let e = IndexFile::open(&didx).err().unwrap().to_string();
        assert!(e.contains("entry 30000 ends at 5"), "{e}");
    }

    #[test]
    fn open_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drive-scsi0.img.fidx");
        let mut bytes = fixed_index_bytes([1; 16], 1, 4096, 4096, &digests(1));
        write_index_file(&path, &bytes).unwrap();
        assert!(!dir.path().join("drive-scsi0.img.tmp_fidx").exists());
        assert_eq!(IndexFile::open(&path).unwrap().entries(), 1);
        bytes[4096 + 5] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let e = IndexFile::open(&path).err().unwrap();
        assert!(
            e.to_string().starts_with(&path.display().to_string()),
            "{e}"
        );
        let missing = IndexFile::open(&dir.path().join("gone.fidx"))
            .err()
            .unwrap();
        assert!(missing.is_not_found());
    }
}
