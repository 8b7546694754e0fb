//! A bucket as an admin names it: the conventions of the AWS CLI and of PBS's S3 endpoints.

use std::fmt;

use anyhow::{bail, Context, Result};

/// How the bucket's name goes into a request's URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addressing {
    /// `ENDPOINT/BUCKET/KEY`: what self-hosted servers (MinIO, Ceph RGW, Garage) and PBS's
    /// `path-style` option use.
    Path,
    /// `BUCKET.ENDPOINT/KEY`: AWS's default.
    VirtualHost,
}

/// Where a datastore's objects live, and who we are to the server.
#[derive(Clone)]
pub struct Target {
    /// `http(s)://host[:port]`, no bucket in it.
    pub endpoint: String,
    /// The bucket's name.
    pub bucket: String,
    /// The region requests are signed for.
    pub region: String,
    /// Path-style or virtual-hosted-style URLs.
    pub addressing: Addressing,
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key: String,
    /// `AWS_SECRET_ACCESS_KEY` (never printed).
    pub secret_key: String,
    /// `AWS_SESSION_TOKEN`, for temporary credentials.
    pub session_token: Option<String>,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("addressing", &self.addressing)
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for Target {
    /// `s3://BUCKET at ENDPOINT`, as messages name it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{} at {}", self.bucket, self.endpoint)
    }
}

/// What the command line gave; the rest comes from the environment.
#[derive(Clone, Debug, Default)]
pub struct TargetArgs {
    /// `--s3-endpoint`.
    pub endpoint: Option<String>,
    /// `--s3-bucket`.
    pub bucket: Option<String>,
    /// `--s3-region`.
    pub region: Option<String>,
    /// `--s3-path-style=true|false`.
    pub path_style: Option<bool>,
}

impl Target {
    /// The target from `args`, then the environment as the AWS CLI reads it:
    /// `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, `AWS_REGION` or `AWS_DEFAULT_REGION`
    /// (default `us-east-1`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`.
    /// Without an endpoint it is AWS's own for the region. Addressing is path-style with an
    /// endpoint of one's own (what self-hosted servers expect), virtual-hosted on AWS, unless
    /// `--s3-path-style` says otherwise.
    pub fn resolve(args: &TargetArgs, env: impl Fn(&str) -> Option<String>) -> Result<Target> {
        let nonempty = |name: &str| env(name).filter(|v| !v.is_empty());
        let bucket = match &args.bucket {
            Some(b) => b.clone(),
            None => bail!("no bucket: give --s3-bucket NAME"),
        };
        check_bucket_name(&bucket)?;
        let region = args
            .region
            .clone()
            .or_else(|| nonempty("AWS_REGION"))
            .or_else(|| nonempty("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".to_string());
        let own = args
            .endpoint
            .clone()
            .or_else(|| nonempty("AWS_ENDPOINT_URL_S3"))
            .or_else(|| nonempty("AWS_ENDPOINT_URL"));
        let (endpoint, default_addressing) = match own {
            Some(e) => (e, Addressing::Path),
            None => (
                format!("https://s3.{region}.amazonaws.com"),
                Addressing::VirtualHost,
            ),
        };
        let endpoint = endpoint.trim_end_matches('/').to_string();
        // Every message below names the endpoint; a password in it is never shown.
        let shown = crate::redact::redact(&endpoint).into_owned();
        let url: url::Url = endpoint
            .parse()
            .with_context(|| format!("S3 endpoint {shown:?} is not a URL"))?;
        if !url.username().is_empty() || url.password().is_some() {
            bail!(
                "S3 endpoint {shown:?} carries a user or password: S3 does not take them from \
                 the URL (they would be shown wherever the endpoint is); give the server's \
                 address alone and the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            );
        }
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            bail!("S3 endpoint {shown:?}: give it as http://HOST[:PORT] or https://HOST[:PORT]");
        }
        if url.path() != "/" || url.query().is_some() {
            bail!(
                "S3 endpoint {shown:?} has a path; give the server's address alone and the \
                 bucket with --s3-bucket"
            );
        }
        let addressing = match args.path_style {
            Some(true) => Addressing::Path,
            Some(false) => Addressing::VirtualHost,
            None => default_addressing,
        };
        let (Some(access_key), Some(secret_key)) = (
            nonempty("AWS_ACCESS_KEY_ID"),
            nonempty("AWS_SECRET_ACCESS_KEY"),
        ) else {
            bail!(
                "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
                 AWS_SESSION_TOKEN for temporary ones) for {}",
                Target::describe(&bucket, &endpoint)
            );
        };
        Ok(Target {
            endpoint,
            bucket,
            region,
            addressing,
            access_key,
            secret_key,
            session_token: nonempty("AWS_SESSION_TOKEN"),
        })
    }

    fn describe(bucket: &str, endpoint: &str) -> String {
        format!("s3://{bucket} at {endpoint}")
    }
}

/// S3's rules for bucket names, so that a typo is said before a request fails obscurely.
fn check_bucket_name(name: &str) -> Result<()> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    let ok_ends = name
        .bytes()
        .next()
        .zip(name.bytes().last())
        .is_some_and(|(a, z)| a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric());
    if !(3..=63).contains(&name.len()) || !ok_chars || !ok_ends {
        bail!(
            "bucket name {name:?} is not valid: 3 to 63 lowercase letters, digits, '-' or '.', \
             starting and ending with a letter or digit"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn args(bucket: &str) -> TargetArgs {
        TargetArgs {
            bucket: Some(bucket.into()),
            ..TargetArgs::default()
        }
    }

    const KEYS: [(&str, &str); 2] = [
        ("AWS_ACCESS_KEY_ID", "ak"),
        ("AWS_SECRET_ACCESS_KEY", "hush-hush"),
    ];

    #[test]
    fn an_endpoint_of_one_s_own_is_path_style_and_aws_is_virtual_hosted() {
        let mut vars = KEYS.to_vec();
        vars.push(("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"));
        let t = Target::resolve(&args("pbs"), env(&vars)).unwrap();
        assert_eq!(t.endpoint, "http://127.0.0.1:9000");
        assert_eq!(t.addressing, Addressing::Path);
        assert_eq!(t.region, "us-east-1");
        vars.push(("AWS_ENDPOINT_URL_S3", "http://s3.local:7480"));
        vars.push(("AWS_DEFAULT_REGION", "eu-central-1"));
        let t = Target::resolve(&args("pbs"), env(&vars)).unwrap();
        assert_eq!(t.endpoint, "http://s3.local:7480", "the S3 variable wins");
        assert_eq!(t.region, "eu-central-1");
        let t = Target::resolve(&args("pbs"), env(&KEYS)).unwrap();
        assert_eq!(t.endpoint, "https://s3.us-east-1.amazonaws.com");
        assert_eq!(t.addressing, Addressing::VirtualHost);
        let a = TargetArgs {
            path_style: Some(true),
            region: Some("ap-south-1".into()),
            ..args("pbs")
        };
        let t = Target::resolve(&a, env(&KEYS)).unwrap();
        assert_eq!(t.addressing, Addressing::Path);
        assert_eq!(t.endpoint, "https://s3.ap-south-1.amazonaws.com");
    }

    #[test]
    fn what_is_missing_or_wrong_is_named() {
        let e = Target::resolve(&args("pbs"), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("AWS_ACCESS_KEY_ID") && e.contains("s3://pbs"),
            "{e}"
        );
        let e = Target::resolve(&TargetArgs::default(), env(&KEYS)).unwrap_err();
        assert!(e.to_string().contains("--s3-bucket"), "{e}");
        let e = Target::resolve(&args("Bad_Name"), env(&KEYS)).unwrap_err();
        assert!(e.to_string().contains("\"Bad_Name\" is not valid"), "{e}");
        for bad in ["ftp://h", "http://h:9000/pbs", "not a url"] {
            let a = TargetArgs {
                endpoint: Some(bad.into()),
                ..args("pbs")
            };
            let e = Target::resolve(&a, env(&KEYS)).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        let t = Target::resolve(&args("pbs"), env(&KEYS)).unwrap();
        assert!(
            !format!("{t:?}").contains("hush"),
            "the secret is never printed"
        );
    }
}
