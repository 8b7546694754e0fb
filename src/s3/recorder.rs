//! The S3 recorder: an HTTP/1.1 relay between any S3 client (our GC, a real PBS) and the
//! bucket's server, recording every request as a trace record (`trace::format`, ops
//! `s3-list` ... `s3-other`).
//!
//! Each request is relayed byte for byte: its head as the client sent it (the `Host` header
//! included, so a signature made for the recorder's address is checked by the server against
//! that same address), then its body; the server's reply goes back the same way once it is
//! whole. Nothing is re-signed, so the recorder needs no credentials. A connection of the
//! client gets a connection of its own to the server, kept alive as long as both ends keep
//! theirs.
//!
//! A request is recorded after the server's reply has arrived and before the client gets it:
//! in a trace shared with a mount (the records go through its control socket), whatever the
//! client does next comes after it.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::faults::{Decision, Faults};
use crate::trace::Op;

/// The largest request or reply head read (S3's are a few hundred bytes).
const MAX_HEAD: usize = 64 * 1024;
/// The largest body relayed (a chunk is at most 16 MiB; a listing page about 300 kB).
const MAX_BODY: usize = 64 << 20;
/// Headers parsed in a head.
const MAX_HEADERS: usize = 64;
/// A server that sends nothing for this long has failed the request.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(120);

/// One relayed request, as the trace records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Request {
    /// `s3-list`, `s3-delete`, ...
    pub op: Op,
    /// The key (a listing's prefix, a batch delete's first key), without the bucket.
    pub name: Vec<u8>,
    /// The HTTP status of the reply (502 when the server could not be reached).
    pub status: u16,
    /// Keys listed or deleted, or body bytes put or got (see `trace::format`).
    pub arg: u64,
    /// From the request's arrival to the end of the reply.
    pub duration_ns: u64,
    /// Of it, the delay a fault rule added.
    pub injected_ns: u64,
    /// A fault rule answered it (`status=`) or cut its reply (`cut`).
    pub injected: bool,
}

impl S3Request {
    /// The errno a trace keeps for the status (`trace::format`): 0 below 400.
    pub fn errno(&self) -> i32 {
        match self.status {
            0..=399 => 0,
            403 => libc::EACCES,
            404 => libc::ENOENT,
            503 => libc::EAGAIN,
            500..=599 => libc::EIO,
            _ => libc::EINVAL,
        }
    }
}

impl S3Request {
    /// Its trace record, but for the fields the trace's clock gives (`seq`, `start_ns`).
    pub fn raw_record(&self) -> crate::trace::format::RawRecord {
        let mut rec = crate::trace::format::RawRecord::new(self.op);
        rec.duration_ns = self.duration_ns;
        rec.parent = self.status as u64;
        rec.arg = self.arg;
        rec.errno = self.errno();
        rec.injected_ns = self.injected_ns;
        if self.injected {
            rec.flags |= crate::trace::format::flags::INJECTED_ERROR;
        }
        rec.set_name(&self.name);
        rec
    }
}

/// Where recorded requests go: a trace file of the recorder's own, or a mount's trace.
pub trait S3Sink: Send + Sync {
    /// Records `r`; an error means the record is lost (the recorder counts it and goes on).
    fn record(&self, r: &S3Request) -> Result<()>;
}

/// A trace file of the recorder's own.
impl S3Sink for crate::trace::TraceSink {
    fn record(&self, r: &S3Request) -> Result<()> {
        let mut rec = r.raw_record();
        rec.seq = self.next_seq();
        rec.start_ns = self.now_ns().saturating_sub(r.duration_ns);
        crate::trace::TraceSink::record(self, rec);
        Ok(())
    }
}

/// The server the recorder relays to.
#[derive(Clone, Debug)]
pub struct Upstream {
    /// `HOST:PORT` as given.
    pub authority: String,
    /// Its addresses.
    pub addrs: Vec<SocketAddr>,
}

impl Upstream {
    /// The server of an `http://HOST[:PORT]` endpoint URL (https is not relayed: the
    /// recorder would have to end TLS, and sign again).
    pub fn from_endpoint(url: &str) -> Result<Upstream> {
        let rest = match url.strip_prefix("http://") {
            Some(rest) => rest,
            None if url.starts_with("https://") => bail!(
                "S3 endpoint {url}: the recorder relays plain http only (it does not end TLS); \
                 record a server reached over http"
            ),
            None => bail!("S3 endpoint {url:?}: not an http:// URL"),
        };
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.is_empty() {
            bail!("S3 endpoint {url:?}: no host");
        }
        let with_port = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        let addrs: Vec<SocketAddr> = with_port
            .to_socket_addrs()
            .with_context(|| format!("S3 endpoint {url}: resolving {with_port}"))?
            .collect();
        if addrs.is_empty() {
            bail!("S3 endpoint {url}: {with_port} has no address");
        }
        Ok(Upstream {
            authority: authority.to_owned(),
            addrs,
        })
    }

    fn connect(&self) -> io::Result<TcpStream> {
        let s = TcpStream::connect(&self.addrs[..])?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(UPSTREAM_TIMEOUT))?;
        Ok(s)
    }
}

/// What the recorder did so far.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests relayed (whatever their status).
    pub requests: AtomicU64,
    /// Requests the server could not be asked (answered 502 by the recorder).
    pub unreachable: AtomicU64,
    /// Records the sink refused (lost from the trace).
    pub lost: AtomicU64,
}

/// A running recorder.
pub struct Recorder {
    listener: TcpListener,
    upstream: Upstream,
    bucket: Option<String>,
    faults: Option<Faults>,
    counters: Arc<Counters>,
}

impl Recorder {
    /// Listens on `listen` (port 0: any free one) for clients of `upstream`'s `bucket` (its
    /// name is taken off path-style keys; without it a key is the whole path).
    pub fn bind(listen: &str, upstream: Upstream, bucket: Option<String>) -> Result<Recorder> {
        let listener =
            TcpListener::bind(listen).with_context(|| format!("listening on {listen}"))?;
        Ok(Recorder {
            listener,
            upstream,
            bucket,
            faults: None,
            counters: Arc::default(),
        })
    }

    /// Fault rules for the S3 requests (`faults`: S3 operations, `status=`, `cut`).
    pub fn with_faults(mut self, faults: Faults) -> Result<Recorder> {
        faults.check_kind(true)?;
        self.faults = (!faults.is_empty()).then_some(faults);
        Ok(self)
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The counters, shared with the serving threads.
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// Serves clients, a thread per connection, recording into `sink`, until the process
    /// ends.
    pub fn serve(self, sink: Arc<dyn S3Sink>) -> Result<()> {
        let shared = Arc::new(Relay {
            upstream: self.upstream,
            bucket: self.bucket,
            faults: self.faults,
            sink,
            counters: self.counters,
        });
        for conn in self.listener.incoming() {
            let conn = match conn {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("accepting a client: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let relay = shared.clone();
            std::thread::Builder::new()
                .name("s3-client".into())
                .spawn(move || {
                    if let Err(e) = relay.serve_client(conn) {
                        tracing::debug!("client connection ended: {e}");
                    }
                })
                .context("starting a client's thread")?;
        }
        Ok(())
    }
}

struct Relay {
    upstream: Upstream,
    bucket: Option<String>,
    faults: Option<Faults>,
    sink: Arc<dyn S3Sink>,
    counters: Arc<Counters>,
}

/// A request or reply read whole: its head's bytes, parsed, and its body.
struct Message {
    head: Vec<u8>,
    body: Vec<u8>,
    /// The body as sent (chunked: the chunks with their framing).
    raw_body: Vec<u8>,
    /// `Connection: close` was asked for.
    close: bool,
}

struct RequestHead {
    method: String,
    target: String,
    expect_continue: bool,
}

impl Relay {
    fn serve_client(&self, client: TcpStream) -> io::Result<()> {
        client.set_nodelay(true)?;
        let mut reader = BufReader::new(client.try_clone()?);
        let mut out = client;
        let mut upstream: Option<BufReader<TcpStream>> = None;
        loop {
            let Some((req, head)) = read_request(&mut reader, &mut out)? else {
                return Ok(());
            };
            let t0 = Instant::now();
            let mut recorded = classify(&head, &req, self.bucket.as_deref());
            let dec = self.decide(&recorded);
            if dec.delay_ns > 0 {
                std::thread::sleep(Duration::from_nanos(dec.delay_ns));
                recorded.injected_ns = dec.delay_ns;
            }
            let reply = if dec.status != 0 {
                Ok(injected_reply(dec.status, &head))
            } else {
                self.exchange(&mut upstream, &req, &head)
            };
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
            let (reply, close) = match reply {
                Ok(r) => (r, req.close),
                Err(e) => {
                    self.counters.unreachable.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        "{} {}: the S3 server {} failed: {e}",
                        head.method,
                        head.target,
                        self.upstream.authority
                    );
                    upstream = None;
                    (bad_gateway(&e), true)
                }
            };
            let recorded = S3Request {
                duration_ns: t0.elapsed().as_nanos() as u64,
                injected: dec.status != 0 || dec.cut,
                ..completed(recorded, &reply)
            };
            if let Err(e) = self.sink.record(&recorded) {
                self.counters.lost.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("a record of {} was lost: {e:#}", head.target);
            }
            if dec.cut {
                // Half the reply, then the connection closed: a reply the client cannot read.
                if reply.raw_body.len() >= 2 {
                    out.write_all(&reply.head)?;
                    out.write_all(&reply.raw_body[..reply.raw_body.len() / 2])?;
                }
                out.flush()?;
                return Ok(());
            }
            out.write_all(&reply.head)?;
            out.write_all(&reply.raw_body)?;
            out.flush()?;
            if close || reply.close {
                return Ok(());
            }
        }
    }

    /// What the fault rules decide for request `r`.
    fn decide(&self, r: &S3Request) -> Decision {
        let Some(f) = &self.faults else {
            return Decision::default();
        };
        let request = crate::faults::Request {
            op: r.op,
            ino: 0,
            parent: 0,
            name: &r.name,
            set_atime: false,
            set_mtime: false,
        };
        f.decide(&request, &mut || {
            Some(String::from_utf8_lossy(&r.name).into_owned())
        })
    }

    /// Sends `req` to the server (on the kept connection, or a new one) and reads its reply.
    fn exchange(
        &self,
        upstream: &mut Option<BufReader<TcpStream>>,
        req: &Message,
        head: &RequestHead,
    ) -> io::Result<Message> {
        // A kept connection the server has closed meanwhile fails at once: once more on a new
        // one (nothing of the request reached the server).
        for attempt in 0..2 {
            let fresh = upstream.is_none();
            if fresh {
                *upstream = Some(BufReader::new(self.upstream.connect()?));
            }
            let conn = upstream.as_mut().expect("connected");
            let sent = conn
                .get_mut()
                .write_all(&req.head)
                .and_then(|()| conn.get_mut().write_all(&req.raw_body));
            let reply = sent.and_then(|()| read_reply(conn, head.method == "HEAD"));
            match reply {
                Ok(Some(r)) => {
                    if r.close {
                        *upstream = None;
                    }
                    return Ok(r);
                }
                Ok(None) | Err(_) if !fresh && attempt == 0 => *upstream = None,
                Ok(None) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed the connection without a reply",
                    ))
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the second attempt is on a new connection")
    }
}

fn bad_gateway(e: &io::Error) -> Message {
    let body = format!("chunkscope s3-record: the S3 server failed: {e}\n").into_bytes();
    let head = format!(
        "HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    Message {
        head,
        raw_body: body.clone(),
        body,
        close: true,
    }
}

fn status_of(head: &[u8]) -> u16 {
    // "HTTP/1.1 200 ..."
    head.get(9..12)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn bad_data(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Reads a head (up to the blank line) from `r`; `None` at a clean end of the connection.
fn read_head(r: &mut impl BufRead) -> io::Result<Option<Vec<u8>>> {
    let mut head = Vec::new();
    loop {
        let n = r.read_until(b'\n', &mut head)?;
        if n == 0 {
            return if head.is_empty() {
                Ok(None)
            } else {
                Err(bad_data("the connection ended inside a head"))
            };
        }
        if head.ends_with(b"\r\n\r\n") || head == b"\r\n" || head.ends_with(b"\n\n") {
            if head == b"\r\n" {
                // A stray line break between messages.
                head.clear();
                continue;
            }
            return Ok(Some(head));
        }
        if head.len() > MAX_HEAD {
            return Err(bad_data(format!("a head longer than {MAX_HEAD} bytes")));
        }
    }
}

fn header<'h>(headers: &'h [httparse::Header<'_>], name: &str) -> Option<&'h [u8]> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

fn has_token(value: Option<&[u8]>, token: &str) -> bool {
    value.is_some_and(|v| {
        v.split(|&c| c == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// How a message's body is delimited.
enum Framing {
    None,
    Length(usize),
    Chunked,
    UntilClose,
}

fn framing(headers: &[httparse::Header<'_>], otherwise: Framing) -> io::Result<Framing> {
    if has_token(header(headers, "transfer-encoding"), "chunked") {
        return Ok(Framing::Chunked);
    }
    match header(headers, "content-length") {
        Some(v) => {
            let n: usize = std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| bad_data("a content-length that is not a number"))?;
            if n > MAX_BODY {
                return Err(bad_data(format!(
                    "a body of {n} bytes (at most {MAX_BODY})"
                )));
            }
            Ok(Framing::Length(n))
        }
        None => Ok(otherwise),
    }
}

/// Reads a body framed as `f`: (the body, the bytes as sent).
fn read_body(r: &mut impl BufRead, f: Framing) -> io::Result<(Vec<u8>, Vec<u8>)> {
    match f {
        Framing::None => Ok((Vec::new(), Vec::new())),
        Framing::Length(n) => {
            let mut body = vec![0; n];
            r.read_exact(&mut body)?;
            Ok((body.clone(), body))
        }
        Framing::UntilClose => {
            let mut body = Vec::new();
            r.take(MAX_BODY as u64 + 1).read_to_end(&mut body)?;
            if body.len() > MAX_BODY {
                return Err(bad_data(format!("a body of more than {MAX_BODY} bytes")));
            }
            Ok((body.clone(), body))
        }
        Framing::Chunked => {
            let (mut body, mut raw) = (Vec::new(), Vec::new());
            loop {
                let start = raw.len();
                if r.read_until(b'\n', &mut raw)? == 0 {
                    return Err(bad_data("the connection ended inside a chunked body"));
                }
                let line = std::str::from_utf8(&raw[start..])
                    .map_err(|_| bad_data("a chunk size that is not text"))?;
                let size = line.split(';').next().unwrap_or_default().trim();
                let size = usize::from_str_radix(size, 16)
                    .map_err(|_| bad_data(format!("a chunk size {size:?}")))?;
                if body.len() + size > MAX_BODY {
                    return Err(bad_data(format!("a body of more than {MAX_BODY} bytes")));
                }
                if size == 0 {
                    // Trailers, up to a blank line.
                    loop {
                        let start = raw.len();
                        if r.read_until(b'\n', &mut raw)? == 0 {
                            return Err(bad_data("the connection ended inside trailers"));
                        }
                        if raw[start..].trim_ascii().is_empty() {
                            return Ok((body, raw));
                        }
                    }
                }
                let at = raw.len();
                raw.resize(at + size, 0);
                r.read_exact(&mut raw[at..])?;
                body.extend_from_slice(&raw[at..]);
                let at = raw.len();
                if r.read_until(b'\n', &mut raw)? == 0 || !raw[at..].trim_ascii().is_empty() {
                    return Err(bad_data("a chunk not followed by a line break"));
                }
            }
        }
    }
}

/// Reads one request from the client; answers `Expect: 100-continue` itself (the server's
/// own 100 is skipped in [`read_reply`]).
fn read_request(
    r: &mut impl BufRead,
    client: &mut impl Write,
) -> io::Result<Option<(Message, RequestHead)>> {
    let Some(head) = read_head(r)? else {
        return Ok(None);
    };
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(bad_data("a request head cut short")),
        Err(e) => return Err(bad_data(format!("a request head that is not HTTP: {e}"))),
    }
    let parsed = RequestHead {
        method: req.method.unwrap_or_default().to_owned(),
        target: req.path.unwrap_or_default().to_owned(),
        expect_continue: has_token(header(req.headers, "expect"), "100-continue"),
    };
    let close = has_token(header(req.headers, "connection"), "close")
        || req.version == Some(0) && !has_token(header(req.headers, "connection"), "keep-alive");
    let f = framing(req.headers, Framing::None)?;
    if parsed.expect_continue && !matches!(f, Framing::None | Framing::Length(0)) {
        client.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        client.flush()?;
    }
    let (body, raw_body) = read_body(r, f)?;
    Ok(Some((
        Message {
            head,
            body,
            raw_body,
            close,
        },
        parsed,
    )))
}

/// Reads the server's reply to a request (`head_only`: a HEAD's, which has no body),
/// skipping interim (1xx) replies; `None` if the connection ended before one began.
fn read_reply(r: &mut impl BufRead, head_only: bool) -> io::Result<Option<Message>> {
    loop {
        let Some(head) = read_head(r)? else {
            return Ok(None);
        };
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(&head) {
            Ok(httparse::Status::Complete(_)) => {}
            Ok(httparse::Status::Partial) => return Err(bad_data("a reply head cut short")),
            Err(e) => return Err(bad_data(format!("a reply head that is not HTTP: {e}"))),
        }
        let code = resp.code.unwrap_or(0);
        if (100..200).contains(&code) {
            continue;
        }
        let mut close =
            has_token(header(resp.headers, "connection"), "close") || resp.version == Some(0);
        let f = if head_only || code == 204 || code == 304 {
            Framing::None
        } else {
            framing(resp.headers, Framing::UntilClose)?
        };
        close |= matches!(f, Framing::UntilClose);
        let (body, raw_body) = read_body(r, f)?;
        return Ok(Some(Message {
            head,
            body,
            raw_body,
            close,
        }));
    }
}

/// `%XX` decoded (a `+` stays: S3 keys in paths are encoded with `%20`).
fn percent_decoded(s: &str) -> Vec<u8> {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(hi), Some(lo)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(hi << 4 | lo);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// The value of query parameter `name` (`Some(empty)` for a bare `name`).
fn query_param(query: &str, name: &str) -> Option<Vec<u8>> {
    query.split('&').find_map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        (k == name).then(|| percent_decoded(&v.replace('+', " ")))
    })
}

/// Occurrences of `needle` in `hay`.
fn count(hay: &[u8], needle: &[u8]) -> u64 {
    hay.windows(needle.len()).filter(|w| *w == needle).count() as u64
}

/// The text of the first `<tag>...</tag>` in `xml`.
fn element<'x>(xml: &'x [u8], tag: &str) -> Option<&'x [u8]> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml.windows(open.len()).position(|w| w == open.as_bytes())? + open.len();
    let len = xml[start..]
        .windows(close.len())
        .position(|w| w == close.as_bytes())?;
    Some(&xml[start..start + len])
}

/// What a request is, from the request alone: its operation, key, and for a delete or a
/// put its keys or bytes (the rest of the record comes with the reply, [`completed`]).
fn classify(head: &RequestHead, req: &Message, bucket: Option<&str>) -> S3Request {
    let (path, query) = head.target.split_once('?').unwrap_or((&head.target, ""));
    let path = percent_decoded(path);
    let path = path.strip_prefix(b"/").unwrap_or(&path);
    // Path-style: BUCKET/KEY; virtual-hosted: KEY.
    let key: &[u8] = match bucket {
        Some(b) if path == b.as_bytes() => b"",
        Some(b) if path.starts_with(b.as_bytes()) && path.get(b.len()) == Some(&b'/') => {
            &path[b.len() + 1..]
        }
        _ => path,
    };
    let (op, name, arg) = match head.method.as_str() {
        "GET" if query_param(query, "list-type").is_some_and(|v| v == b"2") => (
            Op::S3List,
            query_param(query, "prefix").unwrap_or_default(),
            0,
        ),
        "POST" if query_param(query, "delete").is_some() => {
            let first = element(&req.body, "Key")
                .map(<[u8]>::to_vec)
                .unwrap_or_default();
            (Op::S3Delete, first, count(&req.body, b"<Key>"))
        }
        "DELETE" if !key.is_empty() => (Op::S3Delete, key.to_vec(), 1),
        "PUT" if !key.is_empty() => (Op::S3Put, key.to_vec(), req.body.len() as u64),
        "GET" if !key.is_empty() => (Op::S3Get, key.to_vec(), 0),
        "HEAD" => (Op::S3Head, key.to_vec(), 0),
        _ => (Op::S3Other, key.to_vec(), 0),
    };
    S3Request {
        op,
        name,
        status: 0,
        arg,
        duration_ns: 0,
        injected_ns: 0,
        injected: false,
    }
}

/// `r` with what its reply says: the status, and the keys a listing page returned or the
/// bytes a get received.
fn completed(mut r: S3Request, reply: &Message) -> S3Request {
    r.status = status_of(&reply.head);
    let ok = (200..300).contains(&r.status);
    match r.op {
        Op::S3List if ok => {
            r.arg = element(&reply.body, "KeyCount")
                .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok())
                .unwrap_or_else(|| count(&reply.body, b"<Key>"));
        }
        Op::S3Get => r.arg = reply.body.len() as u64,
        _ => {}
    }
    r
}

/// The reply the recorder makes for a request a rule fails with `status` (S3's error body,
/// none for a HEAD).
fn injected_reply(status: u16, head: &RequestHead) -> Message {
    let (code, reason) = match status {
        400 => ("BadRequest", "Bad Request"),
        403 => ("AccessDenied", "Forbidden"),
        404 => ("NoSuchKey", "Not Found"),
        409 => ("OperationAborted", "Conflict"),
        500 => ("InternalError", "Internal Server Error"),
        503 => ("SlowDown", "Slow Down"),
        _ if status >= 500 => ("ServiceUnavailable", "Server Error"),
        _ => ("InvalidRequest", "Client Error"),
    };
    let body = if head.method == "HEAD" {
        Vec::new()
    } else {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
             <Message>injected by a chunkscope s3-record fault rule</Message>\
             <RequestId>chunkscope-s3-record</RequestId></Error>"
        )
        .into_bytes()
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/xml\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    Message {
        head,
        raw_body: body.clone(),
        body,
        close: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(head: &str, body: &[u8]) -> Message {
        Message {
            head: head.as_bytes().to_vec(),
            body: body.to_vec(),
            raw_body: body.to_vec(),
            close: false,
        }
    }

    fn classified(method: &str, target: &str, req_body: &[u8], reply_body: &[u8]) -> S3Request {
        let head = RequestHead {
            method: method.into(),
            target: target.into(),
            expect_continue: false,
        };
        completed(
            classify(&head, &message("", req_body), Some("store")),
            &message("HTTP/1.1 200 OK\r\n\r\n", reply_body),
        )
    }

    #[test]
    fn requests_are_told_apart_by_method_path_and_query() {
        let list = classified(
            "GET",
            "/store?list-type=2&prefix=.chunks%2F&continuation-token=x",
            b"",
            b"<ListBucketResult><KeyCount>3</KeyCount><Contents><Key>a</Key></Contents></ListBucketResult>",
        );
        assert_eq!(
            (list.op, &list.name[..], list.arg),
            (Op::S3List, &b".chunks/"[..], 3)
        );
        let del = classified(
            "POST",
            "/store?delete",
            b"<Delete><Object><Key>.chunks/0000/00aa</Key></Object><Object><Key>.chunks/0000/00ab</Key></Object></Delete>",
            b"",
        );
        assert_eq!(
            (del.op, &del.name[..], del.arg),
            (Op::S3Delete, &b".chunks/0000/00aa"[..], 2)
        );
        let put = classified("PUT", "/store/.cnt/vm/100/x.fidx", b"12345", b"");
        assert_eq!(
            (put.op, &put.name[..], put.arg),
            (Op::S3Put, &b".cnt/vm/100/x.fidx"[..], 5)
        );
        let get = classified(
            "GET",
            "/store/.chunks/0000/00aa?X-Amz-Signature=1",
            b"",
            b"abc",
        );
        assert_eq!(
            (get.op, &get.name[..], get.arg),
            (Op::S3Get, &b".chunks/0000/00aa"[..], 3)
        );
        assert_eq!(classified("HEAD", "/store", b"", b"").op, Op::S3Head);
        assert_eq!(classified("PUT", "/store", b"", b"").op, Op::S3Other);
        let one = classified("DELETE", "/store/.in-use", b"", b"");
        assert_eq!((one.op, one.arg), (Op::S3Delete, 1));
        // Virtual-hosted addressing: the path is the key.
        let head = RequestHead {
            method: "GET".into(),
            target: "/.chunks/0000/00aa".into(),
            expect_continue: false,
        };
        let r = completed(
            classify(&head, &message("", b""), Some("store")),
            &message("HTTP/1.1 404 Not Found\r\n\r\n", b""),
        );
        assert_eq!(
            (r.name.as_slice(), r.errno()),
            (&b".chunks/0000/00aa"[..], libc::ENOENT)
        );
    }

    #[test]
    fn an_injected_status_is_s3_s_error_reply() {
        let head = |method: &str| RequestHead {
            method: method.into(),
            target: "/store?list-type=2".into(),
            expect_continue: false,
        };
        let m = injected_reply(503, &head("GET"));
        let mut r: &[u8] = &[m.head.clone(), m.raw_body.clone()].concat();
        let back = read_reply(&mut r, false).unwrap().unwrap();
        assert_eq!(status_of(&back.head), 503);
        assert_eq!(element(&back.body, "Code"), Some(&b"SlowDown"[..]));
        assert!(r.is_empty(), "exactly one reply");
        let m = injected_reply(500, &head("HEAD"));
        assert!(m.body.is_empty());
        let text = String::from_utf8(m.head).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 500 Internal Server Error\r\n"),
            "{text}"
        );
        assert!(text.contains("content-length: 0\r\n"), "{text}");
    }

    #[test]
    fn statuses_map_to_errnos() {
        let r = |status| S3Request {
            op: Op::S3Get,
            name: vec![],
            status,
            arg: 0,
            duration_ns: 0,
            injected_ns: 0,
            injected: false,
        };
        assert_eq!(r(200).errno(), 0);
        assert_eq!(r(204).errno(), 0);
        assert_eq!(r(403).errno(), libc::EACCES);
        assert_eq!(r(503).errno(), libc::EAGAIN);
        assert_eq!(r(500).errno(), libc::EIO);
        assert_eq!(r(400).errno(), libc::EINVAL);
    }

    #[test]
    fn bodies_are_read_by_length_chunks_or_to_the_end() {
        let mut r: &[u8] = b"4\r\nabcd\r\n2;x=y\r\nef\r\n0\r\nTrailer: 1\r\n\r\nNEXT";
        let (body, raw) = read_body(&mut r, Framing::Chunked).unwrap();
        assert_eq!(body, b"abcdef");
        assert_eq!(raw, b"4\r\nabcd\r\n2;x=y\r\nef\r\n0\r\nTrailer: 1\r\n\r\n");
        assert_eq!(r, b"NEXT");
        let mut r: &[u8] = b"3\r\nabcd";
        assert!(
            read_body(&mut r, Framing::Chunked).is_err(),
            "chunk overruns its size"
        );
        let mut r: &[u8] = b"abcdef";
        assert_eq!(read_body(&mut r, Framing::Length(4)).unwrap().0, b"abcd");
        let mut r: &[u8] = b"abc";
        assert!(read_body(&mut r, Framing::Length(4)).is_err(), "cut short");
        let mut r: &[u8] = b"all of it";
        assert_eq!(
            read_body(&mut r, Framing::UntilClose).unwrap().0,
            b"all of it"
        );
    }

    #[test]
    fn a_reply_skips_interim_ones_and_a_head_reply_has_no_body() {
        let mut r: &[u8] =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1";
        let m = read_reply(&mut r, false).unwrap().unwrap();
        assert_eq!((status_of(&m.head), &m.body[..]), (200, &b"ok"[..]));
        assert_eq!(r, b"HTTP/1.1");
        let mut r: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n";
        let m = read_reply(&mut r, true).unwrap().unwrap();
        assert!(m.body.is_empty() && !m.close);
        let mut r: &[u8] = b"";
        assert!(read_reply(&mut r, false).unwrap().is_none());
    }

    #[test]
    fn percent_decoding_keeps_what_is_not_an_escape() {
        assert_eq!(percent_decoded(".chunks%2F00aa"), b".chunks/00aa");
        assert_eq!(percent_decoded("100%"), b"100%");
        assert_eq!(percent_decoded("%zz%4"), b"%zz%4");
        assert_eq!(percent_decoded("ä%41"), "äA".as_bytes());
        assert_eq!(
            query_param("a=1&prefix=x%2Fy&delete", "prefix").unwrap(),
            b"x/y"
        );
        assert_eq!(query_param("a=1&delete", "delete").unwrap(), b"");
        assert!(query_param("a=1", "delete").is_none());
    }
}
