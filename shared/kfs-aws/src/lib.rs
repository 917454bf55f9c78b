//! AWS implementations of kfs-iceberg's interfaces, used by the Lambda functions:
//! the DynamoDB ledger.

pub mod dynamo_ledger;
