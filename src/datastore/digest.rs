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

    /// The digest named by exactly 64 lowercase hex characters (a chunk file's name as PBS
    /// writes it), else `None`; one pass through a table, for the trace writer, which
    /// classifies every name it records.
    #[inline]
    pub fn from_lowercase_hex(text: &[u8]) -> Option<Digest> {
        let text: &[u8; 64] = text.try_into().ok()?;
        let mut out = [0u8; 32];
        let mut bad = 0u8;
        for (o, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
            let (hi, lo) = (LOWER_HEX[pair[0] as usize], LOWER_HEX[pair[1] as usize]);
            bad |= hi | lo;
            *o = (hi << 4) | (lo & 0x0f);
        }
        (bad & NOT_HEX == 0).then_some(Digest(out))
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

/// A lowercase hex digit's value, [`NOT_HEX`] for any other byte.
const LOWER_HEX: [u8; 256] = {
    let mut t = [NOT_HEX; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = match c as u8 {
            b'0'..=b'9' => c as u8 - b'0',
            b'a'..=b'f' => c as u8 - b'a' + 10,
            _ => NOT_HEX,
        };
        c += 1;
    }
    t
};
/// The mark of a byte that is no lowercase hex digit (no digit's value has these bits).
const NOT_HEX: u8 = 0xf0;

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

    /// Lowercase hex only, every byte checked, the same value as the general decoder.
    #[test]
    fn lowercase_hex_is_exact() {
        for i in 0..200u32 {
            let d = Digest::of(&i.to_le_bytes());
            let text = d.hex_bytes();
            assert_eq!(Digest::from_lowercase_hex(&text), Some(d));
            assert_eq!(Digest::from_lowercase_hex(&text[..63]), None);
            let upper = d.to_hex().to_uppercase();
            let has_letter = upper.bytes().any(|c| c.is_ascii_alphabetic());
            assert_eq!(
                Digest::from_lowercase_hex(upper.as_bytes()).is_none(),
                has_letter
            );
            for at in [0, 1, 31, 62, 63] {
                for bad in [b'g', b'G', b'/', b':', b'`', 0, 0xff, b'F'] {
                    let mut t = text;
                    t[at] = bad;
                    assert_eq!(Digest::from_lowercase_hex(&t), None, "{bad} at {at}");
                }
            }
        }
    }
}
