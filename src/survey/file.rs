//! The survey file (`survey --out FILE`): what the simulator needs of a real store, compact
//! and versioned, so that a store surveyed once can be simulated again (here or elsewhere)
//! without reading it.
//!
//! Layout: the 8 bytes `CSSURVEY`, a little-endian `u32` version ([`VERSION`]), then one zstd
//! frame (with its content checksum: a truncated or damaged file is an error, never a
//! shorter store) holding, little-endian throughout:
//!
//! 1. the header: `u32` length, then JSON ([`FileHeader`]);
//! 2. the chunks: `u32` directory count, each directory's `u32` chunk count, each one's
//!    `u64` inode number (0: not listed), then every
//!    chunk in readdir order, directory by directory, as its 32-byte digest and `u64` inode
//!    number; a chunk's *number* is its place in this list;
//! 3. the walk, in the order the survey's phase-1 walk made it, records until a `0` tag:
//!    * `1` a directory listed: path (`u16` length, bytes, relative to the store, empty for
//!      its root), `u64` inode, `u32` entries, each a kind byte (`0` directory, `1` file,
//!      `2` other), `u64` inode, name (`u16` length, bytes);
//!    * `2` an index file read: path, a kind byte (`b'f'` fixed, `b'd'` dynamic), (from
//!      version 2) `u64` content bytes (fidx: its size, didx: its last end offset) and `u64`
//!      chunk size (fidx; 0 for didx), `u64` references, each a `u32` chunk number, or
//!      `u32::MAX` and the 32-byte digest of a chunk not listed;
//! 4. the unreferenced chunks, each a `u64` chunk number, `i64` atime (epoch seconds) and
//!    `u64` size, until the number `u64::MAX`;
//! 5. (from version 3) an S3 datastore's bucket (empty for any other store), records until
//!    a `0` tag: `1` a chunk object, its 32-byte digest, a `u8` suffix length and the
//!    suffix (a bad copy's `.N.bad`; 0 for a chunk), its `u64` size; `2` a local `.using`
//!    marker, its 32-byte digest; `3` a local bad copy `<digest>.N.bad`, its digest, `u8`
//!    N and `i64` atime;
//! 6. the trailer: `u64` chunks, references and unreferenced chunks, and (from version 3)
//!    the bucket's objects (checked against what was read).

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::datastore::snapshots::EntryKind;
use crate::datastore::Digest;
use crate::model::Layout;

/// The file's first bytes (kept with every other file's magic in [`crate::sniff`]).
pub const MAGIC: &[u8; 8] = &crate::sniff::SURVEY_MAGIC;
/// The format version this build writes (it reads 1 and 2 as well: version 1 lacks the
/// indexes' content bytes, taken as 4 MiB a reference; versions 1 and 2 have no bucket).
pub const VERSION: u32 = 3;
/// The chunk size a version-1 file's indexes are taken to have.
const V1_CHUNK_SIZE: u64 = 4 << 20;
/// A reference to a chunk that was not listed (its digest follows).
const NOT_LISTED: u32 = u32::MAX;
/// The chunk number that ends the unreferenced chunks.
const END: u64 = u64::MAX;

/// What the file says of the survey.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileHeader {
    /// The store surveyed.
    pub store: String,
    /// Its filesystem (`zfs`, `ext4`, `tmpfs`, ...).
    pub filesystem: String,
    /// Where its inodes' metadata lives, as the survey counted blocks.
    pub layout: Layout,
    /// When the survey started, epoch seconds.
    pub surveyed_at: i64,
    /// Chunk directories (65,536).
    pub chunk_dirs: u32,
    /// The size of its filesystem, bytes (what a disk model spreads seeks over; 0: not
    /// known, a survey from before it was recorded).
    #[serde(default)]
    pub filesystem_bytes: u64,
    /// The layout was assumed (a filesystem whose geometry the survey could not read), not
    /// read from the filesystem.
    #[serde(default)]
    pub layout_assumed: bool,
    /// Where ext4's inode tables and directory blocks lie (its superblock's), if read.
    #[serde(default)]
    pub placement: Option<crate::model::place::Placement>,
    /// Bytes of a metadata block (an inode-table block, an XFS inode cluster); 0: not read.
    #[serde(default)]
    pub block_bytes: u64,
    /// An S3 datastore's bucket (`s3://BUCKET at ENDPOINT`), listed into the file; `None`
    /// for a store on a filesystem alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
}

impl FileHeader {
    /// Fits `params` to the surveyed filesystem: a disk model spans it, and a model of the
    /// same filesystem takes the geometry the survey read (ext4's inodes a group, block size
    /// and where its tables lie; XFS's allocation groups, inode size and cluster), so that
    /// blocks lie where they lie on this filesystem, not on the preset's 2 GiB one. Returns a
    /// note when a model with a disk is of another filesystem than the one surveyed.
    pub fn fit_model(&self, params: &mut crate::model::ModelParams) -> Option<String> {
        use crate::model::Layout;
        if let Some(disk) = params.disk.as_mut().filter(|_| self.filesystem_bytes > 0) {
            disk.span = self.filesystem_bytes;
        }
        // The layout is the filesystem's own only where the survey read it: a survey from
        // before `layout_assumed` was recorded assumed ZFS's on anything but ZFS and ext4.
        let read = !self.layout_assumed
            && matches!(
                (self.filesystem.as_str(), &self.layout),
                ("ext4", Layout::Ext4 { .. })
                    | ("xfs", Layout::Xfs { .. })
                    | ("zfs", Layout::Zfs { .. })
            );
        if !read {
            return None;
        }
        let kind = |l: &Layout| std::mem::discriminant(l);
        if kind(&params.layout) != kind(&self.layout) {
            return params.disk.is_some().then(|| {
                format!(
                    "the model {} places blocks as another filesystem does than the survey's \
                     ({}): --model {}-hdd starts from a model of it",
                    params.name, self.filesystem, self.filesystem
                )
            });
        }
        params.layout = self.layout;
        if self.block_bytes > 0 {
            params.block_bytes = self.block_bytes;
        }
        if let Some(p) = self.placement {
            params.placement = p;
        }
        None
    }
}

/// A directory the walk listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirRecord {
    /// Its path relative to the store (empty: the root).
    pub path: PathBuf,
    /// Its inode number.
    pub ino: u64,
    /// Its entries in readdir order: name, kind, inode.
    pub entries: Vec<(String, EntryKind, u64)>,
}

/// A chunk an index references.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkRef {
    /// A listed chunk, by number.
    Listed(u32),
    /// A chunk that was not listed (missing, or created after its directory was listed).
    NotListed(Digest),
}

/// An index file the walk read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexRecord {
    /// Its path relative to the store.
    pub path: PathBuf,
    /// Fixed (`.fidx`) or dynamic.
    pub fixed: bool,
    /// Content bytes it describes (fidx: its size; didx: its last end offset): what a GC
    /// adds to "Original data usage".
    pub size: u64,
    /// Its fixed chunk size (fidx; 0 for didx).
    pub chunk_size: u64,
    /// Its references in order, 4 bytes each: a listed chunk's number, or (from the file's
    /// chunk count on) a chunk not listed ([`SurveyFile::chunk_ref`]).
    pub refs: Vec<u32>,
}

/// An unreferenced chunk's state when surveyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unreferenced {
    /// Its number.
    pub number: u64,
    /// Its atime, epoch seconds.
    pub atime: i64,
    /// Its size, bytes.
    pub size: u64,
}

/// A chunk object of an S3 datastore's bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SurveyObject {
    /// Its digest.
    pub digest: Digest,
    /// A bad copy's suffix after the digest (`.N.bad`, 6 bytes); `None` for the chunk.
    pub bad_suffix: Option<[u8; BAD_SUFFIX]>,
    /// Its size, bytes.
    pub size: u64,
}

/// Bytes of a bad copy's suffix (`.N.bad`): an object's basename of 70 characters is a bad
/// copy (format document 3.7).
pub const BAD_SUFFIX: usize = 6;

impl SurveyObject {
    /// Its key in the bucket (`.chunks/XXXX/<hex>[.N.bad]`).
    pub fn key(&self) -> String {
        let hex = self.digest.to_hex();
        let mut k = format!("{}{}/{hex}", crate::bucket::CHUNK_PREFIX, &hex[..4]);
        if let Some(s) = &self.bad_suffix {
            k.push_str(&String::from_utf8_lossy(s));
        }
        k
    }
}

/// An S3 datastore's bucket as surveyed, and the local `.using` markers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SurveyBucket {
    /// The chunk objects, in the listing's (key) order.
    pub objects: Vec<SurveyObject>,
    /// The digests of the local `.using` markers.
    pub using: Vec<Digest>,
    /// The local bad copies: digest, N of `.N.bad`, atime (epoch seconds).
    pub bad: Vec<(Digest, u8, i64)>,
}

/// A survey file, read whole.
#[derive(Clone, Debug, PartialEq)]
pub struct SurveyFile {
    /// Its header.
    pub header: FileHeader,
    /// Chunks per directory.
    pub dir_chunks: Vec<u32>,
    /// Each chunk directory's inode number (0: not listed).
    pub dir_inos: Vec<u64>,
    /// Every chunk in readdir order, directory by directory: digest and inode.
    pub chunks: Vec<(Digest, u64)>,
    /// The directories the walk listed, in its order.
    pub dirs: Vec<DirRecord>,
    /// The index files the walk read, in its order.
    pub indexes: Vec<IndexRecord>,
    /// The digests of the chunks referenced but not listed, each once.
    pub not_listed: Vec<Digest>,
    /// The unreferenced chunks.
    pub unreferenced: Vec<Unreferenced>,
    /// An S3 datastore's bucket (when the header names one).
    pub bucket: Option<SurveyBucket>,
}

/// Writes a survey file: into a temporary file beside the destination, renamed over it by
/// [`SurveyWriter::finish`] (a survey that fails leaves no file, and no half of one).
pub struct SurveyWriter {
    w: Option<BufWriter<zstd::Encoder<'static, File>>>,
    tmp: PathBuf,
    dest: PathBuf,
    chunks: u64,
    references: u64,
    unreferenced: u64,
    objects: u64,
    /// Whether the unreferenced chunks' end is written (the bucket follows).
    unreferenced_ended: bool,
    /// The references of the index being written (its count goes first).
    pending: Vec<ChunkRef>,
}

fn put_bytes(w: &mut impl Write, b: &[u8]) -> io::Result<()> {
    let len = u16::try_from(b.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path or name longer than 65,535 bytes",
        )
    })?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(b)
}

fn path_bytes(p: &Path) -> &[u8] {
    std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str())
}

impl SurveyWriter {
    /// Starts the file `dest` with `header`.
    pub fn create(dest: &Path, header: &FileHeader) -> Result<SurveyWriter> {
        let name = dest
            .file_name()
            .with_context(|| format!("{}: not a file name", dest.display()))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = dest.with_file_name(tmp_name);
        let file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut out = SurveyWriter {
            w: None,
            tmp,
            dest: dest.to_path_buf(),
            chunks: 0,
            references: 0,
            unreferenced: 0,
            objects: 0,
            unreferenced_ended: false,
            pending: Vec::new(),
        };
        let mut file = file;
        file.write_all(MAGIC)?;
        file.write_all(&VERSION.to_le_bytes())?;
        let mut enc = zstd::Encoder::new(file, 1)?;
        enc.include_checksum(true)?;
        let mut w = BufWriter::with_capacity(1 << 20, enc);
        let json = serde_json::to_vec(header)?;
        w.write_all(&(json.len() as u32).to_le_bytes())?;
        w.write_all(&json)?;
        out.w = Some(w);
        Ok(out)
    }

    fn w(&mut self) -> &mut BufWriter<zstd::Encoder<'static, File>> {
        self.w.as_mut().expect("written after finish")
    }

    /// The chunks: counts and inodes per directory, then each chunk (digest, inode) in
    /// readdir order.
    pub fn chunks(
        &mut self,
        counts: &[u32],
        dir_inos: &[u64],
        chunks: impl Iterator<Item = (Digest, u64)>,
    ) -> Result<()> {
        let w = self.w();
        w.write_all(&(counts.len() as u32).to_le_bytes())?;
        for c in counts {
            w.write_all(&c.to_le_bytes())?;
        }
        for i in dir_inos {
            w.write_all(&i.to_le_bytes())?;
        }
        let mut n = 0u64;
        for (d, ino) in chunks {
            w.write_all(&d.0)?;
            w.write_all(&ino.to_le_bytes())?;
            n += 1;
        }
        let expected: u64 = counts.iter().map(|&c| c as u64).sum();
        if n != expected {
            bail!("{n} chunks written for {expected} counted");
        }
        self.chunks = n;
        Ok(())
    }

    /// A directory the walk listed.
    pub fn dir(
        &mut self,
        path: &Path,
        ino: u64,
        entries: &[(Vec<u8>, EntryKind, u64)],
    ) -> Result<()> {
        let w = self.w();
        w.write_all(&[1])?;
        put_bytes(w, path_bytes(path))?;
        w.write_all(&ino.to_le_bytes())?;
        w.write_all(&(entries.len() as u32).to_le_bytes())?;
        for (name, kind, ino) in entries {
            let k = match kind {
                EntryKind::Dir => 0u8,
                EntryKind::File => 1,
                EntryKind::Other => 2,
            };
            w.write_all(&[k])?;
            w.write_all(&ino.to_le_bytes())?;
            put_bytes(w, name)?;
        }
        Ok(())
    }

    /// A reference of the index being read (see [`SurveyWriter::end_index`]).
    #[inline]
    pub fn reference(&mut self, r: ChunkRef) {
        self.pending.push(r);
    }

    /// The index file at `path` (relative) with the references given since the last one,
    /// `size` content bytes and (fidx) chunks of `chunk_size`.
    pub fn end_index(
        &mut self,
        path: &Path,
        fixed: bool,
        size: u64,
        chunk_size: u64,
    ) -> Result<()> {
        let refs = std::mem::take(&mut self.pending);
        self.references += refs.len() as u64;
        let w = self.w();
        w.write_all(&[2])?;
        put_bytes(w, path_bytes(path))?;
        w.write_all(&[if fixed { b'f' } else { b'd' }])?;
        w.write_all(&size.to_le_bytes())?;
        w.write_all(&chunk_size.to_le_bytes())?;
        w.write_all(&(refs.len() as u64).to_le_bytes())?;
        for r in &refs {
            match r {
                ChunkRef::Listed(n) => w.write_all(&n.to_le_bytes())?,
                ChunkRef::NotListed(d) => {
                    w.write_all(&NOT_LISTED.to_le_bytes())?;
                    w.write_all(&d.0)?;
                }
            }
        }
        self.pending = refs;
        self.pending.clear();
        Ok(())
    }

    /// Forgets the references given since the last index (an index found bad while read).
    pub fn drop_index(&mut self) {
        self.pending.clear();
    }

    /// Ends the walk: the unreferenced chunks follow.
    pub fn end_walk(&mut self) -> Result<()> {
        self.w().write_all(&[0])?;
        Ok(())
    }

    /// An unreferenced chunk (after [`SurveyWriter::end_walk`]).
    pub fn unreferenced(&mut self, u: &Unreferenced) -> Result<()> {
        self.unreferenced += 1;
        let w = self.w();
        w.write_all(&u.number.to_le_bytes())?;
        w.write_all(&u.atime.to_le_bytes())?;
        w.write_all(&u.size.to_le_bytes())?;
        Ok(())
    }

    /// Ends the unreferenced chunks, once: the bucket's records follow.
    fn end_unreferenced(&mut self) -> Result<()> {
        if !self.unreferenced_ended {
            self.unreferenced_ended = true;
            self.w().write_all(&END.to_le_bytes())?;
        }
        Ok(())
    }

    /// A chunk object of the bucket (after the unreferenced chunks).
    pub fn object(&mut self, o: &SurveyObject) -> Result<()> {
        self.end_unreferenced()?;
        self.objects += 1;
        let w = self.w();
        w.write_all(&[1])?;
        w.write_all(&o.digest.0)?;
        match &o.bad_suffix {
            Some(s) => {
                w.write_all(&[s.len() as u8])?;
                w.write_all(s)?;
            }
            None => w.write_all(&[0])?,
        }
        w.write_all(&o.size.to_le_bytes())?;
        Ok(())
    }

    /// A local `.using` marker of an S3 datastore (after the unreferenced chunks).
    pub fn using(&mut self, d: &Digest) -> Result<()> {
        self.end_unreferenced()?;
        let w = self.w();
        w.write_all(&[2])?;
        w.write_all(&d.0)?;
        Ok(())
    }

    /// A local bad copy `<d>.N.bad` of an S3 datastore and its atime (after the
    /// unreferenced chunks).
    pub fn bad_copy(&mut self, d: &Digest, n: u8, atime: i64) -> Result<()> {
        self.end_unreferenced()?;
        let w = self.w();
        w.write_all(&[3])?;
        w.write_all(&d.0)?;
        w.write_all(&[n])?;
        w.write_all(&atime.to_le_bytes())?;
        Ok(())
    }

    /// Writes the trailer, syncs the file and renames it into place.
    pub fn finish(mut self) -> Result<()> {
        self.end_unreferenced()?;
        let counts = [
            self.chunks,
            self.references,
            self.unreferenced,
            self.objects,
        ];
        let mut w = self.w.take().expect("finished once");
        w.write_all(&[0])?;
        for c in counts {
            w.write_all(&c.to_le_bytes())?;
        }
        let file = w
            .into_inner()
            .map_err(|e| e.into_error())?
            .finish()
            .with_context(|| format!("writing {}", self.tmp.display()))?;
        file.sync_all()
            .with_context(|| format!("writing {}", self.tmp.display()))?;
        std::fs::rename(&self.tmp, &self.dest).with_context(|| {
            format!("renaming {} to {}", self.tmp.display(), self.dest.display())
        })?;
        Ok(())
    }
}

impl Drop for SurveyWriter {
    fn drop(&mut self) {
        if self.w.is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

struct Reader<R> {
    r: R,
}

impl<R: Read> Reader<R> {
    fn bytes<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b)?;
        Ok(b)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.bytes::<1>()?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn var(&mut self) -> io::Result<Vec<u8>> {
        let len = u16::from_le_bytes(self.bytes()?) as usize;
        let mut v = vec![0; len];
        self.r.read_exact(&mut v)?;
        Ok(v)
    }
}

/// A count read from the file, refused when it is more than the file could hold.
fn bounded(n: u64, limit: u64, what: &str) -> Result<usize> {
    if n > limit {
        bail!("{what}: {n} is more than a survey file holds (damaged?)");
    }
    Ok(n as usize)
}

impl SurveyFile {
    /// What the reference `r` of an [`IndexRecord`] names.
    pub fn chunk_ref(&self, r: u32) -> ChunkRef {
        match r.checked_sub(self.chunks.len() as u32) {
            Some(i) => ChunkRef::NotListed(self.not_listed[i as usize]),
            None => ChunkRef::Listed(r),
        }
    }

    /// Reads the survey file at `path`; a file that is not one, of another version,
    /// truncated or damaged is an error naming it and what is wrong.
    pub fn read(path: &Path) -> Result<SurveyFile> {
        // Without moving its atime: a file handed here by mistake may be a chunk.
        let (f, _) = crate::fsutil::open_noatime(path)
            .with_context(|| format!("opening {}", path.display()))?;
        Self::read_from(f, path)
            .with_context(|| format!("reading the survey file {}", path.display()))
    }

    fn read_from(mut f: File, path: &Path) -> Result<SurveyFile> {
        let mut head = [0u8; 12];
        let not_survey = || {
            format!(
                "not a chunkscope survey file (it does not start with CSSURVEY){}",
                crate::sniff::describe_file(path)
            )
        };
        let n = crate::fsutil::read_full(&mut f, &mut head)?;
        if n == 0 {
            bail!("an empty file, not a survey file (was `survey --out` stopped before it wrote?)");
        }
        if !MAGIC.starts_with(&head[..n.min(8)]) {
            bail!(not_survey());
        }
        if n < head.len() {
            bail!("truncated: {n} of its {} header bytes", head.len());
        }
        let version = u32::from_le_bytes(head[8..].try_into().expect("4"));
        if !(1..=VERSION).contains(&version) {
            bail!("format version {version}; this chunkscope reads versions 1 to {VERSION}");
        }
        let dec = zstd::Decoder::new(f)?;
        let mut r = Reader {
            r: BufReader::with_capacity(1 << 20, dec),
        };
        let truncated = |e: io::Error| anyhow::anyhow!("truncated or damaged: {e}");
        let len = bounded(r.u32().map_err(truncated)? as u64, 1 << 20, "header length")?;
        let mut json = vec![0; len];
        r.r.read_exact(&mut json).map_err(truncated)?;
        let header: FileHeader = serde_json::from_slice(&json).context("its header")?;
        let ndirs = bounded(r.u32().map_err(truncated)? as u64, 1 << 16, "directories")?;
        let mut dir_chunks = Vec::with_capacity(ndirs);
        for _ in 0..ndirs {
            dir_chunks.push(r.u32().map_err(truncated)?);
        }
        let mut dir_inos = Vec::with_capacity(ndirs);
        for _ in 0..ndirs {
            dir_inos.push(r.u64().map_err(truncated)?);
        }
        let total: u64 = dir_chunks.iter().map(|&c| c as u64).sum();
        let mut chunks = Vec::with_capacity(bounded(total, u32::MAX as u64, "chunks")?);
        for _ in 0..total {
            let d = Digest(r.bytes::<32>().map_err(truncated)?);
            chunks.push((d, r.u64().map_err(truncated)?));
        }
        let Walk {
            dirs,
            indexes,
            not_listed,
            references,
        } = read_walk(&mut r, total, version)?;
        let mut unreferenced = Vec::new();
        loop {
            let number = r.u64().map_err(truncated)?;
            if number == END {
                break;
            }
            if number >= total {
                bail!("unreferenced chunk {number} of {total}");
            }
            let atime = r.u64().map_err(truncated)? as i64;
            let size = r.u64().map_err(truncated)?;
            unreferenced.push(Unreferenced {
                number,
                atime,
                size,
            });
        }
        let bucket = match version {
            3.. => read_bucket(&mut r)?,
            _ => SurveyBucket::default(),
        };
        let mut trailer = [0u64; 4];
        for t in &mut trailer[..3 + usize::from(version >= 3)] {
            *t = r.u64().map_err(truncated)?;
        }
        let [t_chunks, t_refs, t_unref, t_objects] = trailer;
        let objects = bucket.objects.len() as u64;
        let held = (total, references, unreferenced.len() as u64, objects);
        if (t_chunks, t_refs, t_unref, t_objects) != held {
            bail!(
                "its trailer counts {t_chunks} chunks, {t_refs} references, {t_unref} \
                 unreferenced chunks and {t_objects} objects; the file holds {}, {}, {} and {}",
                held.0,
                held.1,
                held.2,
                held.3
            );
        }
        if header.bucket.is_none() && bucket != SurveyBucket::default() {
            bail!("it holds a bucket's objects, but its header names no bucket");
        }
        // The end of the frame, where zstd checks the content checksum.
        // One byte more is enough to refuse: what follows is never read whole (a frame may
        // decompress to any size).
        let mut rest = Vec::new();
        (&mut r.r)
            .take(1)
            .read_to_end(&mut rest)
            .map_err(truncated)?;
        if !rest.is_empty() {
            bail!("data after the trailer");
        }
        Ok(SurveyFile {
            dir_chunks,
            dir_inos,
            chunks,
            dirs,
            indexes,
            not_listed,
            unreferenced,
            bucket: header.bucket.is_some().then_some(bucket),
            header,
        })
    }
}

/// Section 5, an S3 datastore's bucket.
fn read_bucket<R: Read>(r: &mut Reader<R>) -> Result<SurveyBucket> {
    let mut b = SurveyBucket::default();
    loop {
        match r.u8().map_err(truncated_err)? {
            0 => return Ok(b),
            1 => {
                let digest = Digest(r.bytes().map_err(truncated_err)?);
                let bad_suffix = match r.u8().map_err(truncated_err)? {
                    0 => None,
                    n if n as usize == BAD_SUFFIX => Some(r.bytes().map_err(truncated_err)?),
                    n => bail!("an object of {digest} with a suffix of {n} bytes (damaged?)"),
                };
                let size = r.u64().map_err(truncated_err)?;
                b.objects.push(SurveyObject {
                    digest,
                    bad_suffix,
                    size,
                });
            }
            2 => b.using.push(Digest(r.bytes().map_err(truncated_err)?)),
            3 => {
                let d = Digest(r.bytes().map_err(truncated_err)?);
                let n = r.u8().map_err(truncated_err)?;
                if n > 9 {
                    bail!("a bad copy {d}.{n}.bad (damaged?)");
                }
                b.bad.push((d, n, r.u64().map_err(truncated_err)? as i64));
            }
            t => bail!("a record of tag {t} in the bucket (damaged?)"),
        }
    }
}

/// What section 3 of a survey file holds.
struct Walk {
    dirs: Vec<DirRecord>,
    indexes: Vec<IndexRecord>,
    not_listed: Vec<Digest>,
    references: u64,
}

fn truncated_err(e: io::Error) -> anyhow::Error {
    anyhow::anyhow!("truncated or damaged: {e}")
}

/// Section 3, the walk's records, of a file of `total` chunks.
fn read_walk<R: Read>(r: &mut Reader<R>, total: u64, version: u32) -> Result<Walk> {
    let (mut dirs, mut indexes) = (Vec::new(), Vec::new());
    let path_of = |b: Vec<u8>| {
        PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(b))
    };
    let mut references = 0u64;
    let mut not_listed: Vec<Digest> = Vec::new();
    let mut not_listed_at: hashbrown::HashMap<Digest, u32> = hashbrown::HashMap::new();
    loop {
        match r.u8().map_err(truncated_err)? {
            0 => break,
            1 => {
                let path = path_of(r.var().map_err(truncated_err)?);
                let ino = r.u64().map_err(truncated_err)?;
                let n = r.u32().map_err(truncated_err)?;
                let mut entries = Vec::with_capacity(n.min(1 << 16) as usize);
                for _ in 0..n {
                    let kind = match r.u8().map_err(truncated_err)? {
                        0 => EntryKind::Dir,
                        1 => EntryKind::File,
                        2 => EntryKind::Other,
                        k => bail!("an entry of kind {k} in {}", path.display()),
                    };
                    let ino = r.u64().map_err(truncated_err)?;
                    let name = String::from_utf8(r.var().map_err(truncated_err)?)
                        .with_context(|| format!("a name in {}", path.display()))?;
                    entries.push((name, kind, ino));
                }
                dirs.push(DirRecord { path, ino, entries });
            }
            2 => {
                let path = path_of(r.var().map_err(truncated_err)?);
                let fixed = match r.u8().map_err(truncated_err)? {
                    b'f' => true,
                    b'd' => false,
                    k => bail!("index {} of kind {k}", path.display()),
                };
                // Version 1 did not keep them: PBS's fixed 4 MiB chunks are assumed.
                let (size, chunk_size) = if version >= 2 {
                    (
                        r.u64().map_err(truncated_err)?,
                        r.u64().map_err(truncated_err)?,
                    )
                } else {
                    (u64::MAX, V1_CHUNK_SIZE)
                };
                let n = r.u64().map_err(truncated_err)?;
                let mut refs = Vec::with_capacity(n.min(1 << 24) as usize);
                for _ in 0..n {
                    refs.push(match r.u32().map_err(truncated_err)? {
                        NOT_LISTED => {
                            let d = Digest(r.bytes().map_err(truncated_err)?);
                            let next = (total as usize + not_listed.len()) as u32;
                            *not_listed_at.entry(d).or_insert_with(|| {
                                not_listed.push(d);
                                next
                            })
                        }
                        c if (c as u64) < total => c,
                        c => bail!("index {} references chunk {c} of {total}", path.display()),
                    });
                }
                references += n;
                let size = if size == u64::MAX {
                    n * V1_CHUNK_SIZE
                } else {
                    size
                };
                indexes.push(IndexRecord {
                    path,
                    fixed,
                    size,
                    chunk_size,
                    refs,
                });
            }
            t => bail!("a record of tag {t} in the walk (damaged?)"),
        }
    }
    Ok(Walk {
        dirs,
        indexes,
        not_listed,
        references,
    })
}

#[cfg(test)]
mod tests;
