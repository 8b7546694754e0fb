//! Phase 2: walk `0000`..`ffff`, stat every chunk-like entry relative to its directory, and
//! remove what is older than the cutoff (format document 3.1 and 3.4), counting as PBS does.
//!
//! One rule is chunkscope's, not PBS's: a chunk whose digest is in the referenced set is never
//! removed, whatever its atime. PBS would remove it (a touch lost to a fault, a sweep without
//! a mark); here it is kept, counted as in use, and named as a warning. Every error names the
//! directory or file it happened on.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, Result};

use super::log::TaskLog;
use super::referenced::SealedSet;
use super::{GcReport, KeptChunk, KeptReason, KEPT_NAMED};
use crate::datastore::paths::{chunk_subdir_name, ChunkName, CHUNK_DIR};
use crate::datastore::Digest;
use crate::store::{ChunkDir, ChunkStore};
use crate::units::human_bytes;

/// What protects referenced chunks in the sweep.
pub struct Guard<'a> {
    /// Every digest the indexes reference.
    pub referenced: &'a SealedSet,
    /// The referenced digests phase 1 found missing; `None` when phase 1 did not run.
    pub missing: Option<&'a hashbrown::HashSet<Digest>>,
}

impl Guard<'_> {
    fn reason(&self, d: &Digest) -> KeptReason {
        match self.missing {
            None => KeptReason::NotMarkedThisRun,
            Some(m) if m.contains(d) => KeptReason::MissingInPhase1,
            Some(_) => KeptReason::TouchWithoutEffect,
        }
    }
}

fn dir_path<S: ChunkStore>(store: &S, prefix: usize) -> PathBuf {
    store
        .root()
        .join(CHUNK_DIR)
        .join(chunk_subdir_name(prefix as u16))
}

/// An entry of chunk directory `prefix`, for messages.
fn entry_path<S: ChunkStore>(store: &S, prefix: usize, name: &[u8]) -> PathBuf {
    dir_path(store, prefix).join(String::from_utf8_lossy(name).as_ref())
}

/// Sweeps with the given cutoffs; `dry_run` counts what a GC would remove (the chunks not in
/// `guard.referenced` older than the cutoff: a dry run's phase 1 touched nothing, so a
/// referenced chunk counts as in use whatever its atime) and removes nothing.
/// Counts go into `report` as they happen, so an error leaves it saying what was removed.
pub fn sweep<S: ChunkStore>(
    store: &S,
    min_atime: i64,
    oldest_writer: i64,
    dry_run: bool,
    guard: &Guard<'_>,
    log: &mut TaskLog,
    report: &mut GcReport,
) -> Result<()> {
    let started = Instant::now();
    let dirs = store.chunk_dirs();
    log.progress_start("swept", dirs as u64);
    let mut names: Vec<u8> = Vec::new();
    let mut ends: Vec<usize> = Vec::new();
    let mut last_percent = 0usize;
    let c = &mut report.counters;
    for prefix in 0..dirs {
        let mut dir = match store.open_dir(prefix as u16) {
            Ok(Some(dir)) => dir,
            Ok(None) => continue,
            Err(e) => {
                return Err(anyhow!(
                    "opening chunk directory {} failed - {e}",
                    dir_path(store, prefix).display()
                ))
            }
        };
        c.sweep_listings += 1;
        // As PBS's iterator: one getdents call's entries, each stat'ed (and removed) before
        // the next call (on ZFS, those stats are what keep the listing's dnode prefetch on).
        loop {
            names.clear();
            ends.clear();
            let more = dir
                .read_batch(&mut |name, _| {
                    names.extend_from_slice(name);
                    ends.push(names.len());
                })
                .map_err(|e| {
                    anyhow!(
                        "listing chunk directory {} failed - {e}",
                        dir_path(store, prefix).display()
                    )
                })?;
            c.sweep_entries += ends.len() as u64;
            let mut from = 0;
            for &to in &ends {
                let name = &names[from..to];
                from = to;
                let class = ChunkName::classify(name);
                if class == ChunkName::Ignored {
                    continue;
                }
                let percent = prefix * 100 / dirs;
                if percent > last_percent {
                    last_percent = percent;
                    log.progress_line(&format!("processed {percent}% ({} chunks)", c.chunk_count));
                }
                c.stat_calls += 1;
                let st = match dir.stat(name) {
                    Ok(Some(st)) => st,
                    Ok(None) => continue,
                    Err(e) => {
                        // Nothing known of it: kept, counted, named (PBS skipped it silently).
                        c.stat_errors += 1;
                        log.warn(&format!(
                            "warning: stat of {} failed - {e}: not removed",
                            entry_path(store, prefix, name).display()
                        ));
                        continue;
                    }
                };
                if !st.is_file {
                    // PBS skips it silently; a chunk that is a symlink or a directory stands for
                    // data the store does not hold, so say so (as `check` does).
                    c.irregular_chunks += 1;
                    log.warn(&format!(
                        "warning: {} is not a regular file: not followed, not removed",
                        entry_path(store, prefix, name).display()
                    ));
                    continue;
                }
                if let ChunkName::Using(_) = class {
                    if !dry_run {
                        dir.unlink(name).map_err(|e| {
                            anyhow!(
                                "unlinking marker {} failed - {e}",
                                entry_path(store, prefix, name).display()
                            )
                        })?;
                        c.unlinks += 1;
                    }
                    continue;
                }
                c.chunk_count += 1;
                let bad = matches!(class, ChunkName::Bad(..));
                if dry_run {
                    if let ChunkName::Chunk(d) = class {
                        if guard.referenced.contains(&d) {
                            // A GC's phase 1 would have touched it (a dry run touches nothing).
                            c.disk_chunks += 1;
                            c.disk_bytes += st.size;
                            continue;
                        }
                    }
                }
                if st.atime < min_atime {
                    if let ChunkName::Chunk(d) = class {
                        if guard.referenced.contains(&d) {
                            // Referenced: PBS would remove it; keep it, count it as in use, say so.
                            let reason = guard.reason(&d);
                            c.kept_referenced += 1;
                            c.kept_referenced_bytes += st.size;
                            c.disk_chunks += 1;
                            c.disk_bytes += st.size;
                            if report.kept_referenced.len() < KEPT_NAMED {
                                log.warn(&format!(
                                "warning: kept referenced chunk {d} ({}, atime {}): its atime is \
                                 older than the cutoff, PBS would have removed it",
                                reason.describe(),
                                crate::time::rfc3339_utc(st.atime)
                            ));
                                report.kept_referenced.push(KeptChunk {
                                    digest: d.to_hex(),
                                    reason,
                                    atime: st.atime,
                                    size: st.size,
                                });
                            }
                            continue;
                        }
                    }
                    if !dry_run {
                        if let Err(e) = dir.unlink(name) {
                            if bad {
                                c.still_bad += 1;
                            }
                            return Err(anyhow!(
                                "unlinking chunk {} failed on store '{}' ({}) - {e}",
                                String::from_utf8_lossy(name),
                                store.root().display(),
                                dir_path(store, prefix).display()
                            ));
                        }
                        c.unlinks += 1;
                    }
                    if bad {
                        c.removed_bad += 1;
                    } else {
                        c.removed_chunks += 1;
                    }
                    c.removed_bytes += st.size;
                } else if st.atime < oldest_writer {
                    if bad {
                        c.still_bad += 1;
                    } else {
                        c.pending_chunks += 1;
                    }
                    c.pending_bytes += st.size;
                } else {
                    if !bad {
                        c.disk_chunks += 1;
                    }
                    c.disk_bytes += st.size;
                }
            }
            if !more {
                break;
            }
        }
        log.progress(prefix as u64 + 1, dirs as u64);
    }
    log.progress_finish();
    if c.kept_referenced as usize > report.kept_referenced.len() {
        log.warn(&format!(
            "warning: {} more referenced chunks kept that PBS would have removed ({} in all, {})",
            c.kept_referenced as usize - report.kept_referenced.len(),
            c.kept_referenced,
            human_bytes(c.kept_referenced_bytes)
        ));
    }
    c.phase2_seconds = started.elapsed().as_secs_f64();
    Ok(())
}
