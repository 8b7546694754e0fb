//! A GC's progress curve: when each percentage of each phase was reached, read from a task
//! log (PBS's task-log file, `chunkscope gc --task-log`) or from a simulated run's lines at
//! the model's clock.
//!
//! The lines are the format document's 6.2: `<RFC 3339 time with offset>: <message>`; the
//! messages that matter are `Start GC phase1 (mark used chunks)`, `marked P% (i of n index
//! files)`, `Start GC phase2 (sweep unused chunks)`, `processed P% (c chunks)`, and the first
//! line after the sweep (`Chunk cache: ...` or `Removed garbage: ...`), which ends it.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Serialize;

/// When each percentage of the two phases was reached, seconds from the phase's start.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Curve {
    /// Phase 1: (percent of the index files marked, seconds).
    pub mark: Vec<(u8, f64)>,
    /// Phase 1's length, to its `marked 100%` line, or without one to the line that starts
    /// phase 2 (None: it did not end, a killed GC or one run with `--phase mark`, whose log
    /// ends at its last percentage). What lies between the two lines is neither phase's:
    /// chunkscope's GC checks every chunk directory there, a stat each where the
    /// filesystem's listing gives no entry types (zfs-fuse: 11 s of the tiny store's 23 on
    /// the ZFS testbed at 64 MiB), and the model charges that check outside the phases.
    pub mark_s: Option<f64>,
    /// Phase 2: (percent of the chunk directories swept, seconds).
    pub sweep: Vec<(u8, f64)>,
    /// Phase 2's length (to the first line after its percentages).
    pub sweep_s: Option<f64>,
    /// Index files phase 1 marked, as its lines say.
    pub index_files: Option<u64>,
    /// The digest cache's capacity, when the log says it (the tuning option was set).
    pub cache_capacity: Option<usize>,
    /// The strategy, when chunkscope's GC wrote it (PBS's own GC does not).
    pub strategy: Option<String>,
    /// Phases that started (`Start GC phase1`, `Start GC phase2` lines).
    pub started: u8,
}

/// The line chunkscope's task-log file carries after the first, naming the strategy
/// (`calibrate` reads it back; PBS's logs have none and are taken as its `lru`).
pub const STRATEGY_PREFIX: &str = "chunkscope strategy: ";

impl Curve {
    /// Phase `i`'s (0: mark, 1: sweep) percentages and length.
    pub fn phase(&self, i: usize) -> (&[(u8, f64)], Option<f64>) {
        match i {
            0 => (&self.mark, self.mark_s),
            _ => (&self.sweep, self.sweep_s),
        }
    }

    /// The curve of a task-log file's text. What cannot be one GC's log is an error naming
    /// the line: a time before the line above's, a log more than a year long, a percentage
    /// that is not a whole number from 0 to 100 or does not rise, a line of over
    /// [`MAX_LINE`] bytes, or every line at one time (nothing to fit).
    pub fn parse(path: &Path, text: &str) -> Result<Curve> {
        let mut lines: Vec<(f64, &str)> = Vec::new();
        let mut last_percent: [Option<u8>; 2] = [None, None];
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = || format!("{} line {}", path.display(), n + 1);
            if line.len() > MAX_LINE {
                bail!(
                    "{}: {} bytes long, over {MAX_LINE}: not a task-log line",
                    at(),
                    line.len()
                );
            }
            let (secs, message) = split_stamp(line).with_context(|| {
                format!(
                    "{}: not a task-log line (`<RFC 3339 time>: <message>`, as PBS's \
                     task-log files and `chunkscope gc --task-log` have): {:?}",
                    at(),
                    clip(line)
                )
            })?;
            if ["Start GC phase1", "Start GC phase2"]
                .iter()
                .any(|s| message.starts_with(s) && lines.iter().any(|l| l.1.starts_with(s)))
            {
                bail!(
                    "{}: more than one garbage collection in one log (this line starts \
                     another): give each its own file",
                    at()
                );
            }
            if let Some(&(before, _)) = lines.last() {
                if secs < before {
                    bail!(
                        "{}: its time is {} s before the line above's: a task log's times \
                         only advance",
                        at(),
                        before - secs
                    );
                }
            }
            if let Some(&(first, _)) = lines.first() {
                if secs - first > MAX_SPAN_S {
                    bail!(
                        "{}: {:.0} days after the log's first line: one GC's log spans less \
                         than a year",
                        at(),
                        (secs - first) / 86_400.0
                    );
                }
            }
            for (phase, prefix) in ["marked ", "processed "].into_iter().enumerate() {
                let Some(rest) = message.strip_prefix(prefix) else {
                    continue;
                };
                let Some((p, _)) = rest.split_once("% (") else {
                    continue;
                };
                let p: u8 = p.parse().ok().filter(|&p| p <= 100).with_context(|| {
                    format!("{}: {prefix}{p}%: not a percentage from 0 to 100", at())
                })?;
                if last_percent[phase].is_some_and(|l| p <= l) {
                    bail!(
                        "{}: {prefix}{p}% after {}%: a GC's percentages rise",
                        at(),
                        last_percent[phase].unwrap()
                    );
                }
                last_percent[phase] = Some(p);
            }
            lines.push((secs, message));
        }
        if let (Some(first), Some(last)) = (lines.first(), lines.last()) {
            if lines.len() > 2 && first.0 == last.0 {
                bail!(
                    "{}: every line has the same time: no progress to fit",
                    path.display()
                );
            }
        }
        let curve = Curve::from_lines(lines.iter().map(|&(t, m)| (t, m)));
        if curve.started == 0 {
            bail!(
                "{}: no `Start GC phase1 (mark used chunks)` or `Start GC phase2` line: not \
                 the task log of a garbage collection",
                path.display()
            );
        }
        Ok(curve)
    }

    /// The curve of `(seconds, message)` lines, in order.
    pub fn from_lines<'a>(lines: impl Iterator<Item = (f64, &'a str)>) -> Curve {
        let mut c = Curve::default();
        let (mut mark_start, mut sweep_start, mut marked_all) = (None, None, None);
        for (t, msg) in lines {
            if let Some(s) = msg.strip_prefix(STRATEGY_PREFIX) {
                c.strategy = Some(s.trim().to_string());
            } else if let Some(n) = msg
                .strip_prefix("Using chunk digest cache capacity of ")
                .and_then(|r| r.trim_end_matches('.').parse().ok())
            {
                c.cache_capacity = Some(n);
            } else if msg.starts_with("Start GC phase1") {
                mark_start = Some(t);
                c.started += 1;
            } else if msg.starts_with("Start GC phase2") {
                c.started += 1;
                if let Some(s) = mark_start {
                    c.mark_s.get_or_insert(marked_all.unwrap_or(t) - s);
                }
                sweep_start = Some(t);
            } else if let Some((p, of)) = percent(msg, "marked ") {
                if let Some(s) = mark_start.filter(|_| sweep_start.is_none()) {
                    c.mark.push((p, t - s));
                    c.index_files = parse_of(of).or(c.index_files);
                    if p == 100 {
                        marked_all = Some(t);
                    }
                }
            } else if let Some((p, _)) = percent(msg, "processed ") {
                if let Some(s) = sweep_start.filter(|_| c.sweep_s.is_none()) {
                    c.sweep.push((p, t - s));
                }
            } else if let Some(s) = sweep_start.filter(|_| c.sweep_s.is_none()) {
                // The sweep's first line after its percentages ends it (a warning inside
                // it is no such line: it starts with `warning`).
                if !msg.starts_with("warning") {
                    c.sweep_s = Some(t - s);
                }
            }
        }
        c
    }
}

/// `marked 7% (12 of 171 index files)` → (7, "12 of 171 index files)").
fn percent<'a>(msg: &'a str, prefix: &str) -> Option<(u8, &'a str)> {
    let rest = msg.strip_prefix(prefix)?;
    let (p, rest) = rest.split_once("% (")?;
    Some((p.parse().ok()?, rest))
}

/// `12 of 171 index files)` → 171.
fn parse_of(rest: &str) -> Option<u64> {
    rest.split_once(" of ")?.1.split(' ').next()?.parse().ok()
}

/// The longest task-log line read, in bytes (a PBS line is under a few hundred).
pub const MAX_LINE: usize = 64 * 1024;
/// The largest task-log file read, in bytes (a GC's log is some hundreds of lines; a
/// warning a missing chunk, 400,000 of them fit).
pub const MAX_LOG_BYTES: u64 = 64 << 20;
/// The longest time one GC's log may span.
const MAX_SPAN_S: f64 = 366.0 * 86_400.0;

/// A task-log file's text, at most [`MAX_LOG_BYTES`] of it: a larger file is an error naming
/// its size, before it is read.
pub fn read_log(path: &Path) -> Result<String> {
    use std::io::Read;
    let f = std::fs::File::open(path)
        .with_context(|| format!("reading the task log {}", path.display()))?;
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    if size > MAX_LOG_BYTES {
        bail!(
            "{}: {} MiB, over {} MiB: not the task log of one garbage collection",
            path.display(),
            size >> 20,
            MAX_LOG_BYTES >> 20
        );
    }
    let mut text = String::new();
    f.take(MAX_LOG_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading the task log {}", path.display()))?;
    if text.len() as u64 > MAX_LOG_BYTES {
        bail!(
            "{}: over {} MiB: not the task log of one garbage collection",
            path.display(),
            MAX_LOG_BYTES >> 20
        );
    }
    Ok(text)
}

fn clip(line: &str) -> String {
    line.chars().take(80).collect()
}

/// `2025-05-16T22:31:53+02:00: Removed chunks: 0` → (epoch seconds, `Removed chunks: 0`);
/// a fraction of a second and `Z` are accepted too.
pub fn split_stamp(line: &str) -> Result<(f64, &str)> {
    let b = line.as_bytes();
    if b.len() < 20 || !line.is_char_boundary(19) {
        bail!("too short for a timestamp");
    }
    let whole = crate::time::parse_rfc3339_utc(&format!("{}Z", &line[..19]))
        .context("no `YYYY-MM-DDTHH:MM:SS` at its start")?;
    let mut i = 19;
    let mut frac = 0.0;
    if b[i] == b'.' {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            bail!("a `.` with no fraction of a second after it");
        }
        frac = format!("0.{}", &line[i + 1..i + 1 + digits]).parse::<f64>()?;
        i += 1 + digits;
    }
    let offset = match b.get(i) {
        Some(b'Z') => {
            i += 1;
            0
        }
        Some(&sign @ (b'+' | b'-')) => {
            let hm = line
                .get(i + 1..i + 6)
                .filter(|s| s.as_bytes()[2] == b':')
                .context("an offset that is not `+HH:MM`")?;
            let (h, m): (i64, i64) = (hm[..2].parse()?, hm[3..].parse()?);
            i += 6;
            (h * 3600 + m * 60) * if sign == b'-' { -1 } else { 1 }
        }
        _ => bail!("no `Z` or `+HH:MM` offset after the time"),
    };
    let message = line[i..]
        .strip_prefix(": ")
        .context("no `: ` between the time and the message")?;
    Ok(((whole - offset) as f64 + frac, message))
}

/// A task-log file's timestamp for epoch time `secs`, in UTC to the millisecond (PBS writes
/// local time to the second: the parser takes both).
pub fn stamp(secs: f64) -> String {
    let whole = secs.floor();
    let millis = (((secs - whole) * 1000.0).floor() as u32).min(999);
    let t = crate::time::rfc3339_utc(whole as i64);
    format!("{}.{millis:03}+00:00", t.trim_end_matches('Z'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PBS: &str = "\
2025-05-16T22:31:50+02:00: starting garbage collection on store pbs
2025-05-16T22:31:50+02:00: Access time update check successful, proceeding with GC.
2025-05-16T22:31:50+02:00: Using access time cutoff 1d 5m, minimum access time is 2025-05-15T20:26:48Z
2025-05-16T22:31:50+02:00: Using chunk digest cache capacity of 2097152.
2025-05-16T22:31:51+02:00: Start GC phase1 (mark used chunks)
2025-05-16T22:32:01+02:00: marked 50% (2 of 4 index files)
2025-05-16T22:32:11+02:00: marked 100% (4 of 4 index files)
2025-05-16T22:32:12+02:00: Start GC phase2 (sweep unused chunks)
2025-05-16T22:32:14+02:00: processed 1% (14958 chunks)
2025-05-16T22:32:15+02:00: warning: unable to access chunk x
2025-05-16T22:33:52+02:00: processed 99% (1479792 chunks)
2025-05-16T22:33:53+02:00: Chunk cache: hits 1, misses 2 (hit ratio 33.33%)
2025-05-16T22:33:53+02:00: Removed garbage: 1.234 GiB
2025-05-16T22:33:53+02:00: TASK OK
";

    #[test]
    fn a_pbs_task_log_gives_both_phases_percentages_and_lengths() {
        let c = Curve::parse(Path::new("t.log"), PBS).unwrap();
        assert_eq!(c.mark, vec![(50, 10.0), (100, 20.0)]);
        // To the 100% line, not to phase 2's first (a second later here).
        assert_eq!(c.mark_s, Some(20.0));
        assert_eq!(c.sweep, vec![(1, 2.0), (99, 100.0)]);
        assert_eq!(c.sweep_s, Some(101.0));
        assert_eq!(c.index_files, Some(4));
        assert_eq!(c.cache_capacity, Some(2_097_152));
        assert_eq!(c.strategy, None);
    }

    #[test]
    fn stamps_parse_with_offsets_fractions_and_round_trip() {
        let (a, m) = split_stamp("2025-05-16T22:31:53+02:00: x: y").unwrap();
        let (b, _) = split_stamp("2025-05-16T20:31:53Z: x").unwrap();
        assert_eq!((a, m), (b, "x: y"));
        let (c, _) = split_stamp("2025-05-16T15:31:53.250-05:00: x").unwrap();
        assert_eq!(c, a + 0.25);
        let (d, _) = split_stamp(&format!("{}: x", stamp(a + 0.125))).unwrap();
        assert_eq!(d, a + 0.125);
        for bad in [
            "marked 1% (1 of 2 index files)",
            "2025-05-16T22:31:53+02:00 x",
            "2025-05-16T22:31:53+0200: x",
            "2025-05-16 22:31:53+02:00: x",
            "2025-05-16T22:31:53.+02:00: x",
        ] {
            assert!(split_stamp(bad).is_err(), "{bad}");
        }
    }

    /// chunkscope's GC on zfs-fuse: the check of every chunk directory between phase 1's
    /// last line and phase 2's first (a stat each, no entry types) is neither phase's, as in
    /// the model; phase 1 ends at its 100% line.
    #[test]
    fn phase_1_ends_at_its_100_percent_line_not_after_the_check_before_phase_2() {
        let log = "\
2026-12-07T19:44:44.181+00:00: Start GC phase1 (mark used chunks)
2026-12-07T19:44:49.142+00:00: marked 1% (2 of 106 index files)
2026-12-07T19:44:55.682+00:00: marked 100% (106 of 106 index files)
2026-12-07T19:45:06.636+00:00: Start GC phase2 (sweep unused chunks)
2026-12-07T19:45:07.071+00:00: processed 1% (24 chunks)
2026-12-07T19:48:18.122+00:00: processed 99% (2719 chunks)
2026-12-07T19:48:18.500+00:00: TASK OK
";
        let c = Curve::parse(Path::new("t.log"), log).unwrap();
        let mark_s = c.mark_s.unwrap();
        assert!((mark_s - 11.501).abs() < 1e-6, "{mark_s}");
        assert_eq!(c.mark.last().map(|p| p.0), Some(100));
        let sweep_s = c.sweep_s.unwrap();
        assert!((sweep_s - 191.864).abs() < 1e-6, "{sweep_s}");
    }

    #[test]
    fn a_log_that_is_not_a_gcs_is_refused_with_its_line() {
        let e =
            Curve::parse(Path::new("x.log"), "2025-05-16T22:31:53Z: ok\nnonsense\n").unwrap_err();
        assert!(format!("{e:#}").contains("x.log line 2"), "{e:#}");
        let e = Curve::parse(Path::new("y.log"), "2025-05-16T22:31:53Z: TASK OK\n").unwrap_err();
        assert!(format!("{e:#}").contains("no `Start GC phase1"), "{e:#}");
        // A second GC an hour later: its start is the line named.
        let two = format!("{PBS}{}", PBS.replace("T22:3", "T23:3"));
        let e = Curve::parse(Path::new("z.log"), &two).unwrap_err();
        assert!(
            format!("{e:#}").contains("z.log line 19: more than one garbage collection"),
            "{e:#}"
        );
    }

    #[test]
    fn a_killed_gc_has_its_percentages_and_no_end() {
        let text = "2025-05-16T22:31:51Z: Start GC phase1 (mark used chunks)\n\
                    2025-05-16T22:31:55Z: marked 1% (1 of 100 index files)\n\
                    2025-05-16T22:31:59Z: TASK ERROR: interrupted\n";
        let c = Curve::parse(Path::new("k.log"), text).unwrap();
        assert_eq!(c.mark, vec![(1, 4.0)]);
        assert_eq!((c.mark_s, c.sweep_s), (None, None));
        assert!(c.sweep.is_empty());
    }
}
