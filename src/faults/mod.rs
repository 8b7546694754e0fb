//! Fault rules: injected errors, delays and stalls, decided reproducibly.
//!
//! A rule is one line: the operations it selects, then `key=value` words.
//!
//! ```text
//! setattr-atime errno=EIO nth=1000          the 1000th atime update fails with EIO
//! lookup path=.chunks/*/00ff* errno=ENOENT  lookups of chunks whose name starts 00ff vanish
//! getattr,lookup prob=0.05 delay=exp:8ms    5% of stats and lookups wait, 8 ms on average
//! readdir every=100 delay=uniform:1ms..20ms every 100th listing waits 1 to 20 ms
//! unlink errno=any prob=0.01                1% of unlinks fail with an errno unlink can return
//! getattr path=.chunks/0000 stall=2s nth=1  the first stat of that directory stalls for 2 s
//! all after=30s delay=1ms                   every request waits 1 ms, from 30 s after mounting
//! ```
//!
//! **Operations** are FUSE request names (`lookup`, `getattr`, `setattr`, `readdir`, `unlink`,
//! `open`, ... see [`crate::trace::Op`]) or aliases: `setattr-atime` (a setattr that sets the
//! atime: a GC touch), `setattr-mtime`, `stat` (= getattr), `readdir` and `list` (both
//! readdir and readdirplus), `rm` (= unlink), `all`. `forget` has no reply and cannot be
//! selected.
//!
//! **Selection**: `path=GLOB` matches the path relative to the store (`.chunks/0a1b/0a1b...`;
//! `*` stays within a component, `**` crosses them). For a request with a name (lookup,
//! unlink, create, ...) it is the parent's path joined with the name. The glob is compiled
//! once; the path is resolved only for requests whose operation the rule selects.
//! `after=DURATION` selects only requests arriving that long after the mount started (wall
//! time: the one trigger that is not reproducible).
//!
//! **Triggers** (at most one; without one the rule fires on every selected request):
//! `prob=P` (0 never, 1 always), `nth=N` (the N-th selected request only), `every=K` (the
//! K-th, 2K-th, ...). `prob` is decided by a hash of (seed, rule number, request) where the
//! request is its operation, inode, parent inode and name: the same request on the same store
//! gets the same decision in every run, whatever the thread interleaving. `nth` and `every`
//! count selected requests in arrival order, reproducible when the client issues its
//! requests one at a time (a GC does).
//!
//! **Actions** (at least one): `delay=D` with D a duration (`5ms`), `uniform:A..B`,
//! `exp:MEAN` or `lognormal:MEDIAN,SIGMA`, sampled from the same hash; `stall=D` (a long fixed
//! delay, reported as a stall); a delay is at most an hour ([`MAX_DELAY`]), and a caller
//! whose reply is held can still be killed (its reply is answered EINTR); `errno=NAME|NUMBER|any`, where `any` picks one of the errnos
//! that operation can really return; `panic` makes the overlay's handler panic (the request is
//! answered EIO and counted, the mount goes on serving; a simulated request fails with EIO).
//! An injected error replaces the operation: it is not performed on the backing store. A delay holds the reply (the overlay hands it to a timer;
//! no worker thread waits).
//!
//! **S3 requests** (`chunkscope s3-record`'s): operations `s3-list` (ListObjectsV2),
//! `s3-delete` (DeleteObjects, DeleteObject), `s3-put`, `s3-get`, `s3-head`, `s3-other`, or
//! `s3` for all of them; `path=GLOB` matches the key (a listing's prefix, a batch's first
//! key); the request key of `prob` is the operation and the key. Their actions: `delay=` and
//! `stall=` (the server answers late), `status=CODE` (the recorder answers 400-599 itself,
//! with S3's error body: 503 `SlowDown`, 500 `InternalError`, ...; the server never sees the
//! request) and `cut` (the request is relayed and done, and its reply cut off halfway, the
//! connection closed: a listing or a delete's result the client cannot read). A rule selects
//! filesystem requests or S3 requests, not both; a mount refuses S3 rules and the recorder
//! filesystem ones.
//!
//! **Order**: rules are tried in order and the first one that fires decides; later rules are
//! not consulted for that request.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use globset::{GlobBuilder, GlobMatcher};

use crate::rng::{hash, unit};
use crate::trace::Op;
use crate::units::{parse_duration, ERRNOS};

/// A distribution of delays.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Delay {
    /// Always this long, ns.
    Fixed(u64),
    /// Uniformly between two bounds.
    Uniform {
        /// The shortest, ns.
        lo: u64,
        /// The longest, ns.
        hi: u64,
    },
    /// Exponential (memoryless waits).
    Exp {
        /// The mean, ns.
        mean: u64,
    },
    /// Log-normal: mostly near the median, with a long tail.
    LogNormal {
        /// The median, ns.
        median: u64,
        /// The shape: the standard deviation of the delay's logarithm.
        sigma: f64,
    },
}

impl Delay {
    /// A sample from two uniform numbers in `[0, 1)`.
    fn sample(&self, u: f64, v: f64) -> u64 {
        let ns = match *self {
            Delay::Fixed(ns) => ns,
            Delay::Uniform { lo, hi } => lo + ((hi - lo) as f64 * u) as u64,
            Delay::Exp { mean } => (-(1.0 - u).ln() * mean as f64) as u64,
            Delay::LogNormal { median, sigma } => {
                // Box-Muller: a standard normal from two uniforms.
                let z = (-2.0 * (1.0 - u).ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
                (median as f64 * (sigma * z).exp()).min(u64::MAX as f64 / 2.0) as u64
            }
        };
        ns.min(MAX_DELAY.as_nanos() as u64)
    }
}

/// Which of the requests a rule selects it fires on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trigger {
    /// Every one.
    Always,
    /// Each with this probability, decided by a hash of (seed, rule, request).
    Prob(f64),
    /// Only the N-th (1-based).
    Nth(u64),
    /// The K-th, 2K-th, ...
    Every(u64),
}

/// The errno a rule injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errno {
    /// This one.
    Fixed(i32),
    /// One of the errnos the operation can return.
    Any,
}

/// What a request looks like to the rules.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The operation.
    pub op: Op,
    /// The backing inode it is about (0 for a request with a name).
    pub ino: u64,
    /// The directory of its name (0 without a name).
    pub parent: u64,
    /// Its name (empty without one).
    pub name: &'a [u8],
    /// A setattr that sets the atime.
    pub set_atime: bool,
    /// A setattr that sets the mtime.
    pub set_mtime: bool,
}

/// What the rules decided for a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Injected errno (0: perform the operation).
    pub errno: i32,
    /// Injected delay before the reply.
    pub delay_ns: u64,
    /// 1-based number of the rule that fired (0: none).
    pub rule: u16,
    /// The handler panics (a test of the overlay's panic guard: the request is answered EIO,
    /// the mount goes on; a simulation answers EIO).
    pub panic: bool,
    /// An S3 request is answered with this HTTP status by the recorder, not relayed (0: it
    /// is relayed).
    pub status: u16,
    /// An S3 request is relayed, and its reply cut off halfway and the connection closed.
    pub cut: bool,
}

/// One fault rule, parsed (see the module documentation), with its counters.
pub struct Rule {
    text: String,
    ops: u128,
    atime_only: bool,
    mtime_only: bool,
    glob: Option<GlobMatcher>,
    after: Option<Duration>,
    trigger: Trigger,
    delay: Option<Delay>,
    stall: bool,
    panic: bool,
    errno: Option<Errno>,
    status: Option<u16>,
    cut: bool,
    matches: AtomicU64,
    hits: AtomicU64,
}

/// The bit of `op` in a rule's operation mask: a filesystem request's number, or for an S3
/// request (200 on) a bit of its own from 110 on (filesystem requests end at 103).
fn op_bit(op: Op) -> u128 {
    let n = op as u16 as u32;
    let bit = if op.is_s3() {
        n - 200 + S3_FIRST_BIT
    } else {
        n
    };
    1u128 << bit.min(127)
}

/// The mask bit of the first S3 operation ([`op_bit`]).
const S3_FIRST_BIT: u32 = 110;

/// Every S3 operation's bit.
fn s3_ops() -> u128 {
    Op::ALL
        .iter()
        .filter(|o| o.is_s3())
        .fold(0, |m, &o| m | op_bit(o))
}

/// Whether a rule can select `op`: a request that has a reply (a forget has none), not a
/// record the trace adds (markers, listing entries, a rename's or link's second name).
fn injectable(op: Op) -> bool {
    // An S3 request is the recorder's: `all` means the filesystem's requests, and S3 ones
    // are selected by their own names (`s3-list`, ..., `s3`).
    !op.is_s3()
        && !matches!(
            op,
            Op::Forget | Op::Marker | Op::Dirent | Op::NewName | Op::OldName
        )
}

/// Operations a name selects, and whether it requires an atime / mtime update.
fn select(name: &str) -> Option<(u128, bool, bool)> {
    let all: u128 = Op::ALL
        .iter()
        .filter(|&&o| injectable(o))
        .fold(0, |m, &o| m | op_bit(o));
    Some(match name {
        "all" | "*" => (all, false, false),
        "setattr-atime" | "touch" => (op_bit(Op::Setattr), true, false),
        "setattr-mtime" => (op_bit(Op::Setattr), false, true),
        "stat" => (op_bit(Op::Getattr), false, false),
        "readdir" | "list" => (op_bit(Op::Readdir) | op_bit(Op::Readdirplus), false, false),
        "rm" => (op_bit(Op::Unlink), false, false),
        "s3" => (s3_ops(), false, false),
        other if other.starts_with("s3-") => {
            let op = Op::ALL.iter().find(|o| o.is_s3() && o.name() == other)?;
            (op_bit(*op), false, false)
        }
        other => {
            let op = Op::ALL.iter().find(|o| o.name() == other)?;
            if !injectable(*op) {
                return None;
            }
            (op_bit(*op), false, false)
        }
    })
}

/// Errnos an operation can really return from a local filesystem (for `errno=any`).
pub fn errnos_of(op: Op) -> &'static [i32] {
    use libc::*;
    match op {
        Op::Lookup => &[ENOENT, EACCES, EIO, ENOMEM, ENAMETOOLONG],
        Op::Getattr | Op::Access | Op::Readlink => &[EIO, EACCES, ENOMEM],
        Op::Setattr => &[EIO, EPERM, EACCES, EROFS, ENOSPC, EDQUOT],
        Op::Opendir | Op::Open => &[ENOENT, EACCES, EIO, EMFILE, ENFILE, ENOMEM],
        Op::Readdir | Op::Readdirplus | Op::Read => &[EIO, ENOMEM],
        Op::Unlink | Op::Rmdir => &[ENOENT, EIO, EBUSY, EACCES, EPERM, EROFS],
        Op::Create | Op::Mkdir | Op::Mknod | Op::Symlink | Op::Link => {
            &[EEXIST, ENOSPC, EDQUOT, EIO, EACCES, EROFS]
        }
        Op::Rename => &[ENOENT, EXDEV, EBUSY, ENOSPC, EIO, EROFS],
        Op::Write | Op::Fallocate => &[EIO, ENOSPC, EDQUOT, EFBIG],
        Op::Fsync | Op::Fsyncdir | Op::Flush => &[EIO, ENOSPC, EDQUOT],
        _ => &[EIO],
    }
}

fn parse_errno(v: &str) -> Result<Errno> {
    if v == "any" {
        return Ok(Errno::Any);
    }
    if let Ok(n) = v.parse::<i32>() {
        if !(1..4096).contains(&n) {
            bail!("errno {n} is out of range 1..4095");
        }
        return Ok(Errno::Fixed(n));
    }
    let up = v.to_ascii_uppercase();
    ERRNOS
        .iter()
        .find(|(s, _)| *s == up)
        .map(|&(_, n)| Errno::Fixed(n))
        .ok_or_else(|| {
            anyhow!(
                "unknown errno '{v}' (a number, 'any', or one of {})",
                ERRNOS.iter().map(|e| e.0).collect::<Vec<_>>().join(" ")
            )
        })
}

/// The longest delay a rule may give (`delay=`, the high end of `uniform:`, the mean of
/// `exp:`, the median of `lognormal:`, `stall=`): an hour. A sample of a long-tailed
/// distribution is cut there too. A held caller can be killed (see `overlay::timer`), but
/// nothing a GC waits for is worth longer.
pub const MAX_DELAY: Duration = Duration::from_secs(3600);

/// `ns` if it is at most [`MAX_DELAY`].
fn at_most_max(ns: u64, v: &str) -> Result<u64> {
    if ns > MAX_DELAY.as_nanos() as u64 {
        bail!(
            "'{v}': longer than the longest delay, {} (a held request keeps its caller waiting)",
            crate::units::duration_ns(MAX_DELAY.as_nanos() as u64)
        );
    }
    Ok(ns)
}

fn parse_delay(v: &str) -> Result<Delay> {
    let d = parse_delay_unbounded(v)?;
    match d {
        Delay::Fixed(ns) | Delay::Uniform { hi: ns, .. } | Delay::Exp { mean: ns } => {
            at_most_max(ns, v)?
        }
        Delay::LogNormal { median, .. } => at_most_max(median, v)?,
    };
    Ok(d)
}

fn parse_delay_unbounded(v: &str) -> Result<Delay> {
    if let Some(r) = v.strip_prefix("uniform:") {
        let (a, b) = r
            .split_once("..")
            .ok_or_else(|| anyhow!("uniform:{r}: expected uniform:LOW..HIGH"))?;
        let (lo, hi) = (parse_duration(a)?, parse_duration(b)?);
        if lo > hi {
            bail!("uniform:{r}: the low end is above the high end");
        }
        Ok(Delay::Uniform { lo, hi })
    } else if let Some(r) = v.strip_prefix("exp:") {
        Ok(Delay::Exp {
            mean: parse_duration(r)?,
        })
    } else if let Some(r) = v.strip_prefix("lognormal:") {
        let (m, s) = r
            .split_once(',')
            .ok_or_else(|| anyhow!("lognormal:{r}: expected lognormal:MEDIAN,SIGMA"))?;
        let sigma: f64 = s
            .parse()
            .ok()
            .filter(|s: &f64| (0.0..=5.0).contains(s))
            .ok_or_else(|| anyhow!("lognormal sigma '{s}': expected a number from 0 to 5"))?;
        Ok(Delay::LogNormal {
            median: parse_duration(m)?,
            sigma,
        })
    } else {
        Ok(Delay::Fixed(parse_duration(v)?))
    }
}

impl Rule {
    /// Parses one rule (see the module documentation for the syntax).
    pub fn parse(text: &str) -> Result<Rule> {
        let mut words = text.split_whitespace();
        let ops_word = words
            .next()
            .ok_or_else(|| anyhow!("empty rule: expected operations, then key=value words"))?;
        let (mut ops, mut atime_only, mut mtime_only) = (0u128, false, false);
        for name in ops_word.split(',') {
            let (o, a, m) = select(name).ok_or_else(|| {
                anyhow!(
                    "unknown operation '{name}' (use FUSE request names such as lookup, \
                     getattr, setattr, readdir, unlink, or setattr-atime, stat, list, all; \
                     for the S3 recorder s3-list, s3-delete, s3-put, s3-get, s3-head, \
                     s3-other, s3)"
                )
            })?;
            ops |= o;
            atime_only |= a;
            mtime_only |= m;
        }
        let mut rule = Rule {
            text: text.split_whitespace().collect::<Vec<_>>().join(" "),
            ops,
            atime_only,
            mtime_only,
            glob: None,
            after: None,
            trigger: Trigger::Always,
            delay: None,
            stall: false,
            panic: false,
            errno: None,
            status: None,
            cut: false,
            matches: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        };
        for w in words {
            if w == "panic" {
                rule.panic = true;
                continue;
            }
            if w == "cut" {
                rule.cut = true;
                continue;
            }
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| anyhow!("'{w}': expected key=value"))?;
            let mut trigger = |t: Trigger| {
                if rule.trigger != Trigger::Always {
                    bail!("'{w}': a rule has at most one of prob, nth, every");
                }
                rule.trigger = t;
                Ok(())
            };
            match k {
                "path" => {
                    let g = GlobBuilder::new(v)
                        .literal_separator(true)
                        .build()
                        .with_context(|| format!("path={v}"))?;
                    rule.glob = Some(g.compile_matcher());
                }
                "after" => rule.after = Some(Duration::from_nanos(parse_duration(v)?)),
                "prob" => {
                    let p: f64 = v
                        .parse()
                        .ok()
                        .filter(|p: &f64| (0.0..=1.0).contains(p))
                        .ok_or_else(|| anyhow!("prob={v}: expected a number from 0 to 1"))?;
                    trigger(Trigger::Prob(p))?
                }
                "nth" | "every" => {
                    let n: u64 = v
                        .parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| anyhow!("{k}={v}: expected a count of 1 or more"))?;
                    trigger(if k == "nth" {
                        Trigger::Nth(n)
                    } else {
                        Trigger::Every(n)
                    })?
                }
                "delay" => rule.delay = Some(parse_delay(v).with_context(|| w.to_string())?),
                "stall" => {
                    rule.delay = Some(Delay::Fixed(
                        parse_duration(v).and_then(|ns| at_most_max(ns, v))?,
                    ));
                    rule.stall = true;
                }
                "errno" => rule.errno = Some(parse_errno(v)?),
                "status" => {
                    rule.status = Some(
                        v.parse()
                            .ok()
                            .filter(|c| (400..=599).contains(c))
                            .ok_or_else(|| {
                                anyhow!("status={v}: expected an HTTP error status, 400 to 599")
                            })?,
                    )
                }
                other => bail!(
                    "unknown key '{other}' (path, after, prob, nth, every, delay, stall, errno, \
                     panic; for S3 requests status, cut)"
                ),
            }
        }
        rule.check_actions()?;
        Ok(rule)
    }

    /// A rule selects filesystem requests or S3 requests, with the actions each can take.
    fn check_actions(&self) -> Result<()> {
        let s3 = self.ops & s3_ops();
        if s3 != 0 && s3 != self.ops {
            bail!("a rule selects filesystem requests or S3 requests, not both");
        }
        if s3 != 0 {
            if self.errno.is_some() || self.panic {
                bail!("an S3 request fails with status=CODE or cut, not errno= or panic");
            }
            if self.delay.is_none() && self.status.is_none() && !self.cut {
                bail!("no action: add delay=, stall=, status= or cut");
            }
            if self.status.is_some() && self.cut {
                bail!("status= answers without asking the server; cut relays the request: one of them");
            }
        } else {
            if self.status.is_some() || self.cut {
                bail!("status= and cut are for S3 requests (s3-list, s3-delete, ..., s3)");
            }
            if self.delay.is_none() && self.errno.is_none() && !self.panic {
                bail!("no action: add delay=, stall=, errno= or panic");
            }
        }
        Ok(())
    }

    /// The rule as written (words separated by single spaces).
    pub fn text(&self) -> &str {
        &self.text
    }

    fn selects_op(&self, r: &Request) -> bool {
        self.ops & op_bit(r.op) != 0
            && (!self.atime_only || r.set_atime)
            && (!self.mtime_only || r.set_mtime)
    }
}

/// The key of a request: what makes two requests "the same" for a seeded decision.
fn request_key(r: &Request) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64; // FNV-1a of the name
    for &b in r.name {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    hash(&[r.op as u64, r.ino, r.parent, h])
}

/// An ordered list of rules with their seed.
pub struct Faults {
    rules: Vec<Rule>,
    seed: u64,
    start: Instant,
}

/// A rule and its counters, for `chunkscope ctl MNT rules`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RuleStats {
    /// The rule's text (` (stall)` added for a stall).
    pub rule: String,
    /// Requests it selected.
    pub matches: u64,
    /// Requests it fired on.
    pub hits: u64,
}

/// The most fault rules a mount or a simulation takes.
pub const MAX_RULES: usize = 4096;

/// The largest rule file read: 1 MiB (thousands of rules' worth of text).
pub const MAX_RULE_FILE: u64 = 1 << 20;

impl Faults {
    /// Rules in the order they are tried, with the seed of their decisions.
    pub fn new(rules: Vec<Rule>, seed: u64) -> Faults {
        Faults {
            rules,
            seed,
            start: Instant::now(),
        }
    }

    /// Rules from command-line texts and rule files (one rule per line, `#` comments). A
    /// rule file is a regular file of at most [`MAX_RULE_FILE`] bytes (a FIFO or a device is
    /// refused without reading it), and there are at most [`MAX_RULES`] rules in all: each is
    /// tried on every request, so the limit is what a mount can afford, and it is checked
    /// before a rule more is parsed.
    pub fn load(texts: &[String], files: &[impl AsRef<Path>], seed: u64) -> Result<Faults> {
        let mut rules = Vec::new();
        let too_many = |at: &str| {
            anyhow::anyhow!(
                "{at}: more than {MAX_RULES} fault rules (each is tried on every request); \
                 a rule with a glob or 'all' covers many operations at once"
            )
        };
        for t in texts {
            if rules.len() == MAX_RULES {
                return Err(too_many(&format!("--fault '{t}'")));
            }
            rules.push(Rule::parse(t).with_context(|| format!("--fault '{t}'"))?);
        }
        for f in files {
            let f = f.as_ref();
            let bytes = crate::fsutil::read_regular_bounded(f, MAX_RULE_FILE)
                .with_context(|| format!("reading fault rules {}", f.display()))?;
            let s = String::from_utf8(bytes).map_err(|e| {
                anyhow::anyhow!(
                    "fault rules {}: not text (byte {} is not UTF-8)",
                    f.display(),
                    e.utf8_error().valid_up_to()
                )
            })?;
            for (i, line) in s.lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if line.is_empty() {
                    continue;
                }
                if rules.len() == MAX_RULES {
                    return Err(too_many(&format!("{}:{}", f.display(), i + 1)));
                }
                rules
                    .push(Rule::parse(line).with_context(|| format!("{}:{}", f.display(), i + 1))?);
            }
        }
        Ok(Faults::new(rules, seed))
    }

    /// An error naming the first rule that is not for the requests this process sees: S3
    /// ones (`s3` true, the recorder) or filesystem ones (a mount, a simulation).
    pub fn check_kind(&self, s3: bool) -> Result<()> {
        let bits = s3_ops();
        for r in &self.rules {
            if (r.ops & bits != 0) != s3 {
                bail!(
                    "fault rule '{}' is for {}",
                    r.text,
                    if s3 {
                        "filesystem requests (a mount's --fault); the recorder sees S3 requests: s3-list, s3-delete, s3-put, s3-get, s3-head, s3-other, s3"
                    } else {
                        "S3 requests: give it to chunkscope s3-record"
                    }
                );
            }
        }
        Ok(())
    }

    /// True without rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// True if some rule could select `op` (lets the request path skip everything else).
    #[inline]
    pub fn selects(&self, op: Op) -> bool {
        self.rules.iter().any(|r| r.ops & op_bit(op) != 0)
    }

    /// Decides for one request. `path` resolves the request's store-relative path; it is
    /// called at most once, and only if a rule with a glob selects the operation.
    pub fn decide(&self, r: &Request, path: &mut dyn FnMut() -> Option<String>) -> Decision {
        self.decide_at(r, &|| self.start.elapsed(), path)
    }

    /// [`Faults::decide`] on another clock: `now` says how long the run has lasted, for
    /// `after=` (a simulation's modelled time); asked only when a rule has `after=`.
    pub fn decide_at(
        &self,
        r: &Request,
        now: &dyn Fn() -> Duration,
        path: &mut dyn FnMut() -> Option<String>,
    ) -> Decision {
        let mut resolved: Option<Option<String>> = None;
        let mut key = None;
        for (i, rule) in self.rules.iter().enumerate() {
            if !rule.selects_op(r) {
                continue;
            }
            if let Some(after) = rule.after {
                if now() < after {
                    continue;
                }
            }
            if let Some(g) = &rule.glob {
                let p = resolved.get_or_insert_with(&mut *path);
                if !p.as_deref().is_some_and(|p| g.is_match(p)) {
                    continue;
                }
            }
            let n = rule.matches.fetch_add(1, Ordering::Relaxed) + 1;
            let k = *key.get_or_insert_with(|| request_key(r));
            let h = |salt: u64| hash(&[self.seed, i as u64, k, salt]);
            let fires = match rule.trigger {
                Trigger::Always => true,
                Trigger::Prob(p) => unit(h(0)) < p,
                Trigger::Nth(m) => n == m,
                Trigger::Every(m) => n % m == 0,
            };
            if !fires {
                continue;
            }
            rule.hits.fetch_add(1, Ordering::Relaxed);
            let delay_ns = rule.delay.map_or(0, |d| d.sample(unit(h(1)), unit(h(2))));
            let errno = match rule.errno {
                None => 0,
                Some(Errno::Fixed(e)) => e,
                Some(Errno::Any) => {
                    let list = errnos_of(r.op);
                    list[(h(3) % list.len() as u64) as usize]
                }
            };
            return Decision {
                errno,
                delay_ns,
                rule: i as u16 + 1,
                panic: rule.panic,
                status: rule.status.unwrap_or(0),
                cut: rule.cut,
            };
        }
        Decision::default()
    }

    /// Starts over: counters at zero, `after=` from now (a simulation's next run, which a
    /// mount would see as a new mount).
    pub fn restart(&mut self) {
        for r in &self.rules {
            r.matches.store(0, Ordering::Relaxed);
            r.hits.store(0, Ordering::Relaxed);
        }
        self.start = Instant::now();
    }

    /// Each rule with its counters.
    pub fn stats(&self) -> Vec<RuleStats> {
        self.rules
            .iter()
            .map(|r| RuleStats {
                rule: if r.stall {
                    format!("{} (stall)", r.text)
                } else {
                    r.text.clone()
                },
                matches: r.matches.load(Ordering::Relaxed),
                hits: r.hits.load(Ordering::Relaxed),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
