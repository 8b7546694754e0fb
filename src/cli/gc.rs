//! `chunkscope gc`

use std::fs::OpenOptions;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use super::Outcome;
use crate::gc::log::TaskLog;
use crate::gc::{self, GcOptions, Hooks, Phases, Strategy};
use crate::overlay::control::{default_socket, Client};
use crate::store::dir::DirStore;
use crate::store::IndexOrder;
use crate::trace::Marker;

/// Run a PBS-compatible garbage collection with one of the phase-1 strategies of the threads.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope gc --dry-run /dev/shm/tiny\n  \
    chunkscope gc --strategy batched --batch-size 131072 /datastore/pbs\n  \
    # through a mount (mount-scripts/ on the PATH), its trace in t.trace:\n  \
    chunkscope-run /dev/shm/tiny t.trace -- chunkscope gc '$CHUNKSCOPE_MNT'\n\n\
    Output is PBS's task log (on a terminal, progress bars instead of percentage lines), then\n\
    chunkscope's counters. On a chunkscope mount, phase markers go into the mount's trace.\n\
    The store's .lock (fcntl) is taken exclusively, as an external GC must: the run is refused\n\
    while a backup, sync or PBS's own GC holds it. Once the cutoff is fixed it is held shared:\n\
    backups that start later run (their chunks are newer than the cutoff), a second GC cannot\n\
    start. --exclusive holds it exclusively to the end.\n\n\
    On a --shadow mount (gc asks the mount's daemon), nothing reaches the store: no lock is\n\
    taken, the access-time check is skipped, and the task log says what a real run would\n\
    have removed.\n\n\
    Nothing referenced is ever removed: the sweep runs only after phase 1 finished without\n\
    errors other than missing chunks, and it removes a chunk only if no index references it,\n\
    whatever its atime (--phase sweep alone reads every index first). A referenced chunk PBS\n\
    would have removed (phase 1 saw it missing, or it was not marked) is kept and named.\n\n\
    Exit status: 0 finished clean (TASK OK); 1 finished with warnings (missing chunks, kept\n\
    referenced chunks, chunks that are not regular files, unexpected index files: TASK\n\
    WARNINGS); 2 aborted (the error says in which phase and what was removed before it).")]
pub struct GcArgs {
    /// The datastore (or a chunkscope mount of one); for an S3 datastore, its local cache.
    store: PathBuf,
    /// An S3 datastore (PBS 4): its objects are in this bucket, STORE is its local cache;
    /// phase 2 lists and deletes objects, phase 3 sweeps the local markers.
    #[command(flatten)]
    s3: super::s3_args::S3Args,
    /// S3: the order phase 2 takes each listing page's objects in: key (PBS 4's: digest
    /// order, uncorrelated with where the local files' inodes are) or inode (chunkscope's
    /// variant: the page's chunk directories listed once for their inode numbers, then the
    /// local files stat'ed in inode order).
    #[arg(long, value_enum, default_value = "key", value_name = "ORDER")]
    s3_page_order: gc::PageOrder,
    /// When and in what order phase 1 touches chunks.
    #[arg(long, value_enum, default_value = "lru")]
    strategy: Strategy,
    #[command(flatten)]
    tuning: TuningArgs,
    /// Minutes an unreferenced chunk is kept after its last access (PBS gc-atime-cutoff).
    #[arg(long, default_value_t = gc::DEFAULT_CUTOFF_MINUTES, value_parser = clap::value_parser!(u64).range(1..=2880), value_name = "MINUTES")]
    cutoff: u64,
    /// Run only phase 1 (mark), only phase 2 (sweep), or both.
    #[arg(long, value_enum, default_value = "all")]
    phase: Phases,
    /// Change nothing: phase 1 reads the indexes without touching, phase 2 counts what a GC
    /// would remove now (unreferenced chunks older than the cutoff, with their bytes) and
    /// removes nothing. The access-time check, which writes the zero chunk, is skipped.
    #[arg(long)]
    dry_run: bool,
    /// The report (options, PBS status, chunkscope counters) as JSON: `--json` on standard
    /// output (the task log then goes to standard error), `--json=FILE` into FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    json: Option<PathBuf>,
    /// Do not take the lock on .lock (only when nothing else can write the store: a copy. A
    /// --shadow mount needs no flag: gc asks its daemon and takes no lock there).
    #[arg(long, conflicts_with = "exclusive")]
    no_lock: bool,
    /// Hold .lock exclusively for the whole run, blocking every backup that starts meanwhile
    /// (by default it is exclusive only until the cutoff is fixed, then shared: new backups
    /// run, a second GC cannot start).
    #[arg(long)]
    exclusive: bool,
    /// Skip PBS's access-time safety check (it inserts the 4 MiB zero chunk, sleeps 1 s and
    /// verifies that an explicit atime update shows up).
    #[arg(long)]
    no_atime_check: bool,
    /// On a chunkscope mount, write no phase markers into its trace: the trace then looks
    /// like a real PBS's GC, whose phases `analyze` infers from the requests.
    #[arg(long)]
    no_markers: bool,
    /// Write the phase markers into the trace of this chunkscope mount instead: the mount
    /// under the store's filesystem (a `--disk` mount holding its image, as `testbed` runs
    /// it), so its device trace says which phase each read and write served.
    #[arg(long, value_name = "MNT", conflicts_with = "no_markers")]
    mark_mount: Option<PathBuf>,
    /// Write .gc-status into the store after a successful run, as PBS does.
    #[arg(long)]
    write_gc_status: bool,
    /// Write the task log into FILE as PBS's task-log files have it: every line with its
    /// time (UTC, to the millisecond), the percentage lines included, and a line naming the
    /// strategy. `chunkscope calibrate` fits a pool's model to such a log (or to PBS's own).
    #[arg(long, value_name = "FILE")]
    task_log: Option<PathBuf>,
}

/// The strategies' knobs, shared with `simulate`.
#[derive(Args, Debug)]
pub struct TuningArgs {
    /// Digest cache entries, as the datastore's gc-cache-capacity tuning option (default
    /// 1048576, PBS's when the option is not set; when it is, 0 included, the task log says
    /// so as PBS's does); 0 turns the cache off.
    #[arg(long, value_name = "N")]
    pub cache_capacity: Option<usize>,
    /// Digests per batch (batched, inode-order).
    #[arg(long, default_value_t = gc::DEFAULT_BATCH_SIZE, value_name = "N")]
    pub batch_size: usize,
    /// The order phase 1 visits the index files in: iterator (PBS 3.3.5 and later), walk
    /// (3.3.4 and earlier, unpatched's default) or hash-set (between the two, in thread
    /// 000's series); default: the strategy's.
    #[arg(long, value_name = "ORDER")]
    pub index_order: Option<IndexOrder>,
    /// Threads listing chunk directories in the prefetch pass.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64), value_name = "N")]
    pub prefetch_jobs: u16,
}

impl TuningArgs {
    pub fn validate(&self) -> Result<()> {
        validate_cache_capacity(self.capacity())
    }

    /// The digest cache's capacity: the option's, or PBS's default.
    pub fn capacity(&self) -> usize {
        self.cache_capacity.unwrap_or(gc::DEFAULT_CACHE_CAPACITY)
    }
}

/// Refuses a `--cache-capacity` PBS would refuse.
pub fn validate_cache_capacity(capacity: usize) -> Result<()> {
    if capacity > gc::MAX_CACHE_CAPACITY {
        bail!(
            "--cache-capacity {capacity} exceeds PBS's maximum of {}",
            gc::MAX_CACHE_CAPACITY
        );
    }
    Ok(())
}

/// Takes PBS's chunk-store lock exclusively without waiting (format document 1.6, 3.12).
fn lock_store(store: &Path) -> Result<std::fs::File> {
    let path = store.join(crate::datastore::paths::LOCK_FILE);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::EROFS) {
                " (the store is on a read-only filesystem: a GC sets atimes and removes chunks, \
                 so it cannot run there; 'gc --dry-run --no-lock' counts what it would remove, \
                 and a GC on a --shadow mount of the store runs whole without changing it)"
            } else {
                ""
            };
            anyhow::anyhow!("opening {}: {e}{hint}", path.display())
        })?;
    if let Err(e) = set_lock(&f, libc::F_WRLCK) {
        if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
            bail!(
                "another process holds a lock on {} (a backup, sync or tape restore, or a GC): \
                 refusing to collect, as PBS's own GC does; run it again once that is done \
                 (a GC that started now could not know how old that process's chunks are, and \
                 could remove chunks it is writing)",
                path.display()
            );
        }
        return Err(e).with_context(|| format!("locking {}", path.display()));
    }
    Ok(f)
}

/// `fcntl(F_SETLK)` of `kind` over the whole file (PBS's ProcessLocker's record locks). From
/// `F_WRLCK` to `F_RDLCK` on the same descriptor is one atomic conversion: there is no moment
/// without a lock.
fn set_lock(f: &std::fs::File, kind: libc::c_int) -> std::io::Result<()> {
    // SAFETY: a plain C struct; zeroes are a valid value (the whole file from offset 0).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: valid fd and flock.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &fl) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn upid(store: &Path, start: i64) -> String {
    let node = crate::fsutil::hostname();
    let name = store
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(
        "UPID:{}:{:08X}:00000000:00000000:{:08X}:garbage_collection:{}:root@pam:",
        node,
        std::process::id(),
        start,
        name
    )
}

/// The control socket of the chunkscope mount `mount`, when this process can reach it
/// (another user may not: then the GC runs as on any directory), and whether that mount is a
/// `--shadow` one (its stats count shadowed unlinks): one connection.
fn mount_daemon(mount: Option<&Path>) -> Option<(PathBuf, bool)> {
    let socket = default_socket(mount?).ok()?;
    let mut client = Client::connect(&socket).ok()?;
    let shadow = client.stats().is_ok_and(|s| s.shadow_unlinks.is_some());
    Some((socket, shadow))
}

/// The run's options from the command line.
fn options(args: &GcArgs, shadow: bool) -> GcOptions {
    GcOptions {
        s3: false,
        s3_page_order: args.s3_page_order,
        strategy: args.strategy,
        cache_capacity: args.tuning.capacity(),
        cache_capacity_tuned: args.tuning.cache_capacity.is_some(),
        batch_size: args.tuning.batch_size,
        index_order: args.tuning.index_order,
        prefetch_jobs: args.tuning.prefetch_jobs as usize,
        cutoff_minutes: args.cutoff,
        phases: args.phase,
        dry_run: args.dry_run,
        // What runs: a dry run and a --shadow mount skip the check whatever the flag.
        atime_check: !args.no_atime_check && !args.dry_run && !shadow,
        shadow,
    }
}

/// A connection to the mount's daemon for phase markers (None: not a mount, or markers off).
fn marker_client(mount: Option<&Path>, no_markers: bool) -> Option<Client> {
    let mnt = mount.filter(|_| !no_markers)?;
    match default_socket(mnt).and_then(|s| Client::connect(&s)) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(
                "{} is a chunkscope mount, but markers are off: {e:#}",
                mnt.display()
            );
            None
        }
    }
}

/// A connection to the daemon of `--mark-mount MNT`, which must be a chunkscope mount.
fn mark_mount_client(m: &Path) -> Result<Client> {
    let m = m
        .canonicalize()
        .with_context(|| format!("--mark-mount {}", m.display()))?;
    let socket = default_socket(&m)
        .with_context(|| format!("--mark-mount {}: not a chunkscope mount", m.display()))?;
    Client::connect(&socket)
        .with_context(|| format!("--mark-mount {}: its control socket", m.display()))
}

pub fn run(args: GcArgs) -> Result<Outcome> {
    args.tuning.validate()?;
    let bucket = args.s3.client()?;
    let (store_path, store, mount, shadow) = open_store(&args.store)?;
    let lock = if args.no_lock || shadow {
        None
    } else {
        Some(lock_store(&store_path)?)
    };
    let opts = options(&args, shadow);
    let mut client = match &args.mark_mount {
        Some(m) => Some(mark_mount_client(m)?),
        None => marker_client(mount.as_deref(), args.no_markers),
    };
    let mut mark = |b: gc::Boundary| -> Result<()> {
        match &mut client {
            Some(c) => c
                .mark(&Marker::phase(b.phase.number(), b.start, b.strategy.name()).encode())
                .map(drop),
            None => Ok(()),
        }
    };
    // With the report as JSON on standard output, the task log and the counters go to
    // standard error.
    let json_out = super::to_stdout(&args.json);
    let text_out = || -> Box<dyn std::io::Write> {
        if json_out {
            Box::new(std::io::stderr())
        } else {
            Box::new(std::io::stdout())
        }
    };
    let mut task_log_error = None;
    let mut log = TaskLog::new(text_out(), super::stderr_is_terminal());
    if let Some(path) = &args.task_log {
        log = log.tapped(task_log_file(
            path,
            &store_path,
            args.strategy,
            &mut task_log_error,
        )?);
    }
    if shadow {
        log.info(&format!(
            "{} is a --shadow chunkscope mount: nothing this GC does reaches the store (its \
             touches and removals stay in the mount's memory), so .lock is not taken.",
            mount.as_deref().unwrap_or(&store_path).display()
        ));
    }
    // Format document 3.12: exclusive until the cutoff is fixed (no writer of another process
    // was running then), shared from there on (backups that start later touch their chunks
    // after the cutoff; a second GC still cannot take the lock).
    let share = lock.as_ref().filter(|_| !args.exclusive).map(|f| {
        Box::new(move || {
            Some(match set_lock(f, libc::F_RDLCK) {
                Ok(()) => "Holding the chunk store lock shared from here on: backups may start, \
                           another GC may not (--exclusive keeps it exclusive)."
                    .to_string(),
                Err(e) => {
                    format!("Keeping the chunk store lock exclusive (sharing it failed: {e}).")
                }
            })
        }) as Box<dyn FnOnce() -> Option<String>>
    });
    let hooks = Hooks {
        boundary: Some(&mut mark),
        after_index: None,
        cutoff_fixed: share,
    };
    let run = match &bucket {
        Some(b) => gc::run_s3(&store, b, &opts, &mut log, hooks),
        None => gc::run(&store, &opts, &mut log, hooks),
    };
    let report = match run {
        Ok(r) => r,
        Err(e) => {
            log.info(&format!("TASK ERROR: {e:#}"));
            super::log::error_shown(json_out);
            if let (Some(dest), Some(a)) = (&args.json, e.downcast_ref::<gc::Aborted>()) {
                let aborted = serde_json::json!({
                    "outcome": "aborted",
                    "error": format!("{e:#}"),
                    "phase": a.phase,
                    "report": a.report,
                });
                super::write_json(dest, &aborted)?;
            }
            return Err(e);
        }
    };
    if args.write_gc_status {
        if shadow {
            tracing::warn!(".gc-status not written: a --shadow mount refuses writes");
        } else {
            write_gc_status(&store_path, &report)?;
        }
    }
    if report.warnings > 0 {
        log.info(&format!("TASK WARNINGS: {}", report.warnings));
    } else {
        log.info("TASK OK");
    }
    drop(log);
    print_counters(&mut text_out(), &report.options, &report.counters)?;
    if let Some(dest) = &args.json {
        super::write_json(dest, &report)?;
    }
    if let (Some(e), Some(path)) = (task_log_error, &args.task_log) {
        bail!(
            "--task-log {}: writing it failed ({e}); the GC itself finished",
            path.display()
        );
    }
    Ok(if report.warnings > 0 {
        Outcome::ProblemsFound
    } else {
        Outcome::Ok
    })
}

/// The store (canonical path, opened), the chunkscope mount it is on (if any) and whether
/// that is a --shadow mount.
fn open_store(path: &Path) -> Result<(PathBuf, DirStore, Option<PathBuf>, bool)> {
    let store_path = path
        .canonicalize()
        .with_context(|| format!("store {}", path.display()))?;
    // Diagnosed only when the open fails: on a mount, a GC's requests are the simulator's
    // (`sim::ops`), and a check first would add its own.
    let mut store = DirStore::open(&store_path).map_err(|e| {
        crate::datastore::access::chunk_dir(&store_path)
            .err()
            .unwrap_or_else(|| anyhow::Error::new(e))
            .context(format!("opening the datastore {}", store_path.display()))
    })?;
    let mount = crate::overlay::control::mount_of(&store_path);
    // A --shadow mount keeps touches and unlinks in its memory and refuses every other
    // write: nothing this GC does reaches the store, so there is nothing to lock against,
    // and the atime check would test the mount's memory.
    let (socket, shadow) =
        mount_daemon(mount.as_deref()).map_or((None, false), |(s, sh)| (Some(s), sh));
    // The daemon checks its backing store: it sees the mounts there, and the trace gets only
    // the GC's own requests. A caller that cannot reach its socket (another user) checks
    // through the mount.
    if let Some(socket) = socket
        .as_ref()
        .filter(|_| mount.as_ref() == Some(&store_path))
    {
        store.set_layout_check(crate::overlay::control::layout_check(socket.clone()));
    }
    Ok((store_path, store, mount, shadow))
}

/// `--task-log FILE`: each line into FILE with its time, as PBS's task-log files have them,
/// and the strategy after the first; the first write error into `error`.
fn task_log_file<'a>(
    path: &Path,
    store: &Path,
    strategy: Strategy,
    error: &'a mut Option<std::io::Error>,
) -> Result<impl FnMut(&str) + 'a> {
    use std::io::Write;
    // Never into the store: a log there would overwrite whatever it is named after (an
    // index, .lock) or sit among the chunks; nor through a symbolic or hard link to a file
    // there.
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = parent
        .canonicalize()
        .with_context(|| format!("--task-log {}: its directory", path.display()))?;
    let target = path
        .canonicalize()
        .unwrap_or_else(|_| dir.join(path.file_name().unwrap_or_default()));
    if target.starts_with(store) {
        bail!(
            "--task-log {}: inside the store {}; write it elsewhere",
            path.display(),
            store.display()
        );
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false) // below, once it is known to be the log's own
        .open(&target)
        .with_context(|| format!("--task-log {}: creating it", path.display()))?;
    let meta = file.metadata()?;
    if meta.is_file() {
        if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
            bail!(
                "--task-log {}: the file has other names (hard links), one of them maybe in \
                 a store; give a file of its own",
                path.display()
            );
        }
        file.set_len(0)
            .with_context(|| format!("--task-log {}: emptying it", path.display()))?;
    }
    let mut first = true;
    Ok(move |line: &str| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let stamp = crate::gc::curve::stamp(now);
        // One write a line, as PBS's logger does: a killed GC leaves every line it wrote.
        let mut text = format!("{stamp}: {line}\n");
        if std::mem::take(&mut first) {
            let prefix = crate::gc::curve::STRATEGY_PREFIX;
            text.push_str(&format!("{stamp}: {prefix}{}\n", strategy.name()));
        }
        if let Err(e) = file.write_all(text.as_bytes()) {
            error.get_or_insert(e);
        }
    })
}

/// `.gc-status` in the store, as PBS writes it after a successful run (beside, then renamed:
/// [`crate::fsutil::write_whole`]).
fn write_gc_status(store_path: &Path, report: &gc::GcReport) -> Result<()> {
    let status = gc::gc_status_json(report, &upid(store_path, report.phase1_start));
    let path = store_path.join(crate::datastore::paths::GC_STATUS_FILE);
    let json = serde_json::to_vec(&status)?;
    crate::fsutil::write_whole(&path, |f| std::io::Write::write_all(f, &json))
        .with_context(|| format!("writing {}", path.display()))
}

/// chunkscope's counters after the task log.
fn print_counters(out: &mut dyn std::io::Write, opts: &GcOptions, c: &gc::Counters) -> Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "chunkscope counters (strategy {})",
        opts.strategy.name()
    )?;
    let n = crate::units::thousands;
    writeln!(
        out,
        "  phase 1   {}, {} index files, {} references",
        crate::units::duration_ns((c.phase1_seconds * 1e9) as u64),
        n(c.index_file_count),
        n(c.references)
    )?;
    let missing = if opts.s3 {
        format!(
            "{} not in the local cache, {} .using created",
            n(c.missing_chunks),
            n(c.using_created)
        )
    } else {
        format!("{} missing", n(c.missing_chunks))
    };
    writeln!(
        out,
        "            utimensat {} ({} touched, {missing}), cache hits {} misses {} ({} reserved)",
        n(c.utimensat_calls),
        n(c.touched),
        n(c.cache_hits),
        n(c.cache_misses),
        crate::units::human_bytes(c.cache_reserved_bytes)
    )?;
    writeln!(
        out,
        "            listings {} ({} in the prefetch pass), entries listed {}, batch flushes {}",
        n(c.listings),
        n(c.prefetch_listings),
        n(c.entries_listed),
        n(c.batch_flushes)
    )?;
    if opts.phases != Phases::Mark && opts.s3 {
        writeln!(
            out,
            "  phase 2   {}, ListObjectsV2 pages {}, chunk objects {}{}, local stats {} ({} order{})",
            crate::units::duration_ns((c.phase2_seconds * 1e9) as u64),
            n(c.list_pages),
            n(c.listed_objects),
            match c.foreign_objects {
                0 => String::new(),
                f => format!(" (and {} not at a chunk's key, kept)", n(f)),
            },
            n(c.stat_calls),
            match opts.s3_page_order {
                gc::PageOrder::Key => "key",
                gc::PageOrder::Inode => "inode",
            },
            match c.sweep_listings {
                0 => String::new(),
                l => format!(", {} chunk directories listed for it", n(l)),
            }
        )?;
        writeln!(
            out,
            "            DeleteObjects {} ({} objects deleted, {} withdrawn: their marker came back), markers created {}",
            n(c.delete_requests),
            n(c.deleted_objects),
            n(c.delete_withdrawn),
            n(c.markers_created)
        )?;
        writeln!(
            out,
            "  phase 3   {}, listings {}, entries {}, stat {}, unlink {}",
            crate::units::duration_ns((c.phase3_seconds * 1e9) as u64),
            n(c.phase3_listings),
            n(c.phase3_entries),
            n(c.phase3_stat_calls),
            n(c.phase3_unlinks)
        )?;
    } else if opts.phases != Phases::Mark {
        writeln!(
            out,
            "  phase 2   {}, listings {}, entries {}, stat {}, unlink {}",
            crate::units::duration_ns((c.phase2_seconds * 1e9) as u64),
            n(c.sweep_listings),
            n(c.sweep_entries),
            n(c.stat_calls),
            n(c.unlinks)
        )?;
    }
    if opts.phases != Phases::Mark {
        if c.verify_index_files > 0 {
            writeln!(
                out,
                "            no phase 1: {} index files read to learn the referenced chunks",
                n(c.verify_index_files)
            )?;
        }
        writeln!(
            out,
            "  safety    {} referenced chunks kept that PBS would have removed ({}), {} not regular files, {} stat errors",
            n(c.kept_referenced),
            crate::units::human_bytes(c.kept_referenced_bytes),
            n(c.irregular_chunks),
            n(c.stat_errors)
        )?;
    }
    Ok(())
}
