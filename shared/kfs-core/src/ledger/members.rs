//! How a run's members are stored: compactly, since a run holds up to 1,000 of them
//! and DynamoDB bills a write by the kilobyte of the item (twice per run: recorded,
//! then marked committed).
//!
//! `r1;` then one member per `;`-separated field group `b,l,g,e`:
//! - `b`: its base offset less the one before it (the run's first segment's, then the
//!   member before it);
//! - `l`: its last offset less its base offset;
//! - `g`: its base offset less where the gap before it starts, or empty without one;
//! - `e`: its version: the 16 bytes of an MD5 ETag in base64 (URL-safe, unpadded)
//!   after `m` (quoted, as S3's API answers it) or `h` (bare, as its events carry it),
//!   or `=` and the version as it is.
//!
//! A member's key is not stored: it is the run's first segment's key with the member's
//! base offset (the run's segments are one partition's). Members this form cannot hold
//! (another key, a version with `,` or `;`) are stored as JSON, which is also read.
//! About 29 bytes a member, against 114 as JSON; past a kilobyte the form is
//! compressed (zstd, then base64 after `z1;`), to some 22.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use kfs_plan::keys::{SegmentFile, SegmentKey};

use serde::{Deserialize, Serialize};

use super::{LedgerError, from_stored_field, to_stored_field};

/// A segment converted in another segment's run: it has no entry of its own, the
/// run's entry names it. Stored compactly (a run holds up to
/// [`MAX_RUN_SEGMENTS`](crate::MAX_RUN_SEGMENTS) of them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunMember {
    /// Object key of the `.kfs`.
    #[serde(rename = "s")]
    pub segment: String,
    /// ETag or content hash of the converted version.
    #[serde(rename = "e")]
    pub etag: String,
    /// Base offset.
    #[serde(rename = "b")]
    pub base_offset: i64,
    /// Last offset.
    #[serde(rename = "l")]
    pub last_offset: i64,
    /// When the segment before it in the run ended before this one's base offset: the
    /// first offset after it. The offsets up to this segment are a gap no segment was
    /// listed in; the commit records it as a gap, or drops the run if a segment is
    /// listed there by then.
    #[serde(rename = "g", default, skip_serializing_if = "Option::is_none")]
    pub gap_from: Option<i64>,
}

impl RunMember {
    /// As stored for the entry of `segment` (compact, else JSON), `None` when there
    /// are none.
    pub fn to_stored(members: &[Self], segment: &str) -> Result<Option<String>, LedgerError> {
        if members.is_empty() {
            return Ok(None);
        }
        match encode(members, segment) {
            Some(compact) => Ok(Some(compact)),
            None => to_stored_field(members, false, "members", segment),
        }
    }

    /// From the stored form of the entry of `segment` (absent: none).
    pub fn from_stored(stored: Option<&str>, segment: &str) -> Result<Vec<Self>, LedgerError> {
        match stored {
            Some(compact) if is_compact(compact) => {
                decode(compact, segment).map_err(|reason| LedgerError::Corrupt {
                    segment: segment.to_owned(),
                    reason: format!("members: {reason}"),
                })
            }
            _ => from_stored_field(stored, "members", segment),
        }
    }
}

const TAG: &str = "r1;";
const COMPRESSED_TAG: &str = "z1;";
/// Past this many bytes the compact form is compressed.
const COMPRESS_FROM: usize = 1024;
/// Most bytes a compressed form may expand to (a run's members take some 60 KB).
const MAX_EXPANDED: usize = 4 << 20;

/// The compact form of `members` of the run whose first segment is `segment`, if it
/// can hold them.
pub(super) fn encode(members: &[RunMember], segment: &str) -> Option<String> {
    let (lead, _) = SegmentKey::parse(segment)?;
    let mut out = String::with_capacity(TAG.len() + members.len() * 32);
    out.push_str(TAG);
    let mut previous = lead.base_offset;
    for (i, member) in members.iter().enumerate() {
        let key = SegmentKey {
            base_offset: member.base_offset,
            ..lead.clone()
        };
        if key.object_key(SegmentFile::Data) != member.segment || member.etag.contains([',', ';']) {
            return None;
        }
        if i > 0 {
            out.push(';');
        }
        let gap = match member.gap_from {
            Some(from) => member.base_offset.checked_sub(from)?.to_string(),
            None => String::new(),
        };
        out.push_str(&format!(
            "{},{},{gap},{}",
            member.base_offset.checked_sub(previous)?,
            member.last_offset.checked_sub(member.base_offset)?,
            version(&member.etag),
        ));
        previous = member.base_offset;
    }
    if out.len() < COMPRESS_FROM {
        return Some(out);
    }
    let compressed = zstd::bulk::compress(out.as_bytes(), 9).ok()?;
    Some(format!(
        "{COMPRESSED_TAG}{}",
        URL_SAFE_NO_PAD.encode(compressed)
    ))
}

/// Whether `stored` is in the compact form.
pub(super) fn is_compact(stored: &str) -> bool {
    stored.starts_with(TAG) || stored.starts_with(COMPRESSED_TAG)
}

/// The members of the run whose first segment is `segment` from their compact form,
/// or why it cannot be read.
pub(super) fn decode(stored: &str, segment: &str) -> Result<Vec<RunMember>, String> {
    let (lead, _) =
        SegmentKey::parse(segment).ok_or_else(|| format!("{segment} is not a segment key"))?;
    let expanded;
    let stored = match stored.strip_prefix(COMPRESSED_TAG) {
        Some(encoded) => {
            let compressed = URL_SAFE_NO_PAD
                .decode(encoded)
                .map_err(|e| format!("compressed members: {e}"))?;
            let bytes = zstd::bulk::decompress(&compressed, MAX_EXPANDED)
                .map_err(|e| format!("compressed members: {e}"))?;
            expanded = String::from_utf8(bytes).map_err(|e| format!("compressed members: {e}"))?;
            expanded.as_str()
        }
        None => stored,
    };
    let body = stored.strip_prefix(TAG).ok_or("not the compact form")?;
    let mut previous = lead.base_offset;
    let mut members = Vec::new();
    for (i, group) in body.split(';').enumerate() {
        let bad = |why: &str| format!("member {i} ({group:?}): {why}");
        let mut fields = group.splitn(4, ',');
        let mut number = |name: &str| -> Result<Option<i64>, String> {
            let text = fields.next().ok_or_else(|| bad(&format!("no {name}")))?;
            if text.is_empty() {
                return Ok(None);
            }
            text.parse::<i64>()
                .map(Some)
                .map_err(|e| bad(&format!("{name}: {e}")))
        };
        let base_delta = number("base offset")?.ok_or_else(|| bad("no base offset"))?;
        let length = number("last offset")?.ok_or_else(|| bad("no last offset"))?;
        let gap = number("gap")?;
        let etag = fields
            .next()
            .ok_or_else(|| bad("no version"))
            .and_then(|v| unversion(v).ok_or_else(|| bad("unreadable version")))?;
        let base_offset = previous
            .checked_add(base_delta)
            .ok_or_else(|| bad("base offset overflows"))?;
        let last_offset = base_offset
            .checked_add(length)
            .ok_or_else(|| bad("last offset overflows"))?;
        let gap_from = gap
            .map(|g| {
                base_offset
                    .checked_sub(g)
                    .ok_or_else(|| bad("gap overflows"))
            })
            .transpose()?;
        let key = SegmentKey {
            base_offset,
            ..lead.clone()
        };
        members.push(RunMember {
            segment: key.object_key(SegmentFile::Data),
            etag,
            base_offset,
            last_offset,
            gap_from,
        });
        previous = base_offset;
    }
    Ok(members)
}

/// A version in its stored form.
fn version(etag: &str) -> String {
    let quoted = etag.strip_prefix('"').and_then(|e| e.strip_suffix('"'));
    let (tag, hex) = match quoted {
        Some(hex) => ('m', hex),
        None => ('h', etag),
    };
    match md5_bytes(hex) {
        Some(bytes) => format!("{tag}{}", URL_SAFE_NO_PAD.encode(bytes)),
        None => format!("={etag}"),
    }
}

/// The 16 bytes an MD5 ETag spells in lower-case hex (as S3 writes it: any other
/// spelling is kept as it is).
fn md5_bytes(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != 32
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    (0..16)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// A version from its stored form.
fn unversion(stored: &str) -> Option<String> {
    if let Some(raw) = stored.strip_prefix('=') {
        return Some(raw.to_owned());
    }
    let (quoted, encoded) = match stored.split_at_checked(1)? {
        ("m", rest) => (true, rest),
        ("h", rest) => (false, rest),
        _ => return None,
    };
    let bytes = URL_SAFE_NO_PAD.decode(encoded).ok()?;
    if bytes.len() != 16 {
        return None;
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Some(if quoted { format!("\"{hex}\"") } else { hex })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEAD: &str = "default/clicks/3/segment-00000000000000000100.kfs";

    fn member(base: i64, last: i64, etag: &str, gap_from: Option<i64>) -> RunMember {
        RunMember {
            segment: format!("default/clicks/3/segment-{base:020}.kfs"),
            etag: etag.into(),
            base_offset: base,
            last_offset: last,
            gap_from,
        }
    }

    #[test]
    fn members_round_trip_in_a_third_of_their_json() {
        let members = vec![
            member(102, 103, "\"0123456789abcdef0123456789abcdef\"", None),
            member(110, 119, "footer-75d47ce5-168", Some(104)),
            member(120, 120, "\"0123456789ABCDEF0123456789ABCDEF\"", None),
            member(121, 121, "ff005c51db0ce9bafd8d7053256bde8a", None),
            member(
                i64::MAX - 1,
                i64::MAX,
                "\"ffffffffffffffffffffffffffffffff\"",
                Some(122),
            ),
        ];
        let stored = encode(&members, LEAD).unwrap_or_default();
        assert!(is_compact(&stored), "{stored}");
        assert_eq!(decode(&stored, LEAD), Ok(members.clone()));
        let json = serde_json::to_string(&members).unwrap_or_default();
        assert!(stored.len() * 2 < json.len(), "{stored} against {json}");
    }

    #[test]
    fn a_full_run_is_compressed_to_a_fifth_of_its_json() {
        let members: Vec<RunMember> = (1..1000)
            .map(|i: i64| {
                let hex: String = (0..16)
                    .map(|j| format!("{:02x}", (i * 7919 + j * 104_729) % 251))
                    .collect();
                member(100 + 2 * i, 101 + 2 * i, &hex, None)
            })
            .collect();
        let stored = encode(&members, LEAD).unwrap_or_default();
        assert!(stored.starts_with(COMPRESSED_TAG), "{stored}");
        assert_eq!(decode(&stored, LEAD), Ok(members.clone()));
        let json = serde_json::to_string(&members).unwrap_or_default();
        assert!(
            stored.len() * 4 < json.len(),
            "{} against {}",
            stored.len(),
            json.len()
        );
        // Damaged: an error, never a panic.
        assert!(decode(&stored[..stored.len() / 2], LEAD).is_err());
        assert!(decode("z1;!!", LEAD).is_err());
        assert!(decode("z1;", LEAD).is_err());
    }

    #[test]
    fn members_it_cannot_hold_are_left_to_json() {
        // Another partition's key, and a version with a separator.
        let other = RunMember {
            segment: "default/clicks/4/segment-00000000000000000102.kfs".into(),
            ..member(102, 103, "x", None)
        };
        assert_eq!(encode(&[other], LEAD), None);
        assert_eq!(encode(&[member(102, 103, "a;b", None)], LEAD), None);
        assert_eq!(encode(&[member(102, 103, "x", None)], "not a key"), None);
    }

    #[test]
    fn a_damaged_form_is_an_error_never_a_panic() {
        for stored in [
            "r1;",
            "r1;1",
            "r1;1,2",
            "r1;1,2,,",
            "r1;x,2,,=e",
            "r1;1,2,,mAAAA",
            "r1;9223372036854775807,9223372036854775807,,=e",
            "r1;1,2,-9223372036854775808,=e",
        ] {
            assert!(decode(stored, LEAD).is_err(), "{stored}");
        }
        assert!(decode("r1;1,2,,=e", "not a key").is_err());
    }
}
