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

/// The four kinds of blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobKind {
    Uncompressed,
    Compressed,
    Encrypted,
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

    pub fn is_encrypted(self) -> bool {
        matches!(self, BlobKind::Encrypted | BlobKind::EncryptedCompressed)
    }

    pub fn header_size(self) -> usize {
        if self.is_encrypted() {
            ENCRYPTED_BLOB_HEADER_SIZE
        } else {
            BLOB_HEADER_SIZE
        }
    }

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
    pub kind: BlobKind,
    pub stored_crc: u32,
    pub computed_crc: u32,
    pub raw_size: usize,
    pub payload_size: usize,
}

impl BlobInfo {
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

/// Decodes an unencrypted blob to its data, verifying the CRC first.
pub fn decode(raw: &[u8]) -> Result<Vec<u8>, FormatError> {
    let info = inspect(raw)?;
    if !info.crc_ok() {
        return Err(FormatErrorKind::BlobCrc {
            stored: info.stored_crc,
            computed: info.computed_crc,
        }
        .into());
    }
    let payload = &raw[info.kind.header_size()..];
    match info.kind {
        BlobKind::Uncompressed => Ok(payload.to_vec()),
        BlobKind::Compressed => zstd::stream::decode_all(payload)
            .map_err(|e| FormatErrorKind::Decompress(e.to_string()).into()),
        BlobKind::Encrypted | BlobKind::EncryptedCompressed => {
            Err(FormatErrorKind::Encrypted.into())
        }
    }
}

/// Verifies a chunk blob fully: CRC, decoding, and that its data hashes to `digest`.
///
/// Encrypted chunks can only be checked up to the CRC (their digest includes a key).
/// Returns the kind on success.
pub fn verify_chunk(raw: &[u8], digest: &Digest) -> Result<BlobKind, FormatError> {
    let info = inspect(raw)?;
    if info.kind.is_encrypted() {
        if !info.crc_ok() {
            return Err(FormatErrorKind::BlobCrc {
                stored: info.stored_crc,
                computed: info.computed_crc,
            }
            .into());
        }
        return Ok(info.kind);
    }
    let data = decode(raw)?;
    let computed = Digest::of(&data);
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
