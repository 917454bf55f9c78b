#!/usr/bin/env bash
# The main job on the embedded default, from a fresh clone: build the CLI, write sample
# segments in the broker's bucket layout, convert and commit them to Iceberg (SQLite
# catalog and ledger in the warehouse), print the status, and read the tables back with
# pyiceberg, an independent reader (installed in target/quickstart-venv when missing).
# Needs a Rust toolchain, a C compiler and Python 3.
#
#   scripts/quickstart.sh [WORKDIR]     (default /tmp/kfs-quickstart)
#
# WORKDIR is replaced when it is a previous quick start's output (it holds only
# `bucket/` and `warehouse/`); any other existing folder is refused, never deleted.
# It builds the `quick` profile without the AWS SDKs (minutes); KFS_OPTIMISED=1 builds
# the optimised `cli` profile instead, and KFS_BIN=path/to/kfs-iceberg uses that binary
# (e.g. KFS_BIN=target/debug/kfs-iceberg after `cargo build`).
set -euo pipefail
# Paths given relative to where the script was started, made absolute before the cd.
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
work=$(absolute "${1:-/tmp/kfs-quickstart}")
kfs_bin=${KFS_BIN:+$(absolute "$KFS_BIN")}
cd "$(dirname "$0")/.."

if [ -n "$kfs_bin" ]; then
    kfs=$kfs_bin
    echo "== using $kfs (KFS_BIN)"
else
    if [ -n "${KFS_OPTIMISED:-}" ]; then
        echo "== build (the cli profile: release optimisation with thin LTO; about 20 minutes on two cores the first time)"
        cargo build --profile cli --locked -p kfs-iceberg
        kfs=$PWD/target/cli/kfs-iceberg
    else
        echo "== build (the quick profile, no AWS SDK: a few minutes the first time; KFS_OPTIMISED=1 builds the optimised cli profile)"
        cargo build --profile quick --locked -p kfs-iceberg --no-default-features
        kfs=$PWD/target/quick/kfs-iceberg
    fi
fi

# A previous quick start's output holds bucket/ and warehouse/ and nothing else.
if [ -e "$work" ]; then
    if [ ! -d "$work" ]; then
        echo "$work is a file, not a quick start's folder: give another WORKDIR" >&2
        exit 1
    fi
    unexpected=$(find "$work" -mindepth 1 -maxdepth 1 ! -name bucket ! -name warehouse | head -n 3)
    if [ -n "$unexpected" ] || [ ! -d "$work/bucket" ]; then
        echo "$work exists and does not look like a quick start's output (bucket/ and warehouse/ only);" >&2
        echo "refusing to delete it: give another WORKDIR, or remove it yourself" >&2
        exit 1
    fi
    echo "== removing the previous quick start's output: $work"
    rm -rf "$work"
fi
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
    python=$PWD/$venv/bin/python
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

wh=$work/warehouse
cat <<EOF

== done. The tables are in the warehouse $wh
   (Iceberg SQL catalog "local" in $wh/catalog.db; data and metadata under $wh/kafscale/).
Try next:
  $kfs status --warehouse $wh
  $python -c "from pyiceberg.catalog.sql import SqlCatalog; t = SqlCatalog('local', uri='sqlite:///$wh/catalog.db', warehouse='file://$wh').load_table('kafscale.orders'); print(t.scan(selected_fields=('topic', 'partition', 'offset', 'key'), limit=5).to_arrow().to_pylist())"
EOF
