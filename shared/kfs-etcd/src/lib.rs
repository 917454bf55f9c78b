//! Reading the KafScale brokers' offsets from etcd for the cross-check: one snapshot
//! read and one prefix read per committer tick, through etcd's JSON gateway
//! (`POST /v3/kv/range`, keys and values in base64), which every etcd since 3.4
//! serves on its client URL. Plain HTTPS and JSON: no gRPC stack, and nothing to
//! compile from protobuf. Any failure yields [`EtcdState::Unreachable`], which the
//! cross-check's policy handles; reading etcd never fails a tick by itself.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kfs_plan::crosscheck::{EtcdState, read_etcd_contents};
use serde::Deserialize;

/// The cluster snapshot key.
pub const SNAPSHOT_KEY: &str = "/kafscale/metadata/snapshot";
/// The prefix of the per-topic keys.
pub const TOPICS_PREFIX: &str = "/kafscale/topics/";

/// Reads etcd at `endpoints` within `timeout`; an empty list means the cross-check is off.
/// Endpoints are tried in order until one answers; one without a scheme is `http://`.
pub async fn read_etcd(endpoints: &[String], timeout: Duration) -> EtcdState {
    if endpoints.is_empty() {
        return EtcdState::Disabled;
    }
    let client = match reqwest::Client::builder()
        .connect_timeout(timeout)
        .timeout(timeout)
        .build()
    {
        Ok(client) => client,
        Err(e) => return EtcdState::Unreachable(format!("HTTP client: {e}")),
    };
    let mut failures = Vec::new();
    for endpoint in endpoints {
        let base = if endpoint.contains("://") {
            endpoint.trim_end_matches('/').to_owned()
        } else {
            format!("http://{}", endpoint.trim_end_matches('/'))
        };
        match tokio::time::timeout(timeout, read(&client, &base)).await {
            Ok(Ok(state)) => return state,
            Ok(Err(e)) => failures.push(format!("{base}: {e}")),
            Err(_) => failures.push(format!("{base}: no answer within {timeout:?}")),
        }
    }
    EtcdState::Unreachable(failures.join("; "))
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
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("answer is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
}

/// The keys from `key` up to (not including) `range_end`, or `key` alone.
async fn range(
    client: &reqwest::Client,
    base: &str,
    key: &[u8],
    range_end: Option<&[u8]>,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>, ReadError> {
    let mut body = serde_json::json!({ "key": STANDARD.encode(key) });
    if let Some(end) = range_end {
        body["range_end"] = STANDARD.encode(end).into();
    }
    let response: RangeResponse = client
        .post(format!("{base}/v3/kv/range"))
        .json(&body)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
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

async fn read(client: &reqwest::Client, base: &str) -> Result<EtcdState, ReadError> {
    let snapshot = range(client, base, SNAPSHOT_KEY.as_bytes(), None).await?;
    let snapshot_json = snapshot
        .first()
        .and_then(|(_, value)| String::from_utf8(value.clone()).ok());
    let prefix = TOPICS_PREFIX.as_bytes();
    let topics = range(client, base, prefix, Some(&prefix_end(prefix))).await?;
    let keys: Vec<(String, Vec<u8>)> = topics
        .into_iter()
        .filter_map(|(key, value)| Some((String::from_utf8(key).ok()?, value)))
        .collect();
    Ok(read_etcd_contents(snapshot_json.as_deref(), &keys))
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

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
