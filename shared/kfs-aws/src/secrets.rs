//! Catalog credentials from AWS Secrets Manager or SSM Parameter Store: read once at
//! cold start, held in a type whose `Debug` never shows them, and never written to a
//! log or an error.

use kfs_core::RestCredentials;

use crate::error::ConfigError;

/// Where credentials are kept, by the ARN given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialsSource<'a> {
    /// A Secrets Manager secret (its ARN or name).
    Secret(&'a str),
    /// An SSM parameter (a `SecureString`), by its name (`/kfs/catalog`).
    Parameter(String),
}

impl<'a> CredentialsSource<'a> {
    /// `arn:<partition>:ssm:<region>:<account>:parameter/<name>` is an SSM parameter;
    /// anything else a Secrets Manager secret.
    pub fn of(arn: &'a str) -> Self {
        let mut parts = arn.splitn(6, ':');
        match (parts.next(), parts.next(), parts.next(), parts.nth(2)) {
            (Some("arn"), Some(_), Some("ssm"), Some(resource)) => {
                match resource.strip_prefix("parameter") {
                    Some(name) if name.starts_with('/') && name.len() > 1 => {
                        Self::Parameter(name.to_owned())
                    }
                    _ => Self::Secret(arn),
                }
            }
            _ => Self::Secret(arn),
        }
    }
}

/// The string stored in the secret or SSM parameter `arn`; `what` names it in errors
/// (never the value).
pub async fn secret_string(
    config: &aws_config::SdkConfig,
    arn: &str,
    what: &str,
) -> Result<String, ConfigError> {
    let value = match CredentialsSource::of(arn) {
        CredentialsSource::Secret(id) => aws_sdk_secretsmanager::Client::new(config)
            .get_secret_value()
            .secret_id(id)
            .send()
            .await
            .map_err(|e| {
                ConfigError(format!(
                    "reading {what} secret {arn}: {}",
                    aws_sdk_secretsmanager::error::DisplayErrorContext(&e)
                ))
            })?
            .secret_string()
            .map(str::to_owned),
        CredentialsSource::Parameter(name) => aws_sdk_ssm::Client::new(config)
            .get_parameter()
            .name(name)
            .with_decryption(true)
            .send()
            .await
            .map_err(|e| {
                ConfigError(format!(
                    "reading {what} parameter {arn}: {}",
                    aws_sdk_ssm::error::DisplayErrorContext(&e)
                ))
            })?
            .parameter()
            .and_then(|p| p.value())
            .map(str::to_owned),
    };
    value.ok_or_else(|| ConfigError(format!("{what} secret {arn} holds no string")))
}

/// Reads the REST catalog credentials stored as a JSON document in the secret or SSM
/// parameter `arn`.
pub async fn rest_credentials(
    config: &aws_config::SdkConfig,
    arn: &str,
) -> Result<RestCredentials, ConfigError> {
    let document = secret_string(config, arn, "catalog").await?;
    RestCredentials::from_json(&document)
        .map_err(|reason| ConfigError(format!("catalog secret {arn}: {reason}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssm_parameter_arns_are_told_from_secrets() {
        assert_eq!(
            CredentialsSource::of("arn:aws:ssm:eu-west-1:123456789012:parameter/kfs/catalog"),
            CredentialsSource::Parameter("/kfs/catalog".into())
        );
        for secret in [
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kfs/catalog-AbCdEf",
            "kfs/catalog",
            "arn:aws:ssm:eu-west-1:123456789012:document/x",
        ] {
            assert_eq!(
                CredentialsSource::of(secret),
                CredentialsSource::Secret(secret)
            );
        }
    }
}
