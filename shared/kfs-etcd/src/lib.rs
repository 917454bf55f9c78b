//! Reading the KafScale brokers' offsets from etcd for the cross-check: one snapshot
//! read and one prefix read per committer tick. Any failure yields
//! [`EtcdState::Unreachable`], which the cross-check's policy handles; reading etcd
//! never fails a tick by itself.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};
use kfs_plan::crosscheck::{EtcdState, read_etcd_contents};

/// The cluster snapshot key.
pub const SNAPSHOT_KEY: &str = "/kafscale/metadata/snapshot";
/// The prefix of the per-topic keys.
pub const TOPICS_PREFIX: &str = "/kafscale/topics/";

/// Reads etcd at `endpoints` within `timeout`; an empty list means the cross-check is off.
pub async fn read_etcd(endpoints: &[String], timeout: Duration) -> EtcdState {
    if endpoints.is_empty() {
        return EtcdState::Disabled;
    }
    match tokio::time::timeout(timeout, read(endpoints, timeout)).await {
        Ok(Ok(state)) => state,
        Ok(Err(e)) => EtcdState::Unreachable(e.to_string()),
        Err(_) => EtcdState::Unreachable(format!("no answer within {timeout:?}")),
    }
}

async fn read(endpoints: &[String], timeout: Duration) -> Result<EtcdState, etcd_client::Error> {
    let options = ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_timeout(timeout);
    let mut client = Client::connect(endpoints, Some(options)).await?;
    let snapshot = client.get(SNAPSHOT_KEY, None).await?;
    let snapshot_json = snapshot
        .kvs()
        .first()
        .and_then(|kv| kv.value_str().ok())
        .map(str::to_owned);
    let topics = client
        .get(TOPICS_PREFIX, Some(GetOptions::new().with_prefix()))
        .await?;
    let keys: Vec<(String, Vec<u8>)> = topics
        .kvs()
        .iter()
        .filter_map(|kv| Some((kv.key_str().ok()?.to_owned(), kv.value().to_vec())))
        .collect();
    Ok(read_etcd_contents(snapshot_json.as_deref(), &keys))
}
