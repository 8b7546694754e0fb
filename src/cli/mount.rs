//! `chunkscope mount`

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use super::model_args::ModelArgs;
use super::{seconds, Outcome};
use crate::faults::Faults;
use crate::instrument::Instruments;
use crate::model::Model;
use crate::overlay::session::{self, MountConfig};
use crate::overlay::{Overlay, OverlayOptions};
use crate::trace::{TraceMeta, TraceWriter};

/// Mount a tracing FUSE passthrough over a chunk store (foreground).
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope mount --shadow --store /datastore/pbs --mountpoint /mnt/cs\n  \
    chunkscope mount --store /dev/shm/tiny --mountpoint /mnt/cs --trace gc.trace\n  \
    chunkscope mount --store /dev/shm/tiny --mountpoint /mnt/cs --model zfs-hdd\n\n\
    The first is the safe one for a production store: --shadow keeps every touch and\n\
    unlink in memory, and the store stays as it was (a cost model there: add --time-scale\n\
    0, so that its costs are recorded, not waited for).\n\
    Runs in the foreground until unmounted (umount MNT) or interrupted (Ctrl-C, SIGTERM),\n\
    then flushes the trace. While files are open through it, Ctrl-C/SIGTERM is refused and\n\
    the processes holding them are named; a second one within 10 s forces the unmount\n\
    (their requests fail; exit status 2).\n\
    Every operation reaches the backing store; stat and directory listings show the backing\n\
    inode numbers. Needs root (file handles) and /dev/fuse.")]
pub struct MountArgs {
    /// The backing directory (a PBS datastore, or any directory).
    #[arg(long, value_name = "DIR")]
    store: PathBuf,
    /// Where to mount; an existing empty directory outside the store.
    #[arg(long, value_name = "MNT")]
    mountpoint: PathBuf,
    /// Write a trace of every request to FILE (no trace without it).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Worker threads answering requests.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: u16,
    /// Let other users use the mount (adds default_permissions: the kernel checks modes).
    /// Every request runs with its caller's uid, gid and groups either way.
    #[arg(long)]
    allow_other: bool,
    /// Mount even if the mountpoint is not empty (what it holds is hidden while mounted).
    #[arg(long)]
    nonempty: bool,
    /// Seconds the kernel may cache names; 0 sends every lookup to the overlay (and the trace).
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    entry_ttl: f64,
    /// Seconds the kernel may cache attributes; 0 sends every stat to the overlay.
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    attr_ttl: f64,
    /// Seconds the kernel may cache directories (their entries and attributes): a
    /// datastore's skeleton (the store, .chunks and its 65,536 chunk directories, namespaces,
    /// groups, snapshots) does not change under a GC, and a real filesystem answers those path
    /// components from its dentry cache, so a touch is two round trips (lookup and setattr of
    /// the chunk) instead of four. Chunk files keep --entry-ttl and --attr-ttl: every chunk
    /// lookup, stat and touch still reaches the trace. 0 traces every directory lookup too
    /// [default: 600 on a datastore (a store with .chunks), 0 otherwise].
    #[arg(long, value_name = "SECONDS")]
    dir_ttl: Option<f64>,
    /// Ask the kernel for READDIRPLUS (listings then carry attributes).
    #[arg(long)]
    readdirplus: bool,
    /// Pass extended-attribute requests through instead of answering ENOSYS.
    #[arg(long)]
    xattr: bool,
    /// Control socket [default: /run/chunkscope/mnt-HASH.sock, from the mountpoint's path,
    /// which `chunkscope ctl MNT` finds by itself].
    #[arg(long, value_name = "SOCKET")]
    control: Option<PathBuf>,
    /// Write the trace as version 1 (plain 112-byte slots) instead of version 2 (the slots
    /// in zstd-compressed blocks, about a tenth of the size): for a tool that reads slots
    /// from the file directly
    #[arg(long, requires = "trace")]
    plain_trace: bool,
    /// Append the log (what it did, warnings; -v for more) to FILE, each line with its time,
    /// instead of standard error: for a mount in the background (mount-scripts use it)
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Serve the counters over HTTP at http://ADDR:PORT/metrics in Prometheus's text format
    /// (e.g. 127.0.0.1:9799; 0.0.0.0:9799 for a Prometheus on another host)
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<std::net::SocketAddr>,
    /// Trace a production store safely: atime/mtime changes and unlinks are kept in memory
    /// and shown through the mount; every other change fails (EROFS). The backing store is
    /// left byte for byte and timestamp for timestamp as it was.
    #[arg(long)]
    shadow: bool,
    #[command(flatten)]
    model: ModelArgs,
    /// Hold each reply F times its modelled cost: 1 is real time, 0.001 suits tests, 0 only
    /// accounts (costs are recorded, nothing waits).
    #[arg(long, default_value_t = 1.0, value_name = "F", requires = "model")]
    time_scale: f64,
    /// A fault rule, e.g. 'setattr-atime errno=EIO nth=100' or 'getattr prob=0.05
    /// delay=exp:8ms' (repeatable; rules are tried in order, the first that fires decides).
    /// Syntax: OPS [path=GLOB] [after=DUR] [prob=P|nth=N|every=K] [delay=D|stall=D]
    /// [errno=NAME|any]; D is 5ms, uniform:1ms..5ms, exp:MEAN or lognormal:MEDIAN,SIGMA.
    #[arg(long = "fault", value_name = "RULE")]
    faults: Vec<String>,
    /// Read fault rules from FILE, one per line (# comments), after the --fault ones.
    #[arg(long = "faults", value_name = "FILE")]
    fault_files: Vec<PathBuf>,
    /// A disk under the store's files: each read and write waits as long as it would on
    /// this disk, from where the last one left the head (seek, rotation, transfer, one
    /// queue, the drive's read cache). A preset (hdd-7200, hdd-5400, ssd), then
    /// ,key=value to change one: rpm, seek-t2t, stroke, span, rate, cache, readahead,
    /// overhead. E.g. 'hdd-7200,span=64GiB'. A file's offset is its place on the disk: made
    /// for one image file (a loop device's) on the mount. See src/disk.rs.
    #[arg(long, value_name = "DISK")]
    disk: Option<String>,
    /// Keep no page of any file in the kernel (FOPEN_DIRECT_IO on every open), whatever its
    /// opener asked: every read and write of an image reaches the mount (and its --disk) as
    /// the filesystem above issued it, with no readahead or page cache between. For a
    /// filesystem that reads its image without O_DIRECT (zfs-fuse's file vdevs); a loop
    /// device with direct I/O needs none. Breaks shared mmap of the mount's files.
    #[arg(long)]
    direct_io: bool,
    /// Seed of the fault decisions: same seed, same store, same requests, same faults.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Which number places an inode in the model's layout: `native` uses the backing inode
    /// number (right for tmpfs and ZFS, which number in creation order); `creation` ranks
    /// every inode by creation when mounting (directories first, then files by mtime), so a
    /// ZFS model is faithful on ext4, which clusters inode numbers by directory. The ranking is
    /// saved beside the trace as TRACE.order for `replay`.
    #[arg(long, value_enum, default_value = "native", requires = "model")]
    layout_order: LayoutOrder,
    /// When unmounted, write the final counters as JSON to FILE: the model's totals (with
    /// the last transaction group's write-back), the fault rules, the trace writer's counts.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LayoutOrder {
    Native,
    Creation,
}

impl MountArgs {
    /// Refuses a `--trace`, `--stats` or `--log` file inside the store or under the
    /// mountpoint: written there, the mount would trace (or fill) the store it watches, and
    /// through the mountpoint its own writes would come back to it as requests. Checked
    /// before the log file is opened (an option that names no existing directory is left to
    /// the command's own error).
    pub fn check_outputs(&self) -> Result<()> {
        let (Ok(store), Ok(mnt)) = (self.store.canonicalize(), self.mountpoint.canonicalize())
        else {
            return Ok(());
        };
        let outputs = [
            ("--trace", &self.trace),
            ("--stats", &self.stats),
            ("--log", &self.log),
        ];
        for (flag, path) in outputs {
            let Some(path) = path else { continue };
            let Some(resolved) = resolve_output(path) else {
                continue;
            };
            for (inside, what) in [(&store, "inside the store"), (&mnt, "under the mountpoint")] {
                if resolved.starts_with(inside) {
                    bail!(
                        "{flag} {} is {what} {}: the mount would write into what it watches; \
                         put it elsewhere",
                        path.display(),
                        inside.display()
                    );
                }
            }
        }
        Ok(())
    }

    /// Where the log goes (`--log`), standard error if `None`.
    pub fn log_file(&self) -> Option<&std::path::Path> {
        self.log.as_deref()
    }
}

/// Where a file to be written would be: its directory's real path and its name (the file
/// itself, followed, if it exists); `None` if the directory does not exist.
fn resolve_output(path: &std::path::Path) -> Option<PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Some(p);
    }
    let abs = std::path::absolute(path).ok()?;
    let dir = abs.parent()?.canonicalize().ok()?;
    Some(dir.join(abs.file_name()?))
}

pub fn run(args: MountArgs) -> Result<Outcome> {
    // Every file a client holds open through the mount holds one here too: 20,000 open
    // directories would otherwise make every lookup fail with EMFILE.
    crate::fsutil::raise_nofile_limit();
    // The inode table's shards grow by doubling; glibc would raise its mmap threshold at the
    // first big table freed and put the later ones on the heap, where the halves left behind
    // by each growth stay as resident free memory. A fixed threshold keeps every table of
    // 64 KiB or more in its own mapping, returned to the system when freed (BENCHMARKS.md,
    // "Memory per inode").
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
    }
    let (store, mnt) = checked_paths(&args)?;
    args.check_outputs()?;
    let datastore = warn_of_layout(&store);
    let dir_ttl = args.dir_ttl.unwrap_or(if datastore {
        crate::trace::KernelCache::DATASTORE_DIR_TTL_S
    } else {
        0.0
    });
    let opts = OverlayOptions {
        store: store.clone(),
        entry_ttl: seconds(args.entry_ttl, "--entry-ttl")?,
        attr_ttl: seconds(args.attr_ttl, "--attr-ttl")?,
        dir_ttl: seconds(dir_ttl, "--dir-ttl")?,
        readdirplus: args.readdirplus,
        xattr: args.xattr,
        shadow: args.shadow,
        disk: args
            .disk
            .as_deref()
            .map(crate::disk::DiskParams::parse)
            .transpose()?,
        direct_io: args.direct_io,
    };

    let params = model_params(&args, &store)?;
    let faults = Faults::load(&args.faults, &args.fault_files, args.seed)?;
    faults.check_kind(false)?;
    let order = layout_order(&args, &store)?;

    let signals = crate::fsutil::TerminationSignals::block();
    let inst = std::sync::Arc::new(Instruments::new(
        Some(faults),
        params.clone().map(|p| match order.clone() {
            Some(o) => Model::with_order(p, o),
            None => Model::new(p),
        }),
        args.time_scale,
    ));
    let live = inst.live().expect("a mount's instruments count").clone();
    if store.join(crate::datastore::paths::CHUNK_DIR).is_dir() {
        live.count_index_files(store.clone());
    }
    let (writer, sink) = start_trace(
        &args,
        &store,
        &mnt,
        params.as_ref(),
        order.is_some(),
        dir_ttl,
        &inst,
    )?;
    let overlay = Overlay::new(opts, sink, inst.clone())?;
    let disk = overlay.disk();
    let cfg = MountConfig {
        mountpoint: mnt.clone(),
        threads: args.threads as usize,
        allow_other: args.allow_other,
        control: args.control.clone(),
        metrics: args.metrics,
    };
    session::serve(overlay, &cfg, signals, |socket| {
        tracing::info!(
            "mounted {} on {} (pid {}, control {})",
            store.display(),
            mnt.display(),
            std::process::id(),
            socket.display()
        )
    })?;
    finish(&args, &inst, disk, writer)
}

/// `path` made canonical, if it is a directory; a FUSE mount whose process is gone (ENOTCONN)
/// is named as that, with how to clear it.
fn directory(path: &Path, flag: &str) -> Result<PathBuf> {
    let stale = |e: &std::io::Error| {
        matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)).then(|| {
            anyhow::anyhow!(
                "{flag} {}: a stale FUSE mount ({e}: its process ended without unmounting); \
                 clear it with 'umount -l {}' (or 'fusermount3 -uz {}'), then mount again",
                path.display(),
                path.display(),
                path.display()
            )
        })
    };
    let canonical = match path.canonicalize() {
        Ok(p) => p,
        Err(e) => {
            return Err(stale(&e).unwrap_or_else(|| {
                anyhow::Error::new(e).context(format!("{flag} {}", path.display()))
            }))
        }
    };
    match std::fs::metadata(&canonical) {
        Ok(m) if m.is_dir() => Ok(canonical),
        Ok(_) => bail!("{flag} {}: not a directory", canonical.display()),
        Err(e) => Err(stale(&e).unwrap_or_else(|| {
            anyhow::Error::new(e).context(format!("{flag} {}", canonical.display()))
        })),
    }
}

/// The store and the mountpoint, canonical, refused with what is wrong: not directories, one
/// inside the other (or the same), a mountpoint with something in it.
fn checked_paths(args: &MountArgs) -> Result<(PathBuf, PathBuf)> {
    let store = directory(&args.store, "--store")?;
    let mnt = directory(&args.mountpoint, "--mountpoint")?;
    // What is wrong with a mountpoint in the store is that, not that it is not empty.
    if mnt == store {
        bail!(
            "--mountpoint {} is the store itself: a mount over it would hide the store it \
             reads from; mount it on an empty directory elsewhere (mkdir /mnt/cs)",
            mnt.display()
        );
    }
    if mnt.starts_with(&store) {
        bail!(
            "--mountpoint {} is inside the store {}: mount it elsewhere",
            mnt.display(),
            store.display()
        );
    }
    let mounted = crate::fsutil::mounts()
        .unwrap_or_default()
        .into_iter()
        .rev()
        .find(|m| m.point == mnt);
    // What is wrong with a chunkscope mount there is that, not that it shows its files.
    if let Some((m, of)) = mounted.as_ref().and_then(|m| {
        m.source
            .strip_prefix("chunkscope:")
            .filter(|_| m.fstype.starts_with("fuse"))
            .map(|of| (m, of))
    }) {
        let by = crate::overlay::control::daemon_pid(&crate::overlay::control::socket_for(&mnt))
            .map(|p| format!(", served by pid {p}"))
            .unwrap_or_default();
        bail!(
            "--mountpoint {0} is already a chunkscope mount of {of}{by}: unmount it first \
             (umount {0}, or mount-scripts/chunkscope-umount {0}) or use another directory",
            m.point.display()
        );
    }
    if !args.nonempty
        && std::fs::read_dir(&mnt)
            .with_context(|| format!("--mountpoint {}", mnt.display()))?
            .next()
            .is_some()
    {
        let what = mounted
            .map(|m| {
                format!(
                    " (the mountpoint of a {} filesystem, {})",
                    m.fstype, m.source
                )
            })
            .unwrap_or_default();
        bail!(
            "--mountpoint {}{what} is not empty: mounting would hide what it holds (use an \
             empty directory, or --nonempty)",
            mnt.display()
        );
    }
    Ok((store, mnt))
}

/// Whether the store is a datastore (`.chunks`); warns now, rather than when a GC through
/// the mount refuses to run, of chunk directories that are not the store's own.
fn warn_of_layout(store: &std::path::Path) -> bool {
    let datastore = store.join(crate::datastore::paths::CHUNK_DIR).is_dir();
    if !datastore {
        tracing::warn!(
            "{} has no .chunks directory; mounting it anyway",
            store.display()
        );
    } else {
        // Said now rather than when a GC through the mount refuses to run.
        match crate::store::layout::odd_chunk_dirs(store) {
            Ok(odd) => {
                for o in &odd {
                    tracing::warn!(
                        "{o}: not the store's own chunk directory; a GC through this mount \
                         will refuse to run until it is"
                    );
                }
            }
            Err(e) => tracing::warn!("checking the chunk directories of {}: {e}", store.display()),
        }
    }
    datastore
}

/// The cost model's parameters (`--model`), with the chunk directories' size sampled from the
/// store where its ZAP layout needs it; `--time-scale` checked.
fn model_params(
    args: &MountArgs,
    store: &std::path::Path,
) -> Result<Option<crate::model::ModelParams>> {
    if !(0.0..=1000.0).contains(&args.time_scale) {
        bail!(
            "--time-scale {}: expected a factor from 0 to 1000",
            args.time_scale
        );
    }
    let mut params = args.model.params()?;
    if let Some(p) = params.as_mut().filter(|p| p.needs_dir_entries()) {
        p.dir_entries = crate::model::order::sample_dir_entries(store)
            .context("counting chunk directory entries for the model's directory layout")?;
        tracing::info!(
            "model {}: ~{} entries per chunk directory (256 sampled)",
            p.name,
            p.dir_entries
        );
    }
    Ok(params)
}

/// The model's inode order (`--layout-order creation`: ranked now, saved beside the trace).
fn layout_order(
    args: &MountArgs,
    store: &std::path::Path,
) -> Result<Option<crate::model::order::InodeOrder>> {
    Ok(match args.layout_order {
        LayoutOrder::Native => None,
        LayoutOrder::Creation => {
            let inos = crate::model::order::scan_creation_order(store)
                .context("ranking the store's inodes by creation (--layout-order creation)")?;
            tracing::info!(
                "ranked {} inodes by creation for the model's layout",
                inos.len()
            );
            let order = crate::model::order::InodeOrder::from_creation(inos);
            if let Some(t) = &args.trace {
                order.save(&crate::replay::order_path(t))?;
            }
            Some(order)
        }
    })
}

/// The trace (`--trace`): its writer and the request path's sink, its header saying how the
/// mount ran (`ranked`: the model's layout follows a creation-order ranking).
fn start_trace(
    args: &MountArgs,
    store: &std::path::Path,
    mnt: &std::path::Path,
    params: Option<&crate::model::ModelParams>,
    ranked: bool,
    dir_ttl: f64,
    inst: &Instruments,
) -> Result<(Option<TraceWriter>, Option<crate::trace::TraceSink>)> {
    let live = inst.live().expect("a mount's instruments count");
    let rule_texts: Vec<String> = inst
        .faults
        .as_ref()
        .map(|f| f.stats().into_iter().map(|r| r.rule).collect())
        .unwrap_or_default();
    Ok(match &args.trace {
        Some(path) => {
            let mut meta = TraceMeta {
                store: store.display().to_string(),
                ..Default::default()
            };
            let o = &mut meta.options;
            o.insert("mountpoint".into(), mnt.display().to_string().into());
            o.insert("xattr".into(), args.xattr.into());
            o.insert("threads".into(), args.threads.into());
            o.insert("allow_other".into(), args.allow_other.into());
            o.insert("page_cache_reads".into(), true.into());
            o.insert("shadow".into(), args.shadow.into());
            if params.is_some() {
                o.insert("time_scale".into(), args.time_scale.into());
            }
            if let Some(spec) = &args.disk {
                let disk = crate::disk::DiskParams::parse(spec)?;
                o.insert("disk".into(), serde_json::to_value(disk)?);
            }
            if !rule_texts.is_empty() {
                o.insert("faults".into(), rule_texts.clone().into());
                o.insert("seed".into(), args.seed.into());
            }
            meta.set_kernel_cache(&crate::trace::KernelCache {
                entry_ttl_s: args.entry_ttl,
                attr_ttl_s: args.attr_ttl,
                dir_ttl_s: dir_ttl,
                readdirplus: args.readdirplus,
            });
            if let Some(p) = params {
                meta.set_model(serde_json::to_value(p)?, ranked);
            }
            let (w, s) =
                TraceWriter::start_with(path, meta, Some(live.observer()), !args.plain_trace)
                    .with_context(|| format!("--trace {}", path.display()))?;
            (Some(w), Some(s))
        }
        None => (None, None),
    })
}

/// After the unmount: the model summed up, the fault rules' counts, `--stats`, the trace
/// finished (an error if it lost records).
fn finish(
    args: &MountArgs,
    inst: &Instruments,
    disk: Option<crate::overlay::SharedDisk>,
    writer: Option<TraceWriter>,
) -> Result<Outcome> {
    let mut stats = serde_json::Map::new();
    if let Some(d) = disk {
        let d = d.lock().unwrap_or_else(|p| p.into_inner());
        let t = d.totals();
        tracing::info!(
            "disk ({}): {} reads ({} from its cache), {} writes, {} moved; busy {} \
             (seeking {}, waiting for the platter {})",
            d.params(),
            crate::units::thousands(t.reads),
            crate::units::thousands(t.cache_hits),
            crate::units::thousands(t.writes),
            crate::units::human_bytes(t.bytes),
            crate::units::duration_ns(t.busy_ns),
            crate::units::duration_ns(t.seek_ns),
            crate::units::duration_ns(t.rotation_ns)
        );
        stats.insert("disk".into(), serde_json::to_value(d.params())?);
        stats.insert("disk_totals".into(), serde_json::to_value(t)?);
    }
    if let Some(mut m) = inst.model() {
        m.flush();
        // A sentence for a person; the figures as JSON with --stats.
        tracing::info!("model {}: {}", m.params().name, m.totals().summary());
        stats.insert("model".into(), serde_json::to_value(m.params())?);
        stats.insert("totals".into(), serde_json::to_value(m.totals())?);
    }
    if let Some(f) = &inst.faults {
        let rules = f.stats();
        for r in &rules {
            tracing::info!(
                "fault rule '{}': {} matched, {} fired",
                r.rule,
                r.matches,
                r.hits
            );
        }
        stats.insert("faults".into(), serde_json::to_value(rules)?);
    }
    // A failed trace (a full disk) still ends with the stats and a count of what was lost.
    let (trace, failed) = match writer {
        Some(w) => {
            let (stats, error) = w.finish_all();
            (Some(stats), error)
        }
        None => (None, None),
    };
    if let Some(path) = &args.stats {
        stats.insert("trace".into(), serde_json::to_value(trace)?);
        if let Some(e) = &failed {
            stats.insert("trace_error".into(), e.to_string().into());
        }
        super::write_json(path, &stats)?;
    }
    if let Some(s) = trace {
        let path = args.trace.as_ref().expect("trace path");
        tracing::info!(
            "unmounted; trace {}: {} records ({} stalls, {} lost), {}",
            path.display(),
            crate::units::thousands(s.written),
            crate::units::thousands(s.stalls),
            crate::units::thousands(s.lost),
            crate::units::human_bytes(s.bytes)
        );
        if failed.is_some() || s.lost > 0 {
            let why = failed.map_or_else(|| "the writer stopped".to_string(), |e| e.to_string());
            bail!(
                "the trace {} is incomplete: {why}; {} of {} records lost (every request was \
                 served; the file is readable up to where the error struck)",
                path.display(),
                crate::units::thousands(s.lost),
                crate::units::thousands(s.sent)
            );
        }
    } else {
        tracing::info!("unmounted");
    }
    Ok(Outcome::Ok)
}
