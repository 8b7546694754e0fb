//! The ground truth of a generated store, written as JSON beside it (never inside it).
//!
//! Every count here is what `chunkscope check` counts on the same store, and what a GC that
//! runs within a few hours of generation must find; tests compare them field by field.

use serde::{Deserialize, Serialize};

/// Unreferenced chunk files, by what a GC with the default cutoff would do to them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GarbageCounts {
    /// Unreferenced regular chunk files.
    pub chunks: u64,
    /// ... whose atime is older than the cutoff: a GC removes them.
    pub removable: u64,
    /// ... whose atime is inside the cutoff window: a GC keeps them as pending.
    pub pending: u64,
    /// Bytes of all unreferenced chunk files.
    pub bytes: u64,
}

/// What the generator wrote, and what that means for a GC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroundTruth {
    /// The generator preset.
    pub preset: String,
    /// Its seed.
    pub seed: u64,
    /// Its scale factor.
    pub scale: f64,
    /// Where the store was written.
    pub store: String,
    /// Real epoch seconds: generation time, and when the modelled previous GC ran.
    pub generated_at: i64,
    /// When the modelled previous GC ran (epoch seconds).
    pub prev_gc_at: i64,
    /// The atime cutoff the truth assumes (PBS's default).
    pub cutoff_minutes: u64,
    /// Namespaces (the root included).
    pub namespaces: usize,
    /// Backup groups.
    pub groups: usize,
    /// Snapshots written (the ones prune keeps now).
    pub snapshots: usize,
    /// Index files written.
    pub index_files: usize,
    /// Of them, `.fidx`.
    pub fixed_indexes: usize,
    /// Of them, `.didx`.
    pub dynamic_indexes: usize,
    /// Digest entries over all index files (naive phase-1 touches).
    pub references: u64,
    /// Distinct digests referenced, present or not.
    pub referenced_chunks: u64,
    /// Referenced chunks that were not written, lowercase hex, sorted.
    pub missing_chunks: Vec<String>,
    /// Regular chunk files in `.chunks` (referenced and garbage).
    pub chunk_files: u64,
    /// Their bytes.
    pub chunk_bytes: u64,
    /// Unreferenced chunk files, by what a GC now does with them.
    pub garbage: GarbageCounts,
    /// `.N.bad` files, of which `bad_for_missing` stand for missing referenced chunks.
    pub bad_files: u64,
    /// `.N.bad` files that stand for missing referenced chunks.
    pub bad_for_missing: u64,
    /// `*.tmp_XXXXXX` files in chunk directories.
    pub tmp_files: u64,
    /// Chunk directories that hold at least one referenced chunk.
    pub chunk_dirs_with_referenced: u64,
    /// references / referenced_chunks.
    pub dedup_factor: f64,
    /// The deduplication factor asked for (`--dedup`), if any.
    pub requested_dedup: Option<f64>,
    /// The churn the content model used (derived from the asked dedup, if any).
    pub churn: f64,
    /// Sum of the indexes' content sizes (PBS "Original data usage").
    pub index_data_bytes: u64,
    /// Bytes of the referenced chunk files present.
    pub referenced_chunk_bytes: u64,
    /// index_data_bytes / referenced_chunk_bytes (PBS "Deduplication factor" after a GC).
    pub pbs_dedup_factor: f64,
    /// How long writing took.
    pub elapsed_seconds: f64,
    /// Chunk files written per second.
    pub chunks_per_second: f64,
    /// For an S3 datastore (`gen --backend s3`), how its chunks are split between the bucket
    /// and the local cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Truth>,
}

/// What the split did, in the ground truth beside the store.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct S3Truth {
    /// The bucket, as `s3://BUCKET at ENDPOINT`.
    pub bucket: String,
    /// Chunk objects (`.chunks/...`, `.N.bad` copies included).
    pub chunk_objects: u64,
    /// Their bytes.
    pub chunk_object_bytes: u64,
    /// Objects under `.cnt/` (indexes, blobs, owners, ...).
    pub content_objects: u64,
    /// Local chunk files kept whole.
    pub cached_whole: u64,
    /// Local zero-length markers.
    pub markers: u64,
    /// Referenced chunk objects with no local file (phase 1 makes a `.using` for them).
    pub no_marker_referenced: u64,
    /// Unreferenced chunk objects with no local file (phase 2 deletes them, whatever their age).
    pub no_marker_garbage: u64,
    /// Referenced chunks with a local marker and no object: lost data a GC does not see.
    pub no_object_referenced: u64,
    /// Unreferenced local markers with no object (phase 3 removes them once expired).
    pub no_object_garbage: u64,
    /// Unreferenced objects kept one more GC by a stale `.using` marker.
    pub stale_using: u64,
}
