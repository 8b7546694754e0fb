//! A survey of a real store ([`crate::survey`]) as a simulated store's source: its chunks
//! with their real inode numbers, digests and readdir order, its chunk directories' inodes,
//! its snapshot tree as the phase-1 walk listed it (entries in readdir order, with their
//! inodes), and each index file's references in order, made into an index file of the
//! same kind when the walk opens it.
//!
//! Each index file is made with the content bytes (and fidx chunk size) the survey read from
//! it, so a GC's "Original data usage" is the store's; a didx's chunk boundaries are spread
//! evenly over its bytes (the GC reads only the digests and the last end).
//!
//! What a survey does not see: the atimes and sizes of referenced chunks (it stats only
//! unreferenced ones: a GC's phase 1 touches the others anyway), so they start at the
//! survey's time and size 0 (the sweep's byte counts of kept chunks are not the store's);
//! directories the walk did not list (`.chunks` but for its chunk directories, hidden ones)
//! are empty.

use std::any::Any;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use hashbrown::HashMap;

use super::builder::{Builder, IndexSource, Source};
use super::builder::{Chunk, NodeKind};
use super::markers::{MarkerKind, MarkerName};
use crate::datastore::paths::{CHUNK_DIR, CHUNK_SUBDIRS};
use crate::datastore::snapshots::EntryKind;
use crate::datastore::Digest;
use crate::survey::file::{DirRecord, SurveyFile};

/// A surveyed store.
pub struct SurveySource {
    /// The survey.
    pub file: SurveyFile,
}

impl SurveySource {
    /// The smallest chunk inode of the survey (a chunk keeps its own as an offset from it).
    pub fn first_ino(&self) -> u64 {
        self.file.chunks.iter().map(|c| c.1).min().unwrap_or(0)
    }

    /// The root the surveyed store is simulated at (below `/simulated`: nothing there is a
    /// real file).
    pub fn root(&self) -> PathBuf {
        let store = Path::new(&self.file.header.store);
        Path::new("/simulated").join(store.strip_prefix("/").unwrap_or(store))
    }
}

/// Index files known by their references (a survey's, a trace's): each one's kind and its
/// references, 4 bytes each (a chunk's number, or from `chunks` on one of `not_listed`),
/// made into an index file of that kind when opened.
pub(super) struct RefIndexes {
    pub(super) fixed: Vec<bool>,
    /// Each one's content bytes and fidx chunk size; `None` when unknown (a trace's
    /// indexes): [`CHUNK_SIZE`] a reference.
    pub(super) sizes: Vec<Option<(u64, u64)>>,
    pub(super) refs: Vec<Vec<u32>>,
    pub(super) not_listed: Vec<Digest>,
    pub(super) chunks: u32,
    pub(super) ctime: i64,
}

/// The chunk size a surveyed index is made with (PBS's fixed indexes use 4 MiB; the GC
/// reads only the digests).
const CHUNK_SIZE: u64 = 4 << 20;

impl Source for SurveySource {
    fn build(self: Box<Self>, b: &mut Builder) -> Result<Box<dyn IndexSource>> {
        let f = self.file;
        if b.slice.of != 1 {
            bail!("a surveyed store is simulated whole (no --slice)");
        }
        if f.dir_chunks.len() != CHUNK_SUBDIRS {
            bail!(
                "the survey holds {} chunk directories, not {CHUNK_SUBDIRS}",
                f.dir_chunks.len()
            );
        }
        {
            // The last listing of each directory the walk listed.
            let dirs: HashMap<&Path, &DirRecord> =
                f.dirs.iter().map(|d| (d.path.as_path(), d)).collect();
            let indexes: HashMap<&Path, u32> = f
                .indexes
                .iter()
                .enumerate()
                .map(|(i, x)| (x.path.as_path(), i as u32))
                .collect();
            let Some(root) = dirs.get(Path::new("")) else {
                bail!("the survey holds no listing of the store's root");
            };
            b.reserve(f.chunks.len());
            b.root_node(root.ino);
            let mut tree = Tree {
                b,
                dirs: &dirs,
                indexes: &indexes,
                dir_inos: &f.dir_inos,
                chunk_dirs_added: false,
            };
            tree.add_children(0, Path::new(""), root);
            if !tree.chunk_dirs_added {
                bail!("the survey's listing of the store's root has no {CHUNK_DIR}");
            }
        }
        // Listings return children last added first: added in readdir order, reversed.
        for n in &mut b.nodes {
            n.children.reverse();
        }

        // The chunks, in the survey's order (their numbers there are their numbers here).
        let mut unreferenced = f.unreferenced.iter().peekable();
        let surveyed = clamp_time(f.header.surveyed_at);
        let mut number = 0u64;
        for (p, &count) in f.dir_chunks.iter().enumerate() {
            for _ in 0..count {
                let (digest, ino) = f.chunks[number as usize];
                if digest.prefix() as usize != p {
                    bail!("chunk {digest} listed in directory {p:04x} of the survey (damaged?)");
                }
                let (atime, size) = match unreferenced.peek() {
                    Some(u) if u.number == number => {
                        let u = unreferenced.next().expect("peeked");
                        (
                            clamp_time(u.atime),
                            u32::try_from(u.size).unwrap_or(u32::MAX),
                        )
                    }
                    _ => (surveyed, 0),
                };
                b.add_chunk(digest, ino, size, atime)?;
                number += 1;
            }
        }
        for d in &mut b.dirs {
            d.reverse();
        }
        let chunks = f.chunks.len() as u32;
        let mut referenced = vec![0u64; f.chunks.len().div_ceil(64)];
        for r in f.indexes.iter().flat_map(|i| &i.refs) {
            if *r < chunks {
                referenced[*r as usize / 64] |= 1 << (r % 64);
            }
        }
        b.referenced = referenced.iter().map(|w| w.count_ones() as usize).sum();
        // An S3 datastore's `.using` markers and bad copies (its bucket is the run's, see
        // `sim::bucket`).
        if let Some(bucket) = &f.bucket {
            let marker = |digest, kind| MarkerName { digest, kind };
            b.markers.extend(
                bucket
                    .using
                    .iter()
                    .map(|&d| (marker(d, MarkerKind::Using), f.header.surveyed_at)),
            );
            b.markers.extend(
                bucket
                    .bad
                    .iter()
                    .map(|&(d, n, atime)| (marker(d, MarkerKind::Bad(n)), atime)),
            );
        }
        let mut fixed = Vec::with_capacity(f.indexes.len());
        let mut sizes = Vec::with_capacity(f.indexes.len());
        let mut refs = Vec::with_capacity(f.indexes.len());
        for i in f.indexes {
            fixed.push(i.fixed);
            sizes.push(Some((i.size, i.chunk_size)));
            refs.push(i.refs);
        }
        Ok(Box::new(RefIndexes {
            fixed,
            sizes,
            refs,
            not_listed: f.not_listed,
            chunks,
            ctime: f.header.surveyed_at,
        }))
    }
}

/// Epoch seconds as a chunk keeps them (1970 to 2106): a surveyed time outside is kept at
/// the nearest end, which a GC decides the same way (long before or after any cutoff).
fn clamp_time(t: i64) -> u32 {
    t.clamp(0, u32::MAX as i64) as u32
}

/// Adds the walk's directories below the root, in readdir order.
struct Tree<'a, 'b> {
    b: &'a mut Builder,
    dirs: &'a HashMap<&'b Path, &'b DirRecord>,
    indexes: &'a HashMap<&'b Path, u32>,
    dir_inos: &'a [u64],
    chunk_dirs_added: bool,
}

impl Tree<'_, '_> {
    fn add_children(&mut self, node: u32, path: &Path, record: &DirRecord) {
        for (name, kind, ino) in &record.entries {
            let child_path = path.join(name);
            if node == 0 && name == CHUNK_DIR && *kind == EntryKind::Dir {
                let inos = self.dir_inos;
                self.b.add_chunk_dirs(*ino, |p| inos[p as usize]);
                self.chunk_dirs_added = true;
                continue;
            }
            let kind = match kind {
                EntryKind::Dir => NodeKind::Dir,
                EntryKind::File => match self.indexes.get(child_path.as_path()) {
                    Some(&id) => NodeKind::Index(id),
                    None => NodeKind::File,
                },
                EntryKind::Other => NodeKind::Other,
            };
            let n = self.b.add_node(node, name, *ino, kind);
            if matches!(kind, NodeKind::Dir) {
                if let Some(r) = self.dirs.get(child_path.as_path()) {
                    self.add_children(n, &child_path, r);
                }
            }
        }
    }
}

impl IndexSource for RefIndexes {
    fn bytes(&self, chunks: &[Chunk], id: u32, _: &mut (dyn Any + Send)) -> Vec<u8> {
        let digests: Vec<Digest> = self.refs[id as usize]
            .iter()
            .map(|&r| match r.checked_sub(self.chunks) {
                Some(i) => self.not_listed[i as usize],
                None => chunks[r as usize].digest,
            })
            .collect();
        let uuid = [0u8; 16];
        let n = digests.len() as u64;
        let (size, chunk_size) = self.sizes[id as usize].unwrap_or((n * CHUNK_SIZE, CHUNK_SIZE));
        if self.fixed[id as usize] {
            let chunk_size = if chunk_size == 0 {
                CHUNK_SIZE
            } else {
                chunk_size
            };
            crate::datastore::index::fixed_index_bytes(uuid, self.ctime, size, chunk_size, &digests)
        } else {
            // The i-th chunk ends at an even share of the bytes: the last at `size`.
            let end = |i: u64| (size as u128 * (i + 1) as u128 / n.max(1) as u128) as u64;
            let entries: Vec<(u64, Digest)> = digests
                .into_iter()
                .enumerate()
                .map(|(i, d)| (end(i as u64), d))
                .collect();
            crate::datastore::index::dynamic_index_bytes(uuid, self.ctime, &entries)
        }
    }

    fn builds_ahead(&self) -> bool {
        true
    }

    fn memory(&self) -> Vec<(&'static str, u64)> {
        let refs: usize = self.refs.iter().map(|r| r.capacity() * 4).sum();
        let per_index = std::mem::size_of::<Vec<u32>>()
            + std::mem::size_of::<Option<(u64, u64)>>()
            + std::mem::size_of::<bool>();
        let indexes = self.refs.capacity() * per_index;
        vec![("index references", (refs + indexes) as u64)]
    }
}
