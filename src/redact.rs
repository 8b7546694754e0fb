//! Secrets kept out of what chunkscope shows: a presigned S3 request's signature and
//! credential, a session token, and the user and password of a URL (`http://user:pw@host`).
//! A presigned URL is a bearer token until it expires (an hour for PBS's): anyone holding
//! the line of a log could replay it, with another body for a `DeleteObjects`.
//!
//! [`redact`] is applied where such text can come from (an endpoint given by an admin, a
//! request target relayed by `s3-record`, an HTTP library's error), and again to every
//! diagnostic line and final error the binary writes.

use std::borrow::Cow;

/// Query parameters whose values are secrets or sign a request (SigV4 and SigV2 presigned
/// URLs), compared without case.
const SECRET_PARAMS: [&str; 5] = [
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "signature",
    "awsaccesskeyid",
];

/// What stands for a secret that was taken out.
pub const HIDDEN: &str = "***";

/// `text` with every secret parameter's value (`X-Amz-Signature=...` up to the next `&`,
/// space, quote or end) and every URL's userinfo (`//user:pw@` → `//***@`) replaced by
/// `***`. Text without either is returned as it is, without a copy.
pub fn redact(text: &str) -> Cow<'_, str> {
    if !needs_redaction(text) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if let Some(skip) = secret_param_at(text, i) {
            out.push_str(&text[i..i + skip]);
            out.push_str(HIDDEN);
            i += skip;
            while i < bytes.len() && !is_value_end(bytes[i]) {
                i += 1;
            }
            continue;
        }
        if let Some(userinfo) = userinfo_at(text, i) {
            out.push_str("//");
            out.push_str(HIDDEN);
            out.push('@');
            i += userinfo;
            continue;
        }
        let ch = text[i..].chars().next().expect("i is on a char boundary");
        out.push(ch);
        i += ch.len_utf8();
    }
    Cow::Owned(out)
}

/// Whether `text` holds a secret parameter or a URL's userinfo (no allocation: every line a
/// command logs passes here).
fn needs_redaction(text: &str) -> bool {
    let b = text.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        (c == b'='
            && SECRET_PARAMS.iter().any(|p| {
                i >= p.len()
                    && text.is_char_boundary(i - p.len())
                    && secret_param_at(text, i - p.len()).is_some()
            }))
            || (c == b':'
                && b.get(i + 1..i + 3) == Some(b"//")
                && userinfo_at(text, i + 1).is_some())
    })
}

/// At `i`, a secret parameter's name and `=` after `?`, `&` or `;`: their length.
fn secret_param_at(text: &str, i: usize) -> Option<usize> {
    if i > 0 && !matches!(text.as_bytes()[i - 1], b'?' | b'&' | b';') {
        return None;
    }
    let rest = text.get(i..)?;
    SECRET_PARAMS.iter().find_map(|p| {
        let name = rest.get(..p.len())?;
        (name.eq_ignore_ascii_case(p) && rest.as_bytes().get(p.len()) == Some(&b'='))
            .then_some(p.len() + 1)
    })
}

/// At `i`, `//USERINFO@` of a URL (after a scheme's `:`): the length up to and with the `@`.
fn userinfo_at(text: &str, i: usize) -> Option<usize> {
    let rest = text.get(i..)?;
    if !rest.starts_with("//") || i == 0 || text.as_bytes()[i - 1] != b':' {
        return None;
    }
    let authority_end = rest[2..]
        .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace() || c == '"')
        .map_or(rest.len(), |e| e + 2);
    let at = rest[2..authority_end].rfind('@')? + 2;
    Some(at + 1)
}

fn is_value_end(b: u8) -> bool {
    matches!(
        b,
        b'&' | b' ' | b'"' | b'\'' | b'\n' | b'\t' | b'>' | b'<' | b')'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presigned_urls_lose_their_signature_and_credential() {
        let url = "GET /pbs/?list-type=2&prefix=.chunks%2F&X-Amz-Algorithm=AWS4-HMAC-SHA256\
                   &X-Amz-Credential=AKIDEXAMPLE%2F20261207%2Fus-east-1%2Fs3%2Faws4_request\
                   &X-Amz-Date=20261207T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host\
                   &X-Amz-Signature=0123456789abcdef HTTP/1.1";
        let r = redact(url);
        assert!(
            !r.contains("AKIDEXAMPLE") && !r.contains("0123456789abcdef"),
            "{r}"
        );
        assert!(r.contains("X-Amz-Signature=***") && r.contains("X-Amz-Credential=***"));
        assert!(
            r.contains("prefix=.chunks%2F") && r.ends_with(" HTTP/1.1"),
            "{r}"
        );
        let token = "x?x-amz-security-token=SESSION&a=b";
        assert_eq!(redact(token), "x?x-amz-security-token=***&a=b");
        let v2 = "/b/k?AWSAccessKeyId=AK&Signature=abc%3D&Expires=1";
        assert_eq!(
            redact(v2),
            "/b/k?AWSAccessKeyId=***&Signature=***&Expires=1"
        );
    }

    #[test]
    fn a_url_s_user_and_password_are_hidden() {
        assert_eq!(
            redact("S3 endpoint \"http://user:SECRET@127.0.0.1:9000\" failed"),
            "S3 endpoint \"http://***@127.0.0.1:9000\" failed"
        );
        assert_eq!(
            redact("https://a@b@host/x?y"),
            "https://***@host/x?y",
            "the last @ of the authority ends the userinfo"
        );
        // An @ after the authority (a key, a mail address) is no userinfo.
        assert_eq!(
            redact("http://host/key@x and a@b"),
            "http://host/key@x and a@b"
        );
    }

    #[test]
    fn text_without_secrets_is_not_copied() {
        for t in [
            "s3://pbs at http://127.0.0.1:9000",
            "signature of chunk x",
            "",
        ] {
            assert!(matches!(redact(t), Cow::Borrowed(_)), "{t}");
        }
    }
}
