//! PBS's prune, for a daily schedule: which snapshots a retention policy keeps at a time
//! (`keep-last`, `-daily`, `-weekly`, `-monthly`, `-yearly`, as PBS counts them).

/// PBS prune options (only the ones a daily schedule needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Keep the last N snapshots.
    pub keep_last: u32,
    /// Keep one per day for the last N days with a snapshot.
    pub keep_daily: u32,
    /// Keep one per ISO week for the last N weeks with a snapshot.
    pub keep_weekly: u32,
    /// Keep one per month for the last N months with a snapshot.
    pub keep_monthly: u32,
}

impl Retention {
    /// Which of `times` (oldest first) prune keeps, as PBS's `compute_prune_info`: per policy,
    /// newest first, keep the first snapshot of each new period until the policy's count is
    /// reached; snapshots kept by an earlier policy reserve their period.
    pub fn keep(&self, times: &[i64]) -> Vec<bool> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            None,
            Keep,
            Remove,
        }
        let mut mark = vec![Mark::None; times.len()];
        let newest_first: Vec<usize> = (0..times.len()).rev().collect();
        let policies: [(u32, &dyn Fn(i64) -> i64); 4] = [
            (self.keep_last, &|t| t),
            (self.keep_daily, &|t| t.div_euclid(86_400)),
            (self.keep_weekly, &iso_week_key),
            (self.keep_monthly, &|t| {
                let (y, m, ..) = crate::time::utc_fields(t);
                y * 12 + m as i64
            }),
        ];
        for (keep, key) in policies {
            if keep == 0 {
                continue;
            }
            let already: std::collections::HashSet<i64> = newest_first
                .iter()
                .filter(|&&i| mark[i] == Mark::Keep)
                .map(|&i| key(times[i]))
                .collect();
            let mut included = std::collections::HashSet::new();
            for &i in &newest_first {
                if mark[i] != Mark::None {
                    continue;
                }
                let k = key(times[i]);
                if already.contains(&k) {
                    continue;
                }
                if !included.contains(&k) {
                    if included.len() >= keep as usize {
                        break;
                    }
                    included.insert(k);
                    mark[i] = Mark::Keep;
                } else {
                    mark[i] = Mark::Remove;
                }
            }
        }
        mark.into_iter().map(|m| m == Mark::Keep).collect()
    }
}

/// ISO 8601 week key (year·100 + week) of an epoch time, as `%G%V`.
pub(super) fn iso_week_key(t: i64) -> i64 {
    let days = t.div_euclid(86_400);
    let weekday = (days + 3).rem_euclid(7); // 0 = Monday (1970-01-01 was a Thursday)
    let thursday = days - weekday + 3;
    let (year, ..) = crate::time::utc_fields(thursday * 86_400);
    let jan1 =
        crate::time::parse_rfc3339_utc(&format!("{year:04}-01-01T00:00:00Z")).unwrap_or(0) / 86_400;
    year * 100 + (thursday - jan1) / 7 + 1
}
