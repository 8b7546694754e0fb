//! S3-backed datastores (PBS 4): where the bucket is and how to talk to it.
//!
//! PBS 4 keeps an S3 datastore's chunks as objects (`.chunks/XXXX/<digest>[.N.bad]`, the rest of
//! the datastore under `.cnt/`, an `.in-use` marker) and its local `.chunks` tree as a cache of
//! full chunks and zero-length markers (`pbs-format.md` §1.5, §3.7). [`Target`] is a bucket as
//! admins name one (an endpoint URL, path-style addressing, the `AWS_*` variables); [`Client`]
//! makes the requests a GC and the generator need, synchronously, one at a time, with
//! [`rusty_s3`] signing them and [`ureq`] sending them.

mod client;
mod target;

pub use client::{Client, DeleteOutcome, ListPage, Listed, S3Error};
pub use target::{Addressing, Target, TargetArgs};

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

/// The object key of a datastore-relative path that is not a chunk (a chunk's key is its
/// relative path, `.chunks/XXXX/<hex>[.N.bad]`).
pub fn content_key(rel: &str) -> String {
    format!("{CONTENT_PREFIX}{rel}")
}
