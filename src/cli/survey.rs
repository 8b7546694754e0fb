//! `chunkscope survey`

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};

use super::Outcome;
use crate::survey::{survey, LayoutChoice, SurveyOptions, SurveyReport};
use crate::units::{human_bytes, thousands};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LayoutArg {
    /// From the store's filesystem (ZFS, ext4; others are assumed ZFS-like, and say so).
    Auto,
    /// ZFS dnodes in 16 KiB metadnode blocks (--dnode-size).
    Zfs,
    /// ext4 inode-table blocks (from the superblock, or --inode-size, --inodes-per-group).
    Ext4,
}

/// Survey a real datastore, read-only: its chunks' metadata layout (blocks per directory,
/// inode gaps), what its indexes reference, and the garbage a GC now would remove; `--out`
/// saves what `simulate --survey` needs to predict each GC strategy on it.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope survey /dev/shm/tiny\n  \
    chunkscope survey --json --out tiny.survey /dev/shm/tiny\n  \
    chunkscope survey --layout zfs --dnode-size 1024 /dev/shm/tiny\n  \
    chunkscope survey --s3-bucket pbs-tiny --out s3tiny.survey /dev/shm/s3tiny\n\n\
    Safe beside a live PBS: nothing is written to the store and no lock is taken; every\n\
    directory and file is opened with O_NOATIME (the report counts any open the kernel\n\
    refused it), so a survey never changes what a GC will do. Chunks that appear or vanish\n\
    meanwhile are counted as such. One getdents64 listing of each chunk directory (inode\n\
    numbers from the entries: no stat per chunk), one read of each index file, one stat of\n\
    each unreferenced chunk. With --s3-bucket (an S3 datastore, PBS 4: the store is its local\n\
    cache), the bucket's chunk objects are listed as a GC's phase 2 lists them (ListObjectsV2,\n\
    1,000 keys a page; nothing else is asked of the bucket) and set against the cache.\n\n\
    Exit status: 0 surveyed, 1 surveyed but incomplete (an unreadable index file, or a chunk\n\
    directory that is not the store's own), 2 error.")]
pub struct SurveyArgs {
    /// The datastore directory (the one holding .chunks).
    store: PathBuf,
    /// The full report as JSON: `--json` on standard output (instead of the text),
    /// `--json=FILE` into FILE (beside the text).
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    json: Option<PathBuf>,
    /// Save the survey (chunks, inodes, the index walk, unreferenced atimes) for
    /// `simulate --survey FILE`.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// How inode numbers map to metadata blocks.
    #[arg(long, value_enum, default_value = "auto")]
    layout: LayoutArg,
    /// ZFS dnode size in bytes (512 is "legacy"; default: the dataset's `dnodesize` where
    /// `zfs get` reads it, else 512).
    #[arg(long, value_name = "BYTES")]
    dnode_size: Option<u64>,
    /// ext4 inode size in bytes (default: the superblock's).
    #[arg(long, value_name = "BYTES")]
    inode_size: Option<u64>,
    /// ext4 inodes per block group (default: the superblock's).
    #[arg(long, value_name = "N")]
    inodes_per_group: Option<u64>,
    /// GC cutoff in minutes for what a GC now would remove (PBS gc-atime-cutoff).
    #[arg(long, default_value_t = 1445, value_parser = clap::value_parser!(u64).range(1..=2880))]
    cutoff: u64,
    /// An S3 datastore (PBS 4): the store is its local cache, its chunks are objects in this
    /// bucket.
    #[command(flatten)]
    s3: super::s3_args::S3Args,
}

pub fn run(args: SurveyArgs) -> Result<Outcome> {
    if (args.inode_size.is_some() || args.inodes_per_group.is_some())
        && args.layout != LayoutArg::Ext4
    {
        anyhow::bail!("--inode-size and --inodes-per-group describe ext4: add --layout ext4");
    }
    if let Some(out) = &args.out {
        let store = std::path::absolute(&args.store)?;
        if std::path::absolute(out)?.starts_with(&store) {
            anyhow::bail!(
                "--out {}: inside the store surveyed (a survey writes nothing there)",
                out.display()
            );
        }
    }
    let layout = match args.layout {
        LayoutArg::Auto => LayoutChoice::Auto {
            dnode_size: args.dnode_size,
        },
        LayoutArg::Zfs => LayoutChoice::Zfs {
            dnode_size: args.dnode_size.unwrap_or(512),
        },
        LayoutArg::Ext4 => LayoutChoice::Ext4 {
            inode_size: args.inode_size,
            inodes_per_group: args.inodes_per_group,
        },
    };
    let opts = SurveyOptions {
        layout,
        cutoff_minutes: args.cutoff,
        now: crate::fsutil::now_epoch(),
        out: args.out.clone(),
        progress: super::stderr_is_terminal(),
    };
    let r = match args.s3.client()? {
        Some(bucket) => crate::survey::survey_s3(&args.store, &opts, &bucket)?,
        None => survey(&args.store, &opts)?,
    };
    if let Some(dest) = &args.json {
        super::write_json(dest, &r)?;
    }
    if args.json.as_deref() != Some(std::path::Path::new("-")) {
        print_report(&r);
        if let Some(out) = &args.out {
            println!(
                "saved            {} (simulate --survey {})",
                out.display(),
                out.display()
            );
        }
    }
    for p in r.odd_chunk_dirs.iter().chain(&r.unreadable_indexes) {
        tracing::warn!("{}: {}", p.path, p.problem);
    }
    Ok(if r.complete() {
        Outcome::Ok
    } else {
        Outcome::ProblemsFound
    })
}

fn print_report(r: &SurveyReport) {
    let n = |v: u64| thousands(v);
    println!("store            {} ({})", r.store, r.filesystem);
    println!("layout           {}", r.layout);
    println!(
        "chunks           {} in {} directories ({} a directory: min {}, max {})",
        n(r.chunks),
        n(r.chunk_dirs),
        n(r.chunks_per_dir.median),
        n(r.chunks_per_dir.min),
        n(r.chunks_per_dir.max)
    );
    println!(
        "metadata blocks  {:.2} a chunk within a directory (1.00: no two chunks of a directory \
         share a block); {} blocks hold all chunks, {} the referenced ones",
        r.blocks_per_chunk,
        n(r.store_blocks),
        n(r.referenced_blocks)
    );
    println!(
        "inode gaps       median {} between consecutive inode numbers of a directory",
        n(r.median_inode_gap)
    );
    let m = &r.median_dir;
    if m.chunks > 1 {
        println!(
            "median directory the {} chunks in {} map to {} distinct metadata blocks, {} shared, \
             with a median gap of {} between consecutive inode numbers",
            n(m.chunks),
            m.dir,
            n(m.blocks),
            n(m.chunks - m.blocks),
            n(m.median_gap)
        );
    }
    println!(
        "index files      {} read ({} of backup data: a GC's \"Original data usage\"), {} \
         references to {} distinct chunks{}",
        n(r.index_files),
        crate::units::human_bytes(r.index_data_bytes),
        n(r.references),
        n(r.referenced),
        if r.referenced_not_listed > 0 {
            format!(
                " ({} not listed: created after their directory was listed, or missing)",
                n(r.referenced_not_listed)
            )
        } else {
            String::new()
        }
    );
    let g = &r.garbage;
    let verdict = garbage_verdict(r);
    println!(
        "unreferenced     {} chunks ({}): {verdict}{}",
        n(r.unreferenced),
        human_bytes(g.bytes),
        if r.vanished > 0 {
            format!("; {} vanished during the survey", n(r.vanished))
        } else {
            String::new()
        }
    );
    let o = &r.other;
    if o.bad_files + o.using_markers + o.ignored_files + o.irregular_chunks > 0 {
        println!(
            "other entries    {} .bad, {} .using, {} ignored (temp files), {} not regular files",
            n(o.bad_files),
            n(o.using_markers),
            n(o.ignored_files),
            n(o.irregular_chunks)
        );
    }
    if r.missing_chunk_dirs > 0 {
        println!(
            "missing          {} chunk directories",
            n(r.missing_chunk_dirs)
        );
    }
    if let Some(b) = &r.s3 {
        print_bucket(b, r.gc_would_stop);
    }
    let s = &r.seconds;
    println!(
        "took             {:.1} s (listing {:.1} s, index files {:.1} s, stats {:.1} s{}); {} stat calls; table {:.1} bytes a chunk",
        s.total,
        s.listing,
        s.indexes,
        s.stats,
        r.s3
            .as_ref()
            .map(|b| format!(", bucket {:.1} s", b.seconds))
            .unwrap_or_default(),
        n(r.stat_calls),
        r.table_bytes as f64 / r.chunks.max(1) as f64
    );
    if r.noatime_refused > 0 {
        println!(
            "warning: the kernel refused O_NOATIME on {} opens (run as the store's owner or \
             root): those directories' atimes changed (chunk atimes did not: chunks are \
             never opened)",
            n(r.noatime_refused)
        );
    }
}

/// The bucket's lines: its objects and bytes, each side without the other, and what a GC now
/// would delete.
fn print_bucket(b: &crate::survey::bucket::BucketSurvey, gc_would_stop: bool) {
    let n = |v: u64| thousands(v);
    println!(
        "bucket           {}: {} chunk objects ({}) in {} listing pages{}",
        b.bucket,
        n(b.chunk_objects),
        human_bytes(b.chunk_object_bytes),
        n(b.list_pages),
        if b.bad_objects > 0 {
            format!(
                ", {} bad copies ({})",
                n(b.bad_objects),
                human_bytes(b.bad_object_bytes)
            )
        } else {
            String::new()
        }
    );
    if b.foreign_objects > 0 {
        println!(
            "                 {} objects under .chunks/ not at a chunk's key: no chunk's, kept",
            n(b.foreign_objects)
        );
    }
    println!(
        "  referenced     {} objects, {} with no local file (phase 1 leaves a .using marker \
         for each){}",
        n(b.referenced_objects),
        n(b.referenced_without_local_file),
        if b.referenced_without_object > 0 {
            format!(
                "; {} referenced chunks have NO object (their data is not in the bucket)",
                n(b.referenced_without_object)
            )
        } else {
            String::new()
        }
    );
    let g = &b.garbage;
    let would = if gc_would_stop {
        "a GC now would stop before its sweep and delete none; it would otherwise delete"
    } else {
        "a GC now would delete"
    };
    println!(
        "  unreferenced   {} objects ({}): {would} {} ({}), keep {} as pending; {} have no \
         local file{}",
        n(g.chunks),
        human_bytes(g.bytes),
        n(g.removable),
        human_bytes(b.removable_bytes),
        n(g.pending),
        n(b.garbage_without_local_file),
        if b.kept_by_using > 0 {
            format!(" ({} kept by a .using marker)", n(b.kept_by_using))
        } else {
            String::new()
        }
    );
    if b.local_without_object > 0 {
        println!(
            "  local only     {} unreferenced local files have no object (phase 3 removes \
             them once expired)",
            n(b.local_without_object)
        );
    }
}

/// "s" for any count but one.
fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// What a GC now would do with the unreferenced chunks: remove those past the cutoff, or stop
/// before its sweep (an index it cannot read, a chunk directory not the store's own).
fn garbage_verdict(r: &SurveyReport) -> String {
    let n = |v: u64| thousands(v);
    let g = &r.garbage;
    if r.gc_would_stop {
        format!(
            "a GC now would stop before its sweep and remove none ({} named below); of them \
             {} are past the cutoff, {} within it",
            match (r.unreadable_indexes.len(), r.odd_chunk_dirs.len()) {
                (i, 0) => format!("{} index file{} it cannot read", n(i as u64), plural(i)),
                (0, d) => format!(
                    "{} chunk director{} not the store's own",
                    n(d as u64),
                    if d == 1 { "y" } else { "ies" }
                ),
                (i, d) => format!(
                    "{} unreadable index file{}, {} odd chunk director{}",
                    n(i as u64),
                    plural(i),
                    n(d as u64),
                    if d == 1 { "y" } else { "ies" }
                ),
            },
            n(g.removable),
            n(g.pending)
        )
    } else {
        format!(
            "a GC now would remove {}, keep {} as pending",
            n(g.removable),
            n(g.pending)
        )
    }
}
