//! One builder for the simulated store, whatever it is built from.
//!
//! A [`Source`] adds the store's nodes (root, `.chunks`, its chunk directories, the snapshot
//! tree) and chunk files to a [`Builder`], in the order their inodes were allocated where
//! that order is known, and hands back an [`IndexSource`], which makes each index file's
//! bytes when the GC's walk opens it. The sources: the generator's history
//! ([`super::history_source`]: the store `gen` would write) and a survey of a real store
//! ([`super::survey_source`]: its real layout and references). A new source (a copy of a
//! store on another host, a ZFS `zdb` dump) is one more file implementing [`Source`].

use std::any::Any;
use std::path::PathBuf;

use anyhow::{anyhow, Result};

use super::digest_table::DigestTable;
use super::Slice;
use crate::datastore::paths::{chunk_subdir_name, CHUNK_DIR};
use crate::datastore::Digest;

/// What a simulated store is built from.
pub trait Source {
    /// Adds the store's nodes and chunks to `b`; returns where its index files' bytes come
    /// from.
    fn build(self: Box<Self>, b: &mut Builder) -> Result<Box<dyn IndexSource>>;
}

/// The bytes of a simulated store's index files.
pub trait IndexSource: Send + Sync {
    /// Per-store scratch for [`IndexSource::bytes`] (each fork of a store has its own, so
    /// that runs side by side do not contend for it).
    fn scratch(&self) -> Box<dyn Any + Send> {
        Box::new(())
    }
    /// The bytes of index `id` (the id of its node's [`NodeKind::Index`]), naming the
    /// store's `chunks` by number where it keeps them so.
    fn bytes(&self, chunks: &[Chunk], id: u32, scratch: &mut (dyn Any + Send)) -> Vec<u8>;
    /// Whether a second thread may build the bytes ahead of the GC's walk (worth it when
    /// building them is costly and reads nothing a run changes).
    fn builds_ahead(&self) -> bool;
    /// Heap bytes of what it keeps, by structure (for `memory_by_structure`).
    fn memory(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// A node of the index tree (everything but chunk files).
pub struct Node {
    pub(super) name: Box<str>,
    pub(super) ino: u64,
    pub(super) kind: NodeKind,
    /// Children in creation order.
    pub(super) children: Vec<u32>,
}

/// What a node of the simulated store is.
#[derive(Clone, Copy)]
pub enum NodeKind {
    /// A directory.
    Dir,
    /// A chunk directory (`.chunks/XXXX`).
    ChunkDir,
    /// An index file: its id in the store's [`IndexSource`].
    Index(u32),
    /// Any other regular file.
    File,
    /// Anything else (a symbolic link, a device): listed, never followed or read.
    Other,
}

/// A chunk file as built: its digest, inode and size, shared by every run (its atime and
/// whether a run removed it are the run's, in [`State`]). 40 bytes: the inode as an offset
/// from the store's first.
#[derive(Clone, Copy)]
pub struct Chunk {
    pub(super) digest: Digest,
    pub(super) ino_off: u32,
    size: u32,
}

impl Chunk {
    /// A chunk as built: inode `first_ino + ino_off`.
    pub(super) fn new(digest: Digest, ino_off: u32, size: u32) -> Chunk {
        Chunk {
            digest,
            ino_off,
            size,
        }
    }

    #[inline]
    pub(super) fn size(&self) -> u32 {
        self.size
    }
}

/// A store being built: nodes and chunks, in the order they are added.
pub struct Builder {
    pub(super) root: PathBuf,
    pub(super) nodes: Vec<Node>,
    pub(super) chunks_node: u32,
    pub(super) chunk_dir_nodes: u32,
    pub(super) chunk_dir_inos: Vec<u64>,
    pub(super) first_ino: u64,
    pub(super) by_digest: DigestTable,
    pub(super) dirs: Vec<Vec<u32>>,
    pub(super) initial_atimes: Vec<u32>,
    pub(super) chunks: Vec<Chunk>,
    pub(super) slice: Slice,
    /// Distinct chunks the store's indexes reference (the source counts them).
    pub(super) referenced: usize,
    /// Bytes the build took beyond what it keeps (freed when it ended).
    pub(super) build_bytes: u64,
    /// The simulated clock, epoch seconds.
    pub(super) now: i64,
    /// Empty marker files of an S3 datastore's cache there as the store is built (a
    /// survey's `.using` markers), see [`super::markers`].
    pub(super) markers: Vec<(super::markers::MarkerName, i64)>,
}

/// Epoch seconds as a chunk keeps them, or an error naming the time.
pub(super) fn chunk_time(t: i64) -> Result<u32> {
    u32::try_from(t).map_err(|_| anyhow!("time {t} is outside 1970-2106"))
}

impl Builder {
    /// An empty store at `root` (a path of its own: nothing under it is a real file) whose
    /// chunk inodes are `first_ino` and above, with room for `chunks` chunks, simulated at
    /// `now`.
    pub fn new(root: PathBuf, first_ino: u64, chunks: usize, slice: Slice, now: i64) -> Builder {
        Builder {
            root,
            nodes: Vec::new(),
            chunks_node: 0,
            chunk_dir_nodes: 0,
            chunk_dir_inos: Vec::with_capacity(slice.chunk_dirs()),
            first_ino,
            by_digest: DigestTable::with_capacity(chunks),
            dirs: vec![Vec::new(); slice.chunk_dirs()],
            initial_atimes: Vec::with_capacity(chunks),
            chunks: Vec::with_capacity(chunks),
            slice,
            referenced: 0,
            build_bytes: 0,
            now,
            markers: Vec::new(),
        }
    }

    /// Room for `chunks` chunks, before the first is added (the digest table sized once).
    pub fn reserve(&mut self, chunks: usize) {
        assert!(self.chunks.is_empty(), "reserved before the first chunk");
        self.chunks.reserve_exact(chunks);
        self.initial_atimes.reserve_exact(chunks);
        self.by_digest = DigestTable::with_capacity(chunks);
    }

    /// The root directory, inode `ino` (node 0: added first).
    pub fn root_node(&mut self, ino: u64) {
        assert!(self.nodes.is_empty(), "the root is the first node");
        self.nodes.push(Node {
            name: "".into(),
            ino,
            kind: NodeKind::Dir,
            children: Vec::new(),
        });
    }

    /// Adds a node under `parent`; listings return a directory's children last added first
    /// (tmpfs's order: newest first).
    pub fn add_node(&mut self, parent: u32, name: &str, ino: u64, kind: NodeKind) -> u32 {
        let id = self.nodes.len() as u32;
        self.nodes.push(Node {
            name: name.into(),
            ino,
            kind,
            children: Vec::new(),
        });
        self.nodes[parent as usize].children.push(id);
        id
    }

    /// Adds `.chunks` under the root (inode `ino`) and, with `dir_ino(p)` for each, the
    /// slice's chunk directories.
    pub fn add_chunk_dirs(&mut self, ino: u64, mut dir_ino: impl FnMut(u16) -> u64) {
        self.chunks_node = self.add_node(0, CHUNK_DIR, ino, NodeKind::Dir);
        self.chunk_dir_nodes = self.nodes.len() as u32;
        for p in (0..self.slice.chunk_dirs()).map(|p| p as u16) {
            let ino = dir_ino(p);
            self.chunk_dir_inos.push(ino);
            self.add_node(
                self.chunks_node,
                &chunk_subdir_name(p),
                ino,
                NodeKind::ChunkDir,
            );
        }
    }

    /// Adds a chunk file: its digest (in the slice's directories), inode, size and atime;
    /// returns its number. A directory lists its chunks last added first.
    pub fn add_chunk(&mut self, digest: Digest, ino: u64, size: u32, atime: u32) -> Result<u32> {
        let idx = u32::try_from(self.chunks.len())
            .ok()
            .filter(|&i| i < u32::MAX)
            .ok_or_else(|| anyhow!("more than 2^32 - 2 chunks"))?;
        let ino_off = ino
            .checked_sub(self.first_ino)
            .and_then(|o| u32::try_from(o).ok())
            .ok_or_else(|| {
                anyhow!(
                    "chunk inode {ino} is more than 2^32 from the first, {}: the simulator \
                     keeps a chunk's inode in 32 bits",
                    self.first_ino
                )
            })?;
        let chunks = &self.chunks;
        self.by_digest
            .insert(&digest.0, idx, |i| chunks[i as usize].digest.0);
        self.dirs[digest.prefix() as usize].push(idx);
        self.initial_atimes.push(atime);
        self.chunks.push(Chunk::new(digest, ino_off, size));
        Ok(idx)
    }

    /// The node named `name` under `parent`.
    pub fn child(&self, parent: u32, name: &str) -> Option<u32> {
        self.nodes[parent as usize]
            .children
            .iter()
            .copied()
            .find(|&c| &*self.nodes[c as usize].name == name)
    }
}
