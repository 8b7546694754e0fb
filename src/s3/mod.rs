//! S3-backed datastores (PBS 4): where the bucket is and how to talk to it.
//!
//! PBS 4 keeps an S3 datastore's chunks as objects (`.chunks/XXXX/<digest>[.N.bad]`, the rest of
//! the datastore under `.cnt/`, an `.in-use` marker) and its local `.chunks` tree as a cache of
//! full chunks and zero-length markers (`pbs-format.md` §1.5, §3.7). [`Target`] is a bucket as
//! admins name one (an endpoint URL, path-style addressing, the `AWS_*` variables); [`Client`]
//! makes the requests a GC and the generator need, synchronously, one at a time, with
//! [`rusty_s3`] signing them and [`ureq`] sending them.

mod client;
mod http;
pub mod recorder;
mod target;

pub use crate::bucket::{
    Bucket, DeleteOutcome, ListPage, Listed, S3Error, CHUNK_PREFIX, CONTENT_PREFIX,
    DELETE_BATCH_KEYS, DELETE_DEFER_SECS, IN_USE_KEY, LIST_PAGE_KEYS,
};
pub use client::Client;
pub use target::{Addressing, Target, TargetArgs};
