//! Resource limits applied while decoding untrusted input.
//!
//! No length read from the input is used to allocate before it has been checked
//! against the bytes actually present and against these limits, and decompressed
//! output is capped so that a compression bomb becomes an error, not an allocation.

/// Limits applied while decoding. The defaults suit segments from a KafScale broker
/// (4 MiB by default, larger from restore tooling) with room to spare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest accepted batch frame (`12 + batchLength`), in bytes.
    pub max_batch_bytes: u64,
    /// Largest decompressed records section of one batch, in bytes.
    pub max_decompressed_batch_bytes: u64,
    /// Largest accepted ratio of decompressed to compressed size, applied on top of
    /// `max_decompressed_batch_bytes` once the output passes `ratio_free_bytes`.
    pub max_compression_ratio: u64,
    /// Output size up to which the compression ratio is not checked: 16 MiB by
    /// default, 16 times a producer's default `max.request.size`, so that a batch of
    /// legitimate but very compressible records (a 1 MiB key of one repeated byte
    /// compresses 2,500 to 1) is never taken for a bomb.
    pub ratio_free_bytes: u64,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        Self {
            max_batch_bytes: 256 << 20,
            max_decompressed_batch_bytes: 256 << 20,
            max_compression_ratio: 512,
            ratio_free_bytes: 16 << 20,
        }
    }
}

impl DecodeLimits {
    /// The most bytes a compressed records section of `compressed_len` bytes may expand to.
    pub fn decompressed_cap(&self, compressed_len: u64) -> u64 {
        let by_ratio = compressed_len
            .saturating_mul(self.max_compression_ratio)
            .max(self.ratio_free_bytes);
        by_ratio.min(self.max_decompressed_batch_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_is_bounded_by_ratio_and_absolute_limit() {
        let limits = DecodeLimits::default();
        assert_eq!(limits.decompressed_cap(10), 16 << 20);
        assert_eq!(limits.decompressed_cap(65536), 65536 * 512);
        assert_eq!(limits.decompressed_cap(u64::MAX), 256 << 20);
    }
}
