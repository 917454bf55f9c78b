//! The Glue Data Catalog for topic tables.
//!
//! iceberg-rust 0.10.1's `GlueCatalog` refuses to register a table with a `timestamptz`
//! column (its Glue column conversion has no mapping for it), and our tables have one.
//! [`GlueTables`] keeps that catalog for everything it does well (namespaces, listing,
//! dropping) and does table creation, loading and commits itself:
//! - columns map to Glue/Hive types with `timestamptz` as `timestamp` (what Athena and
//!   Spark write for Iceberg timestamptz columns);
//! - loading reads the table's `VersionId` and its metadata from the same `GetTable`
//!   answer, so a commit can never pair one version's metadata with another's id;
//! - a commit writes the new metadata file, then swaps the pointer with `UpdateTable`
//!   conditional on that `VersionId`: a concurrent commit makes it fail with a conflict,
//!   which the committer answers by re-reading the table and re-planning.

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_glue::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_glue::types::{Column, StorageDescriptor, TableInput};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use iceberg::io::FileIO;
use iceberg::spec::{NestedFieldRef, PrimitiveType, TableMetadata, TableMetadataBuilder, Type};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, NamespaceIdent, Result, Runtime, TableCommit,
    TableCreation, TableIdent,
};
use iceberg_catalog_glue::GlueCatalog;
use kfs_core::{
    CatalogHandle, CatalogOverrides, LOCAL_CATALOG_NAME, MetadataPointer, Overridden, S3Settings,
    Warehouse, iceberg_error, lost_race, publish, read_table, table_handle,
};
use kfs_plan::fault::ErrorKind as FaultKind;

/// The Glue catalog with timestamptz support (see the module docs).
#[derive(Debug)]
pub struct GlueTables {
    inner: GlueCatalog,
    glue: aws_sdk_glue::Client,
    file_io: FileIO,
    warehouse: String,
    runtime: Runtime,
}

/// The Glue database of a one-level namespace.
fn database(namespace: &NamespaceIdent) -> Result<String> {
    match namespace.as_ref().as_slice() {
        [name] => Ok(name.clone()),
        _ => Err(Error::new(
            ErrorKind::DataInvalid,
            format!("Glue namespaces have one level, not {namespace:?}"),
        )),
    }
}

/// A failed Glue request, with the kind its error code or status gives it.
fn glue_error<E>(what: &str, e: &SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::fmt::Debug,
{
    iceberg_error(
        crate::aws_error_kind(e),
        format!("Glue {what} failed: {e:?}"),
    )
}

/// A request Glue would refuse, found while building it.
fn input_error(what: &str, e: impl std::fmt::Debug) -> Error {
    iceberg_error(FaultKind::Config, format!("Glue {what}: {e:?}"))
}

/// The Glue/Hive type of an Iceberg type.
fn glue_type(t: &Type) -> String {
    match t {
        Type::Primitive(p) => match p {
            PrimitiveType::Boolean => "boolean".into(),
            PrimitiveType::Int => "int".into(),
            PrimitiveType::Long => "bigint".into(),
            PrimitiveType::Float => "float".into(),
            PrimitiveType::Double => "double".into(),
            PrimitiveType::Date => "date".into(),
            PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::TimestampNs
            | PrimitiveType::TimestamptzNs => "timestamp".into(),
            PrimitiveType::Time | PrimitiveType::String | PrimitiveType::Uuid => "string".into(),
            PrimitiveType::Binary | PrimitiveType::Fixed(_) => "binary".into(),
            PrimitiveType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
        },
        Type::Struct(s) => {
            let fields: Vec<String> = s
                .fields()
                .iter()
                .map(|f| format!("{}:{}", f.name, glue_type(&f.field_type)))
                .collect();
            format!("struct<{}>", fields.join(","))
        }
        Type::List(l) => format!("array<{}>", glue_type(&l.element_field.field_type)),
        Type::Map(m) => format!(
            "map<{},{}>",
            glue_type(&m.key_field.field_type),
            glue_type(&m.value_field.field_type)
        ),
    }
}

fn column(field: &NestedFieldRef) -> Result<Column> {
    Column::builder()
        .name(&field.name)
        .r#type(glue_type(&field.field_type))
        .parameters("iceberg.field.id", field.id.to_string())
        .parameters("iceberg.field.optional", (!field.required).to_string())
        .parameters("iceberg.field.current", "true")
        .build()
        .map_err(|e| input_error("column", e))
}

fn table_input(
    name: &str,
    metadata: &TableMetadata,
    location: &str,
    previous: Option<&str>,
) -> Result<TableInput> {
    let columns = metadata
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .map(column)
        .collect::<Result<Vec<_>>>()?;
    let mut input = TableInput::builder()
        .name(name)
        .table_type("EXTERNAL_TABLE")
        .parameters("table_type", "ICEBERG")
        .parameters("metadata_location", location)
        .storage_descriptor(
            StorageDescriptor::builder()
                .location(metadata.location())
                .set_columns(Some(columns))
                .build(),
        );
    if let Some(previous) = previous {
        input = input.parameters("previous_metadata_location", previous);
    }
    input.build().map_err(|e| input_error("table input", e))
}

impl GlueTables {
    /// Wraps `inner`, with a Glue client for the same account and endpoint. Must be
    /// called inside the tokio runtime the tables will be used on.
    pub fn new(inner: GlueCatalog, glue: aws_sdk_glue::Client, warehouse: String) -> Result<Self> {
        let file_io = inner.file_io();
        Ok(Self {
            inner,
            glue,
            file_io,
            warehouse,
            runtime: Runtime::try_current()?,
        })
    }
}

#[async_trait]
impl CatalogOverrides for GlueTables {
    fn inner(&self) -> &dyn Catalog {
        &self.inner
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        mut creation: TableCreation,
    ) -> Result<Table> {
        let database = database(namespace)?;
        let name = creation.name.clone();
        let location = match &creation.location {
            Some(location) => location.clone(),
            None => {
                let location = format!(
                    "{}/{database}.db/{name}",
                    self.warehouse.trim_end_matches('/')
                );
                creation.location = Some(location.clone());
                location
            }
        };
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let metadata_location = MetadataLocation::new_with_metadata(location, &metadata);
        metadata.write_to(&self.file_io, &metadata_location).await?;
        let input = table_input(&name, &metadata, &metadata_location.to_string(), None)?;
        self.glue
            .create_table()
            .database_name(&database)
            .table_input(input)
            .send()
            .await
            .map_err(|e| {
                if e.as_service_error()
                    .is_some_and(|s| s.is_already_exists_exception())
                {
                    Error::new(
                        ErrorKind::TableAlreadyExists,
                        format!("table {database}.{name} already exists"),
                    )
                } else {
                    glue_error("CreateTable", &e)
                }
            })?;
        table_handle(
            &self.file_io,
            self.runtime.clone(),
            TableIdent::new(namespace.clone(), name),
            metadata_location.to_string(),
            metadata,
        )
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        let (location, _) = self.current(table).await?;
        read_table(&self.file_io, self.runtime.clone(), table.clone(), location).await
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        // The metadata and its VersionId from one GetTable answer.
        let (current_location, version) = self.current(&ident).await?;
        let current = read_table(
            &self.file_io,
            self.runtime.clone(),
            ident.clone(),
            current_location.clone(),
        )
        .await?;
        let staged = commit.apply(current)?;
        let staged_location = MetadataLocation::from_str(staged.metadata_location_result()?)?;
        publish(
            self,
            &self.file_io,
            &ident,
            version,
            &current_location,
            staged.metadata().clone(),
            staged_location,
        )
        .await
    }
}

#[async_trait]
impl MetadataPointer for GlueTables {
    /// Glue's `VersionId` of the table.
    type Version = Option<String>;

    async fn current(&self, ident: &TableIdent) -> Result<(String, Option<String>)> {
        let database = database(ident.namespace())?;
        let response = self
            .glue
            .get_table()
            .database_name(&database)
            .name(ident.name())
            .send()
            .await
            .map_err(|e| {
                if e.as_service_error()
                    .is_some_and(|s| s.is_entity_not_found_exception())
                {
                    Error::new(
                        ErrorKind::TableNotFound,
                        format!("table {ident} is not found"),
                    )
                } else {
                    glue_error("GetTable", &e)
                }
            })?;
        let table = response.table().ok_or_else(|| {
            Error::new(
                ErrorKind::TableNotFound,
                format!("table {ident} is not found"),
            )
        })?;
        let location = table
            .parameters()
            .and_then(|p| p.get("metadata_location"))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::DataInvalid,
                    format!("Glue table {ident} has no metadata_location"),
                )
            })?;
        Ok((location.clone(), table.version_id().map(str::to_owned)))
    }

    async fn swap(
        &self,
        ident: &TableIdent,
        version: Option<String>,
        current_location: &str,
        staged: &TableMetadata,
        staged_location: &str,
    ) -> Result<()> {
        let input = table_input(
            ident.name(),
            staged,
            staged_location,
            Some(current_location),
        )?;
        let mut request = self
            .glue
            .update_table()
            .database_name(database(ident.namespace())?)
            .skip_archive(true)
            .table_input(input);
        if let Some(version) = version {
            request = request.version_id(version);
        }
        request.send().await.map_err(|e| {
            if e.as_service_error()
                .is_some_and(|s| s.is_concurrent_modification_exception())
            {
                lost_race(ident, "Glue's VersionId moved")
            } else {
                glue_error("UpdateTable", &e)
            }
        })?;
        Ok(())
    }
}

/// Opens the Glue catalog over `warehouse` (at `endpoint` when it is not AWS's), with
/// the credentials and region of `s3`, as a handle whose swap is the catalog itself.
pub(super) async fn open(
    endpoint: Option<&str>,
    warehouse: &Warehouse,
    s3: &S3Settings,
) -> Result<CatalogHandle> {
    use iceberg::CatalogBuilder;
    use iceberg_catalog_glue::{
        GLUE_CATALOG_PROP_URI, GLUE_CATALOG_PROP_WAREHOUSE, GlueCatalogBuilder,
    };
    use iceberg_storage_opendal::OpenDalStorageFactory;
    let mut props = s3.file_io_properties();
    props.insert(GLUE_CATALOG_PROP_WAREHOUSE.to_owned(), warehouse.location());
    props.insert("region_name".to_owned(), s3.region.clone());
    if let Some(endpoint) = endpoint {
        props.insert(GLUE_CATALOG_PROP_URI.to_owned(), endpoint.to_owned());
    }
    if let (Some(key), Some(secret)) = (&s3.access_key_id, &s3.secret_access_key) {
        props.insert("aws_access_key_id".to_owned(), key.clone());
        props.insert("aws_secret_access_key".to_owned(), secret.clone());
        if let Some(token) = &s3.session_token {
            props.insert("aws_session_token".to_owned(), token.clone());
        }
    }
    let inner = GlueCatalogBuilder::default()
        .with_storage_factory(Arc::new(OpenDalStorageFactory::S3 {
            customized_credential_load: None,
        }))
        .load(LOCAL_CATALOG_NAME, props)
        .await?;
    let glue = aws_sdk_glue::Client::new(&super::aws_config(s3, endpoint).await);
    let tables = Arc::new(GlueTables::new(inner, glue, warehouse.location())?);
    Ok(CatalogHandle {
        catalog: Arc::new(Overridden(tables.clone())),
        swap: tables,
    })
}
