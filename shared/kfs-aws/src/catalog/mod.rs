//! The AWS catalogs (Glue Data Catalog, Amazon S3 Tables) and the one place that opens
//! any configured catalog: the AWS kinds here, every other kind by `kfs-core`. Each
//! AWS catalog is a cargo feature of this crate (`glue`, `s3tables`, both on by
//! default); a build without one refuses that kind with a configuration error.

#[cfg(feature = "glue")]
mod glue;
#[cfg(feature = "s3tables")]
mod s3tables;

#[cfg(feature = "glue")]
pub use glue::GlueTables;
#[cfg(feature = "s3tables")]
pub use s3tables::S3TablesSwap;

use kfs_core::{CatalogHandle, CatalogKind, S3Settings, Warehouse};

/// The AWS SDK configuration for `s3`'s region and static credentials (else the
/// standard chain), with `endpoint` for a service not on AWS (a local stand-in).
pub async fn aws_config(s3: &S3Settings, endpoint: Option<&str>) -> aws_config::SdkConfig {
    let mut config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(s3.region.clone()));
    if let Some(endpoint) = endpoint {
        config = config.endpoint_url(endpoint);
    }
    if let (Some(key), Some(secret)) = (&s3.access_key_id, &s3.secret_access_key) {
        config = config.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            key,
            secret,
            s3.session_token.clone(),
            None,
            "environment",
        ));
    }
    config.load().await
}

/// Opens the configured catalog and its pointer swap, whatever its kind: Glue and S3
/// Tables here, the others through [`kfs_core::open_catalog_handle`].
pub async fn open_catalog_handle(
    kind: &CatalogKind,
    warehouse: &Warehouse,
    s3: &S3Settings,
) -> iceberg::Result<CatalogHandle> {
    match kind {
        #[cfg(feature = "glue")]
        CatalogKind::Glue { endpoint } => glue::open(endpoint.as_deref(), warehouse, s3).await,
        #[cfg(feature = "s3tables")]
        CatalogKind::S3Tables(settings) => s3tables::open(settings, s3).await,
        _ => kfs_core::open_catalog_handle(kind, warehouse, s3).await,
    }
}
