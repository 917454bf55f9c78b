#!/usr/bin/env python3
"""Which engines read an upsert table (a mirror, merge on read with position deletes)
correctly: each reader's rows are compared with the fold of the topic's change log
(an append table of the same topic, folded by `tests/python/check_mirror.py`), and
timed. Readers: pyiceberg, DuckDB (iceberg extension), Daft (`daft.read_iceberg`)
and ClickHouse (chDB's `icebergLocal`), each where it is installed; a reader that
fails or reads other rows is reported so, never skipped silently.

    python3 scripts/readers_matrix.py --log-warehouse WH1 --mirror-warehouse WH2 \
        --table kafscale.orders [--label "before compaction"]

Daft and chDB are not in tests/requirements.txt (CI does not need them); install
them beside it: `pip install daft chdb`. Prints one Markdown row per reader.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))
from check_mirror import commit_offsets, dead_letters, event_order_note, fold, open_table  # noqa: E402
from verify_tables import open_duckdb  # noqa: E402


def pyiceberg_rows(table) -> Counter:
    rows = table.scan(selected_fields=("partition", "offset")).to_arrow()
    return Counter(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist()))


def duckdb_rows(table) -> Counter:
    con = open_duckdb()
    found = con.execute(
        'SELECT "partition", "offset" FROM iceberg_scan(?)', [table.metadata_location]
    ).fetchall()
    return Counter(found)


def daft_rows(table) -> Counter:
    import daft

    frame = daft.read_iceberg(table).select("partition", "offset").to_arrow()
    return Counter(zip(frame["partition"].to_pylist(), frame["offset"].to_pylist()))


def clickhouse_rows(table) -> Counter:
    import chdb

    # chDB reads local files under its working directory only.
    location = table.metadata.location.removeprefix("file://")
    before = os.getcwd()
    os.chdir(location)
    try:
        result = chdb.query("SELECT `partition`, `offset` FROM icebergLocal('.')", "ArrowTable")
    finally:
        os.chdir(before)
    return Counter(zip(result["partition"].to_pylist(), result["offset"].to_pylist()))


READERS = {
    "pyiceberg": pyiceberg_rows,
    "DuckDB": duckdb_rows,
    "Daft": daft_rows,
    "ClickHouse (chDB)": clickhouse_rows,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-warehouse", required=True, type=Path)
    parser.add_argument("--mirror-warehouse", required=True, type=Path)
    parser.add_argument("--table", required=True)
    parser.add_argument("--label", default="", help="what state the mirror is in")
    parser.add_argument(
        "--key-fields", help="the mirror's upsert_key: value fields (default: the record key)"
    )
    parser.add_argument(
        "--dead-letters", action="store_true",
        help="leave out the records the mirror's dead-letter table holds (a JSON mirror's)",
    )
    args = parser.parse_args()

    log = open_table(args.log_warehouse, args.table).scan(
        selected_fields=("key", "value", "partition", "offset", "timestamp_ms")
    ).to_arrow()
    skipped = dead_letters(args.mirror_warehouse, args.table) if args.dead_letters else frozenset()
    key_fields = [f.strip() for f in args.key_fields.split(",")] if args.key_fields else None
    commits = commit_offsets(open_table(args.log_warehouse, args.table))
    expected, stats = fold(log, skipped, key_fields, commits)
    mirror = open_table(args.mirror_warehouse, args.table)
    print(
        f"<!-- {args.label}: log of {stats['records']} records, {stats['keys']} keys; "
        f"the fold keeps {sum(expected.values())} rows; "
        f"{event_order_note(expected, fold(log, skipped, key_fields)[0])} -->"
    )
    failed = False
    for reader, read in READERS.items():
        started = time.perf_counter()
        try:
            rows = read(mirror)
        except ImportError:
            print(f"| {reader} | not installed | |")
            continue
        except Exception as error:  # noqa: BLE001 - a reader's failure is a finding
            failed = True
            print(f"| {reader} | fails: {str(error).splitlines()[0][:160]} | |")
            continue
        seconds = time.perf_counter() - started
        if rows == expected:
            print(f"| {reader} | reads the fold exactly ({sum(rows.values())} rows) | {seconds:.2f} s |")
        else:
            failed = True
            extra = sum((rows - expected).values())
            missing = sum((expected - rows).values())
            print(f"| {reader} | wrong: {extra} rows too many, {missing} missing | {seconds:.2f} s |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
