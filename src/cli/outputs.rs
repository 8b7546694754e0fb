//! Every option that writes, checked before any work: a directory where a file is expected,
//! a missing directory, a place that cannot be written get one error naming the option and
//! the path, and nothing is read or written before it (`survey --out /tmp STORE` used to
//! survey the whole store, then fail, leaving its temporary file in `/`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::ArgMatches;

use crate::fsutil::shown;

/// What an option writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A file (replaced whole), in a directory that exists.
    File,
    /// A directory, created with its missing parents if need be.
    Dir,
}

/// The options that write, by subcommand (`trace import` as "trace import") and argument id.
pub(super) const OUTPUTS: &[(&str, &str, Kind)] = &[
    ("analyze", "json", Kind::File),
    ("analyze", "csv", Kind::Dir),
    ("analyze", "parquet", Kind::Dir),
    ("analyze", "svg", Kind::Dir),
    ("calibrate", "out", Kind::File),
    ("calibrate", "json", Kind::File),
    ("check", "json", Kind::File),
    ("demo", "out", Kind::Dir),
    ("fidelity", "json", Kind::File),
    ("gc", "json", Kind::File),
    ("gc", "task_log", Kind::File),
    ("gen", "out", Kind::Dir),
    ("mount", "trace", Kind::File),
    ("mount", "log", Kind::File),
    ("mount", "stats", Kind::File),
    ("replay", "json", Kind::File),
    ("s3-record", "trace", Kind::File),
    ("simulate", "json", Kind::File),
    ("simulate", "trace", Kind::File),
    ("survey", "json", Kind::File),
    ("survey", "out", Kind::File),
    ("testbed", "out", Kind::Dir),
    ("trace export", "output", Kind::File),
    ("trace device", "svg", Kind::Dir),
    ("trace import", "out", Kind::File),
];

/// The subcommand run ("trace import") and its matches.
fn chosen(m: &ArgMatches) -> Option<(String, &ArgMatches)> {
    let (name, sub) = m.subcommand()?;
    Some(match sub.subcommand() {
        Some((inner, deeper)) => (format!("{name} {inner}"), deeper),
        None => (name.to_string(), sub),
    })
}

/// Checks every output option given to the subcommand in `m`.
pub(super) fn check(m: &ArgMatches) -> Result<()> {
    let Some((command, sub)) = chosen(m) else {
        return Ok(());
    };
    for &(_, id, kind) in OUTPUTS.iter().filter(|(c, ..)| *c == command) {
        if let Ok(Some(path)) = sub.try_get_one::<PathBuf>(id) {
            check_one(&format!("--{}", id.replace('_', "-")), path, kind)?;
        }
    }
    Ok(())
}

/// Whether this process may write in `dir` (root too is refused on a read-only filesystem).
fn writable(dir: &Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    // SAFETY: a valid C string.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// One output option's path.
pub(super) fn check_one(flag: &str, path: &Path, kind: Kind) -> Result<()> {
    if path == Path::new("-") {
        return Ok(());
    }
    let p = shown(path);
    match std::fs::metadata(path) {
        Ok(m) if kind == Kind::File && m.is_dir() => {
            bail!("{flag} {p}: a directory; give a file name (such as {p}/NAME)")
        }
        Ok(m) if kind == Kind::Dir && !m.is_dir() => {
            bail!("{flag} {p}: not a directory; give a directory (it is created if missing)")
        }
        Ok(m) if kind == Kind::Dir || !m.is_file() => {
            // A directory to write into, or a device or pipe written as is.
            if m.is_dir() {
                if let Err(e) = writable(path) {
                    bail!("{flag} {p}: cannot write in it ({e})");
                }
            }
            return Ok(());
        }
        _ => {}
    }
    // The directory it goes in (for a directory, its nearest existing ancestor).
    let parent = match path.parent() {
        Some(d) if d.as_os_str().is_empty() => Path::new("."),
        Some(d) => d,
        None => Path::new("/"),
    };
    let mut dir = parent;
    if kind == Kind::Dir {
        while !dir.exists() {
            match dir.parent() {
                Some(up) if !up.as_os_str().is_empty() => dir = up,
                _ => {
                    dir = Path::new(".");
                    break;
                }
            }
        }
    }
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!("{flag} {p}: {} is not a directory", shown(dir)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{flag} {p}: its directory {} does not exist", shown(dir))
        }
        Err(e) => bail!("{flag} {p}: {}: {e}", shown(dir)),
    }
    if let Err(e) = writable(dir) {
        bail!("{flag} {p}: cannot write in {} ({e})", shown(dir));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every entry names a subcommand and an argument the command line has (a renamed option
    /// would otherwise go unchecked without a word).
    #[test]
    fn every_output_is_an_argument_of_its_command() {
        let cli = super::super::Cli::command();
        for &(command, id, _) in OUTPUTS {
            let mut c = &cli;
            for name in command.split(' ') {
                c = c
                    .get_subcommands()
                    .find(|s| s.get_name() == name)
                    .unwrap_or_else(|| panic!("no subcommand {command}"));
            }
            assert!(
                c.get_arguments().any(|a| a.get_id() == id),
                "{command} has no argument {id}"
            );
        }
    }

    #[test]
    fn paths_are_checked_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let file = d.join("f");
        std::fs::write(&file, "x").unwrap();
        let err = |path: &Path, kind| check_one("--out", path, kind).unwrap_err().to_string();
        assert!(err(d, Kind::File).contains("a directory; give a file name"));
        assert!(err(&file, Kind::Dir).contains("not a directory"));
        assert!(err(&d.join("no/x.json"), Kind::File).contains("does not exist"));
        assert!(err(&file.join("x.json"), Kind::File).contains("is not a directory"));
        for ok in [
            (d.join("new.json"), Kind::File),
            (file.clone(), Kind::File),
            (d.join("a/b/c"), Kind::Dir),
            (d.to_path_buf(), Kind::Dir),
            (PathBuf::from("-"), Kind::File),
            (PathBuf::from("/dev/null"), Kind::File),
        ] {
            check_one("--out", &ok.0, ok.1).unwrap();
        }
    }
}
