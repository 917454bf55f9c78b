//! Batch compression codecs: gzip, snappy (xerial-framed and raw), LZ4 frame, zstd.
//!
//! Decompression writes into a caller-owned buffer that is reused from batch to batch
//! and never grows past a cap, so a compression bomb fails fast instead of allocating.

use std::io::{Read, Write};

use crate::error::{DecodeErrorKind, EncodeError};

/// The codec of a batch, bits 0-2 of its attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Records stored as they are.
    None,
    /// A gzip stream.
    Gzip,
    /// Snappy, xerial-framed (Java client) or raw (librdkafka).
    Snappy,
    /// The LZ4 frame format.
    Lz4,
    /// A zstd frame.
    Zstd,
}

impl Compression {
    /// All codecs, in wire-id order.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// Decodes the codec bits of batch attributes.
    pub fn from_attributes(attributes: i16) -> Result<Self, DecodeErrorKind> {
        match attributes & 0x07 {
            0 => Ok(Self::None),
            1 => Ok(Self::Gzip),
            2 => Ok(Self::Snappy),
            3 => Ok(Self::Lz4),
            4 => Ok(Self::Zstd),
            other => Err(DecodeErrorKind::UnknownCodec(other as u8)),
        }
    }

    /// The codec id carried in batch attributes.
    pub fn id(self) -> i16 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
        }
    }

    /// The codec's name as Kafka spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How snappy-compressed records are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SnappyFraming {
    /// The xerial framing written by the Java client: a 16-byte header, then
    /// `[i32 length][raw snappy block]` chunks.
    #[default]
    Xerial,
    /// One raw snappy block, as written by librdkafka.
    Raw,
}

const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;
const XERIAL_BLOCK: usize = 32 * 1024;

/// Decompresses `input` into `out` (cleared first), failing once the output would
/// exceed `cap` bytes.
pub(crate) fn decompress(
    compression: Compression,
    input: &[u8],
    cap: u64,
    out: &mut Vec<u8>,
) -> Result<(), DecodeErrorKind> {
    out.clear();
    let codec = compression.name();
    let too_large = || DecodeErrorKind::DecompressedTooLarge {
        codec,
        limit: cap,
        compressed: input.len() as u64,
    };
    let failed = |reason: String| DecodeErrorKind::Decompress { codec, reason };
    match compression {
        Compression::None => {
            if input.len() as u64 > cap {
                return Err(too_large());
            }
            out.extend_from_slice(input);
            Ok(())
        }
        Compression::Gzip => read_capped(
            flate2::read::GzDecoder::new(input),
            cap,
            out,
            failed,
            too_large,
        ),
        Compression::Lz4 => read_capped(
            lz4_flex::frame::FrameDecoder::new(input),
            cap,
            out,
            failed,
            too_large,
        ),
        Compression::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(input)
                .map_err(|e| failed(e.to_string()))?;
            // The window is allocated up front from the frame header: bound it too.
            decoder
                .window_log_max(zstd_window_log_max(cap))
                .map_err(|e| failed(e.to_string()))?;
            read_capped(decoder, cap, out, failed, too_large)
        }
        Compression::Snappy => {
            if input.len() >= XERIAL_HEADER_LEN && input.starts_with(XERIAL_MAGIC) {
                let mut rest = &input[XERIAL_HEADER_LEN..];
                while !rest.is_empty() {
                    if rest.len() < 4 {
                        return Err(failed(format!(
                            "xerial chunk header cut short: {} bytes left",
                            rest.len()
                        )));
                    }
                    let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                    let Some(block) = rest.get(4..4 + len) else {
                        return Err(failed(format!(
                            "xerial chunk of {len} bytes but only {} left",
                            rest.len() - 4
                        )));
                    };
                    snappy_block(block, cap, out, failed, too_large)?;
                    rest = &rest[4 + len..];
                }
                Ok(())
            } else {
                snappy_block(input, cap, out, failed, too_large)
            }
        }
    }
}

/// The largest zstd window (as a power of two) accepted for an output cap: enough for
/// the output itself, and never below 8 MiB (2^23), the window of every compression
/// level up to 19, so that streaming producers' frames always decode.
pub(crate) fn zstd_window_log_max(cap: u64) -> u32 {
    let needed = 64 - cap.max(1).saturating_sub(1).leading_zeros();
    needed.clamp(ZSTD_MIN_WINDOW_LOG, 27)
}

/// Smallest window limit applied to zstd frames (8 MiB).
pub(crate) const ZSTD_MIN_WINDOW_LOG: u32 = 23;

fn read_capped(
    mut reader: impl Read,
    cap: u64,
    out: &mut Vec<u8>,
    failed: impl Fn(String) -> DecodeErrorKind,
    too_large: impl Fn() -> DecodeErrorKind,
) -> Result<(), DecodeErrorKind> {
    // Grow by doubling, but never past cap + 1 bytes: one byte over the cap proves
    // the output too large without ever holding more. New room is zeroed once.
    let limit = usize::try_from(cap.saturating_add(1)).unwrap_or(usize::MAX);
    let mut filled = out.len();
    let result = loop {
        if filled == out.len() {
            let target = out.len().saturating_mul(2).max(64 * 1024).min(limit);
            if target <= out.len() {
                break Err(too_large());
            }
            out.reserve_exact(target - out.len());
            out.resize(target, 0);
        }
        match reader.read(&mut out[filled..]) {
            Ok(0) => break Ok(()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(failed(e.to_string())),
        }
        if filled as u64 > cap {
            break Err(too_large());
        }
    };
    out.truncate(filled);
    result
}

fn snappy_block(
    block: &[u8],
    cap: u64,
    out: &mut Vec<u8>,
    failed: impl Fn(String) -> DecodeErrorKind,
    too_large: impl Fn() -> DecodeErrorKind,
) -> Result<(), DecodeErrorKind> {
    let len = snap::raw::decompress_len(block).map_err(|e| failed(e.to_string()))?;
    let start = out.len();
    if (start + len) as u64 > cap {
        return Err(too_large());
    }
    out.resize(start + len, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| failed(e.to_string()))?;
    out.truncate(start + written);
    Ok(())
}

/// Compresses `input` with `compression` (and `framing` for snappy), appending to `out`.
pub(crate) fn compress(
    compression: Compression,
    framing: SnappyFraming,
    input: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let codec = compression.name();
    let failed = |e: std::io::Error| EncodeError::Compress {
        codec,
        reason: e.to_string(),
    };
    match compression {
        Compression::None => out.extend_from_slice(input),
        Compression::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(out, flate2::Compression::default());
            encoder.write_all(input).map_err(failed)?;
            encoder.finish().map_err(failed)?;
        }
        Compression::Lz4 => {
            let mut encoder = lz4_flex::frame::FrameEncoder::new(out);
            encoder.write_all(input).map_err(failed)?;
            encoder.finish().map_err(|e| EncodeError::Compress {
                codec,
                reason: e.to_string(),
            })?;
        }
        Compression::Zstd => {
            let compressed = zstd::bulk::compress(input, 3).map_err(failed)?;
            out.extend_from_slice(&compressed);
        }
        Compression::Snappy => {
            let mut encoder = snap::raw::Encoder::new();
            let mut compress_block = |block: &[u8], out: &mut Vec<u8>| {
                encoder
                    .compress_vec(block)
                    .map(|compressed| out.extend_from_slice(&compressed))
                    .map_err(|e| EncodeError::Compress {
                        codec,
                        reason: e.to_string(),
                    })
            };
            match framing {
                SnappyFraming::Raw => compress_block(input, out)?,
                SnappyFraming::Xerial => {
                    out.extend_from_slice(XERIAL_MAGIC);
                    out.extend_from_slice(&1i32.to_be_bytes());
                    out.extend_from_slice(&1i32.to_be_bytes());
                    for chunk in input.chunks(XERIAL_BLOCK) {
                        let len_at = out.len();
                        out.extend_from_slice(&[0; 4]);
                        compress_block(chunk, out)?;
                        let len = u32::try_from(out.len() - len_at - 4).map_err(|_| {
                            EncodeError::TooLarge {
                                what: "snappy chunk",
                            }
                        })?;
                        out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips() {
        let input: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for compression in Compression::ALL {
            for framing in [SnappyFraming::Xerial, SnappyFraming::Raw] {
                let mut compressed = Vec::new();
                compress(compression, framing, &input, &mut compressed).ok();
                let mut out = Vec::new();
                let result = decompress(compression, &compressed, 1 << 30, &mut out);
                assert!(result.is_ok(), "{compression}: {result:?}");
                assert_eq!(out, input, "{compression} {framing:?}");
            }
        }
    }

    #[test]
    fn output_past_the_cap_is_refused() {
        let input = vec![0u8; 1 << 20];
        for compression in Compression::ALL {
            let mut compressed = Vec::new();
            compress(compression, SnappyFraming::Xerial, &input, &mut compressed).ok();
            let mut out = Vec::new();
            let result = decompress(compression, &compressed, 4096, &mut out);
            assert!(
                matches!(result, Err(DecodeErrorKind::DecompressedTooLarge { .. })),
                "{compression}: {result:?}"
            );
            assert!(
                out.capacity() < 1 << 16,
                "{compression} grew to {}",
                out.capacity()
            );
        }
    }
}
