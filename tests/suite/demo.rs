//! Issue 8: `chunkscope demo` runs the whole experiment, writes its report, and leaves no
//! mount, process or store behind, also when interrupted. Runs the `tiny` preset; the demo
//! generates on tmpfs (/dev/shm), where inode numbers follow creation order.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

/// The demos of this file run one at a time: each checks that no demo mount is left.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Mount lines of the demo's work directories (`/dev/shm/chunkscope-demo-*`).
/// What names the work directory of the demo of process `pid` (and its mounts and mount
/// processes): another demo running on the machine is not this one's to clean.
fn tag(pid: u32) -> String {
    format!("chunkscope-demo-{pid}-")
}

fn demo_mounts(pid: u32) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&tag(pid)))
        .map(str::to_string)
        .collect()
}

/// Whether a `chunkscope mount` that process `parent` started has its mountpoint mounted:
/// that demo's mount is up. (Any mount line naming a demo work directory will not do: one of
/// another run may be there, and a signal sent before the demo takes its signals kills it
/// at once, with nothing printed.)
fn a_mount_of(parent: u32) -> bool {
    let mounted = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        let ppid = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> = cmd
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let at = args.iter().position(|a| a == "--mountpoint");
        if let Some(mnt) = at.and_then(|i| args.get(i + 1)) {
            if mounted
                .lines()
                .any(|l| l.split(' ').nth(4) == Some(mnt.as_str()))
            {
                return true;
            }
        }
    }
    false
}

/// `chunkscope mount` processes started by a demo (their store is in a demo work directory).
fn demo_mount_processes(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        if cmd.contains("mount") && cmd.contains(&tag(pid)) {
            out.push(p);
        }
    }
    out
}

fn work_dirs(pid: u32) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&tag(pid)))
                .collect()
        })
        .unwrap_or_default()
}

fn assert_svg(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{}: not XML: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert!(
        doc.descendants().any(|n| n.has_tag_name("text")),
        "{}: no labels",
        path.display()
    );
}

/// The demo with the three strategies its findings are about, its traces removed at the end
/// (the other two strategies and `--keep` are [`demo_with_every_strategy_on_tiny`]'s). CI
/// also runs the demo's tiny form before the tests, as the README's first command.
#[test]
#[ignore = "long suite (CI runs it with --ignored): three mounted GCs and a simulated slice, \
            35 s of a fresh clone's 10 minutes"]
fn demo_on_tiny_prints_the_table_and_writes_the_report() {
    demo_on_tiny(&["naive", "lru", "prefetch"], false);
}

/// The demo as a new user runs it: every strategy; its report opened in a real browser.
#[test]
#[ignore = "long suite (CI runs it with --ignored): the whole demo, five mounted GCs"]
fn demo_with_every_strategy_on_tiny() {
    let dir = demo_on_tiny(&[], true);
    assert_renders_in_chromium(&dir.path().join("report"), Some("report-plots"));
}

/// The browser check fails where a reader would see a problem: a plot that does not load,
/// Markdown left in the text, a blank page, labels drawn over each other or out of their
/// plot; and passes a plain page without them.
#[test]
#[ignore = "long suite (CI runs it with --ignored): needs headless Chromium"]
fn the_browser_check_fails_on_a_broken_report() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("svg")).unwrap();
    let svg = r#"<svg xmlns="http://www.w3.org/2000/svg" width="300" height="100"><rect width="300" height="100"/></svg>"#;
    for n in 0..4 {
        std::fs::write(dir.path().join(format!("svg/p{n}.svg")), svg).unwrap();
    }
    let page = |body: &str| {
        format!(
            "<!DOCTYPE html><html><body><h2>Findings</h2><p>At the threads' density</p>\
             {body}<img src=\"svg/p0.svg\"><img src=\"svg/p1.svg\"><img src=\"svg/p2.svg\">\
             </body></html>"
        )
    };
    let fails = |html: String| {
        std::fs::write(dir.path().join("report.html"), html).unwrap();
        let p = dir.path().to_path_buf();
        std::panic::catch_unwind(move || assert_renders_in_chromium(&p, None))
            .err()
            .map(|e| {
                e.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| format!("{:?}", e.downcast_ref::<&str>()))
            })
    };
    let broken = fails(page("<img src=\"svg/gone.svg\">")).expect("a missing plot must fail");
    assert!(broken.contains("svg/gone.svg did not load"), "{broken}");
    let markdown = fails(page("<img src=\"svg/p3.svg\"><p>store `small`</p>"))
        .expect("Markdown on the page must fail");
    assert!(markdown.contains("the page shows \"`\""), "{markdown}");
    // Every plot loads and the text is clean, but the page is white: blank.
    let white = svg.replace("<rect ", "<rect fill=\"white\" ");
    for n in 0..4 {
        std::fs::write(dir.path().join(format!("svg/p{n}.svg")), &white).unwrap();
    }
    let blank = fails(page("<img src=\"svg/p3.svg\">")).expect("a blank page must fail");
    assert!(blank.contains("nearly blank"), "{blank}");
    // Inked, but two labels of a plot drawn over each other, or one out of its plot.
    let labelled = |texts: &str| {
        let svg = svg.replace("</svg>", &format!("{texts}</svg>"));
        for n in 0..4 {
            std::fs::write(dir.path().join(format!("svg/p{n}.svg")), &svg).unwrap();
        }
    };
    let label = |x: u32, y: u32, s: &str| {
        format!("<text x=\"{x}\" y=\"{y}\" font-size=\"15\" fill=\"red\">{s}</text>")
    };
    labelled(&(label(10, 40, "phase 1 touches") + &label(60, 44, "phase 2")));
    let overlap = fails(page("<img src=\"svg/p3.svg\">")).expect("overlapping labels must fail");
    assert!(
        overlap.contains(".svg: labels overlap") && overlap.contains("phase 2"),
        "{overlap}"
    );
    labelled(&(label(10, 40, "apart") + &label(260, 80, "cut off at the edge")));
    let outside = fails(page("<img src=\"svg/p3.svg\">")).expect("a label outside must fail");
    assert!(
        outside.contains("labels outside the plot") && outside.contains("cut off"),
        "{outside}"
    );
    labelled(&(label(10, 40, "apart") + &label(10, 80, "and inside")));
    assert_eq!(
        fails(page("<img src=\"svg/p3.svg\">")),
        None,
        "apart and inside passes"
    );
    // A key whose series has no pixel of its colour in the plot (hidden, or not drawn), or a
    // bucket without its label.
    let keyed = |key: &str, body: &str| {
        let svg = svg
            .replacen(
                "<rect ",
                &format!("<desc id=\"chunkscope-plot\">{key}</desc>{body}<rect "),
                1,
            )
            .replace("</svg>", &format!("{}</svg>", label(10, 40, "keyed")));
        std::fs::write(dir.path().join("svg/p0.svg"), svg).unwrap();
    };
    let series = r##"{"legend_x":200,"series":[{"label":"lru","colour":"#0072b2"}],"notes":[]}"##;
    keyed(series, "");
    let hidden = fails(page("<img src=\"svg/p3.svg\">")).expect("a series not seen must fail");
    assert!(
        hidden.contains("\"lru\" (#0072b2) has no visible pixels"),
        "{hidden}"
    );
    let bucket = r##"{"legend_x":200,"series":[],"buckets":["1Ki"],"notes":[]}"##;
    keyed(bucket, "");
    let unlabelled = fails(page("<img src=\"svg/p3.svg\">")).expect("an unlabelled bucket");
    assert!(
        unlabelled.contains("bucket \"1Ki\" has no label"),
        "{unlabelled}"
    );
    // The same series drawn (a blue square behind the black page), the bucket labelled.
    std::fs::write(
        dir.path().join("svg/p0.svg"),
        svg.replacen(
            "<rect ",
            &format!(
                "<desc id=\"chunkscope-plot\">{}</desc><rect ",
                r##"{"legend_x":200,"series":[{"label":"lru","colour":"#0072b2"}],"buckets":["1Ki"],"notes":[]}"##
            ),
            1,
        )
        .replace(
            "</svg>",
            "<rect x=\"10\" y=\"10\" width=\"20\" height=\"20\" fill=\"#0072b2\"/>\
             <text x=\"60\" y=\"60\" font-size=\"15\" fill=\"red\">\n1Ki\n</text></svg>",
        ),
    )
    .unwrap();
    assert_eq!(
        fails(page("<img src=\"svg/p3.svg\">")),
        None,
        "a keyed plot passes"
    );
}

/// Chromium's flags for a run as root on a machine without a network or a session bus.
const CHROMIUM: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
];

/// Runs headless Chromium with `args` and a profile of its own, at most 90 s.
fn chromium(args: &[&str]) -> std::process::Output {
    let exe = require("chromium");
    let profile = tempfile::tempdir().unwrap();
    let child = std::process::Command::new(exe)
        .args(CHROMIUM)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(Duration::from_secs(90)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // SAFETY: a signal to the process this test started, by its pid.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("chromium {args:?} did not finish in 90 s");
        }
    }
}

/// What the probe script appended to a copy of the page reports once it has loaded: every
/// image's natural width, and the text a reader sees.
const PROBE: &str = r#"<img src="svg/no-such-plot.svg" alt="">
<script>
window.addEventListener('load', () => {
  const pre = document.createElement('pre');
  pre.id = 'chunkscope-probe';
  pre.textContent = JSON.stringify({
    images: Array.from(document.images).map(i => [i.getAttribute('src'), i.naturalWidth]),
    text: document.body.innerText,
  });
  document.body.appendChild(pre);
});
</script>
"#;

/// The demo's report as a browser shows it: every plot loaded (and the probe's own missing
/// image not, so the check can fail), no Markdown markup in the text a reader sees, a
/// screenshot that is not blank, no label of a plot over another or out of it; a screenshot
/// of each plot is kept in [`artefacts`]`/KEEP` (none: beside the report).
fn assert_renders_in_chromium(report: &Path, keep: Option<&str>) {
    let page = std::fs::read_to_string(report.join("report.html")).unwrap();
    let plots = page.matches("<img ").count();
    assert!(plots >= 4, "{page}");
    let probe = report.join("probe.html");
    std::fs::write(&probe, page.replace("</body>", &format!("{PROBE}</body>"))).unwrap();
    let url = |p: &Path| format!("file://{}", p.display());
    let out = chromium(&["--virtual-time-budget=10000", "--dump-dom", &url(&probe)]);
    let v = probe_json(&out);
    let images = v["images"].as_array().unwrap();
    assert_eq!(images.len(), plots + 1, "{images:?}");
    for img in images {
        let (src, width) = (img[0].as_str().unwrap(), img[1].as_u64().unwrap());
        if src == "svg/no-such-plot.svg" {
            assert_eq!(width, 0, "a missing image must not count as loaded");
        } else {
            assert!(width > 0, "{src} did not load in the browser");
        }
    }
    let text = v["text"].as_str().unwrap();
    assert!(
        text.contains("Findings") && text.contains("At the threads' density"),
        "{text}"
    );
    for markup in ["`", "**", "](", "<code>", "&lt;"] {
        assert!(!text.contains(markup), "the page shows {markup:?}: {text}");
    }
    for line in text.lines() {
        let l = line.trim_start();
        assert!(
            !l.starts_with("# ") && !l.starts_with("* ") && !l.starts_with("| "),
            "a Markdown line on the page: {line}"
        );
    }

    // Not blank: a screenshot of the page with enough pixels that are not the background.
    let shot = report.join("screenshot.png");
    let shot_arg = format!("--screenshot={}", shot.display());
    chromium(&[
        &shot_arg,
        "--window-size=1200,2400",
        &url(&report.join("report.html")),
    ]);
    assert_inked(&shot, 3);

    let sources = plot_sources(&page);
    assert_text_apart(report, &sources);
    // A screenshot of each plot at its own size, kept where CI keeps its artefacts (`keep`)
    // or beside the report.
    let kept = keep.map_or_else(|| report.join("plots"), |k| artefacts().join(k));
    std::fs::create_dir_all(&kept).unwrap();
    for src in &sources {
        let svg = std::fs::read_to_string(report.join(src)).unwrap();
        let (w, h) = svg_size(&svg).unwrap_or_else(|| panic!("{src}: no width and height"));
        let name = Path::new(src)
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let png = kept.join(format!("{name}.png"));
        let _ = std::fs::remove_file(&png);
        chromium(&[
            &format!("--screenshot={}", png.display()),
            &format!("--window-size={w},{h}"),
            &url(&report.join(src)),
        ]);
        assert_inked(&png, 1);
        assert_keyed(src, &svg, &png);
    }
}

/// A plot's key (the JSON `<desc>` chunkscope's plots carry; none: nothing to check), as
/// the screenshot `png` of the plot shows it: every series of the legend has pixels of its
/// colour left of the legend's column (drawn, not hidden under another series); a
/// histogram's every bucket has its label; a plot of a sample says so.
fn assert_keyed(src: &str, svg: &str, png: &Path) {
    let Some(desc) = svg
        .split("<desc id=\"chunkscope-plot\">")
        .nth(1)
        .and_then(|r| r.split("</desc>").next())
    else {
        return;
    };
    let key: serde_json::Value = serde_json::from_str(
        &desc
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&"),
    )
    .unwrap_or_else(|e| panic!("{src}: its key is not JSON: {e}"));
    let legend_x = key["legend_x"].as_u64().unwrap() as usize;
    let decoder = png::Decoder::new(std::fs::File::open(png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    let width = info.width as usize;
    let pixels = &buf[..info.buffer_size()];
    for series in key["series"].as_array().unwrap() {
        let label = series["label"].as_str().unwrap();
        let hex = series["colour"].as_str().unwrap();
        let c: Vec<i32> = (0..3)
            .map(|i| i32::from_str_radix(&hex[1 + 2 * i..3 + 2 * i], 16).unwrap())
            .collect();
        let seen = pixels
            .chunks_exact(px)
            .enumerate()
            .filter(|(i, p)| {
                i % width < legend_x && (0..3).all(|k| (p[k] as i32 - c[k]).abs() <= 12)
            })
            .count();
        assert!(
            seen >= 4,
            "{src}: the legend's {label:?} ({hex}) has no visible pixels in the plot \
             ({seen}): hidden under another series, or not drawn"
        );
    }
    let doc = roxmltree::Document::parse(svg).unwrap();
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    if let Some(buckets) = key["buckets"].as_array() {
        for b in buckets {
            let b = b.as_str().unwrap();
            assert!(texts.contains(&b), "{src}: the bucket {b:?} has no label");
        }
    }
    if let Some(note) = key["sampled"].as_str() {
        assert!(
            note.starts_with("1 point in ") && texts.iter().any(|t| t.starts_with("1 point in ")),
            "{src}: a sampled plot without its note: {note}"
        );
    }
}

/// Where the tests leave what a person should look at after a CI run (the report's plots as
/// the browser drew them): `$CHUNKSCOPE_ARTEFACTS`, or `target/artefacts` in the checkout.
fn artefacts() -> std::path::PathBuf {
    std::env::var_os("CHUNKSCOPE_ARTEFACTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/artefacts"))
}

/// The `svg/NAME.svg` sources of the page's images, in order, each once.
fn plot_sources(page: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for part in page.split("src=\"").skip(1) {
        let src = part.split('"').next().unwrap();
        if src.ends_with(".svg") && !out.iter().any(|s| s == src) {
            out.push(src.to_string());
        }
    }
    out
}

/// The `width` and `height` of an SVG's root element, in pixels.
fn svg_size(svg: &str) -> Option<(u32, u32)> {
    let root = &svg[svg.find("<svg")?..];
    let root = &root[..root.find('>')?];
    let attr = |name: &str| -> Option<u32> {
        let v = root
            .split(&format!(" {name}=\""))
            .nth(1)?
            .split('"')
            .next()?;
        v.trim_end_matches("px")
            .parse::<f64>()
            .ok()
            .map(|f| f.ceil() as u32)
    };
    Some((attr("width")?, attr("height")?))
}

/// The screenshot at `png` has more than `percent`% of its pixels darker than the
/// background (not blank).
fn assert_inked(png: &Path, percent: usize) {
    let decoder = png::Decoder::new(std::fs::File::open(png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    assert!(px >= 3, "{:?}", info.color_type);
    let pixels = &buf[..info.buffer_size()];
    let total = pixels.len() / px;
    let inked = pixels
        .chunks_exact(px)
        .filter(|p| p[..3].iter().any(|&c| c < 200))
        .count();
    assert!(
        inked * 100 > total * percent,
        "the screenshot {} is nearly blank: {inked} of {total} pixels not background",
        png.display()
    );
}

/// What the overlap probe reports once the page of inlined plots has loaded: for each plot,
/// how many labels it has, the pairs whose boxes (as laid out, rotation included) overlap by
/// more than a pixel each way, and the labels that stick out of the plot.
const OVERLAP_PROBE: &str = r#"<script>
window.addEventListener('load', () => {
  const out = [];
  for (const sec of document.querySelectorAll('section[data-src]')) {
    const frame = sec.querySelector('svg').getBoundingClientRect();
    const texts = Array.from(sec.querySelectorAll('text'))
      .filter(t => t.textContent.trim() !== '')
      .map(t => [t.textContent.trim(), t.getBoundingClientRect()]);
    const overlaps = [];
    const outside = [];
    texts.forEach(([s, a], i) => {
      if (a.left < frame.left - 1 || a.top < frame.top - 1
          || a.right > frame.right + 1 || a.bottom > frame.bottom + 1) {
        outside.push(s);
      }
      for (const [u, b] of texts.slice(i + 1)) {
        const dx = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const dy = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (dx > 1 && dy > 1) overlaps.push([s, u]);
      }
    });
    out.push({src: sec.dataset.src, texts: texts.length, overlaps, outside});
  }
  const pre = document.createElement('pre');
  pre.id = 'chunkscope-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"#;

/// No label of a plot covers another or leaves the plot, as the browser lays them out:
/// each SVG is inlined in a page of its own (an `<img>`'s SVG cannot be looked into) and
/// [`OVERLAP_PROBE`] measures every `<text>`.
fn assert_text_apart(report: &Path, plots: &[String]) {
    let mut page = String::from("<!DOCTYPE html><html><body style=\"margin:0\">");
    for src in plots {
        let svg = std::fs::read_to_string(report.join(src)).unwrap();
        let svg = &svg[svg
            .find("<svg")
            .unwrap_or_else(|| panic!("{src}: no <svg>"))..];
        page.push_str(&format!("<section data-src=\"{src}\">{svg}</section>"));
    }
    page.push_str(OVERLAP_PROBE);
    page.push_str("</body></html>");
    let path = report.join("overlap-probe.html");
    std::fs::write(&path, page).unwrap();
    let out = chromium(&[
        "--virtual-time-budget=10000",
        "--dump-dom",
        &format!("file://{}", path.display()),
    ]);
    let v = probe_json(&out);
    let found = v.as_array().unwrap();
    assert_eq!(found.len(), plots.len(), "{v}");
    for p in found {
        let src = p["src"].as_str().unwrap();
        assert!(p["texts"].as_u64().unwrap() > 0, "{src}: no labels");
        assert!(
            p["overlaps"].as_array().unwrap().is_empty(),
            "{src}: labels overlap: {}",
            p["overlaps"]
        );
        assert!(
            p["outside"].as_array().unwrap().is_empty(),
            "{src}: labels outside the plot: {}",
            p["outside"]
        );
    }
}

/// The JSON a probe script left in `<pre id="chunkscope-probe">` of a dumped DOM.
fn probe_json(out: &std::process::Output) -> serde_json::Value {
    let dom = String::from_utf8_lossy(&out.stdout);
    let json = dom
        .split("<pre id=\"chunkscope-probe\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| {
            panic!(
                "the probe did not run: {}\n{}",
                dom,
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap()
}

/// Runs the demo on `tiny` with `strategies` (none: its default, every strategy) and checks
/// its table, findings, report and that it leaves nothing behind; returns the directory
/// holding the report (in `report/`).
/// The demo on `tiny` with `strategies` (all when empty); with `keep`, `--keep` (the store
/// it keeps is removed here).
fn demo_on_tiny(strategies: &[&str], keep: bool) -> tempfile::TempDir {
    let _one = serial();
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("report");
    let list = strategies.join(",");
    // The dense part at its finest slice (256 directories of datastore B): seconds.
    let mut args = vec![
        "demo",
        "--preset",
        "tiny",
        "--dense-slice",
        "256",
        "--out",
        report.to_str().unwrap(),
    ];
    if !strategies.is_empty() {
        args.extend(["--strategies", &list]);
    }
    if keep {
        args.push("--keep");
    }
    let child = bin()
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let (so, se) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "{so}\n{se}");
    if let Some(kept) = so.lines().find_map(|l| l.strip_prefix("store kept:")) {
        let kept = kept.trim();
        assert!(keep && kept.starts_with("/dev/shm/"), "{so}");
        // The demo's work directory, the store in it.
        let work = Path::new(kept).parent().unwrap();
        assert!(
            work.file_name()
                .unwrap()
                .to_string_lossy()
                .contains("chunkscope"),
            "{kept}"
        );
        std::fs::remove_dir_all(work).unwrap();
    }
    // The traces: kept with --keep, else removed once analysed; either way their size said.
    let traces_line = so
        .lines()
        .find(|l| l.starts_with("traces"))
        .unwrap_or_else(|| panic!("no traces line: {so}"));
    assert!(
        traces_line.contains(" MiB") || traces_line.contains(" KiB"),
        "{traces_line}"
    );
    assert_eq!(report.join("traces").exists(), keep, "{traces_line}");
    assert_eq!(traces_line.contains("removed"), !keep, "{traces_line}");
    let expected: Vec<&str> = if strategies.is_empty() {
        chunkscope::gc::Strategy::ALL.map(|s| s.name()).to_vec()
    } else {
        strategies.to_vec()
    };
    // The table: a row per strategy, each checked.
    for &s in &expected {
        let row = so
            .lines()
            .find(|l| l.starts_with(&format!("{s} ")))
            .unwrap_or_else(|| panic!("no row for {s}:\n{so}"));
        assert!(row.contains(" ok "), "{row}");
    }
    assert!(
        so.contains("phase 1 (modelled)") && so.contains("digest hit"),
        "{so}"
    );
    // The dense table: a row per strategy, at datastore B's density.
    let dense = so
        .split("At the threads' density: a 1/256 slice of `datastore-b` (256 of its 65,536")
        .nth(1)
        .unwrap_or_else(|| panic!("no dense table:\n{so}"));
    for &s in &expected {
        assert!(
            dense.lines().any(|l| l.starts_with(&format!("{s} "))),
            "no dense row for {s}:\n{so}"
        );
    }
    // Four findings: the ranking at the threads' density against lru, the demo's own
    // store and why it differs, the digest cache, the simulator against the mount.
    let findings: Vec<&str> = so.lines().filter(|l| l.starts_with("* ")).collect();
    assert_eq!(findings.len(), 4, "{so}");
    assert!(
        findings[0].starts_with("* At the threads' density (")
            && findings[0].contains("the ranking is ")
            && findings[0].contains("against lru, PBS's default"),
        "{}",
        findings[0]
    );
    assert!(
        findings[1].contains("On the demo's own store (")
            && findings[1].contains("The rankings differ because a listing"),
        "{}",
        findings[1]
    );
    assert!(findings[2].contains("3.3.5") && findings[2].contains("thread 000"));
    assert!(
        findings[3].contains(&format!(
            "counted what the mount counted for all {} strategies",
            expected.len()
        )),
        "{}",
        findings[3]
    );
    // Each mounted row says the simulator counted the same.
    for &s in &expected {
        let row = so
            .lines()
            .find(|l| l.starts_with(&format!("{s} ")))
            .unwrap();
        assert!(row.contains("same counts"), "{row}");
    }
    assert!(so.contains(&format!(
        "report:      {}",
        report.join("report.html").display()
    )));

    // The report: JSON with the same rows, Markdown, HTML that shows the plots.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["mode"], "fuse");
    let checks = json["sim_check"].as_array().unwrap();
    assert_eq!(checks.len(), expected.len());
    for c in checks {
        assert_eq!(c["mount"], c["simulated"], "{c}");
        assert!(c["mount"]["touches"].as_u64().unwrap() > 0, "{c}");
    }
    let d = &json["dense"];
    assert_eq!(
        (d["slice"].as_u64(), d["chunk_dirs"].as_u64()),
        (Some(256), Some(256))
    );
    // The threads' density: over 100 referenced chunks a directory.
    assert!(d["referenced_chunks"].as_u64().unwrap() > 100 * 256, "{d}");
    assert_eq!(d["rows"].as_array().unwrap().len(), expected.len());
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), expected.len());
    let referenced = json["referenced_chunks"].as_u64().unwrap();
    assert!(referenced > 1000);
    for r in rows {
        assert_eq!(r["check_ok"], true);
        assert!(r["phase1_modeled_ns"].as_u64().unwrap() > 0, "{r}");
        assert!(r["metadata_reads"].as_u64().unwrap() > 0, "{r}");
        // Every strategy touches every referenced chunk at least once.
        assert!(r["touches"].as_u64().unwrap() >= referenced, "{r}");
    }
    let touches = |s: &str| {
        rows.iter().find(|r| r["strategy"] == s).unwrap()["touches"]
            .as_u64()
            .unwrap()
    };
    assert!(touches("naive") > touches("lru"));
    assert_eq!(touches("lru"), referenced);
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("| strategy |") && md.contains("![svg/mrc-digests.svg]"));
    let html = std::fs::read_to_string(report.join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.matches("<table>").count() == 2);
    assert!(!html.contains('`'), "Markdown left in the HTML");
    assert!(html.contains("<code>tiny</code>") && html.contains("<dt>block writes</dt>"));
    // Every column of the tables has its legend entry.
    for col in [
        "touches",
        "metadata reads",
        "chunks/s",
        "digest hit",
        "simulated",
        "slice",
    ] {
        assert!(
            html.contains(&format!("<dt>{col}</dt>")),
            "no legend for {col}"
        );
    }
    // Captions say what a plot shows, not its file name.
    assert!(!html.contains("<figcaption>svg/"), "{html}");
    assert!(
        html.contains("<figcaption>Digest cache: the share"),
        "{html}"
    );
    let imgs: Vec<&str> = html
        .split("<img src=\"")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
        .collect();
    assert!(imgs.len() >= 4, "{html}");
    for img in imgs {
        assert_svg(&report.join(img));
    }
    for s in [expected[0], expected[expected.len() - 1]] {
        assert_eq!(report.join(format!("traces/{s}.trace")).is_file(), keep);
        assert!(report.join(format!("logs/gc-{s}.log")).is_file());
    }

    // Nothing left behind: no mount, no mount process, no work directory.
    assert!(demo_mounts(pid).is_empty(), "{:?}", demo_mounts(pid));
    assert!(demo_mount_processes(pid).is_empty());
    assert!(work_dirs(pid).is_empty(), "{:?}", work_dirs(pid));
    out
}

#[test]
fn demo_interrupted_unmounts_and_cleans_up() {
    let _one = serial();
    let out = tempfile::tempdir().unwrap();
    let mut child = bin()
        .args(["demo", "--preset", "tiny", "--out"])
        .arg(out.path().join("report"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until a strategy's mount of this demo is up, then interrupt the demo (our child,
    // by pid).
    let deadline = Instant::now() + Duration::from_secs(120);
    while !a_mount_of(child.id()) {
        assert!(Instant::now() < deadline, "the demo never mounted");
        assert!(child.try_wait().unwrap().is_none(), "the demo ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: a signal to the process we started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted; unmounting and cleaning up"),
        "{err}"
    );
    // What other runs have mounted or started is theirs, not this demo's to clean.
    let pid = child.id();
    assert!(demo_mounts(pid).is_empty(), "{:?}", demo_mounts(pid));
    // The mount process may take a moment to exit after its unmount.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !demo_mount_processes(pid).is_empty() {
        assert!(Instant::now() < deadline, "mount processes left behind");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(work_dirs(pid).is_empty(), "{:?}", work_dirs(pid));
}

#[test]
fn demo_simulated_says_so_and_reports_the_same_columns() {
    // No lock: the simulated demo mounts nothing and makes no work directory, so it cannot
    // disturb the others' "nothing left behind" checks (and waiting for them kept a test
    // thread idle for half a minute).
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("report");
    let o = run(&[
        "demo",
        "--preset",
        "tiny",
        "--simulate",
        "--dense-slice",
        "0",
        "--strategies",
        "naive,lru",
        "--out",
        report.to_str().unwrap(),
    ]);
    let (so, se) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "{so}\n{se}");
    assert!(
        se.contains("runs on the simulated store instead: --simulate was given"),
        "{se}"
    );
    assert!(so.starts_with("\nSimulated store `tiny`"), "{so}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["mode"], "simulated");
    assert_eq!(json["rows"].as_array().unwrap().len(), 2);
    // The demo's own store and the digest cache; no dense part (--dense-slice 0), no
    // check against a mount.
    assert_eq!(
        so.lines().filter(|l| l.starts_with("* ")).count(),
        2,
        "{so}"
    );
    assert!(json["dense"].is_null() && json["sim_check"].as_array().unwrap().is_empty());
    assert!(report.join("report.html").is_file());
}

#[test]
fn demo_refuses_bad_arguments_by_name() {
    let o = run(&["demo", "--preset", "thread000"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("thread000"), "{}", stderr(&o));
    let o = run(&["demo", "--model", "nonsense", "--out", "/tmp/x-never"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--model nonsense"), "{}", stderr(&o));
    assert!(!Path::new("/tmp/x-never").exists());
    let o = run(&["demo", "--dense-slice", "3", "--out", "/tmp/x-never"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--dense-slice 3: must be a power of two from 1 to 256"),
        "{}",
        stderr(&o)
    );
    assert!(!Path::new("/tmp/x-never").exists());
}
