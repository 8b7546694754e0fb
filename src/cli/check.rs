//! `chunkscope check`

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::Outcome;
use crate::check::{check_store, CheckOptions};
use crate::units::thousands;

/// Verify a datastore: every index valid, every referenced chunk present.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope check /dev/shm/tiny\n  \
    chunkscope check --deep --json=report.json /dev/shm/tiny\n  \
    chunkscope check --s3-bucket pbs-tiny /dev/shm/s3tiny\n\n\
    Exit status: 0 all referenced data present and valid, 1 problems found, 2 error.\n\
    Chunk files are read with O_NOATIME: checking never changes what a GC will do.")]
pub struct CheckArgs {
    /// The datastore directory (the one holding .chunks); for an S3 datastore, its local cache.
    store: PathBuf,
    /// An S3 datastore (PBS 4): a referenced chunk is there when its object is in this bucket;
    /// the local files are its cache (zero-length ones are markers, not damage).
    #[command(flatten)]
    s3: super::s3_args::S3Args,
    /// Also read every chunk file and verify its CRC and digest.
    #[arg(long)]
    deep: bool,
    /// The full report as JSON: `--json` on standard output (instead of the text),
    /// `--json=FILE` into FILE (beside the text).
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    json: Option<PathBuf>,
    /// GC cutoff in minutes for classifying unreferenced chunks (PBS gc-atime-cutoff).
    #[arg(long, default_value_t = 1445, value_parser = clap::value_parser!(u64).range(1..=2880))]
    cutoff: u64,
}

pub fn run(args: CheckArgs) -> Result<Outcome> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let opts = CheckOptions {
        deep: args.deep,
        cutoff_minutes: args.cutoff,
        now: crate::fsutil::now_epoch(),
        threads,
        markers: false,
    };
    let r = match args.s3.client()? {
        Some(bucket) => crate::check::check_s3_store(&args.store, &opts, &bucket)?,
        None => check_store(&args.store, &opts)?,
    };
    if let Some(dest) = &args.json {
        super::write_json(dest, &r)?;
    }
    if args.json.as_deref() != Some(std::path::Path::new("-")) {
        println!("store            {}", r.store);
        let n = |v: u64| thousands(v);
        println!(
            "index files      {} ({} fidx, {} didx, {} outside the snapshot scheme)",
            n(r.index_files as u64),
            n(r.fixed_indexes as u64),
            n(r.dynamic_indexes as u64),
            n(r.unexpected_indexes as u64)
        );
        println!(
            "references       {} to {} distinct chunks",
            n(r.references),
            n(r.referenced_chunks as u64)
        );
        println!(
            "chunk files      {} ({})",
            n(r.chunks.chunk_files as u64),
            crate::units::human_bytes(r.chunks.chunk_bytes)
        );
        println!(
            "unreferenced     {} chunks: {} older than the cutoff, {} pending",
            n(r.chunks.garbage.chunks as u64),
            n(r.chunks.garbage.removable as u64),
            n(r.chunks.garbage.pending as u64)
        );
        println!(
            "other files      {} .bad, {} .using, {} ignored (temp files)",
            n(r.chunks.bad_files as u64),
            n(r.chunks.using_markers as u64),
            n(r.chunks.ignored_files as u64)
        );
        if let Some(b) = &r.s3 {
            print_bucket(b);
        }
        if r.snapshots_without_manifest > 0 {
            println!(
                "warning: {} snapshots have indexes but no manifest",
                r.snapshots_without_manifest
            );
        }
        if args.deep {
            println!(
                "deep             {} chunk files verified",
                r.chunks.deep_verified
            );
        }
        for p in &r.corrupt_indexes {
            println!("corrupt index    {}: {}", p.path, p.problem);
        }
        for p in &r.manifest_problems {
            println!("manifest         {}: {}", p.path, p.problem);
        }
        for p in &r.odd_chunk_dirs {
            println!(
                "not the store's  {} is {}: not scanned, a GC refuses to run",
                p.path, p.problem
            );
        }
        for d in &r.chunks.missing_chunk_dirs {
            println!("missing dir      {d}");
        }
        for p in &r.missing_chunks {
            println!("missing chunk    {} {}", p.path, p.problem);
        }
        for p in &r.chunks.irregular_chunks {
            println!("irregular chunk  {}: {}", p.path, p.problem);
        }
        for p in &r.chunks.corrupt_chunks {
            println!("corrupt chunk    {}: {}", p.path, p.problem);
        }
        println!(
            "result           {}",
            if r.ok() { "OK" } else { "PROBLEMS FOUND" }
        );
    }
    Ok(if r.ok() {
        Outcome::Ok
    } else {
        Outcome::ProblemsFound
    })
}

/// The bucket's lines of an S3 datastore's check.
fn print_bucket(b: &crate::check::BucketCheck) {
    let n = |v: u64| thousands(v);
    println!("bucket           {}", b.bucket);
    println!(
        "objects          {} chunk objects ({}), {} bad copies",
        n(b.chunk_objects),
        crate::units::human_bytes(b.chunk_object_bytes),
        n(b.bad_objects)
    );
    println!(
        "local cache      {} whole, {} markers; {} referenced and {} unreferenced objects \
         without a local file, {} unreferenced local files without an object",
        n(b.local_whole),
        n(b.local_markers),
        n(b.referenced_without_local_file),
        n(b.garbage_without_local_file),
        n(b.garbage_without_object)
    );
    if b.objects_verified > 0 {
        println!(
            "verified         {} referenced chunks' objects read (CRC and digest)",
            n(b.objects_verified)
        );
    }
    if b.foreign_objects > 0 {
        println!(
            "problem: {} objects under .chunks/ are not at a chunk's key \
             (.chunks/XXXX/<digest in lowercase hex>): no chunk's object, kept by a GC",
            n(b.foreign_objects)
        );
        for k in &b.foreign_keys {
            println!("  {k}");
        }
    }
}
