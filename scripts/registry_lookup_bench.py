#!/usr/bin/env python3
"""Registry lookups of a hostile segment (issue 36, finding 7): one segment of 5,000
six-byte Confluent-framed Avro values, each naming another schema id, converted by
`kfs-iceberg run --value-format registry` against a slow registry
(`scripts/registry_stub.py`, started here on 127.0.0.1 with --latency-ms per request).

Prints, per registry mode (`found`: every id answers a schema; `missing`: every id
answers 404), the wall time of the run, the requests the registry served and the most
served at once, and the rows and dead letters the tables hold (read with pyiceberg),
against the reference: before the lookup budget, the same segment made 5,000
sequential requests and took 69 s at 14 ms each.

    python3 scripts/registry_lookup_bench.py [--binary target/debug/kfs-iceberg] [--ids 5000] [--latency-ms 14]

The end-to-end test of `kfs-iceberg dead-letters replay` (tests/replay_cli.rs) writes
its segment and counts its tables with the same code:

    python3 scripts/registry_lookup_bench.py --write-segment SRC --ids 5
    python3 scripts/registry_lookup_bench.py --count WH

The segment is written by the independent Python writer (tests/independent/kfs_writer.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "independent"))

import kfs_writer as kw  # noqa: E402

REFERENCE_SECONDS = 69.0
REFERENCE_REQUESTS = 5000


def zigzag_long(n: int) -> bytes:
    return kw.uvarint(kw.zigzag(n))


def write_segment(source: Path, ids: int) -> None:
    partition = source / "default" / "orders" / "0"
    partition.mkdir(parents=True)
    records = [kw.Record(i, 0, None, b"\x00" + (1000 + i).to_bytes(4, "big") + zigzag_long(i))
               for i in range(ids)]
    batches = [kw.Batch(base, 1_700_000_000_000, [kw.Record(r.offset_delta - base, 0, r.key, r.value)
                                                  for r in records[base:base + 500]]).encode()
               for base in range(0, ids, 500)]
    stem = partition / f"segment-{0:020}"
    stem.with_suffix(".kfs").write_bytes(kw.build_segment(batches, 1_700_000_000_000))
    stem.with_suffix(".index").write_bytes(kw.build_index(batches))


def counts(warehouse: Path) -> tuple[int, int]:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("local", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")
    found = []
    for name in ("kafscale.orders", "kafscale.orders__dlq"):
        try:
            found.append(len(catalog.load_table(name).scan(selected_fields=("offset",)).to_arrow()))
        except Exception:  # noqa: BLE001 (a table the run did not create holds nothing)
            found.append(0)
    return found[0], found[1]


def measure(binary: Path, mode: str, ids: int, latency_ms: float, work: Path) -> dict:
    port_file = work / f"{mode}.port"
    stub = subprocess.Popen([sys.executable, str(REPO / "scripts" / "registry_stub.py"),
                             "--port-file", str(port_file), "--latency-ms", str(latency_ms),
                             "--mode", mode])
    try:
        for _ in range(200):
            if port_file.exists():
                break
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        source, warehouse = work / f"{mode}-source", work / f"{mode}-warehouse"
        write_segment(source, ids)
        started = time.perf_counter()
        run = subprocess.run([str(binary), "run", "--quiet", "--value-format", "registry",
                              "--schema-registry-url", url, "--source", str(source),
                              "--warehouse", str(warehouse)], capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if run.returncode != 0:
            sys.exit(f"run failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
        with urllib.request.urlopen(f"{url}/stats") as answer:
            stats = json.load(answer)
    finally:
        stub.terminate()
        stub.wait()
    rows, dead = counts(warehouse)
    return {"mode": mode, "ids": ids, "latency_ms": latency_ms, "seconds": round(seconds, 2),
            "requests": stats["requests"], "most_at_once": stats["most"],
            "rows": rows, "dead_letters": dead,
            "time_ratio_vs_reference": round(seconds / REFERENCE_SECONDS, 3),
            "request_ratio_vs_reference": round(stats["requests"] / REFERENCE_REQUESTS, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", type=Path, default=REPO / "target" / "debug" / "kfs-iceberg")
    parser.add_argument("--ids", type=int, default=5000)
    parser.add_argument("--latency-ms", type=float, default=14.0)
    parser.add_argument("--modes", default="found,missing")
    parser.add_argument("--write-segment", type=Path, help="only write the segment under this source folder")
    parser.add_argument("--count", type=Path, help="only print the rows and dead letters of this warehouse")
    args = parser.parse_args()
    if args.write_segment:
        write_segment(args.write_segment, args.ids)
        return
    if args.count:
        rows, dead = counts(args.count)
        print(json.dumps({"rows": rows, "dead_letters": dead}))
        return
    if not args.binary.exists():
        sys.exit(f"{args.binary} is missing: cargo build -p kfs-iceberg (or pass --binary)")
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            result = measure(args.binary, mode, args.ids, args.latency_ms, Path(tmp))
            if result["rows"] + result["dead_letters"] != args.ids:
                sys.exit(f"offsets lost: {result}")
            print(json.dumps(result))


if __name__ == "__main__":
    main()
