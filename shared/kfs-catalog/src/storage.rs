//! Where bytes live: the warehouse location and the S3 settings (endpoint, region,
//! credentials) read from the standard AWS environment variables, and the Iceberg
//! FileIO built from them.

use iceberg::io::{
    S3_ACCESS_KEY_ID, S3_ENDPOINT, S3_PATH_STYLE_ACCESS, S3_REGION, S3_SECRET_ACCESS_KEY,
    S3_SESSION_TOKEN,
};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where table data and metadata live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warehouse {
    /// A local directory (absolute).
    Local(PathBuf),
    /// `s3://bucket/prefix`.
    S3 {
        /// Bucket.
        bucket: String,
        /// Key prefix, without leading or trailing `/`.
        prefix: String,
    },
}

impl Warehouse {
    /// Parses a directory or an `s3://bucket/prefix` URL.
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some(rest) = text.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!("{text}: no bucket"));
            }
            return Ok(Self::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.trim_matches('/').to_owned(),
            });
        }
        let path = Path::new(text.strip_prefix("file://").unwrap_or(text));
        let absolute = std::path::absolute(path).map_err(|e| format!("{text}: {e}"))?;
        Ok(Self::Local(absolute))
    }

    /// The warehouse location as Iceberg spells it.
    pub fn location(&self) -> String {
        match self {
            Self::Local(path) => format!("file://{}", path.display()),
            Self::S3 { bucket, prefix } if prefix.is_empty() => format!("s3://{bucket}"),
            Self::S3 { bucket, prefix } => format!("s3://{bucket}/{prefix}"),
        }
    }
}

/// S3 settings from the standard AWS environment variables (`Debug` prints neither
/// the secret key nor the session token, and the endpoint without its secrets).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3Settings {
    /// `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`: a custom endpoint (path-style access).
    pub endpoint: Option<String>,
    /// `AWS_REGION` or `AWS_DEFAULT_REGION` (default `us-east-1`).
    pub region: String,
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key_id: Option<String>,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: Option<String>,
    /// `AWS_SESSION_TOKEN`.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |secret: &Option<String>| secret.as_ref().map(|_| "<hidden>");
        f.debug_struct("S3Settings")
            .field(
                "endpoint",
                &self.endpoint.as_deref().map(kfs_plan::secret_url::redact),
            )
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .finish()
    }
}

impl S3Settings {
    /// Reads the environment.
    pub fn from_env() -> Self {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    /// Reads the variables `lookup` returns (empty values count as unset).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Self {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
        Self {
            endpoint: var("AWS_ENDPOINT_URL_S3").or_else(|| var("AWS_ENDPOINT_URL")),
            region: var("AWS_REGION")
                .or_else(|| var("AWS_DEFAULT_REGION"))
                .unwrap_or_else(|| "us-east-1".into()),
            access_key_id: var("AWS_ACCESS_KEY_ID"),
            secret_access_key: var("AWS_SECRET_ACCESS_KEY"),
            session_token: var("AWS_SESSION_TOKEN"),
        }
    }

    /// A FileIO over any supported scheme (`s3://`, `file://`) with these settings.
    pub fn file_io(&self) -> iceberg::io::FileIO {
        iceberg::io::FileIOBuilder::new(Arc::new(OpenDalResolvingStorageFactory::new()))
            .with_props(self.file_io_properties())
            .build()
    }

    /// The FileIO properties these settings give.
    pub fn file_io_properties(&self) -> HashMap<String, String> {
        let mut props = HashMap::from([(S3_REGION.to_owned(), self.region.clone())]);
        if let Some(endpoint) = &self.endpoint {
            props.insert(S3_ENDPOINT.to_owned(), endpoint.clone());
            props.insert(S3_PATH_STYLE_ACCESS.to_owned(), "true".to_owned());
        }
        for (key, value) in [
            (S3_ACCESS_KEY_ID, &self.access_key_id),
            (S3_SECRET_ACCESS_KEY, &self.secret_access_key),
            (S3_SESSION_TOKEN, &self.session_token),
        ] {
            if let Some(value) = value {
                props.insert(key.to_owned(), value.clone());
            }
        }
        props
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_warehouses() {
        assert_eq!(
            Warehouse::parse("s3://bucket/a/b/"),
            Ok(Warehouse::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            })
        );
        assert_eq!(
            Warehouse::parse("s3://bucket").map(|w| w.location()),
            Ok("s3://bucket".into())
        );
        assert_eq!(
            Warehouse::parse("/tmp/wh").map(|w| w.location()),
            Ok("file:///tmp/wh".into())
        );
        assert!(Warehouse::parse("s3:///x").is_err());
    }

    #[test]
    fn s3_settings_never_print_their_secrets() {
        let settings = S3Settings::from_lookup(&|name| match name {
            "AWS_ENDPOINT_URL" => {
                Some("http://minio:s3cr3t-XYZ@minio:9000/?token=s3cr3t-XYZ".into())
            }
            "AWS_SECRET_ACCESS_KEY" | "AWS_SESSION_TOKEN" => Some("s3cr3t-XYZ".into()),
            _ => None,
        });
        let printed = format!("{settings:?}");
        assert!(
            !printed.contains("s3cr3t-XYZ") && printed.contains("minio:9000"),
            "{printed}"
        );
    }
}
