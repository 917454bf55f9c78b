#!/usr/bin/env python3
"""Independent check of a `--value-format json` run, with pyiceberg.

Reads the records encoded under --expected (the `*.expected.jsonl` files written next
to each segment by `kfs-iceberg dump --json`) and, for each topic, the table
`kafscale.<topic>` and its dead-letter table `kafscale.<topic>__dlq` from the
warehouse's SQLite catalog. Checks:

- every encoded offset is in exactly one of the two tables, once (no offset missing,
  none in both, none twice);
- a record whose value is a JSON object is in the table, and each of its fields equals
  its column (fields named like a metadata column are in `value_<name>`; a column the
  record has no field for is null); a null value (tombstone) is a row with every
  payload column null;
- any other record is in the dead-letter table with its raw value, key, timestamp and
  headers byte-equal, a reason in `error` and its segment in `segment`;
- the payload columns have the types the JSON implies (integers long, fractions
  double, objects structs, arrays lists).

Prints one JSON line of facts (rows per table, columns, dead letters) and exits
non-zero with a clear message on the first mismatch.
"""

import argparse
import json
import math
import struct
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from verify_tables import fail, load_expected  # noqa: E402

METADATA = {"record_id", "topic", "partition", "offset", "timestamp_ms", "key",
            "value", "headers", "timestamp"}


def column_name(field):
    inner = field
    while inner.startswith("value_"):
        inner = inner[len("value_"):]
        if inner in METADATA:
            return "value_" + field
    return "value_" + field if field in METADATA else field


def as_float32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


def equal(expected, actual, where, float32=False):
    """JSON value `expected` against what pyarrow gave back for its column (a `float`
    column holds the value rounded to 32 bits)."""
    if expected is None:
        # pyiceberg reads a null list back as an empty one (its projection rebuilds
        # list arrays without their validity); the Parquet file holds null.
        if actual is not None and actual != []:
            fail(f"{where}: expected null, found {actual!r}")
        return
    if isinstance(expected, bool):
        if actual is not expected:
            fail(f"{where}: expected {expected!r}, found {actual!r}")
    elif isinstance(expected, (int, float)):
        if float32:
            expected = as_float32(float(expected))
        if actual is None or isinstance(actual, bool) or not math.isclose(float(actual), float(expected), rel_tol=0, abs_tol=0):
            fail(f"{where}: expected {expected!r}, found {actual!r}")
    elif isinstance(expected, str):
        if actual != expected:
            fail(f"{where}: expected {expected!r}, found {actual!r}")
    elif isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            fail(f"{where}: expected {expected!r}, found {actual!r}")
        for i, (e, a) in enumerate(zip(expected, actual)):
            equal(e, a, f"{where}[{i}]")
    elif isinstance(expected, dict):
        if not isinstance(actual, dict):
            fail(f"{where}: expected an object, found {actual!r}")
        for name, value in expected.items():
            if name not in actual:
                if value in (None, [], {}):
                    continue
                fail(f"{where}.{name}: no such struct field (fields: {sorted(actual)})")
            equal(value, actual[name], f"{where}.{name}")
    else:
        fail(f"{where}: unexpected JSON {expected!r}")


def json_object(value):
    if value is None:
        return {}
    try:
        parsed = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    return parsed if isinstance(parsed, dict) else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--expected", required=True)
    parser.add_argument("--declared", action="store_true",
                        help="the columns were declared: fields without one are not written")
    args = parser.parse_args()

    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    wh = os.path.abspath(args.warehouse)
    catalog = SqlCatalog("local", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    facts = {}
    for table_name, expected in sorted(load_expected(args.expected).items()):
        table = catalog.load_table(f"kafscale.{table_name}")
        rows = table.scan().to_arrow().to_pylist()
        try:
            dead = catalog.load_table(f"kafscale.{table_name}__dlq").scan().to_arrow().to_pylist()
        except NoSuchTableError:
            dead = []
        schema = table.schema()
        payload = [f for f in schema.fields if f.name not in METADATA]
        found = {}
        for where, row_list in (("table", rows), ("dead-letter table", dead)):
            for row in row_list:
                rid = row["record_id"]
                if rid in found:
                    fail(f"{rid} is in the {found[rid][0]} and again in the {where}")
                found[rid] = (where, row)
        missing = sorted(set(expected) - set(found))
        if missing:
            fail(f"{table_name}: {len(missing)} offsets in neither table, e.g. {missing[:3]}")
        extra = sorted(set(found) - set(expected))
        if extra:
            fail(f"{table_name}: rows for offsets never encoded, e.g. {extra[:3]}")
        dead_letters = 0
        for rid, record in expected.items():
            where, row = found[rid]
            value = json_object(record["value"])
            for name in ("partition", "offset", "timestamp_ms", "key"):
                if row[name] != record[name]:
                    fail(f"{rid} ({where}): {name} {row[name]!r} != {record[name]!r}")
            headers = [(h["key"], h.get("key_bytes"), h["value"]) for h in row["headers"]]
            if headers != record["headers"]:
                fail(f"{rid} ({where}): headers {headers!r} != {record['headers']!r}")
            if value is None:
                dead_letters += 1
                if where != "dead-letter table":
                    fail(f"{rid}: value {record['value'][:40]!r} is not a JSON object but is in the table")
                if row["value"] != record["value"]:
                    fail(f"{rid}: the dead letter's value is not the raw value")
                if not row["error"] or not row["segment"].endswith(".kfs"):
                    fail(f"{rid}: dead letter without reason or segment: {row['error']!r} {row['segment']!r}")
                continue
            if where != "table":
                fail(f"{rid}: a JSON object is in the dead-letter table: {row['error']}")
            fields = {column_name(k): v for k, v in value.items()}
            for field in payload:
                equal(fields.get(field.name), row[field.name], f"{rid}.{field.name}",
                      float32=str(field.field_type) == "float")
            for name, field_value in fields.items():
                if name not in row and field_value not in (None, [], {}) and not args.declared:
                    fail(f"{rid}: field {name} has no column")
        types = {f.name: str(f.field_type) for f in payload}
        facts[table_name] = {
            "rows": len(rows),
            "dead_letters": len(dead),
            "expected_dead_letters": dead_letters,
            "offsets": len(expected),
            "columns": types,
            "schemas": len(table.metadata.schemas),
        }
    print(json.dumps(facts, sort_keys=True))


if __name__ == "__main__":
    main()
