//! The DynamoDB ledger against moto, on the table definition of
//! `infra/ledger-table.json` (the one the SAM template declares).

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use kfs_aws::dynamo_ledger::DynamoLedger;
use kfs_core::testing::check_contract;
use kfs_testkit::{Moto, workspace_root};

#[tokio::test]
async fn dynamo_ledger_keeps_the_contract() -> Result<(), String> {
    let moto = Moto::start();
    let definition = workspace_root().join("infra/ledger-table.json");
    moto.tool(&["ledger", "kfs-ledger", &definition.to_string_lossy()]);
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&moto.endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .build();
    let ledger = DynamoLedger::new(aws_sdk_dynamodb::Client::from_conf(config), "kfs-ledger");
    check_contract(&ledger).await
}
