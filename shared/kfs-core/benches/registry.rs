//! Registry values' decoding throughput, in bytes of framed values, on one core: the
//! same 20,000 orders (an id, a name, an amount, a timestamp, three tags, a map of two
//! entries) as Avro, Protobuf and JSON Schema values in Confluent's framing, decoded
//! with their writer schema into the Arrow columns of their table form, as a registry
//! table's conversion does before the Parquet writer. Run with
//! `cargo bench -p kfs-core --bench registry`; `convert_segment` in the `convert`
//! bench is the rest of a conversion.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kfs_core::testing::registry_columns;
use kfs_core::{RegisteredSchema, SchemaId, SchemaKind, WriterSchema};
use prost::Message;
use prost_reflect::{DynamicMessage, Value};

const ORDERS: i64 = 20_000;
const PLACED_MS: i64 = 1_764_669_600_000;

const AVRO: &str = r#"{"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}}
]}"#;

const PROTO: &str = r#"syntax = "proto3";
import "google/protobuf/timestamp.proto";
message Order {
    int64 id = 1;
    string name = 2;
    double amount = 3;
    google.protobuf.Timestamp placed = 4;
    repeated string tags = 5;
    map<string, int64> attrs = 6;
}"#;

const JSON_SCHEMA: &str = r#"{"type": "object", "properties": {
    "id": {"type": "integer"}, "name": {"type": "string"}, "amount": {"type": "number"},
    "placed": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},
    "attrs": {"type": "object", "additionalProperties": {"type": "integer"}}}}"#;

fn framed(id: u32, payload: Vec<u8>) -> Vec<u8> {
    let mut value = vec![0];
    value.extend_from_slice(&id.to_be_bytes());
    value.extend(payload);
    value
}

fn writer(kind: SchemaKind, text: &str) -> Arc<WriterSchema> {
    match WriterSchema::parse(RegisteredSchema::new(kind, text)) {
        Ok(writer) => Arc::new(writer),
        Err(e) => panic!("{text}: {e}"),
    }
}

fn avro_values() -> Vec<Vec<u8>> {
    use apache_avro::types::Value as Avro;
    let schema = match apache_avro::Schema::parse_str(AVRO) {
        Ok(schema) => schema,
        Err(e) => panic!("{e}"),
    };
    (0..ORDERS)
        .map(|n| {
            let record = Avro::Record(vec![
                ("id".into(), Avro::Long(n)),
                ("name".into(), Avro::String(format!("customer-{n:08}"))),
                ("amount".into(), Avro::Double(n as f64 * 0.25)),
                ("placed".into(), Avro::TimestampMillis(PLACED_MS + n)),
                (
                    "tags".into(),
                    Avro::Array(vec![
                        Avro::String("web".into()),
                        Avro::String("eu".into()),
                        Avro::String(format!("t{}", n % 7)),
                    ]),
                ),
                (
                    "attrs".into(),
                    Avro::Map(
                        [
                            ("qty".into(), Avro::Long(n % 5)),
                            ("sku".into(), Avro::Long(n)),
                        ]
                        .into(),
                    ),
                ),
            ]);
            match apache_avro::to_avro_datum(&schema, record) {
                Ok(payload) => framed(1, payload),
                Err(e) => panic!("{e}"),
            }
        })
        .collect()
}

fn protobuf_values() -> Vec<Vec<u8>> {
    let pool = match protox::Compiler::with_file_resolver(Sources)
        .open_file("order.proto")
        .map(|c| c.descriptor_pool())
    {
        Ok(pool) => pool,
        Err(e) => panic!("{e}"),
    };
    let Some(order) = pool.get_message_by_name("Order") else {
        panic!("no Order");
    };
    let Some(timestamp) = pool.get_message_by_name("google.protobuf.Timestamp") else {
        panic!("no Timestamp");
    };
    (0..ORDERS)
        .map(|n| {
            let mut placed = DynamicMessage::new(timestamp.clone());
            placed.set_field_by_name("seconds", Value::I64((PLACED_MS + n) / 1000));
            placed.set_field_by_name(
                "nanos",
                Value::I32(((PLACED_MS + n) % 1000) as i32 * 1_000_000),
            );
            let mut message = DynamicMessage::new(order.clone());
            message.set_field_by_name("id", Value::I64(n));
            message.set_field_by_name("name", Value::String(format!("customer-{n:08}")));
            message.set_field_by_name("amount", Value::F64(n as f64 * 0.25));
            message.set_field_by_name("placed", Value::Message(placed));
            message.set_field_by_name(
                "tags",
                Value::List(vec![
                    Value::String("web".into()),
                    Value::String("eu".into()),
                    Value::String(format!("t{}", n % 7)),
                ]),
            );
            message.set_field_by_name(
                "attrs",
                Value::Map(
                    [
                        (
                            prost_reflect::MapKey::String("qty".into()),
                            Value::I64(n % 5),
                        ),
                        (prost_reflect::MapKey::String("sku".into()), Value::I64(n)),
                    ]
                    .into(),
                ),
            );
            // The message-index list [0], as the single byte 0.
            let mut payload = vec![0];
            payload.extend(message.encode_to_vec());
            framed(2, payload)
        })
        .collect()
}

/// The benchmark's .proto file, and Google's well-known types.
struct Sources;

impl protox::file::FileResolver for Sources {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        match name {
            "order.proto" => protox::file::File::from_source(name, PROTO),
            _ => protox::file::GoogleFileResolver::new().open_file(name),
        }
    }
}

fn json_values() -> Vec<Vec<u8>> {
    (0..ORDERS)
        .map(|n| {
            let value = serde_json::json!({
                "id": n, "name": format!("customer-{n:08}"), "amount": n as f64 * 0.25,
                "placed": PLACED_MS + n, "tags": ["web", "eu", format!("t{}", n % 7)],
                "attrs": {"qty": n % 5, "sku": n},
            });
            framed(3, value.to_string().into_bytes())
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("registry");
    group.sample_size(10);
    for (name, kind, text, values, id) in [
        ("avro", SchemaKind::Avro, AVRO, avro_values(), 1),
        (
            "protobuf",
            SchemaKind::Protobuf,
            PROTO,
            protobuf_values(),
            2,
        ),
        (
            "json_schema",
            SchemaKind::Json,
            JSON_SCHEMA,
            json_values(),
            3,
        ),
    ] {
        let writer = writer(kind, text);
        let borrowed: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let bytes: usize = values.iter().map(Vec::len).sum();
        if let Err(e) = registry_columns(&writer, SchemaId::Confluent(id), &borrowed) {
            panic!("{name}: {e}");
        }
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(format!("decode_to_arrow/{name}"), |b| {
            b.iter(|| {
                black_box(
                    registry_columns(&writer, SchemaId::Confluent(id), &borrowed).map(|c| c.len()),
                )
            })
        });
    }
    group.finish();
}

mod harness {
    //! criterion's generated entry points.
    #![allow(missing_docs)]
    use super::{benches, criterion_group};
    criterion_group!(registry, benches);
}

criterion_main!(harness::registry);
