//! How the committer's etcd endpoints are reached, and which combinations of
//! endpoints, TLS files and credentials are refused: credentials (a user and password,
//! or a client certificate) never travel over plain `http://`, and TLS files are
//! never silently ignored by an `http://` endpoint. Checked when the settings are
//! loaded, and again by the etcd client before it sends anything.

use crate::secret_url::SecretUrl;

/// Which security settings of an etcd connection are set: each holds the name of
/// the setting (as the operator wrote it: `ETCD_CA_FILE` or `etcd ca_file`), when set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EtcdSecurity<'a> {
    /// The CA file.
    pub ca_file: Option<&'a str>,
    /// The client certificate (and its key).
    pub client_certificate: Option<&'a str>,
    /// The user of etcd's authentication.
    pub user: Option<&'a str>,
}

impl EtcdSecurity<'_> {
    /// The TLS file set, if any.
    fn tls_file(&self) -> Option<&str> {
        self.ca_file.or(self.client_certificate)
    }

    /// The credential set, if any.
    fn credential(&self) -> Option<&str> {
        self.user.or(self.client_certificate)
    }
}

/// The base URL of `endpoint`: as written when it has a scheme; without one,
/// `https://` when TLS files are set (`tls`), else `http://`.
pub fn base_url(endpoint: &SecretUrl, tls: bool) -> SecretUrl {
    let text = endpoint.expose().trim_end_matches('/');
    if text.contains("://") {
        SecretUrl::from(text)
    } else if tls {
        SecretUrl::new(format!("https://{text}"))
    } else {
        SecretUrl::new(format!("http://{text}"))
    }
}

/// Refuses endpoints that would send `security`'s credentials in the clear, or ignore
/// its TLS files; `endpoints_setting` names the endpoints' setting in the message.
pub fn check(
    endpoints: &[SecretUrl],
    endpoints_setting: &str,
    security: &EtcdSecurity<'_>,
) -> Result<(), String> {
    for endpoint in endpoints {
        let base = base_url(endpoint, security.tls_file().is_some());
        match base.scheme().as_deref() {
            Some("https") => continue,
            Some("http") => {}
            _ => {
                return Err(format!(
                    "{endpoints_setting}: etcd endpoint {endpoint}: expected http://, https:// or host:port"
                ));
            }
        }
        if let Some(tls) = security.tls_file() {
            return Err(format!(
                "{endpoints_setting}: etcd endpoint {endpoint} is plain http://, and {tls} is set: TLS files are used over https:// only; write the endpoint as https://… (or leave the scheme out)"
            ));
        }
        if let Some(credential) = security.credential() {
            return Err(format!(
                "{endpoints_setting}: etcd endpoint {endpoint} is plain http://, and {credential} would be sent over it in the clear: use an https:// endpoint (with the CA file setting for a private CA)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(list: &[&str]) -> Vec<SecretUrl> {
        list.iter().map(|e| SecretUrl::from(*e)).collect()
    }

    #[test]
    fn credentials_over_plain_http_are_refused() {
        let user = EtcdSecurity {
            user: Some("ETCD_USERNAME"),
            ..EtcdSecurity::default()
        };
        for plain in [
            &["etcd:2379"][..],
            &["http://etcd:2379"],
            &["https://a:2379", "b:2379"],
        ] {
            let refused = check(&endpoints(plain), "ETCD_ENDPOINTS", &user);
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|e| e.starts_with("ETCD_ENDPOINTS")
                        && e.contains("ETCD_USERNAME")
                        && e.contains("https://")),
                "{plain:?}: {refused:?}"
            );
        }
        assert_eq!(
            check(&endpoints(&["https://etcd:2379"]), "ETCD_ENDPOINTS", &user),
            Ok(())
        );
    }

    #[test]
    fn tls_files_with_an_http_endpoint_are_refused() {
        let ca = EtcdSecurity {
            ca_file: Some("ETCD_CA_FILE"),
            ..EtcdSecurity::default()
        };
        let refused = check(&endpoints(&["http://etcd:2379"]), "ETCD_ENDPOINTS", &ca);
        assert!(refused.is_err_and(|e| e.contains("ETCD_CA_FILE")));
        let certificate = EtcdSecurity {
            client_certificate: Some("ETCD_CERT_FILE"),
            ..EtcdSecurity::default()
        };
        let refused = check(
            &endpoints(&["http://etcd:2379"]),
            "ETCD_ENDPOINTS",
            &certificate,
        );
        assert!(refused.is_err_and(|e| e.contains("ETCD_CERT_FILE")));
        // Without a scheme, TLS files make it https.
        assert_eq!(check(&endpoints(&["etcd:2379"]), "x", &ca), Ok(()));
        assert_eq!(check(&endpoints(&["etcd:2379"]), "x", &certificate), Ok(()));
        assert_eq!(
            base_url(&SecretUrl::from("etcd:2379/"), true).expose(),
            "https://etcd:2379"
        );
    }

    #[test]
    fn plain_http_without_credentials_is_allowed_and_errors_never_quote_secrets() {
        let none = EtcdSecurity::default();
        assert_eq!(
            check(&endpoints(&["etcd:2379", "http://e:1"]), "x", &none),
            Ok(())
        );
        let refused = check(&endpoints(&["ftp://u:s3cr3t-XYZ@etcd"]), "x", &none);
        assert!(refused.is_err_and(|e| e.contains("expected") && !e.contains("s3cr3t-XYZ")));
        let user = EtcdSecurity {
            user: Some("etcd username"),
            ..none
        };
        let refused = check(&endpoints(&["http://u:s3cr3t-XYZ@etcd"]), "x", &user);
        assert!(refused.is_err_and(|e| !e.contains("s3cr3t-XYZ")));
    }
}
