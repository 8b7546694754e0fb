//! Progress bars on a terminal: indicatif's with the `progress` feature, none without it (a
//! library user who wants only the readers does not build indicatif).

/// A progress bar, or nothing (hidden, or built without the `progress` feature).
pub struct Bar {
    #[cfg(feature = "progress")]
    bar: indicatif::ProgressBar,
}

impl Bar {
    /// A bar over `len` steps drawn with `template` (indicatif's template syntax: `{pos}`,
    /// `{len}`, `{wide_bar}`, ..., and `{rate}`: steps a second, rounded, with thousands
    /// separators, where indicatif's `{per_sec}` shows four decimals); a hidden one unless
    /// `show`.
    pub fn new(show: bool, len: u64, template: &str) -> Bar {
        #[cfg(feature = "progress")]
        {
            if !show {
                return Bar::hidden();
            }
            let bar = indicatif::ProgressBar::new(len);
            if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
                let rate = |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let per_sec = s.per_sec();
                    let n = if per_sec.is_finite() {
                        per_sec.round() as u64
                    } else {
                        0
                    };
                    let _ = write!(w, "{}/s", crate::units::thousands(n));
                };
                bar.set_style(style.with_key("rate", rate));
            }
            Bar { bar }
        }
        #[cfg(not(feature = "progress"))]
        {
            let _ = (show, len, template);
            Bar {}
        }
    }

    /// A bar that draws nothing.
    pub fn hidden() -> Bar {
        Bar {
            #[cfg(feature = "progress")]
            bar: indicatif::ProgressBar::hidden(),
        }
    }

    /// Sets the number of steps.
    #[inline]
    pub fn set_length(&self, len: u64) {
        #[cfg(feature = "progress")]
        self.bar.set_length(len);
        #[cfg(not(feature = "progress"))]
        let _ = len;
    }

    /// Moves to step `pos`.
    #[inline]
    pub fn set_position(&self, pos: u64) {
        #[cfg(feature = "progress")]
        self.bar.set_position(pos);
        #[cfg(not(feature = "progress"))]
        let _ = pos;
    }

    /// Moves `n` steps on.
    #[inline]
    pub fn inc(&self, n: u64) {
        #[cfg(feature = "progress")]
        self.bar.inc(n);
        #[cfg(not(feature = "progress"))]
        let _ = n;
    }

    /// Runs `f` with the bar off the screen (for printing a line above it).
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        #[cfg(feature = "progress")]
        return self.bar.suspend(f);
        #[cfg(not(feature = "progress"))]
        f()
    }

    /// Removes the bar from the screen.
    pub fn finish_and_clear(&self) {
        #[cfg(feature = "progress")]
        self.bar.finish_and_clear();
    }
}
