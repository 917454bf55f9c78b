//! REST catalog credentials read at cold start from AWS (moto): a Secrets Manager
//! secret and an SSM `SecureString` parameter, both by ARN, give the same client
//! properties; a document that is not credentials is refused without being quoted. The
//! schema registry's credentials come from a secret too.

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

/// The schema registry's credentials come the same way (`SCHEMA_REGISTRY_SECRET_ARN`):
/// a secret holding them gives the functions their registry; one that holds no
/// credentials is refused at cold start without being quoted.
#[tokio::test(flavor = "multi_thread")]
async fn registry_credentials_come_from_a_secret() {
    let stack = LocalStack::start();
    let good = stack.moto.tool(&[
        "secret",
        "kfs-iceberg/registry",
        r#"{"username": "api-key", "password": "s3cr3t-value"}"#,
    ]);
    let bad = stack.moto.tool(&[
        "secret",
        "kfs-iceberg/registry-bad",
        "password=s3cr3t-value",
    ]);
    let env = |arn: &str| {
        stack.function_env(&[
            ("WAREHOUSE", "s3://lakehouse/wh".to_owned()),
            ("VALUE_FORMAT", "registry".to_owned()),
            ("SCHEMA_REGISTRY_URL", "https://registry.example".to_owned()),
            ("SCHEMA_REGISTRY_SECRET_ARN", arn.to_owned()),
        ])
    };
    let schemas = env(&good)
        .schemas()
        .await
        .unwrap_or_else(|e| panic!("registry: {e}"));
    assert!(schemas.is_some());
    let refused = env(&bad)
        .schemas()
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(refused.contains("schema registry secret"), "{refused}");
    assert!(!refused.contains("s3cr3t"), "{refused}");
}
