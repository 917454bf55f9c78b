//! The error of a missing or invalid setting, shared by the settings and the secrets
//! they point to.

/// A missing or invalid setting.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(pub String);
