//! HTTP/1.1 as the S3 recorder relays it: heads read whole and parsed with httparse, bodies
//! by their length, chunked (kept as sent, decoded beside) or up to the end of the
//! connection; `Expect: 100-continue` answered by the relay; query parameters and paths
//! percent-decoded.

use std::io::{self, BufRead, Read, Write};

/// The largest request or reply head read (S3's are a few hundred bytes).
pub(super) const MAX_HEAD: usize = 64 * 1024;
/// The largest body relayed (a chunk is at most 16 MiB; a listing page about 300 kB).
pub(super) const MAX_BODY: usize = 64 << 20;
/// Headers parsed in a head.
pub(super) const MAX_HEADERS: usize = 64;

/// A request or reply read whole: its head's bytes, parsed, and its body.
pub(super) struct Message {
    pub(super) head: Vec<u8>,
    pub(super) body: Vec<u8>,
    /// The body as sent (chunked: the chunks with their framing).
    pub(super) raw_body: Vec<u8>,
    /// `Connection: close` was asked for.
    pub(super) close: bool,
}

pub(super) struct RequestHead {
    pub(super) method: String,
    pub(super) target: String,
    pub(super) expect_continue: bool,
}

pub(super) fn status_of(head: &[u8]) -> u16 {
    // "HTTP/1.1 200 ..."
    head.get(9..12)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

pub(super) fn bad_data(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Reads a head (up to the blank line) from `r`; `None` at a clean end of the connection.
pub(super) fn read_head(r: &mut impl BufRead) -> io::Result<Option<Vec<u8>>> {
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

pub(super) fn header<'h>(headers: &'h [httparse::Header<'_>], name: &str) -> Option<&'h [u8]> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

pub(super) fn has_token(value: Option<&[u8]>, token: &str) -> bool {
    value.is_some_and(|v| {
        v.split(|&c| c == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// How a message's body is delimited.
pub(super) enum Framing {
    None,
    Length(usize),
    Chunked,
    UntilClose,
}

pub(super) fn framing(headers: &[httparse::Header<'_>], otherwise: Framing) -> io::Result<Framing> {
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
pub(super) fn read_body(r: &mut impl BufRead, f: Framing) -> io::Result<(Vec<u8>, Vec<u8>)> {
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
pub(super) fn read_request(
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
pub(super) fn read_reply(r: &mut impl BufRead, head_only: bool) -> io::Result<Option<Message>> {
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
pub(super) fn percent_decoded(s: &str) -> Vec<u8> {
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
pub(super) fn query_param(query: &str, name: &str) -> Option<Vec<u8>> {
    query.split('&').find_map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        (k == name).then(|| percent_decoded(&v.replace('+', " ")))
    })
}
#[cfg(test)]
mod tests {
    use super::*;

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
