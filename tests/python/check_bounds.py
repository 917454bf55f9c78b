#!/usr/bin/env python3
"""Column bounds end to end: filtered scans by pyiceberg and DuckDB equal a full scan's filter.

`write` encodes (with the independent writer, tests/independent/kfs_writer.py) JSON
values whose strings make Parquet's statistics inexact: the first record of the first
segment holds `{"s": "<100 x a>"}`, most others `{"s": "m"}`, and a seeded sprinkle of
strings of 0-300 characters, non-ASCII ones and runs of U+FFFF and U+10FFFF among them,
with integers and floats beside them. Parquet truncates byte-array statistics at 64
bytes and marks them inexact; a file's Iceberg bounds must still hold every value
(issue 36, finding 1: they once skipped the inexact row groups, and a scan for
`s = '<100 x a>'` answered 0 rows).

`check` opens the table through pyiceberg's SqlCatalog on the warehouse, then
  * for every data file, reads its rows with pyarrow and checks that the manifest's
    lower and upper bounds of every column enclose the file's minimum and maximum;
  * for a set of predicates (equality on sampled values, the long string, ranges below
    and above), checks that pyiceberg's filtered scan and DuckDB's `iceberg_scan ...
    WHERE` return exactly the rows a full scan's filter keeps.
Prints one JSON line of facts; exits non-zero naming the first file or predicate wrong.

    check_bounds.py write --out SRC --records 1100000 [--segments 2] [--seed 7]
    check_bounds.py check --warehouse WH [--table kafscale.bounds]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "independent"))
sys.path.insert(0, HERE)

CREATED_MS = 1_700_000_000_000
LONG = "a" * 100
PER_BATCH = 1000
ALPHABET = "abmz09 é€𝄞\uffff\U0010ffff"


def fail(message: str) -> None:
    print(f"check_bounds: {message}", file=sys.stderr)
    sys.exit(1)


def values(count: int, seed: int):
    """The JSON values, seeded: mostly `m`, the long string first, a sprinkle of odd ones."""
    rng = random.Random(seed)
    for i in range(count):
        if i == 0:
            s = LONG
        elif rng.random() < 0.002:
            length = rng.choice([0, 1, 15, 16, 17, 63, 64, 65, 100, 300, rng.randrange(301)])
            s = "".join(rng.choice(ALPHABET) for _ in range(length))
        else:
            s = "m"
        value = {"s": s, "n": rng.randrange(-(1 << 40), 1 << 40) if rng.random() < 0.01 else i,
                 "f": rng.uniform(-1e6, 1e6)}
        yield json.dumps(value, ensure_ascii=False).encode()


def write(out: str, records: int, segments: int, seed: int) -> None:
    import kfs_writer as kw

    partition = os.path.join(out, "default", "bounds", "0")
    os.makedirs(partition, exist_ok=True)
    per_segment = -(-records // segments)
    stream = values(records, seed)
    offset = 0
    while offset < records:
        base = offset
        end = min(records, base + per_segment)
        batches = []
        while offset < end:
            size = min(PER_BATCH, end - offset)
            recs = [kw.Record(i, i, None, next(stream)) for i in range(size)]
            batches.append(kw.Batch(offset, CREATED_MS + offset, recs).encode())
            offset += size
        stem = os.path.join(partition, f"segment-{base:020}")
        with open(stem + ".kfs", "wb") as f:
            f.write(kw.build_segment(batches, CREATED_MS))
        with open(stem + ".index", "wb") as f:
            f.write(kw.build_index(batches))
    print(json.dumps({"records": records, "segments": segments}))


def file_bounds(table) -> list[dict]:
    """Each data file's path with its decoded lower and upper bounds by column name."""
    files = table.inspect.files().to_pylist()
    out = []
    for entry in files:
        metrics = entry.get("readable_metrics") or {}
        out.append({
            "path": entry["file_path"],
            "bounds": {name: (m.get("lower_bound"), m.get("upper_bound"))
                       for name, m in metrics.items() if m is not None},
        })
    return out


def check_files(table, columns: list[str]) -> int:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    checked = 0
    for entry in file_bounds(table):
        path = entry["path"].removeprefix("file://")
        data = pq.read_table(path, columns=columns)
        for name in columns:
            lower, upper = entry["bounds"].get(name, (None, None))
            column = data.column(name)
            if column.null_count == len(column):
                continue
            low, high = pc.min(column).as_py(), pc.max(column).as_py()
            if lower is None or upper is None:
                fail(f"{path}: column {name} holds values but has no bounds")
            if not (lower <= low and high <= upper):
                fail(f"{path}: column {name}: bounds [{lower!r}, {upper!r}] do not hold "
                     f"the file's values [{low!r}, {high!r}]")
            checked += 1
    return checked


def predicates(rows: list[dict], rng: random.Random):
    """(description, pyiceberg expression, SQL condition, SQL args, python test)."""
    from pyiceberg.expressions import EqualTo, GreaterThan, GreaterThanOrEqual, LessThan

    strings = sorted({r["s"] for r in rows if r["s"] is not None})
    numbers = [r["n"] for r in rows if r["n"] is not None]
    picks = [LONG, "m", strings[0], strings[-1]] + rng.sample(strings, min(20, len(strings)))
    out = []
    for s in picks:
        out.append((f"s = {s[:20]!r}", EqualTo("s", s), "s = ?", [s], lambda r, s=s: r["s"] == s))
    for s in ["b", "m", "n", LONG, strings[-1]]:
        out.append((f"s < {s[:20]!r}", LessThan("s", s), "s < ?", [s],
                    lambda r, s=s: r["s"] is not None and r["s"] < s))
        out.append((f"s >= {s[:20]!r}", GreaterThanOrEqual("s", s), "s >= ?", [s],
                    lambda r, s=s: r["s"] is not None and r["s"] >= s))
    for n in [min(numbers), max(numbers)] + rng.sample(numbers, min(10, len(numbers))):
        out.append((f"n = {n}", EqualTo("n", n), "n = ?", [n], lambda r, n=n: r["n"] == n))
        out.append((f"n > {n}", GreaterThan("n", n), "n > ?", [n],
                    lambda r, n=n: r["n"] is not None and r["n"] > n))
    return out


def check(warehouse: str, name: str, seed: int, no_duckdb: bool) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    from verify_tables import open_duckdb

    catalog = SqlCatalog("local", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")
    table = catalog.load_table(name)
    rows = table.scan(selected_fields=("s", "n")).to_arrow().to_pylist()
    if not rows:
        fail(f"{name} holds no rows")
    checked_files = check_files(table, ["s", "n", "f"])
    con = None if no_duckdb else open_duckdb()
    rng = random.Random(seed)
    tried = 0
    for what, expression, sql, args, keep in predicates(rows, rng):
        want = sum(1 for r in rows if keep(r))
        got = len(table.scan(row_filter=expression, selected_fields=("s",)).to_arrow())
        if got != want:
            fail(f"pyiceberg: {what}: {got} rows, a full scan's filter keeps {want}")
        if con is not None:
            found = con.execute(f"SELECT count(*) FROM iceberg_scan(?) WHERE {sql}",
                                [table.metadata_location, *args]).fetchone()[0]
            if found != want:
                fail(f"DuckDB: {what}: {found} rows, a full scan's filter keeps {want}")
        tried += 1
    print(json.dumps({"rows": len(rows), "data_files": len(file_bounds(table)),
                      "column_bounds_checked": checked_files, "predicates": tried,
                      "duckdb": con is not None}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("--out", required=True)
    w.add_argument("--records", type=int, default=7000)
    w.add_argument("--segments", type=int, default=2)
    w.add_argument("--seed", type=int, default=7)
    c = sub.add_parser("check")
    c.add_argument("--warehouse", required=True)
    c.add_argument("--table", default="kafscale.bounds")
    c.add_argument("--seed", type=int, default=7)
    c.add_argument("--no-duckdb", action="store_true")
    args = parser.parse_args()
    if args.command == "write":
        write(args.out, args.records, args.segments, args.seed)
    else:
        check(args.warehouse, args.table, args.seed, args.no_duckdb)


if __name__ == "__main__":
    main()
