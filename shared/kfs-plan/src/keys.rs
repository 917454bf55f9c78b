//! Segment object keys: `{ns}/{topic}/{partition}/segment-{base_offset:020}.kfs` and
//! `.index`. Everything else in a KafScale bucket (health probes, large-file blobs
//! under `{ns}/{topic}/lfs/…`, stray files) is not a segment.

use std::fmt;

/// Which of the two files of a segment a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SegmentFile {
    /// The `.kfs` data file.
    Data,
    /// The `.index` file.
    Index,
}

/// A parsed segment key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentKey {
    /// The broker's S3 namespace.
    pub namespace: String,
    /// Topic name, as the broker spells it.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
    /// Base offset of the segment's first batch.
    pub base_offset: i64,
}

impl SegmentKey {
    /// Parses a key relative to the source prefix. Returns `None` for objects that are
    /// not segment files.
    pub fn parse(key: &str) -> Option<(SegmentKey, SegmentFile)> {
        let mut parts = key.split('/');
        let (namespace, topic, partition, file) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || namespace.is_empty() || !is_topic_name(topic) {
            return None;
        }
        let partition: i32 = parse_decimal(partition)?.try_into().ok()?;
        let rest = file.strip_prefix("segment-")?;
        let (digits, kind) = if let Some(d) = rest.strip_suffix(".kfs") {
            (d, SegmentFile::Data)
        } else if let Some(d) = rest.strip_suffix(".index") {
            (d, SegmentFile::Index)
        } else {
            return None;
        };
        if digits.len() != 20 {
            return None;
        }
        let base_offset = parse_decimal(digits)?;
        Some((
            SegmentKey {
                namespace: namespace.to_owned(),
                topic: topic.to_owned(),
                partition,
                base_offset,
            },
            kind,
        ))
    }

    /// The object key of one of the segment's files, relative to the source prefix.
    pub fn object_key(&self, file: SegmentFile) -> String {
        let extension = match file {
            SegmentFile::Data => "kfs",
            SegmentFile::Index => "index",
        };
        format!(
            "{}/{}/{}/segment-{:020}.{extension}",
            self.namespace, self.topic, self.partition, self.base_offset
        )
    }
}

impl fmt::Display for SegmentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.object_key(SegmentFile::Data))
    }
}

/// Parses a non-negative decimal made of ASCII digits only.
fn parse_decimal(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Kafka's legal topic names: 1-249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn is_topic_name(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= 249
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// Segments found in a listing, each complete (both files present) or not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentListing {
    /// Complete segments (both `.kfs` and `.index` present), sorted.
    pub complete: Vec<SegmentKey>,
    /// Segments with only one of their two files, sorted.
    pub incomplete: Vec<(SegmentKey, SegmentFile)>,
    /// Number of objects that are not segment files.
    pub ignored: usize,
}

impl SegmentListing {
    /// Groups object keys (relative to the source prefix) into segments.
    pub fn from_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> Self {
        let mut files: std::collections::BTreeMap<SegmentKey, (bool, bool)> = Default::default();
        let mut ignored = 0;
        for key in keys {
            match SegmentKey::parse(key) {
                Some((segment, kind)) => {
                    let entry = files.entry(segment).or_default();
                    match kind {
                        SegmentFile::Data => entry.0 = true,
                        SegmentFile::Index => entry.1 = true,
                    }
                }
                None => ignored += 1,
            }
        }
        let mut listing = SegmentListing {
            ignored,
            ..Default::default()
        };
        for (segment, present) in files {
            match present {
                (true, true) => listing.complete.push(segment),
                (true, false) => listing.incomplete.push((segment, SegmentFile::Data)),
                (false, _) => listing.incomplete.push((segment, SegmentFile::Index)),
            }
        }
        listing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_segment_keys_and_ignores_everything_else() {
        let key = "default/Orders.v2-eu/3/segment-00000000000000000123.kfs";
        let (parsed, kind) = SegmentKey::parse(key).unwrap_or_else(|| panic!("{key}"));
        assert_eq!(parsed.topic, "Orders.v2-eu");
        assert_eq!(parsed.partition, 3);
        assert_eq!(parsed.base_offset, 123);
        assert_eq!(kind, SegmentFile::Data);
        assert_eq!(parsed.object_key(SegmentFile::Data), key);
        for other in [
            "__health/startup_probe_1",
            "default/orders/lfs/2026/11/30/obj-1234",
            "default/orders/0/segment-123.kfs",
            "default/orders/0/segment-00000000000000000123.kfs.tmp",
            "default/orders/x/segment-00000000000000000123.kfs",
            "default/orders/-1/segment-00000000000000000123.kfs",
            "default/or ders/0/segment-00000000000000000123.kfs",
            "default/orders/0/segment-0000000000000000012a.kfs",
            "default/orders/0/segment-99999999999999999999.kfs",
            "a/b/c/d/e",
            "",
        ] {
            assert_eq!(SegmentKey::parse(other), None, "{other}");
        }
    }

    #[test]
    fn a_segment_is_complete_only_with_both_files() {
        let listing = SegmentListing::from_keys([
            "ns/t/0/segment-00000000000000000000.kfs",
            "ns/t/0/segment-00000000000000000000.index",
            "ns/t/0/segment-00000000000000000010.kfs",
            "ns/t/1/segment-00000000000000000005.index",
            "__health/startup_probe_0",
        ]);
        assert_eq!(listing.complete.len(), 1);
        assert_eq!(listing.incomplete.len(), 2);
        assert_eq!(listing.ignored, 1);
    }
}
