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

/// The legend's column at the right of every plot, outside the data (no series hides under
/// it, no headroom is left empty for it): its left edge, in pixels.
pub const LEGEND_X: u32 = 760;

/// Font sizes as plotters takes them: its SVG backend writes 0.81 of the size asked for, so
/// 15 is 12.1 px, the smallest text of a plot at 100% zoom (the report shows plots at their
/// own size).
const CAPTION: (&str, u32) = ("sans-serif", 24);
const TEXT: (&str, u32) = ("sans-serif", 15);
const AXIS: (&str, u32) = ("sans-serif", 16);

/// Okabe and Ito's colours (the black and the yellow left out: black is the axes', the
/// yellow too light on white), distinct for readers with any common colour-vision
/// deficiency; each series also has a marker shape of its own ([`Swatch::Marker`]), so the
/// plots stay readable in greyscale.
fn palette(i: usize) -> RGBColor {
    const C: [RGBColor; 6] = [
        RGBColor(0x00, 0x72, 0xb2),
        RGBColor(0xd5, 0x5e, 0x00),
        RGBColor(0x00, 0x9e, 0x73),
        RGBColor(0xcc, 0x79, 0xa7),
        RGBColor(0xe6, 0x9f, 0x00),
        RGBColor(0x56, 0xb4, 0xe9),
    ];
    C[i % C.len()]
}

/// How a legend entry shows its series.
#[derive(Clone, Copy)]
enum Swatch {
    /// A line with series `i`'s marker shape (circle, triangle, cross, square in turn).
    Marker(usize),
    /// A filled square (bars).
    Bar,
    /// A filled dot (points).
    Dot,
}

/// A plot's legend entries and notes, drawn in the column right of the chart, and what the
/// browser test reads of the plot: written into the SVG as a JSON `<desc>`.
#[derive(Default, serde::Serialize)]
struct Key {
    legend_x: u32,
    series: Vec<Series>,
    /// A histogram's bucket labels, one per bucket.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    buckets: Vec<String>,
    /// "1 point in N of M ...": the plot shows a sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    sampled: Option<String>,
    notes: Vec<String>,
    #[serde(skip)]
    swatches: Vec<Swatch>,
}

#[derive(serde::Serialize)]
struct Series {
    label: String,
    /// `#rrggbb`.
    colour: String,
}

impl Key {
    fn add(&mut self, label: &str, colour: RGBColor, swatch: Swatch) {
        self.series.push(Series {
            label: label.to_string(),
            colour: format!("#{:02x}{:02x}{:02x}", colour.0, colour.1, colour.2),
        });
        self.swatches.push(swatch);
    }

    /// Draws the entries, then the notes, in `area` (the legend column).
    fn draw(&self, area: &DrawingArea<SVGBackend, Shift>) -> Result<()> {
        let font = TEXT.into_font();
        let mut y = 70i32;
        for (s, swatch) in self.series.iter().zip(&self.swatches) {
            let c = self.colour_of(s);
            let at = (14, y + 7);
            match *swatch {
                Swatch::Marker(i) => {
                    area.draw(&PathElement::new(
                        vec![(at.0 - 10, at.1), (at.0 + 10, at.1)],
                        c.stroke_width(2),
                    ))
                    .map_err(err)?;
                    draw_marker(area, i, at, c)?;
                }
                Swatch::Bar => area
                    .draw(&Rectangle::new(
                        [(at.0 - 6, at.1 - 6), (at.0 + 6, at.1 + 6)],
                        c.filled(),
                    ))
                    .map_err(err)?,
                Swatch::Dot => area.draw(&Circle::new(at, 5, c.filled())).map_err(err)?,
            }
            for line in wrap(&s.label, 22) {
                area.draw(&Text::new(line, (32, y), font.clone()))
                    .map_err(err)?;
                y += 17;
            }
            y += 6;
        }
        y += 8;
        for note in self.sampled.iter().chain(&self.notes) {
            for line in wrap(note, 26) {
                area.draw(&Text::new(line, (6, y), font.clone()))
                    .map_err(err)?;
                y += 17;
            }
            y += 6;
        }
        Ok(())
    }

    fn colour_of(&self, s: &Series) -> RGBColor {
        let h = |i: usize| u8::from_str_radix(&s.colour[i..i + 2], 16).unwrap_or(0);
        RGBColor(h(1), h(3), h(5))
    }

    /// `svg` with this key as its `<desc>`, right after the root element's start.
    fn into_svg(mut self, svg: String) -> String {
        self.legend_x = LEGEND_X;
        let json = serde_json::to_string(&self)
            .unwrap_or_default()
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        match svg
            .find("<svg")
            .and_then(|i| svg[i..].find('>').map(|j| i + j + 1))
        {
            Some(at) => format!(
                "{}\n<desc id=\"chunkscope-plot\">{json}</desc>{}",
                &svg[..at],
                &svg[at..]
            ),
            None => svg,
        }
    }
}

/// `text` in lines of at most about `width` characters, broken at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(l) if l.len() + 1 + word.len() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// Series `i`'s marker at `at` (pixels of `area`).
fn draw_marker(
    area: &DrawingArea<SVGBackend, Shift>,
    i: usize,
    at: (i32, i32),
    c: RGBColor,
) -> Result<()> {
    let style = c.filled();
    match i % 4 {
        0 => area.draw(&Circle::new(at, 4, style)),
        1 => area.draw(&TriangleMarker::new(at, 6, style)),
        2 => area.draw(&Cross::new(at, 5, c.stroke_width(2))),
        _ => area.draw(&Rectangle::new(
            [(at.0 - 4, at.1 - 4), (at.0 + 4, at.1 + 4)],
            style,
        )),
    }
    .map_err(err)
}

/// Draws series `i`'s markers on `pts` (about 24 of them, at points no other series of the
/// `n` uses: lines of different strategies often coincide, and their markers then still
/// show each).
macro_rules! marks {
    ($chart:expr, $i:expr, $n:expr, $pts:expr, $colour:expr) => {{
        let colour: RGBColor = $colour;
        let pts: &[_] = $pts;
        let step = (pts.len() / 24).max($n).max(1);
        let shown: Vec<_> = pts.iter().copied().skip($i % step).step_by(step).collect();
        let style = colour.filled();
        match $i % 4 {
            0 => {
                $chart
                    .draw_series(shown.into_iter().map(|p| Circle::new(p, 4, style)))
                    .map_err(err)?;
            }
            1 => {
                $chart
                    .draw_series(shown.into_iter().map(|p| TriangleMarker::new(p, 6, style)))
                    .map_err(err)?;
            }
            2 => {
                $chart
                    .draw_series(
                        shown
                            .into_iter()
                            .map(|p| Cross::new(p, 5, colour.stroke_width(2))),
                    )
                    .map_err(err)?;
            }
            _ => {
                $chart
                    .draw_series(
                        shown.into_iter().map(|p| {
                            EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], style)
                        }),
                    )
                    .map_err(err)?;
            }
        }
    }};
}

/// The label of each curve: its own, or "LABEL (identical to EARLIER)" when an earlier curve
/// has the same points (drawn under it: the marks tell them apart, the label says why the
/// line is one).
fn identical_labels<T: PartialEq>(curves: &[(String, Vec<T>)]) -> Vec<String> {
    curves
        .iter()
        .enumerate()
        .map(
            |(i, (label, pts))| match curves[..i].iter().find(|(_, other)| other == pts) {
                Some((first, _)) => format!("{label} (identical to {first})"),
                None => label.clone(),
            },
        )
        .collect()
}

/// Room left of a y axis whose widest tick label is the number `widest`: the labels (about
/// 7 px a digit at [`TEXT`]'s 12 px) and beside them the axis's description, clear of them.
fn y_label_room(widest: u64) -> u32 {
    7 * widest.to_string().len() as u32 + 44
}

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("plot: {e}")
}

/// A plot: `draw` gets the chart's area (left of [`LEGEND_X`]) and fills `key`, which is
/// then drawn in the legend column and written into the SVG.
fn svg(
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>, &mut Key) -> Result<()>,
) -> Result<String> {
    let mut out = String::new();
    let mut key = Key::default();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (chart, legend) = root.split_horizontally(LEGEND_X);
        draw(&chart, &mut key)?;
        key.draw(&legend)?;
        root.present().map_err(err)?;
    }
    Ok(key.into_svg(out))
}

/// The sample note of an access plot: "1 point in N of M requests" (none when every one is
/// drawn).
fn sampled(stride: u64, of: u64, what: &str) -> Option<String> {
    (stride > 1).then(|| {
        format!(
            "1 point in {} of {} {what}",
            crate::units::thousands(stride),
            crate::units::thousands(of)
        )
    })
}

/// A point's radius for a series of `n` points: small where there are many, larger where
/// few would otherwise not show (never under 2 pixels: a point of 1 is all edge, and
/// antialiasing leaves none of it its series' colour).
fn dot_radius(n: usize) -> i32 {
    match n {
        0..=500 => 3,
        _ => 2,
    }
}

/// Operation sequence against backing inode number, one colour per operation, for one phase.
/// The rarest operations are drawn last (on top); the band of the chunk
/// directories' inodes (the listings') is marked at the chart's right edge.
pub fn access_pattern(p: &Labelled) -> Result<String> {
    let pts = &p.phase.access;
    let max_at = pts.iter().map(|a| a.at).max().unwrap_or(0).max(1);
    let max_ino = pts.iter().map(|a| a.ino).max().unwrap_or(0).max(1);
    let min_ino = pts.iter().map(|a| a.ino).min().unwrap_or(0);
    let mut ops: Vec<(&str, usize)> = Vec::new();
    for a in pts {
        match ops.iter_mut().find(|o| o.0 == a.op) {
            Some(o) => o.1 += 1,
            None => ops.push((a.op, 1)),
        }
    }
    ops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    // The chunk directories' inodes: those of the operations naming one, 1st to 99th
    // percentile (a directory renamed or made later lies apart).
    let mut dirs: Vec<u64> = pts.iter().filter(|a| a.chunk_dir).map(|a| a.ino).collect();
    dirs.sort_unstable();
    let band = (dirs.len() >= 2).then(|| (dirs[dirs.len() / 100], dirs[dirs.len() * 99 / 100]));
    let span = (max_ino - min_ino).max(1);
    svg(|root, key| {
        let mut chart = ChartBuilder::on(root)
            .caption(format!("Access pattern: {}", p.label), CAPTION)
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(y_label_room(max_ino + span / 50))
            .build_cartesian_2d(0u64..max_at + 1, min_ino..max_ino + span / 50 + 1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .label_style(TEXT)
            .axis_desc_style(AXIS)
            .x_desc("operation number in the phase (metadata operations)")
            .y_desc("backing inode number")
            .draw()
            .map_err(err)?;
        // The commoner operations first and a pixel larger than each after them: where two
        // fall on the same inodes (a listing and the lookups of its directory), the earlier
        // shows as a ring around the later.
        for (i, (op, n)) in ops.iter().enumerate() {
            let colour = palette(i);
            let r = dot_radius(*n) + (ops.len() - 1 - i).min(3) as i32;
            chart
                .draw_series(
                    pts.iter()
                        .filter(|a| a.op == *op)
                        .map(|a| Circle::new((a.at, a.ino), r, colour.filled())),
                )
                .map_err(err)?;
            key.add(op, colour, Swatch::Dot);
        }
        if let Some((lo, hi)) = band {
            // A bracket along the right edge over the directories' inodes, named.
            let (x, top) = chart.backend_coord(&(max_at + 1, hi));
            let (_, bottom) = chart.backend_coord(&(max_at + 1, lo));
            let (top, bottom) = (top.min(bottom - 4), bottom.max(top + 4));
            root.draw(&PathElement::new(
                vec![(x - 6, top), (x - 2, top), (x - 2, bottom), (x - 6, bottom)],
                BLACK.stroke_width(2),
            ))
            .map_err(err)?;
            key.notes.push(format!(
                "bracket at the right edge: the chunk directories (inodes {}-{})",
                crate::units::thousands(lo),
                crate::units::thousands(hi)
            ));
        }
        key.sampled = sampled(
            p.phase.access_stride,
            p.phase.access_of,
            "metadata operations",
        );
        Ok(())
    })
}

/// The device's access order in one phase: each read's and write's offset (MiB) by its number
/// in the phase.
pub fn device_access(p: &super::device::DevicePhase) -> Result<String> {
    let pts = &p.points;
    let mib = |o: u64| o as f64 / (1 << 20) as f64;
    let max_at = pts.iter().map(|a| a.at).max().unwrap_or(0).max(1);
    let max_off = pts.iter().map(|a| mib(a.offset)).fold(1.0, f64::max);
    svg(|root, key| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("Device access order: {} ({} points)", p.label, pts.len()),
                CAPTION,
            )
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(y_label_room(max_off as u64 * 10))
            .build_cartesian_2d(0u64..max_at + 1, 0f64..max_off * 1.02)
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
            let n = pts.iter().filter(|a| a.write == write).count();
            if n == 0 {
                continue;
            }
            let r = dot_radius(n);
            chart
                .draw_series(
                    pts.iter()
                        .filter(|a| a.write == write)
                        .map(|a| Circle::new((a.at, mib(a.offset)), r, colour.filled())),
                )
                .map_err(err)?;
            key.add(name, colour, Swatch::Dot);
        }
        Ok(())
    })
}

/// Miss ratio against capacity (log scale) for each phase's digest stream or block stream.
/// The digests' curves are of phases with touches only: a sweep's lookups of chunks by name
/// pass no digest cache.
pub fn miss_ratio_curves(phases: &[Labelled], blocks: bool) -> Result<String> {
    let curve = |p: &Labelled| -> Vec<(f64, f64)> {
        let m = if blocks {
            &p.phase.block_mrc
        } else {
            &p.phase.digest_mrc
        };
        if m.references == 0 || (!blocks && p.phase.touches.count == 0) {
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
    let labels = identical_labels(&curves);
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
        (
            "Digests reaching the mount: LRU miss ratio by capacity".to_string(),
            "digest-cache capacity (entries, log scale)",
        )
    };
    svg(|root, key| {
        let mut chart = ChartBuilder::on(root)
            .caption(title.as_str(), CAPTION)
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d((xmin..xmax).log_scale(), 0f64..1.05)
            .map_err(err)?;
        chart
            .configure_mesh()
            .label_style(TEXT)
            .axis_desc_style(AXIS)
            .x_desc(xdesc)
            .y_desc("miss ratio")
            .y_label_formatter(&|v| format!("{v:.1}"))
            .x_label_formatter(&|v| {
                if blocks {
                    format!("{v}")
                } else {
                    human_count(*v)
                }
            })
            .draw()
            .map_err(err)?;
        for (cap, _) in &marked {
            let x = *cap as f64;
            chart
                .draw_series(LineSeries::new(
                    [(x, 0.0), (x, 1.0)],
                    BLACK.mix(0.4).stroke_width(1),
                ))
                .map_err(err)?;
        }
        for (i, ((_, c), label)) in curves.iter().zip(&labels).enumerate() {
            let colour = palette(i);
            chart
                .draw_series(LineSeries::new(c.iter().copied(), colour.stroke_width(2)))
                .map_err(err)?;
            marks!(chart, i, curves.len(), c, colour);
            key.add(label, colour, Swatch::Marker(i));
        }
        if !marked.is_empty() {
            let lines: Vec<&str> = marked.iter().map(|m| m.1).collect();
            key.notes
                .push(format!("grey lines: PBS's {} capacity", lines.join(", ")));
        }
        if !blocks {
            key.notes.push(
                "a GC with a digest cache sends only its misses: their curve stays at 1 \
                 (its cache's hits are in the tables)"
                    .into(),
            );
        }
        Ok(())
    })
}

/// Log2 histograms as bars of each series' share of its total (the series' totals may
/// differ many times): bucket `k` (values from 2^(k-1), 0 for k = 0) spans `[k, k+1)` on the
/// x axis and is labelled at its lower bound, every bucket from the first to the last any
/// series has; the series' bars stand side by side in it.
fn log2_bars(
    title: &str,
    xdesc: &str,
    ydesc: &str,
    series: &[(String, Vec<u64>)],
    format_x: &dyn Fn(u64) -> String,
) -> Result<String> {
    let nonzero = |k: usize| series.iter().any(|s| s.1.get(k).is_some_and(|&c| c > 0));
    let kmax = series.iter().map(|s| s.1.len()).max().unwrap_or(1).max(1);
    let first = (0..kmax).find(|&k| nonzero(k)).unwrap_or(0);
    let last = (0..kmax).rev().find(|&k| nonzero(k)).unwrap_or(0);
    let share: Vec<Vec<f64>> = series
        .iter()
        .map(|(_, h)| {
            let total = h.iter().sum::<u64>().max(1) as f64;
            h.iter().map(|&c| c as f64 / total).collect()
        })
        .collect();
    let ymax = share
        .iter()
        .flat_map(|h| h.iter().copied())
        .fold(0.01, f64::max);
    let bucket = |k: usize| match k {
        0 => "0".to_string(),
        k => format_x(1u64 << (k - 1).min(63)),
    };
    let width = 0.8 / series.len().max(1) as f64;
    svg(|root, key| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, CAPTION)
            .margin(12)
            .x_label_area_size(60)
            .y_label_area_size(60)
            .build_cartesian_2d(first as f64..(last + 1) as f64, 0f64..ymax * 1.05)
            .map_err(err)?;
        chart
            .configure_mesh()
            .label_style(TEXT)
            .axis_desc_style(AXIS)
            .x_desc(xdesc)
            .y_desc(ydesc)
            .disable_x_mesh()
            .x_labels(0)
            .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
            .draw()
            .map_err(err)?;
        // Every bucket's label under its middle, turned when they would not fit side by side.
        let buckets: Vec<String> = (first..=last).map(bucket).collect();
        let (x0, y0) = chart.backend_coord(&(first as f64, 0.0));
        let (x1, _) = chart.backend_coord(&((last + 1) as f64, 0.0));
        let per = (x1 - x0) as f64 / buckets.len() as f64;
        let widest = buckets.iter().map(String::len).max().unwrap_or(1) as f64 * 7.5;
        let turned = widest > per - 4.0;
        for (j, b) in buckets.iter().enumerate() {
            let x = x0 + (per * (j as f64 + 0.5)) as i32;
            let style = TEXT.into_font().color(&BLACK);
            if turned {
                let style = style.transform(FontTransform::Rotate270).pos(
                    plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Right,
                        plotters::style::text_anchor::VPos::Center,
                    ),
                );
                root.draw(&Text::new(b.clone(), (x, y0 + 6), style))
                    .map_err(err)?;
            } else {
                let style = style.pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Top,
                ));
                root.draw(&Text::new(b.clone(), (x, y0 + 6), style))
                    .map_err(err)?;
            }
        }
        key.buckets = buckets;
        for (i, ((label, _), h)) in series.iter().zip(&share).enumerate() {
            let colour = palette(i);
            let left = |k: usize| k as f64 + 0.1 + i as f64 * width;
            chart
                .draw_series(
                    h.iter()
                        .enumerate()
                        .filter(|(_, &c)| c > 0.0)
                        .map(|(k, &c)| {
                            Rectangle::new([(left(k), 0.0), (left(k) + width, c)], colour.filled())
                        }),
                )
                .map_err(err)?;
            key.add(label, colour, Swatch::Bar);
        }
        Ok(())
    })
}

/// |Δino| between consecutive touches, per phase, as shares of the phase's touches.
pub fn gaps(phases: &[Labelled]) -> Result<String> {
    let series: Vec<(String, Vec<u64>)> = phases
        .iter()
        .filter(|p| p.phase.touches.count > 1)
        .map(|p| (p.label.clone(), p.phase.touches.gap_log2.clone()))
        .collect();
    log2_bars(
        "Gap |Δino| between consecutive atime updates (log2 buckets)",
        "|Δino| at least",
        "share of the phase's touches",
        &series,
        &|v| human_count(v as f64),
    )
}

/// Latency per operation kind in one phase, real and (when the trace has a model) modelled:
/// one line per series, the share of its requests that took at most each bucket's bound (a
/// cumulative distribution over log2 buckets).
pub fn latency(p: &Labelled) -> Result<String> {
    let mut series: Vec<(String, Vec<u64>)> = Vec::new();
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
    let kmax = series.iter().map(|s| s.1.len()).max().unwrap_or(1).max(2);
    // Bucket k holds latencies below 2^k ns: the curve's point at x = k.
    let curves: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(label, h)| {
            let total = h.iter().sum::<u64>().max(1) as f64;
            let mut acc = 0;
            let pts = (0..kmax)
                .map(|k| {
                    acc += h.get(k).copied().unwrap_or(0);
                    (k as f64, acc as f64 / total)
                })
                .collect();
            (label.clone(), pts)
        })
        .collect();
    let labels = identical_labels(&curves);
    let first = series
        .iter()
        .filter_map(|s| s.1.iter().position(|&c| c > 0))
        .min()
        .unwrap_or(0)
        .saturating_sub(1);
    svg(|root, key| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("Latency of metadata operations: {}", p.label),
                CAPTION,
            )
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(first as f64..(kmax - 1) as f64, 0f64..1.02)
            .map_err(err)?;
        chart
            .configure_mesh()
            .label_style(TEXT)
            .axis_desc_style(AXIS)
            .x_desc("latency below (log2 scale)")
            .y_desc("share of the requests")
            .x_labels(((kmax - first) / 2).clamp(2, 12))
            .x_label_formatter(&|v| {
                let k = v.round();
                if (v - k).abs() > 1e-6 || k < 0.0 {
                    return String::new();
                }
                crate::units::duration_ns(1u64 << (k as u64).min(63))
            })
            .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
            .draw()
            .map_err(err)?;
        for (i, ((_, c), label)) in curves.iter().zip(&labels).enumerate() {
            let c: Vec<(f64, f64)> = c.iter().copied().filter(|p| p.0 >= first as f64).collect();
            let colour = palette(i);
            chart
                .draw_series(LineSeries::new(c.iter().copied(), colour.stroke_width(2)))
                .map_err(err)?;
            marks!(chart, i, curves.len(), &c, colour);
            key.add(label, colour, Swatch::Marker(i));
        }
        Ok(())
    })
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
    let labels = identical_labels(&series);
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
    svg(|root, key| {
        let mut chart = ChartBuilder::on(root)
            .caption("Dirty metadata blocks per transaction group", CAPTION)
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(y_label_room(ymax + ymax / 20 + 1))
            .build_cartesian_2d(0f64..xmax * 1.02, 0u64..ymax + ymax / 20 + 1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .label_style(TEXT)
            .axis_desc_style(AXIS)
            .x_desc("seconds since the phase's first transaction group")
            .y_desc("blocks written at the group's sync")
            .draw()
            .map_err(err)?;
        for (i, ((_, pts), label)) in series.iter().zip(&labels).enumerate() {
            let colour = palette(i);
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))
                .map_err(err)?;
            marks!(chart, i, series.len(), pts, colour);
            key.add(label, colour, Swatch::Marker(i));
        }
        Ok(())
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
