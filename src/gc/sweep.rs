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
use crate::store::{ChunkDir, ChunkStore, EntryStat};
use crate::units::HumanByte;

/// What protects referenced chunks in the sweep.
pub struct Guard<'a> {
    /// Every digest the indexes reference.
    pub referenced: &'a SealedSet,
    /// The referenced digests phase 1 found missing; `None` when phase 1 did not run.
    pub missing: Option<&'a hashbrown::HashSet<Digest>>,
}

impl Guard<'_> {
    pub(super) fn reason(&self, d: &Digest) -> KeptReason {
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
    dir_path(store, prefix)
        .join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name))
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
    let mut sweep = Sweep {
        store,
        min_atime,
        oldest_writer,
        dry_run,
        guard,
        log,
        report,
        dirs,
        last_percent: 0,
    };
    let mut batch = Batch::default();
    for prefix in 0..dirs {
        // The store the sweep lists through its open descriptors must still be the one at
        // its path: a mount put over the root or `.chunks` meanwhile (or the store moved)
        // stops it here, before sweeping anything more, not at its end.
        if prefix > 0 && prefix % IDENTITY_CHECK_DIRS == 0 {
            sweep.store.check_identity(false)?;
        }
        sweep.dir(prefix, &mut batch)?;
        sweep.log.progress(prefix as u64 + 1, dirs as u64);
    }
    log.progress_finish();
    let c = &mut report.counters;
    if c.kept_referenced as usize > report.kept_referenced.len() {
        log.warn(&format!(
            "warning: {} more referenced chunks kept that PBS would have removed ({} in all, {})",
            c.kept_referenced as usize - report.kept_referenced.len(),
            c.kept_referenced,
            HumanByte(c.kept_referenced_bytes)
        ));
    }
    c.phase2_seconds = started.elapsed().as_secs_f64();
    Ok(())
}

/// Chunk directories swept between two checks that the store is still the one opened (256
/// checks a sweep: two `stat`s of paths each on a directory, a read of the mount table on a
/// chunkscope mount, which sends the mount no request).
pub const IDENTITY_CHECK_DIRS: usize = 256;

/// One getdents call's names, back to back, and where each ends (kept from one call to the
/// next, so the sweep allocates nothing per directory).
#[derive(Default)]
struct Batch {
    names: Vec<u8>,
    ends: Vec<usize>,
}

/// A sweep in progress: its cutoffs and where it counts.
struct Sweep<'a, 'g, 'l, S> {
    store: &'a S,
    min_atime: i64,
    oldest_writer: i64,
    dry_run: bool,
    guard: &'a Guard<'g>,
    log: &'a mut TaskLog<'l>,
    report: &'a mut GcReport,
    dirs: usize,
    last_percent: usize,
}

impl<S: ChunkStore> Sweep<'_, '_, '_, S> {
    /// Sweeps chunk directory `prefix` (none there: nothing to do).
    fn dir(&mut self, prefix: usize, batch: &mut Batch) -> Result<()> {
        let mut dir = match self.store.open_dir(prefix as u16) {
            Ok(Some(dir)) => dir,
            Ok(None) => return Ok(()),
            Err(e) => {
                return Err(anyhow!(
                    "opening chunk directory {} failed - {e}",
                    dir_path(self.store, prefix).display()
                ))
            }
        };
        self.report.counters.sweep_listings += 1;
        // As PBS's iterator: one getdents call's entries, each stat'ed (and removed) before
        // the next call (on ZFS, those stats are what keep the listing's dnode prefetch on).
        loop {
            batch.names.clear();
            batch.ends.clear();
            let more = dir
                .read_batch(&mut |name, _| {
                    batch.names.extend_from_slice(name);
                    batch.ends.push(batch.names.len());
                })
                .map_err(|e| {
                    anyhow!(
                        "listing chunk directory {} failed - {e}",
                        dir_path(self.store, prefix).display()
                    )
                })?;
            self.report.counters.sweep_entries += batch.ends.len() as u64;
            let mut from = 0;
            for &to in &batch.ends {
                self.entry(&mut dir, prefix, &batch.names[from..to])?;
                from = to;
            }
            if !more {
                return Ok(());
            }
        }
    }

    /// One entry of chunk directory `prefix`: stat'ed, then removed, kept or counted.
    #[inline]
    fn entry(&mut self, dir: &mut S::Dir<'_>, prefix: usize, name: &[u8]) -> Result<()> {
        let class = ChunkName::classify(name);
        if class == ChunkName::Ignored {
            return Ok(());
        }
        let percent = prefix * 100 / self.dirs;
        if percent > self.last_percent {
            self.last_percent = percent;
            let chunks = self.report.counters.chunk_count;
            self.log
                .progress_line(&format!("processed {percent}% ({chunks} chunks)"));
        }
        let c = &mut self.report.counters;
        c.stat_calls += 1;
        let st = match dir.stat(name) {
            Ok(Some(st)) => st,
            Ok(None) => return Ok(()),
            Err(e) => {
                // Nothing known of it: kept, counted, named (PBS skipped it silently).
                c.stat_errors += 1;
                self.log.warn(&format!(
                    "warning: stat of {} failed - {e}: not removed",
                    entry_path(self.store, prefix, name).display()
                ));
                return Ok(());
            }
        };
        if !st.is_file {
            // PBS skips it silently; a chunk that is a symlink or a directory stands for
            // data the store does not hold, so say so (as `check` does).
            c.irregular_chunks += 1;
            self.log.warn(&format!(
                "warning: {} is not a regular file: not followed, not removed",
                entry_path(self.store, prefix, name).display()
            ));
            return Ok(());
        }
        if let ChunkName::Using(_) = class {
            if !self.dry_run {
                dir.unlink(name).map_err(|e| {
                    anyhow!(
                        "unlinking marker {} failed - {e}",
                        entry_path(self.store, prefix, name).display()
                    )
                })?;
                c.unlinks += 1;
            }
            return Ok(());
        }
        c.chunk_count += 1;
        self.judge(dir, prefix, name, class, st)
    }

    /// A chunk (or a `.bad` copy) by its atime: removed when older than the cutoff (but
    /// never when referenced), pending when older than the oldest writer, else in use.
    #[inline]
    fn judge(
        &mut self,
        dir: &mut S::Dir<'_>,
        prefix: usize,
        name: &[u8],
        class: ChunkName,
        st: EntryStat,
    ) -> Result<()> {
        let referenced = match class {
            ChunkName::Chunk(d) if self.guard.referenced.contains(&d) => Some(d),
            _ => None,
        };
        let c = &mut self.report.counters;
        if self.dry_run && referenced.is_some() {
            // A GC's phase 1 would have touched it (a dry run touches nothing).
            c.disk_chunks += 1;
            c.disk_bytes += st.size;
            return Ok(());
        }
        let bad = matches!(class, ChunkName::Bad(..));
        if st.atime < self.min_atime {
            if let Some(d) = referenced {
                self.keep_referenced(d, st);
                return Ok(());
            }
            if !self.dry_run {
                if let Err(e) = dir.unlink(name) {
                    if bad {
                        c.still_bad += 1;
                    }
                    return Err(anyhow!(
                        "unlinking chunk {} failed on store '{}' ({}) - {e}",
                        crate::fsutil::shown_bytes(name),
                        self.store.root().display(),
                        dir_path(self.store, prefix).display()
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
        } else if st.atime < self.oldest_writer {
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
        Ok(())
    }

    /// A referenced chunk older than the cutoff: PBS would remove it; kept, counted as in
    /// use, and named (the first [`KEPT_NAMED`]).
    #[cold]
    fn keep_referenced(&mut self, d: Digest, st: EntryStat) {
        let reason = self.guard.reason(&d);
        let c = &mut self.report.counters;
        c.kept_referenced += 1;
        c.kept_referenced_bytes += st.size;
        c.disk_chunks += 1;
        c.disk_bytes += st.size;
        if self.report.kept_referenced.len() < KEPT_NAMED {
            self.log.warn(&format!(
                "warning: kept referenced chunk {d} ({}, atime {}): its atime is older than \
                 the cutoff, PBS would have removed it",
                reason.describe(),
                crate::time::rfc3339_utc(st.atime)
            ));
            self.report.kept_referenced.push(KeptChunk {
                digest: d.to_hex(),
                reason,
                atime: st.atime,
                size: st.size,
            });
        }
    }
}
