//! `chunkscope inspect`

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::Outcome;
use crate::datastore::blob::{self, BlobKind};
use crate::datastore::index::{DYNAMIC_SIZED_CHUNK_INDEX_1_0, FIXED_SIZED_CHUNK_INDEX_1_0};
use crate::datastore::manifest::Manifest;
use crate::datastore::{Digest, IndexFile, IndexKind};
use crate::units::{human_bytes, thousands};

/// Print the header and statistics of an index (.fidx, .didx) or blob file.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope inspect \"$(find /dev/shm/tiny -name '*.fidx' | head -1)\"\n  \
    chunkscope inspect \"$(find /dev/shm/tiny/.chunks -type f | head -1)\"\n\n\
    The kind is taken from the file's magic, not its name. Exit status 1 on a checksum, CRC or\n\
    digest mismatch; 2 on a file that breaks the format (the error names the file and the\n\
    rule) or is not a regular file. Files are read with O_NOATIME, within the format's\n\
    bounds: a chunk decodes to at most 16 MiB, a blob to 128 MiB, an index is streamed.")]
pub struct InspectArgs {
    /// An index or blob file.
    file: PathBuf,
}

fn uuid_string(u: [u8; 16]) -> String {
    let h = hex::encode(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Distinct digests counted one by one up to this many (a hash set of 32-byte digests; a
/// larger index gets "at least").
const DISTINCT_COUNTED: usize = 1 << 20;

pub fn run(args: InspectArgs) -> Result<Outcome> {
    use std::io::Read;
    let path = &args.file;
    // The magic decides; only a regular file is opened (a FIFO or device is refused).
    let (mut file, len) = crate::fsutil::open_regular_noatime(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let mut magic = Vec::with_capacity(8);
    (&mut file)
        .take(8)
        .read_to_end(&mut magic)
        .with_context(|| format!("reading {}", path.display()))?;
    drop(file);
    if magic == FIXED_SIZED_CHUNK_INDEX_1_0 || magic == DYNAMIC_SIZED_CHUNK_INDEX_1_0 {
        return inspect_index(path);
    }
    let Some(kind) = BlobKind::from_magic(&magic) else {
        bail!(
            "{}: not an index or blob file (first bytes {}, {len} bytes)",
            path.display(),
            hex::encode(&magic)
        );
    };
    let bytes = blob::read_file(path, blob::MAX_BLOB_FILE_SIZE)?;
    let info = blob::inspect(&bytes).map_err(|e| e.in_file(path))?;
    println!("file             {}", path.display());
    println!("kind             {} blob", kind.name());
    println!(
        "file size        {}, payload {}",
        byte_size(info.raw_size as u64),
        byte_size(info.payload_size as u64)
    );
    println!(
        "crc32            {:08x} {}",
        info.stored_crc,
        if info.crc_ok() { "OK" } else { "MISMATCH" }
    );
    if !info.crc_ok() {
        println!("                 payload has {:08x}", info.computed_crc);
        return Ok(Outcome::ProblemsFound);
    }
    if kind.is_encrypted() {
        println!("data             encrypted: not decoded");
        return Ok(Outcome::Ok);
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let named = Digest::from_hex(name);
    // A chunk decodes to at most 16 MiB, any other blob to 128 MiB; the data is hashed as it
    // is decoded, never held whole.
    let (limit, what) = match named {
        Some(_) => (blob::MAX_CHUNK_SIZE, "chunk data"),
        None => (blob::MAX_BLOB_SIZE, "blob data"),
    };
    let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
    let size = blob::decode_each(&bytes, limit, what, &mut |piece| {
        sha2::Digest::update(&mut hasher, piece)
    })
    .map_err(|e| e.in_file(path))?;
    println!("data size        {}", byte_size(size));
    if let Some(named) = named {
        let computed = Digest(sha2::Digest::finalize(hasher).into());
        let ok = computed == named;
        println!(
            "digest           {} {}",
            computed,
            if ok {
                "OK (matches the name)"
            } else {
                "MISMATCH"
            }
        );
        if !ok {
            return Ok(Outcome::ProblemsFound);
        }
    }
    if name == crate::datastore::paths::MANIFEST_BLOB_NAME {
        let m = Manifest::from_blob(&bytes).map_err(|e| e.in_file(path))?;
        println!(
            "manifest         {} {} at {}",
            m.backup_type,
            m.backup_id,
            crate::time::rfc3339_utc(m.backup_time)
        );
        for f in &m.files {
            println!(
                "  {:<28} {:>22}  {}",
                f.filename,
                format!("{} bytes", thousands(f.size)),
                f.csum
            );
        }
    }
    Ok(Outcome::Ok)
}

/// An index: its header, then one streaming pass over the body (end offsets checked, the
/// checksum computed, distinct digests counted up to [`DISTINCT_COUNTED`]).
fn inspect_index(path: &std::path::Path) -> Result<Outcome> {
    let idx = IndexFile::open_with_limit(path, crate::datastore::index::IN_MEMORY_BODY_LIMIT)?;
    let mut distinct: HashSet<Digest> = HashSet::new();
    let mut more = false;
    let computed = idx
        .scan(
            &mut |d| -> Result<(), crate::datastore::error::FormatError> {
                if distinct.len() < DISTINCT_COUNTED {
                    distinct.insert(d);
                } else if !distinct.contains(&d) {
                    more = true;
                }
                Ok(())
            },
        )
        .map_err(|e| if e.path.is_none() { e.in_file(path) } else { e })?;
    let ok = computed == idx.stored_csum();
    println!("file             {}", path.display());
    println!("kind             {}", idx.kind().name());
    println!("uuid             {}", uuid_string(idx.uuid()));
    println!(
        "ctime            {} ({})",
        idx.ctime(),
        crate::time::rfc3339_utc(idx.ctime())
    );
    match idx.kind() {
        IndexKind::Fixed => {
            println!("size             {}", byte_size(idx.index_bytes()));
            println!(
                "chunk size       {}",
                byte_size(idx.chunk_size().unwrap_or(0))
            );
        }
        IndexKind::Dynamic => println!(
            "size             {} (last end offset)",
            byte_size(idx.index_bytes())
        ),
    }
    println!("entries          {}", thousands(idx.entries() as u64));
    println!(
        "distinct digests {}{}",
        if more { "more than " } else { "" },
        thousands(distinct.len() as u64)
    );
    println!(
        "checksum         {} {}",
        hex::encode(idx.stored_csum()),
        if ok { "OK" } else { "MISMATCH" }
    );
    if !ok {
        println!("                 body hashes to {}", hex::encode(computed));
    }
    Ok(if ok {
        Outcome::Ok
    } else {
        Outcome::ProblemsFound
    })
}

/// `n` bytes with separators, and in binary units from 1 KiB up: `1,044,480 bytes (1020 KiB)`.
fn byte_size(n: u64) -> String {
    if n < 1024 {
        format!("{n} bytes")
    } else {
        format!("{} bytes ({})", thousands(n), human_bytes(n))
    }
}
