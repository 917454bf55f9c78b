#!/usr/bin/env bash
# The main job on the embedded default, from a fresh clone: build the CLI, write sample
# segments in the broker's bucket layout, convert and commit them to Iceberg (SQLite
# catalog and ledger in the warehouse), print the status, and read the tables back with
# pyiceberg, an independent reader (installed in target/quickstart-venv when missing).
# Needs a Rust toolchain, a C compiler and Python 3.
#
#   scripts/quickstart.sh [WORKDIR]     (default /tmp/kfs-quickstart; replaced)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/kfs-quickstart}

echo "== build (the cli profile: release optimisation with thin LTO; several minutes on two cores the first time)"
cargo build --profile cli --locked -p kfs-iceberg
kfs=target/cli/kfs-iceberg

rm -rf "$work"
mkdir -p "$work"
echo "== sample segments: 2 topics x 2 partitions x 3 segments under $work/bucket"
"$kfs" gen --out "$work/bucket"
echo "== run: convert and commit"
"$kfs" run --source "$work/bucket" --warehouse "$work/warehouse"
echo "== run again: nothing is added"
"$kfs" run --source "$work/bucket" --warehouse "$work/warehouse"
echo "== status"
"$kfs" status --warehouse "$work/warehouse"

echo "== query with pyiceberg"
python=python3
if ! python3 -c "import pyiceberg, pyarrow, sqlalchemy" 2>/dev/null; then
    venv=target/quickstart-venv
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv" || {
            echo "python3 -m venv failed: install Python's venv module (Debian: apt-get install python3-venv)" >&2
            exit 1
        }
    fi
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pyiceberg[sql-sqlite,pyarrow]==0.12.0"
    python=$venv/bin/python
fi
"$python" - "$work/warehouse" <<'PY'
import sys
from pyiceberg.catalog.sql import SqlCatalog

wh = sys.argv[1]
catalog = SqlCatalog("local", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
for namespace in catalog.list_namespaces():
    for ident in catalog.list_tables(namespace):
        table = catalog.load_table(ident)
        rows = table.scan().to_arrow()
        offsets = table.current_snapshot().summary["kfs.offsets"]
        print(f"{'.'.join(ident)}: {rows.num_rows} rows, next offset per partition {offsets}")
PY
