//! Where things live in a datastore, and what the names inside `.chunks/XXXX/` mean.
//!
//! The name classes follow the phase-2 iterator (format document 3.4, step 2) exactly: a name
//! is considered only if its first 64 characters are ASCII hex (either case); then exactly 64
//! characters is a chunk, `<hex>.<digit>.bad` is a bad chunk, `<hex>.using` is an S3 marker, and
//! everything else — `*.tmp_XXXXXX` leftovers of an interrupted insert included — is ignored.

use std::path::{Path, PathBuf};

use super::Digest;

/// The chunk store directory below the datastore root.
pub const CHUNK_DIR: &str = ".chunks";
/// Number of chunk directories, `0000` .. `ffff`, all created with the datastore.
pub const CHUNK_SUBDIRS: usize = 1 << 16;
/// The chunk store's inter-process lock file (fcntl record locks, section 1.6).
pub const LOCK_FILE: &str = ".lock";
/// Result of the last successful GC (section 1.7).
pub const GC_STATUS_FILE: &str = ".gc-status";
/// Manifest of a snapshot; a snapshot without it is unfinished.
pub const MANIFEST_BLOB_NAME: &str = "index.json.blob";
/// Owner file of a backup group.
pub const GROUP_OWNER_FILE: &str = "owner";
/// Marker of a protected snapshot.
pub const PROTECTED_MARKER: &str = ".protected";
/// Namespace children live under `<ns>/ns/<name>`.
pub const NAMESPACE_DIR: &str = "ns";
/// Deepest namespace level below the root.
pub const MAX_NAMESPACE_DEPTH: usize = 7;
/// Backup types, in the order PBS knows them.
pub const BACKUP_TYPES: [&str; 3] = ["vm", "ct", "host"];

/// The 4-character directory name for a prefix: lowercase, zero padded.
pub fn chunk_subdir_name(prefix: u16) -> String {
    format!("{prefix:04x}")
}

/// `.chunks/<first 4 hex>/<64 hex>`, relative to the datastore root.
pub fn chunk_rel_path(digest: &Digest) -> PathBuf {
    let hex = digest.to_hex();
    let mut p = PathBuf::from(CHUNK_DIR);
    p.push(&hex[..4]);
    p.push(&hex);
    p
}

/// The absolute chunk path below `root`.
pub fn chunk_path(root: &Path, digest: &Digest) -> PathBuf {
    root.join(chunk_rel_path(digest))
}

/// `<chunk>.<n>.bad`, the name verify gives a corrupt chunk (section 1.4).
pub fn bad_chunk_rel_path(digest: &Digest, n: u8) -> PathBuf {
    debug_assert!(n <= 9);
    let mut p = chunk_rel_path(digest);
    p.set_file_name(format!("{}.{n}.bad", digest.to_hex()));
    p
}

/// What a name inside a chunk directory is, to the GC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkName {
    /// Exactly 64 hex characters.
    Chunk(Digest),
    /// `<hex>.<n>.bad`.
    Bad(Digest, u8),
    /// `<hex>.using` (S3 datastores only).
    Using(Digest),
    /// Anything else, including `<hex>.tmp_XXXXXX` from an interrupted insert.
    Ignored,
}

impl ChunkName {
    /// Classifies a directory entry name as the phase-2 iterator does.
    pub fn classify(name: &[u8]) -> ChunkName {
        if name.len() < 64 {
            return ChunkName::Ignored;
        }
        let Some(digest) = Digest::from_hex_bytes(&name[..64]) else {
            return ChunkName::Ignored;
        };
        match name.len() {
            64 => ChunkName::Chunk(digest),
            70 if name[64] == b'.'
                && name[65].is_ascii_digit()
                && name[66] == b'.'
                && &name[67..] == b"bad" =>
            {
                ChunkName::Bad(digest, name[65] - b'0')
            }
            70 if name[64] == b'.' && &name[65..] == b"using" => ChunkName::Using(digest),
            _ => ChunkName::Ignored,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_paths() {
        let d = Digest::of(b"x");
        let hex = d.to_hex();
        assert_eq!(
            chunk_rel_path(&d),
            PathBuf::from(format!(".chunks/{}/{hex}", &hex[..4]))
        );
        assert_eq!(chunk_subdir_name(d.prefix()), hex[..4]);
        assert_eq!(
            bad_chunk_rel_path(&d, 3),
            PathBuf::from(format!(".chunks/{}/{hex}.3.bad", &hex[..4]))
        );
        assert_eq!(chunk_subdir_name(0x00a1), "00a1");
    }

    #[test]
    fn name_classes_follow_the_phase2_filter() {
        let d = Digest::of(b"y");
        let hex = d.to_hex();
        let c = |s: String| ChunkName::classify(s.as_bytes());
        assert_eq!(c(hex.clone()), ChunkName::Chunk(d));
        assert_eq!(c(hex.to_uppercase()), ChunkName::Chunk(d));
        assert_eq!(c(format!("{hex}.0.bad")), ChunkName::Bad(d, 0));
        assert_eq!(c(format!("{hex}.9.bad")), ChunkName::Bad(d, 9));
        assert_eq!(c(format!("{hex}.x.bad")), ChunkName::Ignored);
        assert_eq!(c(format!("{hex}.using")), ChunkName::Using(d));
        assert_eq!(c(format!("{hex}.tmp_a1B2c3")), ChunkName::Ignored);
        assert_eq!(c(format!("{hex}.0.bad.tmp")), ChunkName::Ignored);
        assert_eq!(c(hex[..63].to_string()), ChunkName::Ignored);
        assert_eq!(c(format!("{}z", &hex[..63])), ChunkName::Ignored);
        assert_eq!(c(format!("{hex}x")), ChunkName::Ignored);
    }
}
