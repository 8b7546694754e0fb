//! The demo without a mount, and its dense part: every strategy on the simulated store
//! ([`crate::sim`]), on the demo's store where FUSE cannot be mounted and on a slice of
//! datastore B always.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{bail, Result};

use super::*;

pub(super) fn run_simulated(
    o: &DemoOptions,
    cfg: &GenConfig,
    say: &mut dyn FnMut(&str),
) -> Result<DemoReport> {
    say(&format!(
        "building the simulated {} store (seed {})",
        o.preset, o.seed
    ));
    let setup = crate::sim::SimSetup {
        cfg: cfg.clone(),
        params: o.model.clone(),
        digests: crate::sim::DigestMode::Exact,
        first_ino: 1000,
        now: crate::fsutil::now_epoch_coarse(),
        slice: crate::sim::Slice::WHOLE,
    };
    let store = crate::sim::build(&setup)?;
    let rows = simulate_rows(&store, &o.model, &o.strategies, o.progress, &NO_STOP)?;
    let references = rows.first().map_or(0, |r| r.counters.references);
    Ok(DemoReport {
        mode: "simulated",
        simulated_because: None,
        preset: o.preset.clone(),
        seed: o.seed,
        model: o.model.name.clone(),
        chunks: store.chunks_created() as u64,
        referenced_chunks: store.referenced() as u64,
        references,
        rows,
        findings: Vec::new(),
        store: None,
        traces: None,
        wall_seconds: 0.0,
        sim_check: Vec::new(),
        dense: None,
        phases: Vec::new(),
    })
}

/// Each strategy's GC, both phases, on `store` from a cold `model`: the rows of a table.
pub(super) fn simulate_rows(
    store: &crate::sim::SimStore,
    model: &ModelParams,
    strategies: &[Strategy],
    progress: bool,
    stop: &AtomicBool,
) -> Result<Vec<Row>> {
    let mut params = model.clone();
    store.fill_dir_entries(&mut params);
    let mut rows = Vec::new();
    for &strategy in strategies {
        interrupted()?;
        if stop.load(Ordering::Relaxed) {
            bail!("stopped: the rest of the demo failed");
        }
        let opts = GcOptions {
            strategy,
            phases: Phases::All,
            atime_check: false,
            ..GcOptions::default()
        };
        let r = crate::sim::run(store, &params, &opts, false, progress)?;
        rows.push(Row {
            strategy,
            touches: r.counters.utimensat_calls,
            listings: r.counters.listings + r.counters.sweep_listings,
            lookups: r.phase1_requests.lookup,
            metadata_reads: r.phase1_reads + r.phase1_prefetch_reads,
            block_writes: r.phase1_block_writes,
            phase1_modeled_ns: r.phase1_ns,
            phase2_modeled_ns: r.phase2_ns,
            phase1_chunks_per_s: r.phase1_chunks_per_s,
            wall_seconds: r.wall_seconds,
            digest_hit_ratio: r.counters.digest_hit_ratio(),
            removed_chunks: r.counters.removed_chunks,
            check_ok: r.counters.missing_chunks == 0,
            counters: r.counters,
            model: r.model,
        });
    }
    Ok(rows)
}

/// What the dense part does, in a line.
pub(super) fn dense_intro(o: &DemoOptions) -> Result<String> {
    let slice = crate::sim::Slice::new(o.dense_slice)?;
    Ok(format!(
        "simulating a {} slice of {DENSE_PRESET} ({} of its 65,536 chunk directories, the \
         threads' density) on its pool, {DENSE_MODEL}",
        slice.label(),
        crate::units::thousands(slice.chunk_dirs() as u64)
    ))
}

/// The strategies on a slice of datastore B, on its pool: the density of the threads'
/// stores, which the demo's own store (made to mount and trace in a minute) is far from.
/// Stops between strategies once `stop` is set.
pub(super) fn run_dense(o: &DemoOptions, progress: bool, stop: &AtomicBool) -> Result<Dense> {
    let started = Instant::now();
    let slice = crate::sim::Slice::new(o.dense_slice)?;
    let mut cfg = GenConfig::preset(DENSE_PRESET)?;
    cfg.scale = 1.0; // the thread's store, sliced below, not the generator's 1% of it
    cfg.seed = o.seed;
    let model = ModelParams::preset(DENSE_MODEL)?;
    let setup = crate::sim::SimSetup {
        cfg,
        params: model.clone(),
        digests: crate::sim::DigestMode::Hashed,
        first_ino: 1000,
        now: crate::fsutil::now_epoch_coarse(),
        slice,
    };
    let store = crate::sim::build(&setup)?;
    let rows = simulate_rows(&store, &model, &o.strategies, progress, stop)?;
    Ok(Dense {
        preset: DENSE_PRESET.into(),
        slice: slice.of,
        model: DENSE_MODEL.into(),
        chunk_dirs: slice.chunk_dirs() as u64,
        chunks: store.chunks_created() as u64,
        referenced_chunks: store.referenced() as u64,
        rows,
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}
