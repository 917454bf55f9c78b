//! A bomb corpus of registry values and schemas, converted one segment at a time on
//! the in-memory registry, the heap measured by a counting allocator (its own test
//! binary: no other test's allocations count): Avro block counts (`array<long>`,
//! `array<null>`, `map`) and string lengths far beyond the bytes, Protobuf and JSON
//! values of more items than one value may hold, JSON nested past its depth, zlib
//! values of the AWS Glue framing inflating to 64 MiB, and schemas whose named types,
//! messages and `$ref`s fan out to tens of thousands of fields (or whose columns go
//! beyond the table's cap). Each conversion stays under 300 MiB of heap; each bomb is
//! a dead letter with its reason, the table's schema never grows by a bomb schema, and
//! the topic's next benign segment converts normally.

// A global allocator is the one way to measure heap use from inside the process.
#![allow(unsafe_code)]

#[path = "local/mod.rs"]
mod local;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::TryStreamExt;
use iceberg::Catalog;
use kfs_core::{
    MemoryRegistry, PipelineConfig, RegisteredSchema, SchemaCache, SchemaId, SchemaKind,
    table_ident,
};
use kfs_plan::naming::{TableName, TableNaming, ValueFormat};
use local::{BoxError, Local, offsets};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator and only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            let grown = new_size - layout.size();
            let now = CURRENT.fetch_add(grown, Ordering::Relaxed) + grown;
            PEAK.fetch_max(now, Ordering::Relaxed);
        } else {
            CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap a conversion of one bomb may take at its peak, beyond what was held before;
/// the same budget for the process's resident set (the kernel's count: the heap, its
/// fragmentation, and every mapping touched).
const PEAK_BUDGET: usize = 300 << 20;

/// The process's resident set now and its peak since the last reset, in bytes, from
/// `/proc/self/status` (`VmRSS`, `VmHWM`); `None` off Linux.
fn resident() -> Option<(usize, usize)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
            .map(|kib| kib << 10)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Resets the kernel's peak resident set of this process to its current one
/// (`echo 5 > /proc/self/clear_refs`); false where that is not allowed.
fn reset_resident_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

const TOPIC: &str = "bombs";

const GLUE: uuid::Uuid = uuid::Uuid::from_u128(0x6b66_7300_0000_0000_0000_0000_0000_0001);

fn avro(fields: &str) -> String {
    format!(r#"{{"type": "record", "name": "R", "fields": [{fields}]}}"#)
}

/// Named record types fanning out `wide` times per level over `levels` levels.
fn avro_fan_out(wide: usize, levels: usize) -> String {
    let mut schema = r#""long""#.to_owned();
    for level in (0..levels).rev() {
        let mut fields = Vec::new();
        for i in 0..wide {
            let field_type = match (i, level + 1 == levels) {
                (0, _) | (_, true) => schema.clone(),
                _ => format!(r#""L{}""#, level + 1),
            };
            fields.push(format!(r#"{{"name": "f{i}", "type": {field_type}}}"#));
        }
        schema = format!(
            r#"{{"type": "record", "name": "L{level}", "fields": [{}]}}"#,
            fields.join(", ")
        );
    }
    schema
}

/// A JSON Schema reusing one `$ref` `wide` times per level over `levels` levels.
fn json_fan_out(wide: usize, levels: usize) -> String {
    let properties = |target: &str| {
        (0..wide)
            .map(|i| format!(r#""p{i}": {target}"#))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut defs = Vec::new();
    for level in 0..levels {
        let target = if level + 1 == levels {
            r#"{"type": "integer"}"#.to_owned()
        } else {
            format!(r##"{{"$ref": "#/$defs/L{}"}}"##, level + 1)
        };
        defs.push(format!(
            r#""L{level}": {{"type": "object", "properties": {{{}}}}}"#,
            properties(&target)
        ));
    }
    format!(
        r##"{{"type": "object", "properties": {{{}}}, "$defs": {{{}}}}}"##,
        properties(r##"{"$ref": "#/$defs/L0"}"##),
        defs.join(", ")
    )
}

/// Protobuf messages whose fields reuse the next message `wide` times per level.
fn protobuf_fan_out(wide: usize, levels: usize) -> String {
    let mut text = String::from(r#"syntax = "proto3"; "#);
    for level in 0..levels {
        let field_type = if level + 1 == levels {
            "int64".to_owned()
        } else {
            format!("L{}", level + 1)
        };
        let fields: Vec<String> = (0..wide)
            .map(|i| format!("{field_type} f{i} = {};", i + 1))
            .collect();
        text.push_str(&format!("message L{level} {{ {} }} ", fields.join(" ")));
    }
    text
}

const PROTO: &str = r#"syntax = "proto3"; message M { int64 n = 1; repeated bool flags = 2; repeated E empties = 3; } message E {}"#;

/// The schemas of the corpus, by Confluent id (and one Glue version).
fn registry() -> MemoryRegistry {
    let registry = MemoryRegistry::default();
    let flat: Vec<String> = (0..1500)
        .map(|i| format!(r#"{{"name": "c{i}", "type": "long"}}"#))
        .collect();
    let schemas = [
        (1, SchemaKind::Avro, avro(r#"{"name": "n", "type": "long"}"#)),
        (2, SchemaKind::Avro, avro(r#"{"name": "n", "type": "long"}, {"name": "xs", "type": {"type": "array", "items": "long"}}"#)),
        (3, SchemaKind::Avro, avro(r#"{"name": "n", "type": "long"}, {"name": "zs", "type": {"type": "array", "items": "null"}}"#)),
        (4, SchemaKind::Avro, avro(r#"{"name": "n", "type": "long"}, {"name": "m", "type": {"type": "map", "values": "string"}}"#)),
        (5, SchemaKind::Avro, avro(r#"{"name": "n", "type": "long"}, {"name": "s", "type": "string"}"#)),
        (6, SchemaKind::Avro, avro_fan_out(4, 9)),
        (7, SchemaKind::Json, json_fan_out(4, 8)),
        (8, SchemaKind::Protobuf, protobuf_fan_out(4, 9)),
        (9, SchemaKind::Avro, avro(&flat.join(", "))),
        (10, SchemaKind::Json, r#"{"type": "object", "properties": {"n": {"type": "integer"}, "xs": {"type": "array", "items": {"type": "integer"}}}}"#.to_owned()),
        (11, SchemaKind::Protobuf, PROTO.to_owned()),
    ];
    for (id, kind, text) in schemas {
        registry.register(SchemaId::Confluent(id), RegisteredSchema::new(kind, text));
    }
    registry.register(
        SchemaId::Glue(GLUE),
        RegisteredSchema::new(
            SchemaKind::Avro,
            avro(r#"{"name": "n", "type": "long"}, {"name": "s", "type": "string"}"#),
        ),
    );
    registry
}

fn confluent(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut value = vec![0];
    value.extend_from_slice(&id.to_be_bytes());
    value.extend_from_slice(payload);
    value
}

/// A zig-zag varint.
fn long(n: i64) -> Vec<u8> {
    let mut v = ((n << 1) ^ (n >> 63)) as u64;
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// An unsigned varint.
fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// A Glue-framed zlib value: an Avro record of `n` and a string of `len` bytes.
fn glue_string(n: i64, len: usize) -> Result<Vec<u8>, BoxError> {
    let mut value = vec![3, 5];
    value.extend_from_slice(GLUE.as_bytes());
    let mut encoder = flate2::write::ZlibEncoder::new(value, flate2::Compression::fast());
    encoder.write_all(&long(n))?;
    encoder.write_all(&long(len as i64))?;
    let chunk = vec![b'z'; 1 << 20];
    let mut left = len;
    while left > 0 {
        let now = left.min(chunk.len());
        encoder.write_all(&chunk[..now])?;
        left -= now;
    }
    Ok(encoder.finish()?)
}

/// A bomb: its name, its segment's values, and what their dead letters' reasons say.
type Bomb = (&'static str, Vec<Vec<u8>>, &'static str);

/// The bombs, each one segment of values, with what its dead letters' reasons say
/// (nothing: values at the bounds, which convert).
fn corpus() -> Result<Vec<Bomb>, BoxError> {
    // A count apache-avro 0.21 takes (below its 64 Mi cap) and reserves: 3.4 GB of
    // `long`s, 3.4 GB of nulls really touched.
    let huge = long(60_000_000);
    let many = super_many();
    let mut json_wide = b"{\"n\": 1, \"xs\": [".to_vec();
    json_wide.extend(std::iter::repeat_n(*b"0,", many).flatten());
    json_wide.extend_from_slice(b"0]}");
    let json_deep = format!(
        "{{\"n\": 1, \"xs\": {}{}}}",
        "[".repeat(100),
        "]".repeat(100)
    );
    // Message [0] (count 0), then fields.
    let mut packed = vec![0, 0x12];
    packed.extend(varint(many as u64));
    packed.extend(std::iter::repeat_n(1u8, many));
    let mut empties = vec![0];
    empties.extend(std::iter::repeat_n([0x1Au8, 0], many).flatten());
    let b = |payload: Vec<u8>| payload;
    Ok(vec![
        (
            "avro array<long> count",
            vec![confluent(2, &b([&long(1)[..], &huge, &[2, 0]].concat()))],
            "items",
        ),
        (
            "avro array<long> block beyond the bytes",
            vec![confluent(
                2,
                &b([&long(1)[..], &long(100_000), &[2, 0]].concat()),
            )],
            "declares 100000 items",
        ),
        (
            "avro array<null> count",
            vec![confluent(3, &b([&long(1)[..], &huge, &[0]].concat()))],
            "items",
        ),
        (
            "avro map count",
            vec![confluent(4, &b([&long(1)[..], &huge, &[0]].concat()))],
            "items",
        ),
        (
            "avro string length",
            vec![confluent(
                5,
                &b([&long(1)[..], &long(60 << 20), b"abc"].concat()),
            )],
            "declares 62914560 bytes",
        ),
        (
            "avro named-type fan-out",
            vec![confluent(6, &[0; 16])],
            "expands to more than",
        ),
        (
            "json $ref fan-out",
            vec![confluent(7, b"{}")],
            "expands to more than",
        ),
        (
            "protobuf message fan-out",
            vec![confluent(8, &[0])],
            "expands to more than",
        ),
        (
            "avro columns beyond the table's cap",
            vec![confluent(9, &vec![0; 1500])],
            "beyond its cap of 1000 fields",
        ),
        ("json items", vec![confluent(10, &json_wide)], "items"),
        (
            "json nesting",
            vec![confluent(10, json_deep.as_bytes())],
            "deeper",
        ),
        (
            "protobuf packed items",
            vec![confluent(11, &packed)],
            "items",
        ),
        (
            "protobuf empty messages",
            vec![confluent(11, &empties)],
            "items",
        ),
        (
            "zlib past 64 MiB",
            vec![glue_string(1, (64 << 20) + 1)?],
            "inflates past",
        ),
        (
            "zlib 60 MiB values",
            (0..6)
                .map(|n| glue_string(n, 60 << 20))
                .collect::<Result<_, _>>()?,
            "inflates past",
        ),
        (
            "zlib values at the bound",
            (0..6)
                .map(|n| glue_string(n, (16 << 20) - 16))
                .collect::<Result<_, _>>()?,
            "",
        ),
    ])
}

/// More items than one value may hold.
fn super_many() -> usize {
    (1 << 20) + 16
}

/// The dead letters of the topic's table: offset → reason.
async fn dead_letters(local: &Local, name: &TableName) -> Result<BTreeMap<i64, String>, BoxError> {
    let table = local
        .catalog
        .load_table(&table_ident(&name.dead_letters()))
        .await?;
    let mut found = BTreeMap::new();
    if table.metadata().current_snapshot().is_none() {
        return Ok(found);
    }
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["offset", "error"])
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    for batch in batches {
        let offsets = arrow_cast::cast(batch.column(0), &arrow_schema::DataType::Int64)?;
        let offsets = offsets
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .ok_or("offset")?;
        let errors = arrow_cast::cast(batch.column(1), &arrow_schema::DataType::Utf8)?;
        let errors = errors
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .ok_or("error")?;
        for row in 0..batch.num_rows() {
            found.insert(offsets.value(row), errors.value(row).to_owned());
        }
    }
    Ok(found)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bomb_is_a_dead_letter_within_300_mib_and_the_next_segment_converts()
-> Result<(), BoxError> {
    let local = Local::open().await?;
    let config = PipelineConfig {
        naming: TableNaming {
            value_format: ValueFormat::Registry,
            ..TableNaming::default()
        },
        schemas: Some(Arc::new(SchemaCache::new(Arc::new(registry())))),
        ..PipelineConfig::default()
    };
    let name = config.naming.table_for(TOPIC);
    let benign = |offset: i64| confluent(1, &long(offset));
    let mut offset = 0i64;
    // The table exists, with its one column, before the bombs.
    local.put_records(
        TOPIC,
        kfs_workload::simple_records(offset, 1, |o| Some(benign(o))),
    )?;
    local.run_config(&config).await?;
    offset += 1;
    let mut expected: BTreeMap<i64, (&str, &str)> = BTreeMap::new();
    let mut peaks = Vec::new();
    let mut converted = vec![0];
    for (bomb, values, reason) in corpus()? {
        let count = values.len() as i64;
        local.put_records(
            TOPIC,
            kfs_workload::simple_records(offset, count, |o| {
                values.get((o - offset) as usize).cloned()
            }),
        )?;
        drop(values);
        for o in offset..offset + count {
            // No reason: the values are within the bounds, and land in the table.
            if reason.is_empty() {
                converted.push(o);
            } else {
                expected.insert(o, (bomb, reason));
            }
        }
        offset += count;
        let before = CURRENT.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let rss_before = reset_resident_peak().then(resident).flatten();
        let report = local.run_config(&config).await?;
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
        let rss = rss_before
            .zip(resident())
            .map(|((now, _), (_, high))| (now, high));
        match rss {
            Some((now, high)) => println!(
                "{bomb}: heap peak {} MiB; resident {} -> peak {} MiB (+{} MiB)",
                peak >> 20,
                now >> 20,
                high >> 20,
                high.saturating_sub(now) >> 20
            ),
            None => println!(
                "{bomb}: heap peak {} MiB (resident set not readable)",
                peak >> 20
            ),
        }
        peaks.push((bomb, peak));
        if let Some((now, high)) = rss {
            peaks.push((bomb, high.saturating_sub(now)));
        }
        assert!(
            report.quarantined.is_empty() && !report.left_work(),
            "{bomb}: {report:?}"
        );
    }
    // The next benign segment converts normally.
    local.put_records(
        TOPIC,
        kfs_workload::simple_records(offset, 3, |o| Some(benign(o))),
    )?;
    let report = local.run_config(&config).await?;
    assert!(
        report.quarantined.is_empty() && !report.left_work(),
        "{report:?}"
    );
    let landed = offsets(&local.catalog, &name).await?;
    let want: BTreeMap<(i32, i64), usize> = converted
        .into_iter()
        .chain(offset..offset + 3)
        .map(|o| ((0, o), 1))
        .collect();
    assert_eq!(landed, want);
    let dead = dead_letters(&local, &name).await?;
    assert_eq!(
        dead.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (o, (bomb, reason)) in &expected {
        let found = dead.get(o).map(String::as_str).unwrap_or("");
        assert!(found.contains(reason), "{bomb}: {found}");
    }
    // No bomb schema grew the table.
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    let fields = table.metadata().current_schema().highest_field_id();
    assert!(fields < 100, "{fields} fields");
    for (bomb, peak) in peaks {
        assert!(peak < PEAK_BUDGET, "{bomb}: {} MiB", peak >> 20);
    }
    Ok(())
}
