#!/usr/bin/env python3
"""How long two independent readers take to plan a full scan of one table of a local
warehouse (the SQLite catalog): pyiceberg (load the table, then `plan_files`: the
manifest list and every manifest) and DuckDB's iceberg extension (`iceberg_metadata`
over the current metadata file: the manifest entries it would scan). The median of
`--runs` runs each, printed on one line with the files each planned.

    python3 tests/python/plan_times.py --warehouse WH --table kafscale.bench

The commit_growth benchmark runs it at its checkpoints (`KFS_BENCH_READERS=on`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify_tables import open_duckdb  # noqa: E402


def median_ms(runs: int, action) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", required=True, help="the folder holding catalog.db")
    parser.add_argument("--catalog-db", help="the catalog's SQLite file (default WH/catalog.db)")
    parser.add_argument("--table", required=True, help="namespace.name")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = Path(args.warehouse).resolve()
    database = Path(args.catalog_db).resolve() if args.catalog_db else warehouse / "catalog.db"
    catalog = SqlCatalog("local", uri=f"sqlite:///{database}", warehouse=f"file://{warehouse}")

    def pyiceberg_plan():
        table = catalog.load_table(args.table)
        return table, len(list(table.scan().plan_files()))

    py_ms, (table, py_files) = median_ms(args.runs, pyiceberg_plan)
    con = open_duckdb()
    location = table.metadata_location
    duck_ms, duck_entries = median_ms(
        args.runs,
        lambda: con.execute("SELECT count(*) FROM iceberg_metadata(?)", [location]).fetchone()[0],
    )
    print(f"pyiceberg planning {py_ms:.1f} ms ({py_files} files), "
          f"DuckDB planning {duck_ms:.1f} ms ({duck_entries} manifest entries)")


if __name__ == "__main__":
    main()
