//! `chunkscope calibrate`

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use super::Outcome;
use crate::calibrate::{Calibration, Observed, Trial};
use crate::gc::curve::Curve;
use crate::gc::Strategy;
use crate::model::ModelParams;
use crate::table::Table;
use crate::units::{duration_ns, human_bytes};

/// Fit a pool's model to its own GC task logs: the metadata cache's size and the time of a
/// read, such that replaying each logged GC on the surveyed store through the model gives the
/// log's progress (the time of each percentage of phase 1 and phase 2). The fitted model then
/// predicts every strategy on that pool: `simulate --survey FILE --model fitted.json`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope gc --strategy batched --task-log gc.log /dev/shm/tiny\n  \
    chunkscope calibrate --store /dev/shm/tiny --out fitted.json gc.log\n  \
    chunkscope simulate --store /dev/shm/tiny --model fitted.json\n  \
    chunkscope calibrate --survey /tmp/tb/store.survey /tmp/tb/lru.log\n  \
    # PBS's logs: /var/log/proxmox-backup/tasks/*/UPID:*:garbage_collection:*\n\n\
    A log is PBS's task-log file of a garbage collection (each line `<time>: <message>`) or\n\
    `chunkscope gc --task-log`'s, which names its strategy; PBS's own GC is taken as lru\n\
    (--strategy otherwise: PBS 3.3.4 and earlier ran `unpatched`). The survey must be of the\n\
    store the logged GCs ran on, in about that state: a log whose GC marked another number of\n\
    index files is refused. The base model gives the mechanisms (by default the survey's\n\
    filesystem's preset: ext4-hdd, xfs-hdd, else zfs-hdd); only the metadata cache's size\n\
    and the time of a read are fitted. A GC that shared its pool with backups fits a slower\n\
    disk than the idle pool has. `testbed` validates this: it calibrates on one strategy's\n\
    log and predicts the others beside what it measures.")]
pub struct CalibrateArgs {
    /// Task logs of garbage collections on the store (one GC each).
    #[arg(value_name = "LOG", required = true)]
    logs: Vec<PathBuf>,
    /// The store the GCs ran on, surveyed now (read-only).
    #[arg(long, conflicts_with = "survey", required_unless_present = "survey")]
    store: Option<PathBuf>,
    /// A saved survey of it (`chunkscope survey --out FILE`).
    #[arg(long, value_name = "FILE")]
    survey: Option<PathBuf>,
    /// The base model (a preset or a model file): its mechanisms are kept, its cache and
    /// read time fitted. Default: the preset of the survey's filesystem.
    #[arg(long, value_name = "PRESET|FILE")]
    model: Option<String>,
    /// The metadata cache the pool has, when known (e.g. 8GiB: the ARC's metadata share):
    /// only the read time is fitted then.
    #[arg(long, value_name = "SIZE")]
    cache: Option<String>,
    /// The strategy of a log that does not name one (PBS's own GC: lru).
    #[arg(long, value_enum, default_value = "lru")]
    strategy: Strategy,
    /// Where the fitted model goes.
    #[arg(long, value_name = "FILE", default_value = "fitted.json")]
    out: PathBuf,
    /// The whole calibration (the fitted model, each log against it, every model tried) as
    /// JSON: `--json` on standard output, `--json=FILE` into FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    json: Option<PathBuf>,
}

pub fn run(args: CalibrateArgs) -> Result<Outcome> {
    let cache = args
        .cache
        .as_deref()
        .map(|c| {
            parse_size::parse_size(c)
                .map_err(|e| anyhow::anyhow!("--cache {c}: {e} (a size such as 8GiB)"))
        })
        .transpose()?;
    if cache == Some(0) {
        bail!(
            "--cache 0: a pool with no metadata cache reads every block every time; give its size"
        );
    }
    let progress = !super::to_stdout(&args.json) && super::stderr_is_terminal();
    let (file, name) = super::simulate::read_survey(
        args.store.as_deref(),
        args.survey.as_deref(),
        None,
        progress,
    )?;
    let index_files = file.indexes.len() as u64;
    let logs = args
        .logs
        .iter()
        .map(|path| observed(path, args.strategy, index_files))
        .collect::<Result<Vec<_>>>()?;
    let filesystem = file.header.filesystem.clone();
    let header = file.header.clone();
    let spec = args
        .model
        .clone()
        .unwrap_or_else(|| default_model(&filesystem).to_string());
    let mut base = ModelParams::load(&spec).with_context(|| format!("--model {spec}"))?;
    let store = crate::sim::build_survey(file, &base)?;
    store.fill_dir_entries(&mut base);
    if let Some(note) = header.fit_model(&mut base) {
        tracing::warn!("{note}");
    }
    tracing::info!(
        "fitting {} to {} log(s) of GCs on {name} ({filesystem}): the cache's size and {}",
        base.name,
        logs.len(),
        if base.disk.is_some() {
            "the host's time per read (io_ns)"
        } else {
            "the time of a read (miss_ns)"
        }
    );
    let mut told = |t: &Trial| {
        tracing::info!(
            "cache {}, {} a read: deviation {:.3}",
            human_bytes(t.cache_bytes),
            duration_ns(t.read_ns),
            t.deviation
        )
    };
    let fit = crate::calibrate::calibrate(&store, &base, &logs, cache, &mut told)?;
    crate::fsutil::write_whole(&args.out, |f| {
        serde_json::to_writer_pretty(&mut *f, &fit.params)?;
        std::io::Write::write_all(f, b"\n")
    })
    .with_context(|| format!("writing {}", args.out.display()))?;
    if let Some(dest) = &args.json {
        super::write_json(dest, &fit)?;
        if super::to_stdout(&args.json) {
            return Ok(Outcome::Ok);
        }
    }
    print!("{}", report(&fit));
    let survey_arg = match (&args.survey, &args.store) {
        (Some(s), _) => format!("--survey {}", s.display()),
        (None, Some(s)) => format!("--store {}", s.display()),
        (None, None) => unreachable!("clap requires one"),
    };
    println!(
        "\nThe fitted model is in {}. Every strategy on this pool:\n  chunkscope simulate {survey_arg} --model {}",
        args.out.display(),
        args.out.display()
    );
    Ok(Outcome::Ok)
}

/// The preset of a filesystem a survey names.
fn default_model(filesystem: &str) -> &'static str {
    match filesystem {
        "ext4" | "ext3" | "ext2" | "btrfs" => "ext4-hdd",
        "xfs" => "xfs-hdd",
        _ => "zfs-hdd",
    }
}

/// A log read and checked against the survey's index files.
fn observed(path: &std::path::Path, default: Strategy, index_files: u64) -> Result<Observed> {
    let text = crate::gc::curve::read_log(path)?;
    let curve = Curve::parse(path, &text)?;
    let strategy = match &curve.strategy {
        Some(s) => Strategy::from_str(s, false).map_err(|_| {
            anyhow::anyhow!(
                "{}: unknown strategy {s:?} in its strategy line",
                path.display()
            )
        })?,
        None => default,
    };
    if let Some(n) = curve.index_files {
        // PBS counts the index files it found at the start; one added meanwhile is
        // "encountered" later. A tenth more or less is another store.
        if n.abs_diff(index_files) * 10 > index_files.max(1) {
            bail!(
                "{}: its GC marked {n} index files, the survey has {index_files}: not the \
                 same store, or one much changed since (survey it again)",
                path.display()
            );
        }
    }
    if curve.mark.is_empty() && curve.sweep.is_empty() {
        bail!(
            "{}: no percentage lines (`marked N% ...`, `processed N% ...`): nothing to fit",
            path.display()
        );
    }
    Ok(Observed {
        path: path.to_path_buf(),
        cache_capacity: curve
            .cache_capacity
            .unwrap_or(crate::gc::DEFAULT_CACHE_CAPACITY),
        curve,
        strategy,
    })
}

/// The report for a person: the fitted values, then each log against the fitted model.
fn report(fit: &Calibration) -> String {
    let p = &fit.params;
    let (lo, hi) = fit.cache_range;
    let range = if lo == hi {
        String::new()
    } else {
        format!(
            " (any from {} to {} fits as well: the logs cannot tell them apart, and a strategy \
             that reads blocks twice, prefetch, depends on it: --cache SIZE pins the pool's; \
             on ZFS the ARC's maximum, which the survey reports)",
            human_bytes(lo),
            human_bytes(hi)
        )
    };
    let mut out = format!(
        "Fitted: metadata cache {}{range}; {} {} a read ({} models tried).\n\n",
        human_bytes(p.cache_bytes),
        fit.read_knob,
        duration_ns(crate::calibrate::read_ns(p)),
        fit.trials.len()
    );
    let mut t = Table::new([
        "log",
        "strategy",
        "phase 1 logged",
        "fitted",
        "phase 2 logged",
        "fitted",
        "deviation",
    ]);
    let secs = |s: f64| duration_ns((s * 1e9) as u64);
    for l in &fit.logs {
        t.row(vec![
            l.log.display().to_string(),
            l.strategy.clone(),
            secs(l.logged_s[0]),
            secs(l.fitted_s[0]),
            secs(l.logged_s[1]),
            secs(l.fitted_s[1]),
            format!("{:.1}%", l.deviation * 100.0),
        ]);
    }
    out.push_str(&t.text());
    let slower = fit
        .logs
        .iter()
        .any(|l| l.fitted_s[0] + l.fitted_s[1] > 1.2 * (l.logged_s[0] + l.logged_s[1]));
    if fit.read_at_floor && slower {
        out.push_str(&format!(
            "\nThe logs' GCs ran faster than the base model can at the least time a read \
             ({} {}): the pool's disks are faster than the model's. Fit a base with faster \
             disks (--model with a model file).\n",
            fit.read_knob,
            duration_ns(crate::calibrate::read_ns(p))
        ));
    }
    out.push_str(
        "\ndeviation: root mean square of each percentage's time difference, over the logged \
         phase's length.\n",
    );
    out
}
