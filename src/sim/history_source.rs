//! The generator's history as a simulated store's source: exactly what `chunkscope gen`
//! would write for the same configuration, created in the same order: the root, `.chunks`,
//! `.lock`, the 65,536 chunk directories, then per backup event its new chunks and (for a
//! kept snapshot) the group directories on first use, the owner file, the snapshot
//! directory, the config blob, the index files and the manifest. Inode numbers are
//! allocated in that order from `first_ino`, as ZFS allocates object ids and tmpfs numbers
//! inodes; listings return entries newest first, as tmpfs does. (tmpfs numbers from one
//! counter per filesystem: a store matches its simulation block for block only if nothing
//! else created files on that tmpfs while it was generated.) Index files' bytes are built
//! from the history when the walk opens one, as the writer builds them.

use std::any::Any;
use std::path::{Component, PathBuf};

use anyhow::Result;
use hashbrown::HashMap;

use super::builder::{chunk_time, Builder, IndexSource, Source};
use super::builder::{Chunk, NodeKind};
use super::store::{DigestMode, SimStore};
use crate::datastore::paths::{GROUP_OWNER_FILE, LOCK_FILE, MANIFEST_BLOB_NAME};
use crate::datastore::Digest;
use crate::gen::history::{ContentId, Event, History, VersionCursor};
use crate::gen::payload::PayloadModel;
use crate::gen::writer::{archive_index_bytes, config_blob_name, group_dir};
use crate::gen::GenConfig;

/// The store `gen` would write for `cfg` and its `history`.
pub struct HistorySource {
    /// The generator configuration.
    pub cfg: GenConfig,
    /// Its history.
    pub history: History,
    /// How chunk digests are made.
    pub mode: DigestMode,
    /// The root's inode number (the rest follow in creation order).
    pub first_ino: u64,
}

impl HistorySource {
    /// The root a store of `cfg` is simulated at.
    pub fn root(cfg: &GenConfig) -> PathBuf {
        PathBuf::from(format!("/simulated/{}", cfg.preset))
    }
}

impl SimStore {
    /// Builds the store `gen` would write for `cfg`, as it stands `now` (epoch seconds: the
    /// generation time, which shifts every atime as the writer does).
    pub fn build(
        cfg: &GenConfig,
        history: crate::gen::history::History,
        mode: DigestMode,
        first_ino: u64,
        now: i64,
        slice: super::Slice,
        model: crate::model::Model,
    ) -> anyhow::Result<SimStore> {
        let source = HistorySource {
            cfg: cfg.clone(),
            history,
            mode,
            first_ino,
        };
        let root = HistorySource::root(cfg);
        SimStore::from_source(Box::new(source), root, first_ino, 0, slice, now, model)
    }
}

fn hashed_digest(seed: u64, c: ContentId) -> Digest {
    let mut d = [0u8; 32];
    for (i, part) in d.chunks_mut(8).enumerate() {
        part.copy_from_slice(&crate::rng::hash(&[seed, 0x0053_494d, c.0, i as u64]).to_le_bytes());
    }
    Digest(d)
}

/// The index files of a history: each one's event and archive, built when opened.
struct HistoryIndexes {
    history: History,
    cfg: GenConfig,
    payload: PayloadModel,
    mode: DigestMode,
    slice: super::Slice,
    /// Content -> chunk, for exact digests (empty for hashed ones).
    content: HashMap<ContentId, u32>,
    /// Index id -> its event and archive.
    files: Vec<(Event, u32)>,
}

impl Source for HistorySource {
    fn build(self: Box<Self>, b: &mut Builder) -> Result<Box<dyn IndexSource>> {
        let HistorySource {
            cfg,
            history,
            mode,
            first_ino,
        } = *self;
        if cfg.damage != crate::gen::Damage::default() {
            anyhow::bail!(
                "the simulator does not model damaged stores (missing, bad or temp chunks)"
            );
        }
        let slice = b.slice;
        let shift = b.now - history.now;
        let payload = PayloadModel {
            seed: cfg.seed,
            chunk_size: cfg.chunk_size,
            entropy: cfg.entropy,
            incompressible: cfg.incompressible,
        };
        let mut sets = history.chunk_sets();
        let present = sets.present_len();
        b.build_bytes = sets.heap_bytes();
        b.reserve(present);
        b.referenced = sets.referenced_len();
        // Hashed digests need no map from content to chunk: the sets mark what was made.
        let mut content = match mode {
            DigestMode::Exact => HashMap::with_capacity(present),
            DigestMode::Hashed => HashMap::new(),
        };
        let mut files = Vec::new();
        let mut ino = first_ino;
        let mut alloc = || {
            let i = ino;
            ino += 1;
            i
        };
        // The root, `.chunks`, `.lock`, the chunk directories (datastore::create).
        b.root_node(alloc());
        let chunks_ino = alloc();
        let lock_ino = alloc();
        let first_dir = alloc();
        b.add_chunk_dirs(chunks_ino, |p| first_dir + p as u64);
        for _ in 1..slice.chunk_dirs() {
            alloc();
        }
        // `.lock` after `.chunks`, as created (listings are newest first).
        b.add_node(0, LOCK_FILE, lock_ino, NodeKind::File);
        // The history, in the writer's creation order.
        let mut data = Vec::new();
        let mut contents = Vec::new();
        let mut groups_created = hashbrown::HashSet::new();
        let mut cursors = history.cursors();
        for e in history.events() {
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
                            payload.fill(c, &mut data);
                            Digest::of(&data)
                        }
                        DigestMode::Hashed => hashed_digest(cfg.seed, c),
                    });
                    let atime = chunk_time(history.initial_atime(&sets, c, e.time) + shift)?;
                    let idx = b.add_chunk(digest, alloc(), payload.len(c) as u32, atime)?;
                    if mode == DigestMode::Exact {
                        content.insert(c, idx);
                    }
                }
            }
            if history.is_retained(&e) {
                add_snapshot(b, &history, &e, &mut groups_created, &mut alloc, &mut files);
            }
        }
        if mode == DigestMode::Hashed {
            // Index files name their chunks by a hash of the content: the map from content to
            // chunk is not needed (at datastore A's size it is ~1.5 GiB, and its random
            // lookups were half of a run's time).
            content = HashMap::new();
        }
        Ok(Box::new(HistoryIndexes {
            history,
            cfg,
            payload,
            mode,
            slice,
            content,
            files,
        }))
    }
}

/// The files of a kept snapshot, as `write_snapshot` creates them: its group's directories
/// on first use, the group's owner file once, the snapshot directory, the config blob, the
/// index files (each an id of `files`), the manifest.
fn add_snapshot(
    b: &mut Builder,
    history: &History,
    e: &Event,
    groups_created: &mut hashbrown::HashSet<u32>,
    alloc: &mut dyn FnMut() -> u64,
    files: &mut Vec<(Event, u32)>,
) {
    let g = &history.groups[e.group as usize];
    let rel = group_dir(history, e.group as usize);
    let mut at = 0u32;
    for comp in rel.components() {
        let Component::Normal(name) = comp else {
            continue;
        };
        let name = name.to_str().expect("generated names are UTF-8");
        at = match b.child(at, name) {
            Some(n) => n,
            None => b.add_node(at, name, alloc(), NodeKind::Dir),
        };
    }
    if groups_created.insert(e.group) {
        b.add_node(at, GROUP_OWNER_FILE, alloc(), NodeKind::File);
    }
    let snap = b.add_node(
        at,
        &crate::time::rfc3339_utc(e.time),
        alloc(),
        NodeKind::Dir,
    );
    if let Some(name) = config_blob_name(g.ty) {
        b.add_node(snap, name, alloc(), NodeKind::File);
    }
    for (ai, a) in g.archives.iter().enumerate() {
        let id = files.len() as u32;
        files.push((*e, ai as u32));
        b.add_node(snap, &a.name, alloc(), NodeKind::Index(id));
    }
    b.add_node(snap, MANIFEST_BLOB_NAME, alloc(), NodeKind::File);
}

impl IndexSource for HistoryIndexes {
    /// Where the index walk stands in the history of the archive it reads.
    fn scratch(&self) -> Box<dyn Any + Send> {
        Box::new(VersionCursor::default())
    }

    fn bytes(&self, chunks: &[Chunk], id: u32, scratch: &mut (dyn Any + Send)) -> Vec<u8> {
        let (e, ai) = self.files[id as usize];
        let ai = ai as usize;
        let a = &self.history.groups[e.group as usize].archives[ai];
        let mut refs: Vec<(Digest, u32)> = Vec::new();
        let cursor = scratch
            .downcast_mut::<VersionCursor>()
            .expect("a history store's scratch is its version cursor");
        self.history
            .for_each_content_cached(cursor, &e, ai, |c| match self.mode {
                // Every content of a snapshot that exists has its chunk (`present`).
                DigestMode::Hashed => refs.push((
                    self.slice.digest(hashed_digest(self.cfg.seed, c)),
                    self.payload.len(c) as u32,
                )),
                // Exact digests are read from the chunks' records.
                DigestMode::Exact => {
                    if let Some(&i) = self.content.get(&c) {
                        refs.push((chunks[i as usize].digest, self.payload.len(c) as u32));
                    }
                }
            });
        archive_index_bytes(&self.cfg, &e, ai, &a.name, &refs).0
    }

    fn builds_ahead(&self) -> bool {
        self.mode == DigestMode::Hashed
    }

    fn memory(&self) -> Vec<(&'static str, u64)> {
        vec![(
            "content map (exact digests)",
            crate::gen::history::hash_table_bytes(
                self.content.capacity(),
                std::mem::size_of::<(ContentId, u32)>(),
            ),
        )]
    }
}
