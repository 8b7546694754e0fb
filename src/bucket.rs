//! A bucket as a GC sees it: the object layout of PBS 4's S3 datastores (`pbs-format.md`
//! §3.7), the two requests the GC makes of a bucket and what they answer. The S3 client
//! ([`crate::s3`], feature `s3`) is one; a test or a simulation may be another.

use std::fmt;

use crate::datastore::Digest;

/// Key prefix of chunk objects (`.chunks/XXXX/<digest>`).
pub const CHUNK_PREFIX: &str = ".chunks/";
/// Key prefix of every other file of the datastore (`.cnt/<relative path>`).
pub const CONTENT_PREFIX: &str = ".cnt/";
/// The object that says a datastore uses the bucket (`{"hostname": ...}`).
pub const IN_USE_KEY: &str = ".in-use";
/// Keys a `ListObjectsV2` page holds at most (the S3 default; PBS asks for it).
pub const LIST_PAGE_KEYS: usize = 1000;
/// Keys a `DeleteObjects` batch holds before PBS sends it (`S3_DELETE_BATCH_LIMIT`).
pub const DELETE_BATCH_KEYS: usize = 100;
/// Seconds the oldest queued key waits at most before PBS sends the batch
/// (`S3_DELETE_DEFER_LIMIT_SECONDS`).
pub const DELETE_DEFER_SECS: u64 = 300;

/// What a chunk object's key names (`chunk_path_from_object_key`): a chunk (64 hex
/// characters) or a bad copy (70 characters starting with 64 hex ones; the suffix is not
/// parsed); anything else is no chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectName {
    /// `<hex>`.
    Chunk(Digest),
    /// `<hex>` and six more characters (`.N.bad`).
    Bad(Digest),
}

impl ObjectName {
    /// The object's basename classified, `None` for no chunk.
    pub fn classify(basename: &[u8]) -> Option<ObjectName> {
        let digest = Digest::from_hex_bytes(basename.get(..64)?)?;
        match basename.len() {
            64 => Some(ObjectName::Chunk(digest)),
            70 => Some(ObjectName::Bad(digest)),
            _ => None,
        }
    }

    /// Its chunk's digest.
    pub fn digest(self) -> Digest {
        match self {
            ObjectName::Chunk(d) | ObjectName::Bad(d) => d,
        }
    }
}

/// The object key of a datastore-relative path that is not a chunk (a chunk's key is its
/// relative path, `.chunks/XXXX/<hex>[.N.bad]`).
pub fn content_key(rel: &str) -> String {
    format!("{CONTENT_PREFIX}{rel}")
}

/// A request the server answered with an error, or that did not get an answer.
#[derive(Debug)]
pub struct S3Error {
    /// The operation (`ListObjectsV2`, `DeleteObjects`, ...).
    pub op: &'static str,
    /// The key or prefix it was about.
    pub what: String,
    /// The HTTP status, 0 when there was no response.
    pub status: u16,
    /// S3's error code (`SlowDown`, `NoSuchBucket`, ...) or the transport's error.
    pub code: String,
    /// S3's message, if it sent one.
    pub message: String,
}

impl fmt::Display for S3Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: ", self.op, self.what)?;
        if self.status == 0 {
            write!(f, "no response ({})", self.code)
        } else if self.message.is_empty() {
            write!(f, "HTTP {} {}", self.status, self.code)
        } else {
            write!(f, "HTTP {} {}: {}", self.status, self.code, self.message)
        }
    }
}

impl std::error::Error for S3Error {}

/// One object of a listing page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
}

/// One `ListObjectsV2` page.
#[derive(Clone, Debug, Default)]
pub struct ListPage {
    /// The objects, in key order.
    pub objects: Vec<Listed>,
    /// The continuation token of the next page, `None` on the last.
    pub next: Option<String>,
}

/// What a `DeleteObjects` request did, key by key.
#[derive(Clone, Debug, Default)]
pub struct DeleteOutcome {
    /// Keys the server says it deleted.
    pub deleted: Vec<String>,
    /// Keys it did not delete, with S3's error code and message.
    pub errors: Vec<(String, String, String)>,
}

/// What a GC asks of a bucket.
pub trait Bucket {
    /// The bucket, for messages (`s3://BUCKET at ENDPOINT`).
    fn describe(&self) -> String;
    /// Whether the bucket is there and ours (PBS's `HEAD bucket` before a GC).
    fn head(&self) -> Result<(), S3Error>;
    /// One `ListObjectsV2` page: keys under `prefix` after `token`, at most `max_keys`.
    fn list_page(
        &self,
        prefix: &str,
        token: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, S3Error>;
    /// One `DeleteObjects` request for `keys`.
    fn delete(&self, keys: &[String]) -> Result<DeleteOutcome, S3Error>;
    /// `PutObject` of `body` at `key` (the atime check's zero chunk).
    fn put(&self, key: &str, body: &[u8]) -> Result<(), S3Error>;
}
