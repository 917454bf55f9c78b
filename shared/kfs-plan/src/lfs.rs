//! Large-file (LFS) claim-check records, as pure logic: KafScale's LFS proxy stores a
//! large value as a blob in the segment bucket (under `{ns}/{topic}/lfs/…`) and
//! produces a small JSON envelope in its place. This module detects and parses the
//! envelopes, says what the configured mode does with each one, checks that a blob
//! lies where the topic's blobs may lie, and verifies a fetched blob against its
//! envelope ([`checksum`]). Fetching is the host's.
//!
//! Unlike the upstream processor, which drops a record whose envelope does not decode
//! or whose blob is missing or corrupt, every such record is handed back with the
//! reason (the converter writes it to the dead-letter table).

use std::collections::BTreeMap;

pub mod checksum;
pub use checksum::{ChecksumAlg, Verified, verify_blob};

/// Bytes at the start of a value searched for `"kfs_lfs"` (as upstream).
pub const DETECT_WINDOW: usize = 50;

/// Default largest blob resolved into a row (`max_inline_size`).
pub const DEFAULT_MAX_INLINE_SIZE: u64 = 64 << 20;

/// Largest `max_inline_size` allowed: resolution holds up to `concurrency` blobs of
/// that size in memory at once.
pub const MAX_INLINE_SIZE_LIMIT: u64 = 1 << 30;

/// Default number of blobs fetched at once.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// Most blobs fetched at once.
pub const MAX_CONCURRENCY: usize = 64;

/// What is done with a topic's claim-check records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LfsMode {
    /// Envelopes are values like any other (the default).
    #[default]
    Off,
    /// The blob replaces the envelope in `value` (and the `lfs_*` columns describe it);
    /// a blob above `max_inline_size` is a dead letter.
    Resolve,
    /// The envelope stays the value; the `lfs_*` columns describe the blob.
    Reference,
    /// Claim-check records are not written (a configured drop, counted).
    Skip,
    /// Resolved up to `max_inline_size`, referenced above it.
    Hybrid,
}

impl LfsMode {
    /// The mode's name, as configured.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Resolve => "resolve",
            Self::Reference => "reference",
            Self::Skip => "skip",
            Self::Hybrid => "hybrid",
        }
    }

    /// Parses `off`, `resolve`, `reference`, `skip` or `hybrid`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(Self::Off),
            "resolve" => Ok(Self::Resolve),
            "reference" => Ok(Self::Reference),
            "skip" => Ok(Self::Skip),
            "hybrid" => Ok(Self::Hybrid),
            other => Err(format!(
                "LFS mode {other:?}: expected off, resolve, reference, skip or hybrid"
            )),
        }
    }

    /// Whether the table has `lfs_*` columns describing each blob.
    pub fn has_columns(self) -> bool {
        matches!(self, Self::Resolve | Self::Reference | Self::Hybrid)
    }

    /// Whether blobs are fetched (records may then go to the dead-letter table).
    pub fn fetches(self) -> bool {
        matches!(self, Self::Resolve | Self::Hybrid)
    }
}

/// Where blobs may be read from: the segment bucket and prefix. A local source has no
/// bucket (the envelope's is then not checked); its blobs are read under its directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlobOrigin {
    /// The only bucket blobs are read from (`None` for a local directory).
    pub bucket: Option<String>,
    /// The source's prefix in that bucket (no leading or trailing `/`).
    pub prefix: String,
}

impl BlobOrigin {
    /// The origin of a source location: `s3://bucket/prefix` or a directory.
    pub fn of_location(location: &str) -> Self {
        match location.strip_prefix("s3://") {
            Some(rest) => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                Self {
                    bucket: Some(bucket.to_owned()),
                    prefix: prefix.trim_matches('/').to_owned(),
                }
            }
            None => Self::default(),
        }
    }

    /// The origin of the source at `location`, with the bucket `configured` for the
    /// blobs (`[lfs] bucket`): a local directory stands for that bucket; an S3 source
    /// must be in it.
    pub fn for_source(location: &str, configured: Option<&str>) -> Result<Self, String> {
        let mut origin = Self::of_location(location);
        match (&origin.bucket, configured) {
            (Some(bucket), Some(named)) if bucket != named => Err(format!(
                "lfs bucket {named:?}: the segments are in bucket {bucket:?}, and blobs are read from the segment bucket only"
            )),
            (None, Some(named)) => {
                origin.bucket = Some(named.to_owned());
                Ok(origin)
            }
            _ => Ok(origin),
        }
    }
}

/// How one topic's claim-check records are handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LfsPolicy {
    /// The mode.
    pub mode: LfsMode,
    /// Largest blob resolved into a row, in bytes (1 to [`MAX_INLINE_SIZE_LIMIT`]).
    pub max_inline_size: u64,
    /// The weakest checksum a resolved blob is verified by (`sha256` by default;
    /// `none`: the size only): an envelope carrying none as strong is a dead letter.
    pub min_checksum: ChecksumAlg,
    /// Blobs fetched at once (1 to [`MAX_CONCURRENCY`]).
    pub concurrency: usize,
    /// Where blobs may be read from.
    pub origin: BlobOrigin,
}

impl Default for LfsPolicy {
    fn default() -> Self {
        Self {
            mode: LfsMode::Off,
            max_inline_size: DEFAULT_MAX_INLINE_SIZE,
            min_checksum: ChecksumAlg::default(),
            concurrency: DEFAULT_CONCURRENCY,
            origin: BlobOrigin::default(),
        }
    }
}

impl LfsPolicy {
    /// Most bytes of blobs one conversion holds at once: `concurrency` blobs of at
    /// most `max_inline_size` bytes where blobs are fetched, else none (what a
    /// function's memory admission adds to a conversion's estimate).
    pub fn blob_bytes_in_flight(&self) -> u64 {
        if self.mode.fetches() {
            (self.concurrency as u64).saturating_mul(self.max_inline_size)
        } else {
            0
        }
    }
}

/// The LFS settings of a deployment: a policy, and per-topic modes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LfsSettings {
    /// The policy of every topic (its mode for topics without an entry in `topics`).
    pub policy: LfsPolicy,
    /// Per-topic modes.
    pub topics: BTreeMap<String, LfsMode>,
}

impl LfsSettings {
    /// The policy of `topic`.
    pub fn for_topic(&self, topic: &str) -> LfsPolicy {
        LfsPolicy {
            mode: self.topics.get(topic).copied().unwrap_or(self.policy.mode),
            ..self.policy.clone()
        }
    }

    /// Checks the limits.
    pub fn validate(&self) -> Result<(), String> {
        let policy = &self.policy;
        if !(1..=MAX_INLINE_SIZE_LIMIT).contains(&policy.max_inline_size) {
            return Err(format!(
                "lfs max_inline_size {}: expected 1 to {MAX_INLINE_SIZE_LIMIT} bytes",
                policy.max_inline_size
            ));
        }
        if !(1..=MAX_CONCURRENCY).contains(&policy.concurrency) {
            return Err(format!(
                "lfs concurrency {}: expected 1 to {MAX_CONCURRENCY}",
                policy.concurrency
            ));
        }
        Ok(())
    }

    /// Whether some topic's claim checks are resolved, described or skipped.
    pub fn any(&self) -> bool {
        self.policy.mode != LfsMode::Off || self.topics.values().any(|m| *m != LfsMode::Off)
    }
}

/// A claim-check envelope, as the LFS proxy writes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Envelope {
    /// The envelope's version (1).
    pub kfs_lfs: u32,
    /// The bucket the proxy wrote the blob to.
    pub bucket: String,
    /// The blob's key in that bucket.
    pub key: String,
    /// The blob's size in bytes.
    pub size: u64,
    /// The blob's SHA-256, hex.
    #[serde(default)]
    pub sha256: Option<String>,
    /// The blob's checksum by `checksum_alg`, hex.
    #[serde(default)]
    pub checksum: Option<String>,
    /// `sha256`, `md5`, `crc32` or `none` (it never lowers the operator's minimum:
    /// see [`checksum`]).
    #[serde(default)]
    pub checksum_alg: Option<String>,
    /// The producer's content type.
    #[serde(default)]
    pub content_type: Option<String>,
}

/// Whether `value` is a claim check: it starts with `{` and holds `"kfs_lfs"` within
/// its first [`DETECT_WINDOW`] bytes.
pub fn is_envelope(value: &[u8]) -> bool {
    const MARK: &[u8] = b"\"kfs_lfs\"";
    value.first() == Some(&b'{')
        && value[..value.len().min(DETECT_WINDOW)]
            .windows(MARK.len())
            .any(|w| w == MARK)
}

/// Parses a claim check's envelope (see [`is_envelope`]).
pub fn parse_envelope(value: &[u8]) -> Result<Envelope, String> {
    let envelope: Envelope =
        serde_json::from_slice(value).map_err(|e| format!("LFS envelope does not decode: {e}"))?;
    if envelope.kfs_lfs != 1 {
        return Err(format!(
            "LFS envelope version {} is not supported (expected 1)",
            envelope.kfs_lfs
        ));
    }
    Ok(envelope)
}

/// What becomes of one claim-check record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Written as it came (mode `off`).
    Keep,
    /// Its blob is fetched into `value`.
    Resolve,
    /// Its envelope stays the value, described by the `lfs_*` columns.
    Reference,
    /// Not written.
    Skip,
}

/// What `mode` does with `envelope`; an error (the record's dead-letter reason) when
/// `resolve` meets a blob above `max_inline_size`.
pub fn disposition(
    mode: LfsMode,
    max_inline_size: u64,
    envelope: &Envelope,
) -> Result<Disposition, String> {
    Ok(match mode {
        LfsMode::Off => Disposition::Keep,
        LfsMode::Skip => Disposition::Skip,
        LfsMode::Reference => Disposition::Reference,
        LfsMode::Resolve if envelope.size > max_inline_size => {
            return Err(format!(
                "LFS blob {} of {} bytes is above the inline limit of {max_inline_size} bytes (lfs max_inline_size; mode hybrid references such blobs)",
                envelope.key, envelope.size
            ));
        }
        LfsMode::Resolve => Disposition::Resolve,
        LfsMode::Hybrid if envelope.size > 0 && envelope.size <= max_inline_size => {
            Disposition::Resolve
        }
        LfsMode::Hybrid => Disposition::Reference,
    })
}

/// The key, relative to the source, of the blob `envelope` points at, for a record of
/// `namespace`/`topic`: only a blob in the origin's bucket, under its prefix and under
/// the topic's own `{namespace}/{topic}/lfs/` is ever read.
pub fn blob_key(
    origin: &BlobOrigin,
    namespace: &str,
    topic: &str,
    envelope: &Envelope,
) -> Result<String, String> {
    let key = envelope.key.as_str();
    if let Some(bucket) = &origin.bucket
        && envelope.bucket != *bucket
    {
        return Err(format!(
            "LFS blob s3://{}/{key} is not in the segment bucket {bucket}: not read",
            envelope.bucket
        ));
    }
    if key.is_empty()
        || key.contains(['\\', '\0'])
        || key
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(format!("LFS blob key {key:?} is not a plain object key"));
    }
    let relative = if origin.prefix.is_empty() {
        Some(key)
    } else {
        key.strip_prefix(origin.prefix.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
    };
    let topic_prefix = format!("{namespace}/{topic}/lfs/");
    match relative {
        Some(relative) if relative.starts_with(&topic_prefix) => Ok(relative.to_owned()),
        _ => Err(format!(
            "LFS blob key {key:?} is not under {}{topic_prefix}: a topic's records read only its own blobs",
            if origin.prefix.is_empty() {
                String::new()
            } else {
                format!("{}/", origin.prefix)
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(key: &str, body: &[u8]) -> Envelope {
        use sha2::Digest;
        Envelope {
            kfs_lfs: 1,
            bucket: "seg".into(),
            key: key.into(),
            size: body.len() as u64,
            sha256: Some(checksum::hex(&sha2::Sha256::digest(body))),
            checksum: None,
            checksum_alg: None,
            content_type: None,
        }
    }

    #[test]
    fn detects_envelopes_as_upstream_does() {
        assert!(is_envelope(br#"{"kfs_lfs":1,"bucket":"b"}"#));
        assert!(is_envelope(br#"{ "kfs_lfs" : 1}"#));
        assert!(!is_envelope(br#"[{"kfs_lfs":1}]"#));
        assert!(!is_envelope(b""));
        let late = format!(r#"{{"pad":"{}","kfs_lfs":1}}"#, "x".repeat(60));
        assert!(!is_envelope(late.as_bytes()));
    }

    #[test]
    fn parses_and_refuses_envelopes() -> Result<(), String> {
        let parsed = parse_envelope(
            br#"{"kfs_lfs":1,"bucket":"b","key":"ns/t/lfs/x","size":3,"sha256":"ab","proxy_id":"p","original_headers":{"a":"b"}}"#,
        )?;
        assert_eq!(parsed.size, 3);
        assert!(parse_envelope(br#"{"kfs_lfs":2,"bucket":"b","key":"k","size":3}"#).is_err());
        assert!(parse_envelope(br#"{"kfs_lfs":1,"bucket":"b"}"#).is_err());
        assert!(parse_envelope(br#"{"kfs_lfs":1,"bucket":"b","key":"k","size":-1}"#).is_err());
        Ok(())
    }

    #[test]
    fn modes_decide_by_size() {
        let e = envelope("ns/t/lfs/a", b"hello");
        let at = |mode, max| disposition(mode, max, &e);
        assert_eq!(at(LfsMode::Off, 1), Ok(Disposition::Keep));
        assert_eq!(at(LfsMode::Skip, 1), Ok(Disposition::Skip));
        assert_eq!(at(LfsMode::Reference, 1), Ok(Disposition::Reference));
        assert_eq!(at(LfsMode::Resolve, 5), Ok(Disposition::Resolve));
        assert!(at(LfsMode::Resolve, 4).is_err());
        assert_eq!(at(LfsMode::Hybrid, 5), Ok(Disposition::Resolve));
        assert_eq!(at(LfsMode::Hybrid, 4), Ok(Disposition::Reference));
        let empty = envelope("ns/t/lfs/a", b"");
        assert_eq!(
            disposition(LfsMode::Hybrid, 5, &empty),
            Ok(Disposition::Reference)
        );
    }

    #[test]
    fn reads_only_the_topics_own_blobs_in_the_segment_bucket() {
        let origin = BlobOrigin::of_location("s3://seg/root/");
        assert_eq!(origin.prefix, "root");
        let key = |k: &str| blob_key(&origin, "ns", "t", &envelope(k, b""));
        assert_eq!(key("root/ns/t/lfs/x"), Ok("ns/t/lfs/x".to_owned()));
        assert!(key("ns/t/lfs/x").is_err());
        assert!(key("root/ns/other/lfs/x").is_err());
        assert!(key("root/ns/t/lfs/../../other/lfs/x").is_err());
        assert!(key("root/ns/t/lfs//x").is_err());
        let mut foreign = envelope("root/ns/t/lfs/x", b"");
        foreign.bucket = "elsewhere".into();
        assert!(blob_key(&origin, "ns", "t", &foreign).is_err());
        let local = BlobOrigin::of_location("/data/segments");
        foreign.key = "ns/t/lfs/x".into();
        assert_eq!(
            blob_key(&local, "ns", "t", &foreign),
            Ok("ns/t/lfs/x".to_owned())
        );
    }

    #[test]
    fn only_fetching_modes_hold_blobs_in_memory() {
        let mut policy = LfsPolicy {
            max_inline_size: 1 << 20,
            concurrency: 4,
            ..LfsPolicy::default()
        };
        for (mode, bytes) in [
            (LfsMode::Off, 0),
            (LfsMode::Reference, 0),
            (LfsMode::Skip, 0),
            (LfsMode::Resolve, 4 << 20),
            (LfsMode::Hybrid, 4 << 20),
        ] {
            policy.mode = mode;
            assert_eq!(policy.blob_bytes_in_flight(), bytes, "{mode:?}");
        }
    }
}
