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
    Fixed,
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

    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Fixed => "fixed index (fidx)",
            IndexKind::Dynamic => "dynamic index (didx)",
        }
    }
}

/// A validated index file held in memory (header and body as read).
#[derive(Clone)]
pub struct IndexFile {
    kind: IndexKind,
    bytes: Vec<u8>,
}

impl IndexFile {
    /// Reads and validates an index file; the kind comes from its magic.
    ///
    /// Index files are not chunks, so their atime is not GC state; they are still opened with
    /// `O_NOATIME` where permitted so that inspection leaves no trace.
    pub fn open(path: &Path) -> Result<IndexFile, FormatError> {
        let bytes = crate::fsutil::read_noatime(path).map_err(|e| FormatError::io(path, e))?;
        IndexFile::parse(bytes).map_err(|e| e.in_file(path))
    }

    /// Validates `bytes` as an index of either kind, checksum included.
    pub fn parse(bytes: Vec<u8>) -> Result<IndexFile, FormatError> {
        let index = IndexFile::parse_unverified(bytes)?;
        let computed = index.compute_csum();
        if computed != index.stored_csum() {
            return Err(FormatErrorKind::IndexChecksum {
                stored: hex::encode(index.stored_csum()),
                computed: hex::encode(computed),
            }
            .into());
        }
        Ok(index)
    }

    /// Validates the structure (length, magic, chunk size, body length) but not the checksum,
    /// for tools that report a mismatch rather than refuse the file.
    pub fn parse_unverified(bytes: Vec<u8>) -> Result<IndexFile, FormatError> {
        let len = bytes.len() as u64;
        if bytes.len() < INDEX_HEADER_SIZE {
            return Err(FormatErrorKind::TooShort {
                what: "index header",
                need: INDEX_HEADER_SIZE as u64,
                found: len,
            }
            .into());
        }
        let kind = match &bytes[..8] {
            m if m == FIXED_SIZED_CHUNK_INDEX_1_0 => IndexKind::Fixed,
            m if m == DYNAMIC_SIZED_CHUNK_INDEX_1_0 => IndexKind::Dynamic,
            m => {
                return Err(FormatErrorKind::BadMagic {
                    expected:
                        "a fixed (2f7f41ed91fd0fcd) or dynamic (1c914ea519bab3cd) index magic",
                    found: m.try_into().expect("8 bytes"),
                }
                .into())
            }
        };
        let body = len - INDEX_HEADER_SIZE as u64;
        let index = IndexFile { kind, bytes };
        match kind {
            IndexKind::Fixed => {
                let (size, chunk_size) = (index.fixed_size(), index.fixed_chunk_size());
                if !chunk_size.is_power_of_two() {
                    return Err(FormatErrorKind::ChunkSizeNotPowerOfTwo { chunk_size }.into());
                }
                let entries = size.div_ceil(chunk_size);
                if body != entries * 32 {
                    return Err(FormatErrorKind::BodyLength {
                        detail: format!(
                            "size {size} / chunk size {chunk_size} needs {entries} digests \
                             ({} bytes), body has {body} bytes",
                            entries * 32
                        ),
                    }
                    .into());
                }
                if entries == 0 {
                    return Err(FormatErrorKind::NoEntries.into());
                }
            }
            IndexKind::Dynamic => {
                if body % DYNAMIC_ENTRY_SIZE as u64 != 0 {
                    return Err(FormatErrorKind::BodyLength {
                        detail: format!(
                            "{body} bytes is not a multiple of the {DYNAMIC_ENTRY_SIZE}-byte entry"
                        ),
                    }
                    .into());
                }
            }
        }
        Ok(index)
    }

    pub fn kind(&self) -> IndexKind {
        self.kind
    }

    pub fn uuid(&self) -> [u8; 16] {
        self.bytes[8..24].try_into().expect("16 bytes")
    }

    pub fn ctime(&self) -> i64 {
        i64::from_le_bytes(self.bytes[24..32].try_into().expect("8 bytes"))
    }

    /// The `index_csum` field of the header.
    pub fn stored_csum(&self) -> [u8; 32] {
        self.bytes[32..64].try_into().expect("32 bytes")
    }

    /// SHA-256 of the body, what `index_csum` must be.
    pub fn compute_csum(&self) -> [u8; 32] {
        Sha256::digest(self.body()).into()
    }

    fn body(&self) -> &[u8] {
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
        self.body().len() / self.kind.entry_size()
    }

    /// The digest of entry `i`.
    pub fn digest(&self, i: usize) -> Digest {
        let at = INDEX_HEADER_SIZE
            + i * self.kind.entry_size()
            + if self.kind == IndexKind::Dynamic {
                8
            } else {
                0
            };
        Digest(self.bytes[at..at + 32].try_into().expect("32 bytes"))
    }

    /// All digests, in index order (the order phase 1 touches them).
    pub fn digests(&self) -> impl ExactSizeIterator<Item = Digest> + '_ {
        (0..self.entries()).map(|i| self.digest(i))
    }

    /// The end offset of entry `i` (didx only).
    pub fn end(&self, i: usize) -> Option<u64> {
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
            IndexKind::Dynamic => match self.entries() {
                0 => 0,
                n => self.end(n - 1).expect("dynamic"),
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
