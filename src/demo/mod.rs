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

pub mod report;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use crate::analysis::{self, Phase};
use crate::gc::log::TaskLog;
use crate::gc::{self, Counters, GcOptions, Hooks, Phases, Strategy};
use crate::gen::GenConfig;
use crate::model::{ModelParams, Totals};
use crate::overlay::control::{socket_for, Client};
use crate::overlay::session::{is_mounted, unmount};
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

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The mountpoint in use, for the signal thread to unmount.
static MOUNTED: Mutex<Option<PathBuf>> = Mutex::new(None);

fn interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

/// Whether the error is the user's interrupt (the caller exits quietly with 130).
pub fn was_interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Blocks SIGINT and SIGTERM in this process and handles them on a thread: mark the demo
/// interrupted and unmount the current mount, which makes the running GC fail at once.
fn handle_signals() -> Result<()> {
    crate::fsutil::TerminationSignals::block().handle("demo-signals", || {
        INTERRUPTED.store(true, Ordering::SeqCst);
        tracing::warn!("interrupted; unmounting and cleaning up");
        if let Some(m) = MOUNTED.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = unmount(m);
        }
    })?;
    Ok(())
}

/// Keeps this thread (and every thread and process it starts from now on) on one CPU: the
/// first it may run on. A FUSE request is a round trip between the GC and the mount's
/// threads, and on a VM waking a thread on the other CPU costs more than the request itself
/// (BENCHMARKS.md: lru's phase 1 on `small` took 4.0 s on one CPU, 9.0 s on two). The modelled
/// costs do not depend on it; the wall column does.
fn pin_to_one_cpu() {
    // SAFETY: cpu_set_t is plain data; the calls only read and write it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return;
        }
        let Some(cpu) = (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set)) else {
            return;
        };
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
    }
}

/// Why a FUSE mount cannot work here, with what to do about it; `None` when it can.
pub fn fuse_unavailable() -> Option<String> {
    let dev = Path::new("/dev/fuse");
    if !dev.exists() {
        return Some(
            "/dev/fuse does not exist: load the module (modprobe fuse) or, in a container, \
             pass the device in (docker run --device /dev/fuse --cap-add SYS_ADMIN)"
                .into(),
        );
    }
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open(dev) {
        return Some(format!(
            "/dev/fuse cannot be opened ({e}): run as root, or give your user access to it"
        ));
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let fusermount = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").exists()));
    if !root && !fusermount {
        return Some(
            "not root and no fusermount3 on the PATH: run as root, or install fuse3 \
             (apt-get install fuse3)"
                .into(),
        );
    }
    if !root {
        return Some(
            "not root: the overlay opens backing files by handle, which needs root \
             (CAP_DAC_READ_SEARCH); run the demo with sudo"
                .into(),
        );
    }
    None
}

/// A temporary directory for the store and the mountpoint: tmpfs where there is one.
fn work_dir() -> Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix("chunkscope-demo-")
        .tempdir_in(&base)
        .with_context(|| format!("creating a work directory in {}", base.display()))
}

/// Undoes what the demo set up, whatever way it ends: unmount, wait for the mount process,
/// unmount the store's tmpfs, remove the work directory (unless it is kept).
struct Cleanup {
    child: Option<Child>,
    mnt: Option<PathBuf>,
    /// The store's own tmpfs, mounted in the work directory.
    tmpfs: Option<PathBuf>,
    work: Option<tempfile::TempDir>,
    keep: bool,
}

impl Cleanup {
    fn unmount(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let mnt = self.mnt.take().expect("a mountpoint with the child");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // Unmount first: a mount process that died leaves its mount behind (ENOTCONN).
            if is_mounted(&mnt) {
                let _ = unmount(&mnt);
            }
            if child.try_wait()?.is_some() && !is_mounted(&mnt) {
                break;
            }
            if Instant::now() > deadline {
                // Our own child, by its pid: it did not end after its unmount.
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "the mount process {} did not exit after unmounting {}",
                    child.id(),
                    mnt.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        *MOUNTED.lock().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(())
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = self.unmount();
        if let Some(t) = self.tmpfs.take() {
            let _ = unmount(&t);
        }
        if let Some(w) = self.work.take() {
            if self.keep {
                let _ = w.keep();
            }
        }
    }
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
    let mut report = match &why {
        None => run_mounted(o, &cfg, say)?,
        Some(reason) => {
            say(&format!(
                "FUSE is not available, so the demo runs on the simulated store instead: {reason}"
            ));
            run_simulated(o, &cfg, say)?
        }
    };
    report.simulated_because = why;
    if o.dense_slice > 0 {
        report.dense = Some(run_dense(o, say)?);
    }
    report.findings = report::findings(&report);
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
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
    for &strategy in &o.strategies {
        let name = strategy.name();
        say(&format!(
            "{name}: mounting (shadow, model {}), running the GC, checking",
            o.model.name
        ));
        let trace = traces.join(format!("{name}.trace"));
        // The mount's final counters (sweep included) stay in the report's logs for the user.
        let stats = logs.join(format!("mount-{name}.json"));
        let mount_log = logs.join(format!("mount-{name}.log"));
        let log = std::fs::File::create(&mount_log)
            .with_context(|| format!("creating {}", mount_log.display()))?;
        *MOUNTED.lock().unwrap_or_else(|p| p.into_inner()) = Some(mnt.clone());
        let child = Command::new(&o.exe)
            .arg("mount")
            .arg("--store")
            .arg(&store)
            .arg("--mountpoint")
            .arg(&mnt)
            .arg("--shadow")
            .arg("--model")
            .arg(&model_file)
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
        cleanup.mnt = Some(mnt.clone());
        wait_mounted(&mut cleanup, &mount_log)?;

        let gc = gc_and_check(&mnt, strategy, &logs, &truth, o.progress)?;
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
        rows.push(row(strategy, gc, p1, p2, &truth));
        phases.push((name.to_string(), p1.clone()));
    }
    let store_kept = o.keep.then(|| store.display().to_string());
    drop(cleanup);
    let bytes = std::fs::read_dir(&traces)
        .with_context(|| format!("listing {}", traces.display()))?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    if !o.keep {
        std::fs::remove_dir_all(&traces)
            .with_context(|| format!("removing {}", traces.display()))?;
    }
    let traces_kept = Some(TracesKept {
        dir: traces.display().to_string(),
        bytes,
        kept: o.keep,
    });

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
    let simulated = simulate_rows(&sim_store, &o.model, &o.strategies, o.progress)?;
    let sim_check = rows
        .iter()
        .zip(&simulated)
        .map(|(m, s): (&Row, &Row)| SimCheck {
            strategy: m.strategy,
            mount: GcCounts::of(&m.counters),
            simulated: GcCounts::of(&s.counters),
            mount_phase1_ns: m.phase1_modeled_ns,
            simulated_phase1_ns: s.phase1_modeled_ns,
        })
        .collect();
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

fn run_simulated(
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
    let rows = simulate_rows(&store, &o.model, &o.strategies, o.progress)?;
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
fn simulate_rows(
    store: &crate::sim::SimStore,
    model: &ModelParams,
    strategies: &[Strategy],
    progress: bool,
) -> Result<Vec<Row>> {
    let mut params = model.clone();
    store.fill_dir_entries(&mut params);
    let mut rows = Vec::new();
    for &strategy in strategies {
        interrupted()?;
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

/// The strategies on a slice of datastore B, on its pool: the density of the threads'
/// stores, which the demo's own store (made to mount and trace in a minute) is far from.
fn run_dense(o: &DemoOptions, say: &mut dyn FnMut(&str)) -> Result<Dense> {
    let started = Instant::now();
    let slice = crate::sim::Slice::new(o.dense_slice)?;
    let mut cfg = GenConfig::preset(DENSE_PRESET)?;
    cfg.scale = 1.0; // the thread's store, sliced below, not the generator's 1% of it
    cfg.seed = o.seed;
    let model = ModelParams::preset(DENSE_MODEL)?;
    say(&format!(
        "simulating a {} slice of {DENSE_PRESET} ({} of its 65,536 chunk directories, the \
         threads' density) on its pool, {DENSE_MODEL}",
        slice.label(),
        crate::units::thousands(slice.chunk_dirs() as u64)
    ));
    let setup = crate::sim::SimSetup {
        cfg,
        params: model.clone(),
        digests: crate::sim::DigestMode::Hashed,
        first_ino: 1000,
        now: crate::fsutil::now_epoch_coarse(),
        slice,
    };
    let store = crate::sim::build(&setup)?;
    let rows = simulate_rows(&store, &model, &o.strategies, o.progress)?;
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
