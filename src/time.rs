//! Epoch seconds to and from the RFC3339 UTC form PBS uses for snapshot names
//! (`YYYY-MM-DDTHH:MM:SSZ`, no fraction), and PBS's `TimeSpan` rendering of durations.
//!
//! The calendar arithmetic is the proleptic Gregorian "days from civil" algorithm; no time
//! zone database is involved because snapshot names are always UTC.

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// Year, month, day, hour, minute, second of an epoch time (UTC).
pub fn utc_fields(epoch: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = epoch.div_euclid(86_400);
    let secs = epoch.rem_euclid(86_400) as u32;
    let (y, m, d) = civil_from_days(days);
    (y, m, d, secs / 3600, secs / 60 % 60, secs % 60)
}

/// `2025-07-14T14:20:02Z`
pub fn rfc3339_utc(epoch: i64) -> String {
    let (y, mo, d, h, mi, s) = utc_fields(epoch);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// Parses exactly `YYYY-MM-DDTHH:MM:SSZ` (PBS's `BACKUP_TIME_RE`); `None` for anything else.
pub fn parse_rfc3339_utc(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'Z'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        b[r].iter().try_fold(0u32, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + (c - b'0') as u32)
        })
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || d == 0 || d > 31 || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(y as i64, mo, d);
    if civil_from_days(days) != (y as i64, mo, d) {
        return None; // 2025-02-30 and the like
    }
    Some(days * 86_400 + (h * 3600 + mi * 60 + s) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        // The format document's example snapshot.
        assert_eq!(
            parse_rfc3339_utc("2025-07-14T14:20:02Z"),
            Some(1_752_502_802)
        );
        assert_eq!(rfc3339_utc(1_752_502_802), "2025-07-14T14:20:02Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(parse_rfc3339_utc("2025-02-29T00:00:00Z"), None);
        assert_eq!(parse_rfc3339_utc("2025-07-14T14:20:02"), None);
        assert_eq!(parse_rfc3339_utc("2025-07-14 14:20:02Z"), None);
        assert_eq!(parse_rfc3339_utc("2025-13-14T14:20:02Z"), None);
    }

    #[test]
    fn round_trip_over_centuries() {
        for t in (-4_000_000_000i64..8_000_000_000).step_by(7_777_777) {
            assert_eq!(parse_rfc3339_utc(&rfc3339_utc(t)), Some(t), "{t}");
        }
    }
}
