//! The `[etcd]` settings of the offset cross-check, and the check that they never
//! send credentials in the clear (`kfs_plan::etcd_transport`).

use std::path::PathBuf;

use kfs_plan::etcd_transport::EtcdSecurity;
use kfs_plan::secret_url::SecretUrl;
use serde::Deserialize;

use super::{SettingsError, Spelling, invalid};

/// The etcd offset cross-check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdSettings {
    /// Endpoints (`ETCD_ENDPOINTS`, comma-separated; none: the check is off):
    /// `https://host:port`, or `host:port` (`https://` with TLS files, else
    /// `http://`); credentials are refused over `http://`.
    #[serde(default)]
    pub endpoints: Vec<SecretUrl>,
    /// How long a segment past etcd's offsets waits (default `5m`; `ETCD_GRACE`).
    pub grace: Option<String>,
    /// `hold` (default) or `proceed` when etcd stays unreachable (`ETCD_UNREACHABLE`).
    pub unreachable: Option<String>,
    /// PEM file of the CA that signed etcd's certificate (`ETCD_CA_FILE`).
    pub ca_file: Option<PathBuf>,
    /// PEM file of the client certificate, for etcd's `--client-cert-auth`
    /// (`ETCD_CERT_FILE`, with `ETCD_KEY_FILE`).
    pub cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key (`ETCD_KEY_FILE`).
    pub key_file: Option<PathBuf>,
    /// User of etcd's authentication (`ETCD_USERNAME`).
    pub username: Option<String>,
    /// The Secrets Manager secret or SSM parameter holding the user's password
    /// (`ETCD_PASSWORD_SECRET_ARN`): the password itself is never a setting.
    pub password_secret: Option<String>,
}

impl EtcdSettings {
    /// Refuses credentials (a user, a client certificate) over a plain `http://`
    /// endpoint, and TLS files beside one: a configuration error naming the settings.
    pub(super) fn check_transport(
        &self,
        spelling: Spelling,
        origin: &str,
    ) -> Result<(), SettingsError> {
        let name = |file: &'static str, variable: &'static str| match spelling {
            Spelling::File => file,
            Spelling::Environment => variable,
        };
        let security = EtcdSecurity {
            ca_file: self
                .ca_file
                .as_ref()
                .map(|_| name("etcd ca_file", "ETCD_CA_FILE")),
            client_certificate: match (&self.cert_file, &self.key_file) {
                (None, None) => None,
                (Some(_), _) => Some(name("etcd cert_file", "ETCD_CERT_FILE")),
                (None, Some(_)) => Some(name("etcd key_file", "ETCD_KEY_FILE")),
            },
            user: self
                .username
                .as_ref()
                .map(|_| name("etcd username", "ETCD_USERNAME")),
        };
        kfs_plan::etcd_transport::check(
            &self.endpoints,
            name("etcd endpoints", "ETCD_ENDPOINTS"),
            &security,
        )
        .map_err(|e| invalid(origin, e))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Settings, ValidSettings};
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<ValidSettings, SettingsError> {
        let vars: std::collections::BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::from_env(&|name| vars.get(name).cloned())?.validate("")
    }

    #[test]
    fn etcd_credentials_over_plain_http_are_a_configuration_error() {
        for (pairs, named) in [
            (
                &[("ETCD_ENDPOINTS", "etcd:2379"), ("ETCD_USERNAME", "kfs")][..],
                "ETCD_USERNAME",
            ),
            (
                &[
                    ("ETCD_ENDPOINTS", "http://etcd:2379"),
                    ("ETCD_USERNAME", "kfs"),
                    ("ETCD_PASSWORD_SECRET_ARN", "arn:x"),
                ],
                "ETCD_USERNAME",
            ),
            (
                &[
                    ("ETCD_ENDPOINTS", "http://etcd:2379"),
                    ("ETCD_CA_FILE", "/ca.pem"),
                ],
                "ETCD_CA_FILE",
            ),
            (
                &[
                    ("ETCD_ENDPOINTS", "http://etcd:2379"),
                    ("ETCD_CERT_FILE", "/c.pem"),
                    ("ETCD_KEY_FILE", "/k.pem"),
                ],
                "ETCD_CERT_FILE",
            ),
        ] {
            let error = env(pairs).err().map(|e| e.0);
            assert!(
                error
                    .as_deref()
                    .is_some_and(|e| e.contains("ETCD_ENDPOINTS")
                        && e.contains(named)
                        && e.contains("https://")),
                "{pairs:?}: {error:?}"
            );
        }
        let toml_text =
            "[etcd]\nendpoints = [\"http://u:s3cr3t-XYZ@etcd:2379\"]\nusername = \"kfs\"";
        let error = toml::from_str::<Settings>(toml_text)
            .map_err(|e| SettingsError(e.to_string()))
            .and_then(|s| s.validate("kfs.toml"))
            .err()
            .map(|e| e.0);
        assert!(
            error.as_deref().is_some_and(|e| e.starts_with("kfs.toml")
                && e.contains("etcd username")
                && !e.contains("s3cr3t-XYZ")),
            "{error:?}"
        );
    }

    #[test]
    fn etcd_over_tls_or_without_credentials_is_accepted() {
        for pairs in [
            &[("ETCD_ENDPOINTS", "http://etcd:2379")][..],
            &[
                ("ETCD_ENDPOINTS", "https://etcd:2379"),
                ("ETCD_USERNAME", "kfs"),
            ],
            &[
                ("ETCD_ENDPOINTS", "etcd:2379"),
                ("ETCD_CA_FILE", "/ca.pem"),
                ("ETCD_USERNAME", "kfs"),
            ],
        ] {
            assert!(env(pairs).is_ok(), "{pairs:?}");
        }
    }
}
