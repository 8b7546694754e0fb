//! Lines of `mount-scripts/gc-syscalls.bt` (its format is in the script's header comment) as
//! [`Syscall`]s: each call's entry line (`E`) joined with its return line (`X`) by thread,
//! descriptors followed through `openat`'s results to the directories they name.

use hashbrown::HashMap;

use super::{Kind, Syscall};

/// `openat` flags and `AT_` flags the importer reads.
const O_DIRECTORY: i64 = libc::O_DIRECTORY as i64;
const O_CREAT: i64 = libc::O_CREAT as i64;
const AT_EMPTY_PATH: i64 = libc::AT_EMPTY_PATH as i64;
const AT_FDCWD: i64 = libc::AT_FDCWD as i64;

/// A call entered, waiting for its return.
struct Entered {
    kind: Kind,
    start_ns: u64,
    dfd: i64,
    flags: i64,
    path: String,
}

/// The parser's state: calls entered, open descriptors, the clock's offset.
#[derive(Default)]
pub struct Parser {
    entered: HashMap<u32, Entered>,
    /// Descriptor -> the path it was opened at (the traced process's).
    fds: HashMap<i64, String>,
    /// Wall clock minus monotonic clock, ns (from the header).
    offset: Option<i64>,
}

/// The count of a `Lost N events` line: bpftrace drops events when its ring buffer
/// (`BPFTRACE_PERF_RB_PAGES` pages a CPU) is full and says so in its output.
pub fn lost_events(line: &str) -> Option<u64> {
    line.trim_end()
        .strip_prefix("Lost ")?
        .strip_suffix(" events")?
        .parse()
        .ok()
}

impl Parser {
    /// The path `path` names relative to the descriptor `dfd`.
    fn resolve(&self, dfd: i64, path: &str) -> Option<String> {
        if path.starts_with('/') {
            return Some(path.to_string());
        }
        let dir = self.fds.get(&dfd)?;
        Some(if path.is_empty() {
            dir.clone()
        } else {
            format!("{}/{path}", dir.trim_end_matches('/'))
        })
    }

    /// The call a return line completes; `None` for an entry line, the header, and anything
    /// else.
    pub fn line(&mut self, line: &str) -> Option<Syscall> {
        let mut f = line.trim_end_matches('\n').splitn(7, ' ');
        match f.next()? {
            "#" => {
                // # chunkscope gc-syscalls v1 pid PID boot_ns NS wall_s SECONDS
                let words: Vec<&str> = line.split_whitespace().collect();
                let at = |k: &str| {
                    let i = words.iter().position(|w| *w == k)?;
                    words.get(i + 1)?.parse::<i64>().ok()
                };
                if let (Some(boot), Some(wall)) = (at("boot_ns"), at("wall_s")) {
                    self.offset = Some(wall * 1_000_000_000 - boot);
                }
                None
            }
            "E" => {
                let kind = Kind::from_name(f.next()?)?;
                let tid: u32 = f.next()?.parse().ok()?;
                let start_ns: u64 = f.next()?.parse().ok()?;
                let dfd: i64 = f.next()?.parse().ok()?;
                let flags: i64 = f.next()?.parse().ok()?;
                let path = f.next().unwrap_or("").to_string();
                self.entered.insert(
                    tid,
                    Entered {
                        kind,
                        start_ns,
                        dfd,
                        flags,
                        path,
                    },
                );
                None
            }
            "X" => {
                let tid: u32 = f.next()?.parse().ok()?;
                let duration_ns: u64 = f.next()?.parse().ok()?;
                let ret: i64 = f.next()?.parse().ok()?;
                let e = self.entered.remove(&tid)?;
                let (ret, errno) = if ret < 0 { (-1, -ret as i32) } else { (ret, 0) };
                let dir = (e.dfd != AT_FDCWD)
                    .then(|| self.fds.get(&e.dfd).cloned())
                    .flatten();
                let mut s = Syscall {
                    tid,
                    time_ns: match self.offset {
                        Some(o) => (e.start_ns as i64 + o) as u64,
                        None => e.start_ns,
                    },
                    epoch: self.offset.is_some(),
                    duration_ns,
                    kind: e.kind,
                    ret,
                    errno,
                    ..Syscall::default()
                };
                match e.kind {
                    Kind::Getdents => s.dir = dir,
                    Kind::Openat => {
                        let target = self.resolve(e.dfd, &e.path);
                        if ret >= 0 {
                            match &target {
                                Some(t) => self.fds.insert(ret, t.clone()),
                                None => self.fds.remove(&ret),
                            };
                        }
                        s.create = e.flags & O_CREAT != 0;
                        s.directory = e.flags & O_DIRECTORY != 0;
                        s.result_path = if ret >= 0 { target.clone() } else { None };
                        s.path = target;
                    }
                    _ => {
                        s.empty_path = e.path.is_empty() && e.flags & AT_EMPTY_PATH != 0;
                        s.dir = dir;
                        s.path = if s.empty_path {
                            None
                        } else {
                            self.resolve(e.dfd, &e.path)
                        };
                    }
                }
                Some(s)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real log's lines (bpftrace 0.17 on this machine): the header sets the clock, an
    /// entry and its return make a call, descriptors name their directories.
    #[test]
    fn script_lines_become_calls() {
        let mut p = Parser::default();
        assert!(p.line("Attaching 14 probes...").is_none());
        assert!(p
            .line("# chunkscope gc-syscalls v1 pid 28625 boot_ns 1000000000 wall_s 1796365094")
            .is_none());
        assert!(p
            .line("E openat 28625 2000000000 -100 65536 /s/.chunks")
            .is_none());
        let open = p.line("X 28625 5000 3").unwrap();
        assert_eq!(
            (open.kind, open.ret, open.directory),
            (Kind::Openat, 3, true)
        );
        assert_eq!(open.time_ns, 1_796_365_095_000_000_000);
        assert!(open.epoch);
        assert!(p.line("E openat 28626 2000000100 3 65536 0000").is_none());
        // Another thread's call between an entry and its return.
        assert!(p
            .line("E utimensat 28625 2000000200 -1 256 /s/.chunks/d125/d125aa")
            .is_none());
        let touch = p.line("X 28625 900 -2").unwrap();
        assert_eq!(
            (touch.kind, touch.errno, touch.path.as_deref()),
            (
                Kind::Utimensat,
                libc::ENOENT,
                Some("/s/.chunks/d125/d125aa")
            )
        );
        let dir = p.line("X 28626 700 5").unwrap();
        assert_eq!(dir.result_path.as_deref(), Some("/s/.chunks/0000"));
        assert!(p.line("E getdents64 28626 2000000300 5 0 ").is_none());
        let list = p.line("X 28626 600 48").unwrap();
        assert_eq!(
            (list.kind, list.dir.as_deref()),
            (Kind::Getdents, Some("/s/.chunks/0000"))
        );
        assert!(p
            .line("E newfstatat 28626 2000000400 5 256 0000ab")
            .is_none());
        let stat = p.line("X 28626 100 0").unwrap();
        assert_eq!(stat.path.as_deref(), Some("/s/.chunks/0000/0000ab"));
        assert!(p.line("E newfstatat 28626 2000000500 5 4096 ").is_none());
        assert!(p.line("X 28626 100 0").unwrap().empty_path);
        assert!(p.line("X 1 1 1").is_none(), "a return without its entry");
        assert!(p.line("# exit pid 28625").is_none());
        assert_eq!(p.offset, Some(1_796_365_094_000_000_000 - 1_000_000_000));
        assert_eq!(lost_events("Lost 4 events"), Some(4));
        assert_eq!(lost_events("Lost 4 events\n"), Some(4));
        assert_eq!(lost_events("Lost events"), None);
        assert_eq!(lost_events("E utimensat 1 2 3 4 /s/Lost 4 events"), None);
    }
}
