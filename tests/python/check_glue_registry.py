#!/usr/bin/env python3
"""Values framed for the AWS Glue Schema Registry end to end, written and checked
independently of the Rust code: schemas registered by boto3 in Glue (a moto server,
reached through AWS_ENDPOINT_URL and the AWS credentials of the environment), Avro
values encoded by fastavro, Protobuf values by Google's protobuf library (the schema
compiled from the registered text by grpcio-tools' protoc) and JSON values by the
json module, each with Glue's framing (header version 3, compression 0 or 5 for
zlib, the 16-byte schema version id, the payload; a Protobuf payload starts with
the message's index among all the file's messages sorted by full name), segments by
tests/independent/kfs_writer.py, tables read back by pyiceberg and DuckDB.

    check_glue_registry.py make DIR --versions FILE
        Creates registry `kfs` and its schemas `orders` (Avro, three versions),
        `orders_bad` (Avro, incompatible with the table of `orders`), `payments`
        (Protobuf) and `events` (JSON), then writes under DIR (namespace `ns`,
        partition 0, base offset 0) one segment each of topics `glue_orders`,
        `glue_payments` and `glue_events`: values of those versions, uncompressed and
        zlib-compressed, and what cannot be read (an incompatible version, an unknown
        version id, an unknown compression, a zlib payload cut short, a Confluent-
        framed value, a message index naming no message, a JSON value the table cannot
        hold) and a tombstone. FILE gets the version ids and the values written, by
        topic and offset (base64), for `check`.

    check_glue_registry.py check --warehouse WH --versions FILE
        Checks the three tables and their `__dlq`: every record once in one of them,
        the values as encoded, field ids stable since the first schema, each dead
        letter's reason and its value the record's own bytes. Prints one JSON line of
        facts; exits non-zero on the first mismatch.
"""

import argparse
import base64
import datetime
import io
import json
import os
import sys
import tempfile
import uuid
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "independent"))

REGISTRY = "kfs"

ORDERS_V1 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "int"},
    {"name": "name", "type": "string"},
]}
# Adds tags; id promoted to long.
ORDERS_V2 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
]}
# Drops name; adds placed.
ORDERS_V3 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]}
ORDERS_BAD = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}

PAYMENTS_PROTO = """syntax = "proto3";
package shop;
message Alpha {
  string a = 1;
}
message Payment {
  int64 id = 1;
  string note = 2;
  map<string, int64> attrs = 3;
}
"""

EVENTS_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}}

PLACED = datetime.datetime(2026, 12, 2, 10, 0, 0, tzinfo=datetime.timezone.utc)
PLACED_US = int(PLACED.timestamp() * 1_000_000)


def fail(message):
    print(f"check_glue_registry: {message}", file=sys.stderr)
    sys.exit(1)


# --- encoding --------------------------------------------------------------------


def glue_framed(version_id, payload, compression=0):
    """AWS Glue's framing: header version 3, the compression byte (0 none, 5 zlib),
    the schema version id's 16 bytes, then the payload (zlib-compressed for 5)."""
    body = zlib.compress(payload) if compression == 5 else payload
    return bytes([3, compression]) + uuid.UUID(version_id).bytes + body


def avro(schema, record):
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def varint(n):
    """An unsigned base-128 varint (Glue's Protobuf message index)."""
    import kfs_writer

    return kfs_writer.uvarint(n)


_PAYMENTS = {}


def payments_file():
    """The file descriptor of PAYMENTS_PROTO, compiled by protoc into a pool of its own."""
    if "file" not in _PAYMENTS:
        import grpc_tools
        from google.protobuf import descriptor_pb2, descriptor_pool
        from grpc_tools import protoc

        well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "payments.proto")
            with open(source, "w") as f:
                f.write(PAYMENTS_PROTO)
            out = os.path.join(tmp, "set.pb")
            status = protoc.main(["protoc", f"--proto_path={tmp}", f"--proto_path={well_known}",
                                  "--include_imports", f"--descriptor_set_out={out}", source])
            if status != 0:
                fail("protoc cannot compile the payments schema")
            with open(out, "rb") as f:
                files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
        pool = descriptor_pool.DescriptorPool()
        for file in files.file:  # dependencies first
            pool.AddSerializedFile(file.SerializeToString())
        _PAYMENTS["file"] = pool.FindFileByName("payments.proto")
    return _PAYMENTS["file"]


def glue_message_index(file, full_name):
    """The position of message `full_name` among all the messages of `file`, top-level
    and nested (map entries included), sorted by full name: AWS's MessageIndexFinder."""
    names = []

    def walk(descriptor):
        names.append(descriptor.full_name)
        for nested in descriptor.nested_types:
            walk(nested)

    for top in file.message_types_by_name.values():
        walk(top)
    return sorted(names).index(full_name)


def payment(fields):
    from google.protobuf import message_factory

    descriptor = payments_file().message_types_by_name["Payment"]
    return message_factory.GetMessageClass(descriptor)(**fields).SerializeToString(deterministic=True)


def write_segment(directory, topic, values):
    """One segment of `topic`, namespace `ns`, partition 0, base offset 0, keys k{offset}."""
    import kfs_writer
    from check_registry import write_segment as write

    records = [kfs_writer.Record(i, i, f"k{i}".encode(), v) for i, v in enumerate(values)]
    write(directory, topic, 0, records)


# --- make --------------------------------------------------------------------------


def glue_client():
    import boto3

    return boto3.client("glue", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                        region_name=os.environ.get("AWS_REGION", "us-east-1"))


def register(glue):
    """Registry `kfs` and its schemas; their version ids, oldest first, by schema."""
    glue.create_registry(RegistryName=REGISTRY)
    schemas = [
        ("orders", "AVRO", [json.dumps(v) for v in (ORDERS_V1, ORDERS_V2, ORDERS_V3)]),
        ("orders_bad", "AVRO", [json.dumps(ORDERS_BAD)]),
        ("payments", "PROTOBUF", [PAYMENTS_PROTO]),
        ("events", "JSON", [json.dumps(EVENTS_SCHEMA)]),
    ]
    versions = {}
    for name, data_format, definitions in schemas:
        created = glue.create_schema(RegistryId={"RegistryName": REGISTRY}, SchemaName=name,
                                     DataFormat=data_format, Compatibility="NONE",
                                     SchemaDefinition=definitions[0])
        versions[name] = [created["SchemaVersionId"]]
        for definition in definitions[1:]:
            answer = glue.register_schema_version(
                SchemaId={"RegistryName": REGISTRY, "SchemaName": name}, SchemaDefinition=definition)
            versions[name].append(answer["SchemaVersionId"])
        if len(set(versions[name])) != len(definitions):
            fail(f"schema {name}: Glue answered version ids {versions[name]}")
    return versions


def orders_values(versions):
    v1, v2, v3 = versions["orders"]
    (bad,) = versions["orders_bad"]
    first = avro(ORDERS_V1, {"id": 5, "name": "e"})
    unknown = str(uuid.uuid4())
    if unknown in {v for ids in versions.values() for v in ids}:
        fail(f"uuid4 drew a registered version id {unknown}")
    return [
        glue_framed(v1, avro(ORDERS_V1, {"id": 1, "name": "a"})),
        glue_framed(v1, avro(ORDERS_V1, {"id": 2, "name": "b"}), 5),
        glue_framed(v2, avro(ORDERS_V2, {"id": 1 << 40, "name": "c", "tags": ["x", "y"]})),
        glue_framed(v3, avro(ORDERS_V3, {"id": 4, "tags": [], "placed": PLACED}), 5),
        glue_framed(bad, avro(ORDERS_BAD, {"id": "x"})),
        glue_framed(unknown, first),
        glue_framed(v1, first, 1),
        glue_framed(v1, first, 5)[:18] + zlib.compress(first)[:3],
        b"\x00\x00\x00\x00\x01" + first,
        None,
    ]


def payments_values(versions):
    (version,) = versions["payments"]
    index = glue_message_index(payments_file(), "shop.Payment")
    if index != 1:
        fail(f"shop.Payment has Glue message index {index}, expected 1")
    return [
        glue_framed(version, varint(index) + payment({"id": 7, "note": "n", "attrs": {"k": 1}})),
        glue_framed(version, varint(index) + payment({"id": 8}), 5),
        glue_framed(version, varint(9) + payment({"id": 9, "note": "nine"})),
    ]


def events_values(versions):
    (version,) = versions["events"]
    text = lambda value: json.dumps(value).encode()  # noqa: E731
    return [
        glue_framed(version, text({"n": 1, "s": "one"})),
        glue_framed(version, text({"n": 2}), 5),
        glue_framed(version, text({"n": "two"})),
    ]


def make(args):
    versions = register(glue_client())
    values = {
        "glue_orders": orders_values(versions),
        "glue_payments": payments_values(versions),
        "glue_events": events_values(versions),
    }
    for topic, topic_values in values.items():
        write_segment(args.dir, topic, topic_values)
    encoded = {topic: [None if v is None else base64.b64encode(v).decode() for v in topic_values]
               for topic, topic_values in values.items()}
    tmp = args.versions + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"versions": versions, "values": encoded}, f, indent=1)
    os.replace(tmp, args.versions)


# --- check -------------------------------------------------------------------------

ORDERS_EXPECTED = {
    0: {"id": 1, "name": "a"},
    1: {"id": 2, "name": "b"},
    2: {"id": 1 << 40, "name": "c", "tags": ["x", "y"]},
    3: {"id": 4, "placed": PLACED_US},
    9: {},
}
ORDERS_COLUMNS = ["id", "name", "tags", "placed"]
ORDERS_DEAD = {
    4: "cannot be written to table kafscale.glue_orders: field id",
    5: "is not in the schema registry",
    6: "compression 1",
    7: "does not inflate",
    8: "is not in the schema registry",
}

PAYMENTS_EXPECTED = {
    0: {"id": 7, "note": "n", "attrs": [("k", 1)]},
    1: {"id": 8, "note": "", "attrs": []},  # proto3: an unset string reads as ""
}
PAYMENTS_COLUMNS = ["id", "note", "attrs"]
PAYMENTS_DEAD = {2: ["names no message"]}

EVENTS_EXPECTED = {
    0: {"n": 1, "s": "one"},
    1: {"n": 2},
}
EVENTS_COLUMNS = ["n", "s"]
EVENTS_DEAD = {2: "property n: a JSON string cannot be written"}


def normalize(column, value):
    """A value as pyiceberg reads it, in the form the expectations use: timestamps in
    microseconds, maps as sorted pairs and lists as lists, an empty one as null."""
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return int(value.timestamp() * 1_000_000)
    if column == "attrs":
        pairs = value.items() if isinstance(value, dict) else (
            (p["key"], p["value"]) if isinstance(p, dict) else tuple(p) for p in value)
        return sorted((k, v) for k, v in pairs) or None
    if column == "tags":
        return list(value) or None  # pyiceberg reads a null list as empty
    return value


def expected_value(column, want):
    value = want.get(column)
    if column in ("tags", "attrs") and not value:
        return None
    return value


def load_values(path):
    with open(path) as f:
        stored = json.load(f)
    return {topic: [None if v is None else base64.b64decode(v) for v in values]
            for topic, values in stored["values"].items()}


def check_table(catalog, name, expected, columns, dead_needles, values):
    """Checks `kafscale.<name>` and its `__dlq`; returns the table, its rows and dead letters."""
    table = catalog.load_table(f"kafscale.{name}")
    rows = {r["offset"]: r for r in table.scan().to_arrow().to_pylist()}
    if sorted(rows) != sorted(expected):
        fail(f"{name}: table holds offsets {sorted(rows)}, expected {sorted(expected)}")
    for offset, want in expected.items():
        for column in columns:
            got = normalize(column, rows[offset].get(column))
            if got != expected_value(column, want):
                fail(f"{name} offset {offset} column {column}: got {got!r}, "
                     f"expected {expected_value(column, want)!r}")

    # Field ids: each column keeps the id the first schema that had it gave it.
    current = {f.name: f.field_id for f in table.schema().fields}
    for schema in table.metadata.schemas:
        for f in schema.fields:
            if current.get(f.name) != f.field_id:
                fail(f"{name} column {f.name} had id {f.field_id} in schema {schema.schema_id}, "
                     f"now {current.get(f.name)}")

    dead = {r["offset"]: r for r in catalog.load_table(f"kafscale.{name}__dlq").scan().to_arrow().to_pylist()}
    if sorted(dead) != sorted(dead_needles):
        fail(f"{name}: dead-letter table holds offsets {sorted(dead)}, expected {sorted(dead_needles)}")
    for offset, needles in dead_needles.items():
        needles = [needles] if isinstance(needles, str) else needles
        reason = dead[offset]["error"] or ""
        if not any(needle in reason for needle in needles):
            fail(f"{name} dead letter {offset}: reason {reason!r} lacks {' or '.join(map(repr, needles))}")
        if dead[offset]["value"] != values[offset]:
            fail(f"{name} dead letter {offset}: its value {dead[offset]['value']!r} is not the "
                 f"record's own {values[offset]!r}")
    if len(rows) + len(dead) != len(values):
        fail(f"{name}: {len(rows)} rows and {len(dead)} dead letters for {len(values)} records")
    return table, rows, dead


def column_type(table, name, column):
    return str(table.schema().find_field(column).field_type)


def check(args):
    from pyiceberg.catalog.sql import SqlCatalog

    values = load_values(args.versions)
    wh = os.path.abspath(args.warehouse)
    catalog = SqlCatalog("local", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")

    orders, order_rows, order_dead = check_table(
        catalog, "glue_orders", ORDERS_EXPECTED, ORDERS_COLUMNS, ORDERS_DEAD, values["glue_orders"])
    for column, kind in [("id", "long"), ("name", "string"), ("placed", "timestamptz")]:
        if column_type(orders, "glue_orders", column) != kind:
            fail(f"glue_orders: {column} is {column_type(orders, 'glue_orders', column)}, not {kind}")

    payments, payment_rows, payment_dead = check_table(
        catalog, "glue_payments", PAYMENTS_EXPECTED, PAYMENTS_COLUMNS, PAYMENTS_DEAD, values["glue_payments"])
    if column_type(payments, "glue_payments", "id") != "long":
        fail(f"glue_payments: id is {column_type(payments, 'glue_payments', 'id')}, not long")

    events, event_rows, event_dead = check_table(
        catalog, "glue_events", EVENTS_EXPECTED, EVENTS_COLUMNS, EVENTS_DEAD, values["glue_events"])

    from verify_tables import open_duckdb

    con = open_duckdb()
    duckdb_rows = None
    if con is not None:
        found = con.execute("SELECT \"offset\", id, name FROM iceberg_scan(?) ORDER BY \"offset\"",
                            [orders.metadata_location]).fetchall()
        duckdb_rows = len(found)
        for offset, id_, name in found:
            want = ORDERS_EXPECTED.get(offset)
            if want is None:
                fail(f"DuckDB: glue_orders offset {offset} is not expected")
            if id_ != want.get("id") or name != want.get("name"):
                fail(f"DuckDB: glue_orders offset {offset}: id {id_!r}, name {name!r}; expected "
                     f"{want.get('id')!r}, {want.get('name')!r}")
        if duckdb_rows != len(ORDERS_EXPECTED):
            fail(f"DuckDB reads {duckdb_rows} glue_orders rows, expected {len(ORDERS_EXPECTED)}")

    print(json.dumps({
        "glue_orders_rows": len(order_rows),
        "glue_orders_dead_letters": len(order_dead),
        "glue_orders_schemas": len(orders.metadata.schemas),
        "glue_payments_rows": len(payment_rows),
        "glue_payments_dead_letters": len(payment_dead),
        "glue_events_rows": len(event_rows),
        "glue_events_dead_letters": len(event_dead),
        "duckdb_rows": duckdb_rows,
        "events_dead_reason": event_dead[2]["error"],
        "orders_dead_reasons": {str(o): order_dead[o]["error"] for o in sorted(order_dead)},
        "payments_dead_reason": payment_dead[2]["error"],
    }))


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--versions", required=True, help="JSON file for the version ids and values written")
    c = sub.add_parser("check")
    c.add_argument("--warehouse", required=True)
    c.add_argument("--versions", required=True, help="the file `make` wrote")
    args = parser.parse_args()
    {"make": make, "check": check}[args.command](args)


if __name__ == "__main__":
    main()
