#!/usr/bin/env python3
"""Checks that two independent readers see exactly the expected offsets of one table of
a local warehouse (the SQLite catalog) whose rows were deleted by merge-on-read
position deletes: pyiceberg (`scan().to_arrow()`, which applies position-delete files)
and DuckDB's iceberg extension (`iceberg_scan` over the current metadata file).

    python3 tests/python/check_deletes.py --warehouse WH --table kafscale.orders --offsets 1,2,4

Exits non-zero, naming the reader and the difference, when either sees other rows.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify_tables import open_duckdb  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--catalog-db", help="the catalog's SQLite file (default WH/catalog.db)")
    parser.add_argument("--table", required=True, help="namespace.name")
    parser.add_argument("--offsets", required=True, help="comma-separated offsets expected, once each")
    args = parser.parse_args()

    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = Path(args.warehouse).resolve()
    database = Path(args.catalog_db).resolve() if args.catalog_db else warehouse / "catalog.db"
    catalog = SqlCatalog("local", uri=f"sqlite:///{database}", warehouse=f"file://{warehouse}")
    table = catalog.load_table(args.table)
    expected = Counter(int(o) for o in args.offsets.split(",") if o)

    seen = {
        "pyiceberg": Counter(table.scan(selected_fields=("offset",)).to_arrow()["offset"].to_pylist()),
    }
    con = open_duckdb()
    rows = con.execute('SELECT "offset" FROM iceberg_scan(?)', [table.metadata_location]).fetchall()
    seen["DuckDB"] = Counter(row[0] for row in rows)
    failed = False
    for reader, offsets in seen.items():
        if offsets != expected:
            failed = True
            extra = sorted((offsets - expected).elements())
            missing = sorted((expected - offsets).elements())
            print(f"{reader}: {sum(offsets.values())} rows; extra {extra[:10]}, missing {missing[:10]}")
        else:
            print(f"{reader}: the {sum(offsets.values())} expected rows")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
