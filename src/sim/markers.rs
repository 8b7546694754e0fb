//! The empty marker files of a simulated S3 datastore's cache that are no chunk of the
//! build: the `.using` markers phase 1 leaves for a referenced chunk with no local file (and
//! those a survey found), the zero-length markers phase 2 puts in their place, and the `.bad`
//! markers of bad copies (format document 1.5, 3.7).
//!
//! A marker has a name and an inode (new ones take the numbers after every inode of the
//! build, in the order they are made) and the atime of its making. The simulated store finds
//! one by name (lookup, stat, unlink), and its directory's listings return it after the
//! chunks of the build, in inode order.

use crate::datastore::Digest;

/// A marker's name: a digest and what follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MarkerName {
    /// Its chunk's digest.
    pub digest: Digest,
    /// What follows the digest.
    pub kind: MarkerKind,
}

/// What follows a marker's digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MarkerKind {
    /// Nothing: a zero-length marker of a chunk whose data is in the bucket.
    Chunk,
    /// `.using`.
    Using,
    /// `.N.bad`.
    Bad(u8),
}

impl MarkerName {
    /// The marker named `name` (`<hex>`, `<hex>.using`, `<hex>.N.bad`), `None` for any
    /// other name.
    pub fn parse(name: &[u8]) -> Option<MarkerName> {
        let digest = Digest::from_hex_bytes(name.get(..64)?)?;
        let kind = match &name[64..] {
            b"" => MarkerKind::Chunk,
            b".using" => MarkerKind::Using,
            [b'.', n @ b'0'..=b'9', b'.', b'b', b'a', b'd'] => MarkerKind::Bad(n - b'0'),
            _ => return None,
        };
        Some(MarkerName { digest, kind })
    }

    /// The marker of `digest` with `suffix` (as [`crate::store::ChunkStore::create_marker`]
    /// takes it).
    pub fn with_suffix(digest: &Digest, suffix: &[u8]) -> Option<MarkerName> {
        let mut name = [0u8; 64 + 6];
        let len = 64 + suffix.len();
        if len > name.len() {
            return None;
        }
        hex::encode_to_slice(digest.0, &mut name[..64]).expect("64 bytes for 32");
        name[64..len].copy_from_slice(suffix);
        MarkerName::parse(&name[..len])
    }
}

/// A marker there: its inode and atime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    /// Its inode number.
    pub ino: u64,
    /// Its atime, epoch seconds.
    pub atime: i64,
}

/// The markers there, and the inode the next one takes.
#[derive(Clone, Debug, Default)]
pub struct Markers {
    by_name: hashbrown::HashMap<MarkerName, Marker>,
    /// Per chunk directory with markers, their inodes and names.
    by_dir: hashbrown::HashMap<u16, std::collections::BTreeMap<u64, MarkerName>>,
    next_ino: u64,
}

impl Markers {
    /// The markers `names` with their atimes, numbered from `first_ino` on, as further ones
    /// will be.
    pub fn new(first_ino: u64, names: &[(MarkerName, i64)]) -> Markers {
        let mut m = Markers {
            by_name: hashbrown::HashMap::with_capacity(names.len()),
            by_dir: Default::default(),
            next_ino: first_ino,
        };
        for &(n, atime) in names {
            m.create(n, atime);
        }
        m
    }

    /// Sets the atime of the marker `name`; whether it is there.
    pub fn set_atime(&mut self, name: &MarkerName, atime: i64) -> bool {
        match self.by_name.get_mut(name) {
            Some(m) => {
                m.atime = atime;
                true
            }
            None => false,
        }
    }

    /// The marker `name`, if there.
    #[inline]
    pub fn get(&self, name: &MarkerName) -> Option<Marker> {
        if self.by_name.is_empty() {
            return None;
        }
        self.by_name.get(name).copied()
    }

    /// Makes the marker `name` with `atime`; `None` if it is there already.
    pub fn create(&mut self, name: MarkerName, atime: i64) -> Option<Marker> {
        if self.by_name.contains_key(&name) {
            return None;
        }
        let m = Marker {
            ino: self.next_ino,
            atime,
        };
        self.next_ino += 1;
        self.by_name.insert(name, m);
        self.by_dir
            .entry(name.digest.prefix())
            .or_default()
            .insert(m.ino, name);
        Some(m)
    }

    /// Removes the marker `name`; whether it was there.
    pub fn remove(&mut self, name: &MarkerName) -> bool {
        let Some(m) = self.by_name.remove(name) else {
            return false;
        };
        let prefix = name.digest.prefix();
        if let Some(dir) = self.by_dir.get_mut(&prefix) {
            dir.remove(&m.ino);
            if dir.is_empty() {
                self.by_dir.remove(&prefix);
            }
        }
        true
    }

    /// The markers of chunk directory `prefix` whose inode is above `after`, in inode order.
    pub fn in_dir_after(
        &self,
        prefix: u16,
        after: u64,
    ) -> impl Iterator<Item = (u64, MarkerName)> + '_ {
        self.by_dir.get(&prefix).into_iter().flat_map(move |d| {
            d.range(after.saturating_add(1)..)
                .map(|(&ino, &name)| (ino, name))
        })
    }
}

impl MarkerName {
    /// Its name as a file's (`<hex>`, `<hex>.using`, `<hex>.N.bad`) into `buf`; the bytes.
    pub fn write<'a>(&self, buf: &'a mut [u8; 70]) -> &'a [u8] {
        hex::encode_to_slice(self.digest.0, &mut buf[..64]).expect("64 bytes for 32");
        let suffix: &[u8] = match self.kind {
            MarkerKind::Chunk => b"",
            MarkerKind::Using => b".using",
            MarkerKind::Bad(n) => {
                buf[64..70].copy_from_slice(&[b'.', b'0' + n, b'.', b'b', b'a', b'd']);
                return &buf[..70];
            }
        };
        buf[64..64 + suffix.len()].copy_from_slice(suffix);
        &buf[..64 + suffix.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names parse as the store names them; markers are made once, numbered in turn, and go.
    #[test]
    fn markers_are_found_by_name_made_once_and_removed() {
        let d = Digest([0xab; 32]);
        let hex = d.to_hex();
        let name = |s: &str| MarkerName::parse(format!("{hex}{s}").as_bytes());
        assert_eq!(name("").unwrap().kind, MarkerKind::Chunk);
        assert_eq!(name(".using").unwrap().kind, MarkerKind::Using);
        assert_eq!(name(".3.bad").unwrap().kind, MarkerKind::Bad(3));
        assert_eq!(name(".tmp_1234"), None);
        assert_eq!(MarkerName::parse(b"abc"), None);
        assert_eq!(MarkerName::with_suffix(&d, b".using"), name(".using"));
        assert_eq!(MarkerName::with_suffix(&d, b".12345678.bad"), None);

        let using = name(".using").unwrap();
        let mut m = Markers::new(100, &[(using, 0)]);
        assert_eq!(m.get(&using), Some(Marker { ino: 100, atime: 0 }));
        let chunk = name("").unwrap();
        assert_eq!(m.get(&chunk), None);
        assert_eq!(m.create(chunk, 7), Some(Marker { ino: 101, atime: 7 }));
        assert_eq!(m.create(chunk, 8), None, "made once");
        assert!(m.set_atime(&chunk, 8));
        assert_eq!(m.get(&chunk).unwrap().atime, 8);
        assert!(!m.set_atime(&name(".1.bad").unwrap(), 8));
        let listed = |m: &Markers, after| m.in_dir_after(0xabab, after).collect::<Vec<_>>();
        assert_eq!(listed(&m, 0), [(100, using), (101, chunk)]);
        assert_eq!(listed(&m, 100), [(101, chunk)]);
        assert!(m.remove(&using) && !m.remove(&using));
        assert_eq!(m.get(&using), None);
        assert_eq!(listed(&m, 0), [(101, chunk)]);
        assert_eq!(m.create(using, 9).unwrap().ino, 102);
        let mut buf = [0u8; 70];
        for n in [using, chunk, name(".3.bad").unwrap()] {
            assert_eq!(MarkerName::parse(n.write(&mut buf)), Some(n));
        }
    }
}
