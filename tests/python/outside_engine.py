#!/usr/bin/env python3
"""Another engine maintaining kfs-iceberg's tables, as S3 Tables, Glue's optimizers or a
Spark job would: pyiceberg on the warehouse's SQLite catalog.

  rewrite-expire   every topic table of namespace `kafscale` (not the dead-letter
                   tables) is overwritten with its own rows (a rewrite carrying none of
                   kfs-iceberg's summary properties), then every snapshot but the
                   current one is expired: the state S3 Tables leaves after its
                   compaction and 120 hours of retention.
  rollback TABLE   sets TABLE's current snapshot back to its first snapshot.
  append-foreign TABLE
                   another writer appends 3 rows of its own (topic `foreign-writer`).

Prints one JSON line: per table, the snapshots left and the rows rewritten.
"""

import argparse
import json
import os
import sys
import time

from pyiceberg.catalog.sql import SqlCatalog


def catalog_of(warehouse):
    wh = os.path.abspath(warehouse)
    return SqlCatalog("local", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")


def rewrite_expire(catalog):
    facts = {}
    for ident in catalog.list_tables("kafscale"):
        name = ".".join(ident)
        if name.endswith("__dlq"):
            continue
        table = catalog.load_table(ident)
        if table.current_snapshot() is None:
            continue
        rows = table.scan().to_arrow()
        table.overwrite(rows)
        table = catalog.load_table(ident)
        current = table.current_snapshot().snapshot_id
        # Snapshot timestamps are in ms: anything older than a moment from now, but the
        # current snapshot (which expiry never removes).
        time.sleep(0.01)
        older = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != current]
        if older:
            table.maintenance.expire_snapshots().by_ids(older).commit()
        table = catalog.load_table(ident)
        summary = table.current_snapshot().summary.additional_properties
        if "kfs.offsets" in summary:
            sys.exit(f"outside_engine: {name}: the rewrite carried kfs.offsets")
        facts[name] = {"rows": rows.num_rows, "snapshots": len(table.snapshots()),
                       "files": live_files(table)}
    return facts


def live_files(table):
    """The data files of the table's current snapshot (this engine's, after its rewrite)."""
    return sorted(f["file_path"] for f in table.inspect.files().to_pylist())


def append_foreign(catalog, name, rows=3):
    """Another writer appends `rows` rows of its own (topic `foreign-writer`) to the
    table, in a snapshot without any kfs-iceberg property."""
    import pyarrow as pa
    table = catalog.load_table(name)
    sample = table.scan(limit=1).to_arrow().slice(0, 1)
    batch = pa.concat_tables([sample] * rows)
    for column, values in (
        ("topic", pa.array(["foreign-writer"] * rows)),
        ("record_id", pa.array([f"foreign-writer:0:{i}" for i in range(rows)])),
        ("offset", pa.array(list(range(rows)), pa.int64())),
    ):
        index = batch.schema.get_field_index(column)
        batch = batch.set_column(index, batch.schema.field(index), values.cast(batch.schema.field(index).type))
    before = set(live_files(table))
    table.append(batch)
    added = sorted(set(live_files(catalog.load_table(name))) - before)
    return {name: {"foreign_rows": rows, "files": added}}


def rollback(catalog, name):
    table = catalog.load_table(name)
    first = min(table.snapshots(), key=lambda s: s.sequence_number)
    table.manage_snapshots().set_current_snapshot(first.snapshot_id).commit()
    return {name: {"current": first.snapshot_id}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("action", choices=["rewrite-expire", "rollback", "append-foreign"])
    parser.add_argument("table", nargs="?")
    args = parser.parse_args()
    catalog = catalog_of(args.warehouse)
    if args.action == "rewrite-expire":
        facts = rewrite_expire(catalog)
    elif args.action == "append-foreign":
        facts = append_foreign(catalog, args.table)
    else:
        facts = rollback(catalog, args.table)
    print(json.dumps(facts, sort_keys=True))


if __name__ == "__main__":
    main()
