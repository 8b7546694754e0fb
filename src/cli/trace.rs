//! `chunkscope trace dump|export|stats`

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use super::Outcome;
#[cfg(feature = "parquet")]
use crate::trace::export::ParquetExporter;
use crate::trace::export::{Exporter, Format};
use crate::trace::{Name, TraceReader};

/// Read a trace: one line per record, a CSV/JSON Lines/Parquet/Chrome JSON export, or counts
/// per operation.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope trace stats gc.trace\n  \
    chunkscope trace dump gc.trace | less\n  \
    chunkscope trace export --format csv gc.trace > gc.csv\n  \
    chunkscope trace export --format parquet -o gc.parquet gc.trace\n  \
    chunkscope trace export --format chrome gc.trace > gc.json  # ui.perfetto.dev\n\n\
    A trace whose end is torn (copied while being written, or a crash) is read up to the\n\
    last whole record, with a warning on standard error.")]
pub struct TraceArgs {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(Subcommand, Debug)]
enum TraceCommand {
    /// One readable line per record.
    #[command(after_help = "Example:\n  chunkscope trace dump gc.trace | less")]
    Dump { file: PathBuf },
    /// Export every record as CSV, JSON Lines or Parquet (columns documented in
    /// trace::export), or as Chrome trace-event JSON for a timeline in ui.perfetto.dev (alias:
    /// perfetto).
    #[command(
        after_help = "Examples:\n  chunkscope trace export --format csv gc.trace > gc.csv\n  \
        chunkscope trace export --format jsonl gc.trace > gc.jsonl\n  \
        chunkscope trace export --format parquet -o gc.parquet gc.trace  # DuckDB\n  \
        chunkscope trace export --format chrome gc.trace > gc.json  # ui.perfetto.dev"
    )]
    Export {
        file: PathBuf,
        #[arg(long, value_enum, default_value = "csv")]
        format: Format,
        /// Where to write it: a file (written beside and renamed into place when complete),
        /// or `-` for standard output.
        #[arg(long, short, value_name = "FILE", default_value = "-")]
        output: PathBuf,
    },
    /// Records, errors and time per operation.
    #[command(after_help = "Example:\n  chunkscope trace stats gc.trace")]
    Stats { file: PathBuf },
    /// The device's side of a trace of a mount holding an image (`mount --disk`, as
    /// `testbed` runs it): reads and writes per GC phase, sequential or not, distances, the
    /// disk's time; `--svg DIR` plots each phase's access order (offset by request).
    #[command(after_help = "Examples:\n  \
        chunkscope trace device /tmp/tb/lru.trace\n  \
        chunkscope trace device --svg /tmp/tb/plots /tmp/tb/lru.trace\n  \
        chunkscope trace device --zfs-blocks /tmp/tbz/blocks.map /tmp/tbz/lru.trace")]
    Device {
        /// The trace (a `--disk` mount's, testbed's OUT/STRATEGY.trace).
        file: PathBuf,
        /// Write device-<phase>.svg for each phase into DIR.
        #[arg(long, value_name = "DIR")]
        svg: Option<PathBuf>,
        /// Name what each request touched by the ZFS pool's block map (testbed --fs zfs
        /// writes OUT/blocks.map from zdb): reads and writes per phase by kind (metadnode
        /// blocks, indirect blocks, chunk directories' ZAPs, chunk data, space maps, labels;
        /// unmapped: free space before the run, or a block written in it).
        #[arg(long, value_name = "FILE")]
        zfs_blocks: Option<PathBuf>,
        /// The figures as JSON on standard output (instead of the table).
        #[arg(long)]
        json: bool,
    },
    /// Turn a syscall log of a real GC (strace, or mount-scripts/gc-syscalls.bt) into a
    /// trace: each call on the store as the requests a chunkscope mount would have
    /// recorded, with the inode numbers of a survey taken before the GC (--survey) or of a
    /// stat at import time; then analyze, replay and phase inference work on it.
    #[command(after_help = "Examples:\n  \
        chunkscope trace import gc.strace -o imported.trace\n  \
        chunkscope trace import --survey tiny.survey gc.strace -o imported.trace\n  \
        chunkscope trace import --format bpftrace gc.bpf.log -o bpf.trace\n\n\
        The log of a PBS GC, from strace (every thread of the proxy whose GC runs):\n  \
        strace -f -tt -T -y -o gc.strace -p PID \\\n    \
        -e trace=utimensat,newfstatat,statx,getdents64,unlinkat,openat\n\
        or, where ptrace is not allowed, from bpftrace on syscall tracepoints:\n  \
        BPFTRACE_STRLEN=200 bpftrace mount-scripts/gc-syscalls.bt PID > gc.bpf.log\n\n\
        (bpftrace prints \"Lost N events\" when its ring buffer fills: the import then\n\
        exits 1; record again with BPFTRACE_PERF_RB_PAGES=4096.)\n\n\
        A survey taken before the GC gives the inodes of the chunks it removes too; without\n\
        one, they are 0 in the trace (counted as unresolved).")]
    Import {
        /// The log.
        log: PathBuf,
        /// The trace to write.
        #[arg(short, long, value_name = "FILE")]
        out: PathBuf,
        /// The log's format.
        #[arg(long, value_enum, default_value = "strace")]
        format: crate::syscalls::Format,
        /// Inode numbers from this survey (`chunkscope survey --out`), taken before the GC.
        #[arg(long, value_name = "FILE")]
        survey: Option<PathBuf>,
        /// The datastore the GC ran on (default: found in the log's paths).
        #[arg(long, value_name = "DIR")]
        store: Option<PathBuf>,
        /// The import's counts as JSON on standard output.
        #[arg(long)]
        json: bool,
    },
}

/// Exports `file` in `format` to `output` (`-`: standard output). A file is written whole
/// or not at all ([`crate::fsutil::write_whole`]), so a failed export leaves no half-written
/// file that looks whole.
fn export(file: &Path, format: Format, output: &Path) -> Result<()> {
    let mut r = TraceReader::open(file)?;
    let to_stdout = output == Path::new("-");
    #[cfg(feature = "parquet")]
    if format == Format::Parquet && to_stdout && std::io::stdout().is_terminal() {
        anyhow::bail!("Parquet is binary: give a file (-o gc.parquet) or redirect standard output");
    }
    let to = if to_stdout {
        "standard output".into()
    } else {
        output.display().to_string()
    };
    let context = || format!("exporting {} to {to}", file.display());
    if to_stdout {
        write_export(&mut r, format, std::io::stdout()).with_context(context)?;
    } else {
        let dir = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            anyhow::bail!(
                "cannot export to {}: {} is not a directory",
                output.display(),
                dir.display()
            );
        }
        crate::fsutil::write_whole(output, |f| write_export(&mut r, format, f))
            .with_context(context)?;
    }
    warn_truncated(&r);
    Ok(())
}

/// Every record of `r` in `format` to `sink`.
fn write_export(r: &mut TraceReader, format: Format, sink: impl Write + Send) -> Result<()> {
    let out = std::io::BufWriter::with_capacity(1 << 20, sink);
    match format {
        #[cfg(feature = "parquet")]
        Format::Parquet => {
            let mut e = ParquetExporter::new(out, r.meta())?;
            while let Some(rec) = r.next_record()? {
                e.write(&rec)?;
            }
            e.finish()?;
        }
        _ => {
            let mut e = Exporter::new(out, format)?;
            while let Some(rec) = r.next_record()? {
                e.write(&rec)?;
            }
            e.finish()?;
        }
    }
    Ok(())
}

fn warn_truncated(r: &TraceReader) {
    r.warn_if_torn();
}

/// `trace import`.
fn import(
    log: &std::path::Path,
    out: &std::path::Path,
    format: crate::syscalls::Format,
    survey: Option<&std::path::Path>,
    store: Option<&std::path::Path>,
    json: bool,
) -> Result<Outcome> {
    let file = survey
        .map(crate::survey::file::SurveyFile::read)
        .transpose()?;
    let store = store.map(std::path::Path::to_path_buf).or_else(|| {
        file.as_ref()
            .map(|f| std::path::PathBuf::from(&f.header.store))
    });
    let r = match &file {
        Some(f) => {
            let root = store.clone().expect("a survey names its store");
            let mut inodes = crate::syscalls::Fallback(
                crate::syscalls::SurveyInodes::new(f),
                crate::syscalls::StatInodes::new(&root),
            );
            crate::syscalls::import(log, format, Some(&root), &mut inodes, out)?
        }
        None => {
            // The store is known once the log is read: stat below it then.
            let root = match &store {
                Some(s) => s.clone(),
                None => crate::syscalls::store_of(log, format)?,
            };
            let mut inodes = crate::syscalls::StatInodes::new(&root);
            crate::syscalls::import(log, format, Some(&root), &mut inodes, out)?
        }
    };
    if json {
        super::write_json(std::path::Path::new("-"), &r)?;
    } else {
        let calls: Vec<String> = r.calls.iter().map(|(k, v)| format!("{v} {k}")).collect();
        println!(
            "{}: {} calls on {} ({}), {} records; {} lines outside the store or of other calls",
            out.display(),
            crate::units::thousands(r.calls.values().sum()),
            r.store,
            calls.join(", "),
            crate::units::thousands(r.records),
            crate::units::thousands(r.outside + r.other_lines)
        );
        println!(
            "phases seen: {}",
            match (
                r.phases_seen.iter().any(|p| p == "mark"),
                r.phases_seen.iter().any(|p| p == "sweep")
            ) {
                (true, true) => "mark (touches) and sweep (chunk-directory listings)",
                (true, false) => {
                    "mark only (no chunk directory is listed: the log has no sweep; if the GC \
                     swept, its strace lacked getdents64: -e \
                     trace=utimensat,newfstatat,statx,getdents64,unlinkat,openat)"
                }
                (false, true) => {
                    "sweep only (no touch: the log has no mark; if the GC marked, its strace \
                     lacked utimensat)"
                }
                (false, false) => "neither (no touch and no chunk-directory listing)",
            }
        );
    }
    if r.unresolved_chunks > 0 {
        let why = if file.is_some() {
            "chunks neither the survey listed nor the store still has: created after the \
             survey and removed before the import"
        } else {
            "chunks gone before the import, such as those the GC removed: a survey taken \
             before the GC (--survey) gives them theirs"
        };
        tracing::warn!(
            "{} records of chunks have no inode number ({why}); analyses leave them out",
            crate::units::thousands(r.unresolved_chunks)
        );
    }
    if r.unresolved > r.unresolved_chunks {
        tracing::info!(
            "{} records of other paths have no inode number (gone before the import, such as \
             the atime check's temporary file)",
            crate::units::thousands(r.unresolved - r.unresolved_chunks)
        );
    }
    if r.lost_events > 0 {
        tracing::error!(
            "{}: bpftrace says it lost {} events (its ring buffer was full): {} lacks that \
             many calls' entries or returns. Record again with a larger buffer, e.g. \
             BPFTRACE_PERF_RB_PAGES=4096 (16 MiB a CPU; the default is 64 pages), writing \
             its output to a file",
            log.display(),
            crate::units::thousands(r.lost_events),
            out.display()
        );
        return Ok(Outcome::ProblemsFound);
    }
    Ok(Outcome::Ok)
}

pub fn run(args: TraceArgs) -> Result<Outcome> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match args.command {
        TraceCommand::Import {
            log,
            out,
            format,
            survey,
            store,
            json,
        } => {
            return import(
                &log,
                &out,
                format,
                survey.as_deref(),
                store.as_deref(),
                json,
            );
        }
        TraceCommand::Dump { file } => {
            let mut r = TraceReader::open(&file)?;
            writeln!(
                out,
                "# store {} (chunkscope {})",
                r.meta().store,
                r.meta().chunkscope
            )?;
            writeln!(
                out,
                "# options {}",
                serde_json::Value::Object(r.meta().options.clone())
            )?;
            while let Some(rec) = r.next_record()? {
                let name = match &rec.name {
                    Name::None => String::new(),
                    Name::Digest(d) => d.to_hex(),
                    Name::Text(s) => format!("{s:?}"),
                };
                writeln!(
                    out,
                    "{:>8} {:>14.6} {:>9}ns {:<11} {:>3} ino={} parent={} arg={} pid={} {}",
                    rec.seq,
                    rec.start_ns as f64 / 1e9,
                    rec.duration_ns,
                    rec.op_name(),
                    rec.errno,
                    rec.ino,
                    rec.parent,
                    rec.arg,
                    rec.pid,
                    name
                )?;
            }
            out.flush()?;
            warn_truncated(&r);
        }
        TraceCommand::Export {
            file,
            format,
            output,
        } => {
            drop(out);
            export(&file, format, &output)?;
        }
        TraceCommand::Device {
            file,
            svg,
            json,
            zfs_blocks,
        } => device(&file, svg.as_deref(), json, zfs_blocks.as_deref())?,
        TraceCommand::Stats { file } => {
            let mut r = TraceReader::open(&file)?;
            let mut per_op: BTreeMap<&'static str, (u64, u64, u64)> = BTreeMap::new();
            let mut total = 0u64;
            while let Some(rec) = r.next_record()? {
                let e = per_op.entry(rec.op_name()).or_default();
                e.0 += 1;
                e.1 += (rec.errno != 0) as u64;
                e.2 += rec.duration_ns;
                total += 1;
            }
            let mut t = crate::table::Table::new(["op", "records", "errors", "avg real"]);
            let n = crate::units::thousands;
            for (op, (count, errors, ns)) in &per_op {
                t.row(vec![
                    op.to_string(),
                    n(*count),
                    n(*errors),
                    crate::units::duration_ns(ns / count.max(&1)),
                ]);
            }
            t.row(vec!["total".into(), n(total), String::new(), String::new()]);
            write!(out, "{}", t.text())?;
            out.flush()?;
            warn_truncated(&r);
        }
    }
    Ok(Outcome::Ok)
}

/// `trace device`: the device's reads and writes per phase, as a table or JSON, and plots.
fn device(file: &Path, svg: Option<&Path>, json: bool, blocks: Option<&Path>) -> Result<()> {
    use crate::units::{human_bytes, thousands};
    let map = blocks
        .map(crate::analysis::zfs_blocks::BlockMap::load)
        .transpose()?;
    let phases = crate::analysis::device::device_phases_named(file, map.as_ref())?;
    if phases.is_empty() {
        anyhow::bail!(
            "{}: no read or write with bytes in it: not the trace of a mount holding an image \
             (mount --disk, or testbed's OUT/STRATEGY.trace)",
            file.display()
        );
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&phases)?);
    } else {
        let mut t = crate::table::Table::new([
            "phase",
            "reads",
            "read",
            "re-reads",
            "writes",
            "written",
            "sequential",
            "median distance",
            "disk time",
        ]);
        for p in &phases {
            let n = p.reads + p.writes;
            t.row(vec![
                p.label.clone(),
                thousands(p.reads),
                human_bytes(p.read_bytes),
                thousands(p.rereads),
                thousands(p.writes),
                human_bytes(p.write_bytes),
                format!("{:.0}%", 100.0 * p.sequential as f64 / n.max(1) as f64),
                human_bytes(p.median_distance),
                crate::units::duration_ns(p.disk_ns),
            ]);
        }
        print!("{}", t.text());
        if map.is_some() {
            println!("\nby what they touched (a request over several kinds counts for each):");
            let mut t =
                crate::table::Table::new(["phase", "kind", "reads", "read", "writes", "written"]);
            for p in &phases {
                for k in p.by_kind.iter().filter(|k| k.reads + k.writes > 0) {
                    t.row(vec![
                        p.label.clone(),
                        k.kind.to_string(),
                        thousands(k.reads),
                        human_bytes(k.read_bytes),
                        thousands(k.writes),
                        human_bytes(k.write_bytes),
                    ]);
                }
            }
            print!("{}", t.text());
        }
    }
    if let Some(dir) = svg {
        #[cfg(feature = "plot")]
        {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for p in &phases {
                let path = dir.join(format!(
                    "device-{}.svg",
                    crate::analysis::plot::slug(&p.label)
                ));
                let doc = crate::analysis::plot::device_access(p)?;
                crate::fsutil::write_whole(&path, |f| f.write_all(doc.as_bytes()))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        #[cfg(not(feature = "plot"))]
        anyhow::bail!(
            "--svg {}: this build has no plots (feature plot)",
            dir.display()
        );
    }
    Ok(())
}
