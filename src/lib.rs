#![warn(missing_docs)]
//! chunkscope: make the metadata traffic of a PBS garbage collector visible.
//!
//! Code map (see ARCHITECTURE.md for the layers and their invariants):
//! * [`bucket`]: an S3 datastore's bucket as a GC sees it: the object layout, listing pages,
//!   delete batches.
//! * [`datastore`]: the PBS on-disk format: digests, chunk paths, blobs, indexes, walk order.
//! * [`gen`]: a backup-history model and the writer that turns it into a real datastore.
//! * [`check`]: verifies a datastore (indexes, referenced chunks, optionally every chunk).
//! * [`faults`]: fault rules (errors, delays, stalls) and their seeded decisions.
//! * [`disk`]: a spinning disk under a mount's files (seek, rotation, transfer, queue, cache).
//! * [`instrument`]: a request's fault decision, model charge and trace records, for the overlay
//!   and the simulator alike.
//! * [`live`]: a mount's live counters (requests, errors, latency histograms per operation).
//! * [`model`]: the metadata cost model (layout, block cache, prefetch, write-back), pure.
//! * [`replay`]: a recorded trace through any cost model, offline.
//! * [`redact`]: signatures, credentials and a URL's password kept out of what is shown.
//! * `s3`: S3-backed datastores (PBS 4): the bucket's address and client (feature `s3`).
//! * [`sim`]: the GC strategies on an in-memory store built from the generator's history.
//! * [`survey`]: a real store's layout and references read without a mount, for the simulator.
//! * [`syscalls`]: a real GC's system calls (strace, bpftrace) imported as a trace.
//! * [`trace`]: the trace format, its writer thread, streaming reader and exports.
//! * [`analysis`]: access order, locality, miss-ratio curves and write-back of a trace; SVG plots.
//! * [`demo`]: the whole experiment in one command: generate, mount, GC per strategy, report.
//! * [`table`]: aligned text, Markdown and HTML tables, CSV quoting.
//! * [`cli`]: argument parsing and wiring, nothing else.
//! * [`fsutil`], [`time`]: `O_NOATIME` reads, file times, termination signals; RFC3339 for
//!   snapshot names.

pub mod analysis;
pub mod bucket;
pub mod calibrate;
pub mod check;
#[cfg(feature = "cli")]
pub mod cli;
pub mod columnar;
pub mod datastore;
#[cfg(feature = "cli")]
pub mod demo;
pub mod disk;
pub mod faults;
pub mod fsutil;
pub mod gc;
pub mod gen;
pub mod instrument;
pub mod live;
pub mod lru;
pub mod model;
#[cfg(feature = "fuse")]
pub mod overlay;
pub mod progress;
pub mod redact;
pub mod replay;
pub mod rng;
#[cfg(feature = "s3")]
pub mod s3;
pub mod sim;
pub mod sniff;
pub mod store;
pub mod survey;
pub mod syscalls;
pub mod table;
#[cfg(feature = "cli")]
pub mod testbed;
pub mod time;
pub mod trace;
pub mod units;
