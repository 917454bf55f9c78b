//! Parquet writer settings of data files, from the table's properties: its codec and
//! level (the property names, read by [`compression`], which also checks them when a
//! table is created, so a bad value never reaches a writer), row group bounds, and no
//! dictionary for the columns unique per record.

use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use std::collections::HashMap;

/// Parquet settings of data files: the table's compression (`compression`, zstd
/// level 3 by default), row groups of at most 1 Mi rows / 128 MiB, and no dictionary for
/// the columns that are unique per record (a dictionary there is built only to be
/// abandoned).
pub fn writer_properties(
    table_properties: &HashMap<String, String>,
) -> iceberg::Result<WriterProperties> {
    let mut builder = WriterProperties::builder()
        .set_compression(compression(table_properties)?)
        .set_max_row_group_row_count(Some(1 << 20))
        .set_max_row_group_bytes(Some(128 << 20));
    for unique in ["record_id", "offset", "timestamp_ms", "timestamp"] {
        builder = builder.set_column_dictionary_enabled(ColumnPath::from(unique), false);
    }
    Ok(builder.build())
}

/// Table property of the data files' compression codec: `zstd` (default), `snappy`,
/// `gzip`, `lz4`, `brotli` or `uncompressed`.
pub const COMPRESSION_CODEC_PROPERTY: &str = "write.parquet.compression-codec";
/// Table property of the codec's level (zstd 1-22, default 3; gzip 0-9; brotli 0-11).
pub const COMPRESSION_LEVEL_PROPERTY: &str = "write.parquet.compression-level";

/// The Parquet compression a table's properties ask for; an unknown codec or a level
/// out of range is a `DataInvalid` error naming the property.
pub fn compression(properties: &HashMap<String, String>) -> iceberg::Result<Compression> {
    let invalid = |message: String| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, message);
    let codec = properties
        .get(COMPRESSION_CODEC_PROPERTY)
        .map_or("zstd", String::as_str)
        .to_ascii_lowercase();
    let level = properties
        .get(COMPRESSION_LEVEL_PROPERTY)
        .map(|text| {
            text.trim().parse::<u32>().map_err(|_| {
                invalid(format!(
                    "{COMPRESSION_LEVEL_PROPERTY}={text:?} is not a level"
                ))
            })
        })
        .transpose()?;
    let out_of_range = |e: parquet::errors::ParquetError| {
        invalid(format!("{COMPRESSION_LEVEL_PROPERTY} for {codec}: {e}"))
    };
    Ok(match codec.as_str() {
        "zstd" => Compression::ZSTD(
            ZstdLevel::try_new(level.map_or(3, |l| l as i32)).map_err(out_of_range)?,
        ),
        "gzip" => Compression::GZIP(
            parquet::basic::GzipLevel::try_new(level.unwrap_or(6)).map_err(out_of_range)?,
        ),
        "brotli" => Compression::BROTLI(
            parquet::basic::BrotliLevel::try_new(level.unwrap_or(1)).map_err(out_of_range)?,
        ),
        "snappy" => Compression::SNAPPY,
        "lz4" | "lz4_raw" => Compression::LZ4_RAW,
        "uncompressed" | "none" => Compression::UNCOMPRESSED,
        other => {
            return Err(invalid(format!(
                "{COMPRESSION_CODEC_PROPERTY}={other:?}: expected zstd, snappy, gzip, lz4, brotli or uncompressed"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_follows_the_table_properties() {
        let codec = |pairs: &[(&str, &str)]| {
            let properties: HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            compression(&properties).map(|c| format!("{c:?}"))
        };
        assert_eq!(codec(&[]).ok().as_deref(), Some("ZSTD(ZstdLevel(3))"));
        assert_eq!(
            codec(&[
                (COMPRESSION_CODEC_PROPERTY, "GZIP"),
                (COMPRESSION_LEVEL_PROPERTY, "9")
            ])
            .ok()
            .as_deref(),
            Some("GZIP(GzipLevel(9))")
        );
        assert_eq!(
            codec(&[(COMPRESSION_CODEC_PROPERTY, "snappy")])
                .ok()
                .as_deref(),
            Some("SNAPPY")
        );
        for bad in [
            &[(COMPRESSION_CODEC_PROPERTY, "lzma")][..],
            &[(COMPRESSION_LEVEL_PROPERTY, "99")][..],
            &[(COMPRESSION_LEVEL_PROPERTY, "high")][..],
        ] {
            let error = codec(bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                error.contains("write.parquet.compression"),
                "{bad:?}: {error}"
            );
        }
    }
}
