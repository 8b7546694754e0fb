//! The bucket half of a generated S3 datastore (PBS 4, `pbs-format.md` §1.5, §3.7).
//!
//! [`write_store`](super::writer::write_store) writes the store as a filesystem datastore;
//! [`split`] then makes it an S3 one: every chunk file and `.N.bad` copy becomes an object at
//! its relative path, every other file of the datastore an object under `.cnt/`, plus the
//! `.in-use` marker; and the local `.chunks` tree becomes the cache PBS keeps: a share of the
//! chunks whole, the rest zero-length markers with the same times, some with no local file at
//! all, some local markers with no object, and `.using` markers an interrupted GC left. Which
//! chunk goes where is drawn from the seed and the digest, so the same seed gives the same split.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use hashbrown::HashSet;

use super::truth::S3Truth;
use crate::datastore::index::{IndexFile, IndexKind};
use crate::datastore::paths::{ChunkName, CHUNK_DIR, LOCK_FILE};
use crate::datastore::Digest;
use crate::fsutil::{read_noatime, set_file_times, Timestamp};
use crate::progress::Bar;
use crate::rng::{hash, unit};
use crate::s3::{Client, IN_USE_KEY};

/// How the chunks are split between the bucket and the local cache.
#[derive(Clone, Debug, PartialEq)]
pub struct SplitShape {
    /// Share of the chunks (with an object and a local file) whose local file stays whole;
    /// the others are zero-length markers.
    pub cached: f64,
    /// Share of the chunk objects with no local file at all (a lost or new cache).
    pub no_marker: f64,
    /// Local markers whose object is not in the bucket (the bucket lost them).
    pub no_object: usize,
    /// Unreferenced objects with no local file but a `<hex>.using` marker, as a GC that died
    /// between its phases leaves them.
    pub stale_using: usize,
}

impl Default for SplitShape {
    fn default() -> Self {
        SplitShape {
            cached: 0.25,
            no_marker: 0.02,
            no_object: 0,
            stale_using: 0,
        }
    }
}

/// Makes the bucket if it is not there and refuses one that holds objects: no other
/// datastore's objects may be mixed with a generated one's. Runs before anything is written.
pub fn prepare_bucket(client: &Client) -> Result<()> {
    let target = client.target();
    client
        .create_bucket()
        .with_context(|| format!("creating the bucket {target}"))?;
    let first = client
        .list_page("", None, 1)
        .with_context(|| format!("listing the bucket {target}"))?;
    if let Some(o) = first.objects.first() {
        bail!(
            "the bucket {target} is not empty (it holds {:?}, for one): give a new or empty \
             bucket, so that no other datastore's objects are mixed with this one's",
            o.key
        );
    }
    Ok(())
}

/// Splits the filesystem datastore at `root`, just written, into the bucket of `client` (made
/// ready by [`prepare_bucket`]) and the local cache, as `shape` says; `seed` draws the split.
pub fn split(
    root: &Path,
    client: &Client,
    shape: &SplitShape,
    seed: u64,
    progress: bool,
) -> Result<S3Truth> {
    let target = client.target().clone();
    let referenced = referenced_digests(root)?;

    // Every chunk file, in digest order: what the split decides is drawn from its digest.
    let mut chunks: Vec<(PathBuf, String, ChunkName)> = Vec::new();
    let mut contents: Vec<(PathBuf, String)> = Vec::new();
    collect(root, root, &mut chunks, &mut contents)?;
    chunks.sort_by(|a, b| a.1.cmp(&b.1));

    let draw = |tag: u64, d: &Digest| {
        let b = d.0;
        unit(hash(&[
            seed,
            tag,
            u64::from_le_bytes(b[..8].try_into().unwrap()),
        ]))
    };
    let mut truth = S3Truth {
        bucket: target.to_string(),
        ..S3Truth::default()
    };
    let mut uploads: Vec<(PathBuf, String)> = Vec::new();
    let mut regular: Vec<(PathBuf, String, Digest, bool)> = Vec::new();
    for (path, key, name) in chunks {
        match name {
            ChunkName::Chunk(d) => regular.push((path, key, d, referenced.contains(&d))),
            ChunkName::Bad(..) => uploads.push((path, key)),
            _ => {}
        }
    }
    // Unreferenced chunks for stale `.using` markers, then local markers without an object:
    // the first ones of an order drawn from the seed.
    let mut order: Vec<usize> = (0..regular.len()).collect();
    order.sort_by(|&a, &b| draw(71, &regular[a].2).total_cmp(&draw(71, &regular[b].2)));
    let stale: HashSet<usize> = order
        .iter()
        .copied()
        .filter(|&i| !regular[i].3)
        .take(shape.stale_using)
        .collect();
    let lost: HashSet<usize> = order
        .iter()
        .copied()
        .filter(|i| !stale.contains(i))
        .take(shape.no_object)
        .collect();
    if stale.len() < shape.stale_using {
        bail!(
            "--s3-stale-using {}: the store has only {} unreferenced chunks",
            shape.stale_using,
            stale.len()
        );
    }

    for (i, (path, key, d, is_referenced)) in regular.iter().enumerate() {
        if lost.contains(&i) {
            make_marker(path)?;
            if *is_referenced {
                truth.no_object_referenced += 1;
            } else {
                truth.no_object_garbage += 1;
            }
            continue;
        }
        uploads.push((path.clone(), key.clone()));
        if stale.contains(&i) {
            truth.stale_using += 1;
        } else if draw(72, d) < shape.no_marker {
            if *is_referenced {
                truth.no_marker_referenced += 1;
            } else {
                truth.no_marker_garbage += 1;
            }
        } else if draw(73, d) < shape.cached {
            truth.cached_whole += 1;
        } else {
            truth.markers += 1;
        }
    }

    upload(client, &uploads, &contents, progress, &mut truth)?;
    let host = crate::fsutil::hostname();
    client
        .put(IN_USE_KEY, format!("{{\"hostname\":{host:?}}}").as_bytes())
        .with_context(|| format!("writing {IN_USE_KEY} to {target}"))?;

    // The local cache, after the uploads read the whole files.
    for (i, (path, _, d, _)) in regular.iter().enumerate() {
        if lost.contains(&i) {
            continue;
        }
        if stale.contains(&i) {
            remove(path)?;
            let mut using = path.clone().into_os_string();
            using.push(".using");
            fs::File::create(&using)
                .with_context(|| format!("creating {}", Path::new(&using).display()))?;
        } else if draw(72, d) < shape.no_marker {
            remove(path)?;
        } else if draw(73, d) >= shape.cached {
            make_marker(path)?;
        }
    }
    Ok(truth)
}

/// Truncates a chunk file to a zero-length marker, its times kept (they are the GC's state).
fn make_marker(path: &Path) -> Result<()> {
    let meta = fs::symlink_metadata(path).with_context(|| format!("stat {}", path.display()))?;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOATIME)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    f.set_len(0)
        .with_context(|| format!("truncating {}", path.display()))?;
    set_file_times(
        &f,
        Timestamp::new(meta.atime(), meta.atime_nsec() as u32),
        Timestamp::new(meta.mtime(), meta.mtime_nsec() as u32),
    )
    .with_context(|| format!("setting the times of {}", path.display()))
}

fn remove(path: &Path) -> Result<()> {
    fs::remove_file(path).with_context(|| format!("removing {}", path.display()))
}

/// PUTs every chunk object and every content object, on four connections.
fn upload(
    client: &Client,
    chunks: &[(PathBuf, String)],
    contents: &[(PathBuf, String)],
    progress: bool,
    truth: &mut S3Truth,
) -> Result<()> {
    const THREADS: usize = 4;
    let all: Vec<(&PathBuf, &String, bool)> = chunks
        .iter()
        .map(|(p, k)| (p, k, true))
        .chain(contents.iter().map(|(p, k)| (p, k, false)))
        .collect();
    let bar = Bar::new(
        progress,
        all.len() as u64,
        "{spinner} objects [{wide_bar}] {human_pos}/{human_len} ({per_sec}, eta {eta})",
    );
    let target = client.target().clone();
    let results: Vec<Result<(u64, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (all, bar, target) = (&all, &bar, &target);
                s.spawn(move || -> Result<(u64, u64)> {
                    let client = Client::new(target)?;
                    let mut bytes = 0u64;
                    let mut n = 0u64;
                    for (path, key, is_chunk) in all.iter().skip(t).step_by(THREADS) {
                        let body = read_noatime(path)
                            .with_context(|| format!("reading {}", path.display()))?;
                        client
                            .put(key, &body)
                            .with_context(|| format!("uploading {} to {target}", path.display()))?;
                        if *is_chunk {
                            bytes += body.len() as u64;
                            n += 1;
                        }
                        bar.inc(1);
                    }
                    Ok((n, bytes))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("upload thread panicked"))
            .collect()
    });
    bar.finish_and_clear();
    for r in results {
        let (n, bytes) = r?;
        truth.chunk_objects += n;
        truth.chunk_object_bytes += bytes;
    }
    truth.content_objects = contents.len() as u64;
    Ok(())
}

/// Chunk files (with their keys) and every other file of the datastore (keyed under `.cnt/`),
/// but not `.lock` (a process's, never uploaded).
fn collect(
    root: &Path,
    dir: &Path,
    chunks: &mut Vec<(PathBuf, String, ChunkName)>,
    contents: &mut Vec<(PathBuf, String)>,
) -> Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("reading {}", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let ty = e.file_type()?;
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if ty.is_dir() {
            collect(root, &path, chunks, contents)?;
        } else if ty.is_file() {
            if rel.starts_with(CHUNK_DIR) && rel.as_bytes().get(CHUNK_DIR.len()) == Some(&b'/') {
                let name = ChunkName::classify(e.file_name().as_encoded_bytes());
                if matches!(name, ChunkName::Chunk(_) | ChunkName::Bad(..)) {
                    chunks.push((path, rel, name));
                }
            } else if rel != LOCK_FILE {
                contents.push((path, crate::bucket::content_key(&rel)));
            }
        }
    }
    Ok(())
}

/// The digests the store's indexes reference.
fn referenced_digests(root: &Path) -> Result<HashSet<Digest>> {
    fn walk(dir: &Path, out: &mut HashSet<Digest>) -> Result<()> {
        for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let e = e?;
            let path = e.path();
            if e.file_name().as_encoded_bytes().starts_with(b".") {
                continue;
            }
            if e.file_type()?.is_dir() {
                walk(&path, out)?;
            } else if IndexKind::from_path(&path).is_some() {
                let index = IndexFile::open(&path)?;
                out.extend(index.digests());
            }
        }
        Ok(())
    }
    let mut out = HashSet::new();
    walk(root, &mut out)?;
    Ok(out)
}
