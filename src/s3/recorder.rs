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

use std::io::{self, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::http::{
    percent_decoded, query_param, read_reply, read_request, status_of, Message, RequestHead,
};
use crate::faults::{Decision, Faults};
use crate::trace::Op;

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
    /// Bytes of the objects a listing page returned, or of the keys a delete removed as the
    /// listings relayed before it gave them (see [`ListedSizes`]), or of a put's or a get's
    /// body.
    pub bytes: u64,
    /// From the request's arrival to the end of the reply.
    pub duration_ns: u64,
    /// Of it, the delay a fault rule added.
    pub injected_ns: u64,
    /// A fault rule answered it (`status=`) or cut its reply (`cut`).
    pub injected: bool,
    /// The process that sent it, when the recorder could tell (a client on this host).
    pub pid: u32,
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
        rec.offset = self.bytes;
        rec.errno = self.errno();
        rec.pid = self.pid;
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
    pub fn from_endpoint(endpoint: &str) -> Result<Upstream> {
        // Every message below names the endpoint; a password in it is never shown.
        let url = &*crate::redact::redact(endpoint);
        let rest = match endpoint.strip_prefix("http://") {
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
        if authority.contains('@') {
            bail!(
                "S3 endpoint {url:?} carries a user or password: S3 does not take them from \
                 the URL; give the server's address alone"
            );
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
            sizes: Default::default(),
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
    sizes: std::sync::Mutex<ListedSizes>,
}

/// Listing pages whose objects' sizes are kept for the deletes after them: a GC deletes a
/// key within 100 keys or 5 minutes of listing it (format document 3.7), some pages later at
/// most; 64 pages are 64,000 keys, a few MiB.
const LISTED_PAGES_KEPT: usize = 64;

/// The sizes of the objects the last listing pages returned, so that a delete's record says
/// how many bytes it freed (a `DeleteObjects` request names keys, not sizes).
#[derive(Default)]
struct ListedSizes {
    by_key: hashbrown::HashMap<Box<[u8]>, u64>,
    pages: std::collections::VecDeque<Vec<Box<[u8]>>>,
}

impl ListedSizes {
    /// Keeps the sizes of a page's objects, forgetting the oldest page's beyond
    /// [`LISTED_PAGES_KEPT`].
    fn learn(&mut self, objects: &[(&[u8], u64)]) {
        if self.pages.len() == LISTED_PAGES_KEPT {
            for k in self.pages.pop_front().unwrap_or_default() {
                self.by_key.remove(&k);
            }
        }
        let mut page = Vec::with_capacity(objects.len());
        for &(k, size) in objects {
            let k: Box<[u8]> = k.into();
            self.by_key.insert(k.clone(), size);
            page.push(k);
        }
        self.pages.push_back(page);
    }

    /// The bytes of `keys`, deleted (each known one forgotten).
    fn deleted<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]>) -> u64 {
        keys.filter_map(|k| self.by_key.remove(k)).sum()
    }
}

impl Relay {
    fn serve_client(&self, client: TcpStream) -> io::Result<()> {
        client.set_nodelay(true)?;
        let pid = caller_of(&client).unwrap_or(0);
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
                    // The target of a presigned request holds its signature: never shown.
                    tracing::warn!(
                        "{} {}: the S3 server {} failed: {e}",
                        head.method,
                        crate::redact::redact(&head.target),
                        self.upstream.authority
                    );
                    upstream = None;
                    (bad_gateway(&e), true)
                }
            };
            let mut recorded = S3Request {
                duration_ns: t0.elapsed().as_nanos() as u64,
                injected: dec.status != 0 || dec.cut,
                pid,
                ..completed(recorded, &reply)
            };
            recorded.bytes = self.bytes_of(&recorded, &reply, dec.cut);
            if let Err(e) = self.sink.record(&recorded) {
                self.counters.lost.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "a record of {} was lost: {e:#}",
                    crate::redact::redact(&head.target)
                );
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

    /// The bytes of `r` (see [`S3Request::bytes`]), learning a listing's sizes unless its
    /// reply was `cut` (the client never saw it).
    fn bytes_of(&self, r: &S3Request, reply: &Message, cut: bool) -> u64 {
        if !(200..300).contains(&r.status) {
            return 0;
        }
        match r.op {
            Op::S3List => {
                let objects: Vec<(&[u8], u64)> = listed_objects(&reply.body).collect();
                if !cut {
                    self.sizes.lock().expect("sizes").learn(&objects);
                }
                objects.iter().map(|o| o.1).sum()
            }
            Op::S3Delete => {
                let mut sizes = self.sizes.lock().expect("sizes");
                if r.arg == 1 && !reply.body.windows(9).any(|w| w == b"<Deleted>") {
                    // `DeleteObject` of one key: its name.
                    sizes.deleted(std::iter::once(&r.name[..]))
                } else {
                    sizes
                        .deleted(elements(&reply.body, "Deleted").filter_map(|d| element(d, "Key")))
                }
            }
            Op::S3Put | Op::S3Get => r.arg,
            _ => 0,
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

/// The process on this host at the other end of `conn`: its socket's inode from
/// `/proc/net/tcp` (or `tcp6`), then the process holding a descriptor of that socket. Once a
/// connection (a client keeps its connections); `None` for a client elsewhere, or one this
/// process may not see.
fn caller_of(conn: &TcpStream) -> Option<u32> {
    let (ours, theirs) = (conn.local_addr().ok()?, conn.peer_addr().ok()?);
    if !theirs.ip().is_loopback() && theirs.ip() != ours.ip() {
        return None;
    }
    let table = match theirs {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    // The client's socket: local address theirs, remote address ours.
    let inode = socket_inode(&std::fs::read_to_string(table).ok()?, theirs, ours)?;
    let wanted = format!("socket:[{inode}]");
    for proc_entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = proc_entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc_entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

/// An address as `/proc/net/tcp` writes it: `0100007F:1F90` (IPv4: the address's four
/// bytes as one native-endian word, the port big-endian), IPv6 as four such words.
fn proc_net_address(a: SocketAddr) -> String {
    let words: Vec<u32> = match a.ip() {
        std::net::IpAddr::V4(ip) => vec![u32::from_ne_bytes(ip.octets())],
        std::net::IpAddr::V6(ip) => ip
            .octets()
            .chunks(4)
            .map(|c| u32::from_ne_bytes(c.try_into().expect("4 bytes")))
            .collect(),
    };
    let hex: String = words.iter().map(|w| format!("{w:08X}")).collect();
    format!("{hex}:{:04X}", a.port())
}

/// The inode of the socket from `local` to `remote` in a `/proc/net/tcp` table.
fn socket_inode(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    let (l, r) = (proc_net_address(local), proc_net_address(remote));
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&l.as_str()) && f.get(2) == Some(&r.as_str()))
            .then(|| f.get(9)?.parse().ok())
            .flatten()
    })
}

fn bad_gateway(e: &io::Error) -> Message {
    let body = format!("chunkscope s3-record: the S3 server failed: {e}\n").into_bytes();
    made_reply("502 Bad Gateway", "text/plain", body, true)
}

/// A reply the recorder makes itself: `status` ("503 Slow Down"), its body, whether the
/// connection closes after it.
fn made_reply(status: &str, content_type: &str, body: Vec<u8>, close: bool) -> Message {
    let connection = if close { "connection: close\r\n" } else { "" };
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
         {connection}\r\n",
        body.len()
    )
    .into_bytes();
    Message {
        head,
        raw_body: body.clone(),
        body,
        close,
    }
}

/// Occurrences of `needle` in `hay`.
fn count(hay: &[u8], needle: &[u8]) -> u64 {
    hay.windows(needle.len()).filter(|w| *w == needle).count() as u64
}

/// The text of the first `<tag>...</tag>` in `xml`.
fn element<'x>(xml: &'x [u8], tag: &str) -> Option<&'x [u8]> {
    elements(xml, tag).next()
}

/// The text of each `<tag>...</tag>` in `xml`, in order.
fn elements<'x>(xml: &'x [u8], tag: &str) -> impl Iterator<Item = &'x [u8]> + 'x {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut rest = xml;
    std::iter::from_fn(move || {
        let start = rest
            .windows(open.len())
            .position(|w| w == open.as_bytes())?
            + open.len();
        let len = rest[start..]
            .windows(close.len())
            .position(|w| w == close.as_bytes())?;
        let text = &rest[start..start + len];
        rest = &rest[start + len + close.len()..];
        Some(text)
    })
}

/// The key and size of each object a `ListObjectsV2` reply lists.
fn listed_objects(xml: &[u8]) -> impl Iterator<Item = (&[u8], u64)> {
    elements(xml, "Contents").filter_map(|c| {
        let size = std::str::from_utf8(element(c, "Size")?)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Some((element(c, "Key")?, size))
    })
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
        bytes: 0,
        duration_ns: 0,
        injected_ns: 0,
        injected: false,
        pid: 0,
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
    made_reply(
        &format!("{status} {reason}"),
        "application/xml",
        body,
        false,
    )
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

    /// A request (method, target, its body, the reply's body) and what it is recorded as
    /// (operation, name, arg).
    type Case<'a> = (&'a str, &'a str, &'a [u8], &'a [u8], Op, &'a [u8], u64);

    #[test]
    fn requests_are_told_apart_by_method_path_and_query() {
        let cases: [Case; 7] = [
            (
                "GET",
                "/store?list-type=2&prefix=.chunks%2F&continuation-token=x",
                b"",
                b"<ListBucketResult><KeyCount>3</KeyCount><Contents><Key>a</Key></Contents></ListBucketResult>",
                Op::S3List,
                b".chunks/",
                3,
            ),
            (
                "POST",
                "/store?delete",
                b"<Delete><Object><Key>.chunks/0000/00aa</Key></Object><Object><Key>.chunks/0000/00ab</Key></Object></Delete>",
                b"",
                Op::S3Delete,
                b".chunks/0000/00aa",
                2,
            ),
            ("PUT", "/store/.cnt/vm/100/x.fidx", b"12345", b"", Op::S3Put, b".cnt/vm/100/x.fidx", 5),
            ("GET", "/store/.chunks/0000/00aa?X-Amz-Signature=1", b"", b"abc", Op::S3Get, b".chunks/0000/00aa", 3),
            ("HEAD", "/store", b"", b"", Op::S3Head, b"", 0),
            ("PUT", "/store", b"", b"", Op::S3Other, b"", 0),
            ("DELETE", "/store/.in-use", b"", b"", Op::S3Delete, b".in-use", 1),
        ];
        for (method, target, req, reply, op, name, arg) in cases {
            let r = classified(method, target, req, reply);
            assert_eq!(
                (r.op, &r.name[..], r.arg),
                (op, name, arg),
                "{method} {target}"
            );
        }
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
    fn a_loopback_client_is_found_by_its_socket() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
             0: 0100007F:95BF 0100007F:2384 01 00000000:00000000 00:00000000 00000000     0        0 765045 1 0 20 4 30 10 -1\n";
        let client: SocketAddr = "127.0.0.1:38335".parse().unwrap();
        let server: SocketAddr = "127.0.0.1:9092".parse().unwrap();
        assert_eq!(proc_net_address(client), "0100007F:95BF");
        assert_eq!(socket_inode(table, client, server), Some(765045));
        assert_eq!(socket_inode(table, server, client), None, "the other end");
        // This test's own connection: the caller is this process.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _out = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (conn, _) = listener.accept().unwrap();
        assert_eq!(caller_of(&conn), Some(std::process::id()));
    }

    /// A listing's objects are read with their sizes; a delete's record gets the bytes of the
    /// keys the server says it deleted, as the listings before it gave them, each once; the
    /// oldest page's sizes go after 64 pages.
    #[test]
    fn deletes_are_counted_in_the_bytes_their_listings_gave() {
        let page = b"<ListBucketResult><KeyCount>2</KeyCount>\
            <Contents><Key>.chunks/0000/a</Key><LastModified>x</LastModified><Size>100</Size></Contents>\
            <Contents><Key>.chunks/0000/b</Key><Size> 23 </Size></Contents></ListBucketResult>";
        let listed: Vec<_> = listed_objects(page).collect();
        assert_eq!(
            listed,
            [(&b".chunks/0000/a"[..], 100), (&b".chunks/0000/b"[..], 23)]
        );
        let mut sizes = ListedSizes::default();
        sizes.learn(&listed);
        let reply = b"<DeleteResult><Deleted><Key>.chunks/0000/a</Key></Deleted>\
            <Error><Key>.chunks/0000/b</Key><Code>AccessDenied</Code></Error>\
            <Deleted><Key>.chunks/0000/z</Key></Deleted></DeleteResult>";
        let deleted = elements(reply, "Deleted").filter_map(|d| element(d, "Key"));
        assert_eq!(
            sizes.deleted(deleted),
            100,
            "a, not b (failed) nor z (never listed)"
        );
        assert_eq!(
            sizes.deleted([&b".chunks/0000/a"[..]].into_iter()),
            0,
            "once"
        );
        for i in 0..LISTED_PAGES_KEPT {
            let key = format!("k{i}");
            sizes.learn(&[(key.as_bytes(), 1)]);
        }
        assert_eq!(
            sizes.deleted([&b".chunks/0000/b"[..]].into_iter()),
            0,
            "forgotten"
        );
        assert_eq!(sizes.deleted([&b"k1"[..]].into_iter()), 1);
    }

    #[test]
    fn statuses_map_to_errnos() {
        let r = |status| S3Request {
            op: Op::S3Get,
            name: vec![],
            status,
            arg: 0,
            bytes: 0,
            duration_ns: 0,
            injected_ns: 0,
            injected: false,
            pid: 0,
        };
        assert_eq!(r(200).errno(), 0);
        assert_eq!(r(204).errno(), 0);
        assert_eq!(r(403).errno(), libc::EACCES);
        assert_eq!(r(503).errno(), libc::EAGAIN);
        assert_eq!(r(500).errno(), libc::EIO);
        assert_eq!(r(400).errno(), libc::EINVAL);
    }
}
