//! Replay: a recorded trace through any cost model, offline.
//!
//! The overlay charges the model in request-number order (it takes the number under the
//! model's lock), and the writer may store records a little out of that order (several worker
//! threads feed it); replay restores the order with a small reorder buffer, gives each listing
//! the entries its `dirent` records name, and charges exactly what the overlay charged. With
//! the model the trace was recorded with, every request's cost must equal its recorded
//! `modeled_ns`; [`ReplayReport::mismatches`] counts those that do not.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use crate::model::order::InodeOrder;
use crate::model::{charges, Model, ModelOp, ModelParams, Totals};
use crate::trace::ordered::Ordered;
use crate::trace::{Name, Op, Record, TraceReader};

/// The model's clock and counters at a marker.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MarkerPoint {
    /// The marker's request number.
    pub seq: u64,
    /// Its text.
    pub text: String,
    /// The model's clock there, ns.
    pub modeled_ns: u64,
    /// Demand reads so far.
    pub misses: u64,
    /// Operations charged so far.
    pub ops: u64,
}

/// A trace replayed through a model.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    /// The model replayed through.
    pub model: ModelParams,
    /// Totals after the last transaction group is written.
    pub totals: Totals,
    /// Requests replayed.
    pub requests: u64,
    /// Of them, listings (readdir, readdirplus).
    pub listings: u64,
    /// Listing entries they carried.
    pub dirents: u64,
    /// Sum of the costs the trace recorded (0 if recorded without a model).
    pub recorded_ns: u64,
    /// True if the trace was recorded with exactly this model.
    pub same_model: bool,
    /// Requests whose recomputed cost differs from the recorded one (same model only).
    pub mismatches: u64,
    /// The first of them, by request number.
    pub first_mismatch_seq: Option<u64>,
    /// Request numbers that never appeared (a torn or cut trace).
    pub missing: u64,
    /// The model's state at each marker, in order; in a trace without markers, at each phase
    /// edge inferred from its requests (`phase1 start (inferred)` ...).
    pub markers: Vec<MarkerPoint>,
}

struct Replayer {
    model: Model,
    report: ReplayReport,
}

impl Replayer {
    fn mark(&mut self, seq: u64, text: String) {
        let t = self.model.totals();
        self.report.markers.push(MarkerPoint {
            seq,
            text,
            modeled_ns: self.model.clock_ns(),
            misses: t.misses,
            ops: t.ops,
        });
    }

    fn process(&mut self, rec: Record, dirents: &[u64]) {
        let Some(op) = rec.op() else { return };
        if op == Op::Marker {
            let text = match &rec.name {
                Name::Text(t) => t.to_string(),
                _ => String::new(),
            };
            return self.mark(rec.seq, text);
        }
        self.report.requests += 1;
        self.report.recorded_ns += rec.modeled_ns;
        if !charges(op) {
            return;
        }
        let listing = matches!(op, Op::Readdir | Op::Readdirplus).then_some(dirents);
        if listing.is_some() {
            self.report.listings += 1;
            self.report.dirents += dirents.len() as u64;
        }
        let mop = ModelOp {
            op,
            ino: rec.ino,
            parent: rec.parent,
            errno: rec.errno,
        };
        let ns = self.model.charge_request(&mop, listing);
        if self.report.same_model && ns != rec.modeled_ns {
            self.report.mismatches += 1;
            self.report.first_mismatch_seq.get_or_insert(rec.seq);
        }
    }
}

/// Where `mount --layout-order creation` saves the ranking for the trace at `trace`.
pub fn order_path(trace: &Path) -> std::path::PathBuf {
    let mut p = trace.as_os_str().to_owned();
    p.push(".order");
    p.into()
}

/// Replays the trace at `path` through a model with `params`. A trace recorded with
/// `--layout-order creation` is replayed with the ranking saved beside it, unless `order`
/// names another one.
pub fn replay(
    path: &Path,
    params: ModelParams,
    order: Option<&Path>,
) -> Result<(ReplayReport, Option<u64>)> {
    let reader = TraceReader::open(path)?;
    let creation = reader.meta().creation_order();
    let order = match order {
        Some(p) => Some(InodeOrder::load(p)?),
        None if creation => Some(InodeOrder::load(&order_path(path)).map_err(|e| {
            e.context(format!(
                "{} was recorded with --layout-order creation; its ranking is missing \
                 (name one with --order FILE)",
                path.display()
            ))
        })?),
        None => None,
    };
    let recorded = reader.meta().model().cloned();
    let same_model =
        recorded.is_some_and(|v| v == serde_json::to_value(&params).unwrap_or_default());
    let mut r = Replayer {
        model: match order {
            Some(o) => Model::with_order(params.clone(), o),
            None => Model::new(params.clone()),
        },
        report: ReplayReport {
            model: params,
            totals: Totals::default(),
            requests: 0,
            listings: 0,
            dirents: 0,
            recorded_ns: 0,
            same_model,
            mismatches: 0,
            first_mismatch_seq: None,
            missing: 0,
            markers: Vec::new(),
        },
    };
    // Without markers (a real PBS's GC), the state at the inferred phase edges.
    let inferred = crate::trace::phases::infer_file(path)?.unwrap_or_default();
    let mut edges = inferred.into_iter().peekable();
    let mut records = Ordered::<Record>::new(reader);
    while let Some((rec, dirents)) = records.next_record()? {
        while let Some(edge) = edges.next_if(|e| e.seq <= rec.seq) {
            r.mark(edge.seq, edge.marker.encode());
        }
        r.process(rec, &dirents);
    }
    r.report.missing = records.missing();
    r.model.flush();
    r.report.totals = r.model.totals().clone();
    Ok((r.report, records.reader().truncated_bytes()))
}
