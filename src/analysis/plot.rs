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

/// Font sizes as plotters takes them: its SVG backend writes 0.81 of the size asked for, so
/// 15 is 12.1 px, the smallest text of a plot at 100% zoom (the report shows plots at their
/// own size).
const CAPTION: (&str, u32) = ("sans-serif", 24);
const TEXT: (&str, u32) = ("sans-serif", 15);
const AXIS: (&str, u32) = ("sans-serif", 16);

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

/// Draws series `$i`'s points `$pts` (every `step`-th, shifted by the series so that
/// marks of curves drawn over each other do not sit on each other) with a shape of its own:
/// circle, triangle, cross, square in turn, and gives the series its legend entry (the
/// shape on a line). Lines of different strategies often coincide: the shapes keep them
/// apart.
macro_rules! marks {
    ($chart:expr, $i:expr, $pts:expr, $colour:expr, $label:expr) => {{
        let colour: RGBColor = $colour;
        let pts: &[_] = $pts;
        let step = (pts.len() / 24).max(1);
        let shown: Vec<_> = pts
            .iter()
            .copied()
            .skip(($i * step / 4) % step)
            .step_by(step)
            .collect();
        let style = colour.filled();
        match $i % 4 {
            0 => $chart
                .draw_series(shown.into_iter().map(|p| Circle::new(p, 4, style)))
                .map_err(err)?
                .label($label)
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(-10, 0), (10, 0)], colour)
                        + Circle::new((0, 0), 4, style)
                }),
            1 => $chart
                .draw_series(shown.into_iter().map(|p| TriangleMarker::new(p, 6, style)))
                .map_err(err)?
                .label($label)
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(-10, 0), (10, 0)], colour)
                        + TriangleMarker::new((0, 0), 6, style)
                }),
            2 => $chart
                .draw_series(
                    shown
                        .into_iter()
                        .map(|p| Cross::new(p, 5, colour.stroke_width(2))),
                )
                .map_err(err)?
                .label($label)
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(-10, 0), (10, 0)], colour)
                        + Cross::new((0, 0), 5, colour.stroke_width(2))
                }),
            _ => $chart
                .draw_series(
                    shown
                        .into_iter()
                        .map(|p| EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], style)),
                )
                .map_err(err)?
                .label($label)
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(-10, 0), (10, 0)], colour)
                        + Rectangle::new([(-4, -4), (4, 4)], style)
                }),
        };
    }};
}

/// The top of a y axis whose data reach `max`: a third more, so that the legend (upper
/// right) sits above the data rather than on it.
fn headroom(min: u64, max: u64) -> u64 {
    max + (max - min.min(max)) / 3 + 1
}

/// Room left of a y axis whose widest tick label is the number `widest`: the labels (about
/// 7 px a digit at [`TEXT`]'s 12 px) and beside them the axis's description, clear of them.
fn y_label_room(widest: u64) -> u32 {
    7 * widest.to_string().len() as u32 + 44
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
                CAPTION,
            )
            .margin(12)
            .margin_right(36)
            .x_label_area_size(45)
            .y_label_area_size(y_label_room(headroom(min_ino, max_ino + 1)))
            .build_cartesian_2d(0u64..max_at + 1, min_ino..headroom(min_ino, max_ino + 1))
            .map_err(err)?;
        chart
            .configure_mesh()
            .label_style(TEXT)
            .axis_desc_style(AXIS)
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

/// The device's access order in one phase: each read's and write's offset (MiB) by its number
/// in the phase.
pub fn device_access(p: &super::device::DevicePhase) -> Result<String> {
    let pts = &p.points;
    let mib = |o: u64| o as f64 / (1 << 20) as f64;
    let max_at = pts.iter().map(|a| a.at).max().unwrap_or(0).max(1);
    let max_off = pts.iter().map(|a| mib(a.offset)).fold(1.0, f64::max);
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("Device access order: {} ({} points)", p.label, pts.len()),
                CAPTION,
            )
            .margin(12)
            .margin_right(36)
            .x_label_area_size(45)
            .y_label_area_size(y_label_room(max_off as u64 * 10))
            .build_cartesian_2d(0u64..max_at + 1, 0f64..max_off * 1.34)
            .map_err(err)?;
        chart
            .configure_mesh()
            .label_style(TEXT)
            .axis_desc_style(AXIS)
            .x_desc("request number in the phase (reads and writes)")
            .y_desc("offset in the file (MiB)")
            .draw()
            .map_err(err)?;
        for (i, (name, write)) in [("read", false), ("write", true)].into_iter().enumerate() {
            let colour = palette(i);
            chart
                .draw_series(
                    pts.iter()
                        .filter(|a| a.write == write)
                        .map(|a| Circle::new((a.at, mib(a.offset)), 1, colour.filled())),
                )
                .map_err(err)?
                .label(name)
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
        .label_font(TEXT)
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
    // PBS's default and maximum capacities, where the curves reach them: grey lines, and the
    // title names only the ones drawn.
    let marked: Vec<(u64, &str)> = [
        (super::PBS_CACHE_DEFAULT, "default 1Mi"),
        (super::PBS_CACHE_MAX, "maximum 8Mi"),
    ]
    .into_iter()
    .filter(|(cap, _)| !blocks && (xmin..=xmax).contains(&(*cap as f64)))
    .collect();
    let (title, xdesc) = if blocks {
        (
            "Metadata blocks: LRU miss ratio by cache size".to_string(),
            "cache size (MiB, log scale)",
        )
    } else {
        let lines: Vec<&str> = marked.iter().map(|m| m.1).collect();
        (
            match lines.len() {
                0 => "Digest cache: LRU miss ratio by capacity".to_string(),
                _ => format!(
                    "Digest cache: LRU miss ratio by capacity (grey: PBS's {})",
                    lines.join(", ")
                ),
            },
            "digest-cache capacity (entries, log scale)",
        )
    };
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title.as_str(), CAPTION)
            .margin(12)
            .margin_right(36)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d((xmin..xmax).log_scale(), 0f64..1.4)
            .map_err(err)?;
        chart
            .configure_mesh()
            .label_style(TEXT)
            .axis_desc_style(AXIS)
            .x_desc(xdesc)
            .y_desc("miss ratio")
            // The room above 1 holds the legend.
            .y_label_formatter(&|v| {
                if *v > 1.0001 {
                    String::new()
                } else {
                    format!("{v:.1}")
                }
            })
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
                .map_err(err)?;
            marks!(chart, i, c, colour, label.as_str());
        }
        for (cap, _) in &marked {
            let x = *cap as f64;
            chart
                .draw_series(LineSeries::new(
                    [(x, 0.0), (x, 1.0)],
                    BLACK.mix(0.4).stroke_width(1),
                ))
                .map_err(err)?;
        }
        legend(&mut chart)
    })
}

/// Log2 histograms as bars: bucket `k` (values from 2^(k-1), 0 for k = 0) spans `[k, k+1)`
/// on the x axis, labelled at its lower bound; the series' bars stand side by side in it.
fn log2_bars(
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
    let width = 0.8 / series.len().max(1) as f64;
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, CAPTION)
            .margin(12)
            .margin_right(36)
            .x_label_area_size(45)
            .y_label_area_size(y_label_room(headroom(0, ymax)))
            .build_cartesian_2d(0f64..kmax as f64, 0u64..headroom(0, ymax))
            .map_err(err)?;
        chart
            .configure_mesh()
            .label_style(TEXT)
            .axis_desc_style(AXIS)
            .x_desc(xdesc)
            .y_desc("count")
            .x_labels(kmax.min(16) + 1)
            .x_label_formatter(&|v| {
                let k = v.round();
                if (v - k).abs() > 1e-6 || k < 0.0 {
                    return String::new();
                }
                match k as u64 {
                    0 => "0".to_string(),
                    k => format_x(1u64 << (k - 1).min(63)),
                }
            })
            .draw()
            .map_err(err)?;
        for (i, (label, h)) in series.iter().enumerate() {
            let colour = palette(i);
            let left = |k: usize| k as f64 + 0.1 + i as f64 * width;
            chart
                .draw_series(h.iter().enumerate().filter(|(_, &c)| c > 0).map(|(k, &c)| {
                    Rectangle::new([(left(k), 0), (left(k) + width, c)], colour.filled())
                }))
                .map_err(err)?
                .label(label.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x - 6, y - 6), (x + 6, y + 6)], colour.filled())
                });
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
    log2_bars(
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
    log2_bars(
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
            .caption("Dirty metadata blocks per transaction group", CAPTION)
            .margin(12)
            .margin_right(36)
            .x_label_area_size(45)
            .y_label_area_size(y_label_room(headroom(0, ymax)))
            .build_cartesian_2d(0f64..xmax * 1.02, 0u64..headroom(0, ymax))
            .map_err(err)?;
        chart
            .configure_mesh()
            .label_style(TEXT)
            .axis_desc_style(AXIS)
            .x_desc("seconds since the phase's first transaction group")
            .y_desc("blocks written at the group's sync")
            .draw()
            .map_err(err)?;
        for (i, (label, pts)) in series.iter().enumerate() {
            let colour = palette(i);
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))
                .map_err(err)?;
            marks!(chart, i, pts, colour, label.as_str());
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
        crate::fsutil::write_whole(&path, |f| std::io::Write::write_all(f, body.as_bytes()))
            .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
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
