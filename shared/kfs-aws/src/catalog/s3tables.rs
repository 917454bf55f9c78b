//! Amazon S3 Tables: the catalog (iceberg-rust's `S3TablesCatalog` over one table
//! bucket) and its pointer swap, which commits any change given as requirements plus
//! updates with the service's own compare-and-swap: `UpdateTableMetadataLocation`
//! conditional on the table's version token.
//!
//! S3 Tables chooses where a table lives (a storage bucket of its own) and maintains
//! its tables itself (compaction, snapshot expiry, unreferenced file removal); its
//! storage buckets cannot be listed, so orphan cleanup does not apply.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_s3tables::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3tables::operation::update_table_metadata_location::UpdateTableMetadataLocationError;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use iceberg::spec::TableMetadata;
use iceberg::{Error, ErrorKind, Result, TableIdent};

use kfs_core::{
    CatalogHandle, LOCAL_CATALOG_NAME, MetadataPointer, S3Settings, S3TablesSettings,
    iceberg_error, lost_race,
};

/// The pointer swap of S3 Tables.
#[derive(Debug, Clone)]
pub struct S3TablesSwap {
    client: aws_sdk_s3tables::Client,
    table_bucket_arn: String,
}

/// A failed S3 Tables request, with the kind its error code or status gives it.
fn service_error<E>(what: &str, e: &SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::fmt::Debug,
{
    iceberg_error(crate::aws_error_kind(e), format!("S3 Tables {what}: {e:?}"))
}

impl S3TablesSwap {
    /// A swap over the table bucket `table_bucket_arn` (metadata files are read and
    /// written through each table's own FileIO).
    pub fn new(client: aws_sdk_s3tables::Client, table_bucket_arn: String) -> Self {
        Self {
            client,
            table_bucket_arn,
        }
    }
}

#[async_trait]
impl MetadataPointer for S3TablesSwap {
    /// The service's version token of the table.
    type Version = String;

    async fn current(&self, ident: &TableIdent) -> Result<(String, String)> {
        let table = self
            .client
            .get_table()
            .table_bucket_arn(&self.table_bucket_arn)
            .namespace(ident.namespace().to_url_string())
            .name(ident.name())
            .send()
            .await
            .map_err(|e| service_error("GetTable", &e))?;
        let location = table.metadata_location().ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("S3 Tables table {ident} has no metadata location"),
            )
        })?;
        Ok((location.to_owned(), table.version_token().to_owned()))
    }

    async fn swap(
        &self,
        ident: &TableIdent,
        version_token: String,
        _current_location: &str,
        _staged: &TableMetadata,
        staged_location: &str,
    ) -> Result<()> {
        self.client
            .update_table_metadata_location()
            .table_bucket_arn(&self.table_bucket_arn)
            .namespace(ident.namespace().to_url_string())
            .name(ident.name())
            .version_token(version_token)
            .metadata_location(staged_location)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(UpdateTableMetadataLocationError::ConflictException(_)) => {
                    lost_race(ident, "the version token moved")
                }
                _ => service_error("UpdateTableMetadataLocation", &e),
            })?;
        Ok(())
    }
}

/// Opens the S3 Tables catalog of `settings` and its swap; S3 locations (the tables'
/// storage buckets) through `file_io_properties`, the service with the credentials and
/// region of `s3`.
pub async fn open(settings: &S3TablesSettings, s3: &S3Settings) -> Result<CatalogHandle> {
    use iceberg::CatalogBuilder;
    use iceberg_catalog_s3tables::{
        S3TABLES_CATALOG_PROP_TABLE_BUCKET_ARN, S3TablesCatalogBuilder,
    };
    let client =
        aws_sdk_s3tables::Client::new(&super::aws_config(s3, settings.endpoint.as_deref()).await);
    let mut props: HashMap<String, String> = s3.file_io_properties();
    props.insert(
        S3TABLES_CATALOG_PROP_TABLE_BUCKET_ARN.to_owned(),
        settings.table_bucket_arn.clone(),
    );
    let catalog = S3TablesCatalogBuilder::default()
        .with_client(client.clone())
        .load(LOCAL_CATALOG_NAME, props)
        .await?;
    let swap = S3TablesSwap::new(client, settings.table_bucket_arn.clone());
    Ok(CatalogHandle {
        catalog: std::sync::Arc::new(catalog),
        swap: std::sync::Arc::new(swap),
    })
}
