//! DataBlob: the container of every chunk file and `*.blob` file (format document 2.4).
//!
//! ```text
//! offset  size  field
//! 0       8     magic (one of four kinds)
//! 8       4     CRC32 (IEEE) of the payload, u32 LE
//! 12      16    IV              (encrypted kinds only)
//! 28      16    AES-GCM tag     (encrypted kinds only)
//! 12|44   ..    payload: raw data, one zstd frame, or ciphertext
//! ```
//!
//! Writing produces the two unencrypted kinds (zstd level 1, kept only when not larger than the
//! input). Reading recognises all four; encrypted payloads are never decrypted here.

use super::error::{FormatError, FormatErrorKind};
use super::Digest;

/// "Proxmox Backup uncompressed blob v1.0"
pub const UNCOMPRESSED_BLOB_MAGIC_1_0: [u8; 8] = [66, 171, 56, 7, 190, 131, 112, 161];
/// "Proxmox Backup zstd compressed blob v1.0"
pub const COMPRESSED_BLOB_MAGIC_1_0: [u8; 8] = [49, 185, 88, 66, 111, 182, 163, 127];
/// "Proxmox Backup encrypted blob v1.0"
pub const ENCRYPTED_BLOB_MAGIC_1_0: [u8; 8] = [123, 103, 133, 190, 34, 45, 76, 240];
/// "Proxmox Backup zstd compressed encrypted blob v1.0"
pub const ENCR_COMPR_BLOB_MAGIC_1_0: [u8; 8] = [230, 89, 27, 191, 11, 191, 216, 11];

/// Header size of unencrypted blobs.
pub const BLOB_HEADER_SIZE: usize = 12;
/// Header size of encrypted blobs (adds IV and tag).
pub const ENCRYPTED_BLOB_HEADER_SIZE: usize = 44;

/// A chunk's data: at most 16 MiB (format document 1.3, the server's upload limit).
pub const MAX_CHUNK_SIZE: u64 = 16 << 20;
/// A chunk file: its data plus the largest header.
pub const MAX_CHUNK_FILE_SIZE: u64 = MAX_CHUNK_SIZE + ENCRYPTED_BLOB_HEADER_SIZE as u64;
/// A blob's data: at most `MAX_BLOB_SIZE` (format document 2.4).
pub const MAX_BLOB_SIZE: u64 = 128 << 20;
/// A blob file: its data plus the largest header.
pub const MAX_BLOB_FILE_SIZE: u64 = MAX_BLOB_SIZE + ENCRYPTED_BLOB_HEADER_SIZE as u64;

/// The four kinds of blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobKind {
    /// The data as it is.
    Uncompressed,
    /// zstd-compressed data.
    Compressed,
    /// AES-256-GCM-encrypted data (IV and tag in the header).
    Encrypted,
    /// zstd-compressed, then encrypted.
    EncryptedCompressed,
}

impl BlobKind {
    /// The kind a magic number names.
    pub fn from_magic(magic: &[u8]) -> Option<BlobKind> {
        match magic {
            m if m == UNCOMPRESSED_BLOB_MAGIC_1_0 => Some(BlobKind::Uncompressed),
            m if m == COMPRESSED_BLOB_MAGIC_1_0 => Some(BlobKind::Compressed),
            m if m == ENCRYPTED_BLOB_MAGIC_1_0 => Some(BlobKind::Encrypted),
            m if m == ENCR_COMPR_BLOB_MAGIC_1_0 => Some(BlobKind::EncryptedCompressed),
            _ => None,
        }
    }

    /// Whether the payload is encrypted (its header is 44 bytes).
    pub fn is_encrypted(self) -> bool {
        matches!(self, BlobKind::Encrypted | BlobKind::EncryptedCompressed)
    }

    /// The header's size, bytes.
    pub fn header_size(self) -> usize {
        if self.is_encrypted() {
            ENCRYPTED_BLOB_HEADER_SIZE
        } else {
            BLOB_HEADER_SIZE
        }
    }

    /// The kind in words, for messages.
    pub fn name(self) -> &'static str {
        match self {
            BlobKind::Uncompressed => "uncompressed",
            BlobKind::Compressed => "zstd compressed",
            BlobKind::Encrypted => "encrypted",
            BlobKind::EncryptedCompressed => "zstd compressed encrypted",
        }
    }
}

/// A parsed blob header; `crc_ok` says whether the payload matches the stored CRC.
#[derive(Clone, Debug)]
pub struct BlobInfo {
    /// Its kind.
    pub kind: BlobKind,
    /// The CRC32 the header stores.
    pub stored_crc: u32,
    /// The CRC32 of the payload.
    pub computed_crc: u32,
    /// The blob's size, bytes (header included).
    pub raw_size: usize,
    /// The payload's size, bytes (after the header).
    pub payload_size: usize,
}

impl BlobInfo {
    /// Whether the payload matches the stored CRC.
    pub fn crc_ok(&self) -> bool {
        self.stored_crc == self.computed_crc
    }
}

/// Encodes `data` as a blob; compressed (zstd level 1) when that is not larger.
pub fn encode(data: &[u8], compress: bool) -> Vec<u8> {
    if compress {
        if let Ok(compressed) = zstd::bulk::compress(data, 1) {
            if compressed.len() <= data.len() {
                return assemble(COMPRESSED_BLOB_MAGIC_1_0, &compressed);
            }
        }
    }
    assemble(UNCOMPRESSED_BLOB_MAGIC_1_0, data)
}

fn assemble(magic: [u8; 8], payload: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(BLOB_HEADER_SIZE + payload.len());
    raw.extend_from_slice(&magic);
    raw.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    raw.extend_from_slice(payload);
    raw
}

/// Parses the header of any blob kind and checks the CRC; does not decode.
pub fn inspect(raw: &[u8]) -> Result<BlobInfo, FormatError> {
    if raw.len() < BLOB_HEADER_SIZE {
        return Err(FormatErrorKind::TooShort {
            what: "blob header",
            need: BLOB_HEADER_SIZE as u64,
            found: raw.len() as u64,
        }
        .into());
    }
    let kind = BlobKind::from_magic(&raw[..8]).ok_or_else(|| FormatErrorKind::BadMagic {
        expected: "a blob magic",
        found: raw[..8].try_into().expect("8 bytes"),
    })?;
    let header = kind.header_size();
    if raw.len() < header {
        return Err(FormatErrorKind::TooShort {
            what: "encrypted blob header",
            need: header as u64,
            found: raw.len() as u64,
        }
        .into());
    }
    let stored_crc = u32::from_le_bytes(raw[8..12].try_into().expect("4 bytes"));
    Ok(BlobInfo {
        kind,
        stored_crc,
        computed_crc: crc32fast::hash(&raw[header..]),
        raw_size: raw.len(),
        payload_size: raw.len() - header,
    })
}

/// Reads a blob or chunk file whole, refusing anything that is not a regular file or is larger
/// than `limit` bytes (one of the `MAX_*_FILE_SIZE` constants) before reading it.
pub fn read_file(path: &std::path::Path, limit: u64) -> Result<Vec<u8>, FormatError> {
    crate::fsutil::read_regular_bounded(path, limit).map_err(|e| {
        if e.kind() == std::io::ErrorKind::FileTooLarge {
            FormatError::new(FormatErrorKind::TooLarge {
                what: "blob file",
                limit,
                found: e.to_string(),
            })
            .in_file(path)
        } else {
            FormatError::io(path, e)
        }
    })
}

/// The CRC check every decode starts with: the header, or `BlobCrc` if the payload does not
/// match the stored CRC.
pub fn verify_crc(raw: &[u8]) -> Result<BlobInfo, FormatError> {
    let info = inspect(raw)?;
    if !info.crc_ok() {
        return Err(FormatErrorKind::BlobCrc {
            stored: info.stored_crc,
            computed: info.computed_crc,
        }
        .into());
    }
    Ok(info)
}

/// The smallest zstd window log that covers `limit` bytes: a frame asking for a larger window
/// cannot be a valid encoding of data that size, and is refused before any allocation.
fn window_log(limit: u64) -> u32 {
    (64 - limit.saturating_sub(1).leading_zeros()).clamp(10, 31)
}

/// Streams the data of an unencrypted blob through `f` in pieces, verifying the CRC first and
/// refusing (`TooLarge`, naming `what`) data longer than `limit` bytes as soon as it gets there,
/// so a zstd bomb costs at most a piece and the decoder's window. Returns the data's length.
pub fn decode_each(
    raw: &[u8],
    limit: u64,
    what: &'static str,
    f: &mut dyn FnMut(&[u8]),
) -> Result<u64, FormatError> {
    use std::io::Read;
    let info = verify_crc(raw)?;
    let payload = &raw[info.kind.header_size()..];
    let too_large =
        |found: String| FormatError::new(FormatErrorKind::TooLarge { what, limit, found });
    match info.kind {
        BlobKind::Uncompressed => {
            if payload.len() as u64 > limit {
                return Err(too_large(format!("{} bytes", payload.len())));
            }
            f(payload);
            Ok(payload.len() as u64)
        }
        BlobKind::Compressed => {
            let bad =
                |e: std::io::Error| FormatError::new(FormatErrorKind::Decompress(e.to_string()));
            let mut dec = zstd::stream::read::Decoder::with_buffer(payload).map_err(bad)?;
            dec.window_log_max(window_log(limit)).map_err(bad)?;
            let mut buf = vec![0u8; 128 << 10];
            let mut total = 0u64;
            loop {
                let n = dec.read(&mut buf).map_err(bad)?;
                if n == 0 {
                    return Ok(total);
                }
                total += n as u64;
                if total > limit {
                    return Err(too_large(format!(
                        "more than that (decompression stopped at {total} bytes)"
                    )));
                }
                f(&buf[..n]);
            }
        }
        BlobKind::Encrypted | BlobKind::EncryptedCompressed => {
            Err(FormatErrorKind::Encrypted.into())
        }
    }
}

/// Decodes an unencrypted blob to its data (at most `limit` bytes, see [`decode_each`]).
pub fn decode_bounded(raw: &[u8], limit: u64, what: &'static str) -> Result<Vec<u8>, FormatError> {
    let mut data = Vec::new();
    decode_each(raw, limit, what, &mut |piece| data.extend_from_slice(piece))?;
    Ok(data)
}

/// Decodes an unencrypted blob to its data, verifying the CRC first; at most
/// [`MAX_BLOB_SIZE`] bytes.
pub fn decode(raw: &[u8]) -> Result<Vec<u8>, FormatError> {
    decode_bounded(raw, MAX_BLOB_SIZE, "blob data")
}

/// Verifies a chunk blob fully: CRC, decoding (at most [`MAX_CHUNK_SIZE`] bytes, hashed as
/// they come, never held whole), and that its data hashes to `digest`.
///
/// Encrypted chunks can only be checked up to the CRC (their digest includes a key).
/// Returns the kind on success.
pub fn verify_chunk(raw: &[u8], digest: &Digest) -> Result<BlobKind, FormatError> {
    use sha2::Digest as _;
    let info = verify_crc(raw)?;
    if info.kind.is_encrypted() {
        return Ok(info.kind);
    }
    let mut hasher = sha2::Sha256::new();
    decode_each(raw, MAX_CHUNK_SIZE, "chunk data", &mut |piece| {
        hasher.update(piece)
    })?;
    let computed = Digest(hasher.finalize().into());
    if computed != *digest {
        return Err(FormatErrorKind::DigestMismatch {
            name: digest.to_hex(),
            computed: computed.to_hex(),
        }
        .into());
    }
    Ok(info.kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest as _, Sha256};

    #[test]
    fn magics_are_sha256_prefixes_of_their_labels() {
        let m =
            |label: &str| -> [u8; 8] { Sha256::digest(label.as_bytes())[..8].try_into().unwrap() };
        assert_eq!(
            m("Proxmox Backup uncompressed blob v1.0"),
            UNCOMPRESSED_BLOB_MAGIC_1_0
        );
        assert_eq!(
            m("Proxmox Backup zstd compressed blob v1.0"),
            COMPRESSED_BLOB_MAGIC_1_0
        );
        assert_eq!(
            m("Proxmox Backup encrypted blob v1.0"),
            ENCRYPTED_BLOB_MAGIC_1_0
        );
        assert_eq!(
            m("Proxmox Backup zstd compressed encrypted blob v1.0"),
            ENCR_COMPR_BLOB_MAGIC_1_0
        );
    }

    #[test]
    fn round_trip_both_kinds() {
        let compressible = vec![7u8; 4096];
        let raw = encode(&compressible, true);
        assert_eq!(&raw[..8], &COMPRESSED_BLOB_MAGIC_1_0);
        assert!(raw.len() < 200);
        assert_eq!(decode(&raw).unwrap(), compressible);

        // Incompressible data falls back to the uncompressed kind.
        let mut noise = vec![0u8; 4096];
        crate::rng::SplitMix(42).fill(&mut noise);
        let raw = encode(&noise, true);
        assert_eq!(&raw[..8], &UNCOMPRESSED_BLOB_MAGIC_1_0);
        assert_eq!(raw.len(), noise.len() + 12);
        assert_eq!(decode(&raw).unwrap(), noise);

        let raw = encode(&compressible, false);
        assert_eq!(&raw[..8], &UNCOMPRESSED_BLOB_MAGIC_1_0);
        assert_eq!(
            u32::from_le_bytes(raw[8..12].try_into().unwrap()),
            crc32fast::hash(&compressible)
        );
        assert_eq!(
            verify_chunk(&raw, &Digest::of(&compressible)).unwrap(),
            BlobKind::Uncompressed
        );
    }

    #[test]
    fn bad_blobs_are_named() {
        let data = b"hello chunk".repeat(50);
        let mut raw = encode(&data, true);
        let last = raw.len() - 1;
        raw[last] ^= 1;
        let e = decode(&raw).unwrap_err().to_string();
        assert!(e.contains("CRC mismatch"), "{e}");

        let e = decode(&raw[..5]).unwrap_err().to_string();
        assert!(
            e.contains("too short") && e.contains("need at least 12"),
            "{e}"
        );

        let mut raw = encode(&data, true);
        raw[0] ^= 1;
        assert!(decode(&raw).unwrap_err().to_string().contains("bad magic"));

        let raw = encode(&data, true);
        let e = verify_chunk(&raw, &Digest::of(b"other"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("digest mismatch"), "{e}");
    }

    #[test]
    fn encrypted_blobs_are_recognised_not_decoded() {
        let mut raw = ENCRYPTED_BLOB_MAGIC_1_0.to_vec();
        let ciphertext = [5u8; 100];
        raw.extend_from_slice(&crc32fast::hash(&ciphertext).to_le_bytes());
        raw.extend_from_slice(&[1u8; 32]); // IV + tag
        raw.extend_from_slice(&ciphertext);
        let info = inspect(&raw).unwrap();
        assert_eq!(info.kind, BlobKind::Encrypted);
        assert!(info.crc_ok());
        assert_eq!(info.payload_size, 100);
        assert!(decode(&raw).unwrap_err().to_string().contains("encrypted"));
        assert_eq!(
            verify_chunk(&raw, &Digest::default()).unwrap(),
            BlobKind::Encrypted
        );
        let e = inspect(&raw[..20]).unwrap_err().to_string();
        assert!(e.contains("need at least 44"), "{e}");
    }
}
