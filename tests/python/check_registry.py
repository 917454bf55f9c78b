#!/usr/bin/env python3
"""Registry-encoded values end to end, written and checked independently of the Rust
code: schemas served by a registry following the Confluent REST API (this script's
`serve`), Avro values encoded by fastavro and Protobuf values by Google's protobuf
library (schemas compiled from the registry's .proto text by grpcio-tools' protoc),
each with Confluent's framing, segments by tests/independent/kfs_writer.py, tables
read back by pyiceberg and DuckDB.

    check_registry.py serve --port-file FILE [--user U --password P]
        Serves GET /schemas/ids/{id} and GET /subjects/{subject}/versions/{version}
        on 127.0.0.1 (a free port, written to FILE) with basic authentication when a
        user is given, until killed.

    check_registry.py make DIR --part 1|2|3|4|5
        Writes the segment of part 1 (schema v1) or part 2 (v2, v3, an incompatible
        version, an unknown id, a value without the framing, a payload cut short, a
        tombstone) of topic `orders`, namespace `ns`, partition 0, under DIR; part 3
        is topic `events`, JSON values of three JSON Schema versions and what a table
        of them cannot hold; part 4 is topic `payments`, Protobuf values of three
        versions (the third importing a file by a registry reference) and what a table
        of them cannot hold; part 5 is topic `keyed`, Avro keys of two key schema
        versions (`--key-format registry`), a null key, and keys that are not framed,
        name an unknown id or are cut short.

    check_registry.py check --warehouse WH
        Checks `kafscale.orders` and its `__dlq`: every record once in one of them, the
        values as encoded, field ids stable since the first schema, each dead letter's
        reason. Prints one JSON line of facts; exits non-zero on the first mismatch.

    check_registry.py check-protobuf --warehouse WH
        The same for `kafscale.payments` and its `__dlq` (part 4).

    check_registry.py check-keys --warehouse WH
        The same for `kafscale.keyed` and its `__dlq` (part 5): `key_fields` as
        encoded, the raw key kept.
"""

import argparse
import base64
import datetime
import decimal
import io
import json
import os
import struct
import sys
import tempfile
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "independent"))

V1 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "int"},
    {"name": "name", "type": "string"},
    {"name": "amount", "type": "float"},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]}
# Added tags, email and uid; id promoted to long, amount to double.
V2 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "email", "type": ["null", "string"], "default": None},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
]}
# Removed name and email; added a map, a decimal, a date, an enum, a nested record.
V3 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": "double"},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["NEW", "OLD"]}},
    {"name": "ship", "type": ["null", {"type": "record", "name": "Ship", "fields": [
        {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}]},
]}
INCOMPATIBLE = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}
# Key schemas of topic `keyed` (`--key-format registry`): v2 adds region and a field named
# like a metadata column (offset: kept as it is inside key_fields) and promotes n; 122 is
# a plain string key schema (one field, value).
KEY_V1 = {"type": "record", "name": "Key", "fields": [
    {"name": "tenant", "type": "string"}, {"name": "n", "type": "int"}]}
KEY_V2 = {"type": "record", "name": "Key", "fields": [
    {"name": "tenant", "type": "string"}, {"name": "n", "type": "long"},
    {"name": "region", "type": ["null", "string"], "default": None},
    {"name": "offset", "type": ["null", "long"], "default": None}]}
KEY_STRING = "string"
SCHEMAS = {101: V1, 102: V2, 103: V3, 104: INCOMPATIBLE, 120: KEY_V1, 121: KEY_V2, 122: KEY_STRING}

# JSON Schema versions of topic `events` (schemaType JSON): v1's n is an int32 and its
# score a float32; v2 promotes them (integer, number), adds tags and a nested object by
# $ref and drops note; v3 adds a map; the incompatible one makes n a string.
J1 = {"type": "object", "properties": {"n": {"type": "integer", "format": "int32"},
                                       "note": {"type": ["string", "null"]},
                                       "score": {"type": "number", "connect.type": "float32"}}}
J2 = {"type": "object", "properties": {"n": {"type": "integer"}, "score": {"type": "number"},
                                       "tags": {"type": "array", "items": {"type": "string"}},
                                       "where": {"$ref": "#/definitions/Place"}},
      "definitions": {"Place": {"type": "object", "properties": {"city": {"type": "string"}}}}}
J3 = {"type": "object", "properties": {"n": {"type": "integer"},
                                       "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
                                       "kind": {"oneOf": [{"type": "null"}, {"enum": ["a", "b"]}]}}}
J_INCOMPATIBLE = {"type": "object", "properties": {"n": {"type": "string"}}}
JSON_SCHEMAS = {201: J1, 202: J2, 203: J3, 204: J_INCOMPATIBLE}
UNKNOWN_ID = 999

# Protobuf versions of topic `payments` (schemaType PROTOBUF), as the registry holds
# them: v2 promotes id and amount and adds a list, an optional string and a wrapper;
# v3 drops name and email, adds a map, an enum, a message of a file it imports by a
# registry reference, a oneof and more, and is the second message of its file; the
# incompatible one makes id a string.
P1 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Payment {
  int32 id = 1;
  string name = 2;
  float amount = 3;
  google.protobuf.Timestamp placed = 4;
}
"""
P2 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message Payment {
  int64 id = 1;
  string name = 2;
  double amount = 3;
  google.protobuf.Timestamp placed = 4;
  repeated string tags = 5;
  optional string email = 6;
  google.protobuf.StringValue nick = 7;
}
"""
P3 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "ship.proto";
message Header {
  string h = 1;
}
message Payment {
  int64 id = 1;
  double amount = 3;
  google.protobuf.Timestamp placed = 4;
  map<string, int64> attrs = 8;
  Kind kind = 9;
  Ship ship = 10;
  oneof contact {
    string phone = 11;
    string fax = 12;
  }
  google.protobuf.Int64Value limit = 13;
  bool urgent = 14;
  bytes blob = 15;
  uint64 big = 16;
}
enum Kind {
  NEW = 0;
  OLD = 1;
}
"""
P_INCOMPATIBLE = """syntax = "proto3";
package shop;
message Payment {
  string id = 1;
}
"""
SHIP_PROTO = """syntax = "proto3";
package shop;
message Ship {
  string city = 1;
  optional int32 zip = 2;
}
"""
PROTOBUF_SCHEMAS = {301: P1, 302: P2, 303: P3, 304: P_INCOMPATIBLE, 310: SHIP_PROTO}
PROTOBUF_REFERENCES = {303: [{"name": "ship.proto", "subject": "ship-value", "version": 1}]}
# (subject, version) -> (id, text), for GET /subjects/{subject}/versions/{version}.
SUBJECT_VERSIONS = {("ship-value", 1): (310, SHIP_PROTO)}

PLACED = datetime.datetime(2026, 12, 2, 10, 0, 0, tzinfo=datetime.timezone.utc)


def serve(args):
    expected = None
    if args.user:
        expected = "Basic " + base64.b64encode(f"{args.user}:{args.password}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def do_GET(self):
            if expected and self.headers.get("Authorization") != expected:
                return self.answer(401, {"error_code": 401, "message": "Unauthorized"})
            parts = urllib.parse.urlsplit(self.path).path.strip("/").split("/")
            if (len(parts) == 4 and parts[0] == "subjects" and parts[2] == "versions"
                    and parts[3].isdigit()):
                subject = urllib.parse.unquote(parts[1])
                found = SUBJECT_VERSIONS.get((subject, int(parts[3])))
                if found is None:
                    return self.answer(404, {"error_code": 40402, "message": "Version not found."})
                return self.answer(200, {"subject": subject, "version": int(parts[3]), "id": found[0],
                                         "schema": found[1], "schemaType": "PROTOBUF"})
            if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                schema_id = int(parts[2])
                if schema_id in PROTOBUF_SCHEMAS:
                    body = {"schema": PROTOBUF_SCHEMAS[schema_id], "schemaType": "PROTOBUF"}
                    if schema_id in PROTOBUF_REFERENCES:
                        body["references"] = PROTOBUF_REFERENCES[schema_id]
                    return self.answer(200, body)
                if schema_id in JSON_SCHEMAS:
                    return self.answer(200, {"schema": json.dumps(JSON_SCHEMAS[schema_id]), "schemaType": "JSON"})
                schema = SCHEMAS.get(schema_id)
                if schema is None:
                    return self.answer(404, {"error_code": 40403, "message": "Schema not found"})
                return self.answer(200, {"schema": json.dumps(schema)})
            self.answer(404, {"error_code": 404, "message": "Not found"})

        def answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


def framed(schema_id, schema, record):
    import fastavro

    out = io.BytesIO()
    out.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def part_values(part):
    """The values of a part's segment, by offset (base offset 0 for part 1, 3 for 2)."""
    if part == 1:
        return [framed(101, V1, {"id": i, "name": f"n{i}", "amount": 1.5 + i, "placed": PLACED})
                for i in range(3)]
    v2 = framed(102, V2, {"id": 1 << 40, "name": "big", "amount": 2.25, "placed": PLACED,
                          "tags": ["a", "b"], "email": "x@example.com",
                          "uid": uuid.UUID("12345678-1234-5678-1234-567812345678")})
    unknown = bytearray(v2)
    unknown[1:5] = struct.pack(">I", UNKNOWN_ID)
    return [
        v2,
        framed(103, V3, {"id": 3, "amount": -1.0, "placed": PLACED, "attrs": {"k": 7, "j": -1},
                         "price": decimal.Decimal("123.45"), "day": datetime.date(2026, 12, 2),
                         "kind": "OLD", "ship": {"city": "Utrecht", "zip": None}}),
        framed(104, INCOMPATIBLE, {"id": "x"}),
        bytes(unknown),
        b"not framed",
        framed(101, V1, {"id": 9, "name": "cut", "amount": 0.0, "placed": PLACED})[:8],
        None,
    ]


def json_framed(schema_id, value):
    return struct.pack(">bI", 0, schema_id) + json.dumps(value).encode()


JSON_VALUES = [
    json_framed(201, {"n": 1, "note": "first", "score": 0.5}),
    json_framed(202, {"n": 2, "score": 1.25, "tags": ["x"], "where": {"city": "Delft"}}),
    json_framed(203, {"n": 3, "counts": {"a": 1, "b": 2}, "kind": "b"}),
    json_framed(204, {"n": "four"}),
    json_framed(201, {"n": "five", "score": 1}),
    json_framed(201, {"n": 6})[:9],
]
JSON_EXPECTED = {
    0: {"n": 1, "note": "first", "score": 0.5},
    1: {"n": 2, "score": 1.25, "tags": ["x"], "where": {"city": "Delft"}},
    2: {"n": 3, "counts": [("a", 1), ("b", 2)], "kind": "b"},
}
JSON_DEAD = {
    3: "schema id 204 cannot be written to table kafscale.events: field n",
    4: "property n: a JSON string cannot be written",
    5: "JSON payload does not parse",
}


_PROTOBUF_CLASSES = {}


def protobuf_class(schema_id):
    """The message class of `shop.Payment` of a registered version, compiled by protoc
    from the registry's text into a pool of its own (the name is the same in each)."""
    if schema_id not in _PROTOBUF_CLASSES:
        import grpc_tools
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
        from grpc_tools import protoc

        well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "ship.proto"), "w") as f:
                f.write(SHIP_PROTO)
            source = os.path.join(tmp, f"payment{schema_id}.proto")
            with open(source, "w") as f:
                f.write(PROTOBUF_SCHEMAS[schema_id])
            out = os.path.join(tmp, "set.pb")
            status = protoc.main(["protoc", f"--proto_path={tmp}", f"--proto_path={well_known}",
                                  "--include_imports", f"--descriptor_set_out={out}", source])
            if status != 0:
                fail(f"protoc cannot compile schema {schema_id}")
            with open(out, "rb") as f:
                files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
        pool = descriptor_pool.DescriptorPool()
        for file in files.file:  # dependencies first
            pool.AddSerializedFile(file.SerializeToString())
        _PROTOBUF_CLASSES[schema_id] = message_factory.GetMessageClass(
            pool.FindMessageTypeByName("shop.Payment"))
    return _PROTOBUF_CLASSES[schema_id]


def zigzag_varint(n):
    """A protobuf sint32 (zig-zag, then a base-128 varint), as Kafka's varints are."""
    import kfs_writer

    return kfs_writer.varint(n)


def protobuf_framed(schema_id, fields, indexes=(0,)):
    """Confluent's Protobuf framing: magic byte 0, the schema id (4 bytes, big-endian),
    the message-index list (its length, then each index, as zig-zag varints; [0] as the
    single byte 0), then the message serialized by the protobuf library."""
    message = protobuf_class(schema_id)(**fields)
    indexes = list(indexes)
    head = b"\x00" if indexes == [0] else b"".join(map(zigzag_varint, [len(indexes)] + indexes))
    return struct.pack(">bI", 0, schema_id) + head + message.SerializeToString(deterministic=True)


PLACED_PB = {"seconds": int(PLACED.timestamp())}


def protobuf_values():
    """The values of part 4's segment, by offset (base offset 0)."""
    old = protobuf_class(303).DESCRIPTOR.fields_by_name["kind"].enum_type.values_by_name["OLD"].number
    v2 = protobuf_framed(302, {"id": 1 << 40, "name": "big", "amount": 2.25, "placed": PLACED_PB,
                               "tags": ["a", "b"], "email": "x@example.com", "nick": {"value": "nn"}})
    unknown = bytearray(v2)
    unknown[1:5] = struct.pack(">I", UNKNOWN_ID)
    return [
        protobuf_framed(301, {"id": 1, "name": "one", "amount": 1.5, "placed": PLACED_PB}),
        protobuf_framed(301, {"id": 2}),
        v2,
        protobuf_framed(302, {"id": 5, "name": "e", "placed": PLACED_PB}),
        protobuf_framed(303, {"id": 7, "amount": -1.0, "placed": PLACED_PB, "attrs": {"k": 7, "j": -1},
                              "kind": old, "ship": {"city": "Utrecht"}, "phone": "555",
                              "limit": {"value": 9}, "urgent": True, "blob": b"\x00\x01",
                              "big": 2**63 - 1}, indexes=[1]),
        protobuf_framed(303, {"id": 8, "fax": "777", "big": 0}, indexes=[1]),
        protobuf_framed(304, {"id": "x"}),
        bytes(unknown),
        b"not framed",
        protobuf_framed(301, {"id": 1, "name": "one", "amount": 1.5, "placed": PLACED_PB})[:9],
        protobuf_framed(301, {"id": 10, "name": "ten"}, indexes=[5]),
        protobuf_framed(303, {"id": 11, "big": 2**64 - 1}, indexes=[1]),
        None,
    ]


def write_segment(directory, topic, base, records):
    """One segment of `topic`, namespace `ns`, partition 0, at base offset `base`."""
    import kfs_writer

    batch = kfs_writer.Batch(base_offset=base, base_timestamp=1_764_669_600_000, records=records).encode()
    path = os.path.join(directory, "ns", topic, "0", f"segment-{base:020}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".kfs", "wb") as f:
        f.write(kfs_writer.build_segment([batch], 1_764_669_600_000))
    with open(path + ".index", "wb") as f:
        f.write(kfs_writer.build_index([batch]))


def make(args):
    import kfs_writer

    if args.part == 3:
        records = [kfs_writer.Record(i, i, None, v) for i, v in enumerate(JSON_VALUES)]
        write_segment(args.dir, "events", 0, records)
        return
    if args.part == 4:
        records = [kfs_writer.Record(i, i, f"k{i}".encode(), v) for i, v in enumerate(protobuf_values())]
        write_segment(args.dir, "payments", 0, records)
        return
    if args.part == 5:
        records = [kfs_writer.Record(i, i, k, v) for i, (k, v) in enumerate(keyed_records())]
        write_segment(args.dir, "keyed", 0, records)
        return
    base = 0 if args.part == 1 else 3
    values = part_values(args.part)
    records = [kfs_writer.Record(i, i, f"k{base + i}".encode(), v) for i, v in enumerate(values)]
    write_segment(args.dir, "orders", base, records)


def keyed_records():
    """Topic `keyed`: (key, value) by offset; every value is v1 of `orders`."""
    value = lambda i: framed(101, V1, {"id": i, "name": f"n{i}", "amount": 0.5, "placed": PLACED})
    unknown = bytearray(framed(120, KEY_V1, {"tenant": "t9", "n": 9}))
    unknown[1:5] = struct.pack(">I", 998)
    return [
        (framed(120, KEY_V1, {"tenant": "t1", "n": 1}), value(0)),
        (framed(121, KEY_V2, {"tenant": "t2", "n": 1 << 40, "region": "eu", "offset": 77}), value(1)),
        (None, value(2)),
        (b"plain", value(3)),
        (bytes(unknown), value(4)),
        (framed(120, KEY_V1, {"tenant": "t5", "n": 5})[:7], value(5)),
        (framed(122, KEY_STRING, "plain-key"), value(6)),
    ]


KEY_NONE = {"tenant": None, "n": None, "region": None, "offset": None, "value": None}
KEYED_EXPECTED = {
    0: {**KEY_NONE, "tenant": "t1", "n": 1},
    1: {**KEY_NONE, "tenant": "t2", "n": 1 << 40, "region": "eu", "offset": 77},
    2: None,
    6: {**KEY_NONE, "value": "plain-key"},
}
KEYED_DEAD = {
    3: "key: value does not start with the schema registry's magic byte",
    4: "key: schema id 998 is not in the schema registry",
    5: "key: schema id 120: Avro payload does not decode",
}


def check_keys(args):
    catalog, table, rows = open_table(args.warehouse, "keyed", KEYED_EXPECTED)
    records = keyed_records()
    for offset, want in KEYED_EXPECTED.items():
        row = rows[offset]
        if row["key_fields"] != want:
            fail(f"keyed offset {offset} key_fields: {row['key_fields']!r}, encoded {want!r}")
        if row["key"] != records[offset][0]:
            fail(f"keyed offset {offset}: the raw key is not the record's own")
        if (row["id"], row["name"]) != (offset, f"n{offset}"):
            fail(f"keyed offset {offset} value: {(row['id'], row['name'])!r}")
    check_field_ids(table, "keyed")
    key_type = str(table.schema().find_field("key_fields").field_type)
    if "n: optional long" not in key_type:
        fail(f"key_fields is {key_type}: n not promoted to long")
    dead = check_dead_letters(catalog, "keyed", KEYED_DEAD, records)
    found = duckdb_scan(table, "key_fields.tenant, key_fields.n")
    duckdb_rows = None if found is None else len(found)
    if found is not None:
        for offset, tenant, n in found:
            want = KEYED_EXPECTED[offset] or {}
            if (tenant, n) != (want.get("tenant"), want.get("n")):
                fail(f"DuckDB: keyed offset {offset} key_fields: {(tenant, n)!r}")
        if duckdb_rows != len(KEYED_EXPECTED):
            fail(f"DuckDB reads {duckdb_rows} keyed rows, expected {len(KEYED_EXPECTED)}")
    print(json.dumps({"keyed_rows": len(rows), "keyed_dead_letters": len(dead),
                      "key_fields": key_type, "duckdb_rows": duckdb_rows}))


def fail(message):
    print(f"check_registry: {message}", file=sys.stderr)
    sys.exit(1)


PLACED_US = int(PLACED.timestamp() * 1_000_000)

EXPECTED = {
    0: {"id": 0, "name": "n0", "amount": 1.5, "placed": PLACED_US},
    1: {"id": 1, "name": "n1", "amount": 2.5, "placed": PLACED_US},
    2: {"id": 2, "name": "n2", "amount": 3.5, "placed": PLACED_US},
    3: {"id": 1 << 40, "name": "big", "amount": 2.25, "placed": PLACED_US, "tags": ["a", "b"],
        "email": "x@example.com", "uid": uuid.UUID("12345678-1234-5678-1234-567812345678").bytes},
    4: {"id": 3, "amount": -1.0, "placed": PLACED_US, "attrs": [("j", -1), ("k", 7)],
        "price": decimal.Decimal("123.45"), "day": datetime.date(2026, 12, 2), "kind": "OLD",
        "ship": {"city": "Utrecht", "zip": None}},
    9: {},
}
DEAD = {
    5: "schema id 104 cannot be written to table kafscale.orders: field id",
    6: "schema id 999 is not in the schema registry",
    7: "does not start with the schema registry's magic byte",
    8: "does not decode",
}
COLUMNS = ["id", "name", "amount", "placed", "tags", "email", "uid", "attrs", "price", "day", "kind", "ship"]


def normalize(column, value):
    if value is None:
        return None
    if column == "placed" and isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1_000_000)
    if column == "uid" and isinstance(value, (uuid.UUID,)):
        return value.bytes
    if column == "uid":
        return bytes(value)
    if column == "attrs":
        pairs = value.items() if isinstance(value, dict) else ((p["key"], p["value"]) if isinstance(p, dict) else p for p in value)
        return sorted((k, v) for k, v in pairs)
    if column == "tags":
        return list(value)
    return value


def check(args):
    from pyiceberg.catalog.sql import SqlCatalog

    wh = os.path.abspath(args.warehouse)
    catalog = SqlCatalog("local", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    table = catalog.load_table("kafscale.orders")
    rows = {r["offset"]: r for r in table.scan().to_arrow().to_pylist()}
    if sorted(rows) != sorted(EXPECTED):
        fail(f"table holds offsets {sorted(rows)}, expected {sorted(EXPECTED)}")
    for offset, want in EXPECTED.items():
        for column in COLUMNS:
            got = normalize(column, rows[offset].get(column))
            if column == "tags" and got == [] and column not in want:
                got = None  # pyiceberg reads a null list as empty
            if got != want.get(column):
                fail(f"offset {offset} column {column}: {got!r}, encoded {want.get(column)!r}")

    # Field ids: each column keeps the id the first schema that had it gave it.
    schemas = table.metadata.schemas
    oldest = min(schemas, key=lambda schema: schema.schema_id)
    first = {f.name: f.field_id for f in oldest.fields}
    current = {f.name: f.field_id for f in table.schema().fields}
    for schema in schemas:
        for f in schema.fields:
            if current.get(f.name) != f.field_id:
                fail(f"column {f.name} had id {f.field_id} in schema {schema.schema_id}, now {current.get(f.name)}")
    if str(table.schema().find_field("id").field_type) != "long":
        fail(f"id is {table.schema().find_field('id').field_type}, not promoted to long")

    dead = {r["offset"]: r for r in catalog.load_table("kafscale.orders__dlq").scan().to_arrow().to_pylist()}
    if sorted(dead) != sorted(DEAD):
        fail(f"dead-letter table holds offsets {sorted(dead)}, expected {sorted(DEAD)}")
    for offset, needle in DEAD.items():
        if needle not in dead[offset]["error"]:
            fail(f"dead letter {offset}: reason {dead[offset]['error']!r} lacks {needle!r}")
        if dead[offset]["value"] != part_values(2)[offset - 3]:
            fail(f"dead letter {offset}: its value is not the record's own")

    found = duckdb_scan(table, "id, name, amount, epoch_us(placed), price, \"day\", kind, ship.city")
    duckdb_rows = None if found is None else len(found)
    if found is not None:
        for offset, id_, name, amount, placed, price, day, kind, city in found:
            want = EXPECTED[offset]
            got = {"id": id_, "name": name, "amount": amount, "placed": placed, "price": price, "day": day,
                   "kind": kind}
            for column, value in got.items():
                if value != want.get(column):
                    fail(f"DuckDB: offset {offset} column {column}: {value!r}, encoded {want.get(column)!r}")
            if city != (want.get("ship") or {}).get("city"):
                fail(f"DuckDB: offset {offset} ship.city {city!r}")
        if duckdb_rows != len(EXPECTED):
            fail(f"DuckDB reads {duckdb_rows} rows, expected {len(EXPECTED)}")
    json_rows, json_dead, json_duckdb = check_json_schema_table(catalog)
    print(json.dumps({"rows": len(rows), "dead_letters": len(dead), "schemas": len(schemas),
                      "duckdb_rows": duckdb_rows, "first_ids": first, "json_schema_rows": json_rows,
                      "json_schema_dead_letters": json_dead, "json_schema_duckdb_rows": json_duckdb}))


def check_json_schema_table(catalog):
    table = catalog.load_table("kafscale.events")
    rows = {r["offset"]: r for r in table.scan().to_arrow().to_pylist()}
    if sorted(rows) != sorted(JSON_EXPECTED):
        fail(f"events: table holds offsets {sorted(rows)}, expected {sorted(JSON_EXPECTED)}")
    for offset, want in JSON_EXPECTED.items():
        for column in ["n", "note", "score", "tags", "where", "counts", "kind"]:
            got = normalize("attrs" if column == "counts" else column, rows[offset].get(column))
            if column == "tags" and got == [] and column not in want:
                got = None
            if got != want.get(column):
                fail(f"events offset {offset} column {column}: {got!r}, encoded {want.get(column)!r}")
    check_field_ids(table, "events")
    for column, kind in [("n", "long"), ("score", "double")]:
        if str(table.schema().find_field(column).field_type) != kind:
            fail(f"events: {column} is {table.schema().find_field(column).field_type}, not {kind}")
    records = [(None, value) for value in JSON_VALUES]
    dead = check_dead_letters(catalog, "events", JSON_DEAD, records)
    found = duckdb_scan(table, "n, note, score, \"where\".city, kind")
    if found is not None:
        for offset, n, note, score, city, kind in found:
            want = JSON_EXPECTED.get(offset, {})
            got = {"n": n, "note": note, "score": score, "kind": kind}
            for column, value in got.items():
                if value != want.get(column):
                    fail(f"DuckDB: events offset {offset} column {column}: {value!r}, encoded {want.get(column)!r}")
            if city != (want.get("where") or {}).get("city"):
                fail(f"DuckDB: events offset {offset} where.city {city!r}")
        if len(found) != len(JSON_EXPECTED):
            fail(f"DuckDB reads {len(found)} events rows, expected {len(JSON_EXPECTED)}")
    return len(rows), len(dead), None if found is None else len(found)


PROTOBUF_COLUMNS = ["id", "name", "amount", "placed", "tags", "email", "nick", "attrs", "kind", "ship",
                    "phone", "fax", "limit", "urgent", "blob", "big"]
# Unset proto3 scalars read as their defaults; unset optional scalars, wrappers, messages
# and oneof members as null; a column a version lacks is null in its rows.
PROTOBUF_EXPECTED = {
    0: {"id": 1, "name": "one", "amount": 1.5, "placed": PLACED_US},
    1: {"id": 2, "name": "", "amount": 0.0, "placed": None},
    2: {"id": 1 << 40, "name": "big", "amount": 2.25, "placed": PLACED_US, "tags": ["a", "b"],
        "email": "x@example.com", "nick": "nn"},
    3: {"id": 5, "name": "e", "amount": 0.0, "placed": PLACED_US, "tags": [], "email": None, "nick": None},
    4: {"id": 7, "amount": -1.0, "placed": PLACED_US, "attrs": [("j", -1), ("k", 7)], "kind": "OLD",
        "ship": {"city": "Utrecht", "zip": None}, "phone": "555", "fax": None, "limit": 9,
        "urgent": True, "blob": b"\x00\x01", "big": 2**63 - 1},
    5: {"id": 8, "amount": 0.0, "placed": None, "attrs": [], "kind": "NEW", "ship": None, "phone": None,
        "fax": "777", "limit": None, "urgent": False, "blob": b"", "big": 0},
    12: {},
}
PROTOBUF_DEAD = {
    6: "schema id 304 cannot be written to table kafscale.payments: field id",
    7: "schema id 999 is not in the schema registry",
    8: "does not start with the schema registry's magic byte",
    9: "Protobuf payload does not decode",
    10: "names no message",
    11: "beyond a long",
}


def duckdb_scan(table, columns):
    """`table`'s rows as DuckDB's iceberg_scan reads them: the offset and `columns`,
    by offset; `None` without DuckDB's Iceberg extension."""
    sys.path.insert(0, os.path.dirname(__file__))
    from verify_tables import open_duckdb

    con = open_duckdb()
    if con is None:
        return None
    return con.execute(f'SELECT "offset", {columns} FROM iceberg_scan(?) ORDER BY "offset"',
                       [table.metadata_location]).fetchall()


def open_table(warehouse, name, expected):
    """The SQL catalog of `warehouse`, table `kafscale.<name>` and its rows by offset;
    fails unless it holds exactly the offsets of `expected`."""
    from pyiceberg.catalog.sql import SqlCatalog

    wh = os.path.abspath(warehouse)
    catalog = SqlCatalog("local", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    table = catalog.load_table(f"kafscale.{name}")
    rows = {r["offset"]: r for r in table.scan().to_arrow().to_pylist()}
    if sorted(rows) != sorted(expected):
        fail(f"{name}: table holds offsets {sorted(rows)}, expected {sorted(expected)}")
    return catalog, table, rows


def check_dead_letters(catalog, name, needles, records):
    """`kafscale.<name>__dlq` holds exactly the offsets of `needles`, each with its
    reason's needle and its record's own (key, value) from `records`; returns them."""
    dead = {r["offset"]: r for r in catalog.load_table(f"kafscale.{name}__dlq").scan().to_arrow().to_pylist()}
    if sorted(dead) != sorted(needles):
        fail(f"{name}: dead-letter table holds offsets {sorted(dead)}, expected {sorted(needles)}")
    for offset, needle in needles.items():
        if needle not in dead[offset]["error"]:
            fail(f"{name} dead letter {offset}: reason {dead[offset]['error']!r} lacks {needle!r}")
        key, value = records[offset]
        if dead[offset]["value"] != value or (key is not None and dead[offset]["key"] != key):
            fail(f"{name} dead letter {offset}: not the record's own key and value")
    return dead


def check_field_ids(table, name):
    """Each column of `table` kept the id the first schema that had it gave it."""
    current = {f.name: f.field_id for f in table.schema().fields}
    for schema in table.metadata.schemas:
        for f in schema.fields:
            if current.get(f.name) != f.field_id:
                fail(f"{name} column {f.name} had id {f.field_id} in schema {schema.schema_id}, "
                     f"now {current.get(f.name)}")


def check_protobuf(args):
    catalog, table, rows = open_table(args.warehouse, "payments", PROTOBUF_EXPECTED)
    for offset, want in PROTOBUF_EXPECTED.items():
        for column in PROTOBUF_COLUMNS:
            got = normalize(column, rows[offset].get(column))
            expected = want.get(column)
            if column == "tags" and got == []:
                got = None  # pyiceberg reads a null list as empty
            if column == "tags" and expected == []:
                expected = None
            if got != expected:
                fail(f"payments offset {offset} column {column}: {got!r}, encoded {expected!r}")
    schemas = table.metadata.schemas
    check_field_ids(table, "payments")
    for column, kind in [("id", "long"), ("amount", "double")]:
        if str(table.schema().find_field(column).field_type) != kind:
            fail(f"payments: {column} is {table.schema().find_field(column).field_type}, not {kind}")
    records = [(None, value) for value in protobuf_values()]
    dead = check_dead_letters(catalog, "payments", PROTOBUF_DEAD, records)

    found = duckdb_scan(table, "id, amount, epoch_us(placed), kind, ship.city, phone")
    duckdb_rows = None if found is None else len(found)
    if found is not None:
        for offset, id_, amount, placed, kind, city, phone in found:
            want = PROTOBUF_EXPECTED.get(offset)
            if want is None:
                fail(f"DuckDB: payments offset {offset} is not expected")
            got = {"id": id_, "amount": amount, "placed": placed, "kind": kind, "phone": phone}
            for column, value in got.items():
                if value != want.get(column):
                    fail(f"DuckDB: payments offset {offset} column {column}: {value!r}, "
                         f"encoded {want.get(column)!r}")
            if city != (want.get("ship") or {}).get("city"):
                fail(f"DuckDB: payments offset {offset} ship.city {city!r}, "
                     f"encoded {(want.get('ship') or {}).get('city')!r}")
        if duckdb_rows != len(PROTOBUF_EXPECTED):
            fail(f"DuckDB reads {duckdb_rows} payments rows, expected {len(PROTOBUF_EXPECTED)}")
    print(json.dumps({"protobuf_rows": len(rows), "protobuf_dead_letters": len(dead),
                      "schemas": len(schemas), "duckdb_rows": duckdb_rows}))


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port-file", required=True)
    s.add_argument("--user")
    s.add_argument("--password")
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--part", type=int, choices=(1, 2, 3, 4, 5), required=True)
    c = sub.add_parser("check")
    c.add_argument("--warehouse", required=True)
    p = sub.add_parser("check-protobuf")
    p.add_argument("--warehouse", required=True)
    k = sub.add_parser("check-keys")
    k.add_argument("--warehouse", required=True)
    args = parser.parse_args()
    {"serve": serve, "make": make, "check": check, "check-protobuf": check_protobuf,
     "check-keys": check_keys}[args.command](args)


if __name__ == "__main__":
    main()
