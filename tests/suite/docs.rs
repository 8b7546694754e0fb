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
    /// `<!-- docs-test: output -->`: what a command printed.
    Output,
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
            Some("output") => Mark::Output,
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
            Mark::Output => assert!(
                !is_command(first),
                "{}:{}: an output block that looks like a command",
                b.file,
                b.line
            ),
        }
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

/// A scratch directory on tmpfs standing in for `/dev/shm`, `/tmp` and `/mnt/cs`; whatever
/// is mounted inside it is unmounted when it is dropped.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("chunkscope-docs-")
            .tempdir_in("/dev/shm")
            .unwrap();
        for d in ["shm", "tmp", "mnt"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        Scratch { dir }
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
    for b in doc_blocks() {
        if b.mark != Mark::Run {
            continue;
        }
        let started = Instant::now();
        let what = format!("{}:{}", b.file, b.line);
        s.run(
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
}

/// Help examples that are not run, and why.
const HELP_SKIPPED: [(&str, &str); 2] = [
    (
        "chunkscope demo",
        "the README's first block runs the same demo",
    ),
    (
        "chunkscope top /mnt/cs",
        "runs until q is pressed (the others stop by themselves)",
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
    // strace of a GC of it and a log in gc-syscalls.bt's format for `trace import`.
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
