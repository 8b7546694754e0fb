//! The simulated store's operations, as the FUSE requests a mount of the same store would
//! receive for them (each through [`crate::instrument`], as a mount's).
//!
//! Each operation is turned into the FUSE requests the kernel sends for the same system call
//! with attribute and entry caching off for files, as recorded from real runs. The lookups
//! and stats of directories below are left out while the simulated kernel has them cached
//! (a mount's default `--dir-ttl` on a datastore, see [`super::dentries`]):
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
//! An injected error ends the system call at the request it fails, as the kernel does, and
//! the operation answers as `DirStore` answers that errno (ENOENT on a touch: a missing chunk).

use std::io;
use std::path::{Component, Path};

use super::ahead::Ahead;
use super::markers::{Marker, MarkerKind, MarkerName};
use super::requests::{At, Name, Req};
use super::store::{NodeKind, SimStore, State};
use crate::datastore::paths::{chunk_subdir_name, CHUNK_DIR};
use crate::datastore::snapshots::{EntryKind, Tree};
use crate::datastore::{Digest, IndexFile};
use crate::store::{
    ChunkDir, ChunkStat, ChunkStore, EntryStat, Phase1Visitor, CHUNK_ENTRIES_PER_GETDENTS,
};
use crate::trace::format::flags;
use crate::trace::Op;

impl SimStore {
    /// Emits what opening the store does on a mount (chunkscope's `DirStore::open`: lookup
    /// `.chunks`, opendir).
    pub fn open_requests(&self) -> io::Result<()> {
        let mut st = self.lock();
        let chunks = self.nodes[self.chunks_node as usize].ino;
        let root = self.nodes[0].ino;
        let name = Name::Bytes(CHUNK_DIR.as_bytes());
        st.lookup_dir(
            self.chunks_node,
            Req::lookup(root, name, At::Tree(Path::new("")), Some(chunks)),
        )
        .and_then(|()| st.req(Req::on(Op::Opendir, chunks, At::Chunks)))
        .map_err(io::Error::from_raw_os_error)
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
            let r = Req::lookup(parent, named, At::Tree(dir), ino);
            match found {
                Some(n) if self.is_dir(n) => st.lookup_dir(n, r),
                _ => st.req(r),
            }
            .map_err(io::Error::from_raw_os_error)?;
            at = found.expect("a lookup that succeeds found the node");
            dir = rel_prefix(rel, dir, name);
        }
        Ok(at)
    }

    /// Inode of chunk directory `prefix` (0 outside a slice's directories: none).
    #[inline]
    fn chunk_dir_ino(&self, prefix: u16) -> u64 {
        self.chunk_dir_inos
            .get(prefix as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Node of chunk directory `prefix`.
    #[inline]
    fn chunk_dir_node(&self, prefix: u16) -> u32 {
        self.chunk_dir_nodes + prefix as u32
    }

    /// Whether node `n` is a directory (which a mount's kernel may cache, see
    /// [`super::dentries`]).
    #[inline]
    fn is_dir(&self, n: u32) -> bool {
        matches!(
            self.nodes[n as usize].kind,
            NodeKind::Dir | NodeKind::ChunkDir
        )
    }

    /// The start of a chunk path's walk: lookups of `.chunks` and `XXXX`; returns `XXXX`'s
    /// inode, or the errno of a lookup that failed.
    #[inline]
    fn walk_chunk_dir(&self, st: &mut State, prefix: u16) -> Result<u64, i32> {
        let chunks = self.nodes[self.chunks_node as usize].ino;
        let dir = self.chunk_dir_ino(prefix);
        let root = At::Tree(Path::new(""));
        st.lookup_dir(
            self.chunks_node,
            Req::lookup(
                self.nodes[0].ino,
                Name::Bytes(CHUNK_DIR.as_bytes()),
                root,
                Some(chunks),
            ),
        )?;
        let name = chunk_subdir_name(prefix);
        if !self.has_chunk_dir(prefix) {
            // Outside a slice's directories: the lookup fails as on a store without it.
            st.req(Req::lookup(
                chunks,
                Name::Bytes(name.as_bytes()),
                At::Chunks,
                None,
            ))?;
            return Err(libc::ENOENT);
        }
        st.lookup_dir(
            self.chunk_dir_node(prefix),
            Req::lookup(chunks, Name::Bytes(name.as_bytes()), At::Chunks, Some(dir)),
        )?;
        Ok(dir)
    }

    /// Whether chunk directory `prefix` exists (all do, but on a [`super::Slice`]).
    #[inline]
    fn has_chunk_dir(&self, prefix: u16) -> bool {
        (prefix as usize) < self.slice.chunk_dirs()
    }

    /// The path walk of a chunk's absolute path: lookups of `.chunks`, `XXXX` and the chunk;
    /// returns the chunk's index if it exists, or the errno of a lookup that failed (ENOENT
    /// for a missing chunk).
    #[inline]
    fn walk_chunk(&self, st: &mut State, d: &Digest) -> Result<u32, i32> {
        let dir = self.walk_chunk_dir(st, d.prefix())?;
        let found = self.find(d).filter(|&i| !st.is_removed(i as usize));
        let ino = found.map(|i| self.ino_of(&self.chunks[i as usize]));
        st.req(Req::lookup(
            dir,
            Name::Chunk(d),
            At::ChunkDir(d.prefix()),
            ino,
        ))?;
        Ok(found.expect("a lookup that succeeds found the chunk"))
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
        let NodeKind::Index(id) = self.nodes[node as usize].kind else {
            return Err(crate::datastore::error::FormatError::io(
                path,
                io::Error::new(io::ErrorKind::InvalidData, "not an index file"),
            ));
        };
        let bytes = match ahead.map(|a| a.take(node)) {
            Some(Some(bytes)) => bytes,
            Some(None) => {
                // The thread building ahead did not build it (it stopped): build it here.
                self.lock().indexes_not_ahead += 1;
                self.index_bytes(id)
            }
            None => self.index_bytes(id),
        };
        // The bytes were made by the writer's own function, checksum included: verifying it
        // would check SHA-256 against itself, at a tenth of a naive run's time.
        IndexFile::parse_unverified(bytes).map_err(|e| e.in_file(path))
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
            .and_then(|()| st.getattr_dir(n, Req::on(Op::Getattr, node.ino, at)))
            .map_err(errno)?;
        st.listing.clear();
        let inos = node
            .children
            .iter()
            .rev()
            .map(|&c| self.nodes[c as usize].ino);
        st.listing.extend(inos);
        let listed = st.read_whole_dir(node.ino, at);
        st.dentries.attr_changed(n); // its atime
        listed.map_err(errno)?;
        Ok(self.entries(n))
    }
}

/// An open chunk directory of the simulated store.
pub struct SimDir<'a> {
    store: &'a SimStore,
    prefix: u16,
    ino: u64,
    /// Entries (in readdir order) the directory's reads have passed.
    pos: usize,
    /// True once a read since the open (or the rewind) has returned "." and "..".
    started: bool,
    /// Entries a getdents call holds ([`CHUNK_ENTRIES_PER_GETDENTS`]; "." and ".." take one).
    per_call: usize,
    /// The inode of the last marker listed (markers come after the chunks, in inode order).
    marker_after: u64,
}

/// A file a chunk directory's lookup found: a chunk of the build, or a marker.
#[derive(Clone, Copy)]
enum Found {
    Chunk(u32),
    Marker(MarkerName, Marker),
}

impl SimDir<'_> {
    /// The inode of what a lookup found.
    fn ino(&self, found: Found) -> u64 {
        match found {
            Found::Chunk(i) => self.store.ino_of(&self.store.chunks[i as usize]),
            Found::Marker(_, m) => m.ino,
        }
    }

    /// The chunk or marker named `name` in this directory, with the lookup a `*at` call
    /// makes; the lookup's errno when it fails (ENOENT: no such file).
    fn lookup(&self, st: &mut State, name: &[u8]) -> Result<Found, i32> {
        let found = Digest::from_hex_bytes(name)
            .filter(|d| d.prefix() == self.prefix)
            .and_then(|d| self.store.find(&d))
            .filter(|&i| !st.is_removed(i as usize))
            .map(Found::Chunk)
            .or_else(|| {
                let m = MarkerName::parse(name).filter(|m| m.digest.prefix() == self.prefix)?;
                st.markers.get(&m).map(|found| Found::Marker(m, found))
            });
        let ino = found.map(|f| self.ino(f));
        st.req(Req::lookup(
            self.ino,
            Name::Bytes(name),
            At::ChunkDir(self.prefix),
            ino,
        ))?;
        Ok(found.expect("a lookup that succeeds found the file"))
    }
}

impl ChunkDir for SimDir<'_> {
    fn rewind(&mut self) -> io::Result<()> {
        self.pos = 0;
        self.started = false;
        self.marker_after = 0;
        Ok(())
    }

    fn read_batch(&mut self, f: &mut dyn FnMut(&[u8], u64)) -> io::Result<bool> {
        let mut guard = self.store.lock();
        let st = &mut *guard;
        // Entries in readdir order (the newest first), a getdents call's worth at a time.
        let all = &self.store.dirs[self.prefix as usize];
        let at = |k: usize| all[all.len() - 1 - k] as usize;
        st.listing.clear();
        // The first call returns "." and ".." (24 bytes each) as well.
        let first = !self.started;
        let room = self.per_call - first as usize;
        let mut end = self.pos;
        while end < all.len() && st.listing.len() < room {
            if !st.is_removed(at(end)) {
                st.listing
                    .push(self.store.ino_of(&self.store.chunks[at(end)]));
            }
            end += 1;
        }
        // Then the markers (an S3 datastore's), which no listing of a store without them
        // finds.
        let mut markers: Vec<(u64, MarkerName)> = Vec::new();
        if end == all.len() && st.listing.len() < room {
            let more = room - st.listing.len();
            markers.extend(
                st.markers
                    .in_dir_after(self.prefix, self.marker_after)
                    .take(more),
            );
            st.listing.extend(markers.iter().map(|m| m.0));
        }
        // The call's request comes first: an error there (injected) lists nothing.
        let listed = st.readdir(self.ino, At::ChunkDir(self.prefix));
        st.dentries
            .attr_changed(self.store.chunk_dir_node(self.prefix)); // its atime
        listed.map_err(io::Error::from_raw_os_error)?;
        self.started = true;
        if st.listing.is_empty() {
            self.pos = all.len();
            return Ok(first);
        }
        let mut name = [0u8; 64];
        for k in self.pos..end {
            if st.is_removed(at(k)) {
                continue;
            }
            let c = &self.store.chunks[at(k)];
            hex::encode_to_slice(c.digest.0, &mut name).expect("64 bytes for 32");
            f(&name, self.store.ino_of(c));
        }
        self.pos = end;
        let mut buf = [0u8; 70];
        for (ino, m) in &markers {
            f(m.write(&mut buf), *ino);
            self.marker_after = *ino;
        }
        Ok(true)
    }

    fn stat(&mut self, name: &[u8]) -> io::Result<Option<EntryStat>> {
        let mut st = self.store.lock();
        // As `DirStore`: a vanished entry is none; any other error is the sweep's to count.
        let vanished = |e: i32| match e {
            libc::ENOENT => Ok(None),
            e => Err(io::Error::from_raw_os_error(e)),
        };
        let i = match self.lookup(&mut st, name) {
            Ok(Found::Chunk(i)) => i,
            Ok(Found::Marker(_, m)) => {
                let at = At::ChunkDir(self.prefix);
                if let Err(e) = st.req(Req::on(Op::Getattr, m.ino, at)) {
                    return vanished(e);
                }
                return Ok(Some(EntryStat {
                    atime: m.atime,
                    size: 0,
                    is_file: true,
                }));
            }
            Err(e) => return vanished(e),
        };
        let c = &self.store.chunks[i as usize];
        if let Err(e) = st.req(Req::on(
            Op::Getattr,
            self.store.ino_of(c),
            At::Chunk(&c.digest),
        )) {
            return vanished(e);
        }
        Ok(Some(EntryStat {
            atime: st.atime(i as usize),
            size: c.size() as u64,
            is_file: true,
        }))
    }

    fn unlink(&mut self, name: &[u8]) -> io::Result<()> {
        let mut st = self.store.lock();
        let errno = io::Error::from_raw_os_error;
        let found = self.lookup(&mut st, name).map_err(errno)?;
        let ino = self.ino(found);
        st.req(Req {
            parent: self.ino,
            name: Name::Bytes(name),
            ..Req::on(Op::Unlink, ino, At::ChunkDir(self.prefix))
        })
        .map_err(errno)?;
        st.dentries
            .attr_changed(self.store.chunk_dir_node(self.prefix));
        match found {
            Found::Chunk(i) => st.set_removed(i as usize, true),
            Found::Marker(m, _) => {
                st.markers.remove(&m);
            }
        }
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

/// A request sequence's result as `DirStore` reads its system call's: ENOENT is "not there"
/// (`None`), any other errno an error.
fn missing_is_none<T>(r: Result<T, i32>) -> io::Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(libc::ENOENT) => Ok(None),
        Err(e) => Err(io::Error::from_raw_os_error(e)),
    }
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
        let now = self.now;
        let touched = self.walk_chunk(&mut st, digest).and_then(|i| {
            let ino = self.ino_of(&self.chunks[i as usize]);
            st.req(Req {
                flags: flags::SET_ATIME,
                arg: (now.max(0) as u64).saturating_mul(1_000_000_000),
                ..Req::on(Op::Setattr, ino, At::Chunk(digest))
            })
            .map(|()| i)
        });
        // As `DirStore::touch` (utimensat on the path): ENOENT is a missing chunk.
        let Some(i) = missing_is_none(touched)? else {
            return Ok(false);
        };
        st.set_atime(i as usize, now);
        Ok(true)
    }

    fn touch_bad(&self, digest: &Digest, n: u8) -> io::Result<bool> {
        // Bad copies are markers (a surveyed S3 datastore's); without one the walk ends at a
        // failed lookup.
        let mut st = self.lock();
        let name = MarkerName {
            digest: *digest,
            kind: MarkerKind::Bad(n),
        };
        let found = st.markers.get(&name);
        let at = At::ChunkDir(digest.prefix());
        let now = self.now;
        let r = self
            .walk_chunk_dir(&mut st, digest.prefix())
            .and_then(|dir| {
                st.req(Req::lookup(
                    dir,
                    Name::Bad(digest, n),
                    at,
                    found.map(|m| m.ino),
                ))
            })
            .and_then(|()| {
                let m = found.expect("a lookup that succeeds found the marker");
                st.req(Req {
                    flags: flags::SET_ATIME,
                    arg: (now.max(0) as u64).saturating_mul(1_000_000_000),
                    ..Req::on(Op::Setattr, m.ino, at)
                })
            });
        let touched = missing_is_none(r)?.is_some();
        if touched {
            st.markers.set_atime(&name, now);
        }
        Ok(touched)
    }

    fn stat_chunk(&self, digest: &Digest) -> io::Result<Option<ChunkStat>> {
        let mut st = self.lock();
        let r = self.walk_chunk(&mut st, digest).and_then(|i| {
            let ino = self.ino_of(&self.chunks[i as usize]);
            st.req(Req::on(Op::Getattr, ino, At::Chunk(digest)))
                .map(|()| (ino, st.atime(i as usize)))
        });
        Ok(missing_is_none(r)?.map(|(ino, atime)| ChunkStat {
            ino,
            atime_ns: atime as i128 * 1_000_000_000,
        }))
    }

    fn insert_chunk(&self, digest: &Digest, _blob: &[u8]) -> io::Result<bool> {
        // Only the atime check inserts (the zero chunk); simulated runs skip that check. As
        // PBS does, a stat first, then the touch.
        if self.stat_chunk(digest)?.is_some() {
            return self.touch(digest);
        }
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the simulated store does not insert chunks (run with the atime check off)",
        ))
    }

    /// As `DirStore`'s `O_CREAT | O_EXCL` open: the walk to the directory, the lookup of the
    /// name (found: `Ok(false)`), the create. A zero-length marker of a chunk of the build
    /// that this run removed brings it back, its atime now.
    fn create_marker(&self, digest: &Digest, suffix: &[u8]) -> io::Result<bool> {
        let Some(name) = MarkerName::with_suffix(digest, suffix) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a marker's suffix",
            ));
        };
        let mut st = self.lock();
        let prefix = digest.prefix();
        let dir = self
            .walk_chunk_dir(&mut st, prefix)
            .map_err(io::Error::from_raw_os_error)?;
        let chunk = (name.kind == MarkerKind::Chunk)
            .then(|| self.find(digest))
            .flatten();
        let there = match chunk {
            Some(i) if !st.is_removed(i as usize) => Some(self.ino_of(&self.chunks[i as usize])),
            Some(_) => None,
            None => st.markers.get(&name).map(|m| m.ino),
        };
        let mut buf = [0u8; 70];
        let named = Name::Bytes(name.write(&mut buf));
        let at = At::ChunkDir(prefix);
        match st.req(Req::lookup(dir, named, at, there)) {
            Ok(()) => return Ok(false),
            Err(libc::ENOENT) => {}
            Err(e) => return Err(io::Error::from_raw_os_error(e)),
        }
        let now = self.now;
        let ino = match chunk {
            Some(i) => self.ino_of(&self.chunks[i as usize]),
            None => st.markers.create(name, now).expect("not there").ino,
        };
        let created = st.req(Req {
            parent: dir,
            name: named,
            ..Req::on(Op::Create, ino, at)
        });
        if let Err(e) = created {
            if chunk.is_none() {
                st.markers.remove(&name);
            }
            return Err(io::Error::from_raw_os_error(e));
        }
        st.dentries.attr_changed(self.chunk_dir_node(prefix));
        if let Some(i) = chunk {
            st.set_removed(i as usize, false);
            st.set_atime(i as usize, now);
        }
        Ok(true)
    }

    fn chunk_dirs(&self) -> usize {
        self.slice.chunk_dirs()
    }

    /// The jobs run in turn on the GC's thread, each request in its job's lane: the same
    /// order every run (on threads of their own, their requests would interleave as the
    /// threads happened to run, and the model's cache evict in a different order each time).
    fn prefetch_job(&self, job: Option<usize>) -> bool {
        self.lock().job = job;
        true
    }

    /// What the GC's layout check costs where the filesystem's readdir gives no entry types
    /// (zfs-fuse, the model's `readdir_without_types`): `fstatat` of every chunk directory,
    /// a lookup each while the simulated kernel has not cached it. The simulated store has
    /// no odd directory.
    fn odd_chunk_dirs(&self) -> anyhow::Result<Vec<crate::store::layout::OddDir>> {
        if !self.with_model(|m| m.params().readdir_without_types) {
            return Ok(Vec::new());
        }
        let mut st = self.lock();
        let chunks = self.nodes[self.chunks_node as usize].ino;
        for prefix in (0..self.chunk_dirs()).map(|p| p as u16) {
            if !self.has_chunk_dir(prefix) {
                continue;
            }
            let name = chunk_subdir_name(prefix);
            let ino = self.chunk_dir_ino(prefix);
            st.lookup_dir(
                self.chunk_dir_node(prefix),
                Req::lookup(chunks, Name::Bytes(name.as_bytes()), At::Chunks, Some(ino)),
            )
            .map_err(io::Error::from_raw_os_error)?;
        }
        Ok(Vec::new())
    }

    fn open_dir(&self, prefix: u16) -> io::Result<Option<SimDir<'_>>> {
        if !self.has_chunk_dir(prefix) {
            // Not part of the slice: the GC visits only `chunk_dirs()`; no request.
            return Ok(None);
        }
        let mut st = self.lock();
        let chunks = self.nodes[self.chunks_node as usize].ino;
        let ino = self.chunk_dir_ino(prefix);
        let name = chunk_subdir_name(prefix);
        let r = st
            .lookup_dir(
                self.chunk_dir_node(prefix),
                Req::lookup(chunks, Name::Bytes(name.as_bytes()), At::Chunks, Some(ino)),
            )
            .and_then(|()| st.req(Req::on(Op::Opendir, ino, At::ChunkDir(prefix))));
        // As `DirStore::open_dir`: a missing directory is no directory.
        if missing_is_none(r)?.is_none() {
            return Ok(None);
        }
        Ok(Some(SimDir {
            store: self,
            prefix,
            ino,
            pos: 0,
            started: false,
            per_call: CHUNK_ENTRIES_PER_GETDENTS,
            marker_after: 0,
        }))
    }

    fn walk_indexes(&self, visitor: &mut dyn Phase1Visitor) -> anyhow::Result<()> {
        self.walk_indexes_ahead(visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;
    use crate::gen::GenConfig;
    use crate::model::Model;
    use crate::model::ModelParams;
    use crate::sim::DigestMode;

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
            crate::sim::Slice::WHOLE,
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
        let i = (0..s.chunks.len())
            .find(|&i| st.atime(i) < s.now)
            .expect("an old chunk");
        (s.chunks[i].digest, st.atime(i))
    }

    fn atime(s: &SimStore, d: &Digest) -> i64 {
        let st = s.lock();
        let i = s.find(d).unwrap();
        st.atime(i as usize)
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

    /// A directory is read a getdents call at a time: "." and ".." take one entry's room in
    /// the first, an entry removed before the call that would return it is not returned, and
    /// each call is one readdir request, the last one finding the end.
    #[test]
    fn a_chunk_directory_is_read_one_getdents_call_at_a_time() {
        let s = tiny();
        // The fullest chunk directory of tiny.
        let prefix = (0..=u16::MAX)
            .max_by_key(|&p| s.dirs[p as usize].len())
            .unwrap();
        let mut dir = s.open_dir(prefix).unwrap().unwrap();
        let mut all = Vec::new();
        dir.list(&mut |n, ino| all.push((n.to_vec(), ino))).unwrap();
        assert!(
            all.len() >= 2,
            "tiny's fullest directory holds {}",
            all.len()
        );
        let readdirs = || s.lock().counts.readdir;
        dir.per_call = 2;
        dir.rewind().unwrap();
        let before = readdirs();
        let mut batches = Vec::new();
        loop {
            let mut batch = Vec::new();
            let more = dir
                .read_batch(&mut |n, ino| batch.push((n.to_vec(), ino)))
                .unwrap();
            if !more {
                assert!(batch.is_empty());
                break;
            }
            if batches.is_empty() {
                // Remove the entry the next call would return first.
                dir.unlink(&all[1].0).unwrap();
            }
            batches.push(batch);
        }
        assert_eq!(
            batches[0],
            all[..1],
            "the first call: one entry beside the dots"
        );
        let mut kept = all.clone();
        kept.remove(1);
        assert_eq!(batches.concat(), kept, "the removed entry is not returned");
        assert!(batches.iter().all(|b| b.len() <= 2));
        assert_eq!(
            readdirs() - before,
            batches.len() as u64 + 1,
            "one request a call"
        );
        // A rewind starts again at the first entry.
        dir.rewind().unwrap();
        let mut again = Vec::new();
        dir.read_batch(&mut |n, ino| again.push((n.to_vec(), ino)))
            .unwrap();
        assert_eq!(again, all[..1]);
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

    /// Issue 64: where readdir gives no entry types (zfs-fuse), the GC's layout check looks
    /// up every chunk directory, and the model charges those lookups; elsewhere it costs
    /// nothing.
    #[test]
    fn the_layout_check_looks_up_every_chunk_directory_where_readdir_gives_no_types() {
        let s = tiny();
        let lookups = || s.lock().counts.lookup;
        let before = lookups();
        assert!(s.odd_chunk_dirs().unwrap().is_empty());
        assert_eq!(lookups(), before, "readdir gives types: no request");
        let mut p = ModelParams::preset("zfs-hdd").unwrap();
        p.readdir_without_types = true;
        s.reset(Model::new(p));
        let before = lookups();
        let charged = s.with_model(|m| m.totals().ops);
        assert!(s.odd_chunk_dirs().unwrap().is_empty());
        assert_eq!(lookups() - before, s.chunk_dirs() as u64);
        assert!(s.with_model(|m| m.totals().ops) - charged >= s.chunk_dirs() as u64);
    }
}
