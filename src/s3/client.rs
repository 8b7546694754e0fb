//! The requests a GC and the generator make, one at a time, each signed just before it goes.

use std::io::Read;
use std::time::Duration;

use anyhow::{Context, Result};
use rusty_s3::actions::{DeleteObjectsResponse, ListObjectsV2, ObjectIdentifier};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};

use super::target::{Addressing, Target};
use crate::bucket::{self, DeleteOutcome, ListPage, Listed, S3Error};

/// How long a signed URL stays valid: far longer than one request takes.
const SIGNED_FOR: Duration = Duration::from_secs(3600);
/// A request that has not finished in this time fails (a stuck server, not a slow one).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// The largest response body read (a listing page of 1,000 keys is about 300 kB).
const MAX_BODY: u64 = 64 << 20;

/// A bucket and the HTTP agent that talks to it.
pub struct Client {
    target: Target,
    bucket: Bucket,
    credentials: Credentials,
    agent: ureq::Agent,
}

impl Client {
    /// A client of `target`; nothing is sent yet.
    pub fn new(target: &Target) -> Result<Client> {
        let style = match target.addressing {
            Addressing::Path => UrlStyle::Path,
            Addressing::VirtualHost => UrlStyle::VirtualHost,
        };
        let endpoint = target
            .endpoint
            .parse()
            .with_context(|| format!("S3 endpoint {:?}", target.endpoint))?;
        let bucket = Bucket::new(
            endpoint,
            style,
            target.bucket.clone(),
            target.region.clone(),
        )
        .with_context(|| format!("S3 bucket {target}"))?;
        let credentials = match &target.session_token {
            Some(token) => Credentials::new_with_token(
                target.access_key.clone(),
                target.secret_key.clone(),
                token.clone(),
            ),
            None => Credentials::new(target.access_key.clone(), target.secret_key.clone()),
        };
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(Client {
            target: target.clone(),
            bucket,
            credentials,
            agent,
        })
    }

    /// The bucket this client talks to.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// `HeadBucket`: whether the bucket is there and ours to use (PBS's "failed to reach
    /// bucket" check before a GC).
    pub fn head_bucket(&self) -> Result<(), S3Error> {
        let url = self
            .bucket
            .head_bucket(Some(&self.credentials))
            .sign(SIGNED_FOR);
        let what = self.target.bucket.clone();
        let r = self.send("HeadBucket", &what, self.agent.head(url.as_str()).call())?;
        expect_ok("HeadBucket", &what, r).map(drop)
    }

    /// `CreateBucket`; one that exists already and that we may use is no error (S3 says
    /// `BucketAlreadyOwnedByYou`, other servers `BucketAlreadyExists` even to its owner: a
    /// `HeadBucket` decides).
    pub fn create_bucket(&self) -> Result<(), S3Error> {
        let url = self
            .bucket
            .create_bucket(&self.credentials)
            .sign(SIGNED_FOR);
        let what = self.target.bucket.clone();
        let r = self.send(
            "CreateBucket",
            &what,
            self.agent.put(url.as_str()).send_empty(),
        )?;
        match expect_ok("CreateBucket", &what, r) {
            Err(e) if e.code == "BucketAlreadyOwnedByYou" => Ok(()),
            Err(e) if e.code == "BucketAlreadyExists" => self.head_bucket().map_err(|_| e),
            r => r.map(drop),
        }
    }

    /// `PutObject` of `body` at `key`.
    pub fn put(&self, key: &str, body: &[u8]) -> Result<(), S3Error> {
        let url = self
            .bucket
            .put_object(Some(&self.credentials), key)
            .sign(SIGNED_FOR);
        let r = self.send("PutObject", key, self.agent.put(url.as_str()).send(body))?;
        expect_ok("PutObject", key, r).map(drop)
    }

    /// `GetObject`: the whole object.
    pub fn get(&self, key: &str) -> Result<Vec<u8>, S3Error> {
        let url = self
            .bucket
            .get_object(Some(&self.credentials), key)
            .sign(SIGNED_FOR);
        let r = self.send("GetObject", key, self.agent.get(url.as_str()).call())?;
        expect_ok("GetObject", key, r)
    }

    /// One `ListObjectsV2` page of keys under `prefix`, at most `max_keys`, after `token`.
    pub fn list_page(
        &self,
        prefix: &str,
        token: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, S3Error> {
        let mut action = ListObjectsV2::new(&self.bucket, Some(&self.credentials));
        action.with_prefix(prefix);
        action.with_max_keys(max_keys);
        if let Some(t) = token {
            action.with_continuation_token(t);
        }
        let url = action.sign(SIGNED_FOR);
        let r = self.send("ListObjectsV2", prefix, self.agent.get(url.as_str()).call())?;
        let body = expect_ok("ListObjectsV2", prefix, r)?;
        let text = String::from_utf8_lossy(&body);
        let parsed = ListObjectsV2::parse_response(&text)
            .map_err(|e| malformed("ListObjectsV2", prefix, &e.to_string()))?;
        let mut objects = Vec::with_capacity(parsed.contents.len());
        for c in parsed.contents {
            let size = c
                .size
                .ok_or_else(|| malformed("ListObjectsV2", &c.key, "an object without a size"))?;
            objects.push(Listed { key: c.key, size });
        }
        Ok(ListPage {
            objects,
            next: parsed.next_continuation_token,
        })
    }

    /// Every object under `prefix`, page by page of `page_keys`, each page checked
    /// ([`crate::bucket::Listing`]).
    pub fn list_all(&self, prefix: &str, page_keys: usize) -> Result<Vec<Listed>, S3Error> {
        let mut all = Vec::new();
        let mut listing = crate::bucket::Listing::new(self, prefix, page_keys);
        while let Some(page) = listing.next_page()? {
            all.extend(page.objects);
        }
        Ok(all)
    }

    /// One `DeleteObjects` request for `keys` (at most 1,000), not quiet: the answer names
    /// every key it deleted and every one it did not.
    pub fn delete_batch(&self, keys: &[String]) -> Result<DeleteOutcome, S3Error> {
        let ids: Vec<ObjectIdentifier> = keys
            .iter()
            .map(|k| ObjectIdentifier::new(k.clone()))
            .collect();
        let what = format!("{} keys", keys.len());
        let action = self
            .bucket
            .delete_objects(Some(&self.credentials), ids.iter());
        let url = action.sign(SIGNED_FOR);
        let (body, md5) = action.body_with_md5();
        let req = self
            .agent
            .post(url.as_str())
            .header("Content-MD5", &md5)
            .header("Content-Type", "application/xml");
        let r = self.send("DeleteObjects", &what, req.send(body.as_bytes()))?;
        let body = expect_ok("DeleteObjects", &what, r)?;
        let parsed = DeleteObjectsResponse::parse(&String::from_utf8_lossy(&body))
            .map_err(|e| malformed("DeleteObjects", &what, &e.to_string()))?;
        Ok(DeleteOutcome {
            deleted: parsed.deleted.into_iter().map(|d| d.key).collect(),
            errors: parsed
                .errors
                .into_iter()
                .map(|e| (e.key, e.code, e.message))
                .collect(),
        })
    }

    fn send(
        &self,
        op: &'static str,
        what: &str,
        r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<(u16, Vec<u8>), S3Error> {
        let response = r.map_err(|e| S3Error {
            op,
            what: what.to_string(),
            status: 0,
            // An HTTP library's error may quote the presigned URL it was given.
            code: crate::redact::redact(&format!("{e} from {}", self.target.endpoint)).into_owned(),
            message: String::new(),
        })?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        response
            .into_body()
            .into_reader()
            .take(MAX_BODY)
            .read_to_end(&mut body)
            .map_err(|e| S3Error {
                op,
                what: what.to_string(),
                status,
                code: format!("reading the response: {e}"),
                message: String::new(),
            })?;
        Ok((status, body))
    }
}

fn malformed(op: &'static str, what: &str, why: &str) -> S3Error {
    S3Error {
        op,
        what: what.to_string(),
        status: 200,
        code: "MalformedResponse".into(),
        message: why.to_string(),
    }
}

/// The body of a 2xx answer, or the S3 error in any other.
fn expect_ok(
    op: &'static str,
    what: &str,
    (status, body): (u16, Vec<u8>),
) -> Result<Vec<u8>, S3Error> {
    if (200..300).contains(&status) {
        return Ok(body);
    }
    let text = String::from_utf8_lossy(&body);
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let close = format!("</{name}>");
        text.split_once(open.as_str())
            .and_then(|(_, rest)| rest.split_once(close.as_str()))
            .map(|(v, _)| v.to_string())
    };
    Err(S3Error {
        op,
        what: what.to_string(),
        status,
        code: tag("Code").unwrap_or_else(|| reason(status).to_string()),
        message: tag("Message").unwrap_or_default(),
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "BadRequest",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        _ => "HTTPError",
    }
}

impl bucket::Bucket for Client {
    fn describe(&self) -> String {
        self.target.to_string()
    }

    fn head(&self) -> Result<(), S3Error> {
        self.head_bucket()
    }

    fn list_page(
        &self,
        prefix: &str,
        token: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, S3Error> {
        Client::list_page(self, prefix, token, max_keys)
    }

    fn delete(&self, keys: &[String]) -> Result<DeleteOutcome, S3Error> {
        self.delete_batch(keys)
    }

    fn put(&self, key: &str, body: &[u8]) -> Result<(), S3Error> {
        Client::put(self, key, body)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, S3Error> {
        Client::get(self, key)
    }
}
