#!/usr/bin/env python3
"""The upsert mode end to end at scale: a keyed topic of `--records` changes over
`--keys` keys (`kfs-iceberg gen --keys`: inserts, updates, tombstones, keys written
again, records without a key) arrives in `--batches` batches; each batch is run into
an append table (the change log) and into an upsert table (the mirror), both timed.
Then every installed reader (`scripts/readers_matrix.py`) reads the mirror and is
compared with the fold of the log, before and after `kfs-iceberg compact` folds the
deletes.

    python3 scripts/upsert_bench.py --bin target/soak/kfs-iceberg \
        --records 1000000 --keys 100000 --batches 10

With `--value-format json` the mirror's values are typed JSON columns (values that
are no JSON object go to its dead-letter table and out of the fold), and with
`--upsert-key customer` it is keyed by that value field (`gen --keys` values name
their key as `customer`, a keyless record's a key at random from any partition).

Prints: changes per second (wall) and per CPU-second (the CLI's children, so one
core's worth), the mirror's cost against the log's (CPU ratio), its compute per
million changes at Lambda's price for the CPU used, and each reader's result and time
before and after compaction. Figures are ratios against the append run of the same
changes on the same machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Lambda, arm64, per GB-second (us-east-1, 2026); 1,769 MB buys one vCPU.
LAMBDA_GB_SECOND = 0.0000133334
VCPU_GB = 1.769


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str]) -> tuple[float, float]:
    """Runs `command`; returns its wall and CPU seconds."""
    cpu, wall = children_cpu(), time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - wall, children_cpu() - cpu


def copy_batch(all_dir: Path, source: Path, upto: int) -> None:
    """Copies the first `upto` segments of every partition under `all_dir` to `source`."""
    for partition in sorted(p for p in all_dir.glob("*/*/*") if p.is_dir()):
        segments = sorted(partition.glob("*.kfs"))[:upto]
        target = source / partition.relative_to(all_dir)
        target.mkdir(parents=True, exist_ok=True)
        for segment in segments:
            for file in (segment, segment.with_suffix(".index")):
                if not (target / file.name).exists():
                    shutil.copy(file, target / file.name)


def readers(script: Path, log: Path, mirror: Path, label: str, fold_args: list[str]) -> None:
    print(f"\n{label}:\n| reader | result | time |\n|---|---|---|", flush=True)
    subprocess.run(
        [sys.executable, str(script), "--log-warehouse", str(log), "--mirror-warehouse",
         str(mirror), "--table", "kafscale.orders", "--label", label, *fold_args],
        check=False,
    )


def change_log_matches(log: Path, mirror: Path, table: str) -> None:
    """Prints whether the mirror's change log holds every record of the append log but
    the mirror's dead letters, each once (`check_mirror.check_change_log`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))
    from check_mirror import check_change_log, dead_letters, open_table

    try:
        refused = dead_letters(mirror, table)
    except Exception:  # noqa: BLE001 - no dead-letter table: none refused
        refused = frozenset()
    rows = open_table(log, table).scan(selected_fields=("partition", "offset")).to_arrow()
    print("")
    for line in check_change_log(rows, mirror, table, refused):
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, type=Path)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--segments-per-batch", type=int, default=2)
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument(
        "--value-format", default="raw", choices=("raw", "json"),
        help="the mirror's value format (the log stays raw: the reference)",
    )
    parser.add_argument(
        "--upsert-key", help="the mirror's key of value fields (needs --value-format json)"
    )
    parser.add_argument(
        "--change-log", action="store_true",
        help="the mirror keeps its change log (checked against the log: every record once)",
    )
    parser.add_argument(
        "--format-version", choices=("2", "3"), default="2",
        help="the mirror's format version: 3 deletes with deletion vectors",
    )
    args = parser.parse_args()

    work = args.dir or Path(tempfile.mkdtemp(prefix="upsert-bench-"))
    segments = args.batches * args.segments_per_batch
    per_segment = max(1, args.records // (args.partitions * segments))
    all_dir, source = work / "all", work / "source"
    log, mirror = work / "log", work / "mirror"
    binary = str(args.bin.resolve())
    subprocess.run(
        [binary, "gen", "--out", str(all_dir), "--topics", "1", "--partitions",
         str(args.partitions), "--segments", str(segments), "--records", str(per_segment),
         "--keys", str(args.keys), "--codec", "zstd"],
        check=True,
    )
    mirror_args = ["--value-format", args.value_format]
    fold_args = ["--dead-letters"] if args.value_format == "json" else []
    if args.upsert_key:
        mirror_args += ["--upsert-key", args.upsert_key]
        fold_args += ["--key-fields", args.upsert_key]
    if args.change_log:
        mirror_args += ["--change-log"]
    if args.format_version != "2":
        work.mkdir(parents=True, exist_ok=True)
        config = work / "mirror.toml"
        config.write_text(f'[table_properties]\n"format-version" = "{args.format_version}"\n')
        mirror_args += ["--config", str(config)]
    totals = {"append": [0.0, 0.0], "upsert": [0.0, 0.0]}
    for batch in range(1, args.batches + 1):
        copy_batch(all_dir, source, batch * args.segments_per_batch)
        for mode, warehouse in (("append", log), ("upsert", mirror)):
            wall, cpu = timed(
                [binary, "run", "--quiet", "--source", str(source), "--warehouse",
                 str(warehouse), "--table-mode", mode, *(mirror_args if mode == "upsert" else [])]
            )
            totals[mode][0] += wall
            totals[mode][1] += cpu
        print(
            f"batch {batch}: append {totals['append'][0]:.1f} s, upsert {totals['upsert'][0]:.1f} s so far",
            flush=True,
        )
    changes = per_segment * args.partitions * segments
    (append_wall, append_cpu), (upsert_wall, upsert_cpu) = totals["append"], totals["upsert"]
    cost = upsert_cpu / changes * 1e6 * VCPU_GB * LAMBDA_GB_SECOND
    print(
        f"\n{changes} changes over {args.keys} keys in {args.batches} commits, on {os.cpu_count()} cores:\n"
        f"- upsert: {changes / upsert_wall:,.0f} changes/s wall, {changes / upsert_cpu:,.0f} per CPU-second; "
        f"append: {changes / append_wall:,.0f} wall, {changes / append_cpu:,.0f} per CPU-second\n"
        f"- the mirror costs {upsert_cpu / append_cpu:.2f}x the log's CPU ({upsert_wall / append_wall:.2f}x its wall time)\n"
        f"- compute per million changes at Lambda's price for that CPU: ${cost:.4f}"
    )
    if args.change_log:
        change_log_matches(log, mirror, "kafscale.orders")
    script = Path(__file__).resolve().parent / "readers_matrix.py"
    readers(script, log, mirror, "before compaction", fold_args)
    wall, _ = timed([binary, "compact", "--warehouse", str(mirror)])
    print(f"\ncompaction folded the deletes in {wall:.1f} s")
    readers(script, log, mirror, "after compaction", fold_args)
    print(f"\n(work directory: {work})")


if __name__ == "__main__":
    main()
