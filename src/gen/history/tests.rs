//! The history model's invariants: retention as PBS prunes, contents, chunk sets, events.

use super::*;
use crate::gen::retention::iso_week_key;

/// One map answers what the four sets did: membership, each reference bit, their counts,
/// and a mark the build sets once per content.
#[test]
fn chunk_sets_keep_each_contents_bits_and_counts() {
    let mut s = ChunkSets::default();
    let (a, b, c) = (ContentId(10), ContentId(11), ContentId(12));
    s.add(a, ChunkSets::NOW);
    s.add(a, ChunkSets::NOW | ChunkSets::PREV);
    s.add(b, ChunkSets::PREV2);
    s.add(b, 0);
    assert!(s.is_present(a) && s.is_present(b) && !s.is_present(c));
    assert!(s.is_referenced(a) && !s.is_referenced(b));
    assert!(s.has(a, ChunkSets::PREV) && !s.has(b, ChunkSets::PREV));
    assert_eq!(
        (
            s.present_len(),
            s.referenced_len(),
            s.referenced_prev2_len()
        ),
        (2, 1, 1)
    );
    assert!(s.mark(a) && !s.mark(a), "marked once");
    assert!(!s.mark(c), "an absent content is never marked");
    assert!(
        s.is_referenced(a) && s.has(a, ChunkSets::PREV),
        "the mark keeps the bits"
    );
    let cfg = crate::gen::GenConfig::preset("tiny").unwrap();
    let h = crate::gen::build_history(&cfg).unwrap();
    let sets = h.chunk_sets();
    let now = sets
        .iter()
        .filter(|&(_, f)| f & ChunkSets::NOW != 0)
        .count();
    assert_eq!(now, sets.referenced_len());
    assert!(
        now > 100 && sets.present_len() > now,
        "garbage is present too"
    );
}

#[test]
fn retention_daily_weekly_monthly() {
    // 100 daily backups at noon, ending 2025-04-10.
    let end = crate::time::parse_rfc3339_utc("2025-04-10T12:00:00Z").unwrap();
    let times: Vec<i64> = (0..100).rev().map(|d| end - d * 86_400).collect();
    let r = Retention {
        keep_last: 0,
        keep_daily: 7,
        keep_weekly: 4,
        keep_monthly: 3,
    };
    let kept = r.keep(&times);
    let kept_times: Vec<String> = times
        .iter()
        .zip(&kept)
        .filter(|(_, &k)| k)
        .map(|(&t, _)| crate::time::rfc3339_utc(t)[..10].to_string())
        .collect();
    // 7 dailies (04-04..04-10, ISO weeks 14 and 15); 4 weeks not yet covered, newest
    // first: the Sundays 03-30, 03-23, 03-16, 03-09; months not yet covered (April and
    // March are): February's and January's newest. The history starts in January, so
    // only two of the three monthlies exist.
    assert_eq!(
        kept_times,
        [
            "2025-01-31",
            "2025-02-28",
            "2025-03-09",
            "2025-03-16",
            "2025-03-23",
            "2025-03-30",
            "2025-04-04",
            "2025-04-05",
            "2025-04-06",
            "2025-04-07",
            "2025-04-08",
            "2025-04-09",
            "2025-04-10"
        ]
    );
    assert_eq!(
        iso_week_key(crate::time::parse_rfc3339_utc("2021-01-03T00:00:00Z").unwrap()),
        202053
    );
    assert_eq!(
        iso_week_key(crate::time::parse_rfc3339_utc("2024-12-30T00:00:00Z").unwrap()),
        202501
    );
}

fn group(slots: u32) -> GroupSpec {
    GroupSpec {
        ns: 0,
        ty: BackupType::Vm,
        id: "100".into(),
        template: 0,
        archives: vec![ArchiveSpec {
            name: "drive-scsi0.img.fidx".into(),
            kind: ArchiveKind::Disk,
            slots,
        }],
        backups: vec![],
        retained: vec![],
        retained_prev: vec![],
        retained_prev2: vec![],
        failed: None,
    }
}

#[test]
fn the_version_cursor_gives_the_contents_of_a_replay_from_backup_zero() {
    let mut cfg = crate::gen::GenConfig::preset("tiny").unwrap();
    cfg.seed = 3;
    let h = crate::gen::build_history(&cfg).unwrap();
    assert!(h.model.churn() > 0.0 && h.model.churn() < 1.0);
    let mut cursor = VersionCursor::default();
    let (mut compared, mut resumed) = (0usize, 0usize);
    // The GC's order (a group's backups in order, archive by archive) resumes the cursor;
    // the events' time order (groups interleaved) restarts it; both must agree.
    let mut by_group = h.events();
    by_group.sort_by_key(|e| (e.group, e.k));
    for events in [by_group, h.events()] {
        for e in &events {
            for ai in 0..h.groups[e.group as usize].archives.len() {
                let (mut plain, mut cached) = (Vec::new(), Vec::new());
                h.for_each_content(e, ai, |c| plain.push(c));
                let before = cursor.at;
                h.for_each_content_cached(&mut cursor, e, ai, |c| cached.push(c));
                if before.is_some_and(|(g, a, _)| g == e.group && a == ai as u32) {
                    resumed += 1;
                }
                assert_eq!(
                    plain, cached,
                    "group {} backup {} archive {ai}",
                    e.group, e.k
                );
                compared += plain.len();
            }
        }
    }
    assert!(
        compared > 10_000 && resumed > 10,
        "{compared} contents, {resumed} resumed"
    );
}

#[test]
fn new_contents_in_creation_order_are_the_first_seen_of_all_contents() {
    let mut cfg = crate::gen::GenConfig::preset("tiny").unwrap();
    cfg.seed = 5;
    let h = crate::gen::build_history(&cfg).unwrap();
    // The build's walk: every event in time order, a cursor per archive.
    let first_seen = |only_new: bool| {
        let mut cursors = h.cursors();
        let (mut seen, mut order, mut calls) = (hashbrown::HashSet::new(), Vec::new(), 0usize);
        for e in h.events() {
            for (ai, cursor) in cursors[e.group as usize].iter_mut().enumerate() {
                let mut f = |c: ContentId| {
                    calls += 1;
                    if seen.insert(c) {
                        order.push(c);
                    }
                };
                if only_new {
                    h.for_each_new_content_cached(cursor, &e, ai, &mut f);
                } else {
                    h.for_each_content_cached(cursor, &e, ai, &mut f);
                }
            }
        }
        (order, calls)
    };
    let ((all, all_calls), (new, new_calls)) = (first_seen(false), first_seen(true));
    assert!(all.len() > 1_000, "{} contents", all.len());
    assert_eq!(all, new);
    assert!(
        new_calls * 3 < all_calls,
        "{new_calls} calls for new contents against {all_calls}"
    );
}

#[test]
fn churn_sets_the_change_rate() {
    let m = ContentModel::new(7, 0.1, 0.0, 0.0);
    let g = group(20_000);
    let changed = (0..20_000)
        .filter(|&s| m.content(0, &g, 0, s, 5) != m.content(0, &g, 0, s, 4))
        .count();
    let rate = changed as f64 / 20_000.0;
    assert!((rate - 0.1).abs() < 0.01, "{rate}");
    // Versions are stable: a slot that did not change keeps its content.
    let same = (0..2000)
        .filter(|&s| m.content(0, &g, 0, s, 9) == m.content(0, &g, 0, s, 0))
        .count();
    let expect = 2000.0 * 0.9f64.powi(9);
    assert!((same as f64 - expect).abs() < 60.0, "{same} vs {expect}");
}

#[test]
fn zero_and_template_contents() {
    let m = ContentModel::new(1, 0.0, 0.25, 0.5);
    let g = group(4000);
    let mut other = group(4000);
    other.id = "101".into();
    let zeros = (0..4000)
        .filter(|&s| m.content(0, &g, 0, s, 0) == ContentId::ZERO)
        .count();
    assert!((zeros as f64 / 4000.0 - 0.25).abs() < 0.03, "{zeros}");
    let shared = (0..4000)
        .filter(|&s| m.content(0, &g, 0, s, 3) == m.content(1, &other, 0, s, 3))
        .count();
    // Zero slots are drawn per group: shared are slots zero in both groups, and template
    // slots (the first half) zero in neither.
    let expect = 4000.0 * (0.25 * 0.25 + 0.5 * 0.75 * 0.75);
    assert!(
        (shared as f64 - expect).abs() < 120.0,
        "{shared} vs {expect}"
    );
}
