//! The options that name a bucket, shared by every command that reads or writes one.

use anyhow::Result;
use clap::Args;

use crate::s3::{Target, TargetArgs};

/// Where an S3 datastore's objects are. Credentials come from `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, as for the AWS CLI.
#[derive(Args, Debug, Clone, Default)]
pub struct S3Args {
    /// The bucket of an S3 datastore (PBS 4).
    #[arg(long, value_name = "NAME")]
    pub s3_bucket: Option<String>,
    /// The S3 server, as http(s)://HOST[:PORT] [default: $AWS_ENDPOINT_URL_S3,
    /// $AWS_ENDPOINT_URL, else AWS's endpoint of the region].
    #[arg(long, value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// The region requests are signed for [default: $AWS_REGION, $AWS_DEFAULT_REGION, else
    /// us-east-1].
    #[arg(long, value_name = "REGION")]
    pub s3_region: Option<String>,
    /// Path-style URLs (ENDPOINT/BUCKET/KEY), as self-hosted servers and PBS's `path-style`
    /// want, or virtual-hosted ones (BUCKET.ENDPOINT/KEY) [default: true with an endpoint of
    /// one's own, false on AWS].
    #[arg(long, value_name = "BOOL")]
    pub s3_path_style: Option<bool>,
}

impl S3Args {
    /// Whether any option names a bucket.
    pub fn given(&self) -> bool {
        self.s3_bucket.is_some()
            || self.s3_endpoint.is_some()
            || self.s3_region.is_some()
            || self.s3_path_style.is_some()
    }

    /// A client of the bucket these options name, `None` when none is named.
    pub fn client(&self) -> Result<Option<crate::s3::Client>> {
        if !self.given() {
            return Ok(None);
        }
        Ok(Some(crate::s3::Client::new(&self.target()?)?))
    }

    /// The bucket, from these options and the environment.
    pub fn target(&self) -> Result<Target> {
        Target::resolve(
            &TargetArgs {
                endpoint: self.s3_endpoint.clone(),
                bucket: self.s3_bucket.clone(),
                region: self.s3_region.clone(),
                path_style: self.s3_path_style,
            },
            |name| std::env::var(name).ok(),
        )
    }
}
