//! The GC's output: PBS task-log lines (format document 6.2), or a progress bar on a terminal
//! in place of the percentage lines.

use std::io::Write;

use crate::progress::Bar;

/// Where a GC's task-log lines go, with its progress bar and warning count.
pub struct TaskLog<'a> {
    out: Box<dyn Write + 'a>,
    bar: Option<Bar>,
    terminal: bool,
    /// Shown before the bar's text (e.g. the strategy of a simulated run).
    label: String,
    /// Warnings written so far.
    pub warnings: u64,
    /// Given every line, the percentage lines included even under a bar: a task-log file
    /// with its timestamps (`gc --task-log`), a simulation's progress curve.
    tap: Option<Tap<'a>>,
}

/// What [`TaskLog::tapped`] gives every line to.
type Tap<'a> = Box<dyn FnMut(&str) + 'a>;

impl<'a> TaskLog<'a> {
    /// Lines to `out`; with `terminal`, progress as a bar on standard error instead of lines.
    pub fn new(out: Box<dyn Write + 'a>, terminal: bool) -> TaskLog<'a> {
        TaskLog {
            out,
            bar: None,
            terminal,
            label: String::new(),
            warnings: 0,
            tap: None,
        }
    }

    /// Prefixes the progress bar's text with `label`.
    pub fn labelled(mut self, label: &str) -> TaskLog<'a> {
        self.label = format!("{label}: ");
        self
    }

    /// Gives every line to `tap` as well, the percentage lines included (a bar on the
    /// terminal hides them from `out`).
    pub fn tapped(mut self, tap: impl FnMut(&str) + 'a) -> TaskLog<'a> {
        self.tap = Some(Box::new(tap));
        self
    }

    /// A line of the task log (above the bar, when there is one), a secret in it (a signed
    /// URL in an S3 error) hidden ([`crate::redact`]).
    pub fn info(&mut self, line: &str) {
        let line = &*crate::redact::redact(line);
        if let Some(tap) = &mut self.tap {
            tap(line);
        }
        self.print(line);
    }

    fn print(&mut self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| {
                let _ = writeln!(self.out, "{line}");
            }),
            None => {
                let _ = writeln!(self.out, "{line}");
            }
        }
    }

    /// A warning: printed as is, and counted (PBS ends with `TASK WARNINGS: n`).
    pub fn warn(&mut self, line: &str) {
        self.warnings += 1;
        self.info(line);
    }

    /// Starts a progress bar over `total` steps of `what` (on a terminal only).
    pub fn progress_start(&mut self, what: &str, total: u64) {
        self.progress_finish();
        if self.terminal {
            let template = format!(
                "{{spinner}} {}{what} [{{wide_bar}}] {{human_pos}}/{{human_len}} ({{rate}}, eta {{eta}})",
                self.label
            );
            self.bar = Some(Bar::new(true, total, &template));
        }
    }

    /// Moves the bar to `pos` of `total`.
    pub fn progress(&mut self, pos: u64, total: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_position(pos);
        }
    }

    /// A percentage line, printed only when there is no bar.
    pub fn progress_line(&mut self, line: &str) {
        if let Some(tap) = &mut self.tap {
            tap(line);
        }
        if self.bar.is_none() {
            self.print(line);
        }
    }

    /// Clears the bar.
    pub fn progress_finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
