//! Lines of `strace -f -tt -T -y` (or `-ttt`) as [`Syscall`]s.
//!
//! A line is `PID TIME NAME(ARGS) = RESULT <DURATION>`; with `-f` a call another thread
//! interrupts is split in two lines, `NAME(ARGS <unfinished ...>` and, later, `<... NAME
//! resumed>REST) = RESULT <DURATION>`, joined here by the thread's id. `-y` decorates each
//! descriptor with its path (`5</store/.chunks/0000>`, `AT_FDCWD</root>`); without it a
//! call on a descriptor has no path and is not imported. Signals (`--- SIG...`), exits
//! (`+++ exited`) and calls of other names are skipped.

use hashbrown::HashMap;

use super::{Kind, Syscall};

/// A call's line read so far (its first half, while it is unfinished).
#[derive(Default)]
pub struct Parser {
    unfinished: HashMap<u32, String>,
}

/// The time of a line: `HH:MM:SS.micro` (`-tt`, seconds since midnight) or `SECS.micro`
/// (`-ttt`, since the epoch), in ns; the bool says whether it is since the epoch.
fn parse_time(t: &str) -> Option<(u64, bool)> {
    let (whole, frac) = t.split_once('.')?;
    let frac_ns = {
        let digits = frac.len().min(9);
        let v: u64 = frac[..digits].parse().ok()?;
        v * 10u64.pow(9 - digits as u32)
    };
    if whole.contains(':') {
        let mut parts = whole.split(':');
        let h: u64 = parts.next()?.parse().ok()?;
        let m: u64 = parts.next()?.parse().ok()?;
        let s: u64 = parts.next()?.parse().ok()?;
        Some((((h * 60 + m) * 60 + s) * 1_000_000_000 + frac_ns, false))
    } else {
        Some((whole.parse::<u64>().ok()? * 1_000_000_000 + frac_ns, true))
    }
}

/// The descriptor argument's path: `5</a/b>` or `AT_FDCWD</cwd>` -> `/a/b`; `-1` or a bare
/// number (no `-y`) -> None.
fn fd_path(arg: &str) -> Option<&str> {
    let start = arg.find("</")? + 1;
    arg[start..].strip_suffix('>')
}

/// The string argument `"..."` with strace's escapes undone (`\"`, `\\`, `\n`, octal, hex).
fn unquote(arg: &str) -> Option<String> {
    let inner = arg.strip_prefix('"')?;
    let inner = inner
        .strip_suffix("\"...")
        .or_else(|| inner.strip_suffix('"'))?;
    if !inner.contains('\\') {
        return Some(inner.to_string());
    }
    let b = inner.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' || i + 1 >= b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b[i + 1] {
            b'x' if i + 3 < b.len() => {
                let v = u8::from_str_radix(std::str::from_utf8(&b[i + 2..i + 4]).ok()?, 16).ok()?;
                out.push(v);
                i += 4;
            }
            d @ b'0'..=b'7' => {
                let mut v = (d - b'0') as u32;
                let mut j = i + 2;
                while j < b.len() && j < i + 4 && (b'0'..=b'7').contains(&b[j]) {
                    v = v * 8 + (b[j] - b'0') as u32;
                    j += 1;
                }
                out.push(v as u8);
                i = j;
            }
            c => {
                out.push(match c {
                    b'n' => b'\n',
                    b't' => b'\t',
                    b'r' => b'\r',
                    other => other,
                });
                i += 2;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Splits the top-level arguments of `ARGS` (commas inside `{}`, `[]`, `""` and `<>` kept).
fn split_args(args: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut quoted, mut escaped, mut start) = (0i32, false, false, 0);
    for (i, c) in args.char_indices() {
        if quoted {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => quoted = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            '{' | '[' | '<' | '(' => depth += 1,
            '}' | ']' | '>' | ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(args[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = args[start..].trim();
    if !last.is_empty() {
        out.push(last);
    }
    out
}

impl Parser {
    /// The call a line completes, if it is one of [`Kind`]'s; `None` for anything else (and
    /// for an unfinished call's first half, kept until its thread resumes it).
    pub fn line(&mut self, line: &str) -> Option<Syscall> {
        let line = line.trim_end();
        let (tid, rest) = line.split_once(' ')?;
        let tid: u32 = tid.parse().ok()?;
        let (time, call) = rest.trim_start().split_once(' ')?;
        let (time_ns, epoch) = parse_time(time)?;
        let text: String = if let Some(first) = call.strip_suffix(" <unfinished ...>") {
            self.unfinished.insert(tid, first.to_string());
            return None;
        } else if let Some(resumed) = call.strip_prefix("<... ") {
            let (_, tail) = resumed.split_once(" resumed>")?;
            let first = self.unfinished.remove(&tid)?;
            format!("{first}{tail}")
        } else {
            call.to_string()
        };
        let open = text.find('(')?;
        let kind = Kind::from_name(&text[..open])?;
        // `NAME(ARGS) = RESULT <DURATION>`: the last ") = " ends the arguments.
        let close = text.rfind(") = ")?;
        let args = split_args(&text[open + 1..close]);
        let result = &text[close + 4..];
        let (result, duration_ns) = match result.rsplit_once(" <") {
            Some((r, d)) => (r, parse_time(d.trim_end_matches('>')).map_or(0, |t| t.0)),
            None => (result, 0),
        };
        let value = result.split(' ').next()?;
        let (ret, errno) = if value == "-1" {
            let name = result.split(' ').nth(1).unwrap_or("");
            (-1, crate::units::errno_number(name).unwrap_or(libc::EIO))
        } else {
            (value.split('<').next()?.parse::<i64>().ok()?, 0)
        };
        let mut s = Syscall {
            tid,
            time_ns,
            epoch,
            duration_ns,
            kind,
            ret,
            errno,
            ..Syscall::default()
        };
        match kind {
            Kind::Utimensat | Kind::Fstatat | Kind::Statx | Kind::Unlinkat | Kind::Openat => {
                s.dir = args.first().and_then(|a| fd_path(a)).map(str::to_string);
                s.path = args.get(1).and_then(|a| unquote(a));
                if kind == Kind::Openat {
                    s.result_path = fd_path(value).map(str::to_string);
                    s.create = args.get(2).is_some_and(|f| f.contains("O_CREAT"));
                    s.directory = args.get(2).is_some_and(|f| f.contains("O_DIRECTORY"));
                }
                if kind == Kind::Fstatat || kind == Kind::Statx {
                    s.empty_path = args.iter().any(|a| a.contains("AT_EMPTY_PATH"))
                        && s.path.as_deref() == Some("");
                }
            }
            Kind::Getdents => {
                s.dir = args.first().and_then(|a| fd_path(a)).map(str::to_string);
                s.entries = args.get(1).and_then(|a| {
                    let n = a.split("/* ").nth(1)?.split(' ').next()?;
                    n.parse().ok()
                });
            }
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of a real `strace -f -tt -T -y` of `chunkscope gc` (and an interrupted
    /// call of two threads), each call with its descriptor's path, name, result and time.
    #[test]
    fn strace_lines_become_calls() {
        let mut p = Parser::default();
        let touch = p.line("27111 06:13:22.019706 utimensat(-1, \"/s/.chunks/d125/d125aa\", [UTIME_NOW, UTIME_OMIT], AT_SYMLINK_NOFOLLOW) = 0 <0.000009>").unwrap();
        assert_eq!(touch.kind, Kind::Utimensat);
        assert_eq!(touch.path.as_deref(), Some("/s/.chunks/d125/d125aa"));
        assert_eq!((touch.ret, touch.errno, touch.duration_ns), (0, 0, 9_000));
        assert_eq!(
            touch.time_ns,
            (6 * 3600 + 13 * 60 + 22) * 1_000_000_000 + 19_706_000
        );
        let missing = p.line("27111 06:13:21.016234 newfstatat(AT_FDCWD</tmp>, \"/s/.chunks/bb9f/bb9f\", 0x7ffca7484880, 0) = -1 ENOENT (No such file or directory) <0.000063>").unwrap();
        assert_eq!(
            (missing.kind, missing.ret, missing.errno),
            (Kind::Fstatat, -1, libc::ENOENT)
        );
        assert_eq!(missing.dir.as_deref(), Some("/tmp"));
        let list = p.line("27111 06:13:22.146868 getdents64(5</s/.chunks/0000>, 0x561be790a110 /* 2 entries */, 32768) = 48 <0.000006>").unwrap();
        assert_eq!(
            (list.dir.as_deref(), list.entries),
            (Some("/s/.chunks/0000"), Some(2))
        );
        let open = p.line("27111 06:13:22.146514 openat(3</s/.chunks>, \"0000\", O_RDONLY|O_NOFOLLOW|O_CLOEXEC|O_DIRECTORY) = 5</s/.chunks/0000> <0.000005>").unwrap();
        assert_eq!(open.result_path.as_deref(), Some("/s/.chunks/0000"));
        assert_eq!(open.ret, 5);
        let stat = p.line("27111 06:13:22.147444 newfstatat(5</s/.chunks/0006>, \"0006df\", {st_mode=S_IFREG|0644, st_size=1848, ...}, AT_SYMLINK_NOFOLLOW) = 0 <0.000005>").unwrap();
        assert_eq!(
            (stat.dir.as_deref(), stat.path.as_deref()),
            (Some("/s/.chunks/0006"), Some("0006df"))
        );
        assert!(!stat.empty_path);
        let fstat = p.line("27111 06:13:22.146536 newfstatat(5</s/.chunks/0000>, \"\", {st_mode=S_IFDIR|0750, st_size=40, ...}, AT_EMPTY_PATH) = 0 <0.000004>").unwrap();
        assert!(fstat.empty_path);
        // Two threads: the first call's halves joined by its thread id.
        assert!(p
            .line("100 10:00:00.000001 unlinkat(7</s/.chunks/00b5>, \"00b5cc\", 0 <unfinished ...>")
            .is_none());
        let other = p
            .line("101 10:00:00.000002 utimensat(-1, \"/s/x\", NULL, 0) = 0 <0.000001>")
            .unwrap();
        assert_eq!(other.tid, 101);
        let joined = p
            .line("100 10:00:00.000009 <... unlinkat resumed>) = 0 <0.000008>")
            .unwrap();
        assert_eq!(
            (joined.kind, joined.tid, joined.path.as_deref()),
            (Kind::Unlinkat, 100, Some("00b5cc"))
        );
        assert_eq!(joined.dir.as_deref(), Some("/s/.chunks/00b5"));
        for skipped in [
            "27111 06:13:22.160000 +++ exited with 0 +++",
            "27111 06:13:22.160000 --- SIGINT {si_signo=SIGINT} ---",
            "27111 06:13:22.160000 read(3, \"x\", 1) = 1 <0.000001>",
            "not strace at all",
            "",
        ] {
            assert!(p.line(skipped).is_none(), "{skipped}");
        }
        // strace pads the thread id to the widest one seen.
        let padded = p
            .line("7106  06:36:31.159179 utimensat(-1, \"/s/y\", NULL, 0) = 0 <0.000005>")
            .unwrap();
        assert_eq!((padded.tid, padded.path.as_deref()), (7106, Some("/s/y")));
        let epoch = p.line("5 1733300000.5 unlinkat(7</s/.chunks/00b5>, \"a\\\"b\\\\c\\x41\\101\", 0) = 0 <0.000008>").unwrap();
        assert!(epoch.epoch);
        assert_eq!(epoch.time_ns, 1_733_300_000_500_000_000);
        assert_eq!(epoch.path.as_deref(), Some("a\"b\\cAA"));
    }
}
