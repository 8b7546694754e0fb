//! The bucket half of an S3 datastore's survey (PBS 4, format document 1.5 and 3.7): the
//! chunk objects listed as a GC's phase 2 lists them (`ListObjectsV2` under `.chunks/`, 1,000
//! keys a page), each set against the local cache the survey listed, and what a GC now would
//! delete from the bucket.
//!
//! Phase 2 decides on an object by its local file: an object with none is deleted whatever
//! its age, unless phase 1 left a `.using` marker (a referenced chunk) or one is left from
//! before; an object with one is deleted when the file's atime is past the cutoff. The
//! survey knows the atimes of the unreferenced local files (it stat'ed them), and that phase
//! 1 will touch the referenced ones: so it tells, object by object, what a GC now would do.
//! Bad copies (`<hex>.N.bad`) are counted, not predicted.

use anyhow::Result;
use serde::Serialize;

use super::file::{SurveyObject, SurveyWriter, BAD_SUFFIX};
use super::table::ChunkTable;
use crate::bucket::ObjectName;
use crate::bucket::{Bucket, CHUNK_PREFIX, LIST_PAGE_KEYS};
use crate::datastore::Digest;

/// What the survey found in an S3 datastore's bucket, against its local cache.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BucketSurvey {
    /// The bucket (`s3://BUCKET at ENDPOINT`).
    pub bucket: String,
    /// `ListObjectsV2` pages it took (what a GC's phase 2 takes).
    pub list_pages: u64,
    /// Chunk objects (`.chunks/XXXX/<hex>`).
    pub chunk_objects: u64,
    /// Their bytes (what the bucket bills a month for, with the bad copies').
    pub chunk_object_bytes: u64,
    /// Objects of bad copies (`<hex>.N.bad`).
    pub bad_objects: u64,
    /// Their bytes.
    pub bad_object_bytes: u64,
    /// Objects under `.chunks/` not at a chunk's canonical key: no chunk's, and a GC keeps
    /// them.
    pub foreign_objects: u64,
    /// Chunk objects some index references.
    pub referenced_objects: u64,
    /// ... of them with no local file (a GC's phase 1 leaves a `.using` marker for each).
    pub referenced_without_local_file: u64,
    /// Chunks an index references that have no object: their data is not in the bucket (a
    /// local file of them is only a cache; without one, nothing holds them).
    pub referenced_without_object: u64,
    /// Unreferenced chunk objects, by what a GC now would do: `removable` are deleted,
    /// `pending` kept (a local file within the cutoff), the rest kept by a `.using` marker
    /// (`kept_by_using`); `bytes` are all of theirs.
    pub garbage: crate::gen::truth::GarbageCounts,
    /// Bytes of the ones a GC now would delete.
    pub removable_bytes: u64,
    /// Unreferenced chunk objects with no local file (deleted whatever their age, unless a
    /// `.using` marker is left from before).
    pub garbage_without_local_file: u64,
    /// ... of them kept by a `.using` marker left from before.
    pub kept_by_using: u64,
    /// Local files of unreferenced chunks with no object (phase 3 removes them once expired).
    pub local_without_object: u64,
    /// Seconds the listing took.
    pub seconds: f64,
}

/// What the bucket step needs of the local survey.
pub(super) struct Local<'a> {
    /// The local chunk files, their references marked.
    pub table: &'a ChunkTable,
    /// Chunks referenced but not listed locally.
    pub not_listed: &'a hashbrown::HashSet<Digest>,
    /// The unreferenced local files' atimes by table index, sorted (a file gone by its stat
    /// is not in it).
    pub atimes: &'a [(u32, i64)],
    /// Distinct chunks referenced, listed or not.
    pub referenced: u64,
    /// The GC cutoff, epoch seconds.
    pub cutoff: i64,
    /// The store's `.chunks` directory.
    pub chunks_dir: &'a std::path::Path,
}

impl Local<'_> {
    /// The atime of the local bad copy `<d>.N.bad`, `None` when it is gone.
    fn bad_atime(&self, d: &Digest, n: u8) -> Result<Option<i64>> {
        let hex = d.to_hex();
        let path = self
            .chunks_dir
            .join(&hex[..4])
            .join(format!("{hex}.{n}.bad"));
        // Not following a link; a stat moves no atime.
        match std::fs::symlink_metadata(&path) {
            Ok(m) => Ok(Some(std::os::unix::fs::MetadataExt::atime(&m))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
        .map_err(|e| anyhow::anyhow!("stat of {}: {e}", path.display()))
    }
}

/// Lists `bucket`'s chunk objects, sets each against `local` and writes it to the survey
/// file, then the local `.using` markers.
pub(super) fn survey_bucket(
    bucket: &dyn Bucket,
    local: &Local<'_>,
    mut writer: Option<&mut SurveyWriter>,
    progress: bool,
) -> Result<BucketSurvey> {
    let started = std::time::Instant::now();
    let table = local.table;
    let using: hashbrown::HashSet<Digest> = table.using.iter().copied().collect();
    let mut has_object = vec![0u64; table.len().div_ceil(64)];
    let mut s = BucketSurvey {
        bucket: bucket.describe(),
        ..BucketSurvey::default()
    };
    let bar = crate::progress::Bar::new(
        progress,
        0,
        "listing the bucket {spinner} {pos} objects {rate}",
    );
    let mut listing = crate::bucket::Listing::new(bucket, CHUNK_PREFIX, LIST_PAGE_KEYS);
    loop {
        let page = listing.next_page().map_err(|e| {
            anyhow::anyhow!(
                "listing the bucket {} failed after {} pages - {e}",
                bucket.describe(),
                s.list_pages
            )
        })?;
        let Some(page) = page else { break };
        s.list_pages += 1;
        bar.inc(page.objects.len() as u64);
        for o in &page.objects {
            let base = o.key.rsplit('/').next().unwrap_or("");
            // Only a chunk's canonical key is its object (what a GC judges, too).
            let object = match ObjectName::from_key(&o.key) {
                Some(ObjectName::Chunk(digest)) => {
                    classify(&mut s, local, &using, &mut has_object, digest, o.size);
                    SurveyObject {
                        digest,
                        bad_suffix: None,
                        size: o.size,
                    }
                }
                Some(ObjectName::Bad(digest)) => {
                    s.bad_objects += 1;
                    s.bad_object_bytes += o.size;
                    let mut suffix = [0u8; BAD_SUFFIX];
                    suffix.copy_from_slice(&base.as_bytes()[64..]);
                    SurveyObject {
                        digest,
                        bad_suffix: Some(suffix),
                        size: o.size,
                    }
                }
                None => {
                    s.foreign_objects += 1;
                    continue;
                }
            };
            if let Some(w) = writer.as_deref_mut() {
                w.object(&object)?;
            }
        }
    }
    bar.finish_and_clear();
    s.referenced_without_object = local.referenced.saturating_sub(s.referenced_objects);
    s.local_without_object = (0..table.len())
        .filter(|&i| !table.is_referenced(i) && has_object[i / 64] & (1 << (i % 64)) == 0)
        .count() as u64;
    if let Some(w) = writer {
        for d in &table.using {
            w.using(d)?;
        }
        for &(d, n) in &table.bad {
            // Phase 2 judges a bad copy's object by its local file's atime.
            if let Some(atime) = local.bad_atime(&d, n)? {
                w.bad_copy(&d, n, atime)?;
            }
        }
    }
    s.seconds = started.elapsed().as_secs_f64();
    Ok(s)
}

/// One chunk object against the local cache: referenced or garbage, and what a GC now would
/// do with it.
fn classify(
    s: &mut BucketSurvey,
    local: &Local<'_>,
    using: &hashbrown::HashSet<Digest>,
    has_object: &mut [u64],
    digest: Digest,
    size: u64,
) {
    s.chunk_objects += 1;
    s.chunk_object_bytes += size;
    let table = local.table;
    let file = table.find(&digest);
    if let Some(i) = file {
        has_object[i / 64] |= 1 << (i % 64);
    }
    let referenced = match file {
        Some(i) => table.is_referenced(i),
        None => local.not_listed.contains(&digest),
    };
    if referenced {
        s.referenced_objects += 1;
        s.referenced_without_local_file += u64::from(file.is_none());
        return;
    }
    let g = &mut s.garbage;
    g.chunks += 1;
    g.bytes += size;
    // A local file gone by its stat is gone for the GC too.
    let atime = file.and_then(|i| {
        local
            .atimes
            .binary_search_by_key(&(i as u32), |a| a.0)
            .ok()
            .map(|k| local.atimes[k].1)
    });
    let removable = match atime {
        Some(atime) => atime < local.cutoff,
        None => {
            s.garbage_without_local_file += 1;
            if using.contains(&digest) {
                // Phase 2 takes it for a chunk an upload is writing: kept, as in use.
                s.kept_by_using += 1;
                return;
            }
            true
        }
    };
    if removable {
        g.removable += 1;
        s.removable_bytes += size;
    } else {
        g.pending += 1;
    }
}
