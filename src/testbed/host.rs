//! What the host itself costs and keeps: its time per device read beside the disk model's,
//! and its caches dropped before a cold run.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use super::command;

/// What one device read costs the host when the disk costs nothing (the mount has no disk
/// model while the image is built): the filesystem, the loop device, the FUSE round trip, the
/// backing file. Every 16th of the 65,536 chunk directories is listed with cold caches, then
/// again warm; the difference over the reads the loop device served (its `stat`) is the time
/// of a read. The filesystem is remounted `noatime` first, so that the golden image keeps its
/// atimes.
pub(super) fn host_io_ns(fs_dir: &Path, store: &Path, dev: &str) -> Result<u64> {
    command(
        Command::new("mount")
            .args(["-o", "remount,noatime"])
            .arg(fs_dir),
    )?;
    let name = Path::new(dev)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stat = format!("/sys/block/{name}/stat");
    let reads = || -> Result<u64> {
        let text = std::fs::read_to_string(&stat).with_context(|| format!("reading {stat}"))?;
        text.split_whitespace()
            .next()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("{stat}: no read count in '{}'", text.trim()))
    };
    let pass = || -> Result<u64> {
        let started = std::time::Instant::now();
        for i in 0..4096u64 {
            let dir = store.join(format!(".chunks/{:04x}", i * 16));
            for e in
                std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
            {
                e?;
            }
        }
        Ok(started.elapsed().as_nanos() as u64)
    };
    drop_caches()?;
    let before = reads()?;
    let cold = pass()?;
    let served = reads()? - before;
    let warm = pass()?;
    Ok(cold.saturating_sub(warm) / served.max(1))
}

pub(super) fn drop_caches() -> Result<()> {
    // SAFETY: no arguments.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", b"3").context("dropping the page cache (as root)")
}
