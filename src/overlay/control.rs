//! The mount's control channel: a Unix socket outside the store's namespace.
//!
//! Its default path is derived from the mountpoint's path ([`socket_for`]), so a client that
//! knows only the mountpoint finds it, and it exists before the mount does. One request per line, one reply per line; a reply is sent only
//! after the request took effect (a marker is in the trace queue, ahead of anything the client
//! does next):
//!
//! | request | reply |
//! |---|---|
//! | `mark TEXT` | `ok seq=N`: a `marker` record named TEXT (cut at 255 bytes) was recorded; `ok untraced` if the mount has no trace |
//! | `stats` | `ok {json}`: known inodes, trace records sent/stalls/lost, shadowed unlinks, the model's totals, held replies, fault rule counters |
//! | `drop-caches` | `ok`: the model's block cache is empty (a cold pool) from the next request on |
//! | `rules` | `ok [json]`: each fault rule with the requests it matched and the times it fired |
//! | `release` | `ok N`: every reply held now (an injected delay or stall, a modelled cost) is sent at once; N of them; `error ...` when nothing can hold a reply |
//! | `release all` | `ok N`: as `release`, and every reply held from now on is sent at once too (the mount delays nothing any more: what a stop needs) |
//! | `s3 OP STATUS ARG BYTES DURATION_NS INJECTED_NS INJECTED PID NAME_HEX` (INJECTED 0 or 1: a fault rule answered or cut it; PID the client's, 0 unknown: then the recorder's is recorded; NAME `-`: none) | `ok seq=N`: a request to an S3 bucket that `chunkscope s3-record` relayed, ending now, was recorded (see `trace::format`); `ok untraced` without a trace |
//! | `layout` | `ok [json]`: the backing store's chunk directories that are not its own (symbolic links, other filesystems' mounts), checked on the backing store, so nothing of it reaches the trace; `error ...` when `.chunks` cannot be listed |
//! | anything else | `error ...` |

use std::io::{BufRead, BufReader, Write};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};

use super::inode::InodeTable;
use super::shadow::Shadow;

/// The mountpoint of the chunkscope mount holding `path`, if any.
pub fn mount_of(path: &Path) -> Option<PathBuf> {
    crate::fsutil::mounts()
        .ok()?
        .into_iter()
        // `chunkscope mount` sets the source to "chunkscope:<store>".
        .filter(|m| m.fstype.starts_with("fuse") && m.source.starts_with("chunkscope:"))
        .map(|m| m.point)
        .filter(|m| path.starts_with(m))
        .max_by_key(|m| m.as_os_str().len())
}

/// The control socket of a mount on `mountpoint` (an absolute, canonical path):
/// `/run/chunkscope/mnt-<first 16 hex of SHA-256 of the path>.sock`. Derived from the path,
/// so the mounting process can bind it *before* mounting (a client that sees the mount finds
/// the socket) and a client that knows only the mountpoint finds it.
pub fn socket_for(mountpoint: &Path) -> PathBuf {
    use sha2::Digest as _;
    let h = sha2::Sha256::digest(mountpoint.as_os_str().as_encoded_bytes());
    PathBuf::from(format!(
        "/run/chunkscope/mnt-{}.sock",
        &hex::encode(h)[..16]
    ))
}

/// The default control socket of the mount at `mnt`.
pub fn default_socket(mnt: &Path) -> Result<PathBuf> {
    let mnt = mnt
        .canonicalize()
        .with_context(|| format!("{}", mnt.display()))?;
    Ok(socket_for(&mnt))
}

/// The pid of the process serving the control socket at `socket`, if one does (the
/// credentials the kernel recorded when it started listening).
pub fn daemon_pid(socket: &Path) -> Option<u32> {
    UnixStream::connect(socket)
        .ok()
        .map(|s| peer_pid(&s))
        .filter(|&p| p != 0)
}

/// A [`crate::store::dir::DirStore`]'s layout check by the daemon of the mount whose control
/// socket is `socket` (a connection per check: a GC makes two).
pub fn layout_check(socket: PathBuf) -> crate::store::dir::LayoutCheck {
    Box::new(move || {
        Client::connect(&socket)?
            .layout()
            .context("asking the mount to check its backing store's chunk directories")
    })
}

/// What the control thread can see of the running overlay.
pub struct Shared {
    /// The backing store (for `layout`).
    pub store: PathBuf,
    /// The inode table (its size for `stats`).
    pub inodes: Arc<InodeTable>,
    /// Shadow mode's state (its unlinks for `stats`).
    pub shadow: Option<Arc<Shadow>>,
    /// Taken (set to None) when the session ends, so the trace writer can finish.
    pub trace: Mutex<Option<crate::instrument::Trace>>,
    /// Fault rules and the model (markers, stats, drop-caches, rules).
    pub inst: Arc<super::Instruments>,
    /// The thread that holds delayed replies (when anything can delay one).
    pub timer: Option<Arc<super::timer::Timer>>,
}

fn peer_pid(s: &UnixStream) -> u32 {
    // SAFETY: a plain C struct; all zeroes is a valid value of it.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: valid socket and out buffer of the right size.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if rc == 0 {
        cred.pid as u32
    } else {
        0
    }
}

fn answer(shared: &Shared, line: &str, pid: u32) -> String {
    let (cmd, rest) = line.split_once(' ').unwrap_or((line, ""));
    tracing::debug!("control request '{cmd}' from pid {pid}");
    match cmd {
        "mark" => {
            if let Some(l) = shared.inst.live() {
                l.marker(rest);
            }
            let trace = shared.trace.lock().unwrap_or_else(|p| p.into_inner());
            let marked = match trace.as_ref() {
                Some(t) => Marked::Recorded {
                    seq: shared.inst.marker(t, pid, rest.as_bytes()),
                },
                None => Marked::Untraced,
            };
            format!("ok {}", marked.reply())
        }
        #[cfg(feature = "s3")]
        "s3" => match parse_s3(rest) {
            Ok(r) => {
                let trace = shared.trace.lock().unwrap_or_else(|p| p.into_inner());
                // The client's pid when the recorder found it, else the recorder's own.
                let pid = if r.pid != 0 { r.pid } else { pid };
                match trace.as_ref() {
                    Some(t) => format!("ok seq={}", shared.inst.external(t, pid, r)),
                    None => "ok untraced".into(),
                }
            }
            Err(e) => format!("error {e}"),
        },
        "stats" => {
            let v = Stats::of(shared);
            format!("ok {}", serde_json::to_string(&v).unwrap_or_default())
        }
        "drop-caches" => match shared.inst.model() {
            Some(mut m) => {
                m.drop_caches();
                "ok".into()
            }
            None => "error the mount has no model (start it with --model)".into(),
        },
        "rules" => {
            let rules = shared
                .inst
                .faults
                .as_ref()
                .map(|f| f.stats())
                .unwrap_or_default();
            format!("ok {}", serde_json::to_string(&rules).unwrap_or_default())
        }
        "release" if matches!(rest.trim(), "" | "all") => match &shared.timer {
            Some(t) => {
                let held = t.counts().held;
                if rest.trim() == "all" {
                    t.release_from_now();
                } else {
                    t.release();
                }
                format!("ok {held}")
            }
            None => "error the mount holds no replies (no delay, stall, model time or disk)".into(),
        },
        "layout" => match crate::store::layout::odd_chunk_dirs(&shared.store) {
            Ok(odd) => format!("ok {}", serde_json::to_string(&odd).unwrap_or_default()),
            Err(e) => format!("error {e}"),
        },
        "" => "error empty request".into(),
        other => {
            format!("error unknown request '{other}' (try: mark TEXT, stats, drop-caches, rules, release, layout, s3 ...)")
        }
    }
}

#[cfg(feature = "s3")]
/// The record of an `s3 OP STATUS ARG BYTES DURATION_NS INJECTED_NS INJECTED PID NAME_HEX` request
/// (see [`s3_request`]).
fn parse_s3(rest: &str) -> Result<crate::trace::format::RawRecord> {
    let f: Vec<&str> = rest.split(' ').collect();
    let [op, status, arg, bytes, duration, injected_ns, injected, pid, name] = f[..] else {
        bail!("s3 wants OP STATUS ARG BYTES DURATION_NS INJECTED_NS INJECTED PID NAME_HEX, not '{rest}'");
    };
    let op = crate::trace::Op::ALL
        .iter()
        .copied()
        .find(|o| o.is_s3() && o.name() == op)
        .with_context(|| format!("s3: no S3 operation '{op}'"))?;
    let number = |what: &str, v: &str| -> Result<u64> {
        v.parse()
            .with_context(|| format!("s3: {what} '{v}' is not a number"))
    };
    let r = crate::s3::recorder::S3Request {
        op,
        name: match name {
            "-" => Vec::new(),
            _ => hex::decode(name).with_context(|| format!("s3: name '{name}' is not hex"))?,
        },
        status: number("status", status)?
            .try_into()
            .with_context(|| format!("s3: status {status}"))?,
        arg: number("arg", arg)?,
        bytes: number("bytes", bytes)?,
        duration_ns: number("duration", duration)?,
        injected_ns: number("injected delay", injected_ns)?,
        injected: number("injected", injected)? != 0,
        pid: number("pid", pid)?
            .try_into()
            .with_context(|| format!("s3: pid {pid}"))?,
    };
    Ok(r.raw_record())
}

#[cfg(feature = "s3")]
/// The `s3` request that records `r` (see the module's table).
pub fn s3_request(r: &crate::s3::recorder::S3Request) -> String {
    format!(
        "s3 {} {} {} {} {} {} {} {} {}",
        r.op.name(),
        r.status,
        r.arg,
        r.bytes,
        r.duration_ns,
        r.injected_ns,
        r.injected as u8,
        r.pid,
        match r.name.is_empty() {
            true => "-".to_string(),
            false => hex::encode(&r.name),
        }
    )
}

/// Answers one client's lines. Uses the one descriptor the connection has (no clone), so
/// that a daemon short of descriptors can still answer.
fn serve_client(shared: &Shared, conn: UnixStream) {
    let pid = peer_pid(&conn);
    let mut out = &conn;
    for line in BufReader::new(&conn).lines() {
        let Ok(line) = line else { break };
        if writeln!(out, "{}", answer(shared, line.trim_end(), pid)).is_err() {
            break;
        }
    }
}

/// Two descriptors held in reserve: when `accept` fails for want of descriptors (clients
/// holding tens of thousands of files open through the mount), they are given up so that
/// the control client can still be accepted and answered.
struct Reserve(Vec<std::fs::File>);

impl Reserve {
    fn fill(&mut self) {
        while self.0.len() < 2 {
            match std::fs::File::open("/dev/null") {
                Ok(f) => self.0.push(f),
                Err(_) => return,
            }
        }
    }
}

/// Removes the socket at `path` if it is still the one bound with inode `ino` (a later mount
/// on the same mountpoint may have replaced it).
pub fn remove_if_ours(path: &Path, ino: u64) {
    use std::os::unix::fs::MetadataExt;
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.ino() == ino) {
        let _ = std::fs::remove_file(path);
    }
}

/// Binds the socket and serves it on a thread until the process ends; returns the socket's
/// inode number (for [`remove_if_ours`]).
pub fn serve(path: &Path, shared: Arc<Shared>) -> Result<u64> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            bail!(
                "control socket {} is in use by another mount",
                path.display()
            );
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    let ino = {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(path)?.ino()
    };
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            let mut reserve = Reserve(Vec::new());
            reserve.fill();
            loop {
                let conn = match listener.accept() {
                    Ok((conn, _)) => conn,
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                        reserve.0.clear();
                        match listener.accept() {
                            Ok((conn, _)) => conn,
                            Err(_) => {
                                std::thread::sleep(std::time::Duration::from_millis(10));
                                reserve.fill();
                                continue;
                            }
                        }
                    }
                    Err(_) => {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                        continue;
                    }
                };
                // One thread per client: a client that keeps its connection open (a GC run)
                // must not keep another (`chunkscope ctl`) waiting.
                let shared = shared.clone();
                let _ = std::thread::Builder::new()
                    .name("control-client".into())
                    .spawn(move || serve_client(&shared, conn));
                reserve.fill();
            }
        })?;
    Ok(ino)
}

/// A client of a mount's control channel.
pub struct Client {
    out: UnixStream,
    input: BufReader<UnixStream>,
}

/// The answer to `stats`: a mount's counters, as the daemon sends them and clients read them.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    /// Inodes the kernel holds lookups on (the overlay's inode table).
    pub inodes: u64,
    /// Trace records sent.
    pub records: u64,
    /// Times a sender waited for room in the writer's channel.
    pub stalls: u64,
    /// Records lost (the writer was gone).
    pub lost: u64,
    /// Unlinks kept in memory (shadow mode only).
    pub shadow_unlinks: Option<u64>,
    /// The cost model's state (with `--model` only).
    pub model: Option<ModelStats>,
    /// Replies the timer thread holds now (when replies can be delayed).
    pub held_replies: Option<u64>,
    /// Held replies answered EINTR early because their caller was interrupted (a `kill`,
    /// a `timeout`, a Ctrl-C).
    #[serde(default)]
    pub interrupted_replies: Option<u64>,
    /// Requests the store answered EMFILE/ENFILE.
    pub fd_exhausted: u64,
    /// Requests whose handler panicked (each answered EIO; the mount went on).
    #[serde(default)]
    pub panics: u64,
    /// The daemon's open-file limit.
    pub nofile_limit: u64,
    /// Each fault rule with its counters (with `--fault` only).
    pub faults: Option<Vec<crate::faults::RuleStats>>,
    /// Nanoseconds since the mount started (the clock of `gc.phase_start_ns`).
    #[serde(default)]
    pub uptime_ns: u64,
    /// Requests, errors and latency histograms per operation.
    #[serde(default)]
    pub ops: Vec<crate::live::OpSnapshot>,
    /// What the GC on the mount is doing: marked phases, or inferred ones (traced mounts).
    #[serde(default)]
    pub gc: crate::trace::phases::GcView,
    /// Index files in the store when it was mounted (once counted; a datastore only).
    #[serde(default)]
    pub index_files: Option<u64>,
}

/// Transaction groups of dirty-block history a live snapshot carries (10 minutes at 5 s a
/// group): copied under the model's lock, so bounded.
pub const LIVE_TXG_GROUPS: usize = 120;

/// The cost model's part of [`Stats`].
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelStats {
    /// The model's name.
    pub name: String,
    /// Its clock, ns of modelled time.
    pub clock_ns: u64,
    /// What it charged so far; of its dirty blocks per transaction group, the last
    /// [`LIVE_TXG_GROUPS`] (the unmount's `--stats` has them all).
    pub totals: crate::model::Totals,
    /// Blocks dirtied in the open transaction group.
    pub dirty_blocks: u64,
    /// The dirty limit, blocks (the throttle starts at a share of it).
    #[serde(default)]
    pub dirty_limit_blocks: u64,
}

impl Stats {
    /// The counters of the mount `shared` belongs to, now.
    pub fn of(shared: &Shared) -> Stats {
        let (records, stalls, lost) = shared
            .trace
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map_or((0, 0, 0), |t| t.sink.counts());
        let inst = &shared.inst;
        Stats {
            inodes: shared.inodes.len() as u64,
            records,
            stalls,
            lost,
            shadow_unlinks: shared.shadow.as_ref().map(|s| s.removed_count() as u64),
            model: inst.model().map(|m| ModelStats {
                name: m.params().name.clone(),
                clock_ns: m.clock_ns(),
                totals: m.totals().recent(LIVE_TXG_GROUPS),
                dirty_blocks: m.dirty_blocks(),
                dirty_limit_blocks: m.params().dirty_limit_blocks,
            }),
            held_replies: shared.timer.as_ref().map(|t| t.counts().held),
            interrupted_replies: shared.timer.as_ref().map(|t| t.counts().interrupted),
            fd_exhausted: inst.fd_exhausted(),
            panics: inst.panics(),
            nofile_limit: crate::fsutil::nofile_limit(),
            faults: inst.faults.as_ref().map(|f| f.stats()),
            uptime_ns: inst.live().map_or(0, |l| l.now_ns()),
            ops: inst.live().map(|l| l.snapshot()).unwrap_or_default(),
            gc: inst.live().map(|l| l.gc()).unwrap_or_default(),
            index_files: inst.live().and_then(|l| l.index_files()),
        }
    }
}

impl Client {
    /// Connects to the control socket `socket`.
    pub fn connect(socket: &Path) -> Result<Client> {
        let out = UnixStream::connect(socket).with_context(|| {
            format!(
                "connecting to the control socket {} (is the mount running?)",
                socket.display()
            )
        })?;
        let input = BufReader::new(out.try_clone()?);
        Ok(Client { out, input })
    }

    /// Sends one request and returns the reply after `ok `; an `error` reply is an error.
    pub fn request(&mut self, line: &str) -> Result<String> {
        if line.contains('\n') {
            bail!("a control request is one line");
        }
        writeln!(self.out, "{line}")?;
        let mut reply = String::new();
        self.input.read_line(&mut reply)?;
        let reply = reply.trim_end();
        match reply.strip_prefix("ok") {
            Some(rest) => Ok(rest.trim_start().to_string()),
            None if reply.is_empty() => bail!("the mount closed the control channel"),
            None => bail!("{}", reply.strip_prefix("error ").unwrap_or(reply)),
        }
    }

    /// Records a marker in the trace; returns once it is recorded (or the mount said it has
    /// no trace).
    pub fn mark(&mut self, text: &str) -> Result<Marked> {
        let reply = self.request(&format!("mark {text}"))?;
        Marked::parse(&reply)
            .ok_or_else(|| anyhow::anyhow!("the mount's mark reply '{reply}' is not readable"))
    }

    /// The mount's counters.
    pub fn stats(&mut self) -> Result<Stats> {
        let reply = self.request("stats")?;
        serde_json::from_str(&reply).context("the mount's stats reply is not readable")
    }

    /// Each fault rule with its counters.
    pub fn rules(&mut self) -> Result<Vec<crate::faults::RuleStats>> {
        let reply = self.request("rules")?;
        serde_json::from_str(&reply).context("the mount's rules reply is not readable")
    }

    /// The backing store's chunk directories that are not its own
    /// ([`crate::store::layout::odd_chunk_dirs`], run by the daemon).
    pub fn layout(&mut self) -> Result<Vec<crate::store::layout::OddDir>> {
        let reply = self.request("layout")?;
        serde_json::from_str(&reply).context("the mount's layout reply is not readable")
    }

    /// Sends every reply the mount holds now; returns how many it held.
    pub fn release(&mut self) -> Result<u64> {
        let reply = self.request("release")?;
        reply
            .parse()
            .with_context(|| format!("the mount's release reply '{reply}' is not readable"))
    }

    /// Sends every reply the mount holds now, and holds none from now on (a stop's first
    /// step: `ctl MNT release all`); returns how many it held.
    pub fn release_all(&mut self) -> Result<u64> {
        let reply = self.request("release all")?;
        reply
            .parse()
            .with_context(|| format!("the mount's release reply '{reply}' is not readable"))
    }

    /// Empties the model's block cache (an error when the mount has no model).
    pub fn drop_caches(&mut self) -> Result<()> {
        self.request("drop-caches").map(drop)
    }
}

/// The answer to `mark`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marked {
    /// In the trace, with this request number.
    Recorded {
        /// The marker's request number.
        seq: u64,
    },
    /// The mount keeps no trace: nothing was recorded (a GC on it must not fail for that).
    Untraced,
}

impl Marked {
    /// The reply's text after `ok `, as the daemon writes it.
    pub fn reply(&self) -> String {
        match self {
            Marked::Recorded { seq } => format!("seq={seq}"),
            Marked::Untraced => "untraced".into(),
        }
    }

    /// Reads what [`Marked::reply`] wrote.
    pub fn parse(reply: &str) -> Option<Marked> {
        if reply == "untraced" {
            return Some(Marked::Untraced);
        }
        let seq = reply.strip_prefix("seq=")?.parse().ok()?;
        Some(Marked::Recorded { seq })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reply_reads_back_as_written_and_garbage_is_refused() {
        for m in [
            Marked::Recorded { seq: 0 },
            Marked::Recorded { seq: 42 },
            Marked::Untraced,
        ] {
            assert_eq!(Marked::parse(&m.reply()), Some(m));
        }
        for bad in ["", "seq=", "seq=x", "untraced now", "42"] {
            assert_eq!(Marked::parse(bad), None, "{bad:?}");
        }
    }
}
