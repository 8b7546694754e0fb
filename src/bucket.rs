//! A bucket as a GC sees it: the object layout of PBS 4's S3 datastores (`pbs-format.md`
//! §3.7), the two requests the GC makes of a bucket and what they answer. The S3 client
//! ([`crate::s3`], feature `s3`) is one; a test or a simulation may be another.

use std::fmt;

use crate::datastore::Digest;

/// Key prefix of chunk objects (`.chunks/XXXX/<digest>`).
pub const CHUNK_PREFIX: &str = ".chunks/";
/// Key prefix of every other file of the datastore (`.cnt/<relative path>`).
pub const CONTENT_PREFIX: &str = ".cnt/";
/// The object that says a datastore uses the bucket (`{"hostname": ...}`).
pub const IN_USE_KEY: &str = ".in-use";
/// Keys a `ListObjectsV2` page holds at most (the S3 default; PBS asks for it).
pub const LIST_PAGE_KEYS: usize = 1000;
/// Keys a `DeleteObjects` batch holds before PBS sends it (`S3_DELETE_BATCH_LIMIT`).
pub const DELETE_BATCH_KEYS: usize = 100;
/// Seconds the oldest queued key waits at most before PBS sends the batch
/// (`S3_DELETE_DEFER_LIMIT_SECONDS`).
pub const DELETE_DEFER_SECS: u64 = 300;

/// What a chunk object's key names: a chunk (`.chunks/XXXX/<hex>`) or a bad copy
/// (`.chunks/XXXX/<hex>.N.bad`); any other key is no chunk's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectName {
    /// `<hex>`.
    Chunk(Digest),
    /// `<hex>.N.bad`.
    Bad(Digest),
}

impl ObjectName {
    /// The object at `key`, if `key` is the canonical key of a chunk or a bad copy:
    /// `.chunks/XXXX/<digest>` or `.chunks/XXXX/<digest>.N.bad`, the digest in lowercase hex
    /// and `XXXX` its first four characters, as PBS writes them. Any other key under
    /// `.chunks/` (another directory, uppercase hex, another suffix) is no chunk's object:
    /// neither proof that a chunk exists nor garbage a GC may delete.
    pub fn from_key(key: &str) -> Option<ObjectName> {
        let rest = key.strip_prefix(CHUNK_PREFIX)?.as_bytes();
        let (dir, base) = (rest.get(..4)?, rest.get(5..)?);
        if rest[4] != b'/' || base.get(..4)? != dir {
            return None;
        }
        let digest = Digest::from_lowercase_hex(base.get(..64)?)?;
        match &base[64..] {
            [] => Some(ObjectName::Chunk(digest)),
            [b'.', n, b'.', b'b', b'a', b'd'] if n.is_ascii_digit() => {
                Some(ObjectName::Bad(digest))
            }
            _ => None,
        }
    }

    /// Its chunk's digest.
    pub fn digest(self) -> Digest {
        match self {
            ObjectName::Chunk(d) | ObjectName::Bad(d) => d,
        }
    }
}

/// The object key of a datastore-relative path that is not a chunk (a chunk's key is its
/// relative path, `.chunks/XXXX/<hex>[.N.bad]`).
pub fn content_key(rel: &str) -> String {
    format!("{CONTENT_PREFIX}{rel}")
}

/// A request the server answered with an error, or that did not get an answer.
#[derive(Debug)]
pub struct S3Error {
    /// The operation (`ListObjectsV2`, `DeleteObjects`, ...).
    pub op: &'static str,
    /// The key or prefix it was about.
    pub what: String,
    /// The HTTP status, 0 when there was no response.
    pub status: u16,
    /// S3's error code (`SlowDown`, `NoSuchBucket`, ...) or the transport's error.
    pub code: String,
    /// S3's message, if it sent one.
    pub message: String,
}

impl fmt::Display for S3Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: ", self.op, self.what)?;
        if self.status == 0 {
            write!(f, "no response ({})", self.code)
        } else if self.message.is_empty() {
            write!(f, "HTTP {} {}", self.status, self.code)
        } else {
            write!(f, "HTTP {} {}: {}", self.status, self.code, self.message)
        }
    }
}

impl std::error::Error for S3Error {}

/// One object of a listing page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
}

/// One `ListObjectsV2` page.
#[derive(Clone, Debug, Default)]
pub struct ListPage {
    /// The objects, in key order.
    pub objects: Vec<Listed>,
    /// The continuation token of the next page, `None` on the last.
    pub next: Option<String>,
}

/// A bucket's listing under a prefix, page by page, each page checked as it comes: a
/// server that answers with a page that does not advance (empty, yet more to follow; the
/// continuation token it was asked with), a key out of order or listed before, or a key
/// outside the prefix, ends the listing with an error naming its reply. Otherwise a lying or
/// broken server could keep a GC listing forever, or have it delete one key many times.
pub struct Listing<'a, B: Bucket + ?Sized> {
    bucket: &'a B,
    prefix: String,
    page_keys: usize,
    token: Option<String>,
    last_key: Option<String>,
    pages: u64,
    done: bool,
}

impl<'a, B: Bucket + ?Sized> Listing<'a, B> {
    /// The listing of `bucket` under `prefix`, `page_keys` keys a page.
    pub fn new(bucket: &'a B, prefix: &str, page_keys: usize) -> Self {
        Listing {
            bucket,
            prefix: prefix.to_string(),
            page_keys,
            token: None,
            last_key: None,
            pages: 0,
            done: false,
        }
    }

    /// The next page, `None` after the last.
    pub fn next_page(&mut self) -> Result<Option<ListPage>, S3Error> {
        if self.done {
            return Ok(None);
        }
        let page = self
            .bucket
            .list_page(&self.prefix, self.token.as_deref(), self.page_keys)?;
        self.pages += 1;
        let n = self.pages;
        let broken = |why: String| S3Error {
            op: "ListObjectsV2",
            what: self.prefix.clone(),
            status: 200,
            code: "BrokenListing".into(),
            message: format!("page {n} of the server's listing {why}: stopped"),
        };
        // Each key after the one before it (the previous page's last for the first): one
        // comparison a key, and one copy a page.
        let mut before = self.last_key.as_deref();
        for o in &page.objects {
            if !o.key.starts_with(&self.prefix) {
                return Err(broken(format!(
                    "holds {:?}, outside the prefix asked for",
                    shown(&o.key)
                )));
            }
            if let Some(last) = before.filter(|last| o.key.as_str() <= *last) {
                return Err(broken(format!(
                    "holds {:?} after {:?}: out of order, or listed before",
                    shown(&o.key),
                    shown(last)
                )));
            }
            before = Some(&o.key);
        }
        if let Some(last) = page.objects.last() {
            self.last_key = Some(last.key.clone());
        }
        match &page.next {
            None => self.done = true,
            Some(_) if page.objects.is_empty() => {
                return Err(broken(
                    "is empty, yet says more follow: it does not advance".to_string(),
                ))
            }
            Some(t) if Some(t) == self.token.as_ref() => {
                return Err(broken(format!(
                    "gives back the continuation token it was asked with ({:?}): it does not \
                     advance",
                    shown(t)
                )))
            }
            Some(t) => self.token = Some(t.clone()),
        }
        Ok(Some(page))
    }
}

/// At most 100 characters of what a server sent, for a message.
fn shown(s: &str) -> String {
    match s.char_indices().nth(100) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// What a `DeleteObjects` request did, key by key.
#[derive(Clone, Debug, Default)]
pub struct DeleteOutcome {
    /// Keys the server says it deleted.
    pub deleted: Vec<String>,
    /// Keys it did not delete, with S3's error code and message.
    pub errors: Vec<(String, String, String)>,
}

/// What a GC asks of a bucket.
pub trait Bucket {
    /// The bucket, for messages (`s3://BUCKET at ENDPOINT`).
    fn describe(&self) -> String;
    /// Whether the bucket is there and ours (PBS's `HEAD bucket` before a GC).
    fn head(&self) -> Result<(), S3Error>;
    /// One `ListObjectsV2` page: keys under `prefix` after `token`, at most `max_keys`.
    fn list_page(
        &self,
        prefix: &str,
        token: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, S3Error>;
    /// One `DeleteObjects` request for `keys`.
    fn delete(&self, keys: &[String]) -> Result<DeleteOutcome, S3Error>;
    /// `PutObject` of `body` at `key` (the atime check's zero chunk).
    fn put(&self, key: &str, body: &[u8]) -> Result<(), S3Error>;
    /// `GetObject` of `key` (`check --deep` reads each referenced chunk's object). A bucket
    /// that keeps no bodies (the simulator's) answers an error.
    fn get(&self, key: &str) -> Result<Vec<u8>, S3Error> {
        Err(S3Error {
            op: "GetObject",
            what: key.to_string(),
            status: 0,
            code: "NotServed".into(),
            message: format!("{} keeps no object bodies", self.describe()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    const HEX: &str = "00ab34567890abcdef1234567890abcdef1234567890abcdef1234567890abcd";

    #[test]
    fn only_a_chunk_s_canonical_key_names_it() {
        let d = Digest::from_hex_bytes(HEX.as_bytes()).unwrap();
        assert_eq!(
            ObjectName::from_key(&format!(".chunks/00ab/{HEX}")),
            Some(ObjectName::Chunk(d))
        );
        assert_eq!(
            ObjectName::from_key(&format!(".chunks/00ab/{HEX}.0.bad")),
            Some(ObjectName::Bad(d))
        );
        let upper = HEX.to_uppercase();
        for key in [
            format!(".chunks/{HEX}"),
            format!(".chunks/0000/{HEX}"),
            format!(".chunks/00AB/{upper}"),
            format!(".chunks/00ab/{}", &upper),
            format!(".chunks/00ab/{HEX}.x.bad"),
            format!(".chunks/00ab/{HEX}.0.bad.1"),
            format!(".chunks/00ab/{HEX}x"),
            format!(".chunks/00ab//{HEX}"),
            format!(".cnt/00ab/{HEX}"),
            format!(".chunks/00ab/sub/{HEX}"),
        ] {
            assert_eq!(ObjectName::from_key(&key), None, "{key}");
        }
    }

    /// A bucket answering pages from a script: each call the next page.
    struct Scripted(RefCell<Vec<ListPage>>);

    impl Bucket for Scripted {
        fn describe(&self) -> String {
            "scripted".into()
        }
        fn head(&self) -> Result<(), S3Error> {
            Ok(())
        }
        fn list_page(&self, _: &str, _: Option<&str>, _: usize) -> Result<ListPage, S3Error> {
            Ok(self.0.borrow_mut().remove(0))
        }
        fn delete(&self, _: &[String]) -> Result<DeleteOutcome, S3Error> {
            unreachable!()
        }
        fn put(&self, _: &str, _: &[u8]) -> Result<(), S3Error> {
            unreachable!()
        }
    }

    fn page(keys: &[&str], next: Option<&str>) -> ListPage {
        ListPage {
            objects: keys
                .iter()
                .map(|k| Listed {
                    key: k.to_string(),
                    size: 1,
                })
                .collect(),
            next: next.map(str::to_string),
        }
    }

    fn listed(pages: Vec<ListPage>) -> Result<u64, String> {
        let b = Scripted(RefCell::new(pages));
        let mut l = Listing::new(&b, ".chunks/", 2);
        let mut keys = 0;
        loop {
            match l.next_page() {
                Ok(Some(p)) => keys += p.objects.len() as u64,
                Ok(None) => return Ok(keys),
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Issue 63, point 4: a server whose listing does not advance ends it with an error
    /// naming its reply, where a GC looped (2,207 requests in 120 s) and one sent the same key
    /// a hundred times in one delete.
    #[test]
    fn a_listing_that_does_not_advance_is_an_error() {
        let ok = listed(vec![
            page(&[".chunks/a", ".chunks/b"], Some("t1")),
            page(&[".chunks/c"], None),
        ]);
        assert_eq!(ok, Ok(3));
        for (pages, says) in [
            (
                vec![
                    page(&[".chunks/a"], Some("t")),
                    page(&[".chunks/b"], Some("t")),
                ],
                "gives back the continuation token it was asked with",
            ),
            (
                vec![
                    page(&[".chunks/a"], Some("t1")),
                    page(&[".chunks/a"], Some("t2")),
                ],
                "out of order, or listed before",
            ),
            (
                vec![page(&[".chunks/b", ".chunks/a"], None)],
                "out of order, or listed before",
            ),
            (
                vec![page(&[], Some("t1"))],
                "is empty, yet says more follow",
            ),
            (vec![page(&["elsewhere/a"], None)], "outside the prefix"),
        ] {
            let e = listed(pages).unwrap_err();
            assert!(e.contains(says) && e.contains("ListObjectsV2"), "{e}");
        }
    }
}
