#!/usr/bin/env python3
"""Independent check of what `kfs-iceberg run` wrote, with pyiceberg and DuckDB.

Reads every `*.expected.jsonl` under --expected (written by tests/independent/
make_segments.py next to each segment: topic and partition come from the path),
opens each topic's table `kafscale.<sanitized topic>` through pyiceberg's SqlCatalog on
the warehouse's `catalog.db`, and compares row by row: same count, no duplicate
record_id, byte-equal keys, values and headers (a key that is not UTF-8 read as Java
reads it, its bytes in `key_bytes`), equal timestamps (timestamp_ms and the microsecond
timestamptz, null beyond what microseconds hold). DuckDB's iceberg_scan must agree on count and content.
The table's stored progress (the `kfs.progress.offsets` table property, which no other
engine's rewrite or expiry removes) must hold the full offset map; a table from before
it was stored, the current snapshot's summary.

Prints one JSON line with per-table facts (snapshot count, rows) for the caller, and
exits non-zero with a clear message on the first mismatch.
"""

import argparse
import base64
import glob
import json
import os
import re
import sys


def sanitize(topic):
    return re.sub(r"[^a-z0-9_]", "_", topic.lower())


def load_expected(expected_dir, only_keys=None):
    tables = {}
    for path in sorted(glob.glob(os.path.join(expected_dir, "**", "*.expected.jsonl"), recursive=True)):
        rel = os.path.relpath(path, expected_dir)
        parts = rel.split(os.sep)
        topic, partition = parts[-3], int(parts[-2])
        kfs_key = rel.replace(".expected.jsonl", ".kfs")
        if only_keys is not None and kfs_key not in only_keys:
            continue
        rows = tables.setdefault(sanitize(topic), {})
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                b = lambda v: None if v is None else base64.b64decode(v)
                rid = f"{topic}:{partition}:{r['offset']}"
                rows[rid] = {
                    "topic": topic,
                    "partition": partition,
                    "offset": r["offset"],
                    "timestamp_ms": r["timestamp_ms"],
                    "key": b(r["key"]),
                    "value": b(r["value"]),
                    "headers": [(h["key"], b(h.get("key_bytes")), b(h["value"])) for h in r["headers"]],
                }
    return tables


def fail(message):
    print(f"verify_tables: {message}", file=sys.stderr)
    sys.exit(1)


FOREIGN = {"topic": None, "rows": 0}


def check_rows(where, table_name, expected, actual_rows):
    seen = set()
    foreign = 0
    for row in actual_rows:
        if FOREIGN["topic"] is not None and row["topic"] == FOREIGN["topic"]:
            # Another writer's rows: counted, not compared.
            foreign += 1
            continue
        rid = row["record_id"]
        if rid in seen:
            fail(f"{where}: {table_name}: duplicate record_id {rid}")
        seen.add(rid)
        want = expected.get(rid)
        if want is None:
            fail(f"{where}: {table_name}: unexpected row {rid}")
        for column in ("topic", "partition", "offset", "timestamp_ms", "key", "value"):
            got = row[column]
            if isinstance(got, (bytearray, memoryview)):
                got = bytes(got)
            if got != want[column]:
                fail(f"{where}: {table_name}: {rid}: {column} is {got!r}, expected {want[column]!r}")
        as_bytes = lambda v: None if v is None else bytes(v)  # noqa: E731
        headers = [(h["key"], as_bytes(h.get("key_bytes")), as_bytes(h["value"])) for h in row["headers"]]
        if headers != want["headers"]:
            fail(f"{where}: {table_name}: {rid}: headers {headers!r}, expected {want['headers']!r}")
        # Beyond what microseconds hold, `timestamp` is null and `timestamp_ms` exact.
        micros = want["timestamp_ms"] * 1000
        want_us = micros if -(2**63) <= micros < 2**63 else None
        if row["timestamp_us"] != want_us:
            fail(f"{where}: {table_name}: {rid}: timestamp {row['timestamp_us']} µs, expected {want_us}")
    if FOREIGN["topic"] is not None and table_name == FOREIGN["table"] and foreign != FOREIGN["rows"]:
        fail(f"{where}: {table_name}: {foreign} rows of the other writer, expected {FOREIGN['rows']}")
    missing = set(expected) - seen
    if missing:
        fail(f"{where}: {table_name}: {len(missing)} records missing, e.g. {sorted(missing)[:3]}")


def pyiceberg_rows(table):
    arrow = table.scan().to_arrow()
    rows = arrow.to_pylist()
    for row in rows:
        ts = row["timestamp"]
        row["timestamp_us"] = (ts.timestamp() * 1_000_000).__round__() if ts is not None else None
    return rows


def duckdb_rows(con, metadata_location):
    cur = con.execute(
        "SELECT record_id, topic, \"partition\", \"offset\", timestamp_ms, key, value, headers, epoch_us(\"timestamp\") "
        "FROM iceberg_scan(?)",
        [metadata_location],
    )
    out = []
    for rid, topic, partition, offset, ts_ms, key, value, headers, ts_us in cur.fetchall():
        out.append({
            "record_id": rid, "topic": topic, "partition": partition, "offset": offset, "timestamp_ms": ts_ms,
            "key": key, "value": value, "headers": headers, "timestamp_us": ts_us,
        })
    return out


def open_duckdb():
    import duckdb
    con = duckdb.connect()
    try:
        import duckdb_extension_avro  # noqa: F401  (registers nothing; we load by path below)
    except ImportError:
        pass
    loaded = False
    for name in ("avro", "iceberg"):
        mod = __import__(f"duckdb_extension_{name}")
        path = getattr(mod, "extension_path", None)
        if callable(path):
            path = path()
        if path is None:
            base = os.path.dirname(mod.__file__)
            found = glob.glob(os.path.join(base, "**", f"{name}.duckdb_extension"), recursive=True)
            path = found[0] if found else None
        if path is None:
            fail(f"cannot find the {name} DuckDB extension inside duckdb_extension_{name}")
        con.execute(f"LOAD '{path}'")
        loaded = True
    return con if loaded else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--expected", required=True, help="directory holding the *.expected.jsonl files")
    parser.add_argument("--only", help="file listing the .kfs keys (relative) that must be in the tables")
    parser.add_argument("--no-duckdb", action="store_true")
    parser.add_argument("--foreign", help="TABLE:TOPIC:ROWS: rows another writer appended to TABLE (short name) under TOPIC, counted apart")
    parser.add_argument("--catalog-db", help="the SQLite catalog file (default: <warehouse>/catalog.db)")
    parser.add_argument("--s3-endpoint", help="S3 endpoint of an s3:// warehouse (credentials from AWS_* variables)")
    parser.add_argument("--glue-endpoint", help="read the tables from this Glue endpoint instead of the SQL catalog")
    parser.add_argument("--sql-uri", help="read the tables from the SQL catalog at this SQLAlchemy URI (postgresql+psycopg2://...)")
    parser.add_argument("--rest-uri", help="read the tables from this Iceberg REST catalog instead")
    parser.add_argument("--rest-warehouse", help="the REST catalog's warehouse name")
    parser.add_argument("--rest-credential", help="OAuth2 client_id:client_secret for the REST catalog")
    parser.add_argument("--rest-scope", help="OAuth2 scope for the REST catalog")
    args = parser.parse_args()

    from pyiceberg.catalog.sql import SqlCatalog

    if args.foreign:
        table, topic, rows = args.foreign.split(":")
        FOREIGN.update(table=table, topic=topic, rows=int(rows))
    only = None
    if args.only:
        with open(args.only) as f:
            only = {line.strip() for line in f if line.strip()}
    expected = load_expected(args.expected, only)
    if args.rest_uri:
        from pyiceberg.catalog.rest import RestCatalog

        properties = {"uri": args.rest_uri}
        for name, value in (("warehouse", args.rest_warehouse), ("credential", args.rest_credential),
                            ("scope", args.rest_scope)):
            if value:
                properties[name] = value
        # Storage settings come from the server's config defaults.
        catalog = RestCatalog("rest", **properties)
    elif args.sql_uri:
        catalog = SqlCatalog("local", uri=args.sql_uri, warehouse=f"file://{os.path.abspath(args.warehouse)}")
    elif args.glue_endpoint:
        from pyiceberg.catalog.glue import GlueCatalog

        key = os.environ.get("AWS_ACCESS_KEY_ID", "test")
        secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "test")
        region = os.environ.get("AWS_REGION", "us-east-1")
        catalog = GlueCatalog("glue", **{
            "glue.endpoint": args.glue_endpoint, "glue.region": region,
            "glue.access-key-id": key, "glue.secret-access-key": secret,
            "s3.endpoint": args.s3_endpoint or args.glue_endpoint, "s3.region": region,
            "s3.access-key-id": key, "s3.secret-access-key": secret,
        })
    elif args.warehouse.startswith("s3://"):
        properties = {
            "s3.endpoint": args.s3_endpoint,
            "s3.access-key-id": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
            "s3.secret-access-key": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
            "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
        }
        catalog = SqlCatalog("local", uri=f"sqlite:///{os.path.abspath(args.catalog_db)}", warehouse=args.warehouse, **properties)
    else:
        wh = os.path.abspath(args.warehouse)
        db = os.path.abspath(args.catalog_db) if args.catalog_db else f"{wh}/catalog.db"
        catalog = SqlCatalog("local", uri=f"sqlite:///{db}", warehouse=f"file://{wh}")
    con = None if args.no_duckdb else open_duckdb()
    facts = {}
    for name, rows in sorted(expected.items()):
        table = catalog.load_table(f"kafscale.{name}")
        check_rows("pyiceberg", name, rows, pyiceberg_rows(table))
        snapshot = table.current_snapshot()
        if snapshot is None:
            fail(f"{name}: no snapshot")
        stored = table.properties.get("kfs.progress.offsets")
        props = snapshot.summary.additional_properties
        offsets = json.loads(stored or props.get("kfs.offsets", "null") or "null")
        if not offsets:
            fail(f"{name}: neither the table's properties nor the current snapshot hold kfs offsets")
        partitions = {str(r["partition"]) for r in rows.values()}
        if not partitions <= set(offsets):
            fail(f"{name}: offset map {offsets} lacks partitions {sorted(partitions - set(offsets))}")
        for rid, r in rows.items():
            if offsets[str(r["partition"])] <= r["offset"]:
                fail(f"{name}: offset map {offsets} does not cover {rid}")
        if con is not None:
            check_rows("duckdb", name, rows, duckdb_rows(con, table.metadata_location))
        facts[name] = {
            "rows": len(rows),
            "snapshots": len(table.metadata.snapshots),
            "offsets": offsets,
            "operation": str(snapshot.summary.operation),
            "history": [str(table.snapshot_by_id(h.snapshot_id).summary.operation)
                        for h in table.history() if table.snapshot_by_id(h.snapshot_id) is not None],
            "data_files": sorted(task.file.file_path for task in table.scan().plan_files()),
            "data_bytes": sum(task.file.file_size_in_bytes for task in table.scan().plan_files()),
        }
    print(json.dumps(facts, sort_keys=True))


if __name__ == "__main__":
    main()
