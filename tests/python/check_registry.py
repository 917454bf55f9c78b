#!/usr/bin/env python3
"""Registry-encoded Avro values end to end, written and checked independently of the
Rust code: schemas served by a registry following the Confluent REST API (this
script's `serve`), values encoded by fastavro with Confluent's framing, segments by
tests/independent/kfs_writer.py, tables read back by pyiceberg and DuckDB.

    check_registry.py serve --port-file FILE [--user U --password P]
        Serves GET /schemas/ids/{id} on 127.0.0.1 (a free port, written to FILE) with
        basic authentication when a user is given, until killed.

    check_registry.py make DIR --part 1|2|3
        Writes the segment of part 1 (schema v1) or part 2 (v2, v3, an incompatible
        version, an unknown id, a value without the framing, a payload cut short, a
        tombstone) of topic `orders`, namespace `ns`, partition 0, under DIR; part 3
        is topic `events`, JSON values of three JSON Schema versions and what a table
        of them cannot hold.

    check_registry.py check --warehouse WH
        Checks `kafscale.orders` and its `__dlq`: every record once in one of them, the
        values as encoded, field ids stable since the first schema, each dead letter's
        reason. Prints one JSON line of facts; exits non-zero on the first mismatch.
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
SCHEMAS = {101: V1, 102: V2, 103: V3, 104: INCOMPATIBLE}

# JSON Schema versions of topic `events` (schemaType JSON): v2 adds tags and a nested
# object by $ref and drops note; v3 adds a map; the incompatible one makes n a string.
J1 = {"type": "object", "properties": {"n": {"type": "integer"}, "note": {"type": ["string", "null"]},
                                       "score": {"type": "number"}}}
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
            parts = self.path.strip("/").split("/")
            if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                schema_id = int(parts[2])
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


def make(args):
    import kfs_writer

    if args.part == 3:
        records = [kfs_writer.Record(i, i, None, v) for i, v in enumerate(JSON_VALUES)]
        batch = kfs_writer.Batch(base_offset=0, base_timestamp=1_764_669_600_000, records=records).encode()
        path = os.path.join(args.dir, "ns", "events", "0", f"segment-{0:020}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".kfs", "wb") as f:
            f.write(kfs_writer.build_segment([batch], 1_764_669_600_000))
        with open(path + ".index", "wb") as f:
            f.write(kfs_writer.build_index([batch]))
        return
    base = 0 if args.part == 1 else 3
    values = part_values(args.part)
    records = [kfs_writer.Record(i, i, f"k{base + i}".encode(), v) for i, v in enumerate(values)]
    batch = kfs_writer.Batch(base_offset=base, base_timestamp=1_764_669_600_000, records=records).encode()
    path = os.path.join(args.dir, "ns", "orders", "0", f"segment-{base:020}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".kfs", "wb") as f:
        f.write(kfs_writer.build_segment([batch], 1_764_669_600_000))
    with open(path + ".index", "wb") as f:
        f.write(kfs_writer.build_index([batch]))


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

    sys.path.insert(0, os.path.dirname(__file__))
    from verify_tables import open_duckdb

    con = open_duckdb()
    duckdb_rows = None
    if con is not None:
        found = con.execute(
            "SELECT \"offset\", id, name, amount, epoch_us(placed), price, \"day\", kind, ship.city "
            "FROM iceberg_scan(?) ORDER BY \"offset\"", [table.metadata_location]).fetchall()
        duckdb_rows = len(found)
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
    json_rows, json_dead = check_json_schema_table(catalog)
    print(json.dumps({"rows": len(rows), "dead_letters": len(dead), "schemas": len(schemas),
                      "duckdb_rows": duckdb_rows, "first_ids": first, "json_schema_rows": json_rows,
                      "json_schema_dead_letters": json_dead}))


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
    current = {f.name: f.field_id for f in table.schema().fields}
    for schema in table.metadata.schemas:
        for f in schema.fields:
            if current.get(f.name) != f.field_id:
                fail(f"events column {f.name} had id {f.field_id} in schema {schema.schema_id}")
    dead = {r["offset"]: r for r in catalog.load_table("kafscale.events__dlq").scan().to_arrow().to_pylist()}
    if sorted(dead) != sorted(JSON_DEAD):
        fail(f"events: dead-letter table holds {sorted(dead)}, expected {sorted(JSON_DEAD)}")
    for offset, needle in JSON_DEAD.items():
        if needle not in dead[offset]["error"]:
            fail(f"events dead letter {offset}: reason {dead[offset]['error']!r} lacks {needle!r}")
    return len(rows), len(dead)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port-file", required=True)
    s.add_argument("--user")
    s.add_argument("--password")
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--part", type=int, choices=(1, 2, 3), required=True)
    c = sub.add_parser("check")
    c.add_argument("--warehouse", required=True)
    args = parser.parse_args()
    {"serve": serve, "make": make, "check": check}[args.command](args)


if __name__ == "__main__":
    main()
