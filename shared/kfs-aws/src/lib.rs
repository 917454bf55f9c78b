//! AWS implementations of kfs-iceberg's interfaces, used by the Lambda functions:
//! the DynamoDB ledger, the settings and clients both functions build at cold start,
//! and catalog credentials from Secrets Manager.

pub mod dynamo_ledger;
pub mod function_env;
pub mod secrets;
