//! PBS's human-readable units, reproduced for the GC's task-log lines (format document 6.2),
//! and chunkscope's own, for its reports: durations (`5ms`), errnos (`EIO`), byte sizes.
//!
//! Two byte formats, on purpose. [`HumanByte`] is PBS's to the last digit (its rounding
//! included) and is for the lines that imitate PBS: the GC's task log. [`human_bytes`] is
//! chunkscope's, for its own tables and reports.

/// PBS's `HumanByte` (proxmox-human-byte) for a byte count, as its task logs print it: the
/// largest binary unit that leaves a whole part of at least 1 (chosen by the count's bit
/// length: 11 to 20 bits KiB, 21 to 30 MiB, ..., 51 and more PiB), the value in that unit
/// rounded to 3 decimals with halves away from zero (`f64::round` of the value times 1000,
/// not `{:.3}`'s ties to even), printed in Rust's shortest form (`11.563 KiB`, `2 KiB`,
/// `1023 B`). The arithmetic is PBS's own, step for step, so its floating-point results are
/// too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanByte(pub u64);

impl std::fmt::Display for HumanByte {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
        let bits = 64 - self.0.leading_zeros();
        // 0..=10 bits: B; 11..=20: KiB; ... 51 and more: PiB.
        let k = (bits.saturating_sub(1) / 10).min(5) as usize;
        let factor = (0..k).fold(1.0f64, |x, _| x * 1024.0);
        let size = self.0 as f64 / factor;
        let size = (size * 1000.0).round() / 1000.0;
        write!(f, "{size} {}", UNITS[k])
    }
}

/// PBS's `TimeSpan` (proxmox-time) of a whole number of seconds, as the GC's cutoff line
/// prints it: seconds, minutes and hours split off exactly, the remaining days split into
/// 365.25-day years, 30.44-day months (each truncated as PBS truncates), weeks and days; each
/// non-zero part as `1y 2M 3w 4d 5h 6m`, then the seconds (`7s`), or `<0.1s` for nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeSpan(pub u64);

impl std::fmt::Display for TimeSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = self.0;
        let seconds = d % 60;
        d /= 60;
        let minutes = d % 60;
        d /= 60;
        let hours = d % 24;
        d /= 24;
        let years = (d as f64 / 365.25) as u64;
        let year_days = (d as f64 % 365.25) as u64;
        let months = (year_days as f64 / 30.44) as u64;
        let month_days = (year_days as f64 % 30.44) as u64;
        let parts = [
            (years, "y"),
            (months, "M"),
            (month_days / 7, "w"),
            (month_days % 7, "d"),
            (hours, "h"),
            (minutes, "m"),
            (seconds, "s"),
        ];
        let mut first = true;
        for (n, unit) in parts {
            if n > 0 {
                write!(f, "{}{n}{unit}", if first { "" } else { " " })?;
                first = false;
            }
        }
        if first {
            // PBS prints spans under a tenth of a second so; a whole-second span gets here
            // only at zero.
            f.write_str("<0.1s")?;
        }
        Ok(())
    }
}

/// chunkscope's byte sizes, for its own reports: binary units chosen by the value's size, at
/// most 3 decimals, zeros trimmed (`1.215 MiB`). Not for lines that imitate PBS: those take
/// [`HumanByte`], whose rounding of halves differs.
pub fn human_bytes(v: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut k = 0;
    while k + 1 < UNITS.len() && v >= 1u64 << (10 * (k + 1)) {
        k += 1;
    }
    if k == 0 {
        return format!("{v} B");
    }
    let x = v as f64 / (1u64 << (10 * k)) as f64;
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s} {}", UNITS[k])
}

/// chunkscope's time spans, for its own reports: `y M w d h m`, then seconds with one
/// decimal when not zero (365.25-day years, 30.44-day months). Not PBS's [`TimeSpan`].
pub fn time_span(secs: f64) -> String {
    const PARTS: [(&str, f64); 6] = [
        ("y", 365.25 * 86400.0),
        ("M", 30.44 * 86400.0),
        ("w", 7.0 * 86400.0),
        ("d", 86400.0),
        ("h", 3600.0),
        ("m", 60.0),
    ];
    let mut rest = secs;
    let mut out = Vec::new();
    for (unit, len) in PARTS {
        let n = (rest / len).floor();
        if n >= 1.0 {
            out.push(format!("{n}{unit}"));
            rest -= n * len;
        }
    }
    if rest >= 0.05 || out.is_empty() {
        if (rest - rest.round()).abs() < 0.05 {
            out.push(format!("{}s", rest.round()));
        } else {
            out.push(format!("{rest:.1}s"));
        }
    }
    out.join(" ")
}

/// A duration for people: `850 us`, `8.0 ms`, `2.35 s`, and [`time_span`] in whole seconds
/// from a minute up (`9m 27s`, `8h 17m 17s`: one precision next to each other in a table).
pub fn duration_ns(ns: u64) -> String {
    let x = ns as f64;
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.0} us", x / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} ms", x / 1e6),
        1_000_000_000..60_000_000_000 => format!("{:.2} s", x / 1e9),
        _ => time_span((x / 1e9).round()),
    }
}

/// Errno names this project prints and parses.
pub const ERRNOS: &[(&str, i32)] = &[
    ("EPERM", libc::EPERM),
    ("ENOENT", libc::ENOENT),
    ("EINTR", libc::EINTR),
    ("EIO", libc::EIO),
    ("EBADF", libc::EBADF),
    ("EAGAIN", libc::EAGAIN),
    ("ENOMEM", libc::ENOMEM),
    ("EACCES", libc::EACCES),
    ("EBUSY", libc::EBUSY),
    ("EEXIST", libc::EEXIST),
    ("EXDEV", libc::EXDEV),
    ("ENOTDIR", libc::ENOTDIR),
    ("EISDIR", libc::EISDIR),
    ("EINVAL", libc::EINVAL),
    ("ENFILE", libc::ENFILE),
    ("EMFILE", libc::EMFILE),
    ("EFBIG", libc::EFBIG),
    ("ENOSPC", libc::ENOSPC),
    ("EROFS", libc::EROFS),
    ("ENAMETOOLONG", libc::ENAMETOOLONG),
    ("ENOSYS", libc::ENOSYS),
    ("ENOTEMPTY", libc::ENOTEMPTY),
    ("ESTALE", libc::ESTALE),
    ("ETIMEDOUT", libc::ETIMEDOUT),
    ("EDQUOT", libc::EDQUOT),
];

/// The name of an errno (`EIO`), or its number.
pub fn errno_name(e: i32) -> String {
    ERRNOS
        .iter()
        .find(|(_, n)| *n == e)
        .map_or_else(|| e.to_string(), |(s, _)| s.to_string())
}

/// The errno named `name` (`ENOENT`), if it is one of those this build names.
pub fn errno_number(name: &str) -> Option<i32> {
    ERRNOS.iter().find(|(s, _)| *s == name).map(|(_, n)| *n)
}

/// A duration such as `5ms`, `2s`, `1.5s` or `250us`.
pub fn parse_duration(v: &str) -> anyhow::Result<u64> {
    let v = v.trim();
    // humantime takes integers only; accept one decimal number with a unit too.
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    if num.contains('.') {
        let x: f64 = num
            .parse()
            .map_err(|_| anyhow::anyhow!("'{v}' is not a duration"))?;
        let per = humantime::parse_duration(&format!("1{unit}"))
            .map_err(|e| anyhow::anyhow!("'{v}' is not a duration ({e})"))?;
        return Ok((x * per.as_nanos() as f64) as u64);
    }
    humantime::parse_duration(v)
        .map(|d| d.as_nanos().min(u64::MAX as u128) as u64)
        .map_err(|e| anyhow::anyhow!("'{v}' is not a duration such as 5ms or 2s ({e})"))
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PBS's own figures: upstream PBS 4.2.3's task log (11,840 B, issue 62) and the values
    /// proxmox-human-byte's tests print, then exact halves in the third decimal of each unit,
    /// which PBS rounds away from zero where `{:.3}` rounds to even, and the unit boundaries.
    #[test]
    fn human_byte_prints_what_pbs_prints() {
        for (bytes, pbs) in [
            (11_840, "11.563 KiB"),
            (1_536, "1.5 KiB"),
            (1_114_112, "1.063 MiB"),
            (1_140_850_688, "1.063 GiB"),
            (1_168_231_104_512, "1.063 TiB"),
            (0, "0 B"),
            (987, "987 B"),
            (1_022, "1022 B"),
            (1_023, "1023 B"),
            (1_024, "1 KiB"),
            (1_048_575, "1023.999 KiB"),
            (1 << 20, "1 MiB"),
            ((1 << 30) - 1, "1024 MiB"),
            (1 << 30, "1 GiB"),
            (1 << 50, "1 PiB"),
            (u64::MAX, "16384 PiB"),
            (9_000, "8.789 KiB"),
            (10_000_000, "9.537 MiB"),
            (10_000_000_000, "9.313 GiB"),
            (10_000_000_000_000, "9.095 TiB"),
            ((1 << 30) + 103 * (1 << 20), "1.101 GiB"),
            ((1 << 40) + 128 * (1 << 30), "1.125 TiB"),
            ((2 << 50) + 512 * (1 << 40), "2.5 PiB"),
            (1_274_019, "1.215 MiB"),
            (69_751_093_657, "64.961 GiB"),
        ] {
            assert_eq!(HumanByte(bytes).to_string(), pbs, "{bytes} B");
        }
        // chunkscope's own format keeps `{:.3}`: the two differ exactly on such halves.
        assert_eq!(human_bytes(11_840), "11.562 KiB");
        assert_eq!(human_bytes(1_274_019), "1.215 MiB");
    }

    /// PBS's `TimeSpan` of a `Duration` of whole seconds: days split into truncated 365.25-day
    /// years and 30.44-day months, the rest dropped, so 31 days are `1M` and 366 days `1y`.
    #[test]
    fn time_span_prints_what_pbs_prints() {
        for (secs, pbs) in [
            (86_700, "1d 5m"),
            (60, "1m"),
            (90, "1m 30s"),
            (1, "1s"),
            (0, "<0.1s"),
            (3_600, "1h"),
            (31 * 86_400, "1M"),
            (365 * 86_400, "11M 4w 2d"),
            (366 * 86_400, "1y"),
            (8 * 86_400 + 3_661, "1w 1d 1h 1m 1s"),
        ] {
            assert_eq!(TimeSpan(secs).to_string(), pbs, "{secs} s");
        }
    }

    #[test]
    fn chunkscope_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1 KiB");
        assert_eq!(human_bytes(3 << 40), "3 TiB");
        assert_eq!(time_span(86_700.0), "1d 5m");
        assert_eq!(time_span(60.0), "1m");
        assert_eq!(time_span(90.5), "1m 30.5s");
        assert_eq!(time_span(0.0), "0s");
        assert_eq!(duration_ns(850_000), "850 us");
        assert_eq!(duration_ns(8_002_000), "8.0 ms");
        assert_eq!(duration_ns(2_345_000_000), "2.35 s");
        assert_eq!(duration_ns(566_744_336_000), "9m 27s");
        assert_eq!(duration_ns(389_000_000_000), "6m 29s");
        assert_eq!(duration_ns(373_800_000_000), "6m 14s");
        assert_eq!(duration_ns(3_600_000_000_000), "1h");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5ms").unwrap(), 5_000_000);
        assert_eq!(parse_duration("1.5s").unwrap(), 1_500_000_000);
        assert_eq!(parse_duration("250us").unwrap(), 250_000);
    }
}
