//! An in-memory chunk store built from the generator's history, answering the GC through the
//! same [`ChunkStore`](crate::store::ChunkStore) and [`Tree`](crate::datastore::snapshots::Tree)
//! traits as a real datastore, and charging the cost model with the requests a FUSE mount of
//! that datastore would receive.
//!
//! **What exists.** Exactly what `chunkscope gen` would write for the same configuration,
//! created in the same order: the root, `.chunks`, `.lock`, the 65,536 chunk directories, then
//! per backup event its new chunks and (for a kept snapshot) the group directories on first
//! use, the owner file, the snapshot directory, the config blob, the index files and the
//! manifest. Inode numbers are allocated in that order from `first_ino`, as ZFS allocates
//! object ids and tmpfs numbers inodes; listings return entries newest first, as tmpfs does.
//! (tmpfs numbers from one counter per filesystem: a store matches its simulation block for
//! block only if nothing else created files on that tmpfs while it was generated.)
//! Index files are not stored: their bytes are built from the history when the walk opens one.
//!
//! **What the filesystem sees** is in `src/sim/ops.rs`: each operation as the FUSE
//! requests a mount would receive.
//!
//! Memory per chunk: one record of its digest, inode and size (40 bytes), its atime as built
//! (4, for [`SimStore::reset`]), a run's atime and removed bit (4 and 1/8, per run side by
//! side: [`SimStore::fork`]), a 4-byte slot in its directory's list, an 8-byte slot in the
//! digest table (which is 4/7 to 7/8 full: 9-14 bytes), and, for exact digests, a content map
//! entry (about 20; hashed digests never fill it): around 65 bytes with hashed digests, 85
//! with exact ones. The peak is higher, during the build (the history's content sets): 107
//! bytes a chunk at datastore A's size (BENCHMARKS.md).

use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use hashbrown::HashMap;

use super::digest_table::DigestTable;
pub use super::requests::RequestCounts;

use crate::datastore::paths::{
    chunk_subdir_name, CHUNK_DIR, GROUP_OWNER_FILE, LOCK_FILE, MANIFEST_BLOB_NAME,
};
use crate::datastore::snapshots::EntryKind;
use crate::datastore::Digest;
use crate::faults::Faults;
use crate::gen::history::{ContentId, Event, History};
use crate::gen::payload::PayloadModel;
use crate::gen::writer::{archive_index_bytes, config_blob_name, group_dir};
use crate::gen::GenConfig;
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

/// A node of the index tree (everything but chunk files).
pub(super) struct Node {
    pub(super) name: Box<str>,
    pub(super) ino: u64,
    pub(super) kind: NodeKind,
    /// Children in creation order.
    pub(super) children: Vec<u32>,
}

#[derive(Clone, Copy)]
pub(super) enum NodeKind {
    Dir,
    /// Chunk directory `prefix`.
    ChunkDir,
    Index {
        event: Event,
        archive: u32,
    },
    File,
}

/// A chunk file as built: its digest, inode and size, shared by every run (its atime and
/// whether a run removed it are the run's, in [`State`]). 40 bytes: the inode as an offset
/// from the store's first.
#[derive(Clone, Copy)]
pub(super) struct Chunk {
    pub(super) digest: Digest,
    ino_off: u32,
    size: u32,
}

impl Chunk {
    /// A chunk as built: inode `first_ino + ino_off`.
    fn new(digest: Digest, ino_off: u32, size: u32) -> Chunk {
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

/// Epoch seconds as a chunk keeps them, or an error naming the time.
fn chunk_time(t: i64) -> anyhow::Result<u32> {
    u32::try_from(t).map_err(|_| anyhow::anyhow!("time {t} is outside 1970-2106"))
}

/// What one run changes: the chunks' atimes and removals, the model, the counts. Each
/// [`SimStore::fork`] has its own, so runs side by side share only what was built.
pub(super) struct State {
    /// Fault rules and the model, as a mount's (see [`crate::instrument`]).
    pub(super) inst: Instruments,
    /// Each chunk's atime, epoch seconds as `u32` (1970 to 2106), by chunk number.
    pub(super) atimes: Vec<u32>,
    /// Each chunk's removed flag, a bit by chunk number.
    pub(super) removed: Vec<u64>,
    pub(super) counts: RequestCounts,
    /// Listing scratch: the inodes a readdir returned.
    pub(super) listing: Vec<u64>,
    pub(super) trace: Option<Trace>,
    /// This process: the caller in the trace's records.
    pub(super) pid: u32,
    /// The model's clock when the first index file was opened since the reset.
    pub(super) first_index_ns: Option<u64>,
    /// Before the first index file: modelled time per calling thread (the prefetch pass's
    /// jobs), see [`State::end_pass`].
    pub(super) lanes: Vec<(std::thread::ThreadId, u64)>,
    /// The directories the kernel of a mount with a directory TTL would have cached.
    pub(super) dentries: super::dentries::Dentries,
    /// Index files of a walk with a thread building ahead that the GC's thread built itself
    /// (0 unless that thread stopped early: a test checks it).
    pub(super) indexes_not_ahead: u64,
}

/// The simulated datastore: what was built, shared by its forks, and one run's state.
pub struct SimStore {
    built: std::sync::Arc<Built>,
    pub(super) state: Mutex<State>,
    /// Where the index walk stands in the history of the archive it reads (index files are
    /// read one at a time: never contended).
    pub(super) cursor: Mutex<crate::gen::history::VersionCursor>,
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
    /// Chunk directory `p` is node `chunk_dir_nodes + p`, inode `chunk_dir_first_ino + p`.
    pub(super) chunk_dir_nodes: u32,
    pub(super) chunk_dir_first_ino: u64,
    /// The root's inode; a chunk keeps its own as an offset from it.
    pub(super) first_ino: u64,
    /// Bytes the build's content sets took (freed when it ended).
    pub(super) sets_bytes: u64,
    /// Chunk numbers (indices of `State::chunks`) by digest.
    pub(super) by_digest: DigestTable,
    /// Per chunk directory, its chunks in creation order.
    pub(super) dirs: Vec<Vec<u32>>,
    /// Each chunk's atime as built (what [`SimStore::reset`] restores).
    pub(super) initial_atimes: Vec<u32>,
    /// Content -> chunk, for exact digests (emptied after the build for hashed ones).
    pub(super) content: HashMap<ContentId, u32>,
    pub(super) mode: DigestMode,
    /// The simulated clock (epoch seconds): the time the store was built for.
    pub(super) now: i64,
    pub(super) history: History,
    /// Distinct chunks the snapshots present reference.
    pub(super) referenced: usize,
    pub(super) cfg: GenConfig,
    pub(super) payload: PayloadModel,
    /// The chunks, by chunk number (creation order).
    pub(super) chunks: Vec<Chunk>,
    /// The part of the store this is: its chunk directories, and the model's scale.
    pub(super) slice: super::Slice,
}

fn hashed_digest(seed: u64, c: ContentId) -> Digest {
    let mut d = [0u8; 32];
    for (i, part) in d.chunks_mut(8).enumerate() {
        part.copy_from_slice(&crate::rng::hash(&[seed, 0x0053_494d, c.0, i as u64]).to_le_bytes());
    }
    Digest(d)
}

impl SimStore {
    /// Builds the store `gen` would write for `cfg`, as it stands `now` (epoch seconds: the
    /// generation time, which shifts every atime as the writer does).
    pub fn build(
        cfg: &GenConfig,
        history: History,
        mode: DigestMode,
        first_ino: u64,
        now: i64,
        slice: super::Slice,
        model: Model,
    ) -> anyhow::Result<SimStore> {
        if cfg.damage != crate::gen::Damage::default() {
            anyhow::bail!(
                "the simulator does not model damaged stores (missing, bad or temp chunks)"
            );
        }
        let shift = now - history.now;
        let payload = PayloadModel {
            seed: cfg.seed,
            chunk_size: cfg.chunk_size,
            entropy: cfg.entropy,
            incompressible: cfg.incompressible,
        };
        let mut sets = history.chunk_sets();
        let present = sets.present_len();
        let mut s = Built {
            root: PathBuf::from(format!("/simulated/{}", cfg.preset)),
            nodes: Vec::new(),
            chunks_node: 0,
            chunk_dir_nodes: 0,
            chunk_dir_first_ino: 0,
            first_ino,
            sets_bytes: sets.heap_bytes(),
            by_digest: DigestTable::with_capacity(present),
            dirs: vec![Vec::new(); slice.chunk_dirs()],
            slice,
            initial_atimes: Vec::with_capacity(present),
            // Hashed digests need no map from content to chunk: the sets mark what was made.
            content: match mode {
                DigestMode::Exact => HashMap::with_capacity(present),
                DigestMode::Hashed => HashMap::new(),
            },
            mode,
            now,
            history,
            referenced: sets.referenced_len(),
            cfg: cfg.clone(),
            payload,
            chunks: Vec::new(),
        };
        let mut ino = first_ino;
        let mut alloc = || {
            let i = ino;
            ino += 1;
            i
        };
        // The root, `.chunks`, `.lock`, the chunk directories (datastore::create).
        s.nodes.push(Node {
            name: "".into(),
            ino: alloc(),
            kind: NodeKind::Dir,
            children: Vec::new(),
        });
        s.chunks_node = s.add_node(0, CHUNK_DIR, alloc(), NodeKind::Dir);
        s.add_node(0, LOCK_FILE, alloc(), NodeKind::File);
        s.chunk_dir_nodes = s.nodes.len() as u32;
        for p in (0..slice.chunk_dirs()).map(|p| p as u16) {
            let dir_ino = alloc();
            if p == 0 {
                s.chunk_dir_first_ino = dir_ino;
            }
            debug_assert_eq!(dir_ino, s.chunk_dir_first_ino + p as u64);
            s.add_node(
                s.chunks_node,
                &chunk_subdir_name(p),
                dir_ino,
                NodeKind::ChunkDir,
            );
        }
        let mut chunks: Vec<Chunk> = Vec::with_capacity(present);
        // The history, in the writer's creation order.
        let mut data = Vec::new();
        let mut contents = Vec::new();
        let mut groups_created = hashbrown::HashSet::new();
        // The history stays out of `s` while nodes are added, so it can be borrowed.
        let placeholder = History {
            namespaces: Vec::new(),
            groups: Vec::new(),
            model: s.history.model,
            now: s.history.now,
            prev_gc: s.history.prev_gc,
            prev2_gc: s.history.prev2_gc,
        };
        let history = std::mem::replace(&mut s.history, placeholder);
        let mut cursors = history.cursors();
        for e in history.events() {
            let g = &history.groups[e.group as usize];
            for (ai, cursor) in cursors[e.group as usize].iter_mut().enumerate() {
                contents.clear();
                // Contents this archive had at its previous backup were seen there.
                history.for_each_new_content_cached(cursor, &e, ai, |c| contents.push(c));
                for &c in &contents {
                    // Each content present gets its chunk once.
                    if !sets.mark(c) {
                        continue;
                    }
                    let digest = slice.digest(match mode {
                        DigestMode::Exact => {
                            s.payload.fill(c, &mut data);
                            Digest::of(&data)
                        }
                        DigestMode::Hashed => hashed_digest(cfg.seed, c),
                    });
                    let atime = history.initial_atime(&sets, c, e.time);
                    let idx = u32::try_from(chunks.len())
                        .ok()
                        .filter(|&i| i < u32::MAX)
                        .ok_or_else(|| anyhow::anyhow!("more than 2^32 - 2 chunks"))?;
                    s.by_digest
                        .insert(&digest.0, idx, |i| chunks[i as usize].digest.0);
                    s.dirs[digest.prefix() as usize].push(idx);
                    let atime = chunk_time(atime + shift)?;
                    s.initial_atimes.push(atime);
                    let ino_off = u32::try_from(alloc() - first_ino)
                        .map_err(|_| anyhow::anyhow!("more than 2^32 inodes"))?;
                    chunks.push(Chunk::new(digest, ino_off, s.payload.len(c) as u32));
                    if mode == DigestMode::Exact {
                        s.content.insert(c, idx);
                    }
                }
            }
            if !history.is_retained(&e) {
                continue;
            }
            // write_snapshot: group directories on first use, owner, snapshot, files.
            let rel = group_dir(&history, e.group as usize);
            let mut at = 0u32;
            for comp in rel.components() {
                let Component::Normal(name) = comp else {
                    continue;
                };
                let name = name.to_str().expect("generated names are UTF-8");
                at = match s.child(at, name) {
                    Some(n) => n,
                    None => s.add_node(at, name, alloc(), NodeKind::Dir),
                };
            }
            if groups_created.insert(e.group) {
                s.add_node(at, GROUP_OWNER_FILE, alloc(), NodeKind::File);
            }
            let snap = s.add_node(
                at,
                &crate::time::rfc3339_utc(e.time),
                alloc(),
                NodeKind::Dir,
            );
            if let Some(name) = config_blob_name(g.ty) {
                s.add_node(snap, name, alloc(), NodeKind::File);
            }
            for (ai, a) in g.archives.iter().enumerate() {
                s.add_node(
                    snap,
                    &a.name,
                    alloc(),
                    NodeKind::Index {
                        event: e,
                        archive: ai as u32,
                    },
                );
            }
            s.add_node(snap, MANIFEST_BLOB_NAME, alloc(), NodeKind::File);
        }
        s.history = history;
        s.chunks = chunks;
        if mode == DigestMode::Hashed {
            // Index files name their chunks by a hash of the content: the map from content to
            // chunk is not needed any more (at datastore A's size it is ~1.5 GiB, and its
            // random lookups were half of a run's time).
            s.content = HashMap::new();
        }
        let mut st = State::new(Instruments::simulated(None, model));
        st.atimes = s.initial_atimes.clone();
        st.removed = vec![0; s.chunks.len().div_ceil(64)];
        // As a default mount of a datastore (`mount --dir-ttl`).
        let ttl_ns = (crate::trace::KernelCache::DATASTORE_DIR_TTL_S * 1e9) as u64;
        st.dentries = super::dentries::Dentries::new(ttl_ns, s.nodes.len());
        Ok(SimStore {
            built: std::sync::Arc::new(s),
            state: Mutex::new(st),
            cursor: Mutex::default(),
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
        fork.removed = vec![0; self.chunks.len().div_ceil(64)];
        fork.dentries = super::dentries::Dentries::new(st.dentries.ttl_ns(), self.nodes.len());
        Some(SimStore {
            built: std::sync::Arc::clone(&self.built),
            state: Mutex::new(fork),
            cursor: Mutex::default(),
        })
    }
}

impl Built {
    fn add_node(&mut self, parent: u32, name: &str, ino: u64, kind: NodeKind) -> u32 {
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
        vec![
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
            (
                "content map (exact digests)",
                crate::gen::history::hash_table_bytes(
                    self.content.capacity(),
                    std::mem::size_of::<(ContentId, u32)>(),
                ),
            ),
            ("content sets (during the build)", self.sets_bytes),
        ]
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
        if params.zap_leaf_entries > 0 && params.dir_entries == 0 {
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
        st.inst.set_model(model);
        if let Some(f) = &mut st.inst.faults {
            f.restart();
        }
        st.counts = RequestCounts::default();
        st.first_index_ns = None;
        st.lanes.clear();
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

    /// The bytes of an index file, built from the history as the writer builds them.
    pub(super) fn index_bytes(&self, e: &Event, ai: usize) -> Vec<u8> {
        let g = &self.history.groups[e.group as usize];
        let a = &g.archives[ai];
        let mut refs: Vec<(Digest, u32)> = Vec::new();
        // Exact digests are read from the chunks' records (hashed ones are computed).
        let mut cursor = self.cursor.lock().expect("version cursor poisoned");
        self.history
            .for_each_content_cached(&mut cursor, e, ai, |c| match self.mode {
                // Every content of a snapshot that exists has its chunk (`present`).
                DigestMode::Hashed => refs.push((
                    self.slice.digest(hashed_digest(self.cfg.seed, c)),
                    self.payload.len(c) as u32,
                )),
                DigestMode::Exact => {
                    if let Some(&i) = self.content.get(&c) {
                        refs.push((self.chunks[i as usize].digest, self.payload.len(c) as u32));
                    }
                }
            });
        archive_index_bytes(&self.cfg, e, ai, &a.name, &refs).0
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
                    NodeKind::Index { .. } | NodeKind::File => EntryKind::File,
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
        assert!(chunk_time(-1).is_err() && chunk_time(1 << 33).is_err());
    }
}
