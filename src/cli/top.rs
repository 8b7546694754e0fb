//! `chunkscope top`: a live view of a running mount, from its control socket.
//!
//! Each interval it asks the mount for its counters (`stats`, answered by the control
//! thread: the request path is never waited on) and shows what changed since the last ask:
//! the GC's phase and progress, requests per second, latency percentiles of the interval,
//! the model's cache and dirty blocks, fault rules, the trace writer. On a terminal it is a
//! full-screen view (ratatui) that `q` quits; otherwise one line per interval, as `vmstat 1`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Gauge, Paragraph, Row, Table};

use super::Outcome;
use crate::live::Histogram;
use crate::overlay::control::{default_socket, Client, Stats};
use crate::units::{duration_ns, thousands};

/// A live view of a running mount: GC phase and progress, requests, latency, model, faults.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope top /mnt/cs\n  \
    chunkscope top --interval 0.5 --count 4 /mnt/cs > top.log   # as vmstat\n  \
    chunkscope top --screen /mnt/cs   # print one screen and exit\n\n\
    The phase comes from the GC's markers (chunkscope gc), or is inferred from the requests\n\
    on a traced mount (a real PBS's GC: '(inferred)'). Percentiles are of the interval's\n\
    requests, read from histograms of 8 buckets per power of two (within 12.5%).")]
pub struct TopArgs {
    /// The mountpoint of a running `chunkscope mount`.
    mountpoint: PathBuf,
    /// The control socket, when the mount was started with --control.
    #[arg(long, value_name = "SOCKET")]
    control: Option<PathBuf>,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS", value_parser = interval)]
    interval: f64,
    /// Stop after this many intervals (default: until `q`, Ctrl-C or the mount ends).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// One line per interval even on a terminal.
    #[arg(long)]
    lines: bool,
    /// Print one screen of the full view as text, after one interval, and exit.
    #[arg(long, conflicts_with_all = ["lines", "count"])]
    screen: bool,
}

fn interval(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if (0.05..=3600.0).contains(&x) => Ok(x),
        _ => Err(format!(
            "'{v}' is not a number of seconds from 0.05 to 3600"
        )),
    }
}

/// What one interval shows: the change between two answers to `stats`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Interval {
    /// Seconds between the two.
    pub secs: f64,
    /// `phase 1 strategy=lru`, `phase 2 (inferred)`, `idle` ...
    pub phase: String,
    /// The running phase's number, if any.
    pub phase_number: Option<u8>,
    /// How far the phase is, 0..=1, when known (phase 2 by directories, phase 1 by index
    /// files when the store's count is known).
    pub done: Option<f64>,
    /// What `done` counts: `1,234 of 5,678 index files`, `12,345 of 65,536 directories`.
    pub done_text: String,
    /// Seconds left at the interval's rate.
    pub eta_secs: Option<f64>,
    /// Touches and unlinks per second (the inferred GC's, on a traced mount).
    pub touches_per_s: f64,
    /// Unlinks per second.
    pub unlinks_per_s: f64,
    /// Requests per second, all operations.
    pub requests_per_s: f64,
    /// Per operation with requests in the interval: name, requests/s, errors/s, real p50,
    /// p99 and max, modelled p50 and p99 (ns).
    pub ops: Vec<OpLine>,
    /// Real latency of every request of the interval: p50, p99.
    pub real: (Option<u64>, Option<u64>),
    /// Modelled cost of every request of the interval: p50, p99.
    pub modeled: (Option<u64>, Option<u64>),
    /// The model's cache hit ratio in the interval (hits / (hits + demand reads)).
    pub hit_ratio: Option<f64>,
    /// Dirty blocks now and the limit, with a model.
    pub dirty: Option<(u64, u64)>,
    /// Throttle delay added per second of the interval (ns/s), with a model.
    pub throttle_ns_per_s: Option<f64>,
    /// Fault rules: text, fired in the interval, fired in all.
    pub faults: Vec<(String, u64, u64)>,
    /// Trace records per second, and stalls in the interval (senders that waited).
    pub records_per_s: f64,
    /// Stalls in the interval.
    pub stalls: u64,
    /// Records lost in all (the writer failed).
    pub lost: u64,
    /// Requests whose handler panicked, in all (each answered EIO).
    pub panics: u64,
}

/// One operation's line of an [`Interval`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpLine {
    /// Its name.
    pub op: String,
    /// Requests per second.
    pub per_s: f64,
    /// Errors per second.
    pub errors_per_s: f64,
    /// Real latency: p50, p99, max.
    pub real: (Option<u64>, Option<u64>, Option<u64>),
    /// Modelled cost: p50, p99.
    pub modeled: (Option<u64>, Option<u64>),
}

impl Interval {
    /// What changed from `a` to `b`, `secs` apart.
    pub fn between(a: &Stats, b: &Stats, secs: f64) -> Interval {
        let secs = secs.max(1e-3);
        let rate = |d: u64| d as f64 / secs;
        let mut all_real = Histogram::default();
        let mut all_modeled = Histogram::default();
        let mut ops = Vec::new();
        let mut requests = 0;
        for o in &b.ops {
            let before = a.ops.iter().find(|x| x.op == o.op);
            let n = o.requests - before.map_or(0, |x| x.requests.min(o.requests));
            if n == 0 {
                continue;
            }
            requests += n;
            let errors = o.errors - before.map_or(0, |x| x.errors.min(o.errors));
            let empty = Histogram::default();
            let real = o.real_ns.since(before.map_or(&empty, |x| &x.real_ns));
            let modeled = o.modeled_ns.since(before.map_or(&empty, |x| &x.modeled_ns));
            all_real = all_real.merged(&real);
            all_modeled = all_modeled.merged(&modeled);
            ops.push(OpLine {
                op: o.op.clone(),
                per_s: rate(n),
                errors_per_s: rate(errors),
                real: (real.quantile(0.5), real.quantile(0.99), real.quantile(1.0)),
                modeled: (modeled.quantile(0.5), modeled.quantile(0.99)),
            });
        }
        ops.sort_by(|x, y| y.per_s.total_cmp(&x.per_s));
        let g = &b.gc;
        let (pa, pb) = (&a.gc.progress, &g.progress);
        let same_gc = pa.gcs == pb.gcs;
        let delta = |x: u64, y: u64| if same_gc { y.saturating_sub(x) } else { y };
        let touches = delta(pa.touches, pb.touches);
        let unlinks = delta(pa.unlinks, pb.unlinks);
        let phase_now = g.phase();
        let phase = match (phase_now, &g.marked_strategy) {
            (Some((n, false)), Some(s)) => format!("phase {n} strategy={s}"),
            (Some((n, false)), None) => format!("phase {n}"),
            (Some((2, true)), _) if g.tentative => "phase 2 (inferred, tentative)".into(),
            (Some((n, true)), _) => format!("phase {n} (inferred)"),
            (None, _) if g.inferring || g.phase_markers > 0 => "no GC running".into(),
            (None, _) => "no GC markers (an untraced mount infers no phases)".into(),
        };
        // Progress needs the inference's counters (a traced mount).
        let (mut done, mut done_text, mut eta_secs) = (None, String::new(), None);
        if g.inferring {
            match phase_now.map(|p| p.0) {
                Some(1) => {
                    if let Some(total) = b.index_files.filter(|&t| t > 0) {
                        let k = pb.indexes.min(total);
                        done = Some(k as f64 / total as f64);
                        done_text = format!("{} of {} index files", thousands(k), thousands(total));
                        let per_s = rate(delta(pa.indexes, pb.indexes));
                        eta_secs = (per_s > 0.0).then(|| (total - k) as f64 / per_s);
                    } else {
                        done_text = format!("{} index files", thousands(pb.indexes));
                    }
                }
                Some(2) => {
                    let total = crate::datastore::paths::CHUNK_SUBDIRS as u64;
                    let k = (pb.dirs_swept as u64).min(total);
                    done = Some(k as f64 / total as f64);
                    done_text = format!("{} of {} directories", thousands(k), thousands(total));
                    let per_s = rate(delta(pa.dirs_swept as u64, pb.dirs_swept as u64));
                    eta_secs = (per_s > 0.0).then(|| (total - k) as f64 / per_s);
                }
                _ => {}
            }
        }
        let (hit_ratio, dirty, throttle) = match (&a.model, &b.model) {
            (Some(ma), Some(mb)) => {
                let hits = mb.totals.hits.saturating_sub(ma.totals.hits);
                let misses = mb.totals.misses.saturating_sub(ma.totals.misses);
                (
                    (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64),
                    Some((mb.dirty_blocks, mb.dirty_limit_blocks)),
                    Some(rate(
                        mb.totals.throttle_ns.saturating_sub(ma.totals.throttle_ns),
                    )),
                )
            }
            (_, Some(mb)) => (None, Some((mb.dirty_blocks, mb.dirty_limit_blocks)), None),
            _ => (None, None, None),
        };
        let faults = b
            .faults
            .iter()
            .flatten()
            .map(|r| {
                let before = a.faults.iter().flatten().find(|x| x.rule == r.rule);
                let fired = r.hits - before.map_or(0, |x| x.hits.min(r.hits));
                (r.rule.clone(), fired, r.hits)
            })
            .collect();
        Interval {
            secs,
            phase,
            phase_number: phase_now.map(|p| p.0),
            done,
            done_text,
            eta_secs,
            touches_per_s: rate(touches),
            unlinks_per_s: rate(unlinks),
            requests_per_s: rate(requests),
            ops,
            real: (all_real.quantile(0.5), all_real.quantile(0.99)),
            modeled: (all_modeled.quantile(0.5), all_modeled.quantile(0.99)),
            hit_ratio,
            dirty,
            throttle_ns_per_s: throttle,
            faults,
            records_per_s: rate(b.records.saturating_sub(a.records)),
            stalls: b.stalls.saturating_sub(a.stalls),
            lost: b.lost,
            panics: b.panics,
        }
    }

    /// The interval as one line of [`LINE_HEADER`]'s columns.
    pub fn line(&self, clock: &str) -> String {
        let us = |v: Option<u64>| {
            v.map_or("-".to_string(), |ns| match ns as f64 / 1e3 {
                x if x < 10.0 => format!("{x:.1}"),
                x => format!("{x:.0}"),
            })
        };
        let phase = match self.phase_number {
            Some(n) if self.phase.contains("inferred") => format!("{n}?"),
            Some(n) => n.to_string(),
            None => "-".into(),
        };
        let done = self
            .done
            .map_or("-".into(), |d| format!("{:.1}", 100.0 * d));
        let eta = self.eta_secs.map_or("-".into(), |s| {
            duration_ns((s * 1e9) as u64).replace(' ', "")
        });
        let per = |name: &str| {
            self.ops
                .iter()
                .find(|o| o.op == name)
                .map_or(0.0, |o| o.per_s)
        };
        format!(
            "{clock:<8} {phase:>5} {done:>6} {eta:>9} {:>8.0} {:>7.0} {:>7.0} {:>7.0} {:>7.0} {:>7.0} \
             {:>8} {:>8} {:>9} {:>5} {:>7} {:>6} {:>8.0} {:>6}",
            self.requests_per_s,
            per("lookup"),
            per("getattr"),
            per("setattr"),
            per("readdir") + per("readdirplus"),
            per("unlink"),
            us(self.real.0),
            us(self.real.1),
            us(self.modeled.1),
            self.hit_ratio.map_or("-".into(), |h| format!("{:.0}", 100.0 * h)),
            self.dirty.map_or("-".into(), |d| d.0.to_string()),
            self.faults.iter().map(|f| f.1).sum::<u64>(),
            self.records_per_s,
            self.stalls,
        )
    }
}

/// The columns of [`Interval::line`].
pub const LINE_HEADER: &str =
    "time     phase  done%       eta    req/s  lookup getattr setattr readdir  unlink \
                               p50(us)  p99(us) mod99(us)  hit%   dirty faults    rec/s stalls";

fn clock_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    crate::time::rfc3339_utc(secs as i64)[11..19].to_string()
}

fn lat(v: Option<u64>) -> String {
    v.map_or("-".into(), duration_ns)
}

/// Draws the full view of `iv` for the mount at `mnt` into `area`.
fn draw(f: &mut ratatui::Frame<'_>, area: Rect, mnt: &str, iv: &Interval) {
    let rows = Layout::vertical([
        Constraint::Length(4),
        Constraint::Min(6),
        Constraint::Length(5),
    ])
    .split(area);
    draw_gc(f, rows[0], mnt, iv);
    draw_requests(f, rows[1], iv);
    draw_model_faults_trace(f, rows[2], iv);
}

/// The GC: its phase, progress, rates and a gauge.
fn draw_gc(f: &mut ratatui::Frame<'_>, area: Rect, mnt: &str, iv: &Interval) {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let gc = Block::default()
        .borders(Borders::ALL)
        .title(format!(" chunkscope top {mnt}  (q quits) "));
    let inner = gc.inner(area);
    f.render_widget(gc, area);
    let gc_rows = Layout::vertical([Constraint::Length(1), Constraint::Length(1)]).split(inner);
    let eta = iv.eta_secs.map_or(String::new(), |s| {
        format!(", ETA {}", duration_ns((s * 1e9) as u64))
    });
    f.render_widget(
        Paragraph::new(Line::styled(
            format!(
                "{}  {}{}  |  touches {:.0}/s  unlinks {:.0}/s",
                iv.phase, iv.done_text, eta, iv.touches_per_s, iv.unlinks_per_s
            ),
            bold,
        )),
        gc_rows[0],
    );
    f.render_widget(
        Gauge::default()
            .ratio(iv.done.unwrap_or(0.0).clamp(0.0, 1.0))
            .label(
                iv.done
                    .map_or("progress unknown".into(), |d| format!("{:.1}%", 100.0 * d)),
            ),
        gc_rows[1],
    );
}

/// Requests per operation: rates, errors, real and modelled latencies.
fn draw_requests(f: &mut ratatui::Frame<'_>, area: Rect, iv: &Interval) {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let header = Row::new([
        "op",
        "req/s",
        "err/s",
        "real p50",
        "real p99",
        "real max",
        "model p50",
        "model p99",
    ])
    .style(bold);
    let body: Vec<Row> = iv
        .ops
        .iter()
        .map(|o| {
            Row::new([
                o.op.clone(),
                format!("{:.0}", o.per_s),
                format!("{:.0}", o.errors_per_s),
                lat(o.real.0),
                lat(o.real.1),
                lat(o.real.2),
                lat(o.modeled.0),
                lat(o.modeled.1),
            ])
        })
        .collect();
    let title = format!(
        " requests: {:.0}/s, real p50 {} p99 {}, modelled p50 {} p99 {} ",
        iv.requests_per_s,
        lat(iv.real.0),
        lat(iv.real.1),
        lat(iv.modeled.0),
        lat(iv.modeled.1)
    );
    f.render_widget(
        Table::new(
            body,
            [
                Constraint::Length(11),
                Constraint::Length(8),
                Constraint::Length(6),
                Constraint::Length(9),
                Constraint::Length(9),
                Constraint::Length(9),
                Constraint::Length(9),
                Constraint::Length(9),
            ],
        )
        .header(header)
        .block(Block::default().borders(Borders::ALL).title(title)),
        area,
    );
}

/// The model's cache and dirty blocks, the fault rules, the trace writer.
fn draw_model_faults_trace(f: &mut ratatui::Frame<'_>, area: Rect, iv: &Interval) {
    let cols = Layout::horizontal([
        Constraint::Percentage(32),
        Constraint::Percentage(44),
        Constraint::Percentage(24),
    ])
    .split(area);
    let model = match iv.dirty {
        Some((d, limit)) => vec![
            Line::from(format!(
                "cache hits {}",
                iv.hit_ratio
                    .map_or("-".into(), |h| format!("{:.1}%", 100.0 * h))
            )),
            Line::from(format!("dirty {}/{}", thousands(d), thousands(limit))),
            Line::from(format!(
                "throttle {}/s",
                duration_ns(iv.throttle_ns_per_s.unwrap_or(0.0) as u64)
            )),
        ],
        None => vec![Line::from("no model (mount --model)")],
    };
    f.render_widget(
        Paragraph::new(model).block(Block::default().borders(Borders::ALL).title(" model ")),
        cols[0],
    );
    let faults: Vec<Line> = if iv.faults.is_empty() {
        vec![Line::from("no fault rules")]
    } else {
        iv.faults
            .iter()
            .map(|(r, now, all)| Line::from(format!("{now}/{all} {r}")))
            .collect()
    };
    f.render_widget(
        Paragraph::new(faults).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" faults fired (now/all) "),
        ),
        cols[1],
    );
    let trace = vec![
        Line::from(format!("records {:.0}/s", iv.records_per_s)),
        Line::from(format!("stalls {}", iv.stalls)),
        Line::from(format!("lost {}", iv.lost)),
        Line::from(format!("handler panics {}", iv.panics)),
    ];
    f.render_widget(
        Paragraph::new(trace).block(Block::default().borders(Borders::ALL).title(" trace ")),
        cols[2],
    );
}

/// One screen of the full view as text, `width` × `height` cells.
pub fn screen(mnt: &str, iv: &Interval, width: u16, height: u16) -> String {
    let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, height))
        .expect("an in-memory terminal");
    term.draw(|f| draw(f, f.area(), mnt, iv))
        .expect("drawing in memory");
    let buf = term.backend().buffer();
    let mut out = String::new();
    for y in 0..height {
        let line: String = (0..width)
            .map(|x| buf[(x, y)].symbol().to_string())
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

struct Poll {
    client: Client,
    last: Stats,
    at: Instant,
}

impl Poll {
    fn next(&mut self) -> Result<Interval> {
        let now = self.client.stats().context("the mount stopped answering")?;
        let at = Instant::now();
        let iv = Interval::between(&self.last, &now, (at - self.at).as_secs_f64());
        self.last = now;
        self.at = at;
        Ok(iv)
    }
}

pub fn run(args: TopArgs) -> Result<Outcome> {
    let socket = match &args.control {
        Some(p) => p.clone(),
        None => default_socket(&args.mountpoint)?,
    };
    let mut client = Client::connect(&socket)?;
    let last = client.stats()?;
    let mut poll = Poll {
        client,
        last,
        at: Instant::now(),
    };
    let every = Duration::from_secs_f64(args.interval);
    let mnt = args.mountpoint.display().to_string();
    if args.screen {
        std::thread::sleep(every);
        let iv = poll.next()?;
        // As wide as the terminal (80 columns without one), as tall as what it shows.
        let w = ratatui::crossterm::terminal::size()
            .map_or(80, |s| s.0)
            .max(80);
        let h = 4 + (iv.ops.len() as u16 + 3).max(6) + 5;
        print!("{}", screen(&mnt, &iv, w, h));
        return Ok(Outcome::Ok);
    }
    if args.lines || !std::io::stdout().is_terminal() {
        return lines(&mut poll, every, args.count);
    }
    full_screen(&mut poll, every, args.count, &mnt)
}

fn lines(poll: &mut Poll, every: Duration, count: Option<u64>) -> Result<Outcome> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let mut n = 0u64;
    while count.is_none_or(|c| n < c) {
        std::thread::sleep(every);
        let iv = poll.next()?;
        if n.is_multiple_of(20) {
            writeln!(out, "{LINE_HEADER}")?;
        }
        writeln!(out, "{}", iv.line(&clock_now()))?;
        out.flush()?;
        n += 1;
    }
    Ok(Outcome::Ok)
}

fn full_screen(poll: &mut Poll, every: Duration, count: Option<u64>, mnt: &str) -> Result<Outcome> {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    let mut term = ratatui::init();
    let result = (|| -> Result<()> {
        let mut iv = Interval {
            phase: "waiting for the first interval".into(),
            ..Interval::default()
        };
        let mut n = 0u64;
        let mut next = Instant::now() + every;
        loop {
            term.draw(|f| draw(f, f.area(), mnt, &iv))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()? {
                    let ctrl_c =
                        k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if k.kind == KeyEventKind::Press
                        && (matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c)
                    {
                        return Ok(());
                    }
                }
                continue;
            }
            iv = poll.next()?;
            next = Instant::now() + every;
            n += 1;
            if count.is_some_and(|c| n >= c) {
                term.draw(|f| draw(f, f.area(), mnt, &iv))?;
                return Ok(());
            }
        }
    })();
    ratatui::restore();
    result.map(|()| Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::{Latency, OpSnapshot};
    use crate::trace::phases::{GcView, Progress};

    fn op(name: &str, requests: u64, values: &[u64]) -> OpSnapshot {
        let l = Latency::default();
        values.iter().for_each(|&v| l.record(v));
        OpSnapshot {
            op: name.into(),
            requests,
            real_ns: l.snapshot(),
            ..OpSnapshot::default()
        }
    }

    fn sweeping(dirs: u32, unlinks: u64) -> GcView {
        GcView {
            inferring: true,
            inferred_phase: Some(2),
            progress: Progress {
                gcs: 1,
                dirs_swept: dirs,
                unlinks,
                ..Progress::default()
            },
            ..GcView::default()
        }
    }

    #[test]
    fn an_interval_is_the_difference_of_two_answers() {
        let a = Stats {
            ops: vec![op("lookup", 100, &[1000; 100])],
            gc: sweeping(1000, 10),
            records: 500,
            ..Stats::default()
        };
        let mut later: Vec<u64> = vec![1000; 100];
        later.extend([2_000_000; 200]);
        let b = Stats {
            ops: vec![op("lookup", 300, &later), op("unlink", 20, &[50_000; 20])],
            gc: sweeping(2000, 30),
            records: 2500,
            ..Stats::default()
        };
        let iv = Interval::between(&a, &b, 2.0);
        assert_eq!(iv.requests_per_s, 110.0);
        assert_eq!(iv.ops[0].op, "lookup");
        assert_eq!(iv.ops[0].per_s, 100.0);
        let p50 = iv.ops[0].real.0.unwrap();
        assert!(
            (2_000_000..2_300_000).contains(&p50),
            "only the interval's: {p50}"
        );
        assert_eq!(iv.records_per_s, 1000.0);
        assert_eq!(iv.unlinks_per_s, 10.0);
        assert_eq!(iv.phase, "phase 2 (inferred)");
        assert_eq!(iv.done, Some(2000.0 / 65536.0));
        // 500 directories a second, 63,536 to go.
        assert_eq!(iv.eta_secs, Some(63_536.0 / 500.0));
        let line = iv.line("12:00:00");
        assert!(line.starts_with("12:00:00    2?    3.1"), "{line}");
        assert_eq!(
            line.split_whitespace().count(),
            LINE_HEADER.split_whitespace().count()
        );
    }

    #[test]
    fn a_marked_phase_names_its_strategy_and_the_screen_shows_it() {
        let mut gc = GcView::default();
        gc.marker("phase1 start strategy=batched", 5);
        let b = Stats {
            gc,
            ops: vec![op("setattr", 10, &[3000; 10])],
            ..Stats::default()
        };
        let iv = Interval::between(&Stats::default(), &b, 1.0);
        assert_eq!(iv.phase, "phase 1 strategy=batched");
        assert_eq!(iv.done, None, "an untraced mount has no progress");
        let s = screen("/mnt/cs", &iv, 100, 24);
        assert!(s.contains("chunkscope top /mnt/cs"), "{s}");
        assert!(s.contains("phase 1 strategy=batched"), "{s}");
        assert!(s.contains("setattr"), "{s}");
        assert!(s.contains("no model (mount --model)"), "{s}");
        assert_eq!(s.lines().count(), 24);
    }
}
