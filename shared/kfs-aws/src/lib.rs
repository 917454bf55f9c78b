//! AWS implementations of kfs-iceberg's interfaces, used by the Lambda functions:
//! the DynamoDB ledger, and the settings and clients both functions build at cold start.

pub mod dynamo_ledger;
pub mod function_env;
