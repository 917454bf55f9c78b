#!/usr/bin/env python3
"""Macro benchmark: kfs-iceberg's whole converter against pyarrow's Parquet encoder.

One run on one machine, one core each:

* **ours**: `kfs-iceberg run` converts a generated segment into an Iceberg table
  (stream in, CRCs, decompression, decoding, Arrow, Parquet with zstd level 3, the
  ledger and the commit), timed from process start to exit, with its peak RSS.
* **reference**: the same records, already in memory as an Arrow table (read back from
  our own output), written with `pyarrow.parquet.write_table` with the same compression
  and row group size. Only the write is timed.

It prints payload throughput (bytes of keys, values and headers), peak memory, output
sizes, and the ratio reference time ÷ our time (≥ 1.0: our whole converter is at least
as fast as pyarrow's encode step alone): for the best run of each side, and as the
median and range of the runs' pairs (each of ours with the reference run after it).
With `--instructions` it counts instead of timing: the instructions each side executes
(valgrind's callgrind; the same count on a busy host as on an idle one), ours for the
whole conversion, pyarrow's for its encode alone.

    python3 scripts/macro_bench.py [--segment-mib 256] [--codec none] [--runs 3]
    python3 scripts/macro_bench.py --instructions --segment-mib 16   # needs valgrind

Needs a release build (`cargo build --profile cli --locked -p kfs-iceberg`; the script
builds it when missing) and `pip install pyarrow`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20
ROW_GROUP_ROWS = 1 << 20  # shared/kfs-core/src/convert.rs: writer_properties
ZSTD_LEVEL = 3


def run_measured(cmd: list[str], cpu: int | None) -> tuple[float, int, float]:
    """Runs `cmd` (pinned to `cpu`), returning wall seconds, peak RSS in bytes and CPU
    seconds (user and system)."""
    def pin() -> None:
        if cpu is not None and cpu >= 0 and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {cpu})

    started = time.perf_counter()
    process = subprocess.Popen(cmd, preexec_fn=pin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    out = process.stdout.read().decode() if process.stdout else ""
    err = process.stderr.read().decode() if process.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{' '.join(cmd)} failed ({code}):\n{out}\n{err}")
    return elapsed, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


def kfs_binary(build: bool) -> Path:
    binary = REPO / "target" / "cli" / "kfs-iceberg"
    if build or not binary.exists():
        subprocess.run(
            ["cargo", "build", "--profile", "cli", "--locked", "-p", "kfs-iceberg"], cwd=REPO, check=True
        )
    return binary


def generate(binary: Path, out: Path, segment_mib: int, codec: str) -> Path:
    """Writes one segment of about `segment_mib` MiB; returns its path."""
    probe = out / "probe"
    subprocess.run(
        [binary, "gen", "--out", probe, "--topics", "1", "--partitions", "1", "--segments", "1",
         "--records", "20000", "--codec", codec],
        check=True, stdout=subprocess.DEVNULL,
    )
    per_record = sum(p.stat().st_size for p in probe.rglob("*.kfs")) / 20000
    shutil.rmtree(probe)
    records = max(1, int(segment_mib * MIB / per_record))
    source = out / "source"
    subprocess.run(
        [binary, "gen", "--out", source, "--topics", "1", "--partitions", "1", "--segments", "1",
         "--records", str(records), "--codec", codec],
        check=True, stdout=subprocess.DEVNULL,
    )
    return source


REFERENCE = r"""
import json, os, sys, time
import pyarrow as pa, pyarrow.parquet as pq
files, out, rows, level = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mode = sys.argv[5] if len(sys.argv) > 5 else "time"  # "read" and "write": for counting
pa.set_cpu_count(1); pa.set_io_thread_count(1)
table = pa.concat_tables([pq.read_table(f) for f in files])
table = table.combine_chunks()
if mode == "read":
    sys.exit(0)
if mode == "write":
    pq.write_table(table, out, compression="zstd", compression_level=level, row_group_size=rows)
    sys.exit(0)
payload = 0
for name in ("key", "value"):
    payload += sum(len(v) for v in table.column(name).to_pylist() if v is not None)
for headers in table.column("headers").to_pylist():
    for h in headers or []:
        payload += len(h["key"].encode()) + len(h["value"] or b"")
started, cpu = time.perf_counter(), time.process_time()
pq.write_table(table, out, compression="zstd", compression_level=level, row_group_size=rows)
elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
print(json.dumps({"seconds": elapsed, "cpu": cpu, "payload": payload, "rows": table.num_rows,
                  "bytes": os.path.getsize(out)}))
"""


def callgrind(cmd: list[str], out: Path) -> int:
    """Instructions `cmd` executes in user space, all its threads, counted by valgrind's
    callgrind: the same count on any host, however busy."""
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for line in out.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    sys.exit(f"callgrind wrote no instruction total to {out}")


def count_instructions(binary: Path, source: Path, base: Path) -> None:
    """Prints the instructions of our whole conversion and of pyarrow's encode of the
    same table (its read and encode, less its read alone)."""
    warehouse = base / "wh-count"
    ours = callgrind([str(binary), "run", "--source", str(source), "--warehouse", str(warehouse),
                      "--no-coalesce"], base / "ours.callgrind")
    files = ",".join(sorted(str(p) for p in warehouse.rglob("*.parquet")))
    # The interpreter itself, not a wrapper script (pyenv's shims), so that callgrind
    # counts the process that does the work.
    python = [sys.executable, "-c", REFERENCE, files, str(base / "count.parquet"),
              str(ROW_GROUP_ROWS), str(ZSTD_LEVEL)]
    read = callgrind([*python, "read"], base / "read.callgrind")
    read_write = callgrind([*python, "write"], base / "write.callgrind")
    encode = read_write - read
    print(f"instructions (callgrind): ours {ours / 1e6:,.0f} M for the whole conversion, "
          f"pyarrow {encode / 1e6:,.0f} M for the encode ({read_write / 1e6:,.0f} M with its read, "
          f"less {read / 1e6:,.0f} M for the read alone)")
    print(f"instruction ratio (pyarrow encode / our whole conversion): {encode / ours:.2f}x "
          f"(user space only: page faults and system calls are not counted)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segment-mib", type=int, default=256)
    parser.add_argument("--codec", default="none", help="none, gzip, snappy, lz4, zstd, mixed")
    parser.add_argument("--runs", type=int, default=3, help="best of N for each side")
    parser.add_argument("--cpu", type=int, default=0,
                        help="core both sides are pinned to (-1: ours unpinned, on every core)")
    parser.add_argument("--build", action="store_true", help="rebuild the release binary")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions under valgrind instead of timing "
                             "(slow: use --segment-mib 16)")
    args = parser.parse_args()

    binary = kfs_binary(args.build)
    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(prefix="kfs-macro-", dir=shm if shm.is_dir() else None))
    try:
        source = generate(binary, base, args.segment_mib, args.codec)
        segment_bytes = sum(p.stat().st_size for p in source.rglob("*.kfs"))
        if args.instructions:
            print(f"segment: {segment_bytes / MIB:.1f} MiB ({args.codec})")
            count_instructions(binary, source, base)
            return
        # Ours and the reference alternate, run by run, so that a machine whose speed
        # drifts (a shared host) slows both sides alike; the best of each side counts.
        ours: list[tuple[float, int, float]] = []
        reference: list[dict] = []
        our_bytes = 0
        data_files: list[str] = []
        for i in range(args.runs):
            warehouse = base / f"wh{i}"
            ours.append(run_measured(
                [str(binary), "run", "--source", str(source), "--warehouse", str(warehouse),
                 "--no-coalesce"],
                args.cpu,
            ))
            if i == 0:
                data_files = sorted(str(p) for p in warehouse.rglob("*.parquet"))
                our_bytes = sum(os.path.getsize(f) for f in data_files)
            out = base / f"reference{i}.parquet"
            result = subprocess.run(
                [sys.executable, "-c", REFERENCE, ",".join(data_files), str(out),
                 str(ROW_GROUP_ROWS), str(ZSTD_LEVEL)],
                check=True, capture_output=True, text=True,
                preexec_fn=lambda: os.sched_setaffinity(0, {max(args.cpu, 0)}),
            )
            reference.append(json.loads(result.stdout))
            out.unlink()
            if i > 0:
                shutil.rmtree(warehouse, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    payload = reference[0]["payload"]
    our_seconds = min(t for t, _, _ in ours)
    our_peak = max(m for _, m, _ in ours)
    our_cpu = min(c for _, _, c in ours)
    ref_seconds = min(r["seconds"] for r in reference)
    ref_cpu = min(r["cpu"] for r in reference)
    mib = payload / MIB
    print(f"segment: {segment_bytes / MIB:.1f} MiB ({args.codec}), {reference[0]['rows']:,} records, "
          f"{mib:.1f} MiB of record payload; best of {args.runs}, "
          f"{'ours on every core, pyarrow on one' if args.cpu < 0 else 'one core each'}")
    print(f"kfs-iceberg run (whole converter + commit): {our_seconds:.2f} s, "
          f"{mib / our_seconds:.1f} MiB/s, CPU {our_cpu:.2f} s ({mib / our_cpu:.1f} MiB per CPU-second), "
          f"peak RSS {our_peak / MIB:.0f} MiB, Parquet {our_bytes / MIB:.1f} MiB")
    print(f"pyarrow write_table (encode only, table in memory): {ref_seconds:.2f} s, "
          f"{mib / ref_seconds:.1f} MiB/s, CPU {ref_cpu:.2f} s ({mib / ref_cpu:.1f} MiB per CPU-second), "
          f"Parquet {reference[0]['bytes'] / MIB:.1f} MiB")
    print(f"ratio (pyarrow encode time / our whole conversion time): {ref_seconds / our_seconds:.2f}x")
    print(f"CPU efficiency ratio (pyarrow encode CPU / our whole conversion CPU): {ref_cpu / our_cpu:.2f}x")
    # Each run of ours and the reference run right after it form a pair: on a host whose
    # speed drifts, the pairs' ratios (median and range) say more than the best of each.
    wall_pairs = sorted(r["seconds"] / t for (t, _, _), r in zip(ours, reference))
    cpu_pairs = sorted(r["cpu"] / c for (_, _, c), r in zip(ours, reference))
    print(f"paired ratios over {len(wall_pairs)} runs, median (range): "
          f"wall {statistics.median(wall_pairs):.2f}x ({wall_pairs[0]:.2f}-{wall_pairs[-1]:.2f}), "
          f"CPU {statistics.median(cpu_pairs):.2f}x ({cpu_pairs[0]:.2f}-{cpu_pairs[-1]:.2f})")
    print(f"peak memory / segment size: {our_peak / max(segment_bytes, 1):.2f}")


if __name__ == "__main__":
    main()
