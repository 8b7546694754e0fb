//! The chunkscope trace format, versions 1 and 2.
//!
//! A trace is a header followed by fixed-size 112-byte slots: in version 1 one after the
//! other, in version 2 (the default) in zstd-compressed blocks. All integers little endian.
//!
//! ```text
//! header
//! offset  size  field
//! 0       8     magic "CSTRACE\x01"
//! 8       4     version (1: slots follow; 2: compressed blocks of slots follow)
//! 12      4     slot size (112)
//! 16      4     n = length of the JSON metadata
//! 20      n     JSON metadata: start time, store, mount options, kernel cache settings
//! 20+n    ..    zero padding up to `header_len` (a multiple of 8); header_len = 20+n rounded
//!
//! version 1: after the header, the slots
//!
//! record slot (op != STRING_DEF)
//! 0       8     seq          request number, in the order requests arrived
//! 8       8     start_ns     request start, ns after the header's start time
//! 16      8     duration_ns  real time to answer
//! 24      8     ino          backing inode number (0: none)
//! 32      8     parent       backing inode of the parent directory (0: none)
//! 40      8     arg          op-specific: entries returned (readdir), atime set in ns since the
//!                            epoch (setattr), bytes (read/write), new parent (rename)
//! 48      8     injected_ns  delay injected by a fault rule or the disk model (`--disk`)
//! 56      8     modeled_ns   cost computed by the metadata model
//! 64      4     pid          requesting process
//! 68      2     op           [`Op`]
//! 70      1     name kind    0 none, 1 digest (32 raw bytes at 80), 2 string (id at 80)
//! 71      1     flags        [`flags`]
//! 72      4     errno        0 on success, else the positive errno returned
//! 76      4     named offset with a name (kind 1 or 2): the record's `offset` (an S3
//!                            request's bytes), exact below 2^31, else bit 31 set and the
//!                            rest in KiB (rounded down; up to 2 TiB); 0 otherwise
//! 80      32    name         a chunk digest, or a string id (u32) then zeros; with name kind 0,
//!                            the file offset (read, write: 8 bytes) then zeros
//!
//! string definition (op = STRING_DEF = 0xffff)
//! 0       8     string id
//! 8       8     length in bytes (at most 4096)
//! 16      96    zero
//! then ceil(length / 112) slots holding the bytes, zero padded
//! (a definition comes before the first record that uses its id; ids count from 0, and
//! start again from 0 when the writer's table is full (65,536 names): a definition of an id
//! replaces the earlier one for the records after it)
//!
//! version 2: after the header, blocks (each the slots of up to ~1 MiB, written when full
//! and at least every second, so a live trace can be read as it grows)
//! 0       4     magic "CSZB"
//! 4       4     c = compressed length
//! 8       4     u = slot bytes it holds (a multiple of 112)
//! 12      4     CRC-32 (IEEE) of the c compressed bytes
//! 16      c     one zstd frame of the u bytes: slots exactly as version 1 lays them out
//!               (a string definition's slots may continue in the next block)
//! ```
//!
//! A string is defined before the first record that uses it. Markers are records of op
//! `Marker` whose name is a string.
//!
//! Every entry a listing returned (but `.` and `..`) gets a `Dirent` record: `seq` is the
//! listing's own seq (they are not requests), `ino` the entry's inode (`d_ino`), `parent` the
//! directory, `arg` the entry's position in that reply, the name the entry's name. They are
//! written before the listing's record, so a reader has them all when it meets the listing.
//! A rename also gets a `NewName` record, written before its own: the same `seq`, `ino` the
//! inode, `parent` the new directory, the name the new name (the rename's record keeps the
//! old name and parent, `arg` the new directory). A link's request names only the inode and
//! the new name: its record holds the new name and directory, and an `OldName` record written
//! before it (same `seq`, `ino` the inode) holds a name the inode had when it was linked,
//! `parent` that name's directory (one of its names, for an inode with several; none when the
//! overlay could not find one in the store).
//! A request to an S3 bucket that `chunkscope s3-record` relayed is a record of op 200-205
//! (`s3-list` ListObjectsV2, `s3-delete` DeleteObjects or DeleteObject, `s3-put`, `s3-get`,
//! `s3-head`, `s3-other`): `start_ns` and `duration_ns` from the request's arrival to the end
//! of the server's reply, `ino` 0, `parent` the HTTP status, `arg` the keys a listing page
//! returned, the keys a delete named, or the body bytes a put sent or a get received;
//! `offset` the bytes of the objects a listing page returned, of the keys a delete removed
//! (their sizes as the listings the recorder relayed before gave them: 0 for a key it did not
//! see listed), or of a put's or a get's body; the name the key (a listing's prefix, a batch delete's first key); `pid` the client's (a client
//! on the recorder's host; 0, or the recorder's in a mount's trace, when it cannot tell);
//! `errno` 0 for a status below
//! 400, else ENOENT (404), EACCES (403), EAGAIN (503, SlowDown), EIO (other 5xx), EINVAL
//! (other 4xx), so that errors count as they do for filesystem requests.
//! `modeled_ns` of a request is what the cost model charged for it, including the prefetch of
//! a listing's entries; `injected_ns` the delay a fault rule added. A reader stops at a torn last slot (version 1) or a torn or damaged last block
//! (version 2: short, or its CRC wrong) with a warning; a damaged block that more blocks
//! follow is an error.

use serde::{Deserialize, Serialize};

use crate::datastore::Digest;

/// `CSTRACE` and the format generation byte (kept with every other file's magic in
/// [`crate::sniff`]).
pub const TRACE_MAGIC: [u8; 8] = crate::sniff::TRACE_MAGIC;
/// The format's version the writer writes by default: 2, slots in compressed blocks.
pub const TRACE_VERSION: u32 = 2;
/// Version 1: the slots one after the other, uncompressed (still read, and written on
/// request).
pub const TRACE_VERSION_PLAIN: u32 = 1;
/// The magic of a version-2 block.
pub const BLOCK_MAGIC: [u8; 4] = *b"CSZB";
/// Bytes of a block's header.
pub const BLOCK_HEADER: usize = 16;
/// The most slot bytes a block holds (a block is written when this much is buffered, or
/// at each flush, whichever comes first).
pub const BLOCK_BYTES: usize = SLOT_SIZE * 9362; // just under 1 MiB
/// Bytes per record slot.
pub const SLOT_SIZE: usize = 112;
/// The op number of a slot that defines a string of the string table.
pub const STRING_DEF: u16 = 0xffff;
/// Longest string the format stores (names are at most 255 bytes; markers are cut here).
pub const MAX_STRING: usize = 4096;

/// Bits of the flags byte.
pub mod flags {
    /// setattr changed the atime.
    pub const SET_ATIME: u8 = 1;
    /// setattr changed the mtime.
    pub const SET_MTIME: u8 = 2;
    /// setattr changed something else (mode, owner, size).
    pub const SET_OTHER: u8 = 4;
    /// The effect was kept in memory (shadow mode), not applied to the backing store.
    pub const SHADOW: u8 = 8;
    /// The errno was injected by a fault rule.
    pub const INJECTED_ERROR: u8 = 16;
}

macro_rules! ops {
    ($($name:ident = $n:expr, $s:expr;)*) => {
        /// The operations a trace records (FUSE requests, plus markers).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        #[allow(missing_docs)] // each is the FUSE request of its name (see `name`)
        pub enum Op { $($name = $n,)* }

        impl Op {
            /// Every operation, in number order.
            pub const ALL: &'static [Op] = &[$(Op::$name,)*];

            /// The operation numbered `v` (`None` for a number this build does not know).
            pub fn from_u16(v: u16) -> Option<Op> {
                match v { $($n => Some(Op::$name),)* _ => None }
            }

            /// Lowercase name, as used in exports and fault rules.
            pub fn name(self) -> &'static str {
                match self { $(Op::$name => $s,)* }
            }
        }
    };
}

ops! {
    Lookup = 1, "lookup";
    Forget = 2, "forget";
    Getattr = 3, "getattr";
    Setattr = 4, "setattr";
    Readlink = 5, "readlink";
    Mknod = 6, "mknod";
    Mkdir = 7, "mkdir";
    Unlink = 8, "unlink";
    Rmdir = 9, "rmdir";
    Symlink = 10, "symlink";
    Rename = 11, "rename";
    Link = 12, "link";
    Open = 13, "open";
    Read = 14, "read";
    Write = 15, "write";
    Flush = 16, "flush";
    Release = 17, "release";
    Fsync = 18, "fsync";
    Opendir = 19, "opendir";
    Readdir = 20, "readdir";
    Readdirplus = 21, "readdirplus";
    Releasedir = 22, "releasedir";
    Fsyncdir = 23, "fsyncdir";
    Statfs = 24, "statfs";
    Access = 25, "access";
    Create = 26, "create";
    Getlk = 27, "getlk";
    Setlk = 28, "setlk";
    Getxattr = 29, "getxattr";
    Listxattr = 30, "listxattr";
    Setxattr = 31, "setxattr";
    Removexattr = 32, "removexattr";
    Fallocate = 33, "fallocate";
    Lseek = 34, "lseek";
    Marker = 100, "marker";
    Dirent = 101, "dirent";
    NewName = 102, "newname";
    OldName = 103, "oldname";
    S3List = 200, "s3-list";
    S3Delete = 201, "s3-delete";
    S3Put = 202, "s3-put";
    S3Get = 203, "s3-get";
    S3Head = 204, "s3-head";
    S3Other = 205, "s3-other";
}

impl Op {
    /// Whether this is a request to an S3 bucket (recorded by `chunkscope s3-record`), not
    /// a filesystem request.
    pub fn is_s3(self) -> bool {
        self as u16 >= 200
    }
}

/// The name a record carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Name {
    /// No name.
    None,
    /// A chunk's digest (a name of 64 hex digits, stored as 32 bytes).
    Digest(Digest),
    /// A name that is not a digest (or a marker's text), byte for byte.
    Text(Text),
}

/// A name as a trace keeps it: its bytes exactly, whether or not they are UTF-8 (a file name
/// need not be; two names differing only in bytes that are not UTF-8 stay two names). Shown
/// to people and written to exports through [`Text::shown`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Text(std::sync::Arc<[u8]>);

impl Text {
    /// The name's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The name, if it is UTF-8 (markers always are).
    #[inline]
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The name for a message or an export: as it is where it is printable UTF-8; a byte that
    /// is not UTF-8 as `\xNN` and a control character escaped (see [`crate::fsutil::shown`]).
    pub fn shown(&self) -> std::borrow::Cow<'_, str> {
        match self.as_str() {
            Some(s) if !s.chars().any(char::is_control) => s.into(),
            _ => crate::fsutil::shown_bytes(&self.0).into(),
        }
    }
}

impl std::fmt::Display for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.as_str() {
            Some(s) => write!(f, "{s:?}"),
            None => write!(f, "b\"{}\"", self.0.escape_ascii()),
        }
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text(s.as_bytes().into())
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        Text(s.into_bytes().into())
    }
}

impl From<&[u8]> for Text {
    fn from(b: &[u8]) -> Text {
        Text(b.into())
    }
}

impl From<Vec<u8>> for Text {
    fn from(b: Vec<u8>) -> Text {
        Text(b.into())
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == other.as_bytes()
    }
}

/// A record as the reader returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Request number, the order the model saw (a listing's entries and a second name share their request's).
    pub seq: u64,
    /// When the request arrived, ns since the trace started (a simulation's: the model's clock).
    pub start_ns: u64,
    /// How long it took, ns (the backing call on a mount; the modelled cost in a simulation).
    pub duration_ns: u64,
    /// The backing inode it is about (0: none, e.g. a failed lookup).
    pub ino: u64,
    /// The directory of its name (0: no name).
    pub parent: u64,
    /// Its argument: offset, size, entries listed, new directory, time set (see the module documentation).
    pub arg: u64,
    /// A read's or write's file offset; an S3 request's bytes (see the module
    /// documentation); 0 for every other record, and in traces written before these were kept.
    pub offset: u64,
    /// Delay a fault rule or the disk model added before the reply, ns.
    pub injected_ns: u64,
    /// What the model charged, ns (0 without a model).
    pub modeled_ns: u64,
    /// The caller's process id.
    pub pid: u32,
    /// Raw op number (see [`Op::from_u16`]): unknown numbers from newer writers are kept.
    pub op: u16,
    /// Bits of [`flags`].
    pub flags: u8,
    /// The errno answered (0: success).
    pub errno: i32,
    /// Its name.
    pub name: Name,
}

impl Record {
    /// The record as a writer takes it (to copy or rewrite a trace), or `None` for an
    /// operation this build does not know.
    pub fn to_raw(&self) -> Option<RawRecord> {
        let mut raw = RawRecord::new(self.op()?);
        raw.seq = self.seq;
        raw.start_ns = self.start_ns;
        raw.duration_ns = self.duration_ns;
        raw.ino = self.ino;
        raw.parent = self.parent;
        raw.arg = self.arg;
        raw.offset = self.offset;
        raw.injected_ns = self.injected_ns;
        raw.modeled_ns = self.modeled_ns;
        raw.pid = self.pid;
        raw.flags = self.flags;
        raw.errno = self.errno;
        match &self.name {
            Name::None => {}
            Name::Digest(d) => raw.set_name(d.to_hex().as_bytes()),
            Name::Text(t) => raw.set_name(t.as_bytes()),
        }
        Some(raw)
    }

    /// The operation (`None` for a number this build does not know).
    pub fn op(&self) -> Option<Op> {
        Op::from_u16(self.op)
    }

    /// The operation's name (`unknown` for a number this build does not know).
    pub fn op_name(&self) -> &'static str {
        self.op().map_or("unknown", Op::name)
    }
}

/// Metadata in the header: what produced the trace and which kernel cache settings were in force.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceMeta {
    /// Writer's version (`CARGO_PKG_VERSION`).
    pub chunkscope: String,
    /// Start time, ns since the epoch; `start_ns` of records is relative to it.
    pub start_epoch_ns: u64,
    /// The backing store traced.
    pub store: String,
    /// Mount options and kernel cache settings (TTLs, readdirplus, threads, shadow, ...).
    /// What a reader acts on has typed accessors below; the rest is for people.
    #[serde(default)]
    pub options: serde_json::Map<String, serde_json::Value>,
}

impl TraceMeta {
    /// Key of the cost model's parameters (the model's own JSON form).
    const MODEL: &'static str = "model";
    /// Key of the layout order the model numbered inodes by (`native` or `creation`).
    const LAYOUT_ORDER: &'static str = "layout_order";
    /// Keys of the kernel's cache settings ([`KernelCache`]).
    const ENTRY_TTL: &'static str = "entry_ttl_s";
    const ATTR_TTL: &'static str = "attr_ttl_s";
    const DIR_TTL: &'static str = "dir_ttl_s";
    const READDIRPLUS: &'static str = "readdirplus";

    /// The cost model the requests were charged with, in its JSON form (None: no model).
    pub fn model(&self) -> Option<&serde_json::Value> {
        self.options.get(Self::MODEL)
    }

    /// Records the cost model (`params`: the model's JSON form) and the layout order it used
    /// (`creation`: inodes ranked by creation, as `--layout-order creation`).
    pub fn set_model(&mut self, params: serde_json::Value, creation_order: bool) {
        self.options.insert(Self::MODEL.into(), params);
        let order = if creation_order { "creation" } else { "native" };
        self.options.insert(Self::LAYOUT_ORDER.into(), order.into());
    }

    /// Records the kernel's cache settings of the mount.
    pub fn set_kernel_cache(&mut self, c: &KernelCache) {
        self.options
            .insert(Self::ENTRY_TTL.into(), c.entry_ttl_s.into());
        self.options
            .insert(Self::ATTR_TTL.into(), c.attr_ttl_s.into());
        self.options
            .insert(Self::DIR_TTL.into(), c.dir_ttl_s.into());
        self.options
            .insert(Self::READDIRPLUS.into(), c.readdirplus.into());
    }

    /// The kernel's cache settings, for a trace of a mount or of a simulated one (`None`
    /// for a trace without them).
    pub fn kernel_cache(&self) -> Option<KernelCache> {
        let o = &self.options;
        Some(KernelCache {
            entry_ttl_s: o.get(Self::ENTRY_TTL)?.as_f64()?,
            attr_ttl_s: o.get(Self::ATTR_TTL)?.as_f64()?,
            // Traces before the option: every directory lookup was traced.
            dir_ttl_s: o.get(Self::DIR_TTL).and_then(|v| v.as_f64()).unwrap_or(0.0),
            readdirplus: o.get(Self::READDIRPLUS)?.as_bool()?,
        })
    }

    /// Whether the model ranked inodes by creation order (its ranking is saved beside the
    /// trace).
    pub fn creation_order(&self) -> bool {
        self.options
            .get(Self::LAYOUT_ORDER)
            .is_some_and(|v| v == "creation")
    }
}

/// The kernel's caching on the mount a trace was recorded through: what it answered itself
/// never reached the overlay, so it is not in the trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelCache {
    /// How long the kernel kept a name → inode mapping, seconds (0: every lookup is traced).
    pub entry_ttl_s: f64,
    /// How long it kept attributes, seconds (0: every stat is traced).
    pub attr_ttl_s: f64,
    /// How long it kept directories' entries and attributes when longer than the TTLs
    /// above, seconds: a directory's lookups and stats after the first within it are not
    /// traced (0: all are). Chunk requests are not affected.
    #[serde(default)]
    pub dir_ttl_s: f64,
    /// Whether listings were READDIRPLUS (they then carry attributes).
    pub readdirplus: bool,
}

impl KernelCache {
    /// The directory TTL a mount of a datastore defaults to, seconds (`mount --dir-ttl`):
    /// long enough that a GC's phase 1, which visits the 65,536 chunk directories in digest
    /// order, finds them cached.
    pub const DATASTORE_DIR_TTL_S: f64 = 600.0;

    /// Whether the kernel answered some lookups or stats of files itself (the trace has
    /// fewer than the calls made; directories cached for `dir_ttl_s` aside).
    pub fn hides_requests(&self) -> bool {
        self.entry_ttl_s > 0.0 || self.attr_ttl_s > 0.0 || self.readdirplus
    }
}

/// Encodes the header for `meta`.
pub fn encode_header(meta: &TraceMeta, version: u32) -> Vec<u8> {
    let json = serde_json::to_vec(meta).expect("metadata serialises");
    let mut out = Vec::with_capacity(20 + json.len() + 8);
    out.extend_from_slice(&TRACE_MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(SLOT_SIZE as u32).to_le_bytes());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out.resize(out.len().div_ceil(8) * 8, 0);
    out
}

/// Encodes a record into a slot. `name_slot` is the digest or string id already resolved.
pub fn encode_record(r: &RawRecord, name_kind: u8, name: &[u8; 32], out: &mut [u8; SLOT_SIZE]) {
    out[0..8].copy_from_slice(&r.seq.to_le_bytes());
    out[8..16].copy_from_slice(&r.start_ns.to_le_bytes());
    out[16..24].copy_from_slice(&r.duration_ns.to_le_bytes());
    out[24..32].copy_from_slice(&r.ino.to_le_bytes());
    out[32..40].copy_from_slice(&r.parent.to_le_bytes());
    out[40..48].copy_from_slice(&r.arg.to_le_bytes());
    out[48..56].copy_from_slice(&r.injected_ns.to_le_bytes());
    out[56..64].copy_from_slice(&r.modeled_ns.to_le_bytes());
    out[64..68].copy_from_slice(&r.pid.to_le_bytes());
    out[68..70].copy_from_slice(&(r.op as u16).to_le_bytes());
    out[70] = name_kind;
    out[71] = r.flags;
    out[72..76].copy_from_slice(&r.errno.to_le_bytes());
    let named_offset = if name_kind == 0 {
        0
    } else {
        encode_named_offset(r.offset)
    };
    out[76..80].copy_from_slice(&named_offset.to_le_bytes());
    out[80..112].copy_from_slice(name);
    if name_kind == 0 {
        out[80..88].copy_from_slice(&r.offset.to_le_bytes());
    }
}

/// A named record's `offset` in its 4 bytes: exact below 2^31, else in KiB with bit 31 set
/// (up to 2 TiB; more is kept as 2 TiB).
pub fn encode_named_offset(v: u64) -> u32 {
    const KIB: u32 = 1 << 31;
    match u32::try_from(v) {
        Ok(v) if v < KIB => v,
        _ => KIB | u32::try_from(v >> 10).unwrap_or(u32::MAX).min(KIB - 1),
    }
}

/// The `offset` a named record's 4 bytes hold ([`encode_named_offset`]).
#[inline]
pub fn decode_named_offset(v: u32) -> u64 {
    const KIB: u32 = 1 << 31;
    if v & KIB == 0 {
        v as u64
    } else {
        ((v & !KIB) as u64) << 10
    }
}

/// The longest name carried inline from the request path (NAME_MAX).
pub const INLINE_NAME: usize = 255;

/// A record as the request path hands it to the writer: plain integers and the name bytes
/// copied into a fixed buffer, so building one never allocates.
#[derive(Clone, Copy)]
pub struct RawRecord {
    /// As in [`Record`].
    pub seq: u64,
    /// As in [`Record`].
    pub start_ns: u64,
    /// As in [`Record`].
    pub duration_ns: u64,
    /// As in [`Record`].
    pub ino: u64,
    /// As in [`Record`].
    pub parent: u64,
    /// As in [`Record`].
    pub arg: u64,
    /// As in [`Record`] (written where a name would be: a read or write has none).
    pub offset: u64,
    /// As in [`Record`].
    pub injected_ns: u64,
    /// As in [`Record`].
    pub modeled_ns: u64,
    /// As in [`Record`].
    pub pid: u32,
    /// As in [`Record`], the operation known.
    pub op: Op,
    /// As in [`Record`].
    pub flags: u8,
    /// As in [`Record`].
    pub errno: i32,
    /// Bytes of `name` in use.
    pub name_len: u8,
    /// The name, cut at [`INLINE_NAME`] bytes.
    pub name: [u8; INLINE_NAME],
}

impl RawRecord {
    /// A record of `op` with every other field zero.
    pub fn new(op: Op) -> RawRecord {
        RawRecord {
            seq: 0,
            start_ns: 0,
            duration_ns: 0,
            ino: 0,
            parent: 0,
            arg: 0,
            offset: 0,
            injected_ns: 0,
            modeled_ns: 0,
            pid: 0,
            op,
            flags: 0,
            errno: 0,
            name_len: 0,
            name: [0; INLINE_NAME],
        }
    }

    /// Copies `name` (cut at 255 bytes).
    pub fn set_name(&mut self, name: &[u8]) {
        let n = name.len().min(INLINE_NAME);
        self.name[..n].copy_from_slice(&name[..n]);
        self.name_len = n as u8;
    }

    /// The name's bytes.
    pub fn name(&self) -> &[u8] {
        &self.name[..self.name_len as usize]
    }
}
