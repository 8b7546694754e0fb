//! The Proxmox Backup Server datastore format: names, files and walk order.
//!
//! Everything here follows `docs/pbs-format.md` ("the format document") to the byte. This layer knows nothing
//! of FUSE, traces, cost models or GC strategies; it reads and writes files and says precisely
//! what is wrong with bad ones ([`FormatError`]).
//!
//! | module | what |
//! |---|---|
//! | [`digest`] | [`Digest`], SHA-256 of chunk data, lowercase hex |
//! | [`paths`] | `.chunks/XXXX/<hex>`, the phase-2 name classes, well-known names |
//! | [`blob`] | DataBlob: encode (plain, zstd), decode, CRC, chunk verification |
//! | [`index`] | `.fidx` and `.didx`: validation, reading, writing |
//! | [`manifest`] | `index.json.blob` |
//! | [`snapshots`] | namespaces, groups, snapshots; the phase-1 index order |
//! | [`create`] | an empty datastore with its 65536 chunk directories |
//! | [`access`] | whether this process may use a directory as a datastore, and why not |

pub mod access;
pub mod blob;
pub mod create;
pub mod digest;
pub mod error;
pub mod index;
pub mod manifest;
pub mod paths;
pub mod snapshots;

pub use digest::Digest;

/// PBS's default `gc-atime-cutoff` (a datastore tuning option), minutes: 24 h 5 min. A chunk
/// whose atime is older than this at the start of a GC is removed unless phase 1 touched it.
pub const DEFAULT_ATIME_CUTOFF_MINUTES: u64 = 1445;
pub use error::{FormatError, FormatErrorKind};
pub use index::{IndexFile, IndexKind};
