//! The command line: argument parsing and wiring, no logic of any layer.
//!
//! Exit codes: 0 success; 1 the command ran and found a problem (`check` found missing or
//! corrupt data, `inspect` a checksum mismatch); 2 an error (bad arguments, unreadable input).

mod analyze;
mod calibrate;
mod check;
mod ctl;
mod demo;
mod fidelity;
mod gc;
mod gen;
mod inspect;
mod log;
mod model_args;
mod mount;
mod outputs;
mod replay;
mod s3_args;
mod s3_record;
mod simulate;
mod survey;
mod testbed;
mod top;
mod trace;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "chunkscope",
    version,
    about = "Make the metadata traffic of a Proxmox Backup Server garbage collector visible",
    long_about = "chunkscope generates, checks and inspects PBS datastores so that the metadata \
                  traffic of garbage collection can be traced, modelled and compared.",
    after_help = "Start here:\n  chunkscope demo                  the whole experiment on a generated store (about 65 s)\n\nExamples:\n  chunkscope gen --preset tiny --out /dev/shm/store\n  chunkscope check --deep /dev/shm/store"
)]
/// The command line: one subcommand.
pub struct Cli {
    /// More diagnostics: -v debug, -vv trace (RUST_LOG, e.g. chunkscope=debug, overrides).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, display_order = 10_000)]
    verbose: u8,
    /// Fewer: -q warnings and errors only (gen: no progress and no summary), -qq errors only.
    #[arg(short, long, action = clap::ArgAction::Count, global = true, display_order = 10_001)]
    quiet: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Demo(demo::DemoArgs),
    Gen(gen::GenArgs),
    Check(check::CheckArgs),
    Inspect(inspect::InspectArgs),
    Trace(trace::TraceArgs),
    Mount(mount::MountArgs),
    Ctl(ctl::CtlArgs),
    Top(top::TopArgs),
    Gc(gc::GcArgs),
    Replay(replay::ReplayArgs),
    Analyze(analyze::AnalyzeArgs),
    Survey(survey::SurveyArgs),
    Simulate(Box<simulate::SimulateArgs>),
    Fidelity(fidelity::FidelityArgs),
    Testbed(testbed::TestbedArgs),
    Calibrate(calibrate::CalibrateArgs),
    S3Record(s3_record::S3RecordArgs),
}

/// Outcome of a command that ran: success, or a problem found in the input.
pub enum Outcome {
    /// Done, nothing wrong (exit 0).
    Ok,
    /// Done, and the input has problems (exit 1).
    ProblemsFound,
    /// Done, with the exit status of a command it ran (`s3-record -- COMMAND`).
    Exit(i32),
}

/// Parses the arguments, runs the command, returns the exit code.
pub fn run() -> i32 {
    if let Some(e) = destination_without_equals(std::env::args_os(), false) {
        log::final_error(&e);
        return 2;
    }
    let matches = match <Cli as clap::CommandFactory>::command().try_get_matches() {
        Ok(m) => m,
        // An argument too many (`check --json out STORE`): a destination after a space took
        // the input's place; say so rather than that STORE is unexpected.
        Err(e) if e.kind() == clap::error::ErrorKind::UnknownArgument => {
            match destination_without_equals(std::env::args_os(), true) {
                Some(guidance) => {
                    log::final_error(&guidance);
                    return 2;
                }
                None => e.exit(),
            }
        }
        Err(e) => e.exit(),
    };
    // Every option that writes is checked before any work (or the log file is opened).
    if let Err(e) = outputs::check(&matches) {
        log::final_error(&e);
        return 2;
    }
    let cli =
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let log_file = match &cli.command {
        Command::Mount(args) => {
            if let Err(e) = args.check_outputs() {
                log::final_error(&e);
                return 2;
            }
            args.log_file()
        }
        _ => None,
    };
    if let Err(e) = log::init(log::level(cli.verbose, cli.quiet), log_file) {
        log::final_error(&e);
        return 2;
    }
    let quiet = cli.quiet > 0;
    // Commands that print a report and stop: a reader that went away (`| head`) ends them
    // quietly. Not the mount (a daemon must not exit on its log's pipe) nor the demo (its
    // mounts are unmounted as it unwinds).
    if !matches!(cli.command, Command::Mount(_) | Command::Demo(_)) {
        quiet_on_broken_stdout();
    }
    let result = match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Gen(args) => gen::run(args, quiet),
        Command::Check(args) => check::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Trace(args) => trace::run(args),
        Command::Mount(args) => mount::run(args),
        Command::Ctl(args) => ctl::run(args),
        Command::Top(args) => top::run(args),
        Command::Gc(args) => gc::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Analyze(args) => analyze::run(args),
        Command::Simulate(args) => simulate::run(*args),
        Command::Survey(args) => survey::run(args),
        Command::Fidelity(args) => fidelity::run(args),
        Command::Testbed(args) => testbed::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::S3Record(args) => s3_record::run(args),
    };
    match result {
        Ok(Outcome::Ok) => 0,
        Ok(Outcome::ProblemsFound) => 1,
        Ok(Outcome::Exit(code)) => code,
        Err(_) if crate::demo::was_interrupted() || crate::testbed::was_interrupted() => 130,
        // The reader of our output went away (`| head`): nothing is wrong, stop quietly.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            0
        }
        Err(e) => {
            log::final_error(&e);
            2
        }
    }
}

/// `println!` panics when standard output is a pipe whose reader has gone (`chunkscope check
/// STORE | head`); this hook turns that panic into a quiet exit 0, as the reader asked for no
/// more, and leaves every other panic to the default hook.
fn quiet_on_broken_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info)
    }));
}

/// Writes `json` to `dest`: a file, or standard output for `-`.
fn write_json(dest: &std::path::Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    use anyhow::Context;
    let text = serde_json::to_string_pretty(value)? + "\n";
    if dest == std::path::Path::new("-") {
        print!("{text}");
        Ok(())
    } else {
        crate::fsutil::write_whole(dest, |f| std::io::Write::write_all(f, text.as_bytes()))
            .with_context(|| format!("writing {}", dest.display()))
    }
}

/// `--json FILE.json` or `--csv DIR` (a destination after a space): it would be taken for the
/// command's input. `--json` alone writes to standard output, `--json=FILE` to a file; the
/// same for `--csv` and `--csv=DIR`. A `--json NAME` whose NAME is nothing yet was meant as the
/// destination too when the arguments had one too many (`unparsed`), or when another argument
/// names an input that exists (`analyze --json out TRACE`, `analyze TRACE --json out`).
fn destination_without_equals(
    args: impl Iterator<Item = std::ffi::OsString>,
    unparsed: bool,
) -> Option<anyhow::Error> {
    // Arguments as the kernel gave them: a path need not be UTF-8.
    let args: Vec<std::ffi::OsString> = args.collect();
    let exists = |a: &std::ffi::OsString| std::fs::symlink_metadata(a).is_ok();
    args.windows(2).enumerate().find_map(|(i, w)| {
        let (flag, value) = (w[0].to_str()?, &w[1]);
        let bytes = value.as_encoded_bytes();
        if bytes.starts_with(b"-") {
            return None;
        }
        // Another argument names something that exists: the input is given, this is not it.
        let input_elsewhere = || {
            args.iter()
                .enumerate()
                .skip(1)
                .any(|(j, a)| j != i + 1 && !a.as_encoded_bytes().starts_with(b"-") && exists(a))
        };
        let (what, alone) = match flag {
            "--json"
                if bytes.ends_with(b".json")
                    || (!exists(value) && (unparsed || input_elsewhere())) =>
            {
                ("a file", "writes the JSON")
            }
            // A trace after --csv is the command's input; a directory, or a name that is
            // nothing yet, was meant for the tables.
            "--csv" if !std::path::Path::new(value).is_file() => {
                ("a directory", "writes the phases table")
            }
            _ => return None,
        };
        let value = crate::fsutil::shown(std::path::Path::new(value));
        Some(anyhow::anyhow!(
            "{flag} {value}: {what} goes after '=' ({flag}={value}); {flag} alone {alone} to \
             standard output"
        ))
    })
}

/// Whether a `--json[=FILE]` goes to standard output (`--json`, `--json=-`).
fn to_stdout(json: &Option<std::path::PathBuf>) -> bool {
    json.as_deref() == Some(std::path::Path::new("-"))
}

fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
}

/// A TTL flag's value: seconds from 0 to a day.
fn seconds(v: f64, flag: &str) -> anyhow::Result<std::time::Duration> {
    if !(0.0..=86_400.0).contains(&v) {
        anyhow::bail!("{flag} {v}: expected seconds between 0 and 86400");
    }
    Ok(std::time::Duration::from_secs_f64(v))
}

/// Parses a rate given as a fraction (0.01) or a percentage (1%), for option `flag`.
fn parse_rate(s: &str, flag: &str) -> anyhow::Result<f64> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| anyhow::anyhow!("{flag} {s}: expected a rate such as 1% or 0.01"))?;
    if !(v > 0.0 && v <= 1.0) {
        anyhow::bail!("{flag} {s}: the rate must be above 0 and at most 100%");
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_subcommand_has_an_example() {
        for sub in Cli::command().get_subcommands() {
            let help = sub
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(
                help.contains("chunkscope"),
                "{} has no example",
                sub.get_name()
            );
        }
    }
}
