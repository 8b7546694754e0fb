//! SVG plots of analysed phases (plotters, SVG backend, no font files: text is written as SVG
//! `<text>` and laid out by the viewer).
//!
//! Every plot takes labelled phases (`label`: the phase name, prefixed by the trace when several
//! traces are compared) and returns the SVG document as a string; the caller decides where it
//! goes. Each has a caption, axis descriptions, and a legend naming its series.

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

/// 1024 as 1Ki, 1048576 as 1Mi, others as they are.
fn human_count(v: f64) -> String {
    let v = v.round() as u64;
    match v {
        v if v >= 1 << 20 && v % (1 << 20) == 0 => format!("{}Mi", v >> 20),
        v if v >= 1 << 10 && v % (1 << 10) == 0 => format!("{}Ki", v >> 10),
        v => v.to_string(),
    }
}

pub use super::Labelled;

const SIZE: (u32, u32) = (960, 600);

fn palette(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0x8c, 0x56, 0x4b),
        RGBColor(0xe3, 0x77, 0xc2),
        RGBColor(0x17, 0xbe, 0xcf),
    ];
    C[i % C.len()]
}

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("plot: {e}")
}

fn svg(draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<()>) -> Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw(&root)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// Operation sequence against backing inode number, one colour per operation, for one phase.
pub fn access_pattern(p: &Labelled) -> Result<String> {
    let pts = &p.phase.access;
    let max_at = pts.iter().map(|a| a.at).max().unwrap_or(0).max(1);
    let max_ino = pts.iter().map(|a| a.ino).max().unwrap_or(0).max(1);
    let min_ino = pts.iter().map(|a| a.ino).min().unwrap_or(0);
    let mut ops: Vec<&str> = pts.iter().map(|a| a.op).collect();
    ops.sort_unstable();
    ops.dedup();
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("Access pattern: {} ({} points)", p.label, pts.len()),
                ("sans-serif", 22),
            )
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(90)
            .build_cartesian_2d(0u64..max_at + 1, min_ino..max_ino + 1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("operation number in the phase (metadata operations)")
            .y_desc("backing inode number")
            .draw()
            .map_err(err)?;
        for (i, op) in ops.iter().enumerate() {
            let colour = palette(i);
            chart
                .draw_series(
                    pts.iter()
                        .filter(|a| a.op == *op)
                        .map(|a| Circle::new((a.at, a.ino), 1, colour.filled())),
                )
                .map_err(err)?
                .label(*op)
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, colour.filled()));
        }
        legend(&mut chart)
    })
}

fn legend<'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)
}

/// Miss ratio against capacity (log scale) for each phase's digest stream or block stream.
pub fn miss_ratio_curves(phases: &[Labelled], blocks: bool) -> Result<String> {
    let curve = |p: &Labelled| -> Vec<(f64, f64)> {
        let m = if blocks {
            &p.phase.block_mrc
        } else {
            &p.phase.digest_mrc
        };
        if m.references == 0 {
            return Vec::new();
        }
        let top = m.distinct.next_power_of_two().max(2) * 2;
        m.points
            .iter()
            .filter(|x| x.capacity <= top)
            .map(|x| {
                let c = if blocks {
                    x.bytes as f64 / (1u64 << 20) as f64
                } else {
                    x.capacity as f64
                };
                (c, x.miss_ratio)
            })
            .collect()
    };
    let curves: Vec<(String, Vec<(f64, f64)>)> = phases
        .iter()
        .map(|p| (p.label.clone(), curve(p)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    let xmax = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|x| x.0))
        .fold(1.0, f64::max);
    let xmin = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|x| x.0))
        .fold(xmax, f64::min)
        .min(xmax / 2.0);
    let (title, xdesc) = if blocks {
        (
            "Metadata blocks: LRU miss ratio by cache size",
            "cache size (MiB, log scale)",
        )
    } else {
        (
            "Digest cache: LRU miss ratio by capacity (PBS default 1Mi, max 8Mi marked in range)",
            "digest-cache capacity (entries, log scale)",
        )
    };
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d((xmin..xmax).log_scale(), 0f64..1.02)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(xdesc)
            .y_desc("miss ratio")
            .x_label_formatter(&|v| {
                if blocks {
                    format!("{v}")
                } else {
                    human_count(*v)
                }
            })
            .draw()
            .map_err(err)?;
        for (i, (label, c)) in curves.iter().enumerate() {
            let colour = palette(i);
            chart
                .draw_series(LineSeries::new(c.iter().copied(), colour.stroke_width(2)))
                .map_err(err)?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        }
        if !blocks {
            for cap in [super::PBS_CACHE_DEFAULT, super::PBS_CACHE_MAX] {
                let x = cap as f64;
                if x >= xmin && x <= xmax {
                    chart
                        .draw_series(LineSeries::new(
                            [(x, 0.0), (x, 1.02)],
                            BLACK.mix(0.4).stroke_width(1),
                        ))
                        .map_err(err)?;
                }
            }
        }
        legend(&mut chart)
    })
}

/// Log2 histograms drawn as lines: x is the bucket's lower bound.
fn log2_lines(
    title: &str,
    xdesc: &str,
    series: &[(String, Vec<u64>)],
    format_x: &dyn Fn(u64) -> String,
) -> Result<String> {
    let kmax = series.iter().map(|s| s.1.len()).max().unwrap_or(1).max(2);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .max()
        .unwrap_or(1)
        .max(1);
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(80)
            .build_cartesian_2d(0usize..kmax, 0u64..ymax + ymax / 20 + 1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(xdesc)
            .y_desc("count")
            .x_label_formatter(&|k| {
                if *k == 0 {
                    "0".to_string()
                } else {
                    format_x(1u64 << (k - 1).min(63))
                }
            })
            .draw()
            .map_err(err)?;
        for (i, (label, h)) in series.iter().enumerate() {
            let colour = palette(i);
            chart
                .draw_series(LineSeries::new(
                    h.iter().enumerate().map(|(k, &c)| (k, c)),
                    colour.stroke_width(2),
                ))
                .map_err(err)?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        }
        legend(&mut chart)
    })
}

/// |Δino| between consecutive touches, per phase.
pub fn gaps(phases: &[Labelled]) -> Result<String> {
    let series: Vec<(String, Vec<u64>)> = phases
        .iter()
        .filter(|p| p.phase.touches.count > 1)
        .map(|p| (p.label.clone(), p.phase.touches.gap_log2.clone()))
        .collect();
    log2_lines(
        "Gap |Δino| between consecutive atime updates (log2 buckets)",
        "|Δino| at least",
        &series,
        &|v| v.to_string(),
    )
}

/// Latency per operation kind in one phase, real and (when the trace has a model) modelled.
pub fn latency(p: &Labelled) -> Result<String> {
    let mut series = Vec::new();
    for o in &p.phase.ops {
        let metadata = matches!(
            o.op,
            "lookup" | "getattr" | "setattr" | "readdir" | "readdirplus" | "unlink"
        );
        if !metadata || o.count == 0 || o.real_log2.is_empty() {
            continue;
        }
        series.push((format!("{} real", o.op), o.real_log2.clone()));
        if o.modeled_log2.len() > 1 {
            series.push((format!("{} modelled", o.op), o.modeled_log2.clone()));
        }
    }
    log2_lines(
        &format!("Latency of metadata operations: {}", p.label),
        "latency at least",
        &series,
        &|v| crate::units::duration_ns(v),
    )
}

/// Dirty metadata blocks per transaction group over the phase's clock.
pub fn dirty_per_txg(phases: &[Labelled]) -> Result<String> {
    let series: Vec<(String, Vec<(f64, u64)>)> = phases
        .iter()
        .filter(|p| !p.phase.writeback.dirty_per_txg.is_empty())
        .map(|p| {
            let w = &p.phase.writeback;
            let t0 = w.txg_start_ns.first().copied().unwrap_or(0);
            let pts = w
                .txg_start_ns
                .iter()
                .zip(&w.dirty_per_txg)
                .map(|(&t, &n)| ((t - t0) as f64 / 1e9, n))
                .collect();
            (format!("{} ({} clock)", p.label, w.clock), pts)
        })
        .collect();
    let xmax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|x| x.0))
        .fold(1.0, f64::max);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|x| x.1))
        .max()
        .unwrap_or(1)
        .max(1);
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                "Dirty metadata blocks per transaction group",
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..xmax * 1.02, 0u64..ymax + ymax / 20 + 1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the phase's first transaction group")
            .y_desc("blocks written at the group's sync")
            .draw()
            .map_err(err)?;
        for (i, (label, pts)) in series.iter().enumerate() {
            let colour = palette(i);
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))
                .map_err(err)?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        }
        legend(&mut chart)
    })
}

/// A file-name fragment for a label.
pub fn slug(label: &str) -> String {
    let mut s: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    s.trim_matches('-').to_string()
}

/// Writes every plot for `phases` into `dir`; returns the files written. Phases of fewer than
/// 100 records (the few requests before a GC's first marker) are left out of the plots.
pub fn write_all(dir: &std::path::Path, phases: &[Labelled]) -> Result<Vec<std::path::PathBuf>> {
    let phases: Vec<&Labelled> = phases.iter().filter(|p| p.phase.records >= 100).collect();
    let phases: Vec<Labelled> = phases
        .into_iter()
        .map(|p| Labelled {
            label: p.label.clone(),
            phase: p.phase,
        })
        .collect();
    let phases = &phases[..];
    std::fs::create_dir_all(dir).map_err(|e| anyhow!("cannot create {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    let mut put = |name: String, body: String| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, body).map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
        files.push(path);
        Ok(())
    };
    put("mrc-digests.svg".into(), miss_ratio_curves(phases, false)?)?;
    put("mrc-blocks.svg".into(), miss_ratio_curves(phases, true)?)?;
    put("gaps.svg".into(), gaps(phases)?)?;
    put("txg.svg".into(), dirty_per_txg(phases)?)?;
    for p in phases {
        if !p.phase.access.is_empty() {
            put(format!("access-{}.svg", slug(&p.label)), access_pattern(p)?)?;
        }
        if !p.phase.ops.is_empty() {
            put(format!("latency-{}.svg", slug(&p.label)), latency(p)?)?;
        }
    }
    Ok(files)
}
