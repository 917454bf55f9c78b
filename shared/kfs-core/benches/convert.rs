//! Converter throughput, stage by stage, in bytes of record payload (keys, values and
//! header bytes) on one core. Run with `cargo bench -p kfs-core --bench convert`.
//!
//! - `records_to_arrow`: decoded records into Arrow batches of the topic table
//!   ([`RecordColumns`]), nothing else.
//! - `parquet_encode`: those Arrow batches through the Parquet writer with the data
//!   files' settings (zstd level 3), into memory.
//! - `convert_segment`: one whole uncompressed segment end to end, as the converter
//!   runs it: stream in, CRCs, decode, Arrow, Parquet, the data file written to the
//!   warehouse under `TMPDIR` with its Iceberg metrics.
//!
//! Decoding alone is `cargo bench -p kfs-segment --bench decode`.

mod common;

use std::hint::black_box;

use arrow_array::RecordBatch;
use common::BenchTable;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kfs_core::testing::arrow_schema;
use kfs_core::testing::{ROWS_PER_BATCH, RecordColumns, writer_properties};
use kfs_core::testing::{SegmentInput, ValueColumns, convert_segment, in_memory};
use kfs_plan::keys::SegmentKey;
use kfs_segment::{
    BatchSpec, Compression, DecodeLimits, OwnedRecord, Record, RecordHeader, encode_segment,
};
use parquet::arrow::ArrowWriter;

const RECORDS: usize = 32_768;
const RECORDS_PER_BATCH: usize = 500;

/// Event-like records: a 16-byte key, a JSON-ish value of about 1 KiB, two headers.
fn records() -> Vec<OwnedRecord> {
    (0..RECORDS as i64)
        .map(|offset| {
            let mut value = format!(
                r#"{{"user":"u{:08}","event":"click","page":"/products/{}","ts":{},"attrs":{{"#,
                offset * 7919 % 100_000,
                offset % 977,
                1_767_225_600_000 + offset
            );
            while value.len() < 1000 {
                value.push_str(&format!(r#""k{}":"v{}","#, value.len(), offset ^ 0x5a5a));
            }
            value.push_str(r#""end":true}}"#);
            OwnedRecord {
                offset,
                timestamp_ms: 1_767_225_600_000 + offset,
                key: Some(format!("user-{:011}", offset % 50_000).into_bytes()),
                value: Some(value.into_bytes()),
                headers: vec![
                    ("trace".into(), Some(format!("{offset:016x}").into_bytes())),
                    ("source".into(), Some(b"web".to_vec())),
                ],
            }
        })
        .collect()
}

fn payload_bytes(records: &[OwnedRecord]) -> u64 {
    records
        .iter()
        .map(|r| {
            r.key.as_ref().map_or(0, Vec::len)
                + r.value.as_ref().map_or(0, Vec::len)
                + r.headers
                    .iter()
                    .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                    .sum::<usize>()
        })
        .sum::<usize>() as u64
}

fn borrowed(record: &OwnedRecord) -> Record<'_> {
    Record {
        offset: record.offset,
        timestamp_ms: record.timestamp_ms,
        key: record.key.as_deref(),
        value: record.value.as_deref(),
        headers: record
            .headers
            .iter()
            .map(|(key, value)| RecordHeader {
                key,
                value: value.as_deref(),
            })
            .collect(),
    }
}

fn to_arrow(columns: &mut RecordColumns, records: &[Record<'_>]) -> Vec<RecordBatch> {
    let mut batches = Vec::new();
    for record in records {
        if columns.push("clicks", 0, record).is_err() {
            break;
        }
        if columns.rows() >= ROWS_PER_BATCH {
            batches.extend(columns.finish().ok());
        }
    }
    if columns.rows() > 0 {
        batches.extend(columns.finish().ok());
    }
    batches
}

fn benches(c: &mut Criterion) {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => panic!("no runtime: {e}"),
    };
    let owned = records();
    let payload = payload_bytes(&owned);
    let table = match runtime.block_on(BenchTable::new()) {
        Ok(table) => table,
        Err(e) => panic!("no bench table: {e}"),
    };
    let schema = match arrow_schema(table.table().metadata().current_schema()) {
        Ok(schema) => schema,
        Err(e) => panic!("no schema: {e}"),
    };
    let new_columns = || match RecordColumns::new(schema.clone()) {
        Ok(columns) => columns,
        Err(e) => panic!("no columns: {e}"),
    };
    let decoded: Vec<Record<'_>> = owned.iter().map(borrowed).collect();

    let mut group = c.benchmark_group("convert");
    group.throughput(Throughput::Bytes(payload));
    group.sample_size(10);
    group.bench_function("records_to_arrow", |b| {
        let mut columns = new_columns();
        b.iter(|| black_box(to_arrow(&mut columns, &decoded).len()))
    });

    let batches = to_arrow(&mut new_columns(), &decoded);
    let properties = match writer_properties(&Default::default()) {
        Ok(properties) => properties,
        Err(e) => panic!("no writer properties: {e}"),
    };
    group.bench_function("parquet_encode", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(64 << 20);
            let written = ArrowWriter::try_new(&mut out, schema.clone(), Some(properties.clone()))
                .and_then(|mut writer| {
                    for batch in &batches {
                        writer.write(batch)?;
                    }
                    writer.close()
                });
            black_box((written.is_ok(), out.len()))
        })
    });

    let specs: Vec<BatchSpec> = owned
        .chunks(RECORDS_PER_BATCH)
        .map(|chunk| BatchSpec::new(chunk.to_vec(), Compression::None))
        .collect();
    let segment = match encode_segment(&specs, 1) {
        Ok(encoded) => bytes::Bytes::from(encoded.kfs),
        Err(e) => panic!("cannot encode: {e}"),
    };
    let key = SegmentKey {
        namespace: "ns".into(),
        topic: "clicks".into(),
        partition: 0,
        base_offset: 0,
    };
    group.bench_function("convert_segment", |b| {
        b.iter(|| {
            let converted = runtime.block_on(convert_segment(
                table.table(),
                SegmentInput {
                    key: &key,
                    etag: "bench",
                },
                in_memory(segment.clone()),
                DecodeLimits::default(),
                ValueColumns::Raw,
            ));
            black_box(converted.map(|c| c.records).unwrap_or(0))
        })
    });
    group.finish();
}

mod harness {
    //! criterion's generated entry points.
    #![allow(missing_docs)]
    use super::{benches, criterion_group};
    criterion_group!(convert, benches);
}

criterion_main!(harness::convert);
