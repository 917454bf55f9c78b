//! `kfs-iceberg dump`: verify a segment, then print it as text or as JSON lines.
//!
//! The segment is verified completely before anything is printed, so a malformed
//! segment never yields partial output on stdout. Both passes stream batch by batch.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kfs_segment::{
    Batch, DecodeError, DecodeLimits, ReadFrames, Record, SegmentDecoder, SegmentIndex,
    SegmentSummary,
};
use serde::Serialize;

use crate::CliError;
use crate::time::rfc3339_ms;

/// Arguments of `dump`.
#[derive(Debug, clap::Args)]
pub struct DumpArgs {
    /// Print one JSON object per data record, one per line.
    #[arg(long)]
    json: bool,
    /// Also check this .index file against the segment.
    #[arg(long, value_name = "FILE.index")]
    index: Option<PathBuf>,
    /// The .kfs segment.
    #[arg(value_name = "FILE.kfs")]
    file: PathBuf,
}

fn open(path: &Path) -> Result<SegmentDecoder<ReadFrames<BufReader<File>>>, CliError> {
    let file = File::open(path).map_err(|source| CliError::Io {
        path: path.to_owned(),
        source,
    })?;
    let reader = BufReader::with_capacity(1 << 20, file);
    SegmentDecoder::from_reader(reader, DecodeLimits::default())
        .map_err(|source| decode_error(path, source))
}

fn decode_error(path: &Path, source: DecodeError) -> CliError {
    CliError::Decode {
        path: path.to_owned(),
        source,
    }
}

/// Runs `dump`.
pub fn run(args: &DumpArgs) -> Result<(), CliError> {
    let path = args.file.as_path();
    // Pass 1: verify everything, keeping only batch starts for the index check.
    let mut starts = Vec::new();
    open(path)?
        .for_each_batch(|batch| {
            starts.push((batch.header.base_offset, batch.position));
            Ok::<(), DecodeError>(())
        })
        .map_err(|e| decode_error(path, e))?;
    let index = match &args.index {
        Some(index_path) => {
            let bytes = std::fs::read(index_path).map_err(|source| CliError::Io {
                path: index_path.clone(),
                source,
            })?;
            let index = SegmentIndex::decode(&bytes)
                .and_then(|index| index.check_against(&starts).map(|()| index))
                .map_err(|e| decode_error(index_path, e))?;
            Some(index)
        }
        None => None,
    };
    // Pass 2: print.
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut decoder = open(path)?;
    let stdout_error = |source| CliError::Io {
        path: PathBuf::from("<stdout>"),
        source,
    };
    if !args.json {
        print_segment_header(&mut out, path, decoder.header()).map_err(stdout_error)?;
    }
    let mut write_error = None;
    let summary = decoder
        .for_each_batch(|batch| {
            let written = if args.json {
                write_json_batch(&mut out, batch)
            } else {
                write_text_batch(&mut out, batch)
            };
            if let Err(e) = written {
                write_error = Some(e);
                return Err(DecodeError::at(
                    batch.position,
                    kfs_segment::DecodeErrorKind::Io(std::io::Error::other("stdout closed")),
                ));
            }
            Ok(())
        })
        .map_err(|e| match write_error.take() {
            Some(io) => stdout_error(io),
            None => decode_error(path, e),
        })?;
    if !args.json {
        print_summary(&mut out, &summary, index.as_ref()).map_err(stdout_error)?;
    }
    out.flush().map_err(stdout_error)
}

#[derive(Serialize)]
struct JsonHeader<'a> {
    /// The key as Kafka's Java consumer decodes it.
    key: std::borrow::Cow<'a, str>,
    /// The key's bytes (base64), only where they are not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    key_bytes: Option<String>,
    value: Option<String>,
}

#[derive(Serialize)]
struct JsonRecord<'a> {
    offset: i64,
    timestamp_ms: i64,
    key: Option<String>,
    value: Option<String>,
    headers: Vec<JsonHeader<'a>>,
}

impl<'a> JsonRecord<'a> {
    fn new(record: &Record<'a>) -> Self {
        let b64 = |bytes: Option<&[u8]>| bytes.map(|b| STANDARD.encode(b));
        Self {
            offset: record.offset,
            timestamp_ms: record.timestamp_ms,
            key: b64(record.key),
            value: b64(record.value),
            headers: record
                .headers
                .iter()
                .map(|h| {
                    let (key, key_bytes) = h.key_text();
                    JsonHeader {
                        key,
                        key_bytes: b64(key_bytes),
                        value: b64(h.value),
                    }
                })
                .collect(),
        }
    }
}

fn write_json_batch(out: &mut impl Write, batch: &Batch<'_>) -> std::io::Result<()> {
    for record in &batch.records {
        serde_json::to_writer(&mut *out, &JsonRecord::new(record))?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

fn print_segment_header(
    out: &mut impl Write,
    path: &Path,
    header: &kfs_segment::SegmentHeader,
) -> std::io::Result<()> {
    writeln!(out, "segment {}", path.display())?;
    writeln!(
        out,
        "  version {}, base offset {}, {} messages, created {} ({})",
        header.version,
        header.base_offset,
        header.message_count,
        rfc3339_ms(header.created_ms),
        header.created_ms
    )
}

fn write_text_batch(out: &mut impl Write, batch: &Batch<'_>) -> std::io::Result<()> {
    let h = &batch.header;
    let kind = if batch.is_control() {
        "control batch"
    } else {
        "batch"
    };
    writeln!(
        out,
        "{kind} @ byte {}: offsets {}..={}, {} records, codec {}, {:?}, timestamps {}..{}, {} bytes stored ({} uncompressed)",
        batch.position,
        h.base_offset,
        h.last_offset().unwrap_or(h.base_offset),
        h.record_count,
        batch.compression,
        h.timestamp_type(),
        rfc3339_ms(h.base_timestamp),
        rfc3339_ms(h.max_timestamp),
        batch.stored_records_bytes,
        batch.records_bytes,
    )?;
    if batch.is_control() {
        writeln!(out, "  (transaction markers: not data, skipped)")?;
    }
    for record in &batch.records {
        write!(
            out,
            "  offset {} ts {} key {} value {}",
            record.offset,
            rfc3339_ms(record.timestamp_ms),
            preview(record.key),
            preview(record.value)
        )?;
        for header in &record.headers {
            write!(
                out,
                " header {}={}",
                preview(Some(header.key)),
                preview(header.value)
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// A short, printable rendering of bytes: quoted text when UTF-8, hex otherwise.
fn preview(bytes: Option<&[u8]>) -> String {
    const MAX: usize = 64;
    let Some(bytes) = bytes else {
        return "null".into();
    };
    let shown = &bytes[..bytes.len().min(MAX)];
    let more = if bytes.len() > MAX {
        format!("… ({} bytes)", bytes.len())
    } else {
        String::new()
    };
    match std::str::from_utf8(shown) {
        Ok(text) => format!("{text:?}{more}"),
        Err(_) => {
            let hex: String = shown.iter().map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}{more}")
        }
    }
}

fn print_summary(
    out: &mut impl Write,
    s: &SegmentSummary,
    index: Option<&SegmentIndex>,
) -> std::io::Result<()> {
    writeln!(
        out,
        "verified: {} batches ({} control), {} data records, offsets {}..={}, body crc {:#010x}, {} bytes",
        s.batches,
        s.control_batches,
        s.records,
        s.first_offset
            .map_or_else(|| "-".to_owned(), |o| o.to_string()),
        s.last_offset,
        s.footer.body_crc,
        s.file_bytes
    )?;
    if let Some(index) = index {
        writeln!(
            out,
            "index: {} entries (interval {}), all on batch starts",
            index.entries.len(),
            index.interval
        )?;
    }
    Ok(())
}
