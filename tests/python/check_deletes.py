#!/usr/bin/env python3
"""Checks that two independent readers see exactly the expected offsets of one table of
a local warehouse (the SQLite catalog) whose rows were deleted by merge-on-read
position deletes or deletion vectors: pyiceberg (`scan().to_arrow()`, which applies
delete files) and DuckDB's iceberg extension (`iceberg_scan` over the current metadata
file). Daft and ClickHouse (chDB), when installed (`scripts/readers_matrix.py`), are
measured too: their result is printed, not required.

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


def optional_readers(table) -> dict:
    """The offsets Daft and ClickHouse (chDB) read, `None` when not installed, the
    reason when they fail."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from readers_matrix import clickhouse_rows, daft_rows

    found = {}
    for reader, read in (("Daft", daft_rows), ("ClickHouse (chDB)", clickhouse_rows)):
        try:
            found[reader] = Counter(offset for (_, offset) in read(table).elements())
        except ImportError:
            found[reader] = None
        except Exception as error:  # noqa: BLE001 - a reader's failure is a finding
            print(f"{reader} (measured, not required): fails: {str(error).splitlines()[0][:160]}")
    return found


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
    for reader, offsets in optional_readers(table).items():
        result = "not installed" if offsets is None else (
            "the expected rows" if offsets == expected else f"other rows ({sum(offsets.values())})"
        )
        print(f"{reader} (measured, not required): {result}")
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
