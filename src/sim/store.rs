//! An in-memory chunk store, answering the GC through the same
//! [`ChunkStore`](crate::store::ChunkStore) and [`Tree`](crate::datastore::snapshots::Tree)
//! traits as a real datastore, and charging the cost model with the requests a FUSE mount of
//! that datastore would receive.
//!
//! **What exists** is what its [`Source`](super::builder::Source) built
//! ([`super::builder`]): the store `chunkscope gen` would write, from the generator's
//! history ([`super::history_source`]), or a real store as a survey saw it
//! ([`super::survey_source`]). Index files are not stored: their bytes are made when the
//! walk opens one ([`super::builder::IndexSource`]).
//!
//! **What the filesystem sees** is in `src/sim/ops.rs`: each operation as the FUSE
//! requests a mount would receive.
//!
//! Memory per chunk: one record of its digest, inode and size (40 bytes), its atime as built
//! (4, for [`SimStore::reset`]), a run's atime and removed bit (4 and 1/8, per run side by
//! side: [`SimStore::fork`]), a 4-byte slot in its directory's list, an 8-byte slot in the
//! digest table (which is 4/7 to 7/8 full: 9-14 bytes), and what its source keeps (for the
//! history's exact digests a content map entry, about 20; nothing for hashed ones): around
//! 65 bytes with hashed digests, 85 with exact ones. The peak is higher, during the build
//! (the history's content sets): 107 bytes a chunk at datastore A's size (BENCHMARKS.md).

use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use super::builder::{Builder, IndexSource, Source};
pub use super::builder::{Chunk, Node, NodeKind};
use super::digest_table::DigestTable;
pub use super::requests::RequestCounts;
pub(super) use super::requests::State;

use crate::datastore::snapshots::EntryKind;
use crate::datastore::Digest;
use crate::faults::Faults;
use crate::instrument::{Instruments, Trace};
use crate::model::Model;

/// How chunk digests are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum DigestMode {
    /// SHA-256 of the chunk's payload, as `gen` writes it (same names, same directories).
    Exact,
    /// A hash of the content id: same distribution over directories, no payload to hash.
    Hashed,
}

/// The simulated datastore: what was built, shared by its forks, and one run's state.
pub struct SimStore {
    built: std::sync::Arc<Built>,
    pub(super) state: Mutex<State>,
    /// The index source's scratch (index files are read one at a time: never contended).
    pub(super) scratch: Mutex<Box<dyn std::any::Any + Send>>,
}

impl std::ops::Deref for SimStore {
    type Target = Built;

    #[inline]
    fn deref(&self) -> &Built {
        &self.built
    }
}

/// The store as built: never changed by a run.
pub struct Built {
    pub(super) root: PathBuf,
    pub(super) nodes: Vec<Node>,
    pub(super) chunks_node: u32,
    /// Chunk directory `p` is node `chunk_dir_nodes + p`.
    pub(super) chunk_dir_nodes: u32,
    /// Chunk directory `p`'s inode.
    pub(super) chunk_dir_inos: Vec<u64>,
    /// A chunk keeps its inode as an offset from this one.
    pub(super) first_ino: u64,
    /// Bytes the build took beyond what it keeps (freed when it ended).
    pub(super) build_bytes: u64,
    /// Chunk numbers (indices of `chunks`) by digest.
    pub(super) by_digest: DigestTable,
    /// Per chunk directory, its chunks, listed last first.
    pub(super) dirs: Vec<Vec<u32>>,
    /// Each chunk's atime as built (what [`SimStore::reset`] restores).
    pub(super) initial_atimes: Vec<u32>,
    /// The simulated clock (epoch seconds): the time the store was built for.
    pub(super) now: i64,
    /// Distinct chunks the snapshots present reference.
    pub(super) referenced: usize,
    /// The chunks, by chunk number.
    pub(super) chunks: Vec<Chunk>,
    /// The marker files as built (what [`SimStore::reset`] restores), with their inodes.
    pub(super) initial_markers: super::markers::Markers,
    /// The part of the store this is: its chunk directories, and the model's scale.
    pub(super) slice: super::Slice,
    /// Where the index files' bytes come from.
    pub(super) indexes: Box<dyn IndexSource>,
}

impl SimStore {
    /// Builds the store `source` describes, with `model` for its runs.
    pub fn from_source(
        source: Box<dyn Source>,
        root: PathBuf,
        first_ino: u64,
        chunks: usize,
        slice: super::Slice,
        now: i64,
        model: Model,
    ) -> anyhow::Result<SimStore> {
        let mut b = Builder::new(root, first_ino, chunks, slice, now);
        let indexes = source.build(&mut b)?;
        let built = Built::from_builder(b, indexes)?;
        let mut st = State::new(Instruments::simulated(None, model));
        st.atimes = built.initial_atimes.clone();
        st.markers = built.initial_markers.clone();
        st.removed = vec![0; built.chunks.len().div_ceil(64)];
        // As a default mount of a datastore (`mount --dir-ttl`).
        let ttl_ns = (crate::trace::KernelCache::DATASTORE_DIR_TTL_S * 1e9) as u64;
        st.dentries = super::dentries::Dentries::new(ttl_ns, built.nodes.len());
        let scratch = Mutex::new(built.indexes.scratch());
        Ok(SimStore {
            built: std::sync::Arc::new(built),
            state: Mutex::new(st),
            scratch,
        })
    }

    /// Another store over the same build, for a run side by side with this one's: the same
    /// directory TTL and model parameters, its own atimes, removals, model and counts. A run
    /// resets it as it does this one. `None` when this store injects faults or records a
    /// trace (runs with those stay one after the other: one trace, one set of rule counters).
    pub fn fork(&self) -> Option<SimStore> {
        let st = self.lock();
        if st.inst.faults.is_some() || st.trace.is_some() {
            return None;
        }
        let params = st.inst.model()?.params().clone();
        let mut fork = State::new(Instruments::simulated(None, Model::new(params)));
        fork.atimes = self.initial_atimes.clone();
        fork.markers = self.initial_markers.clone();
        fork.removed = vec![0; self.chunks.len().div_ceil(64)];
        fork.dentries = super::dentries::Dentries::new(st.dentries.ttl_ns(), self.nodes.len());
        Some(SimStore {
            scratch: Mutex::new(self.built.indexes.scratch()),
            built: std::sync::Arc::clone(&self.built),
            state: Mutex::new(fork),
        })
    }
}

impl Built {
    /// The store `b` built, its index files' bytes from `indexes`.
    fn from_builder(b: Builder, indexes: Box<dyn IndexSource>) -> anyhow::Result<Built> {
        if b.nodes.is_empty() || b.chunk_dir_inos.len() != b.slice.chunk_dirs() {
            anyhow::bail!("a simulated store needs its root and its chunk directories");
        }
        // New files take the inodes after every one there (as ZFS and tmpfs number them).
        let last_ino = b
            .chunks
            .iter()
            .map(|c| b.first_ino + c.ino_off as u64)
            .chain(b.nodes.iter().map(|n| n.ino))
            .chain(b.chunk_dir_inos.iter().copied())
            .max()
            .unwrap_or(0);
        let initial_markers = super::markers::Markers::new(last_ino + 1, &b.markers);
        Ok(Built {
            initial_markers,
            root: b.root,
            nodes: b.nodes,
            chunks_node: b.chunks_node,
            chunk_dir_nodes: b.chunk_dir_nodes,
            chunk_dir_inos: b.chunk_dir_inos,
            first_ino: b.first_ino,
            build_bytes: b.build_bytes,
            by_digest: b.by_digest,
            dirs: b.dirs,
            initial_atimes: b.initial_atimes,
            now: b.now,
            referenced: b.referenced,
            chunks: b.chunks,
            slice: b.slice,
            indexes,
        })
    }

    pub(super) fn child(&self, parent: u32, name: &str) -> Option<u32> {
        if parent == self.chunks_node {
            // 65,536 children: computed, not searched.
            let p = u16::from_str_radix(name, 16)
                .ok()
                .filter(|_| name.len() == 4)?;
            return Some(self.chunk_dir_nodes + p as u32);
        }
        self.nodes[parent as usize]
            .children
            .iter()
            .copied()
            .find(|&c| &*self.nodes[c as usize].name == name)
    }
}

impl SimStore {
    /// Chunk files in the store (removed ones excluded).
    pub fn chunk_count(&self) -> usize {
        let st = self.lock();
        (0..self.chunks.len())
            .filter(|&i| !st.is_removed(i))
            .count()
    }

    /// Distinct chunks the snapshots reference.
    pub fn referenced(&self) -> usize {
        self.referenced
    }

    /// The heap bytes of each structure a chunk has a share of, largest kept first: what the
    /// store holds through every run, and (last) the build's content sets, which it frees
    /// when it ends (the peak is near their sum).
    pub fn memory_by_structure(&self) -> Vec<(&'static str, u64)> {
        let st = self.lock();
        let dirs: usize = self.dirs.iter().map(|d| d.capacity()).sum();
        let mut out = vec![
            (
                "chunk records",
                (self.chunks.capacity() * std::mem::size_of::<Chunk>()) as u64,
            ),
            (
                "a run's atimes and removals",
                (st.atimes.capacity() * 4 + st.removed.capacity() * 8) as u64,
            ),
            ("digest table", self.by_digest.heap_bytes()),
            (
                "chunk directories",
                (dirs * 4 + self.dirs.len() * std::mem::size_of::<Vec<u32>>()) as u64,
            ),
            (
                "initial atimes",
                (self.initial_atimes.capacity() * 4) as u64,
            ),
        ];
        out.extend(self.indexes.memory());
        out.push(("content sets (during the build)", self.build_bytes));
        out
    }

    /// The part of the store this is.
    pub fn slice(&self) -> super::Slice {
        self.slice
    }

    /// Distinct chunks (all ever created here).
    pub fn chunks_created(&self) -> usize {
        self.initial_atimes.len()
    }

    /// `params` with the store's entries per directory filled in where its ZAP layout needs
    /// them and they were not given ([`crate::model::ModelParams::dir_entries`]).
    pub fn fill_dir_entries(&self, params: &mut crate::model::ModelParams) {
        if params.needs_dir_entries() {
            params.dir_entries = self.dir_entries();
        }
    }

    /// Chunk files per chunk directory, on average (what a model's ZAP layout needs to know,
    /// [`crate::model::ModelParams::dir_entries`]).
    pub fn dir_entries(&self) -> u64 {
        (self.chunk_count() as u64)
            .div_ceil(self.slice.chunk_dirs() as u64)
            .max(1)
    }

    /// Warms the model's cache with the store's metadata as it stands: every file's inode
    /// block in creation order, then every directory (as a previous GC leaves a pool whose
    /// cache holds it all, or the most recent part of it).
    pub fn warm(&self) {
        let mut st = self.lock();
        let st = &mut *st;
        let files = self
            .nodes
            .iter()
            .filter(|n| !matches!(n.kind, NodeKind::Dir | NodeKind::ChunkDir))
            .map(|n| n.ino);
        let chunks = self
            .chunks
            .iter()
            .enumerate()
            .filter(|&(i, _)| !st.is_removed(i))
            .map(|(_, c)| self.ino_of(c));
        let dirs: Vec<u64> = self
            .nodes
            .iter()
            .filter(|n| matches!(n.kind, NodeKind::Dir | NodeKind::ChunkDir))
            .map(|n| n.ino)
            .collect();
        let chunks: Vec<u64> = chunks.collect();
        st.model().warm(files.chain(chunks), &dirs);
    }

    /// Back to the state it was built in, with a fresh model (cold caches), no counts, and
    /// the fault rules' counters at zero (each run is a new mount's).
    pub fn reset(&self, model: Model) {
        let mut st = self.lock();
        st.atimes.copy_from_slice(&self.initial_atimes);
        st.removed.fill(0);
        st.markers.clone_from(&self.initial_markers);
        st.inst.set_model(model);
        if let Some(f) = &mut st.inst.faults {
            f.restart();
        }
        st.counts = RequestCounts::default();
        st.first_index_ns = None;
        st.lanes.clear();
        st.job = None;
        st.dentries.clear();
        st.indexes_not_ahead = 0;
    }

    /// The model's clock when the first index file was opened since the reset (the end of a
    /// prefetch pass, for the strategies that have one).
    pub fn first_index_ns(&self) -> Option<u64> {
        self.lock().first_index_ns
    }

    /// Records the requests of the following runs into `trace` (replacing any before), or
    /// stops recording; returns the trace that was recording.
    pub fn set_trace(&self, trace: Option<Trace>) -> Option<Trace> {
        std::mem::replace(&mut self.lock().trace, trace)
    }

    /// Injects the faults `faults` decides in the following runs, as a mount with those rules
    /// would (the same decisions for the same requests); `None` stops injecting.
    pub fn set_faults(&self, faults: Option<Faults>) {
        self.lock().inst.faults = faults.filter(|f| !f.is_empty());
    }

    /// Simulates a mount whose kernel caches directories for `ttl` (`mount --dir-ttl`; zero:
    /// every directory lookup reaches the overlay), from the next run on.
    /// Built stores simulate a default mount of a datastore
    /// ([`crate::trace::KernelCache::DATASTORE_DIR_TTL_S`]).
    pub fn set_dir_ttl(&self, ttl: std::time::Duration) {
        let ns = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX / 2);
        self.lock().dentries = super::dentries::Dentries::new(ns, self.nodes.len());
    }

    /// The directory TTL simulated, seconds.
    pub fn dir_ttl_s(&self) -> f64 {
        self.lock().dentries.ttl_ns() as f64 / 1e9
    }

    /// Each fault rule with its counters in the run so far.
    pub fn fault_stats(&self) -> Vec<crate::faults::RuleStats> {
        self.lock()
            .inst
            .faults
            .as_ref()
            .map_or(Vec::new(), |f| f.stats())
    }

    /// A marker in the trace (phase boundaries), at the model's clock.
    pub fn mark(&self, text: &str) {
        let st = self.lock();
        if let Some(t) = &st.trace {
            st.inst.marker(t, st.pid, text.as_bytes());
        }
    }

    /// Runs `f` on the model (totals, clock).
    pub fn with_model<T>(&self, f: impl FnOnce(&mut Model) -> T) -> T {
        f(self.lock().model())
    }

    /// The requests so far, by kind.
    pub fn counts(&self) -> RequestCounts {
        self.lock().counts.clone()
    }

    /// Chunk `c`'s inode number.
    #[inline]
    pub(super) fn ino_of(&self, c: &Chunk) -> u64 {
        self.first_ino + c.ino_off as u64
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("simulated store poisoned")
    }

    /// The chunk named `d` (removed or not).
    #[inline]
    pub(super) fn find(&self, d: &Digest) -> Option<u32> {
        let chunks = &self.chunks;
        self.by_digest
            .find(&d.0, |i| chunks[i as usize].digest == *d)
    }

    /// The bytes of index file `id`, from the store's source.
    pub(super) fn index_bytes(&self, id: u32) -> Vec<u8> {
        let mut scratch = self.scratch.lock().expect("index scratch poisoned");
        self.indexes.bytes(&self.built.chunks, id, &mut **scratch)
    }

    /// The node at `path`, without requests.
    pub(super) fn node_at(&self, path: &Path) -> Option<u32> {
        let rel = path.strip_prefix(&self.root).ok()?;
        let mut at = 0u32;
        for comp in rel.components() {
            if let Component::Normal(name) = comp {
                at = self.child(at, name.to_str()?)?;
            }
        }
        Some(at)
    }

    /// The entries of node `n` as a listing returns them (newest first).
    pub(super) fn entries(&self, n: u32) -> Vec<(String, EntryKind)> {
        self.nodes[n as usize]
            .children
            .iter()
            .rev()
            .map(|&c| {
                let child = &self.nodes[c as usize];
                let kind = match child.kind {
                    NodeKind::Dir | NodeKind::ChunkDir => EntryKind::Dir,
                    NodeKind::Index(_) | NodeKind::File => EntryKind::File,
                    NodeKind::Other => EntryKind::Other,
                };
                (child.name.to_string(), kind)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's state keeps each chunk's atime and removed flag apart from the others'.
    #[test]
    fn a_runs_atimes_and_removals_are_each_chunks_own() {
        let mut st = State::new(Instruments::simulated(
            None,
            Model::new(crate::model::ModelParams::preset("none").unwrap()),
        ));
        st.atimes = vec![1_800_000_000; 130];
        st.removed = vec![0; 3];
        st.set_atime(64, 4_000_000_000);
        st.set_removed(63, true);
        st.set_removed(129, true);
        assert_eq!((st.atime(64), st.atime(63)), (4_000_000_000, 1_800_000_000));
        let removed: Vec<usize> = (0..130).filter(|&i| st.is_removed(i)).collect();
        assert_eq!(removed, [63, 129]);
        st.set_removed(63, false);
        assert!(!st.is_removed(63) && st.is_removed(129));
        assert_eq!(std::mem::size_of::<Chunk>(), 40);
        let t = super::super::builder::chunk_time;
        assert!(t(-1).is_err() && t(1 << 33).is_err());
    }
}
