//! Issue 22, point 2: every command block of README.md and docs/guide.md, and every example
//! of every subcommand's `--help`, works when pasted.
//!
//! The default suite checks their form (each block runs, is output, or says why it is
//! skipped; help examples are whole commands that fit an 80-column terminal). The long suite
//! runs them: README's and the guide's blocks in order in one scratch directory on tmpfs (as
//! a reader follows them, so a block may read a file an earlier one wrote, but each creates
//! the store and mountpoint it uses), the help examples in another, after making the files
//! they name (`gc.trace`, a `/dev/shm/tiny` store, ...). Absolute paths of the docs
//! (`/dev/shm/`, `/tmp/`, `/mnt/cs`) move into the scratch directory, `cargo` gets the
//! repository's manifest, and nothing else of a block changes. Inode numbers do not matter
//! here.

use crate::common::*;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// What the comment before a block says to do with it.
#[derive(Debug, PartialEq)]
enum Mark {
    /// Run it (no comment).
    Run,
    /// `<!-- docs-test: output -->`: what the command of the block before printed; the long
    /// suite checks that it still does (each line the start of a line it printed, in order).
    /// `<!-- docs-test: output within N% -->`: its numbers may differ by N% (a store's inode
    /// numbers vary a little with the generator's two threads, and what follows them).
    Output(u32),
    /// `<!-- docs-test: sample: REASON -->`: what a command printed once, kept as an example
    /// only because it cannot repeat (live rates, the minute it ran).
    Sample(String),
    /// `<!-- docs-test: skip: REASON -->`.
    Skip(String),
}

/// A code block of a Markdown file.
#[derive(Debug)]
struct Block {
    file: &'static str,
    line: usize,
    text: String,
    mark: Mark,
}

/// The indented (4 spaces) and fenced code blocks of `file`, with the mark before each.
fn blocks(file: &'static str) -> Vec<Block> {
    let text = std::fs::read_to_string(Path::new(REPO).join(file)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut in_list = false;
    while i < lines.len() {
        let l = lines[i];
        // Lines indented under a list item continue it; they are not code.
        if l.starts_with("* ") || l.starts_with("- ") || l.starts_with("1. ") {
            in_list = true;
        } else if l.trim().is_empty() {
            // A blank line ends a list only if what follows is not indented.
        } else if !l.starts_with(' ') {
            in_list = false;
        }
        let fenced = l.starts_with("```");
        let indented = !in_list
            && l.starts_with("    ")
            && (i == 0 || lines[i - 1].trim().is_empty())
            && !l.trim().is_empty();
        if !fenced && !indented {
            i += 1;
            continue;
        }
        let start = i;
        let mut body = Vec::new();
        if fenced {
            i += 1;
            while i < lines.len() && !lines[i].starts_with("```") {
                body.push(lines[i].to_string());
                i += 1;
            }
            i += 1;
        } else {
            while i < lines.len() && (lines[i].starts_with("    ") || lines[i].trim().is_empty()) {
                body.push(lines[i].get(4..).unwrap_or("").to_string());
                i += 1;
            }
            while body.last().is_some_and(|b| b.trim().is_empty()) {
                body.pop();
            }
        }
        let before = lines[..start]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .copied()
            .unwrap_or("");
        let mark = match before
            .trim()
            .strip_prefix("<!-- docs-test:")
            .and_then(|m| m.strip_suffix("-->"))
            .map(str::trim)
        {
            None => Mark::Run,
            Some("output") => Mark::Output(0),
            Some(m) if m.starts_with("output within ") => Mark::Output(
                m["output within ".len()..]
                    .trim_end_matches('%')
                    .parse()
                    .unwrap_or_else(|_| panic!("{file}:{}: bad tolerance {m:?}", start + 1)),
            ),
            Some(m) if m.starts_with("sample:") => {
                Mark::Sample(m["sample:".len()..].trim().to_string())
            }
            Some(m) => Mark::Skip(
                m.strip_prefix("skip:")
                    .unwrap_or_else(|| panic!("{file}:{}: unknown mark {m:?}", start + 1))
                    .trim()
                    .to_string(),
            ),
        };
        out.push(Block {
            file,
            line: start + 1,
            text: body.join("\n"),
            mark,
        });
    }
    out
}

fn doc_blocks() -> Vec<Block> {
    let mut all = blocks("README.md");
    all.extend(blocks("docs/guide.md"));
    all
}

/// What a runnable block may start with.
const COMMANDS: [&str; 12] = [
    "chunkscope ",
    // A block's own store (and mountpoint): `store=$(mktemp -d /dev/shm/x.XXXXXX)`.
    "store=$(mktemp ",
    "cargo ",
    "mount-scripts/",
    "chunkscope-run ",
    "chunkscope-mount ",
    "mkdir ",
    "export ",
    "apt-get ",
    "for ",
    "chromium ",
    "python3 ",
];

fn is_command(line: &str) -> bool {
    COMMANDS.iter().any(|c| line.starts_with(c))
}

/// Every block of the docs runs, or is marked output, or says why it does not run; a block
/// that starts with no command must be marked.
#[test]
fn every_doc_block_runs_or_says_why_not() {
    let all = doc_blocks();
    let mut run = 0;
    let mut previous: Option<&Block> = None;
    for b in &all {
        let first = b.text.lines().next().unwrap_or("");
        match &b.mark {
            Mark::Run => {
                assert!(
                    is_command(first),
                    "{}:{}: a block that is not a command ({first:?}): mark it \
                     <!-- docs-test: output --> or <!-- docs-test: skip: why -->",
                    b.file,
                    b.line
                );
                run += 1;
            }
            Mark::Skip(why) => assert!(why.len() > 10, "{}:{}: say why", b.file, b.line),
            Mark::Sample(why) => {
                assert!(why.len() > 10, "{}:{}: say why", b.file, b.line);
                assert!(
                    !is_command(first),
                    "{}:{}: a sample output that looks like a command",
                    b.file,
                    b.line
                );
            }
            Mark::Output(_) => {
                assert!(
                    !is_command(first),
                    "{}:{}: an output block that looks like a command",
                    b.file,
                    b.line
                );
                // Checked against what the block before printed: it must be one that runs.
                assert!(
                    previous.is_some_and(|p: &Block| p.mark == Mark::Run && p.file == b.file),
                    "{}:{}: an output block must follow the command block that prints it \
                     (or be marked sample: why)",
                    b.file,
                    b.line
                );
            }
        }
        previous = Some(b);
    }
    // README's demo and its tracing, faults and analysis blocks, the guide's build, tracing,
    // analysis and simulation blocks.
    assert!(run >= 13, "only {run} runnable blocks found: {all:#?}");
}

/// `chunkscope`'s subcommands as its help lists them, each as the words that name it
/// (`trace export`, ...), nested ones included.
fn subcommands() -> Vec<Vec<String>> {
    fn listed(words: &[String]) -> Vec<String> {
        let mut args: Vec<&str> = words.iter().map(String::as_str).collect();
        args.push("--help");
        let help = stdout(&run(&args));
        help.lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            // A description continued on the next line is indented further.
            .filter(|l| !l.starts_with("   "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| *c != "help")
            .map(str::to_string)
            .collect()
    }
    let mut out = Vec::new();
    for top in listed(&[]) {
        let words = vec![top];
        let nested = listed(&words);
        out.push(words.clone());
        for n in nested {
            out.push(vec![words[0].clone(), n]);
        }
    }
    out
}

/// The example lines of `words --help` (after "Example:" or "Examples:", up to a blank line).
fn help_examples(words: &[String]) -> Vec<String> {
    let mut args: Vec<&str> = words.iter().map(String::as_str).collect();
    args.push("--help");
    let o = run(&args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    stdout(&o)
        .lines()
        .skip_while(|l| !l.starts_with("Example"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// Help examples are whole commands (or comments) that fit an 80-column terminal, so a
/// terminal never wraps one mid-command and a paste runs it as printed.
#[test]
fn help_examples_are_whole_commands_that_fit_a_line() {
    let subs = subcommands();
    assert!(subs.len() >= 14, "{subs:?}");
    let mut with_examples = 0;
    for words in &subs {
        let examples = help_examples(words);
        with_examples += (!examples.is_empty()) as usize;
        for line in &examples {
            assert!(
                line.chars().count() <= 79,
                "`chunkscope {}` --help: {} columns, wrapped on an 80-column terminal: {line}",
                words.join(" "),
                line.chars().count()
            );
            let l = line.trim_start();
            assert!(
                ["chunkscope ", "chunkscope-run ", "mount-scripts/", "# "]
                    .iter()
                    .any(|p| l.starts_with(p)),
                "`chunkscope {}` --help: not a whole command: {line}",
                words.join(" ")
            );
            assert!(!l.ends_with('\\'), "a continued example: {line}");
            // A comment in parentheses after a command is a syntax error when pasted.
            let command = l.split(" # ").next().unwrap();
            assert!(!command.contains("  ("), "a parenthesised comment: {line}");
        }
    }
    assert!(
        with_examples >= 11,
        "subcommands with examples: {with_examples}"
    );
}

/// A scratch directory standing in for `/dev/shm`, `/tmp` and `/mnt/cs`, a tmpfs of its own:
/// its inode numbers follow the blocks' creations alone (not other tests' in `/dev/shm`), so
/// a survey's inode gaps come out as the guide shows them. Whatever is mounted inside it is
/// unmounted when it is dropped, then the tmpfs.
struct Scratch {
    // Declared first: unmounted (after what is mounted inside, in `drop`) before the
    // directory is removed.
    _tmpfs: TmpfsMount,
    dir: tempfile::TempDir,
    /// The S3 server the docs' S3 examples reach: every block runs with `AWS_ENDPOINT_URL`
    /// and the keys set, as an admin's shell has them.
    s3: S3Server,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("chunkscope-docs-")
            .tempdir_in("/dev/shm")
            .unwrap();
        let tmpfs = TmpfsMount::on(dir.path(), 0);
        for d in ["shm", "tmp", "mnt"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        Scratch {
            _tmpfs: tmpfs,
            dir,
            s3: S3Server::start(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `text` with the docs' absolute paths moved in here and cargo given the manifest.
    /// Placeholders first, real paths last: the repository may itself be under `/tmp/`.
    fn localize(&self, text: &str) -> String {
        localize(text, REPO, &self.path().display().to_string())
    }

    /// Runs `script` with bash (`-e -o pipefail`) in `cwd` with `bin` first on the PATH, at
    /// most `limit`; panics with its output unless it succeeds.
    fn run(&self, what: &str, script: &str, cwd: &Path, bin: &Path, limit: Duration) -> String {
        let path = format!(
            "{}:{REPO}/mount-scripts:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out_file = self.path().join("block.out");
        let out = std::fs::File::create(&out_file).unwrap();
        let mut child = Command::new("bash")
            .args(["-e", "-o", "pipefail", "-c", script])
            .current_dir(cwd)
            .env("PATH", path)
            .envs(self.s3.env())
            // `mktemp -d` (a block's own mountpoint) inside the scratch directory too.
            .env("TMPDIR", self.path().join("tmp"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                // SAFETY: a signal to the process group of the shell this test started.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let text = std::fs::read_to_string(&out_file).unwrap_or_default();
        match status {
            Some(s) if s.success() => text,
            Some(s) => panic!("{what} failed ({s}):\n{script}\n--- output:\n{text}"),
            None => panic!("{what} took more than {limit:?}:\n{script}\n--- output:\n{text}"),
        }
    }

    /// Mountpoints inside the scratch directory.
    fn mounts(&self) -> Vec<String> {
        let prefix = format!("{}/", self.path().display());
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&prefix))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for m in self.mounts().iter().rev() {
            let _ = Command::new("umount").arg(m).status();
            if self.mounts().contains(m) {
                let _ = Command::new("umount").arg("-l").arg(m).status();
            }
        }
    }
}

/// `text` with the docs' absolute paths moved into `scratch` and cargo given `repo`'s
/// manifest. Placeholders first, real paths last: the repository may itself be under /tmp/.
fn localize(text: &str, repo: &str, scratch: &str) -> String {
    let mut t = text.to_string();
    let steps: [(&str, &str); 9] = [
        (
            "cargo run --release",
            "cargo run --release --manifest-path \u{1}/Cargo.toml",
        ),
        (
            "cargo build --release",
            "cargo build --release --manifest-path \u{1}/Cargo.toml",
        ),
        ("$PWD/target/", "\u{1}/target/"),
        ("$PWD/mount-scripts", "\u{1}/mount-scripts"),
        ("/dev/shm/", "\u{2}/shm/"),
        ("/tmp/", "\u{2}/tmp/"),
        ("/mnt/cs", "\u{2}/mnt/cs"),
        ("/datastore/pbs", "\u{2}/shm/tiny"),
        // `mount-scripts/x` where a command starts: the repository's.
        ("\nmount-scripts/", "\n\u{1}/mount-scripts/"),
    ];
    for (from, to) in steps {
        t = t.replace(from, to);
    }
    for start in [" ", "\t"] {
        t = t.replace(
            &format!("{start}mount-scripts/"),
            &format!("{start}\u{1}/mount-scripts/"),
        );
    }
    if t.starts_with("mount-scripts/") {
        t = format!("\u{1}/{t}");
    }
    t.replace('\u{1}', repo).replace('\u{2}', scratch)
}

/// README's blocks and then the guide's, in order, each as a reader pastes it.
#[test]
#[ignore = "long suite (CI runs it with --ignored): builds the release binary and runs every documented command, the demo included (about 10 minutes)"]
fn readme_and_guide_blocks_work_when_pasted() {
    let _demo = crate::demo::serial();
    let s = Scratch::new();
    let release = PathBuf::from(REPO).join("target/release");
    let mut ran = Vec::new();
    // What the last block that ran printed, for the output block after it; and every output
    // block that the command no longer prints, with what it printed.
    let mut printed = String::new();
    let mut stale = Vec::new();
    let scratch = s.path().display().to_string();
    for b in doc_blocks() {
        let what = format!("{}:{}", b.file, b.line);
        if let Mark::Output(percent) = b.mark {
            if let Err(e) = prints(&s.localize(&b.text), &printed, &scratch, percent) {
                stale.push(format!("{what}: {e}\n--- the command printed:\n{printed}"));
            }
            continue;
        }
        if b.mark != Mark::Run {
            continue;
        }
        let started = Instant::now();
        printed = s.run(
            &what,
            &s.localize(&b.text),
            s.path(),
            &release,
            Duration::from_secs(900),
        );
        ran.push(format!("{what} {:.0} s", started.elapsed().as_secs_f64()));
        assert!(
            s.mounts().is_empty(),
            "{what} left a mount: {:?}",
            s.mounts()
        );
    }
    // What the blocks made is there: the demo's report, the traces they analysed.
    for f in [
        "chunkscope-demo/report.html",
        "tmp/gc.trace",
        "tmp/slow.trace",
        "tmp/b.trace",
    ] {
        assert!(s.path().join(f).is_file(), "{f} missing after {ran:?}");
    }
    eprintln!("docs blocks: {}", ran.join(", "));
    assert!(
        stale.is_empty(),
        "output blocks the docs no longer get:\n{}",
        stale.join("\n\n")
    );
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(s.path().join("chunkscope-demo/report.json")).unwrap(),
    )
    .unwrap();
    the_demo_s_figures_are_what_the_docs_quote(&report);
}

/// The numbers the README, the guide and the help quote of the default demo (`small`) are
/// those of its report: how many findings, its referenced chunks and their density, its
/// size.
fn the_demo_s_figures_are_what_the_docs_quote(report: &serde_json::Value) {
    const NUMBERS: [&str; 9] = [
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    ];
    let findings = report["findings"].as_array().unwrap().len();
    for file in ["README.md", "docs/guide.md"] {
        let text = std::fs::read_to_string(Path::new(REPO).join(file)).unwrap();
        let words: Vec<&str> = text.split_whitespace().collect();
        let quoted: Vec<&str> = words
            .windows(2)
            .filter(|w| w[1].trim_end_matches([',', '.', ':', ';']) == "findings")
            .map(|w| w[0])
            .filter(|w| NUMBERS.contains(&w.to_lowercase().as_str()))
            .collect();
        assert!(!quoted.is_empty(), "{file} quotes no count of findings");
        for q in quoted {
            assert_eq!(
                NUMBERS.iter().position(|n| *n == q.to_lowercase()).unwrap() + 1,
                findings,
                "{file} says {q} findings; the demo printed {findings}"
            );
        }
    }
    let referenced = report["referenced_chunks"].as_u64().unwrap();
    // The guide's words, whatever lines they are broken into.
    let guide = std::fs::read_to_string(Path::new(REPO).join("docs/guide.md"))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let density = format!(
        "{} referenced chunks over 65,536 chunk directories, {:.2} a directory",
        chunkscope::units::thousands(referenced),
        referenced as f64 / 65536.0
    );
    assert!(
        guide.contains(&density),
        "the guide's section 1 should say: {density}"
    );
    // "small (about 53k chunks" in `gen --help` and `demo --help`.
    let chunks = report["chunks"].as_u64().unwrap() as f64;
    for cmd in ["gen", "demo"] {
        // Its words, whatever lines the help's wrapping broke them into.
        let help = stdout(&run(&[cmd, "--help"]))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let k: f64 = help
            .split("small (about ")
            .nth(1)
            .and_then(|r| r.split("k chunks").next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{cmd} --help: no 'small (about Nk chunks': {help}"));
        assert!(
            (k * 1000.0 - chunks).abs() <= 0.1 * chunks,
            "{cmd} --help says about {k}k chunks; the demo's store has {chunks}"
        );
    }
}

/// Whether `out` (what a command printed) still shows `doc` (an output block): each line of
/// the block, its words, starts a line of `out`, in order; numbers within `percent`% of
/// each other match. Paths inside `scratch` and the random part of `mktemp` names
/// (`mine.Qx81Lm`) are left out of both.
fn prints(doc: &str, out: &str, scratch: &str, percent: u32) -> Result<(), String> {
    // "31m 15s" as one word, "31m15s" (its seconds compared as a whole, within the
    // tolerance).
    let joined = |line: &str| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for w in line.split_whitespace() {
            let unit = |w: &str, units: &[char]| {
                w.len() > 1
                    && w.ends_with(units)
                    && w[..w.len() - 1].chars().all(|c| c.is_ascii_digit())
            };
            match out.last_mut() {
                // "1h" + "3m", then "1h3m" + "34s".
                Some(l)
                    if l.ends_with(['h', 'm'])
                        && l.len() > 1
                        && l.chars()
                            .all(|c| c.is_ascii_digit() || c == 'h' || c == 'm')
                        && unit(w, &['m', 's']) =>
                {
                    l.push_str(w)
                }
                _ => out.push(w.to_string()),
            }
        }
        out
    };
    let words = |line: &str| -> Vec<String> {
        joined(&line.replace(scratch, ""))
            .into_iter()
            .map(|w| match w.rsplit_once('.') {
                Some((head, tail))
                    if w.contains('/')
                        && tail.len() == 6
                        && tail.chars().all(|c| c.is_ascii_alphanumeric()) =>
                {
                    format!("{head}.XXXXXX")
                }
                _ => w,
            })
            .collect()
    };
    // A word's number and what follows it (`1,493` -> 1493 and "", `(4.816` -> 4.816, `37s`
    // -> 37 and "s").
    let number = |w: &str| -> Option<(f64, String)> {
        let w = w
            .trim_start_matches('(')
            .trim_end_matches([')', ',', ';', '%']);
        // A joined duration ("31m15s", "1h3m34s", "1h3m"): its seconds.
        let duration = || -> Option<f64> {
            if w.chars().filter(|c| "hms".contains(*c)).count() < 2 {
                return None;
            }
            let mut secs = 0.0;
            let mut rest = w;
            for (unit, scale) in [('h', 3600.0), ('m', 60.0), ('s', 1.0)] {
                if let Some((n, r)) = rest.split_once(unit) {
                    secs += scale * n.parse::<f64>().ok()?;
                    rest = r;
                }
            }
            rest.is_empty().then_some(secs)
        };
        if let Some(secs) = duration() {
            return Some((secs, "s".into()));
        }
        let end = w
            .find(|c: char| !(c.is_ascii_digit() || c == ',' || c == '.'))
            .unwrap_or(w.len());
        let x = w[..end].replace(',', "").parse().ok()?;
        Some((x, w[end..].to_string()))
    };
    let same = |a: &String, b: &String| {
        a == b
            || (percent > 0
                && number(a).zip(number(b)).is_some_and(|((x, u), (y, v))| {
                    u == v && (x - y).abs() <= f64::from(percent) / 100.0 * x.abs().max(y.abs())
                }))
    };
    let mut lines = out.lines().map(words);
    for want in doc.lines().map(words).filter(|w| !w.is_empty()) {
        if !lines
            .any(|got| got.len() >= want.len() && want.iter().zip(&got).all(|(a, b)| same(a, b)))
        {
            return Err(format!("not printed (in this order): {}", want.join(" ")));
        }
    }
    Ok(())
}

#[test]
fn output_blocks_are_compared_word_for_word_with_paths_and_mktemp_names_left_out() {
    let out = "store  /s/shm/mine.ab12CD (tmpfs)\nlru  1,493  25m 14s  3.1 s\nbatched  9  1m\n";
    assert!(prints("store /s/shm/mine.Qx81Lm (tmpfs)", out, "/s", 0).is_ok());
    assert!(prints("store /shm/mine.Qx81Lm (ext4)", out, "/s", 0).is_err());
    assert!(prints("lru 1,493 25m 14s\nbatched 9", out, "/s", 0).is_ok());
    assert!(
        prints("lru 1,494 25m 14s", out, "/s", 0).is_err(),
        "a figure changed"
    );
    assert!(
        prints("batched 9\nlru 1,493", out, "/s", 0).is_err(),
        "out of order"
    );
    // Within 1%: 1,494 for 1,493 passes, 1,520 does not; words stay exact.
    assert!(prints("lru 1,494 25m 14s", out, "/s", 1).is_ok());
    assert!(prints("lru 1,520 25m 14s", out, "/s", 1).is_err());
    assert!(prints("lfu 1,493", out, "/s", 1).is_err());
    assert!(prints("lru 1,493 25m 14s 3.12 s", out, "/s", 1).is_ok());
    assert!(
        prints("lru 1,493 25m 14ms", out, "/s", 1).is_err(),
        "another unit"
    );
    // A duration compared whole: 25m 15s is 0.07% from 25m 14s.
    assert!(prints("lru 1,493 25m 15s", out, "/s", 1).is_ok());
    assert!(prints("lru 1,493 25m 15s", out, "/s", 0).is_err());
    // With hours too (the guide's simulate block): 1h 3m 34s is 0.03% from 1h 3m 33s, and
    // a different minute is not a different second.
    let out = "lru  531,494  1h 3m 33s  56\nnaive  9  14ms\n";
    assert!(prints("lru 531,631 1h 3m 34s 56", out, "/s", 2).is_ok());
    assert!(prints("lru 531,631 1h 30m 33s 56", out, "/s", 2).is_err());
    assert!(prints("lru 531,631 2h 3m 33s 56", out, "/s", 2).is_err());
    assert!(
        prints("naive 9 14.1ms", out, "/s", 2).is_ok(),
        "ms stay numbers"
    );
}

/// Help examples that are not run, and why.
const HELP_SKIPPED: [(&str, &str); 7] = [
    (
        "chunkscope demo",
        "the README's first block runs the same demo",
    ),
    (
        "chunkscope testbed --out /tmp/tbz --fs zfs --memory 64MiB",
        "every strategy on ZFS over an HDD model takes about 25 minutes; testbed.rs's ZFS \
         tests run the testbed on ZFS",
    ),
    (
        "chunkscope trace device --zfs-blocks /tmp/tbz/blocks.map /tmp/tbz/lru.trace",
        "needs a ZFS testbed's block map (zdb: ~7 minutes); testbed.rs's ZFS test runs it",
    ),
    (
        "chunkscope top /mnt/cs",
        "runs until q is pressed (the others stop by themselves)",
    ),
    (
        "chunkscope s3-record --s3-endpoint http://127.0.0.1:9000 --trace s3.trace",
        "records until Ctrl-C; the example with a COMMAND runs",
    ),
    (
        "chunkscope s3-record --s3-bucket pbs --mount /mnt/cs",
        "records until Ctrl-C; the guide's section 10 runs it through a mount",
    ),
    (
        "chunkscope s3-record --trace s3.trace --fault 's3-list nth=2 status=503'",
        "records until Ctrl-C; tests/suite/s3.rs runs each kind of S3 fault under a GC",
    ),
];

/// Every help example, in the order of `chunkscope --help`, after making the files they
/// name; `chunkscope mount` examples run in the background until the `ctl` and `top`
/// examples after them are done.
#[test]
#[ignore = "long suite (CI runs it with --ignored): every help example, three demos and a simulation of thread 000's store among them (about 4 minutes)"]
fn help_examples_work_when_pasted() {
    let _demo = crate::demo::serial();
    let s = Scratch::new();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_chunkscope"))
        .parent()
        .unwrap()
        .to_path_buf();
    let limit = Duration::from_secs(600);
    // The traces the examples name, of GCs through a shadow mount of a store of their own
    // (`gen`'s example makes the /dev/shm/tiny the others use); a survey of that store, an
    // strace of a GC of it and a log in gc-syscalls.bt's format for `trace import`; an S3
    // datastore `s3` with the bucket `pbs` on the scratch's S3 server.
    let fixtures = s.localize(
        "chunkscope gen --preset tiny --out /dev/shm/fixture
         for t in naive lru inode-order; do
           mount-scripts/chunkscope-run /dev/shm/fixture $t.trace --shadow --model zfs-hdd \
             --time-scale 0 -- sh -c \"chunkscope gc --no-lock --no-atime-check --phase mark \
             --strategy $t \\$CHUNKSCOPE_MNT\"
         done
         mv inode-order.trace inode.trace
         cp lru.trace gc.trace
         cp lru.trace huge.trace
         chunkscope testbed --out /tmp/tb --disk ssd --strategy lru > /dev/null
         chunkscope survey --out tiny.survey /dev/shm/fixture > /dev/null
         chunkscope gen --quiet --preset tiny --scale 0.25 --backend s3 --s3-bucket pbs --out s3
         strace -f -tt -T -y -o gc.strace \
           -e trace=utimensat,newfstatat,statx,getdents64,unlinkat,openat \
           chunkscope gc --no-atime-check --phase mark --strategy lru /dev/shm/fixture
         z=/dev/shm/fixture/.chunks/0000/$(printf '0%.0s' $(seq 64))
         printf '# chunkscope gc-syscalls v1 pid 1 boot_ns 0 wall_s 1796000000\n' > gc.bpf.log
         printf 'E utimensat 1 1000 -1 256 %s\nX 1 10 -2\n' \"$z\" >> gc.bpf.log",
    );
    s.run("the examples' files", &fixtures, s.path(), &bin, limit);
    // The mount examples' traces go elsewhere, so they do not replace the fixtures.
    let mounts_cwd = s.path().join("mount-examples");
    std::fs::create_dir(&mounts_cwd).unwrap();
    std::fs::create_dir_all(s.path().join("mnt/cs")).unwrap();
    let mut ran = 0;
    let mut mount: Option<std::process::Child> = None;
    let end_mount = |mount: &mut Option<std::process::Child>| {
        if let Some(mut child) = mount.take() {
            let mnt = s.path().join("mnt/cs");
            let o = Command::new("umount").arg(&mnt).output().unwrap();
            assert!(o.status.success(), "umount: {o:?}");
            let status = child.wait().unwrap();
            assert!(status.success(), "the mount example exited {status}");
        }
    };
    for words in subcommands() {
        for example in help_examples(&words) {
            let line = example.trim();
            if line.starts_with("# ") {
                continue;
            }
            if let Some((_, why)) = HELP_SKIPPED.iter().find(|(e, _)| *e == line) {
                eprintln!("skipped `{line}`: {why}");
                continue;
            }
            let what = format!("`chunkscope {}` --help: {line}", words.join(" "));
            let script = s.localize(line);
            // `ctl` and `top` examples talk to the mount example before them.
            let to_mount = matches!(words[0].as_str(), "ctl" | "top");
            if !to_mount {
                end_mount(&mut mount);
            }
            if line.starts_with("chunkscope mount ") {
                // A foreground mount: in the background until it is up.
                let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
                let log = std::fs::File::create(mounts_cwd.join("mount.log")).unwrap();
                let child = Command::new("bash")
                    .args(["-c", &format!("exec {script}")])
                    .current_dir(&mounts_cwd)
                    .env("PATH", path)
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().unwrap())
                    .stderr(log)
                    .spawn()
                    .unwrap();
                mount = Some(child);
                let deadline = Instant::now() + Duration::from_secs(30);
                while s.mounts().is_empty() {
                    let log = std::fs::read_to_string(mounts_cwd.join("mount.log")).unwrap();
                    assert!(Instant::now() < deadline, "{what} did not mount: {log}");
                    if let Some(st) = mount.as_mut().unwrap().try_wait().unwrap() {
                        panic!("{what} exited {st}: {log}");
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            } else {
                let cwd = if to_mount {
                    mounts_cwd.as_path()
                } else {
                    s.path()
                };
                s.run(&what, &script, cwd, &bin, limit);
            }
            ran += 1;
        }
    }
    end_mount(&mut mount);
    assert!(ran >= 30, "only {ran} examples ran");
    assert!(s.mounts().is_empty(), "{:?}", s.mounts());
}

/// The docs' paths move into the scratch directory, the repository's stay where they are
/// (CI clones it under /tmp/, which once sent cargo to a manifest inside the scratch).
#[test]
fn localize_moves_the_docs_paths_and_keeps_the_repository() {
    let (repo, here) = ("/tmp/clone", "/dev/shm/chunkscope-docs-x");
    let t = localize(
        "cargo run --release -- demo\nmount-scripts/chunkscope-run /dev/shm/tiny /tmp/t.trace \
         -- ls /mnt/cs\nexport PATH=$PWD/target/release:$PWD/mount-scripts:$PATH",
        repo,
        here,
    );
    assert_eq!(
        t,
        format!(
            "cargo run --release --manifest-path {repo}/Cargo.toml -- demo\n\
             {repo}/mount-scripts/chunkscope-run {here}/shm/tiny {here}/tmp/t.trace -- ls \
             {here}/mnt/cs\nexport PATH={repo}/target/release:{repo}/mount-scripts:$PATH"
        )
    );
}

/// The long flags `words --help` lists among its options.
fn flags_of(words: &[String]) -> Vec<String> {
    let mut args: Vec<&str> = words.iter().map(String::as_str).collect();
    args.push("--help");
    stdout(&run(&args))
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .flat_map(|l| l.split([' ', ',', '[', '=', '<']))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_string)
        .collect()
}

/// `--flag` as written in prose: without what follows it (`--json=FILE`, `--cache,`).
fn flag_word(w: &str) -> Option<&str> {
    let w = w.trim_start_matches(['`', '(', '\'', '"']);
    let end = w
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or(w.len());
    let f = &w[..end];
    (f.starts_with("--") && f.len() > 2 && f.as_bytes()[2].is_ascii_alphabetic()).then_some(f)
}

/// Every `chunkscope SUB ... --flag` the README and the guide write, and every `SUB --flag`
/// a help text writes, names a flag SUB has (`replay --help` once sent readers to a
/// `gc --mount` that does not exist). The words after SUB are read up to the end of the
/// phrase (a line, a comma, a closing parenthesis or backtick).
#[test]
fn docs_and_help_texts_name_only_flags_their_commands_have() {
    let subs = subcommands();
    let flags: Vec<(Vec<String>, Vec<String>)> =
        subs.iter().map(|w| (w.clone(), flags_of(w))).collect();
    // The longest subcommand (`trace export` before `trace`) that the words start with.
    let command_at = |words: &[&str]| -> Option<&(Vec<String>, Vec<String>)> {
        flags
            .iter()
            .filter(|(sub, _)| {
                sub.len() <= words.len()
                    && sub
                        .iter()
                        .zip(words)
                        .all(|(a, b)| a == b.trim_end_matches('`'))
            })
            .max_by_key(|(sub, _)| sub.len())
    };
    let mut texts: Vec<(String, String, bool)> = ["README.md", "docs/guide.md"]
        .iter()
        .map(|f| {
            let t = std::fs::read_to_string(Path::new(REPO).join(f)).unwrap();
            (f.to_string(), t, true)
        })
        .collect();
    for w in &subs {
        let mut args: Vec<&str> = w.iter().map(String::as_str).collect();
        args.push("--help");
        texts.push((
            format!("{} --help", w.join(" ")),
            stdout(&run(&args)),
            false,
        ));
    }
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (name, text, needs_chunkscope) in &texts {
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            for i in 0..words.len() {
                let after_chunkscope = i > 0 && words[i - 1].ends_with("chunkscope");
                let Some((sub, known)) = command_at(&words[i..]) else {
                    continue;
                };
                let rest = &words[i + sub.len()..];
                // In help texts, a subcommand's name right before a flag is a command too.
                if !after_chunkscope
                    && (*needs_chunkscope || !rest.first().is_some_and(|w| w.starts_with("--")))
                {
                    continue;
                }
                for w in rest {
                    if let Some(f) = flag_word(w) {
                        checked += 1;
                        if !known.iter().any(|k| k == f) {
                            wrong.push(format!("{name}: `{}` has no {f}: {line}", sub.join(" ")));
                        }
                    }
                    if w.ends_with([',', ')', '`', ';', ':']) || w.ends_with('.') {
                        break;
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked > 100, "only {checked} flags checked");
}

/// The demo's time is quoted alike by the README, `chunkscope --help` and `demo --help`, and
/// is what BENCHMARKS.md last measured ("The dense part beside the mounts": `small` and
/// `tiny`, within 10%).
#[test]
fn the_demo_s_time_is_quoted_as_last_measured() {
    let seconds_after = |text: &str, before: &str| -> f64 {
        text.split(before)
            .nth(1)
            .and_then(|r| r.split(" s").next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no '{before}N s' in: {text}"))
    };
    let readme = std::fs::read_to_string(Path::new(REPO).join("README.md")).unwrap();
    let small = seconds_after(&readme, "Run the demo (as root, for FUSE; about ");
    let top = stdout(&run(&["--help"]));
    assert_eq!(
        seconds_after(&top, "the whole experiment on a generated store (about "),
        small
    );
    let demo = stdout(&run(&["demo", "--help"]));
    assert_eq!(seconds_after(&demo, "k chunks, about "), small);
    let tiny = seconds_after(&demo, "tiny (about ");
    let bench = std::fs::read_to_string(Path::new(REPO).join("BENCHMARKS.md")).unwrap();
    let measured = |row: &str| -> f64 {
        let line = bench
            .lines()
            .rfind(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("BENCHMARKS.md has no row {row}"));
        let last = line
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .unwrap()
            .trim();
        last.trim_end_matches(" s")
            .parse()
            .unwrap_or_else(|_| panic!("BENCHMARKS.md's {row}: '{last}' is no time"))
    };
    for (quoted, row) in [(small, "| `small` (the default) |"), (tiny, "| `tiny` |")] {
        let m = measured(row);
        assert!(
            (quoted - m).abs() <= 0.1 * m,
            "quoted {quoted} s, BENCHMARKS.md's {row} measured {m} s"
        );
    }
}
