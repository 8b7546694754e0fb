//! `Digest`: the 32-byte SHA-256 that names a chunk.
//!
//! For an unencrypted chunk the digest is the SHA-256 of the *uncompressed* chunk data (format
//! document 2.5), never of the blob file. It is written as 64 lowercase hex characters, which is
//! also the chunk's file name; the first two bytes pick one of the 65536 chunk directories.

use std::fmt;

use sha2::{Digest as _, Sha256};

/// A chunk digest. `Ord` is byte order, which is also the order of the hex names.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// SHA-256 of `data`: the name of an unencrypted chunk holding `data`.
    pub fn of(data: &[u8]) -> Digest {
        Digest(Sha256::digest(data).into())
    }

    /// Parses 64 hex characters (either case, as the phase-2 name filter accepts).
    pub fn from_hex(text: &str) -> Option<Digest> {
        Self::from_hex_bytes(text.as_bytes())
    }

    /// Like [`Digest::from_hex`], on raw bytes (directory entries are bytes, not strings).
    pub fn from_hex_bytes(text: &[u8]) -> Option<Digest> {
        if text.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(Digest(out))
    }

    /// The 64 lowercase hex characters, without allocating.
    pub fn hex_bytes(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        hex::encode_to_slice(self.0, &mut out).expect("64 bytes hold 32 bytes of hex");
        out
    }

    /// The 64 lowercase hex characters.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The chunk directory number: `digest[0]` then `digest[1]`, big-endian.
    pub fn prefix(&self) -> u16 {
        u16::from_be_bytes([self.0[0], self.0[1]])
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.hex_bytes();
        f.write_str(std::str::from_utf8(&hex).expect("hex is ASCII"))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_chunk_digest_matches_the_format_document() {
        // Section 1.3: SHA-256 of 4 MiB of zeros.
        let d = Digest::of(&vec![0u8; 4 << 20]);
        assert_eq!(
            d.to_hex(),
            "bb9f8df61474d25e71fa00722318cd387396ca1736605e1248821cc0de3d3af8"
        );
        assert_eq!(d.prefix(), 0xbb9f);
    }

    #[test]
    fn hex_round_trip_and_case() {
        let d = Digest::of(b"chunkscope");
        assert_eq!(Digest::from_hex(&d.to_hex()), Some(d));
        assert_eq!(Digest::from_hex(&d.to_hex().to_uppercase()), Some(d));
        assert_eq!(Digest::from_hex("abc"), None);
        assert_eq!(Digest::from_hex(&"g".repeat(64)), None);
        assert_eq!(d.to_string(), d.to_hex());
    }
}
