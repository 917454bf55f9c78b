//! Catalog credentials from AWS Secrets Manager: read once at cold start, held in a
//! type whose `Debug` never shows them, and never written to a log or an error.

use aws_sdk_secretsmanager::Client;
use kfs_core::catalog::RestCredentials;

use crate::function_env::ConfigError;

/// Reads the REST catalog credentials stored as a JSON document in the secret `arn`.
pub async fn rest_credentials(client: &Client, arn: &str) -> Result<RestCredentials, ConfigError> {
    let secret = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| {
            ConfigError(format!(
                "reading catalog secret {arn}: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(&e)
            ))
        })?;
    let document = secret
        .secret_string()
        .ok_or_else(|| ConfigError(format!("catalog secret {arn} holds no string")))?;
    RestCredentials::from_json(document)
        .map_err(|reason| ConfigError(format!("catalog secret {arn}: {reason}")))
}
