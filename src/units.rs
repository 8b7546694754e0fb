//! PBS's human-readable units, reproduced for the GC's task-log lines (format document 6.2),
//! and the names people type or read: durations (`5ms`), errnos (`EIO`).

/// `HumanByte`: binary units chosen by the value's size, at most 3 decimals, zeros trimmed.
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

/// `TimeSpan`: `y M w d h m`, then seconds with one decimal when not zero (365.25-day years,
/// 30.44-day months).
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

    #[test]
    fn pbs_examples() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1 KiB");
        assert_eq!(human_bytes(1_274_019), "1.215 MiB");
        assert_eq!(human_bytes(69_751_093_657), "64.961 GiB");
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
