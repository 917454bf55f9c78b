//! Verifying a fetched LFS blob against its envelope. The operator's policy sets the
//! weakest checksum algorithm accepted ([`ChecksumAlg`], ordered by strength); an
//! envelope cannot lower it: every checksum it carries is checked, the strongest must
//! reach the minimum, and what was verified is what the row records ([`Verified`]).

use super::Envelope;

/// A checksum algorithm of LFS envelopes, weakest first (the order is the strength).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChecksumAlg {
    /// No checksum: nothing is verified.
    None,
    /// CRC-32 (IEEE), 8 hex digits or a decimal number: detects corruption only.
    Crc32,
    /// MD5.
    Md5,
    /// SHA-256 (the default minimum).
    #[default]
    Sha256,
}

impl ChecksumAlg {
    /// Its name, as envelopes and settings spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Crc32 => "crc32",
            Self::Md5 => "md5",
            Self::Sha256 => "sha256",
        }
    }

    /// Parses `none`, `crc32`, `md5` or `sha256` (any case).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(Self::None),
            "crc32" => Ok(Self::Crc32),
            "md5" => Ok(Self::Md5),
            "sha256" => Ok(Self::Sha256),
            other => Err(format!(
                "checksum algorithm {other:?}: expected sha256, md5, crc32 or none"
            )),
        }
    }

    /// Whether `blob` has the checksum `expected` (hex, any case) by this algorithm.
    fn matches(self, blob: &[u8], expected: &str) -> bool {
        let expected = expected.trim().to_ascii_lowercase();
        match self {
            Self::None => true,
            Self::Crc32 => {
                let crc = crc32fast::hash(blob);
                format!("{crc:08x}") == expected || crc.to_string() == expected
            }
            Self::Md5 => {
                use md5::Digest;
                hex(&md5::Md5::digest(blob)) == expected
            }
            Self::Sha256 => {
                use sha2::Digest;
                hex(&sha2::Sha256::digest(blob)) == expected
            }
        }
    }
}

/// What a blob was verified against: the strongest algorithm checked and its checksum
/// (`ChecksumAlg::None` and no checksum when the policy asks for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The algorithm.
    pub alg: ChecksumAlg,
    /// The checksum, as the envelope wrote it.
    pub checksum: Option<String>,
}

/// The checksums `envelope` carries, strongest first: `sha256`, and `checksum` by
/// `checksum_alg` (none for `none`, or without a checksum); an algorithm it names and
/// this does not know is an error (the record's dead-letter reason).
pub fn claims(envelope: &Envelope) -> Result<Vec<(ChecksumAlg, &str)>, String> {
    let mut claims = Vec::new();
    if let Some(sum) = &envelope.sha256 {
        claims.push((ChecksumAlg::Sha256, sum.as_str()));
    }
    if let Some(alg) = &envelope.checksum_alg {
        let alg = ChecksumAlg::parse(alg)
            .map_err(|e| format!("LFS envelope of {} names a {e}", envelope.key))?;
        if let (Some(sum), true) = (&envelope.checksum, alg != ChecksumAlg::None) {
            claims.push((alg, sum.as_str()));
        }
    }
    claims.sort_by_key(|claim| std::cmp::Reverse(claim.0));
    Ok(claims)
}

/// Checks a fetched blob against its envelope: its size; then, unless `minimum` is
/// `none`, every checksum the envelope carries, the strongest of which must be at
/// least `minimum`. Returns what was verified, or why the record is a dead letter.
pub fn verify_blob(
    envelope: &Envelope,
    blob: &[u8],
    minimum: ChecksumAlg,
) -> Result<Verified, String> {
    if blob.len() as u64 != envelope.size {
        return Err(format!(
            "LFS blob {} has {} bytes, its envelope says {}",
            envelope.key,
            blob.len(),
            envelope.size
        ));
    }
    if minimum == ChecksumAlg::None {
        return Ok(Verified {
            alg: ChecksumAlg::None,
            checksum: None,
        });
    }
    let claims = claims(envelope)?;
    let Some(&(strongest, sum)) = claims.first().filter(|(alg, _)| *alg >= minimum) else {
        let carried = claims.first().map_or("no", |(alg, _)| alg.name());
        return Err(format!(
            "LFS envelope of {} carries {carried} checksum, below the minimum {} the operator set (lfs min_checksum_alg; verify_checksums = false accepts any)",
            envelope.key,
            minimum.name()
        ));
    };
    for (alg, expected) in &claims {
        if !alg.matches(blob, expected) {
            return Err(format!(
                "LFS blob {} fails its {} checksum (expected {})",
                envelope.key,
                alg.name(),
                expected.trim().to_ascii_lowercase()
            ));
        }
    }
    Ok(Verified {
        alg: strongest,
        checksum: Some(sum.to_owned()),
    })
}

/// Lowercase hex of `bytes`.
pub(super) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut text, b| {
        let _ = write!(text, "{b:02x}");
        text
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = b"The quick brown fox jumps over the lazy dog";
    const SHA256: &str = "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592";

    fn envelope(sha256: Option<&str>, alg: Option<&str>, sum: Option<&str>) -> Envelope {
        Envelope {
            kfs_lfs: 1,
            bucket: "seg".into(),
            key: "k".into(),
            size: BODY.len() as u64,
            sha256: sha256.map(Into::into),
            checksum: sum.map(Into::into),
            checksum_alg: alg.map(Into::into),
            content_type: None,
        }
    }

    fn verified(alg: ChecksumAlg, sum: &str) -> Result<Verified, String> {
        Ok(Verified {
            alg,
            checksum: Some(sum.into()),
        })
    }

    #[test]
    fn algorithms_are_ordered_by_strength() {
        use ChecksumAlg::*;
        assert!(None < Crc32 && Crc32 < Md5 && Md5 < Sha256);
        for alg in [None, Crc32, Md5, Sha256] {
            assert_eq!(ChecksumAlg::parse(&alg.name().to_uppercase()), Ok(alg));
        }
        assert!(ChecksumAlg::parse("blake3").is_err());
    }

    #[test]
    fn verifies_size_and_each_checksum() {
        let md5 = "9e107d9d372bb6826bd81d3542a419d6";
        let e = envelope(Some(SHA256), None, None);
        assert_eq!(
            verify_blob(&e, BODY, ChecksumAlg::Sha256),
            verified(ChecksumAlg::Sha256, SHA256)
        );
        assert!(verify_blob(&e, b"other", ChecksumAlg::Sha256).is_err());
        let e = envelope(None, Some("md5"), Some(md5));
        assert_eq!(
            verify_blob(&e, BODY, ChecksumAlg::Md5),
            verified(ChecksumAlg::Md5, md5)
        );
        let e = envelope(None, Some("crc32"), Some("414fa339"));
        assert_eq!(
            verify_blob(&e, BODY, ChecksumAlg::Crc32),
            verified(ChecksumAlg::Crc32, "414fa339")
        );
        let e = envelope(None, Some("crc32"), Some("1095738169"));
        assert!(verify_blob(&e, BODY, ChecksumAlg::Crc32).is_ok());
        let e = envelope(None, Some("crc32"), Some("414fa338"));
        assert!(
            verify_blob(&e, BODY, ChecksumAlg::Crc32).is_err_and(|r| r.contains("fails its crc32"))
        );
        // The operator asked for none: only the size.
        assert_eq!(
            verify_blob(&e, BODY, ChecksumAlg::None),
            Ok(Verified {
                alg: ChecksumAlg::None,
                checksum: None
            })
        );
        let e = envelope(Some(SHA256), Some("blake3"), Some("x"));
        assert!(verify_blob(&e, BODY, ChecksumAlg::Crc32).is_err_and(|r| r.contains("blake3")));
    }

    #[test]
    fn an_envelope_cannot_lower_the_minimum() {
        let below = |e: &Envelope, minimum| {
            verify_blob(e, BODY, minimum).is_err_and(|r| r.contains("below the minimum"))
        };
        assert!(below(
            &envelope(None, Some("none"), None),
            ChecksumAlg::Crc32
        ));
        assert!(below(&envelope(None, None, None), ChecksumAlg::Crc32));
        assert!(below(
            &envelope(None, Some("crc32"), Some("414fa339")),
            ChecksumAlg::Md5
        ));
        assert!(below(
            &envelope(None, Some("md5"), Some("x")),
            ChecksumAlg::Sha256
        ));
        // "none" does not switch off the sha256 the envelope also carries.
        let wrong = envelope(Some(&"0".repeat(64)), Some("NONE"), None);
        assert!(
            verify_blob(&wrong, BODY, ChecksumAlg::Crc32)
                .is_err_and(|r| r.contains("fails its sha256"))
        );
        // Every checksum carried is checked; the strongest is what was verified.
        let both = envelope(Some(SHA256), Some("crc32"), Some("414fa339"));
        assert_eq!(
            verify_blob(&both, BODY, ChecksumAlg::Crc32),
            verified(ChecksumAlg::Sha256, SHA256)
        );
        let weak_wrong = envelope(Some(SHA256), Some("crc32"), Some("0"));
        assert!(
            verify_blob(&weak_wrong, BODY, ChecksumAlg::Sha256)
                .is_err_and(|r| r.contains("fails its crc32"))
        );
    }
}
