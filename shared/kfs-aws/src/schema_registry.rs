//! Schema registries at the AWS edge: the AWS Glue Schema Registry as a
//! [`kfs_core::SchemaRegistry`] (feature `glue`: the schema version a Glue-framed
//! value names, read with `GetSchemaVersion`), and the one place a registry location
//! becomes a schema cache, whichever registry it names.

use kfs_core::{RegistryLocation, RegistrySchemas, S3Settings};
use std::sync::Arc;
#[cfg(feature = "glue")]
use {
    aws_sdk_glue::error::ProvideErrorMetadata,
    aws_sdk_glue::types::DataFormat,
    kfs_core::{
        RegisteredSchema, RegistryError, SchemaCache, SchemaId, SchemaKind, SchemaRegistry,
    },
};

use crate::ConfigError;

/// The AWS Glue Schema Registry.
#[cfg(feature = "glue")]
#[derive(Debug, Clone)]
pub struct GlueRegistry {
    glue: aws_sdk_glue::Client,
}

#[cfg(feature = "glue")]
impl GlueRegistry {
    /// The registry `config` reaches (its region and credentials).
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        Self {
            glue: aws_sdk_glue::Client::new(config),
        }
    }
}

#[cfg(feature = "glue")]
#[async_trait::async_trait]
impl SchemaRegistry for GlueRegistry {
    async fn schema(&self, id: SchemaId) -> Result<Option<RegisteredSchema>, RegistryError> {
        let SchemaId::Glue(version) = id else {
            // A Confluent-framed value: Glue holds no such schema.
            return Ok(None);
        };
        let location = format!("AWS Glue GetSchemaVersion {version}");
        let answer = match self
            .glue
            .get_schema_version()
            .schema_version_id(version.to_string())
            .send()
            .await
        {
            Ok(answer) => answer,
            // An unknown version: its records are dead letters.
            Err(e) if e.code() == Some("EntityNotFoundException") => return Ok(None),
            Err(e) => {
                return Err(RegistryError {
                    location,
                    kind: crate::aws_error_kind(&e),
                    message: aws_sdk_glue::error::DisplayErrorContext(&e).to_string(),
                });
            }
        };
        let kind = match answer.data_format() {
            Some(DataFormat::Avro) => SchemaKind::Avro,
            Some(DataFormat::Json) => SchemaKind::Json,
            Some(DataFormat::Protobuf) => SchemaKind::Protobuf,
            other => {
                return Err(RegistryError {
                    location,
                    kind: kfs_plan::fault::ErrorKind::Config,
                    message: format!("answered data format {other:?}"),
                });
            }
        };
        let Some(text) = answer.schema_definition() else {
            return Err(RegistryError {
                location,
                kind: kfs_plan::fault::ErrorKind::Config,
                message: "answered no schema definition".into(),
            });
        };
        Ok(Some(RegisteredSchema::new(kind, text)))
    }
}

/// The schema cache in front of the registry at `location`: a Confluent-compatible
/// one over HTTP, or the AWS Glue Schema Registry with the credentials and region `s3`
/// gives (the region replaced by the location's when it names one), its endpoint the
/// SDK's own (`AWS_ENDPOINT_URL_GLUE`, `AWS_ENDPOINT_URL`).
pub async fn open_schema_registry(
    location: &RegistryLocation,
    s3: &S3Settings,
) -> Result<Arc<RegistrySchemas>, ConfigError> {
    match location {
        #[cfg(feature = "glue")]
        RegistryLocation::Glue { region } => {
            let mut s3 = s3.clone();
            if let Some(region) = region {
                s3.region.clone_from(region);
            }
            let config = crate::aws_config(&s3, None).await;
            Ok(Arc::new(SchemaCache::new(Arc::new(GlueRegistry::new(
                &config,
            )))))
        }
        _ => {
            // Without Glue the AWS settings have nothing to reach.
            let _ = s3;
            kfs_core::open_registry(location)
                .map(Arc::new)
                .map_err(|e| ConfigError(format!("schema registry: {e}")))
        }
    }
}
