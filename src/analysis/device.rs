//! The device's side of a trace: the reads and writes of a mount's files in the order they
//! came (a `--disk` mount holding a filesystem image, as `testbed` runs it), per GC phase.
//!
//! A phase is the stretch between a phase's start and end markers (the GC's own, written into
//! the disk's trace by `gc --mark-mount`); requests outside any phase are counted apart. Per
//! phase: reads and writes, their bytes, how many started where the one before ended
//! (sequential), the distance from the previous request's end (mean and median), reads of
//! blocks read before, and the time the disk model added; and the access order itself (offset by request number, up to
//! [`MAX_POINTS`] evenly spaced), for a plot.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::zfs_blocks::{BlockMap, Kind};
use crate::trace::{Marker, Name, Op, TraceReader};

/// Points of the access order kept per phase (evenly spaced over its requests).
pub const MAX_POINTS: usize = 20_000;

/// One request as plotted: its number in the phase, offset, and whether it wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DevicePoint {
    /// Its number among the phase's reads and writes.
    pub at: u64,
    /// Its file offset.
    pub offset: u64,
    /// A write (else a read).
    pub write: bool,
}

/// The device's work in one phase.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DevicePhase {
    /// "phase 1", "phase 2", or "outside phases".
    pub label: String,
    /// Reads that moved bytes.
    pub reads: u64,
    /// Writes that moved bytes.
    pub writes: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Requests that began where the previous one (of the same file) ended.
    pub sequential: u64,
    /// Mean distance from the previous request's end, bytes (requests after the first).
    pub mean_distance: f64,
    /// Median of that distance, bytes.
    pub median_distance: u64,
    /// Reads of a 4 KiB block read before in the trace (what a cache evicted).
    pub rereads: u64,
    /// Time the disk model (or a fault rule) added, ns.
    pub disk_ns: u64,
    /// The access order, sampled.
    pub points: Vec<DevicePoint>,
    /// With a block map of the device (a ZFS pool's, [`super::zfs_blocks`]): what the
    /// requests touched, by kind, in [`Kind::ALL`]'s order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_kind: Vec<KindIo>,
    #[serde(skip)]
    distances: Vec<u64>,
}

/// The requests of a phase that touched one kind of block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KindIo {
    /// The kind's name ([`Kind::name`]).
    pub kind: &'static str,
    /// Reads that touched it (a read over several kinds counts for each).
    pub reads: u64,
    /// Bytes of it read.
    pub read_bytes: u64,
    /// Writes that touched it.
    pub writes: u64,
    /// Bytes of it written.
    pub write_bytes: u64,
}

/// Adds one request's `parts` (kind, bytes) to `by_kind`.
fn add_kinds(by_kind: &mut Vec<KindIo>, parts: &[(Kind, u64)], write: bool) {
    if by_kind.is_empty() {
        by_kind.extend(Kind::ALL.iter().map(|k| KindIo {
            kind: k.name(),
            ..KindIo::default()
        }));
    }
    for &(k, n) in parts {
        let e = &mut by_kind[Kind::ALL.iter().position(|&a| a == k).unwrap_or(0)];
        if write {
            e.writes += 1;
            e.write_bytes += n;
        } else {
            e.reads += 1;
            e.read_bytes += n;
        }
    }
}

/// Reads the trace at `path` once and sums up its reads and writes per phase (phases in the
/// order they began; the requests outside any phase last, if there are any).
pub fn device_phases(path: &Path) -> Result<Vec<DevicePhase>> {
    device_phases_named(path, None)
}

/// [`device_phases`], each request also named by the blocks of `map` it touched
/// ([`DevicePhase::by_kind`]).
pub fn device_phases_named(path: &Path, map: Option<&BlockMap>) -> Result<Vec<DevicePhase>> {
    let mut parts = Vec::new();
    let mut phases: Vec<DevicePhase> = Vec::new();
    let mut outside = DevicePhase {
        label: "outside phases".into(),
        ..DevicePhase::default()
    };
    let mut current: Option<usize> = None;
    let mut last: Option<(u64, u64)> = None;
    let mut all = Vec::new(); // (phase or None, point) for sampling at the end
    let mut seen = hashbrown::HashSet::new(); // 4 KiB blocks read so far
    let mut reader = TraceReader::open(path)?;
    for r in reader.by_ref() {
        let r = r?;
        let op = r.op();
        if op == Some(Op::Marker) {
            if let Name::Text(t) = &r.name {
                if let Some((n, start)) = Marker::decode(&t.shown()).phase_edge() {
                    current = if start {
                        phases.push(DevicePhase {
                            label: format!("phase {n}"),
                            ..DevicePhase::default()
                        });
                        Some(phases.len() - 1)
                    } else {
                        None
                    };
                }
            }
            continue;
        }
        let write = match op {
            Some(Op::Read) => false,
            Some(Op::Write) => true,
            _ => continue,
        };
        if r.errno != 0 || r.arg == 0 {
            continue;
        }
        let p = match current {
            Some(i) => &mut phases[i],
            None => &mut outside,
        };
        let at = p.reads + p.writes;
        if let Some(m) = map {
            m.classify(r.offset, r.arg, &mut parts);
            add_kinds(&mut p.by_kind, &parts, write);
        }
        if write {
            p.writes += 1;
            p.write_bytes += r.arg;
        } else {
            p.reads += 1;
            p.read_bytes += r.arg;
            let mut again = false;
            for b in r.offset / 4096..(r.offset + r.arg).div_ceil(4096) {
                again |= !seen.insert(b);
            }
            p.rereads += again as u64;
        }
        p.disk_ns += r.injected_ns;
        if let Some((ino, end)) = last {
            if ino == r.ino && end == r.offset {
                p.sequential += 1;
            }
            p.distances.push(if ino == r.ino {
                end.abs_diff(r.offset)
            } else {
                u64::MAX
            });
        }
        last = Some((r.ino, r.offset + r.arg));
        all.push((
            current,
            DevicePoint {
                at,
                offset: r.offset,
                write,
            },
        ));
    }
    reader.warn_if_torn();
    if outside.reads + outside.writes > 0 {
        phases.push(outside);
    }
    let outside_index = phases.len().wrapping_sub(1);
    for (i, p) in phases.iter_mut().enumerate() {
        let n = p.reads + p.writes;
        let step = (n as usize).div_ceil(MAX_POINTS).max(1) as u64;
        let is_outside = p.label == "outside phases" && i == outside_index;
        p.points = all
            .iter()
            .filter(|(ph, pt)| {
                (if is_outside {
                    ph.is_none()
                } else {
                    *ph == Some(i)
                }) && pt.at % step == 0
            })
            .map(|(_, pt)| *pt)
            .collect();
        let known: Vec<u64> = p
            .distances
            .iter()
            .copied()
            .filter(|&d| d != u64::MAX)
            .collect();
        if !known.is_empty() {
            p.mean_distance = known.iter().map(|&d| d as f64).sum::<f64>() / known.len() as f64;
            let mut sorted = known;
            let mid = sorted.len() / 2;
            p.median_distance = *sorted.select_nth_unstable(mid).1;
        }
        p.distances = Vec::new();
    }
    Ok(phases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{RawRecord, TraceMeta, TraceWriter};

    #[test]
    fn phases_sequential_requests_and_distances_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.trace");
        let (w, sink) = TraceWriter::start(&path, TraceMeta::default()).unwrap();
        let mut seq = 0;
        let mut io = |sink: &crate::trace::TraceSink, op, offset, len| {
            let mut r = RawRecord::new(op);
            seq += 1;
            r.seq = seq;
            r.ino = 7;
            r.offset = offset;
            r.arg = len;
            r.injected_ns = 1000;
            sink.record(r);
        };
        io(&sink, Op::Read, 0, 4096); // outside
        let mut m = RawRecord::new(Op::Marker);
        m.seq = 100;
        m.set_name(Marker::phase(1, true, "lru").encode().as_bytes());
        sink.record(m);
        io(&sink, Op::Read, 4096, 4096); // sequential after the outside one
        io(&sink, Op::Read, 8192, 4096); // sequential
        io(&sink, Op::Read, 1 << 20, 4096); // a jump
        io(&sink, Op::Write, 0, 512);
        io(&sink, Op::Read, 8192, 4096); // read before
        let mut m = RawRecord::new(Op::Marker);
        m.seq = 200;
        m.set_name(Marker::phase(1, false, "lru").encode().as_bytes());
        sink.record(m);
        drop(sink);
        w.finish().unwrap();
        let p = device_phases(&path).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].label, "phase 1");
        assert_eq!((p[0].reads, p[0].writes), (4, 1));
        assert_eq!((p[0].read_bytes, p[0].write_bytes), (16384, 512));
        assert_eq!(p[0].sequential, 2);
        assert_eq!(p[0].rereads, 1);
        assert_eq!(p[0].disk_ns, 5000);
        // Distances 0, 0, 1 MiB - 12 KiB, 1 MiB + 4 KiB, 7.5 KiB: median 7.5 KiB.
        assert_eq!(p[0].median_distance, 7680);
        assert_eq!(p[0].points.len(), 5);
        assert_eq!(p[0].points[2].offset, 1 << 20);
        assert!(p[0].points[3].write);
        assert_eq!(p[1].label, "outside phases");
        assert_eq!(p[1].reads, 1);
    }
}
