//! `chunkscope demo`: the whole experiment in one command.
//!
//! Generate a store (on a tmpfs of its own, or /dev/shm, so inode numbers follow creation
//! order as on ZFS, and on a private tmpfs are the same on every run), then for each GC strategy: mount the overlay over it in shadow mode with a cost
//! model (a fresh mount each time: the same store state and a cold cache for every strategy),
//! run the GC through the mount with phase markers, check that every referenced chunk is
//! still there, unmount, and analyse the trace. The rows, three sentences on what they show
//! and the plots go into a report directory ([`report`]).
//!
//! The mount runs as a child process (`chunkscope mount`, the same code a user runs), the GC
//! and the check run in this process against the mountpoint. Where FUSE cannot be mounted,
//! the same experiment runs on the simulated store ([`crate::sim`]) instead, and says why.
//!
//! Interrupting (SIGINT, SIGTERM) unmounts, waits for the mount process, removes the
//! temporary store and exits; `Cleanup` does the same on every error path.

mod host;
pub mod report;
mod simulated;

pub use host::{fuse_unavailable, was_interrupted};
use host::{
    handle_signals, interrupted, other_cpu, pin_to_cpu, pin_to_one_cpu, work_dir, Cleanup, MOUNTED,
    NO_STOP,
};
use simulated::{dense_intro, run_dense, run_simulated, simulate_rows};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use crate::analysis::{self, Phase};
use crate::gc::log::TaskLog;
use crate::gc::{self, Counters, GcOptions, Hooks, Phases, Strategy};
use crate::gen::GenConfig;
use crate::model::{ModelParams, Totals};
use crate::overlay::control::{socket_for, Client};
use crate::overlay::session::is_mounted;
use crate::store::dir::DirStore;
use crate::trace::Marker;

/// What to run.
pub struct DemoOptions {
    /// Store to generate (a generator preset).
    pub preset: String,
    /// Its seed.
    pub seed: u64,
    /// The cost model every mount charges.
    pub model: ModelParams,
    /// The strategies to compare, in the table's order.
    pub strategies: Vec<Strategy>,
    /// Report directory.
    pub out: PathBuf,
    /// Keep the generated store (its path is printed).
    pub keep: bool,
    /// This program, to start `chunkscope mount` from.
    pub exe: PathBuf,
    /// Run on the simulated store even where FUSE works.
    pub simulate: bool,
    /// Progress bars on standard error inside each step (generating, each strategy's
    /// phases): for a terminal.
    pub progress: bool,
    /// Also simulate the strategies at the threads' density: this slice of datastore B
    /// ([`DENSE_PRESET`] on [`DENSE_MODEL`]); 0 leaves that part out.
    pub dense_slice: u32,
}

/// The store shape of the demo's dense part: thread 001's datastore B, ~160 referenced
/// chunks a chunk directory.
pub const DENSE_PRESET: &str = "datastore-b";
/// Its pool: datastore B's (a 16 GiB ARC that holds what a GC reads of the store).
pub const DENSE_MODEL: &str = "zfs-raidz-hdd";
/// The slice of it the demo simulates by default: 2,048 of the 65,536 chunk directories,
/// about 380,000 chunks, some 30 s on 2 cores.
pub const DENSE_SLICE: u32 = 32;

/// What the GC counted, for comparing the simulator with the mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GcCounts {
    /// `utimensat` calls.
    pub touches: u64,
    /// Chunk directories listed, both phases.
    pub listings: u64,
    /// The sweep's `fstatat` calls.
    pub stats: u64,
    /// Chunks the sweep removed.
    pub removed: u64,
}

impl GcCounts {
    fn of(c: &Counters) -> GcCounts {
        GcCounts {
            touches: c.utimensat_calls,
            listings: c.listings + c.sweep_listings,
            stats: c.stat_calls,
            removed: c.removed_chunks,
        }
    }
}

/// One strategy's mounted run beside the simulator's run of the same store (its inode
/// numbers from the store's root, the same model).
#[derive(Clone, Debug, Serialize)]
pub struct SimCheck {
    /// The strategy.
    pub strategy: Strategy,
    /// What the GC counted through the mount.
    pub mount: GcCounts,
    /// What it counted on the simulated store.
    pub simulated: GcCounts,
    /// Phase 1's modelled time through the mount, ns.
    pub mount_phase1_ns: u64,
    /// Phase 1's modelled time simulated, ns.
    pub simulated_phase1_ns: u64,
}

impl SimCheck {
    /// Whether every count agrees.
    pub fn same_counts(&self) -> bool {
        self.mount == self.simulated
    }

    /// |simulated / mounted - 1| of phase 1's modelled time.
    pub fn phase1_difference(&self) -> f64 {
        (self.simulated_phase1_ns as f64 / self.mount_phase1_ns.max(1) as f64 - 1.0).abs()
    }
}

/// The strategies simulated on a slice of a store with the threads' density.
#[derive(Clone, Debug, Serialize)]
pub struct Dense {
    /// The generator preset (datastore B's shape).
    pub preset: String,
    /// The slice: one `slice`-th of the store's groups and chunk directories.
    pub slice: u32,
    /// The pool model.
    pub model: String,
    /// Chunk directories of the slice.
    pub chunk_dirs: u64,
    /// Chunk files.
    pub chunks: u64,
    /// Distinct referenced chunks.
    pub referenced_chunks: u64,
    /// One row per strategy, as the mounted table's.
    pub rows: Vec<Row>,
    /// Real time of the part (build and runs).
    pub wall_seconds: f64,
}

impl Dense {
    /// Referenced chunks per chunk directory.
    pub fn per_dir(&self) -> f64 {
        self.referenced_chunks as f64 / self.chunk_dirs.max(1) as f64
    }
}

/// One strategy's results: what the demo's table shows.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The strategy.
    pub strategy: Strategy,
    /// `utimensat` calls of phase 1.
    pub touches: u64,
    /// Chunk directories listed (phase 1 and the sweep).
    pub listings: u64,
    /// FUSE lookups of phase 1 (the path walks of the touches and the index reads).
    pub lookups: u64,
    /// Metadata blocks the model read in phase 1: on demand, and by readdir prefetch.
    pub metadata_reads: u64,
    /// Blocks phase 1 wrote back at transaction groups (each dirty block once per group),
    /// the last, still open group included.
    pub block_writes: u64,
    /// Phase 1's modelled time, ns.
    pub phase1_modeled_ns: u64,
    /// Phase 2's modelled time, ns.
    pub phase2_modeled_ns: u64,
    /// Distinct referenced chunks per modelled second of phase 1.
    pub phase1_chunks_per_s: f64,
    /// Real time of the GC (both phases).
    pub wall_seconds: f64,
    /// Share of references the digest cache answered (none for naive).
    pub digest_hit_ratio: Option<f64>,
    /// Chunks the sweep removed (in the shadow: the store is unchanged).
    pub removed_chunks: u64,
    /// `check` after the sweep: every referenced chunk still there (always true simulated,
    /// where the GC's own counters are the check).
    pub check_ok: bool,
    /// The GC's own counters.
    pub counters: Counters,
    /// The model's totals at the end of phase 1.
    pub model: Totals,
}

/// Everything the demo found.
#[derive(Clone, Debug, Serialize)]
pub struct DemoReport {
    /// "fuse" (a real mount) or "simulated".
    pub mode: &'static str,
    /// Why the demo ran on the simulated store, when it did.
    pub simulated_because: Option<String>,
    /// The preset generated.
    pub preset: String,
    /// Its seed.
    pub seed: u64,
    /// The model's name.
    pub model: String,
    /// Chunk files in the store.
    pub chunks: u64,
    /// Distinct chunks the snapshots reference.
    pub referenced_chunks: u64,
    /// References over all index files.
    pub references: u64,
    /// One row per strategy.
    pub rows: Vec<Row>,
    /// What the table shows, in the threads' terms.
    pub findings: Vec<String>,
    /// The store, when kept.
    pub store: Option<String>,
    /// The mounts' traces: their directory and bytes, and whether they were kept (`--keep`;
    /// otherwise they are removed once analysed). `None` for a simulated demo.
    pub traces: Option<TracesKept>,
    /// Real time of the whole demo.
    pub wall_seconds: f64,
    /// The mounted runs beside the simulator's (mounted demos only).
    pub sim_check: Vec<SimCheck>,
    /// The same strategies at the threads' density, simulated.
    pub dense: Option<Dense>,
    /// Each strategy's analysed phase 1 (mounted runs), for the plots.
    #[serde(skip)]
    pub phases: Vec<(String, Phase)>,
}

/// Where the demo's traces are, how big, and whether they are still there.
#[derive(Clone, Debug, Serialize)]
pub struct TracesKept {
    /// Their directory.
    pub dir: String,
    /// Their bytes (compressed trace files).
    pub bytes: u64,
    /// True with `--keep`; else they were removed after the analysis.
    pub kept: bool,
}

/// Runs the demo; `say` prints progress (one line per step).
pub fn run(o: &DemoOptions, say: &mut dyn FnMut(&str)) -> Result<DemoReport> {
    let started = Instant::now();
    handle_signals()?;
    let mut cfg = GenConfig::preset(&o.preset)?;
    cfg.seed = o.seed;
    let why = if o.simulate {
        Some("--simulate was given".to_string())
    } else {
        fuse_unavailable()
    };
    // The dense part needs no mount: where a second CPU is free it runs there, beside the
    // mounts (pinned to the first), instead of after them (the demo's time then is the
    // longer of the two, not their sum; its figures are the same, the simulator being
    // deterministic).
    let beside = if o.dense_slice > 0 { other_cpu() } else { None };
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| -> Result<DemoReport> {
        let dense = match beside {
            Some(cpu) => {
                say(&format!(
                    "{} (on CPU {cpu}, beside the mounts)",
                    dense_intro(o)?
                ));
                let stop = &stop;
                Some(scope.spawn(move || {
                    pin_to_cpu(cpu);
                    run_dense(o, false, stop)
                }))
            }
            None => None,
        };
        let main = match &why {
            None => run_mounted(o, &cfg, say),
            Some(reason) => {
                say(&format!(
                    "FUSE is not available, so the demo runs on the simulated store instead: \
                     {reason}"
                ));
                run_simulated(o, &cfg, say)
            }
        };
        if main.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let dense = dense.map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(anyhow!("the dense part's thread panicked")))
        });
        let mut report = main?;
        report.simulated_because = why;
        report.dense = match dense {
            Some(d) => Some(d?),
            None if o.dense_slice > 0 => {
                say(&dense_intro(o)?);
                Some(run_dense(o, o.progress, &stop)?)
            }
            None => None,
        };
        Ok(report)
    })
    .map(|mut report| {
        report.findings = report::findings(&report);
        report.wall_seconds = started.elapsed().as_secs_f64();
        report
    })
}

fn run_mounted(o: &DemoOptions, cfg: &GenConfig, say: &mut dyn FnMut(&str)) -> Result<DemoReport> {
    pin_to_one_cpu();
    let work = work_dir()?;
    // The store on a tmpfs of its own (unless it is kept): its inode numbers, and so the
    // model's metadata blocks, are the same on every run, whatever /dev/shm holds.
    let store_fs = work.path().join("store-fs");
    std::fs::create_dir(&store_fs).with_context(|| format!("creating {}", store_fs.display()))?;
    let private = !o.keep && crate::fsutil::mount_private_tmpfs(&store_fs).is_ok();
    let store = if private {
        store_fs.join("store")
    } else {
        work.path().join("store")
    };
    let mnt = work.path().join("mnt");
    let mut cleanup = Cleanup {
        child: None,
        mnt: None,
        tmpfs: private.then(|| store_fs.clone()),
        work: Some(work),
        keep: o.keep,
    };
    std::fs::create_dir(&mnt).with_context(|| format!("creating {}", mnt.display()))?;
    let traces = o.out.join("traces");
    let logs = o.out.join("logs");
    for d in [&traces, &logs] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }

    say(&format!(
        "generating the {} store (seed {}) in {}",
        o.preset,
        o.seed,
        store.display()
    ));
    let history = crate::gen::build_history(cfg)?;
    let generated = crate::fsutil::now_epoch();
    let truth = crate::gen::writer::write_store(
        cfg,
        &history,
        &store,
        &crate::gen::writer::WriteOptions {
            owner: None,
            progress: o.progress,
            now: generated,
        },
    )?;
    interrupted()?;
    // The simulator numbers its inodes from here, in the writer's creation order.
    let root_ino = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&store)
            .with_context(|| format!("reading {}", store.display()))?
            .ino()
    };

    // The mounts load the model from a file: presets and model files alike.
    let model_file = logs.join("model.json");
    std::fs::write(&model_file, serde_json::to_vec_pretty(&o.model)?)
        .with_context(|| format!("writing {}", model_file.display()))?;
    let mut rows = Vec::new();
    let mut phases = Vec::new();
    let at = MountedPaths {
        store: &store,
        mnt: &mnt,
        model_file: &model_file,
        traces: &traces,
        logs: &logs,
    };
    for &strategy in &o.strategies {
        let (row, phase) = run_strategy(o, strategy, &at, &mut cleanup, &truth, say)?;
        rows.push(row);
        phases.push(phase);
    }
    let store_kept = o.keep.then(|| store.display().to_string());
    drop(cleanup);
    let traces_kept = Some(traces_kept(o, &traces)?);

    say(&format!(
        "simulating the same store (inode numbers from its root, {root_ino}) with every \
         strategy, to compare with the mount"
    ));
    let setup = crate::sim::SimSetup {
        cfg: cfg.clone(),
        params: o.model.clone(),
        digests: crate::sim::DigestMode::Exact,
        first_ino: root_ino,
        now: generated,
        slice: crate::sim::Slice::WHOLE,
    };
    let sim_store = crate::sim::build_from(&setup, history)?;
    let simulated = simulate_rows(&sim_store, &o.model, &o.strategies, o.progress, &NO_STOP)?;
    let sim_check = compare(&rows, &simulated);
    Ok(DemoReport {
        mode: "fuse",
        simulated_because: None,
        preset: o.preset.clone(),
        seed: o.seed,
        model: o.model.name.clone(),
        chunks: truth.chunk_files,
        referenced_chunks: truth.referenced_chunks,
        references: truth.references,
        rows,
        findings: Vec::new(),
        store: store_kept,
        traces: traces_kept,
        wall_seconds: 0.0,
        sim_check,
        dense: None,
        phases,
    })
}

/// Where one demo's mounted runs find what they share.
struct MountedPaths<'a> {
    /// The generated store.
    store: &'a Path,
    /// The mountpoint every strategy's mount uses in turn.
    mnt: &'a Path,
    /// The model, as a file for the mounts.
    model_file: &'a Path,
    /// The mounts' traces.
    traces: &'a Path,
    /// Their logs, stats and task logs.
    logs: &'a Path,
}

/// One strategy: a fresh shadow mount with the model, the GC and the check through it, the
/// unmount, the trace analysed. Returns its row and its phase 1.
fn run_strategy(
    o: &DemoOptions,
    strategy: Strategy,
    at: &MountedPaths,
    cleanup: &mut Cleanup,
    truth: &crate::gen::truth::GroundTruth,
    say: &mut dyn FnMut(&str),
) -> Result<(Row, (String, Phase))> {
    let name = strategy.name();
    say(&format!(
        "{name}: mounting (shadow, model {}), running the GC, checking",
        o.model.name
    ));
    let trace = at.traces.join(format!("{name}.trace"));
    // The mount's final counters (sweep included) stay in the report's logs for the user.
    let stats = at.logs.join(format!("mount-{name}.json"));
    let mount_log = at.logs.join(format!("mount-{name}.log"));
    let log = std::fs::File::create(&mount_log)
        .with_context(|| format!("creating {}", mount_log.display()))?;
    *MOUNTED.lock().unwrap_or_else(|p| p.into_inner()) = Some(at.mnt.to_path_buf());
    let child = Command::new(&o.exe)
        .arg("mount")
        .arg("--store")
        .arg(at.store)
        .arg("--mountpoint")
        .arg(at.mnt)
        .arg("--shadow")
        .arg("--model")
        .arg(at.model_file)
        .args(["--time-scale", "0"])
        .arg("--trace")
        .arg(&trace)
        .arg("--stats")
        .arg(&stats)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {} mount", o.exe.display()))?;
    cleanup.child = Some(child);
    cleanup.mnt = Some(at.mnt.to_path_buf());
    wait_mounted(cleanup, &mount_log)?;

    let gc = gc_and_check(at.mnt, strategy, at.logs, truth, o.progress)?;
    cleanup.unmount()?;
    interrupted()?;
    let analysed = analysis::analyze(&trace, analysis::Options::default())?;
    let phase = |p: u8| {
        analysed
            .phases
            .iter()
            .find(|x| x.name == Marker::section_name(p, name))
    };
    let p1 = phase(1).ok_or_else(|| anyhow!("{}: no phase 1", trace.display()))?;
    let p2 = phase(2);
    Ok((
        row(strategy, gc, p1, p2, truth),
        (name.to_string(), p1.clone()),
    ))
}

/// The mounts' traces: their size, and removed unless `--keep`.
fn traces_kept(o: &DemoOptions, traces: &Path) -> Result<TracesKept> {
    let bytes = std::fs::read_dir(traces)
        .with_context(|| format!("listing {}", traces.display()))?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    if !o.keep {
        std::fs::remove_dir_all(traces)
            .with_context(|| format!("removing {}", traces.display()))?;
    }
    Ok(TracesKept {
        dir: traces.display().to_string(),
        bytes,
        kept: o.keep,
    })
}

/// Each strategy's mounted run beside the simulator's run of it.
fn compare(rows: &[Row], simulated: &[Row]) -> Vec<SimCheck> {
    rows.iter()
        .zip(simulated)
        .map(|(m, s): (&Row, &Row)| SimCheck {
            strategy: m.strategy,
            mount: GcCounts::of(&m.counters),
            simulated: GcCounts::of(&s.counters),
            mount_phase1_ns: m.phase1_modeled_ns,
            simulated_phase1_ns: s.phase1_modeled_ns,
        })
        .collect()
}

/// Waits until the child's mount is there (or says why it is not).
fn wait_mounted(c: &mut Cleanup, log: &Path) -> Result<()> {
    let mnt = c.mnt.clone().expect("mountpoint");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        interrupted()?;
        if is_mounted(&mnt) {
            return Ok(());
        }
        let child = c.child.as_mut().expect("child");
        if let Some(status) = child.try_wait()? {
            c.child = None;
            let text = std::fs::read_to_string(log).unwrap_or_default();
            bail!(
                "chunkscope mount exited ({status}) before mounting {}: {}",
                mnt.display(),
                text.trim()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "{} was not mounted after 30 s (log: {})",
                mnt.display(),
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the GC (both phases) through the mount with markers, then `check` on the mount;
/// `progress` draws its phases' bars on standard error (the task log goes to its file).
fn gc_and_check(
    mnt: &Path,
    strategy: Strategy,
    logs: &Path,
    truth: &crate::gen::truth::GroundTruth,
    progress: bool,
) -> Result<GcOutcome> {
    let name = strategy.name();
    let mut store = DirStore::open(mnt).with_context(|| format!("opening {}", mnt.display()))?;
    store.set_layout_check(crate::overlay::control::layout_check(socket_for(mnt)));
    let mut client = Client::connect(&socket_for(mnt))?;
    let opts = GcOptions {
        strategy,
        phases: Phases::All,
        // Shadow mode refuses new files (EROFS): no .lock file, no test chunk insert.
        atime_check: false,
        ..GcOptions::default()
    };
    let gc_log = logs.join(format!("gc-{name}.log"));
    let file =
        std::fs::File::create(&gc_log).with_context(|| format!("creating {}", gc_log.display()))?;
    let mut log = TaskLog::new(Box::new(std::io::BufWriter::new(file)), progress).labelled(name);
    let started = Instant::now();
    // The model's totals when phase 1 ends: the table's reads and writes are phase 1's.
    let mut phase1: Option<Phase1Cost> = None;
    let mut mark = |b: gc::Boundary| -> Result<()> {
        client.mark(&Marker::phase(b.phase.number(), b.start, b.strategy.name()).encode())?;
        if b.phase == gc::GcPhase::Mark && !b.start {
            let model = client
                .stats()?
                .model
                .ok_or_else(|| anyhow!("the demo's mount has no model"))?;
            let (totals, open_txg) = (model.totals, model.dirty_blocks);
            phase1 = Some(Phase1Cost {
                reads: totals.reads(),
                block_writes: totals.blocks_written + open_txg,
                totals,
            });
        }
        Ok(())
    };
    let report = gc::run(
        &store,
        &opts,
        &mut log,
        Hooks {
            boundary: Some(&mut mark),
            after_index: None,
            cutoff_fixed: None,
        },
    );
    let wall = started.elapsed().as_secs_f64();
    interrupted()?;
    let report =
        report.with_context(|| format!("the {name} GC failed (its log: {})", gc_log.display()))?;
    let phase1 =
        phase1.ok_or_else(|| anyhow!("the {name} GC ended without a phase 1 end marker"))?;
    client.mark("check start")?;
    let check = crate::check::check_store(
        mnt,
        &crate::check::CheckOptions {
            deep: false,
            cutoff_minutes: truth.cutoff_minutes,
            now: crate::fsutil::now_epoch(),
            threads: 1,
            markers: false,
        },
    )?;
    client.mark("check end")?;
    let ok = check.ok() && check.referenced_chunks == truth.referenced_chunks;
    if !ok {
        bail!(
            "after the {name} GC, check found problems on {}: {} missing chunks, {} corrupt \
             indexes — the GC removed something it must not have",
            mnt.display(),
            check.missing_chunks.len(),
            check.corrupt_indexes.len()
        );
    }
    Ok(GcOutcome {
        counters: report.counters,
        phase1,
        wall,
        check_ok: ok,
    })
}

/// What phase 1 cost the model.
#[derive(Clone, Debug, Default)]
pub struct Phase1Cost {
    /// Demand and prefetch reads.
    pub reads: u64,
    /// Blocks written back, the still open transaction group included.
    pub block_writes: u64,
    /// The model's totals then.
    pub totals: Totals,
}

/// What one GC through the mount did.
struct GcOutcome {
    counters: Counters,
    phase1: Phase1Cost,
    wall: f64,
    check_ok: bool,
}

fn row(
    strategy: Strategy,
    gc: GcOutcome,
    p1: &Phase,
    p2: Option<&Phase>,
    truth: &crate::gen::truth::GroundTruth,
) -> Row {
    let c = gc.counters;
    let lookups = p1
        .ops
        .iter()
        .filter(|o| o.op == "lookup")
        .map(|o| o.count)
        .sum();
    Row {
        strategy,
        touches: c.utimensat_calls,
        listings: c.listings + c.sweep_listings,
        lookups,
        metadata_reads: gc.phase1.reads,
        block_writes: gc.phase1.block_writes,
        phase1_modeled_ns: p1.modeled_ns,
        phase2_modeled_ns: p2.map_or(0, |p| p.modeled_ns),
        phase1_chunks_per_s: truth.referenced_chunks as f64
            / (p1.modeled_ns as f64 / 1e9).max(1e-9),
        wall_seconds: gc.wall,
        digest_hit_ratio: c.digest_hit_ratio(),
        removed_chunks: c.removed_chunks,
        check_ok: gc.check_ok,
        counters: c,
        model: gc.phase1.totals,
    }
}
