//! Simulation: the GC strategies, unchanged, against an in-memory store built from the
//! generator's history, through the same cost model as the overlay.
//!
//! [`store::SimStore`] implements [`crate::store::ChunkStore`] (and the index walk's
//! [`crate::datastore::snapshots::Tree`]), so [`crate::gc::run`] runs on it exactly as on a
//! datastore or a mount: no strategy code knows it is simulated. Each strategy starts from
//! the store as built and a cold model ([`SimStore::reset`]), as the demo's shadow mounts do.

pub mod store;

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use crate::gc::log::TaskLog;
use crate::gc::{self, Counters, GcOptions, Hooks, Strategy};
use crate::gen::GenConfig;
use crate::model::{Model, ModelParams, Totals};
pub use store::{DigestMode, RequestCounts, SimStore, SimTrace};

/// One strategy's simulated run.
#[derive(Clone, Debug, Serialize)]
pub struct SimRun {
    pub strategy: Strategy,
    pub counters: Counters,
    pub requests: RequestCounts,
    /// The requests up to the end of phase 1.
    pub phase1_requests: RequestCounts,
    /// Metadata reads of phase 1, and its block writes (the open transaction group included).
    pub phase1_reads: u64,
    pub phase1_block_writes: u64,
    /// Model totals after the final transaction group was written.
    pub model: Totals,
    /// Modelled time of each phase (clock at the phase's end markers), ns.
    pub phase1_ns: u64,
    pub phase2_ns: u64,
    /// Distinct referenced chunks per modelled second of phase 1.
    pub phase1_chunks_per_s: f64,
    pub wall_seconds: f64,
}

/// What the simulation was asked.
pub struct SimSetup {
    pub cfg: GenConfig,
    pub params: ModelParams,
    pub digests: DigestMode,
    pub first_ino: u64,
    /// Generation time the store is simulated at (shifts atimes as `gen` does).
    pub now: i64,
}

/// Builds the store once.
pub fn build(setup: &SimSetup) -> Result<SimStore> {
    let history = crate::gen::build_history(&setup.cfg)?;
    SimStore::build(
        &setup.cfg,
        history,
        setup.digests,
        setup.first_ino,
        setup.now,
        Model::new(setup.params.clone()),
    )
}

/// Runs one GC with `opts` on `store` from its built state and a cold model; `progress` draws
/// a bar on standard error (index files marked, chunk directories swept).
pub fn run(
    store: &SimStore,
    params: &ModelParams,
    opts: &GcOptions,
    progress: bool,
) -> Result<SimRun> {
    store.reset(Model::new(params.clone()));
    let started = Instant::now();
    store.open_requests();
    let mut marks: Vec<(String, u64)> = Vec::new();
    let mut phase1_requests = RequestCounts::default();
    let (mut phase1_reads, mut phase1_block_writes) = (0, 0);
    let mut marker = |text: &str| -> Result<()> {
        store.mark(text);
        marks.push((text.to_string(), store.with_model(|m| m.clock_ns())));
        if text.starts_with("phase1 end") {
            phase1_requests = store.counts();
            (phase1_reads, phase1_block_writes) = store.with_model(|m| {
                (
                    m.totals().misses,
                    m.totals().blocks_written + m.dirty_blocks(),
                )
            });
        }
        Ok(())
    };
    let mut log = TaskLog::new(Box::new(std::io::sink()), progress).labelled(opts.strategy.name());
    let report = gc::run(
        store,
        opts,
        &mut log,
        Hooks {
            marker: Some(&mut marker),
            after_index: None,
        },
    )?;
    let clock_at = |prefix: &str| {
        marks
            .iter()
            .find(|(t, _)| t.starts_with(prefix))
            .map(|m| m.1)
    };
    let span = |phase: &str| match (
        clock_at(&format!("{phase} start")),
        clock_at(&format!("{phase} end")),
    ) {
        (Some(a), Some(b)) => b - a,
        _ => 0,
    };
    let (phase1_ns, phase2_ns) = (span("phase1"), span("phase2"));
    let model = store.with_model(|m| {
        m.flush();
        m.totals().clone()
    });
    let c = report.counters;
    Ok(SimRun {
        strategy: opts.strategy,
        phase1_chunks_per_s: store.referenced() as f64 / (phase1_ns as f64 / 1e9).max(1e-9),
        requests: store.counts(),
        phase1_requests,
        phase1_reads,
        phase1_block_writes,
        model,
        phase1_ns,
        phase2_ns,
        wall_seconds: started.elapsed().as_secs_f64(),
        counters: c,
    })
}
