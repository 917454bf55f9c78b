//! REST catalog credentials read at cold start from AWS (moto): a Secrets Manager
//! secret and an SSM `SecureString` parameter, both by ARN, give the same client
//! properties; a document that is not credentials is refused without being quoted.

use kfs_aws::secrets::rest_credentials;
use kfs_testkit::LocalStack;

#[tokio::test(flavor = "multi_thread")]
async fn credentials_come_from_secrets_manager_or_ssm_parameter_store() {
    let stack = LocalStack::start();
    let document =
        r#"{"client_id": "kfs", "client_secret": "s3cr3t-value", "scope": "PRINCIPAL_ROLE:ALL"}"#;
    let secret = stack
        .moto
        .tool(&["secret", "kfs-iceberg/catalog", document]);
    let parameter = stack
        .moto
        .tool(&["parameter", "/kfs-iceberg/catalog", document]);
    assert!(parameter.starts_with("arn:aws:ssm:"), "{parameter}");
    let bad = stack
        .moto
        .tool(&["parameter", "/kfs-iceberg/bad", "password=s3cr3t-value"]);
    let env = stack.function_env(&[("WAREHOUSE", "s3://lakehouse/wh".to_owned())]);
    let config = env.aws_config().await;
    let from_secret = rest_credentials(&config, &secret)
        .await
        .unwrap_or_else(|e| panic!("secret: {e}"));
    let from_parameter = rest_credentials(&config, &parameter)
        .await
        .unwrap_or_else(|e| panic!("parameter: {e}"));
    assert_eq!(from_secret, from_parameter);
    assert_eq!(
        from_parameter
            .properties()
            .get("credential")
            .map(String::as_str),
        Some("kfs:s3cr3t-value")
    );
    let refused = rest_credentials(&config, &bad)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(refused.contains("not a JSON object"), "{refused}");
    assert!(!refused.contains("s3cr3t"), "{refused}");
}
