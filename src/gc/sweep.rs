//! Phase 2: walk `0000`..`ffff`, stat every chunk-like entry relative to its directory, and
//! remove what is older than the cutoff (format document 3.1 and 3.4), counting as PBS does.

use std::time::Instant;

use anyhow::{bail, Result};

use super::log::TaskLog;
use super::Counters;
use crate::datastore::paths::{ChunkName, CHUNK_SUBDIRS};
use crate::store::{ChunkDir, ChunkStore};

/// Sweeps with the given cutoffs; `dry_run` counts what it would remove and removes nothing.
pub fn sweep<S: ChunkStore>(
    store: &S,
    min_atime: i64,
    oldest_writer: i64,
    dry_run: bool,
    log: &mut TaskLog,
    c: &mut Counters,
) -> Result<()> {
    let started = Instant::now();
    log.progress_start("swept", CHUNK_SUBDIRS as u64);
    let mut names: Vec<u8> = Vec::new();
    let mut ends: Vec<usize> = Vec::new();
    let mut last_percent = 0usize;
    for prefix in 0..CHUNK_SUBDIRS {
        let Some(mut dir) = store.open_dir(prefix as u16)? else {
            continue;
        };
        names.clear();
        ends.clear();
        dir.list(&mut |name, _| {
            names.extend_from_slice(name);
            ends.push(names.len());
        })?;
        c.sweep_listings += 1;
        c.sweep_entries += ends.len() as u64;
        let mut from = 0;
        for &to in &ends {
            let name = &names[from..to];
            from = to;
            let class = ChunkName::classify(name);
            if class == ChunkName::Ignored {
                continue;
            }
            let percent = prefix * 100 / CHUNK_SUBDIRS;
            if percent > last_percent {
                last_percent = percent;
                log.progress_line(&format!("processed {percent}% ({} chunks)", c.chunk_count));
            }
            c.stat_calls += 1;
            let Some(st) = dir.stat(name)? else { continue };
            if !st.is_file {
                continue;
            }
            if let ChunkName::Using(_) = class {
                if !dry_run {
                    dir.unlink(name)?;
                    c.unlinks += 1;
                }
                continue;
            }
            c.chunk_count += 1;
            let bad = matches!(class, ChunkName::Bad(..));
            if st.atime < min_atime {
                if !dry_run {
                    if let Err(e) = dir.unlink(name) {
                        if bad {
                            c.still_bad += 1;
                        }
                        bail!(
                            "unlinking chunk {} failed on store '{}' - {e}",
                            String::from_utf8_lossy(name),
                            store.root().display()
                        );
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
        log.progress(prefix as u64 + 1, CHUNK_SUBDIRS as u64);
    }
    log.progress_finish();
    c.phase2_seconds = started.elapsed().as_secs_f64();
    Ok(())
}
