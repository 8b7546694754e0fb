//! An in-memory chunk store built from the generator's history, answering the GC through the
//! same [`ChunkStore`] and [`Tree`] traits as a real datastore, and charging the cost model
//! with the requests a FUSE mount of that datastore would receive.
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
//! **What the filesystem sees.** Each operation is turned into the FUSE requests the kernel
//! sends for the same system call with attribute and entry caching off (chunkscope's default
//! mount), as recorded from real runs:
//!
//! | store operation | requests |
//! |---|---|
//! | touch (`utimensat` on the absolute path) | lookup `.chunks`, lookup `XXXX`, lookup chunk (ENOENT: stop), setattr |
//! | open chunk directory (`openat` on `.chunks`) | lookup `XXXX`, opendir |
//! | list (`getdents64`) | readdir (entries), readdir (end) |
//! | stat in directory (`fstatat`) | lookup, getattr |
//! | unlink in directory | lookup, unlink |
//! | `read_dir(path)` of the index walk | a lookup per path component, opendir, getattr, readdir, readdir |
//! | read an index file | a lookup per path component, open, getattr, getattr |
//!
//! Memory per chunk: one record of its digest, inode, atime, size and a removed flag (56
//! bytes), its atime as built (8, for [`SimStore::reset`]), a 4-byte slot in its directory's
//! list, an 8-byte slot in the digest table (which is 4/7 to 7/8 full: 9-14 bytes), and, for
//! exact digests, a content map entry (about 20; hashed digests drop the map after the
//! build): around 80 bytes with hashed digests, 100 with exact ones. The peak is higher,
//! during the build (the history's sets of contents): 172 bytes a chunk at datastore A's
//! size (BENCHMARKS.md).

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use hashbrown::HashMap;

use super::ahead::Ahead;
use super::digest_table::DigestTable;
pub use super::requests::RequestCounts;
use super::requests::{At, Name, Req};

use crate::datastore::paths::{
    chunk_subdir_name, CHUNK_DIR, GROUP_OWNER_FILE, LOCK_FILE, MANIFEST_BLOB_NAME,
};
use crate::datastore::snapshots::{EntryKind, Tree};
use crate::datastore::{Digest, IndexFile};
use crate::faults::Faults;
use crate::gen::history::{ContentId, Event, History};
use crate::gen::payload::PayloadModel;
use crate::gen::writer::{archive_index_bytes, config_blob_name, group_dir};
use crate::gen::GenConfig;
use crate::instrument::{Instruments, Trace};
use crate::model::Model;
use crate::store::{ChunkDir, ChunkStat, ChunkStore, EntryStat, Phase1Visitor};
use crate::trace::format::flags;
use crate::trace::Op;

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
    name: Box<str>,
    ino: u64,
    pub(super) kind: NodeKind,
    /// Children in creation order.
    children: Vec<u32>,
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

/// A chunk file. Its digest is in the same record as what a touch reads and writes, so
/// that a touch costs one cache miss here (after the table's), not two.
#[derive(Clone, Copy)]
pub(super) struct Chunk {
    digest: Digest,
    ino: u64,
    atime: i64,
    size: u32,
    removed: bool,
}

pub(super) struct State {
    /// Fault rules and the model, as a mount's (see [`crate::instrument`]).
    pub(super) inst: Instruments,
    pub(super) chunks: Vec<Chunk>,
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
}

/// The simulated datastore.
pub struct SimStore {
    pub(super) root: PathBuf,
    pub(super) nodes: Vec<Node>,
    chunks_node: u32,
    /// Chunk directory `p` is node `chunk_dir_nodes + p`, inode `chunk_dir_first_ino + p`.
    chunk_dir_nodes: u32,
    chunk_dir_first_ino: u64,
    /// Chunk numbers (indices of `State::chunks`) by digest.
    by_digest: DigestTable,
    /// Per chunk directory, its chunks in creation order.
    dirs: Vec<Vec<u32>>,
    /// Each chunk's atime as built (what [`SimStore::reset`] restores).
    initial_atimes: Vec<i64>,
    /// Content -> chunk, for exact digests (emptied after the build for hashed ones).
    content: HashMap<ContentId, u32>,
    pub(super) mode: DigestMode,
    /// The simulated clock (epoch seconds): the time the store was built for.
    now: i64,
    history: History,
    /// Distinct chunks the snapshots present reference.
    referenced: usize,
    cfg: GenConfig,
    payload: PayloadModel,
    state: Mutex<State>,
    /// Where the index walk stands in the history of the archive it reads (index files are
    /// read one at a time: never contended).
    cursor: Mutex<crate::gen::history::VersionCursor>,
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
        let sets = history.chunk_sets();
        let (present, referenced) = (&sets.present, &sets.referenced);
        let mut s = SimStore {
            root: PathBuf::from(format!("/simulated/{}", cfg.preset)),
            nodes: Vec::new(),
            chunks_node: 0,
            chunk_dir_nodes: 0,
            chunk_dir_first_ino: 0,
            by_digest: DigestTable::with_capacity(present.len()),
            dirs: vec![Vec::new(); 1 << 16],
            initial_atimes: Vec::with_capacity(present.len()),
            content: HashMap::with_capacity(present.len()),
            mode,
            now,
            history,
            referenced: referenced.len(),
            cfg: cfg.clone(),
            payload,
            state: Mutex::new(State::new(Instruments::simulated(None, model))),
            cursor: Mutex::default(),
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
        for p in 0..=u16::MAX {
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
        let mut chunks: Vec<Chunk> = Vec::with_capacity(present.len());
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
                    if s.content.contains_key(&c) || !present.contains(&c) {
                        continue;
                    }
                    let digest = match mode {
                        DigestMode::Exact => {
                            s.payload.fill(c, &mut data);
                            Digest::of(&data)
                        }
                        DigestMode::Hashed => hashed_digest(cfg.seed, c),
                    };
                    let atime = history.initial_atime(&sets, c, e.time);
                    let idx = u32::try_from(chunks.len())
                        .ok()
                        .filter(|&i| i < u32::MAX)
                        .ok_or_else(|| anyhow::anyhow!("more than 2^32 - 2 chunks"))?;
                    s.by_digest
                        .insert(&digest.0, idx, |i| chunks[i as usize].digest.0);
                    s.dirs[digest.prefix() as usize].push(idx);
                    s.initial_atimes.push(atime + shift);
                    chunks.push(Chunk {
                        digest,
                        ino: alloc(),
                        atime: atime + shift,
                        size: s.payload.len(c) as u32,
                        removed: false,
                    });
                    s.content.insert(c, idx);
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
        s.state.get_mut().expect("not shared yet").chunks = chunks;
        if mode == DigestMode::Hashed {
            // Index files name their chunks by a hash of the content: the map from content to
            // chunk is not needed any more (at datastore A's size it is ~1.5 GiB, and its
            // random lookups were half of a run's time).
            s.content = HashMap::new();
        }
        Ok(s)
    }

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

    fn child(&self, parent: u32, name: &str) -> Option<u32> {
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

    /// Chunk files in the store (removed ones excluded).
    pub fn chunk_count(&self) -> usize {
        self.lock().chunks.iter().filter(|c| !c.removed).count()
    }

    /// Distinct chunks the snapshots reference.
    pub fn referenced(&self) -> usize {
        self.referenced
    }

    /// Distinct chunks (all ever created here).
    pub fn chunks_created(&self) -> usize {
        self.initial_atimes.len()
    }

    /// Chunk files per chunk directory, on average (what a model's ZAP layout needs to know,
    /// [`crate::model::ModelParams::dir_entries`]).
    pub fn dir_entries(&self) -> u64 {
        (self.chunk_count() as u64)
            .div_ceil(crate::datastore::paths::CHUNK_SUBDIRS as u64)
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
        let chunks = st.chunks.iter().filter(|c| !c.removed).map(|c| c.ino);
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
        for (c, &atime) in st.chunks.iter_mut().zip(&self.initial_atimes) {
            c.atime = atime;
            c.removed = false;
        }
        st.inst.set_model(model);
        if let Some(f) = &mut st.inst.faults {
            f.restart();
        }
        st.counts = RequestCounts::default();
        st.first_index_ns = None;
        st.lanes.clear();
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

    /// Emits what opening the store does on a mount (chunkscope's `DirStore::open`: lookup
    /// `.chunks`, opendir).
    pub fn open_requests(&self) -> io::Result<()> {
        let mut st = self.lock();
        let chunks = self.nodes[self.chunks_node as usize].ino;
        let root = self.nodes[0].ino;
        let name = Name::Bytes(CHUNK_DIR.as_bytes());
        st.req(Req::lookup(
            root,
            name,
            At::Tree(Path::new("")),
            Some(chunks),
        ))
        .and_then(|()| st.req(Req::on(Op::Opendir, chunks, At::Chunks)))
        .map_err(io::Error::from_raw_os_error)
    }

    /// Runs `f` on the model (totals, clock).
    pub fn with_model<T>(&self, f: impl FnOnce(&mut Model) -> T) -> T {
        f(self.lock().model())
    }

    /// The requests so far, by kind.
    pub fn counts(&self) -> RequestCounts {
        self.lock().counts.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("simulated store poisoned")
    }

    /// The chunk named `d` (removed or not).
    #[inline]
    fn find(&self, chunks: &[Chunk], d: &Digest) -> Option<u32> {
        self.by_digest
            .find(&d.0, |i| chunks[i as usize].digest == *d)
    }

    /// The node at `path` (under the root), emitting a lookup per component; the lookup's
    /// errno when one fails (ENOENT for a missing component).
    fn walk(&self, st: &mut State, path: &Path) -> io::Result<u32> {
        let rel = path
            .strip_prefix(&self.root)
            .map_err(|_| io::Error::new(io::ErrorKind::NotFound, "outside the simulated store"))?;
        let mut at = 0u32;
        let mut dir = Path::new("");
        for comp in rel.components() {
            let Component::Normal(name) = comp else {
                continue;
            };
            let parent = self.nodes[at as usize].ino;
            let found = name.to_str().and_then(|n| self.child(at, n));
            let ino = found.map(|n| self.nodes[n as usize].ino);
            let named = Name::Bytes(name.as_encoded_bytes());
            st.req(Req::lookup(parent, named, At::Tree(dir), ino))
                .map_err(io::Error::from_raw_os_error)?;
            at = found.expect("a lookup that succeeds found the node");
            dir = rel_prefix(rel, dir, name);
        }
        Ok(at)
    }

    /// Inode of chunk directory `prefix`.
    #[inline]
    fn chunk_dir_ino(&self, prefix: u16) -> u64 {
        self.chunk_dir_first_ino + prefix as u64
    }

    /// The start of a chunk path's walk: lookups of `.chunks` and `XXXX`; returns `XXXX`'s
    /// inode, or the errno of a lookup that failed.
    #[inline]
    fn walk_chunk_dir(&self, st: &mut State, prefix: u16) -> Result<u64, i32> {
        let chunks = self.nodes[self.chunks_node as usize].ino;
        let dir = self.chunk_dir_ino(prefix);
        let root = At::Tree(Path::new(""));
        st.req(Req::lookup(
            self.nodes[0].ino,
            Name::Bytes(CHUNK_DIR.as_bytes()),
            root,
            Some(chunks),
        ))?;
        let name = chunk_subdir_name(prefix);
        st.req(Req::lookup(
            chunks,
            Name::Bytes(name.as_bytes()),
            At::Chunks,
            Some(dir),
        ))?;
        Ok(dir)
    }

    /// The path walk of a chunk's absolute path: lookups of `.chunks`, `XXXX` and the chunk;
    /// returns the chunk's index if it exists, or the errno of a lookup that failed (ENOENT
    /// for a missing chunk).
    #[inline]
    fn walk_chunk(&self, st: &mut State, d: &Digest) -> Result<u32, i32> {
        let dir = self.walk_chunk_dir(st, d.prefix())?;
        let found = self
            .find(&st.chunks, d)
            .filter(|&i| !st.chunks[i as usize].removed);
        let ino = found.map(|i| st.chunks[i as usize].ino);
        st.req(Req::lookup(
            dir,
            Name::Chunk(d),
            At::ChunkDir(d.prefix()),
            ino,
        ))?;
        Ok(found.expect("a lookup that succeeds found the chunk"))
    }

    /// The bytes of an index file, built from the history as the writer builds them.
    pub(super) fn index_bytes(&self, e: &Event, ai: usize) -> Vec<u8> {
        let g = &self.history.groups[e.group as usize];
        let a = &g.archives[ai];
        let mut refs: Vec<(Digest, u32)> = Vec::new();
        // Exact digests are read from the chunks' records (hashed ones are computed).
        let st = (self.mode == DigestMode::Exact).then(|| self.lock());
        let mut cursor = self.cursor.lock().expect("version cursor poisoned");
        self.history
            .for_each_content_cached(&mut cursor, e, ai, |c| match self.mode {
                // Every content of a snapshot that exists has its chunk (`present`).
                DigestMode::Hashed => {
                    refs.push((hashed_digest(self.cfg.seed, c), self.payload.len(c) as u32))
                }
                DigestMode::Exact => {
                    if let (Some(&i), Some(st)) = (self.content.get(&c), &st) {
                        refs.push((st.chunks[i as usize].digest, self.payload.len(c) as u32));
                    }
                }
            });
        archive_index_bytes(&self.cfg, e, ai, &a.name, &refs).0
    }

    /// Opens an index file of the walk: lookups, open, getattr (size), getattr (after reading).
    /// Its bytes come from `ahead` when the generating thread made them already.
    pub(super) fn open_index(
        &self,
        path: &Path,
        ahead: Option<&mut Ahead>,
    ) -> Result<IndexFile, crate::datastore::error::FormatError> {
        let node = {
            let mut st = self.lock();
            if st.first_index_ns.is_none() {
                st.end_pass();
                st.first_index_ns = Some(st.model().clock_ns());
            }
            let io = |e: io::Error| crate::datastore::error::FormatError::io(path, e);
            let n = self.walk(&mut st, path).map_err(io)?;
            let ino = self.nodes[n as usize].ino;
            let at = At::Tree(path.strip_prefix(&self.root).unwrap_or(path));
            st.req(Req::on(Op::Open, ino, at))
                .and_then(|()| st.req(Req::on(Op::Getattr, ino, at)))
                .and_then(|()| st.req(Req::on(Op::Getattr, ino, at)))
                .map_err(|e| io(io::Error::from_raw_os_error(e)))?;
            n
        };
        let NodeKind::Index { event, archive } = self.nodes[node as usize].kind else {
            return Err(crate::datastore::error::FormatError::io(
                path,
                io::Error::new(io::ErrorKind::InvalidData, "not an index file"),
            ));
        };
        let bytes = match ahead.and_then(|a| a.take(node)) {
            Some(bytes) => bytes,
            None => self.index_bytes(&event, archive as usize),
        };
        // The bytes were made by the writer's own function, checksum included: verifying it
        // would check SHA-256 against itself, at a tenth of a naive run's time.
        IndexFile::parse_unverified(bytes).map_err(|e| e.in_file(path))
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

impl Tree for SimStore {
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<(String, EntryKind)>> {
        let mut st = self.lock();
        let n = self.walk(&mut st, dir)?;
        let node = &self.nodes[n as usize];
        if !matches!(node.kind, NodeKind::Dir) {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        let at = At::Tree(dir.strip_prefix(&self.root).unwrap_or(dir));
        let errno = io::Error::from_raw_os_error;
        st.req(Req::on(Op::Opendir, node.ino, at))
            .and_then(|()| st.req(Req::on(Op::Getattr, node.ino, at)))
            .map_err(errno)?;
        st.listing.clear();
        let inos = node
            .children
            .iter()
            .rev()
            .map(|&c| self.nodes[c as usize].ino);
        st.listing.extend(inos);
        st.readdir(node.ino, at).map_err(errno)?;
        Ok(self.entries(n))
    }
}

/// An open chunk directory of the simulated store.
pub struct SimDir<'a> {
    store: &'a SimStore,
    prefix: u16,
    ino: u64,
}

impl SimDir<'_> {
    /// The chunk named `name` in this directory, with the lookup a `*at` call makes; the
    /// lookup's errno when it fails (ENOENT: no such chunk).
    fn lookup(&self, st: &mut State, name: &[u8]) -> Result<u32, i32> {
        let found = Digest::from_hex_bytes(name)
            .filter(|d| d.prefix() == self.prefix)
            .and_then(|d| self.store.find(&st.chunks, &d))
            .filter(|&i| !st.chunks[i as usize].removed);
        let ino = found.map(|i| st.chunks[i as usize].ino);
        st.req(Req::lookup(
            self.ino,
            Name::Bytes(name),
            At::ChunkDir(self.prefix),
            ino,
        ))?;
        Ok(found.expect("a lookup that succeeds found the chunk"))
    }
}

impl ChunkDir for SimDir<'_> {
    fn list(&mut self, f: &mut dyn FnMut(&[u8], u64)) -> io::Result<()> {
        let mut guard = self.store.lock();
        let st = &mut *guard;
        st.listing.clear();
        let mut name = [0u8; 64];
        for &i in self.store.dirs[self.prefix as usize].iter().rev() {
            let c = &st.chunks[i as usize];
            if !c.removed {
                st.listing.push(c.ino);
            }
        }
        // The listing's requests come first: an error there (injected) lists nothing.
        st.readdir(self.ino, At::ChunkDir(self.prefix))
            .map_err(io::Error::from_raw_os_error)?;
        for &i in self.store.dirs[self.prefix as usize].iter().rev() {
            let c = st.chunks[i as usize];
            if c.removed {
                continue;
            }
            hex::encode_to_slice(c.digest.0, &mut name).expect("64 bytes for 32");
            f(&name, c.ino);
        }
        Ok(())
    }

    fn stat(&mut self, name: &[u8]) -> io::Result<Option<EntryStat>> {
        let mut st = self.store.lock();
        // As `DirStore`: an entry that cannot be stat'ed is skipped (PBS's vanished entry).
        let Ok(i) = self.lookup(&mut st, name) else {
            return Ok(None);
        };
        let c = st.chunks[i as usize];
        if st
            .req(Req::on(Op::Getattr, c.ino, At::Chunk(&c.digest)))
            .is_err()
        {
            return Ok(None);
        }
        Ok(Some(EntryStat {
            atime: c.atime,
            size: c.size as u64,
            is_file: true,
        }))
    }

    fn unlink(&mut self, name: &[u8]) -> io::Result<()> {
        let mut st = self.store.lock();
        let errno = io::Error::from_raw_os_error;
        let i = self.lookup(&mut st, name).map_err(errno)?;
        let ino = st.chunks[i as usize].ino;
        st.req(Req {
            parent: self.ino,
            name: Name::Bytes(name),
            ..Req::on(Op::Unlink, ino, At::ChunkDir(self.prefix))
        })
        .map_err(errno)?;
        st.chunks[i as usize].removed = true;
        Ok(())
    }
}

/// The path of `dir` (a prefix of `rel`) joined with its next component `name`, as a prefix
/// of `rel` (no allocation).
fn rel_prefix<'a>(rel: &'a Path, dir: &Path, name: &std::ffi::OsStr) -> &'a Path {
    let len = dir.as_os_str().len() + (!dir.as_os_str().is_empty()) as usize + name.len();
    use std::os::unix::ffi::OsStrExt;
    let bytes = rel.as_os_str().as_bytes();
    Path::new(std::ffi::OsStr::from_bytes(&bytes[..len.min(bytes.len())]))
}

impl ChunkStore for SimStore {
    type Dir<'a> = SimDir<'a>;

    fn root(&self) -> &Path {
        &self.root
    }

    /// The time the store was built for: every run's GC starts then and touches with it.
    fn now(&self) -> i64 {
        self.now
    }

    fn touch(&self, digest: &Digest) -> io::Result<bool> {
        let mut st = self.lock();
        // As `DirStore::touch` (utimensat on the path): ENOENT is a missing chunk.
        let i = match self.walk_chunk(&mut st, digest) {
            Ok(i) => i,
            Err(libc::ENOENT) => return Ok(false),
            Err(e) => return Err(io::Error::from_raw_os_error(e)),
        };
        let ino = st.chunks[i as usize].ino;
        let now = self.now;
        let r = st.req(Req {
            flags: flags::SET_ATIME,
            arg: now as u64 * 1_000_000_000,
            ..Req::on(Op::Setattr, ino, At::Chunk(digest))
        });
        match r {
            Ok(()) => {
                st.chunks[i as usize].atime = now;
                Ok(true)
            }
            Err(libc::ENOENT) => Ok(false),
            Err(e) => Err(io::Error::from_raw_os_error(e)),
        }
    }

    fn touch_bad(&self, digest: &Digest, n: u8) -> io::Result<bool> {
        // No `.bad` files here: the walk ends at a failed lookup.
        let mut st = self.lock();
        let r = self
            .walk_chunk_dir(&mut st, digest.prefix())
            .and_then(|dir| {
                st.req(Req::lookup(
                    dir,
                    Name::Bad(digest, n),
                    At::ChunkDir(digest.prefix()),
                    None,
                ))
            });
        match r {
            Ok(()) | Err(libc::ENOENT) => Ok(false),
            Err(e) => Err(io::Error::from_raw_os_error(e)),
        }
    }

    fn stat_chunk(&self, digest: &Digest) -> io::Result<Option<ChunkStat>> {
        let mut st = self.lock();
        let r = self.walk_chunk(&mut st, digest).and_then(|i| {
            let c = st.chunks[i as usize];
            st.req(Req::on(Op::Getattr, c.ino, At::Chunk(digest)))
                .map(|()| c)
        });
        match r {
            Ok(c) => Ok(Some(ChunkStat {
                ino: c.ino,
                atime_ns: c.atime as i128 * 1_000_000_000,
            })),
            Err(libc::ENOENT) => Ok(None),
            Err(e) => Err(io::Error::from_raw_os_error(e)),
        }
    }

    fn insert_chunk(&self, digest: &Digest, _blob: &[u8]) -> io::Result<bool> {
        // Only the atime check inserts (the zero chunk); simulated runs skip that check.
        let known = self.find(&self.lock().chunks, digest).is_some();
        if known {
            return self.touch(digest);
        }
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the simulated store does not insert chunks (run with the atime check off)",
        ))
    }

    fn open_dir(&self, prefix: u16) -> io::Result<Option<SimDir<'_>>> {
        let mut st = self.lock();
        let chunks = self.nodes[self.chunks_node as usize].ino;
        let ino = self.chunk_dir_ino(prefix);
        let name = chunk_subdir_name(prefix);
        let r = st
            .req(Req::lookup(
                chunks,
                Name::Bytes(name.as_bytes()),
                At::Chunks,
                Some(ino),
            ))
            .and_then(|()| st.req(Req::on(Op::Opendir, ino, At::ChunkDir(prefix))));
        match r {
            Ok(()) => {}
            // As `DirStore::open_dir`: a missing directory is no directory.
            Err(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(io::Error::from_raw_os_error(e)),
        }
        Ok(Some(SimDir {
            store: self,
            prefix,
            ino,
        }))
    }

    fn walk_indexes(&self, visitor: &mut dyn Phase1Visitor) -> anyhow::Result<()> {
        self.walk_indexes_ahead(visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelParams;

    /// The `tiny` store, built at a fixed time.
    fn tiny() -> SimStore {
        let cfg = GenConfig::preset("tiny").unwrap();
        let history = crate::gen::build_history(&cfg).unwrap();
        let model = Model::new(ModelParams::preset("zfs-hdd").unwrap());
        SimStore::build(
            &cfg,
            history,
            DigestMode::Hashed,
            1000,
            1_800_000_000,
            model,
        )
        .unwrap()
    }

    fn rules(texts: &[&str]) -> Option<Faults> {
        let texts: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        Some(Faults::load(&texts, &[] as &[&str], 0).unwrap())
    }

    /// A chunk of the store and its atime.
    fn some_chunk(s: &SimStore) -> (Digest, i64) {
        let st = s.lock();
        let c = st
            .chunks
            .iter()
            .find(|c| c.atime < s.now)
            .expect("an old chunk");
        (c.digest, c.atime)
    }

    fn atime(s: &SimStore, d: &Digest) -> i64 {
        let st = s.lock();
        let i = s.find(&st.chunks, d).unwrap();
        st.chunks[i as usize].atime
    }

    /// A touch whose setattr fails does not mark the chunk: the sweep must see its old atime,
    /// as on a real store; an injected ENOENT on its lookup reads as a missing chunk, as
    /// `DirStore::touch` reads utimensat's.
    #[test]
    fn a_failed_touch_leaves_the_atime_and_a_vanished_lookup_is_a_missing_chunk() {
        let s = tiny();
        let (d, before) = some_chunk(&s);
        assert!(s.touch(&d).unwrap());
        assert_eq!(atime(&s, &d), s.now, "a touch sets the atime");
        s.reset(Model::new(ModelParams::preset("zfs-hdd").unwrap()));
        assert_eq!(atime(&s, &d), before, "reset restores it");
        s.set_faults(rules(&["setattr-atime errno=EIO"]));
        let e = s.touch(&d).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!(atime(&s, &d), before, "the failed touch changed nothing");
        s.set_faults(rules(&["lookup path=.chunks/*/* errno=ENOENT"]));
        assert!(!s.touch(&d).unwrap(), "the chunk looks missing");
        assert_eq!(s.stat_chunk(&d).unwrap(), None);
        assert_eq!(atime(&s, &d), before);
        assert_eq!(s.fault_stats()[0].hits, 2);
    }

    /// An injected readdir error fails the listing before the GC sees any entry, and an
    /// unlink that fails leaves the chunk in place.
    #[test]
    fn a_failed_listing_lists_nothing_and_a_failed_unlink_removes_nothing() {
        let s = tiny();
        let (d, _) = some_chunk(&s);
        let before = s.chunk_count();
        s.set_faults(rules(&["readdir errno=EIO", "unlink errno=EBUSY"]));
        let mut dir = s
            .open_dir(d.prefix())
            .unwrap()
            .expect("the chunk's directory");
        let mut seen = 0;
        let e = dir.list(&mut |_, _| seen += 1).unwrap_err();
        assert_eq!((e.raw_os_error(), seen), (Some(libc::EIO), 0));
        let e = dir.unlink(d.to_hex().as_bytes()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
        assert_eq!(s.chunk_count(), before);
        s.set_faults(None);
        dir.unlink(d.to_hex().as_bytes()).unwrap();
        assert_eq!(s.chunk_count(), before - 1);
        assert!(!s.touch(&d).unwrap(), "gone after a real unlink");
    }
}
