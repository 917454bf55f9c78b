//! AWS implementations of kfs-iceberg's interfaces, used by the Lambda functions and
//! the command line: the DynamoDB ledger, the Glue and S3 Tables catalogs, the
//! settings and clients both functions build at cold start, catalog credentials from
//! Secrets Manager or SSM, CloudWatch metrics in the embedded metric format, and the
//! committer's wake-up queue on SQS FIFO.

pub mod catalog;
pub mod dynamo_ledger;
pub mod emf;
mod error;
pub mod function_env;
pub mod schema_registry;
pub mod secrets;
#[cfg(feature = "stack")]
pub mod stack;
pub mod wakeups;

pub use catalog::{aws_config, open_catalog_handle};
pub use error::{ConfigError, aws_error_kind};
#[cfg(feature = "glue")]
pub use schema_registry::GlueRegistry;
pub use schema_registry::open_schema_registry;
pub use wakeups::SqsWakeups;
