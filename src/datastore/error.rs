//! `FormatError`: what is wrong with a datastore file, and which file.
//!
//! Every error names the file (when known), the byte offset where that matters, and what was
//! expected against what was found, so "corrupt index" never has to be debugged with a hex
//! editor. `is_not_found` lets the phase-1 walk treat a vanished index as PBS does.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// An error reading or validating a datastore file.
#[derive(Debug)]
pub struct FormatError {
    /// The file, when the error came from one.
    pub path: Option<PathBuf>,
    /// What is wrong.
    pub kind: FormatErrorKind,
}

/// The classes of bad input, each with the numbers needed to act on it.
#[derive(Debug)]
pub enum FormatErrorKind {
    /// Opening or reading failed.
    Io(io::Error),
    /// Shorter than its fixed header.
    TooShort {
        /// What the file is (`fixed index`, `blob`, ...).
        what: &'static str,
        /// Bytes its header needs.
        need: u64,
        /// Bytes there are.
        found: u64,
    },
    /// The first 8 bytes are not a magic number of the expected kinds.
    BadMagic {
        /// The kinds that were acceptable.
        expected: &'static str,
        /// The bytes found.
        found: [u8; 8],
    },
    /// A fixed index whose chunk size is not a power of two.
    ChunkSizeNotPowerOfTwo {
        /// The header's chunk size.
        chunk_size: u64,
    },
    /// The body does not have the length the header implies.
    BodyLength {
        /// The lengths expected and found, in words.
        detail: String,
    },
    /// SHA-256 of the body differs from the header's `index_csum`.
    IndexChecksum {
        /// The header's checksum (hex).
        stored: String,
        /// The body's (hex).
        computed: String,
    },
    /// A dynamic index whose end offsets do not grow strictly.
    EndOffsets {
        /// The entry whose offset does not grow.
        entry: u64,
        /// The end offset of the entry before it.
        prev: u64,
        /// Its own end offset.
        end: u64,
    },
    /// Larger than the format allows (a chunk decodes to at most 16 MiB, a blob to 128 MiB).
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// The format's limit, bytes.
        limit: u64,
        /// The size found (or what it would exceed).
        found: String,
    },
    /// An index with no entries (PBS refuses to write or read them).
    NoEntries,
    /// CRC32 of a blob payload differs from the stored one.
    BlobCrc {
        /// The blob's stored CRC32.
        stored: u32,
        /// The payload's.
        computed: u32,
    },
    /// The payload could not be decompressed.
    Decompress(String),
    /// The blob is encrypted: its payload cannot be read without the key.
    Encrypted,
    /// A chunk whose data does not hash to its name.
    DigestMismatch {
        /// The chunk's name (the digest it should have).
        name: String,
        /// SHA-256 of its data.
        computed: String,
    },
    /// A manifest that is not the JSON PBS writes.
    Manifest(String),
}

impl FormatError {
    /// An error with no file attached yet (see [`FormatError::in_file`]).
    pub fn new(kind: FormatErrorKind) -> FormatError {
        FormatError { path: None, kind }
    }

    /// Attaches the file the error came from.
    pub fn in_file(mut self, path: &Path) -> FormatError {
        self.path = Some(path.to_path_buf());
        self
    }

    /// An I/O error on `path`.
    pub fn io(path: &Path, err: io::Error) -> FormatError {
        FormatError::new(FormatErrorKind::Io(err)).in_file(path)
    }

    /// The file does not exist (it may have vanished during a walk).
    pub fn is_not_found(&self) -> bool {
        matches!(&self.kind, FormatErrorKind::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

impl fmt::Display for FormatErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use FormatErrorKind::*;
        match self {
            Io(e) => write!(f, "{e}"),
            TooShort { what, need, found } => {
                write!(
                    f,
                    "file too short for a {what}: need at least {need} bytes, found {found}"
                )
            }
            BadMagic { expected, found } => {
                write!(
                    f,
                    "bad magic: expected {expected}, found {}",
                    hex::encode(found)
                )
            }
            ChunkSizeNotPowerOfTwo { chunk_size } => {
                write!(f, "chunk size {chunk_size} is not a power of two")
            }
            BodyLength { detail } => write!(f, "body length does not match the header: {detail}"),
            IndexChecksum { stored, computed } => write!(
                f,
                "index checksum mismatch: header says {stored}, body hashes to {computed}"
            ),
            NoEntries => write!(f, "index has no entries"),
            EndOffsets { entry, prev, end } => write!(
                f,
                "end offsets must grow strictly: entry {entry} ends at {end}, the one before at {prev}"
            ),
            TooLarge { what, limit, found } => write!(
                f,
                "{what} larger than the format allows: at most {limit} bytes, found {found}"
            ),
            BlobCrc { stored, computed } => write!(
                f,
                "blob CRC mismatch: stored {stored:08x}, payload has {computed:08x}"
            ),
            Decompress(e) => write!(f, "cannot decompress blob payload: {e}"),
            Encrypted => write!(
                f,
                "blob is encrypted; its payload cannot be read without the key"
            ),
            DigestMismatch { name, computed } => {
                write!(
                    f,
                    "digest mismatch: named {name}, data hashes to {computed}"
                )
            }
            Manifest(e) => write!(f, "bad manifest: {e}"),
        }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(p) => write!(f, "{}: {}", p.display(), self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}

impl std::error::Error for FormatError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            FormatErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<FormatErrorKind> for FormatError {
    fn from(kind: FormatErrorKind) -> Self {
        FormatError::new(kind)
    }
}

/// A problem with a file, for reports (`check`, `survey`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// The file (or, for a missing chunk, its digest).
    pub path: String,
    /// What is wrong with it.
    pub problem: String,
}
