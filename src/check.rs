//! `chunkscope check`: does a datastore hold everything its indexes reference?
//!
//! 1. Every index (phase-1 order, then leftovers) parses, with a valid checksum, and matches
//!    its snapshot's manifest when there is one.
//! 2. Every referenced digest has a chunk file (missing ones are listed with an index that
//!    needs them).
//! 3. Every chunk directory `0000`..`ffff` exists; chunk files are counted by the phase-2 name
//!    classes, and unreferenced ones are classified by atime against the GC cutoff.
//! 4. With `deep`, every chunk file is read (with `O_NOATIME`) and its CRC and digest verified.
//!
//! Nothing here writes, and no atime changes: a check never alters what a GC will do.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use hashbrown::HashMap;
use serde::Serialize;

use crate::datastore::manifest::Manifest;
use crate::datastore::paths::{
    chunk_subdir_name, ChunkName, CHUNK_DIR, CHUNK_SUBDIRS, MANIFEST_BLOB_NAME,
};
use crate::datastore::snapshots::phase1_order;
use crate::datastore::{blob, Digest, IndexFile, IndexKind};
use crate::gen::truth::GarbageCounts;

/// What to check.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Verify CRC and digest of every chunk file.
    pub deep: bool,
    /// GC cutoff in minutes, for classifying unreferenced chunks.
    pub cutoff_minutes: u64,
    /// "Now" for that classification, epoch seconds.
    pub now: i64,
    /// Worker threads for the chunk directory scan.
    pub threads: usize,
    /// An S3 datastore's local cache: a zero-length chunk file is a marker of a chunk whose
    /// data is in the bucket, not damage (`--deep` reads only the whole ones).
    pub markers: bool,
}

pub use crate::datastore::error::Problem;

/// Everything `check` counted.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckReport {
    /// The store checked.
    pub store: String,
    /// Index files found.
    pub index_files: usize,
    /// Of them, `.fidx`.
    pub fixed_indexes: usize,
    /// Of them, `.didx`.
    pub dynamic_indexes: usize,
    /// Index files outside the namespace/group/snapshot scheme.
    pub unexpected_indexes: usize,
    /// Digest entries over all readable index files.
    pub references: u64,
    /// Distinct digests they reference.
    pub referenced_chunks: u64,
    /// Sum of the indexes' content sizes (PBS's "Original data usage").
    pub index_data_bytes: u64,
    /// Index files that cannot be read, and why.
    pub corrupt_indexes: Vec<Problem>,
    /// Manifests that cannot be read or do not match their snapshot.
    pub manifest_problems: Vec<Problem>,
    /// Snapshots with indexes but no manifest (unfinished backups): a warning, not an error.
    pub snapshots_without_manifest: usize,
    /// Chunk directories that are not the store's own (symbolic links, mounts of other
    /// filesystems): not scanned, as a GC would refuse to run while they are there.
    pub odd_chunk_dirs: Vec<Problem>,
    /// Referenced chunks with no chunk file: digest and one index that needs it.
    pub missing_chunks: Vec<Problem>,
    /// Chunk directories holding at least one referenced chunk.
    pub chunk_dirs_with_referenced: u64,
    /// What the scan of `.chunks` found (its keys appear at the top level of the JSON).
    #[serde(flatten)]
    pub chunks: ChunkScan,
    /// For an S3 datastore: the bucket against the local cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3: Option<BucketCheck>,
}

/// What `check --s3-bucket` finds: an S3 datastore's objects against its local cache. A
/// referenced chunk is there when its object is; its local file is only a cache.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BucketCheck {
    /// The bucket (`s3://BUCKET at ENDPOINT`).
    pub bucket: String,
    /// Chunk objects (`.chunks/XXXX/<hex>`).
    pub chunk_objects: u64,
    /// Their bytes.
    pub chunk_object_bytes: u64,
    /// Objects of bad copies (`<hex>.N.bad`).
    pub bad_objects: u64,
    /// Objects under `.chunks/` not at a chunk's canonical key (another directory, uppercase
    /// hex, another suffix): no chunk's object, so none counts for a chunk; the first
    /// [`FOREIGN_NAMED`] keys in `foreign_keys`. A problem.
    pub foreign_objects: u64,
    /// The first of them.
    pub foreign_keys: Vec<String>,
    /// Referenced chunks' objects read and verified (`--deep`).
    pub objects_verified: u64,
    /// Local chunk files holding a whole chunk.
    pub local_whole: u64,
    /// Local zero-length markers.
    pub local_markers: u64,
    /// Objects of referenced chunks with no local file (a GC's phase 1 marks them `.using`).
    pub referenced_without_local_file: u64,
    /// Objects of unreferenced chunks with no local file (a GC deletes them whatever their age).
    pub garbage_without_local_file: u64,
    /// Local files of unreferenced chunks with no object (a GC's phase 3 removes them once
    /// expired).
    pub garbage_without_object: u64,
}

/// Counts from the scan of the chunk directories; one per scan thread, then merged.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ChunkScan {
    /// Chunk directories that are not there.
    pub missing_chunk_dirs: Vec<String>,
    /// Regular chunk files.
    pub chunk_files: u64,
    /// Their bytes.
    pub chunk_bytes: u64,
    /// Zero-length chunk files (on an S3 datastore, the cache's markers).
    pub empty_chunk_files: u64,
    /// Bytes of the referenced ones.
    pub referenced_chunk_bytes: u64,
    /// Unreferenced chunk files, by what a GC at `now` does with them.
    pub garbage: GarbageCounts,
    /// `.N.bad` copies.
    pub bad_files: u64,
    /// `.using` markers.
    pub using_markers: u64,
    /// Names the GC ignores (`*.tmp_XXXXXX` and others).
    pub ignored_files: u64,
    /// Chunk files whose content was verified (`--deep`).
    pub deep_verified: u64,
    /// Chunk files whose content does not match their name (`--deep`).
    pub corrupt_chunks: Vec<Problem>,
    /// Entries with a chunk's name that are not regular files (a symlink, a directory, ...):
    /// never followed; the data they stand for is not in the store.
    pub irregular_chunks: Vec<Problem>,
}

impl ChunkScan {
    fn merge(&mut self, o: ChunkScan) {
        self.missing_chunk_dirs.extend(o.missing_chunk_dirs);
        self.chunk_files += o.chunk_files;
        self.chunk_bytes += o.chunk_bytes;
        self.empty_chunk_files += o.empty_chunk_files;
        self.referenced_chunk_bytes += o.referenced_chunk_bytes;
        self.garbage.chunks += o.garbage.chunks;
        self.garbage.removable += o.garbage.removable;
        self.garbage.pending += o.garbage.pending;
        self.garbage.bytes += o.garbage.bytes;
        self.bad_files += o.bad_files;
        self.using_markers += o.using_markers;
        self.ignored_files += o.ignored_files;
        self.deep_verified += o.deep_verified;
        self.corrupt_chunks.extend(o.corrupt_chunks);
        self.irregular_chunks.extend(o.irregular_chunks);
    }
}

impl CheckReport {
    /// True when nothing referenced is lost or corrupt.
    pub fn ok(&self) -> bool {
        self.s3.as_ref().is_none_or(|b| b.foreign_objects == 0)
            && self.corrupt_indexes.is_empty()
            && self.odd_chunk_dirs.is_empty()
            && self.manifest_problems.is_empty()
            && self.missing_chunks.is_empty()
            && self.chunks.missing_chunk_dirs.is_empty()
            && self.chunks.corrupt_chunks.is_empty()
            && self.chunks.irregular_chunks.is_empty()
    }
}

/// Keys of objects not at a chunk's key that `check` names; the rest are counted.
pub const FOREIGN_NAMED: usize = 100;

#[derive(Default)]
struct ScanPart {
    scan: ChunkScan,
    found: Vec<Digest>,
    /// Every local chunk's digest (S3 datastores only).
    local: Vec<Digest>,
}

/// The chunk directories not followed (by prefix): those that are not the store's own
/// (their chunks are another store's, or nobody's).
fn not_followed(odd: &[crate::store::layout::OddDir]) -> Vec<bool> {
    let mut skip = vec![false; CHUNK_SUBDIRS];
    for o in odd {
        let prefix = o
            .path
            .strip_prefix(CHUNK_DIR)
            .and_then(|p| p.strip_prefix('/'));
        if let Some(p) = prefix.and_then(|p| u16::from_str_radix(p, 16).ok()) {
            skip[p as usize] = true;
        }
    }
    skip
}

/// The chunk directories scanned by `opts.threads` threads, by interleaved prefix.
fn scan_in_parallel(
    chunks: &Path,
    referenced: &HashMap<Digest, u32>,
    skip: &[bool],
    opts: &CheckOptions,
) -> Vec<Result<ScanPart>> {
    let threads = opts.threads.max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || scan_chunk_dirs(chunks, referenced, skip, opts, t, threads)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("scan thread panicked"))
            .collect()
    })
}

/// Checks the datastore at `root`.
pub fn check_store(root: &Path, opts: &CheckOptions) -> Result<CheckReport> {
    check_with(root, opts, None)
}

/// Checks the S3 datastore whose local cache is `root` and whose objects are in `bucket`: a
/// referenced chunk is missing when it has no object, whatever its local file.
pub fn check_s3_store(
    root: &Path,
    opts: &CheckOptions,
    bucket: &dyn crate::bucket::Bucket,
) -> Result<CheckReport> {
    let opts = CheckOptions {
        markers: true,
        ..opts.clone()
    };
    check_with(root, &opts, Some(bucket))
}

fn check_with(
    root: &Path,
    opts: &CheckOptions,
    bucket: Option<&dyn crate::bucket::Bucket>,
) -> Result<CheckReport> {
    let chunks = crate::datastore::access::chunk_dir(root)?;
    let odd = crate::store::layout::odd_chunk_dirs(root)?;
    let skip = not_followed(&odd);
    let mut report = CheckReport {
        store: root.display().to_string(),
        odd_chunk_dirs: odd
            .into_iter()
            .map(|o| Problem {
                path: root.join(&o.path).display().to_string(),
                problem: o.what,
            })
            .collect(),
        ..Default::default()
    };
    let order =
        phase1_order(root).with_context(|| format!("listing index files of {}", root.display()))?;
    report.unexpected_indexes = order.unexpected.len();

    // digest -> number of the first index that references it
    let mut referenced: HashMap<Digest, u32> = HashMap::new();
    let mut index_paths: Vec<&PathBuf> = Vec::new();
    let mut manifest_cache: Option<(PathBuf, Option<Manifest>)> = None;
    for path in order.iter() {
        let idx = match IndexFile::open(path) {
            Ok(idx) => idx,
            Err(e) => {
                report.corrupt_indexes.push(Problem {
                    path: path.display().to_string(),
                    problem: e.kind.to_string(),
                });
                continue;
            }
        };
        let n = index_paths.len() as u32;
        index_paths.push(path);
        report.index_files += 1;
        match idx.kind() {
            IndexKind::Fixed => report.fixed_indexes += 1,
            IndexKind::Dynamic => report.dynamic_indexes += 1,
        }
        report.references += idx.entries() as u64;
        report.index_data_bytes += idx.index_bytes();
        let digests =
            idx.for_each_digest(|d| -> Result<(), crate::datastore::error::FormatError> {
                referenced.entry(d).or_insert(n);
                Ok(())
            });
        if let Err(e) = digests {
            // A streamed index found bad while read (its digests stay counted as referenced:
            // that only keeps chunks).
            report.corrupt_indexes.push(Problem {
                path: path.display().to_string(),
                problem: e.kind.to_string(),
            });
            continue;
        }
        check_manifest(path, &idx, &mut manifest_cache, &mut report);
    }
    report.referenced_chunks = referenced.len() as u64;

    let parts = scan_in_parallel(&chunks, &referenced, &skip, opts);
    let mut found: hashbrown::HashSet<Digest> = hashbrown::HashSet::new();
    let mut local: hashbrown::HashSet<Digest> = hashbrown::HashSet::new();
    let mut dirs = hashbrown::HashSet::new();
    for part in parts {
        let part = part?;
        report.chunks.merge(part.scan);
        for d in part.found {
            dirs.insert(d.prefix());
            found.insert(d);
        }
        local.extend(part.local);
    }
    if let Some(bucket) = bucket {
        let (objects, check) =
            bucket_against_cache(bucket, &referenced, &local, &mut report, opts.deep)?;
        found = objects;
        report.s3 = Some(check);
    }
    report.chunks.missing_chunk_dirs.sort();
    report
        .chunks
        .corrupt_chunks
        .sort_by(|a, b| a.path.cmp(&b.path));
    report
        .chunks
        .irregular_chunks
        .sort_by(|a, b| a.path.cmp(&b.path));
    report.chunk_dirs_with_referenced = dirs.len() as u64;
    let mut missing: Vec<(&Digest, &u32)> = referenced
        .iter()
        .filter(|(d, _)| !found.contains(*d))
        .collect();
    missing.sort();
    report.missing_chunks = missing
        .into_iter()
        .map(|(d, &n)| Problem {
            path: d.to_hex(),
            problem: format!("required by {}", index_paths[n as usize].display()),
        })
        .collect();
    Ok(report)
}

/// The bucket's chunk objects (their digests) and what they say against the local cache;
/// with `deep`, each referenced chunk's object read (`GetObject`) and its CRC and digest
/// verified, a bad one a corrupt chunk of `report` named by its key.
fn bucket_against_cache(
    bucket: &dyn crate::bucket::Bucket,
    referenced: &HashMap<Digest, u32>,
    local: &hashbrown::HashSet<Digest>,
    report: &mut CheckReport,
    deep: bool,
) -> Result<(hashbrown::HashSet<Digest>, BucketCheck)> {
    use crate::bucket::ObjectName;
    use crate::bucket::{CHUNK_PREFIX, LIST_PAGE_KEYS};
    let mut check = BucketCheck {
        bucket: bucket.describe(),
        local_markers: report.chunks.empty_chunk_files,
        local_whole: report.chunks.chunk_files - report.chunks.empty_chunk_files,
        ..BucketCheck::default()
    };
    let mut objects = hashbrown::HashSet::new();
    let mut listing = crate::bucket::Listing::new(bucket, CHUNK_PREFIX, LIST_PAGE_KEYS);
    loop {
        let page = listing.next_page().map_err(|e| {
            anyhow::anyhow!("listing the bucket {} failed - {e}", bucket.describe())
        })?;
        let Some(page) = page else { break };
        for o in &page.objects {
            // Only a chunk's canonical key is its object.
            match ObjectName::from_key(&o.key) {
                Some(ObjectName::Chunk(d)) => {
                    check.chunk_objects += 1;
                    check.chunk_object_bytes += o.size;
                    if !local.contains(&d) {
                        if referenced.contains_key(&d) {
                            check.referenced_without_local_file += 1;
                        } else {
                            check.garbage_without_local_file += 1;
                        }
                    }
                    if deep && referenced.contains_key(&d) {
                        let verdict =
                            bucket
                                .get(&o.key)
                                .map_err(|e| e.to_string())
                                .and_then(|raw| {
                                    blob::verify_chunk(&raw, &d).map_err(|e| e.to_string())
                                });
                        check.objects_verified += 1;
                        if let Err(problem) = verdict {
                            report.chunks.corrupt_chunks.push(Problem {
                                path: o.key.clone(),
                                problem,
                            });
                        }
                    }
                    objects.insert(d);
                }
                Some(ObjectName::Bad(_)) => check.bad_objects += 1,
                None => {
                    check.foreign_objects += 1;
                    if check.foreign_keys.len() < FOREIGN_NAMED {
                        check.foreign_keys.push(o.key.clone());
                    }
                }
            }
        }
    }
    check.garbage_without_object = local
        .iter()
        .filter(|d| !objects.contains(*d) && !referenced.contains_key(*d))
        .count() as u64;
    Ok((objects, check))
}

fn check_manifest(
    path: &Path,
    idx: &IndexFile,
    cache: &mut Option<(PathBuf, Option<Manifest>)>,
    report: &mut CheckReport,
) {
    let Some(snapshot) = path.parent() else {
        return;
    };
    if cache.as_ref().is_none_or(|(p, _)| p != snapshot) {
        let mpath = snapshot.join(MANIFEST_BLOB_NAME);
        let manifest = match blob::read_file(&mpath, blob::MAX_BLOB_FILE_SIZE) {
            Ok(raw) => match Manifest::from_blob(&raw) {
                Ok(m) => Some(m),
                Err(e) => {
                    report.manifest_problems.push(Problem {
                        path: mpath.display().to_string(),
                        problem: e.to_string(),
                    });
                    None
                }
            },
            Err(e) if e.is_not_found() => {
                report.snapshots_without_manifest += 1;
                None
            }
            Err(e) => {
                report.manifest_problems.push(Problem {
                    path: mpath.display().to_string(),
                    problem: e.kind.to_string(),
                });
                None
            }
        };
        if let Some(m) = &manifest {
            check_listed_files(snapshot, m, report);
        }
        *cache = Some((snapshot.to_path_buf(), manifest));
    }
    let Some((_, Some(manifest))) = cache else {
        return;
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let problem = match manifest.file(name) {
        None => Some("not listed in the snapshot's manifest".to_string()),
        Some(f) if f.csum != hex::encode(idx.stored_csum()) => Some(format!(
            "checksum {} differs from the manifest's {}",
            hex::encode(idx.stored_csum()),
            f.csum
        )),
        Some(f) if f.size != idx.index_bytes() => Some(format!(
            "size {} differs from the manifest's {}",
            idx.index_bytes(),
            f.size
        )),
        Some(_) => None,
    };
    if let Some(problem) = problem {
        report.manifest_problems.push(Problem {
            path: path.display().to_string(),
            problem,
        });
    }
}

/// What a manifest lists besides the index being checked: every blob with its size, checksum
/// and CRC, and every index present (format document 2.6).
fn check_listed_files(snapshot: &Path, manifest: &Manifest, report: &mut CheckReport) {
    use sha2::Digest as _;
    for f in &manifest.files {
        let path = snapshot.join(&f.filename);
        let mut problem = |p: String| {
            report.manifest_problems.push(Problem {
                path: path.display().to_string(),
                problem: p,
            })
        };
        if f.filename.is_empty() || f.filename.contains('/') || f.filename.starts_with('.') {
            problem(format!(
                "listed in the manifest as {:?}, which is not a file name",
                f.filename
            ));
            continue;
        }
        if IndexKind::from_path(Path::new(&f.filename)).is_some() {
            if std::fs::symlink_metadata(&path).is_err() {
                problem("listed in the manifest, but missing".to_string());
            }
            continue; // its size and checksum: with the index itself
        }
        let raw = match blob::read_file(&path, blob::MAX_BLOB_FILE_SIZE) {
            Ok(raw) => raw,
            Err(e) if e.is_not_found() => {
                problem("listed in the manifest, but missing".to_string());
                continue;
            }
            Err(e) => {
                problem(e.kind.to_string());
                continue;
            }
        };
        let csum = hex::encode(sha2::Sha256::digest(&raw));
        if raw.len() as u64 != f.size {
            problem(format!(
                "size {} differs from the manifest's {}",
                raw.len(),
                f.size
            ));
        } else if csum != f.csum {
            problem(format!(
                "checksum {csum} differs from the manifest's {}",
                f.csum
            ));
        } else if let Err(e) = blob::verify_crc(&raw) {
            problem(e.to_string());
        }
    }
}

fn scan_chunk_dirs(
    chunks: &Path,
    referenced: &HashMap<Digest, u32>,
    skip: &[bool],
    opts: &CheckOptions,
    worker: usize,
    workers: usize,
) -> Result<ScanPart> {
    let mut part = ScanPart::default();
    let r = &mut part.scan;
    let cutoff = opts.now - opts.cutoff_minutes as i64 * 60;
    let mut dir = chunks.to_path_buf();
    for prefix in (worker..CHUNK_SUBDIRS).step_by(workers) {
        if skip[prefix] {
            continue;
        }
        dir.push(chunk_subdir_name(prefix as u16));
        let fd = match crate::fsutil::open_dir_following(&dir) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                r.missing_chunk_dirs.push(dir.display().to_string());
                dir.pop();
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("opening {}", dir.display())),
        };
        // getdents64 itself: glibc's readdir would take an ENOENT midway for the end.
        let entries =
            crate::fsutil::list_names(&fd).with_context(|| format!("listing {}", dir.display()))?;
        for name in entries {
            let class = ChunkName::classify(name.as_encoded_bytes());
            if class == ChunkName::Ignored {
                r.ignored_files += 1;
                continue;
            }
            let path = dir.join(&name);
            // lstat: does not change the atime, does not follow a symlink.
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                let what = crate::fsutil::file_type_name(meta.mode());
                let referenced = match class {
                    ChunkName::Chunk(d) => referenced.get(&d),
                    _ => None,
                };
                r.irregular_chunks.push(Problem {
                    path: path.display().to_string(),
                    problem: match referenced {
                        Some(_) => format!(
                            "{what}, not a regular file: not followed (a referenced chunk: its data is not in the store)"
                        ),
                        None => format!("{what}, not a regular file: not followed"),
                    },
                });
                if let ChunkName::Chunk(d) = class {
                    if referenced.is_some() {
                        // Reported here; not again as missing.
                        part.found.push(d);
                    }
                }
                continue;
            }
            match class {
                ChunkName::Chunk(d) => {
                    r.chunk_files += 1;
                    r.chunk_bytes += meta.size();
                    if meta.size() == 0 {
                        r.empty_chunk_files += 1;
                    }
                    if opts.markers {
                        part.local.push(d);
                    }
                    if referenced.contains_key(&d) {
                        r.referenced_chunk_bytes += meta.size();
                        part.found.push(d);
                    } else {
                        r.garbage.chunks += 1;
                        r.garbage.bytes += meta.size();
                        if meta.atime() < cutoff {
                            r.garbage.removable += 1;
                        } else {
                            r.garbage.pending += 1;
                        }
                    }
                    if opts.deep && !(opts.markers && meta.size() == 0) {
                        let verdict = blob::read_file(&path, blob::MAX_CHUNK_FILE_SIZE)
                            .map_err(|e| e.kind.to_string())
                            .and_then(|raw| {
                                blob::verify_chunk(&raw, &d).map_err(|e| e.to_string())
                            });
                        r.deep_verified += 1;
                        if let Err(problem) = verdict {
                            r.corrupt_chunks.push(Problem {
                                path: path.display().to_string(),
                                problem,
                            });
                        }
                    }
                }
                ChunkName::Bad(..) => r.bad_files += 1,
                ChunkName::Using(_) => r.using_markers += 1,
                ChunkName::Ignored => unreachable!("counted above"),
            }
        }
        dir.pop();
    }
    Ok(part)
}
