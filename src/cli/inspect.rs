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

/// Print the header and statistics of an index (.fidx, .didx) or blob file.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope inspect /dev/shm/tiny/vm/100/2026-01-31T03:12:00Z/drive-scsi0.img.fidx\n  \
    chunkscope inspect /dev/shm/tiny/.chunks/bb9f/bb9f8df61474d25e71fa00722318cd387396ca1736605e1248821cc0de3d3af8\n\n\
    The kind is taken from the file's magic, not its name. Exit status 1 on a checksum or CRC\n\
    mismatch. Files are read with O_NOATIME.")]
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

pub fn run(args: InspectArgs) -> Result<Outcome> {
    let path = &args.file;
    let bytes =
        crate::fsutil::read_noatime(path).with_context(|| format!("reading {}", path.display()))?;
    let magic = bytes.get(..8).unwrap_or(&[]);
    if magic == FIXED_SIZED_CHUNK_INDEX_1_0 || magic == DYNAMIC_SIZED_CHUNK_INDEX_1_0 {
        let idx = IndexFile::parse_unverified(bytes).map_err(|e| e.in_file(path))?;
        let ok = idx.compute_csum() == idx.stored_csum();
        let distinct: HashSet<Digest> = idx.digests().collect();
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
                println!("size             {} bytes", idx.index_bytes());
                println!("chunk size       {} bytes", idx.chunk_size().unwrap_or(0));
            }
            IndexKind::Dynamic => println!(
                "size             {} bytes (last end offset)",
                idx.index_bytes()
            ),
        }
        println!("entries          {}", idx.entries());
        println!("distinct digests {}", distinct.len());
        println!(
            "checksum         {} {}",
            hex::encode(idx.stored_csum()),
            if ok { "OK" } else { "MISMATCH" }
        );
        if !ok {
            println!(
                "                 body hashes to {}",
                hex::encode(idx.compute_csum())
            );
        }
        return Ok(if ok {
            Outcome::Ok
        } else {
            Outcome::ProblemsFound
        });
    }
    let Some(kind) = BlobKind::from_magic(magic) else {
        bail!(
            "{}: not an index or blob file (first bytes {})",
            path.display(),
            hex::encode(&magic[..magic.len().min(8)])
        );
    };
    let info = blob::inspect(&bytes).map_err(|e| e.in_file(path))?;
    println!("file             {}", path.display());
    println!("kind             {} blob", kind.name());
    println!(
        "file size        {} bytes ({} bytes payload)",
        info.raw_size, info.payload_size
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
    let data = blob::decode(&bytes).map_err(|e| e.in_file(path))?;
    println!("data size        {} bytes", data.len());
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if let Some(named) = Digest::from_hex(name) {
        let computed = Digest::of(&data);
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
            println!("  {:<28} {:>14} bytes  {}", f.filename, f.size, f.csum);
        }
    }
    Ok(Outcome::Ok)
}
