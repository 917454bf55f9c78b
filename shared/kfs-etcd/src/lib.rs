//! Reading the KafScale brokers' offsets from etcd for the cross-check: one snapshot
//! read and one prefix read per committer tick, through etcd's JSON gateway
//! (`POST /v3/kv/range`, keys and values in base64), which every etcd since 3.4
//! serves on its client URL. Plain HTTPS and JSON: no gRPC stack, and nothing to
//! compile from protobuf. Any failure yields [`EtcdState::Unreachable`], which the
//! cross-check's policy handles; reading etcd never fails a tick by itself.
//!
//! A cluster as deployed is reached over TLS (a private CA, and a client certificate
//! when etcd runs with `--client-cert-auth`) and with etcd's authentication (a user
//! and password exchanged for a token by `POST /v3/auth/authenticate`): see
//! [`EtcdConnection`].

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kfs_plan::crosscheck::{EtcdState, read_etcd_contents};
use kfs_plan::etcd_transport::EtcdSecurity;
use kfs_plan::secret_url::SecretUrl;
use serde::Deserialize;

/// The cluster snapshot key.
pub const SNAPSHOT_KEY: &str = "/kafscale/metadata/snapshot";
/// The prefix of the per-topic keys.
pub const TOPICS_PREFIX: &str = "/kafscale/topics/";

/// How to reach etcd: endpoints, TLS material and a user.
#[derive(Clone, Default)]
pub struct EtcdConnection {
    /// Endpoints, tried in order until one answers; one without a scheme is
    /// `http://` (`https://` with TLS material). None: the cross-check is off.
    /// Credentials and TLS material are never used over `http://` ([`Self::check`]).
    pub endpoints: Vec<SecretUrl>,
    /// PEM of the CA that signed etcd's server certificate (else the system roots).
    pub ca_pem: Option<Vec<u8>>,
    /// PEM of the client certificate and its private key, for `--client-cert-auth`.
    pub identity_pem: Option<Vec<u8>>,
    /// User and password of etcd's authentication.
    pub user: Option<(String, String)>,
}

impl std::fmt::Debug for EtcdConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key nor the password.
        f.debug_struct("EtcdConnection")
            .field("endpoints", &self.endpoints)
            .field("ca", &self.ca_pem.is_some())
            .field("client_certificate", &self.identity_pem.is_some())
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .finish()
    }
}

impl EtcdConnection {
    /// Plain endpoints, no TLS material nor user.
    pub fn plain(endpoints: Vec<String>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(SecretUrl::from).collect(),
            ..Self::default()
        }
    }

    /// Refuses credentials (the user, the client certificate) over a plain `http://`
    /// endpoint, and TLS material beside one (see `kfs_plan::etcd_transport`).
    pub fn check(&self) -> Result<(), String> {
        kfs_plan::etcd_transport::check(
            &self.endpoints,
            "ETCD_ENDPOINTS",
            &EtcdSecurity {
                ca_file: self.ca_pem.as_ref().map(|_| "ETCD_CA_FILE"),
                client_certificate: self.identity_pem.as_ref().map(|_| "ETCD_CERT_FILE"),
                user: self.user.as_ref().map(|_| "ETCD_USERNAME"),
            },
        )
    }

    fn client(&self, timeout: Duration) -> Result<reqwest::Client, String> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout);
        if let Some(pem) = &self.ca_pem {
            let certificates = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| format!("etcd CA certificate: {e}"))?;
            if certificates.is_empty() {
                return Err("etcd CA certificate: no certificate in the PEM".into());
            }
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        if let Some(pem) = &self.identity_pem {
            builder = builder.identity(
                reqwest::Identity::from_pem(pem)
                    .map_err(|e| format!("etcd client certificate: {e}"))?,
            );
        }
        builder.build().map_err(|e| format!("HTTP client: {e}"))
    }

    fn base(&self, endpoint: &SecretUrl) -> SecretUrl {
        kfs_plan::etcd_transport::base_url(
            endpoint,
            self.ca_pem.is_some() || self.identity_pem.is_some(),
        )
    }
}

/// Reads etcd within `timeout`; no endpoints means the cross-check is off.
pub async fn read_etcd(connection: &EtcdConnection, timeout: Duration) -> EtcdState {
    if connection.endpoints.is_empty() {
        return EtcdState::Disabled;
    }
    // Never a credential in the clear, even when the settings were not checked.
    if let Err(refused) = connection.check() {
        return EtcdState::Unreachable(refused);
    }
    let client = match connection.client(timeout) {
        Ok(client) => client,
        Err(e) => return EtcdState::Unreachable(e),
    };
    let mut failures = Vec::new();
    for endpoint in &connection.endpoints {
        let base = connection.base(endpoint);
        let attempt = async {
            let base = base.expose();
            let token = match &connection.user {
                Some((name, password)) => Some(authenticate(&client, base, name, password).await?),
                None => None,
            };
            read(&client, base, token.as_deref()).await
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(state)) => return state,
            Ok(Err(e)) => failures.push(format!("{base}: {e}")),
            Err(_) => failures.push(format!("{base}: no answer within {timeout:?}")),
        }
    }
    EtcdState::Unreachable(failures.join("; "))
}

/// Exchanges a user and password for a token (`/v3/auth/authenticate`).
async fn authenticate(
    client: &reqwest::Client,
    base: &str,
    name: &str,
    password: &str,
) -> Result<String, ReadError> {
    #[derive(Deserialize)]
    struct Authenticated {
        token: String,
    }
    let answer: Authenticated = client
        .post(format!("{base}/v3/auth/authenticate"))
        .json(&serde_json::json!({ "name": name, "password": password }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(answer.token)
}

/// A range response of the gateway (fields as etcd's JSON mapping names them).
#[derive(Debug, Default, Deserialize)]
struct RangeResponse {
    #[serde(default)]
    kvs: Vec<KeyValue>,
}

#[derive(Debug, Deserialize)]
struct KeyValue {
    key: String,
    #[serde(default)]
    value: String,
}

/// What went wrong reading one endpoint.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    /// Without the request's URL (which may carry secrets): see `From`.
    #[error("{0}")]
    Http(reqwest::Error),
    #[error("answer is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
}

impl From<reqwest::Error> for ReadError {
    fn from(error: reqwest::Error) -> Self {
        Self::Http(error.without_url())
    }
}

/// The keys from `key` up to (not including) `range_end`, or `key` alone.
async fn range(
    client: &reqwest::Client,
    base: &str,
    token: Option<&str>,
    key: &[u8],
    range_end: Option<&[u8]>,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>, ReadError> {
    let mut body = serde_json::json!({ "key": STANDARD.encode(key) });
    if let Some(end) = range_end {
        body["range_end"] = STANDARD.encode(end).into();
    }
    let mut request = client.post(format!("{base}/v3/kv/range")).json(&body);
    if let Some(token) = token {
        request = request.header(reqwest::header::AUTHORIZATION, token);
    }
    let response: RangeResponse = request.send().await?.error_for_status()?.json().await?;
    response
        .kvs
        .into_iter()
        .map(|kv| Ok((STANDARD.decode(kv.key)?, STANDARD.decode(kv.value)?)))
        .collect()
}

/// The end of the range of keys starting with `prefix` (etcd's `--prefix`): the prefix
/// with its last byte below 0xff incremented, the rest dropped.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff: to the end of the key space.
    vec![0]
}

async fn read(
    client: &reqwest::Client,
    base: &str,
    token: Option<&str>,
) -> Result<EtcdState, ReadError> {
    let snapshot = range(client, base, token, SNAPSHOT_KEY.as_bytes(), None).await?;
    let snapshot_json = snapshot
        .first()
        .and_then(|(_, value)| String::from_utf8(value.clone()).ok());
    let prefix = TOPICS_PREFIX.as_bytes();
    let topics = range(client, base, token, prefix, Some(&prefix_end(prefix))).await?;
    let keys: Vec<(String, Vec<u8>)> = topics
        .into_iter()
        .filter_map(|(key, value)| Some((String::from_utf8(key).ok()?, value)))
        .collect();
    Ok(read_etcd_contents(snapshot_json.as_deref(), &keys))
}

#[cfg(test)]
mod tests {
    use super::{EtcdConnection, prefix_end};

    #[test]
    fn a_user_is_never_sent_over_plain_http() {
        let mut connection = EtcdConnection::plain(vec!["http://u:s3cr3t-XYZ@etcd:2379".into()]);
        assert_eq!(connection.check(), Ok(()));
        connection.user = Some(("kfs".into(), "pw".into()));
        let refused = connection.check();
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("ETCD_USERNAME") && !e.contains("s3cr3t-XYZ")),
            "{refused:?}"
        );
        assert!(!format!("{connection:?}").contains("s3cr3t-XYZ"));
    }

    #[test]
    fn a_prefix_ends_where_its_last_byte_would_carry() {
        assert_eq!(
            prefix_end(b"/kafscale/topics/"),
            b"/kafscale/topics0".to_vec()
        );
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}
