//! Diagnostics: the commands' `tracing` events on standard error (the mount's to its
//! `--log` file), as `chunkscope: warning: ...` lines, filtered by `-v`/`-q` or `RUST_LOG`.
//!
//! Reports, tables and the GC's task log are output, not diagnostics: they go to standard
//! output and are never filtered. Levels: `error` and `warning` always show unless `-qq`;
//! `info` (what a command did: "mounted ...", "3 CSV tables in DIR") unless `-q`; `debug`
//! with `-v` (the daemon's control requests, scrapes, unmounting); `trace` with `-vv`.
//! `RUST_LOG` (e.g. `RUST_LOG=chunkscope=debug`) replaces the flags' level when set.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The level `-v` and `-q` ask for: info by default.
pub fn level(verbose: u8, quiet: u8) -> LevelFilter {
    match (verbose as i16) - (quiet as i16) {
        i16::MIN..=-2 => LevelFilter::ERROR,
        -1 => LevelFilter::WARN,
        0 => LevelFilter::INFO,
        1 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// The lines: `chunkscope: warning: text`, with the time in front in a log file.
struct Lines {
    timestamps: bool,
}

impl<S, N> FormatEvent<S, N> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        if self.timestamps {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let secs = crate::time::rfc3339_utc(now.as_secs() as i64);
            // 2026-12-02T05:30:00.123Z
            write!(
                w,
                "{}.{:03}Z ",
                secs.trim_end_matches('Z'),
                now.subsec_millis()
            )?;
        }
        let level = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            Level::INFO => "",
            Level::DEBUG => "debug: ",
            Level::TRACE => "trace: ",
        };
        // A name from a store or a trace may hold control characters: escaped, so that a
        // hostile name cannot rewrite the terminal or forge a line of the log.
        let mut text = String::new();
        ctx.field_format()
            .format_fields(Writer::new(&mut text), event)?;
        // A signed URL or a URL's password in it is hidden: a log is read by many.
        let text = crate::redact::redact(&text);
        writeln!(w, "chunkscope: {level}{}", escape_controls(&text))
    }
}

/// Installs the subscriber: events at `level` (or as `RUST_LOG` says) to standard error,
/// or appended to `file`, each line with its time.
pub fn init(level: LevelFilter, file: Option<&Path>) -> Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(&v)
            .with_context(|| format!("RUST_LOG={v}: not a filter (e.g. chunkscope=debug)"))?,
        _ => EnvFilter::default().add_directive(level.into()),
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let result = match file {
        Some(path) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("--log {}", path.display()))?;
            builder
                .event_format(Lines { timestamps: true })
                .with_writer(Mutex::new(f))
                .try_init()
        }
        None => builder
            .event_format(Lines { timestamps: false })
            .with_writer(std::io::stderr)
            .try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("starting the log: {e}"))
}

/// Where a command already showed its final error itself (a GC's `TASK ERROR` line): 0
/// nowhere, 1 standard output, 2 standard error.
static SHOWN_ON: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Records that the command's final error was written, as its own line, to standard error
/// (`to_stderr`) or standard output, so [`final_error`] does not say it again where it is
/// already seen.
pub fn error_shown(to_stderr: bool) {
    SHOWN_ON.store(
        if to_stderr { 2 } else { 1 },
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Whether standard output and standard error are one open file (a terminal, `2>&1`).
fn stdout_is_stderr() -> bool {
    let id = |fd| {
        // SAFETY: a plain C struct; fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid out pointer.
        (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino, st.st_rdev))
    };
    id(1).is_some_and(|o| Some(o) == id(2))
}

/// Writes the final error of a command: always shown (`-q` does not hide it), once: not
/// when the command already wrote it where standard error shows.
pub fn final_error(e: &anyhow::Error) {
    match SHOWN_ON.load(std::sync::atomic::Ordering::Relaxed) {
        2 => return,
        1 if stdout_is_stderr() => return,
        _ => {}
    }
    let text = format!("{e:#}");
    let text = crate::redact::redact(&text).into_owned();
    let text = escape_controls(&text);
    let _ = writeln!(std::io::stderr(), "chunkscope: error: {text}");
}

/// `text` with its control characters but line feeds escaped (`\u{1b}`, `\t`).
fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n') {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && c != '\n' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_but_line_feeds() {
        assert_eq!(
            escape_controls("a\u{1b}[31mb\tc\nd"),
            "a\\u{1b}[31mb\\tc\nd"
        );
        assert!(matches!(
            escape_controls("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn flags_pick_the_level() {
        assert_eq!(level(0, 0), LevelFilter::INFO);
        assert_eq!(level(0, 1), LevelFilter::WARN);
        assert_eq!(level(0, 2), LevelFilter::ERROR);
        assert_eq!(level(0, 9), LevelFilter::ERROR);
        assert_eq!(level(1, 0), LevelFilter::DEBUG);
        assert_eq!(level(2, 0), LevelFilter::TRACE);
        assert_eq!(level(1, 1), LevelFilter::INFO);
    }
}
