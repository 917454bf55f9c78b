//! Fuzzes Protobuf values of a schema registry: any payload (its message-index list,
//! then the message) for a schema with repeated, packed, map, nested and well-known
//! fields decodes into columns or is refused; never a panic, never an allocation its
//! bytes do not justify.
#![no_main]

mod registry_common;

use kfs_core::SchemaKind;
use libfuzzer_sys::fuzz_target;

const SCHEMA: &str = r#"syntax = "proto3"; package shop;
    import "google/protobuf/timestamp.proto";
    import "google/protobuf/wrappers.proto";
    message Empty {}
    message Payment {
        int64 id = 1;
        double amount = 2;
        google.protobuf.Timestamp placed = 3;
        map<int32, string> attrs = 4;
        Kind kind = 5;
        Empty nothing = 6;
        oneof contact { string phone = 7; string fax = 8; }
        google.protobuf.Int64Value limit = 9;
        repeated sint32 scores = 10;
        repeated bool flags = 11;
        repeated Empty empties = 12;
        map<string, Empty> named = 13;
        uint64 big = 14;
    }
    enum Kind { NEW = 0; OLD = 1; }"#;

static WRITER: std::sync::OnceLock<std::sync::Arc<kfs_core::WriterSchema>> =
    std::sync::OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let writer = registry_common::writer(&WRITER, SchemaKind::Protobuf, SCHEMA);
    registry_common::decode(writer, data);
});
