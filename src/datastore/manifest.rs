//! The snapshot manifest `index.json.blob` (format document 2.6): a DataBlob holding JSON that
//! lists each file of the snapshot with its size and SHA-256.
//!
//! For an index the listed `size`/`csum` are its content size and body checksum; for a blob,
//! the raw file length and the SHA-256 of the raw file.

use serde::{Deserialize, Serialize};

use super::blob;
use super::error::{FormatError, FormatErrorKind};

/// The largest manifest JSON read: PBS writes a few kilobytes (a line per file and the
/// notes); this bound keeps a hostile one from costing more memory than that.
pub const MAX_MANIFEST_SIZE: u64 = 16 << 20;

/// One entry of `files[]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ManifestFile {
    /// The file's name in the snapshot directory.
    pub filename: String,
    /// `none`, `encrypt` or `sign-only`.
    pub crypt_mode: String,
    /// For an index: the size of the data it indexes (its content size); for a blob: its
    /// file's length.
    pub size: u64,
    /// SHA-256 (hex): of an index's body (its `index_csum`), of a blob file's bytes.
    pub csum: String,
}

/// The manifest, with the keys PBS writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Manifest {
    /// `vm`, `ct` or `host`.
    pub backup_type: String,
    /// The group's backup id.
    pub backup_id: String,
    /// The snapshot's time (epoch seconds).
    pub backup_time: i64,
    /// The snapshot's files, indexes and blobs.
    pub files: Vec<ManifestFile>,
    /// The part of the manifest the signature does not cover (verify state, notes).
    #[serde(default)]
    pub unprotected: serde_json::Value,
    /// The signature of a signed backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl Manifest {
    /// Encodes the manifest as the compressed blob the client uploads.
    pub fn to_blob(&self) -> Vec<u8> {
        let json = serde_json::to_vec(self).expect("manifest serialises");
        blob::encode(&json, true)
    }

    /// Decodes and parses a manifest blob (its JSON at most [`MAX_MANIFEST_SIZE`] bytes).
    pub fn from_blob(raw: &[u8]) -> Result<Manifest, FormatError> {
        let json = blob::decode_bounded(raw, MAX_MANIFEST_SIZE, "manifest JSON")?;
        serde_json::from_slice(&json).map_err(|e| FormatErrorKind::Manifest(e.to_string()).into())
    }

    /// The entry for `filename`, if listed.
    pub fn file(&self, filename: &str) -> Option<&ManifestFile> {
        self.files.iter().find(|f| f.filename == filename)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_kebab_case_keys() {
        let m = Manifest {
            backup_type: "vm".into(),
            backup_id: "100".into(),
            backup_time: 1_752_502_802,
            files: vec![ManifestFile {
                filename: "drive-scsi0.img.fidx".into(),
                crypt_mode: "none".into(),
                size: 4096,
                csum: "00".repeat(32),
            }],
            unprotected: serde_json::json!({}),
            signature: None,
        };
        let raw = m.to_blob();
        let json = String::from_utf8(blob::decode(&raw).unwrap()).unwrap();
        assert!(
            json.contains("\"backup-type\":\"vm\"") && json.contains("\"crypt-mode\":\"none\""),
            "{json}"
        );
        assert_eq!(Manifest::from_blob(&raw).unwrap(), m);
        assert!(Manifest::from_blob(&blob::encode(b"{", true))
            .unwrap_err()
            .to_string()
            .contains("bad manifest"));
    }
}
