//! A trace of a whole GC (recorded through a mount, or imported from a syscall log with
//! `trace import`) as a simulated store's source: the store as that GC saw it.
//!
//! From the requests, in request order: `.chunks` and the root (the lookup of `.chunks`),
//! the chunk directories (lookups of `XXXX`, and the directory each chunk was looked up
//! in), every chunk with its inode (lookups of digest names: phase 1's touches and the
//! sweep's stats, which reach every chunk file), the snapshot tree (lookups of other names,
//! by parent inode), the index files (names ending in `.fidx`, `.didx`) and their references
//! (each touch attributed to the index file its thread opened last; an index with none, all
//! of its chunks digest cache hits, refers to the chunk touched last before it), what the
//! sweep removed (unlinks).
//!
//! What a trace does not hold, and how it is filled in: a chunk directory's readdir order
//! is the order the sweep stat'ed its entries (which is readdir order); a directory of the
//! tree lists the entries the GC looked up, in the order it first did; a chunk the sweep
//! removed gets an atime long before any cutoff, every other one the trace's start; sizes
//! are 0. References a GC did not touch are not in it: a digest cache's hits (`lru`, PBS's
//! default) are missing, so the store reproduces the strategies that deduplicate (lru,
//! prefetch, batched, inode-order) touch for touch, and `naive` and `unpatched` with fewer
//! references than the real indexes hold; a trace of `naive` or `unpatched` has them all.
//! Batched strategies touch after the walk: their touches are attributed to the last index.

use std::path::Path;

use anyhow::{bail, Context, Result};
use hashbrown::{HashMap, HashSet};

use super::builder::NodeKind;
use super::builder::{Builder, IndexSource, Source};
use super::survey_source::RefIndexes;
use crate::datastore::paths::{CHUNK_DIR, CHUNK_SUBDIRS};
use crate::datastore::{Digest, IndexKind};
use crate::trace::format::flags;
use crate::trace::{Name, Op, TraceReader};

/// A node of the tree seen in the trace.
struct Seen {
    parent: u64,
    name: String,
    /// Its first lookup's request number (the order its directory lists it in).
    first: u64,
}

/// The store a trace saw: what one pass over it gathered.
#[derive(Default)]
pub struct TraceSource {
    /// The trace's path (for errors).
    path: std::path::PathBuf,
    root: Option<u64>,
    chunks_ino: Option<u64>,
    dir_inos: Vec<u64>,
    tree: HashMap<u64, Seen>,
    chunks: Vec<(Digest, u64)>,
    /// Request number of each chunk's last lookup (the sweep's stat: its readdir position).
    last_seen: Vec<u64>,
    by_digest: HashMap<Digest, u32>,
    by_ino: HashMap<u64, u32>,
    removed: Vec<bool>,
    /// Index files: inode, and the chunks touched while it was its thread's last opened.
    indexes: Vec<(u64, Vec<u32>)>,
    index_of_ino: HashMap<u64, u32>,
    current: HashMap<u32, u32>,
    /// The trace's start, epoch seconds.
    pub start_s: i64,
}

impl TraceSource {
    fn chunk(&mut self, d: Digest, ino: u64, seq: u64) -> u32 {
        let i = *self.by_digest.entry(d).or_insert_with(|| {
            self.chunks.push((d, ino));
            self.last_seen.push(seq);
            self.removed.push(false);
            (self.chunks.len() - 1) as u32
        });
        self.last_seen[i as usize] = seq;
        self.by_ino.insert(ino, i);
        i
    }

    /// One pass over the trace at `path`.
    pub fn read(path: &Path) -> Result<TraceSource> {
        let reader =
            TraceReader::open(path).with_context(|| format!("reading {}", path.display()))?;
        let mut g = TraceSource {
            path: path.to_path_buf(),
            dir_inos: vec![0; CHUNK_SUBDIRS],
            start_s: (reader.meta().start_epoch_ns / 1_000_000_000) as i64,
            ..Default::default()
        };
        let mut ordered = crate::trace::ordered::Ordered::<crate::trace::Record>::new(reader);
        while let Some((r, _)) = ordered.next_record()? {
            let ok = r.errno == 0;
            match (r.op(), &r.name) {
                (Some(Op::Lookup), Name::Digest(d)) if ok && r.ino != 0 => {
                    g.chunk(*d, r.ino, r.seq);
                    if g.dir_inos[d.prefix() as usize] == 0 {
                        g.dir_inos[d.prefix() as usize] = r.parent;
                    }
                }
                (Some(Op::Lookup), Name::Text(n)) if ok && r.ino != 0 => {
                    // The simulated tree names a node as a message would (a name that is not
                    // UTF-8 escaped): its paths are the simulator's own, never opened.
                    let n = n.shown();
                    let n: &str = &n;
                    if n == CHUNK_DIR {
                        g.chunks_ino = Some(r.ino);
                        g.root = Some(r.parent);
                    } else if Some(r.parent) == g.chunks_ino && n.len() == 4 {
                        if let Ok(p) = u16::from_str_radix(n, 16) {
                            g.dir_inos[p as usize] = r.ino;
                        }
                    } else if !g.tree.contains_key(&r.ino) {
                        g.tree.insert(
                            r.ino,
                            Seen {
                                parent: r.parent,
                                name: n.to_string(),
                                first: r.seq,
                            },
                        );
                        if IndexKind::from_path(Path::new(n)).is_some() {
                            let id = g.indexes.len() as u32;
                            g.indexes.push((r.ino, Vec::new()));
                            g.index_of_ino.insert(r.ino, id);
                        }
                    }
                }
                (Some(Op::Open), _) if ok => {
                    if let Some(&id) = g.index_of_ino.get(&r.ino) {
                        g.current.insert(r.pid, id);
                    }
                }
                (Some(Op::Setattr), _) if ok && r.flags & flags::SET_ATIME != 0 => {
                    let (Some(&c), Some(&id)) = (g.by_ino.get(&r.ino), g.current.get(&r.pid))
                    else {
                        continue; // the atime check's touch, before any index
                    };
                    g.indexes[id as usize].1.push(c);
                }
                (Some(Op::Unlink), Name::Digest(d)) if ok => {
                    if let Some(&c) = g.by_digest.get(d) {
                        g.removed[c as usize] = true;
                    }
                }
                _ => {}
            }
        }
        // A torn trace builds part of the store: said, so that its prediction is not taken
        // for the whole store's.
        ordered.reader().warn_if_torn();
        if g.root.is_none() {
            bail!(
                "{}: no lookup of {CHUNK_DIR} in it: not a trace of a GC (a whole one: both \
                 phases)",
                path.display()
            );
        }
        if g.chunks.is_empty() {
            bail!("{}: no chunk in it", path.display());
        }
        Ok(g)
    }

    /// The smallest chunk inode.
    pub fn first_ino(&self) -> u64 {
        self.chunks.iter().map(|c| c.1).min().unwrap_or(0)
    }

    /// Chunks seen.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }
}

impl Source for TraceSource {
    fn build(self: Box<Self>, b: &mut Builder) -> Result<Box<dyn IndexSource>> {
        let g = *self;
        if b.slice.of != 1 {
            bail!("a store from a trace is simulated whole (no --slice)");
        }
        let root = g.root.expect("checked when read");
        b.root_node(root);
        // The tree: children by parent, in the order first looked up.
        let mut children: HashMap<u64, Vec<(u64, &Seen)>> = HashMap::new();
        for (&ino, s) in &g.tree {
            children.entry(s.parent).or_default().push((ino, s));
        }
        for v in children.values_mut() {
            v.sort_by_key(|c| c.1.first);
        }
        let dir_inos = &g.dir_inos;
        b.add_chunk_dirs(g.chunks_ino.unwrap_or(0), |p| dir_inos[p as usize]);
        let mut stack = vec![(root, 0u32)];
        // Each inode is placed once: a directory the trace shows inside itself (no real
        // tree has one; a damaged or hand-made trace can) would make the walk endless.
        let mut placed: HashSet<u64> = HashSet::from([root]);
        while let Some((ino, node)) = stack.pop() {
            for &(child, s) in children.get(&ino).map_or(&[][..], |v| &v[..]) {
                if !placed.insert(child) {
                    bail!(
                        "{}: the trace is damaged: inode {child} ({}) is looked up under inode \
                         {ino}, which is inside it (a directory cannot contain itself)",
                        g.path.display(),
                        crate::fsutil::shown(Path::new(&s.name))
                    );
                }
                let kind = match g.index_of_ino.get(&child) {
                    Some(&id) => NodeKind::Index(id),
                    None if children.contains_key(&child) => NodeKind::Dir,
                    None if Path::new(&s.name).extension().is_none() => NodeKind::Dir,
                    None => NodeKind::File,
                };
                let n = b.add_node(node, &s.name, child, kind);
                if matches!(kind, NodeKind::Dir) {
                    stack.push((child, n));
                }
            }
        }
        // Listings return children last added first.
        for n in &mut b.nodes {
            n.children.reverse();
        }
        // The chunks, each directory's in the sweep's order (its readdir order), numbered
        // as added; the index references follow the numbering.
        let mut order: Vec<u32> = (0..g.chunks.len() as u32).collect();
        order.sort_by_key(|&i| (g.chunks[i as usize].0.prefix(), g.last_seen[i as usize]));
        let mut number = vec![0u32; g.chunks.len()];
        let now = g.start_s.clamp(0, u32::MAX as i64) as u32;
        b.reserve(g.chunks.len());
        for (n, &i) in order.iter().enumerate() {
            let (d, ino) = g.chunks[i as usize];
            let atime = if g.removed[i as usize] { 0 } else { now };
            b.add_chunk(d, ino, 0, atime)?;
            number[i as usize] = n as u32;
        }
        for d in &mut b.dirs {
            d.reverse();
        }
        let mut referenced = vec![false; g.chunks.len()];
        let mut fixed = Vec::new();
        let mut refs = Vec::new();
        // An index none of whose chunks the GC touched (each a digest cache hit: an unchanged
        // guest) gets one reference, to the chunk touched last before it: a hit again for
        // every strategy that deduplicates, so their touches stay the trace's; an index
        // cannot be empty.
        let mut last_touched: Option<u32> = None;
        for (ino, touched) in g.indexes {
            let name = &g.tree[&ino].name;
            fixed.push(name.ends_with(".fidx"));
            let mut r: Vec<u32> = touched
                .into_iter()
                .map(|c| {
                    referenced[c as usize] = true;
                    number[c as usize]
                })
                .collect();
            match (r.last(), last_touched) {
                (Some(&c), _) => last_touched = Some(c),
                (None, Some(c)) => r.push(c),
                (None, None) => {}
            }
            refs.push(r);
        }
        // Indexes before the first touch (a guest unchanged since a group visited earlier):
        // the first chunk touched.
        if let Some(first) = refs.iter().find_map(|r: &Vec<u32>| r.first().copied()) {
            for r in refs.iter_mut().filter(|r| r.is_empty()) {
                r.push(first);
            }
        }
        if last_touched.is_none() {
            bail!(
                "the trace has no touch of phase 1 (a dry run, or a sweep alone): it cannot say \
                 which chunks its {} index files reference; record a GC that marks",
                fixed.len()
            );
        }
        b.referenced = referenced.iter().filter(|r| **r).count();
        Ok(Box::new(RefIndexes {
            sizes: vec![None; fixed.len()],
            fixed,
            refs,
            not_listed: Vec::new(),
            chunks: g.chunks.len() as u32,
            ctime: g.start_s,
        }))
    }
}
