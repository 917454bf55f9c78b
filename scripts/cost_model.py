#!/usr/bin/env python3
"""Cost model: what kfs-iceberg costs per GiB ingested, on AWS, from counted requests.

Requests come from moto's own request recorder in two tests (three scenarios), which save
what they counted under `target/request-counts/`:

    cargo test -p kfs-converter --test integration -- servers::batch_requests
    cargo test -p kfs-committer --test integration -- servers::sweep_requests

- `converter-events`: one SQS batch announcing 1,000 KB-sized segments (both files of
  each, as S3 sends them), converted by the converter's handler;
- `committer-sweep`: a committer tick that finds 400 segments by listing alone,
  converts them in runs and commits them;
- `committer-commit`: a tick that commits 400 segments the converter converted.

CPU per segment is measured here (`--measure-cpu BINARY` runs `kfs-iceberg gen` and
`kfs-iceberg run` over 20,000 segments of 2 records and reads the CPU time the run
used), or taken from `--segment-cpu-ms`; CPU per byte comes from the converter's
throughput (`--throughput`, MiB/s per vCPU, from `scripts/macro_bench.py`). The wait
on S3 (`--latency-ms` per request, `--read-ahead` requests in flight) is an
assumption. Prices are AWS's published us-east-1 list prices (PRICES); free tiers are
ignored.

Three ways in are priced: **events** (S3 → EventBridge → SQS → converter, then the
committer's commit once a minute), **wakeups** (the same, and each converter
invocation wakes the committer through the FIFO wake-up queue, the template's
`CommitterWakeups=on`: a commit per converter invocation and table instead of one a
minute, at most one per table and `--min-interval`, the wake-ups that come sooner held
in the queue at one light committer invocation each; the converter's batching window
shorter) and **sweep** (no
events: the committer lists the bucket and converts what it finds, the template's
`SegmentEvents=off`). A commit tick's own time is an assumption (`--commit-seconds`). Segments of 1 MiB or
less convert in runs (one Parquet file and one ledger entry for up to 1,000 segments
or 64 MiB); larger ones one at a time, each its own file, which the committer then
coalesces (one more GET and a share of a PUT per segment, from the code, not counted).

A mirror (`TableMode=upsert`) is priced on top, per million changes, from the CPU
ratio `scripts/upsert_bench.py` measures and the requests of each commit's key index
(its look-up and its new version) and delete file.

    python3 scripts/cost_model.py --measure-cpu target/cli/kfs-iceberg
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIB = 1 << 30
MIB = 1 << 20
KIB = 1 << 10
ROOT = Path(__file__).resolve().parent.parent
COUNTS = ROOT / "target" / "request-counts"

# us-east-1 list prices, November 2026.
PRICES = {
    "lambda_gb_second_arm64": 0.0000133334,  # aws.amazon.com/lambda/pricing
    "lambda_request": 0.20 / 1e6,
    "dynamodb_write_unit": 0.625 / 1e6,  # on-demand, after the Nov 2024 reduction
    "dynamodb_read_unit": 0.125 / 1e6,
    "s3_put": 0.005 / 1000,  # PUT, COPY, POST, LIST
    "s3_get": 0.0004 / 1000,  # GET, HEAD
    "sqs_request": 0.40 / 1e6,
    "sqs_fifo_request": 0.50 / 1e6,
    "glue_request": 1.00 / 1e6,  # Data Catalog requests past the free million
    "firehose_iceberg_gib": 0.075,  # Amazon Data Firehose, Apache Iceberg destination
}

DYNAMODB_WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")
S3_CHEAP = ("GET", "HEAD")
S3_WRITES = ("PUT", "POST", "DELETE")  # LISTs are the tick's (see per_tick)
RUN_SEGMENTS, RUN_BYTES, RUN_SEGMENT_BYTES = 1000, 64 * MIB, 1 * MIB
SQS_PER_MESSAGE = 1 + 2 / 10  # sent by EventBridge; received and deleted in tens
# Wake-ups: one SendMessageBatch per converter invocation (one table); then, per
# committer invocation, one receive and one delete (or, for a held batch, one
# ChangeMessageVisibilityBatch) by the committer and its event source mapping.
FIFO_PER_COMMITTER_INVOCATION = 2
# A held wake-up's invocation: it reads the table's last commit (one Glue request) and
# holds the messages; its time is an assumption.
HOLD_SECONDS = 0.1
SIZES = (("1 KiB", KIB), ("16 KiB", 16 * KIB), ("64 KiB", 64 * KIB), ("1 MiB", MIB),
         ("4 MiB", 4 * MIB))


def load(name: str) -> dict:
    path = COUNTS / f"{name}.json"
    if not path.exists():
        sys.exit(f"{path} is missing: run the tests named in this script's help first")
    return json.loads(path.read_text())


def ops(document: dict, service: str, names: tuple[str, ...] | None = None) -> int:
    counted = document["requests"].get(service, {})
    return sum(n for op, n in counted.items() if names is None or op in names)


def rates(document: dict, tick: dict | None = None) -> dict[str, float]:
    """What one recorded workload did: reads per segment (they follow segments), and
    writes per run (they follow files and ledger entries), less what a commit tick
    does on its own (`tick`, counted by itself) when the workload includes one."""
    segments = document["segments"]
    runs = document.get("runs", document.get("partitions", 1))

    def count(service: str, names: tuple[str, ...] | None = None) -> float:
        own = ops(document, service, names)
        return max(0, own - (ops(tick, service, names) if tick else 0))

    s3_writes = count("s3", S3_WRITES)
    dynamodb_writes = count("dynamodb", DYNAMODB_WRITES)
    return {
        "s3_get_per_segment": count("s3", S3_CHEAP) / segments,
        "s3_put_per_run": s3_writes / runs,
        "dynamodb_write_per_run": dynamodb_writes / runs,
        "dynamodb_read_per_segment": (count("dynamodb") - dynamodb_writes) / segments,
        "glue_per_run": count("glue") / runs,
        "sqs_messages_per_segment": document.get("sqs_messages", 0) / segments,
    }


def per_tick(document: dict) -> dict[str, float]:
    """What a commit tick of one table does whatever it commits (list, plan, write the
    snapshot's metadata, swap the catalog's pointer), and its writes per run (marks)."""
    runs = document.get("partitions", 1)
    dynamodb_writes = ops(document, "dynamodb", DYNAMODB_WRITES)
    return {
        "s3_get": ops(document, "s3", S3_CHEAP),
        "s3_put": ops(document, "s3") - ops(document, "s3", S3_CHEAP),  # with its LISTs
        "dynamodb_read": ops(document, "dynamodb") - dynamodb_writes,
        "dynamodb_write_per_run": dynamodb_writes / runs,
        "glue": ops(document, "glue"),
    }


def measure_cpu(binary: str, segments_per_partition: int = 5000) -> float:
    """CPU milliseconds per segment of `kfs-iceberg run` over 4 × N segments of 2
    records, on local files (the fixed cost per segment: decoding, runs, ledger)."""
    with tempfile.TemporaryDirectory() as work:
        source, warehouse = os.path.join(work, "src"), os.path.join(work, "wh")
        subprocess.run([binary, "gen", "--out", source, "--topics", "1", "--partitions", "4",
                        "--segments", str(segments_per_partition), "--records", "2",
                        "--codec", "none"], check=True, stdout=subprocess.DEVNULL)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        subprocess.run([binary, "run", "--source", source, "--warehouse", warehouse, "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    segments = 4 * segments_per_partition
    print(f"measured: {binary} run over {segments:,} segments of 2 records: {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU, {cpu / segments * 1000:.3f} ms CPU per segment\n")
    return cpu / segments * 1000


def cost_per_gib(size: int, path: str, counted: dict[str, dict[str, float]], args) -> dict:
    segments = GIB / size
    in_runs = size <= RUN_SEGMENT_BYTES
    per_run_segments = min(RUN_SEGMENTS, max(1, RUN_BYTES // size)) if in_runs else 1
    runs = segments / per_run_segments
    tick = counted["tick"]
    convert = counted["committer-sweep" if path == "sweep" else "converter-events"]
    # What the converter's invocations are: SQS batches of segment events, as many
    # messages as the batching window gathers at the table's rate, at most a batch.
    seconds = (GIB / MIB) / args.rate  # to take in a GiB
    messages = segments * convert["sqs_messages_per_segment"]
    window = args.wakeup_window if path == "wakeups" else args.batching_window
    per_invocation = max(1.0, min(args.batch_size, messages / seconds * window))
    invocations = messages / per_invocation
    # One commit tick per table per schedule period (a minute) carries what came in; with
    # wake-ups, one per converter invocation, at most one per minimum interval (the
    # wake-ups that come sooner are held, at one light invocation each, and then share
    # the next commit).
    if path == "wakeups":
        ticks = min(invocations, seconds / args.min_interval) if args.min_interval else invocations
        holds = min(invocations - ticks, ticks)
    else:
        ticks, holds = seconds / 60, 0
    s3_gets = segments * convert["s3_get_per_segment"] + ticks * tick["s3_get"]
    s3_puts = runs * convert["s3_put_per_run"] + ticks * tick["s3_put"]
    # DynamoDB bills a write by the kilobyte of the item: a run's item is written twice
    # at its full size (recorded, then marked committed); the other writes (attempt
    # markers) are small.
    item_units = -(-(counted["item"]["fixed"] + counted["item"]["per_member"]
                     * (per_run_segments - 1)) // 1024)
    writes = runs * (convert["dynamodb_write_per_run"] + tick["dynamodb_write_per_run"]
                     + 2 * (item_units - 1))
    reads = segments * convert["dynamodb_read_per_segment"] + ticks * tick["dynamodb_read"]
    glue = runs * convert["glue_per_run"] + ticks * tick["glue"] + holds
    if not in_runs:
        # Each larger segment is its own file: coalesced by the committer into files
        # near the target size (read once more, written as a share of a merged file).
        s3_gets += segments
        s3_puts += segments * size / (512 * MIB)
    # Lambda: CPU per segment and per byte, plus the wait on reads in flight.
    # (Converting on one core: a vCPU per 1,769 MB, up to one.)
    memory_mb = args.committer_memory_mb if path == "sweep" else args.converter_memory_mb
    vcpu = min(memory_mb / 1769, 1.0)
    compute = (segments * args.segment_cpu_ms / 1000 + (GIB / MIB) / args.throughput) / vcpu
    wait = s3_gets * args.latency_ms / 1000 / args.read_ahead
    commits = ((ticks * args.commit_seconds + holds * HOLD_SECONDS)
               * args.committer_memory_mb / 1024)
    gb_seconds = (compute + wait) * memory_mb / 1024 + commits
    fifo = (invocations + (ticks + holds) * FIFO_PER_COMMITTER_INVOCATION
            if path == "wakeups" else 0)
    lambda_invocations = invocations + ticks + holds
    costs = {
        "Lambda": gb_seconds * PRICES["lambda_gb_second_arm64"]
        + lambda_invocations * PRICES["lambda_request"],
        "S3": s3_gets * PRICES["s3_get"] + s3_puts * PRICES["s3_put"],
        "DynamoDB": writes * PRICES["dynamodb_write_unit"] + reads * PRICES["dynamodb_read_unit"],
        "SQS": messages * SQS_PER_MESSAGE * PRICES["sqs_request"]
        + fifo * PRICES["sqs_fifo_request"],
        "Glue": glue * PRICES["glue_request"],
    }
    costs["total"] = sum(costs.values())
    costs["requests"] = (s3_gets + s3_puts + writes + reads + glue + lambda_invocations
                         + messages * SQS_PER_MESSAGE + fifo)
    costs["gb_seconds"] = gb_seconds
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure-cpu", metavar="BINARY",
                        help="measure CPU per segment with this kfs-iceberg (release build)")
    parser.add_argument("--segment-cpu-ms", type=float, default=0.2,
                        help="CPU ms per segment when not measured (default 0.2, measured "
                             "on 2 cores in December 2026)")
    parser.add_argument("--throughput", type=float, default=114,
                        help="converter MiB/s of payload per vCPU (scripts/macro_bench.py)")
    parser.add_argument("--latency-ms", type=float, default=20,
                        help="assumed S3 GET latency (default 20)")
    parser.add_argument("--read-ahead", type=int, default=64,
                        help="segment reads in flight per function (default 64, the most a "
                             "run reads ahead: RUN_READ_AHEAD_MAX)")
    parser.add_argument("--converter-memory-mb", type=int, default=1024,
                        help="the converter's memory (the template's, 1024)")
    parser.add_argument("--committer-memory-mb", type=int, default=2048,
                        help="the committer's memory, which converts on the sweep "
                             "(the template's, 2048)")
    parser.add_argument("--rate", type=float, default=10,
                        help="MiB/s a table takes in, for the share of each minute's commit "
                             "(default 10)")
    parser.add_argument("--batch-size", type=int, default=100,
                        help="SQS messages per converter invocation (the template's)")
    parser.add_argument("--batching-window", type=float, default=20,
                        help="the converter's SQS batching window, seconds (the template's "
                             "20 without wake-ups)")
    parser.add_argument("--wakeup-window", type=float, default=1,
                        help="the converter's batching window with wake-ups on (the "
                             "template's 1 s)")
    parser.add_argument("--min-interval", type=float, default=5,
                        help="least seconds between two commits of a table with wake-ups "
                             "(the template's CommitterWakeupMinInterval, 5; 0: none)")
    parser.add_argument("--commit-seconds", type=float, default=1.0,
                        help="assumed committer time of one commit tick of one table "
                             "(default 1.0 s)")
    parser.add_argument("--upsert-changes-per-cpu-second", type=float, default=90_413,
                        help="a mirror's changes per CPU-second (scripts/upsert_bench.py, "
                             "December 2026, with the key index: 90,413)")
    parser.add_argument("--append-changes-per-cpu-second", type=float, default=152_329,
                        help="the same run's change log (152,329)")
    parser.add_argument("--changes-per-commit", type=float, default=10_000,
                        help="changes a mirror's commit takes (default 10,000)")
    args = parser.parse_args()

    tick = load("committer-commit")
    events = load("converter-events")
    counted = {
        # A run's ledger item: its data file descriptions, its members (as stored),
        # and some 300 bytes of other attributes.
        "item": {
            "fixed": events["run_data_files_bytes"] + 300,
            "per_member": (events["run_item_bytes"] - events["run_data_files_bytes"])
            / max(1, events["run_members"]),
        },
        "converter-events": rates(events),
        # The sweep's tick also commits: its per-run figures leave the commit out.
        "committer-sweep": rates(load("committer-sweep"), tick),
        "tick": per_tick(tick),
    }
    if args.measure_cpu:
        args.segment_cpu_ms = measure_cpu(args.measure_cpu)
    sweep = counted["committer-sweep"]
    print(f"Counted (moto's recorder, per segment of a run of 1,000): converter from events "
          f"{counted['converter-events']['s3_get_per_segment']:.3f} S3 reads, "
          f"{counted['converter-events']['sqs_messages_per_segment']:.0f} SQS messages; sweep "
          f"{sweep['s3_get_per_segment']:.3f} S3 reads, {sweep['s3_put_per_run']:.1f} S3 writes "
          f"and {sweep['dynamodb_write_per_run']:.1f} DynamoDB writes per run of a partition; "
          f"a commit tick {counted['tick']['s3_get'] + counted['tick']['s3_put']:.0f} S3, "
          f"{counted['tick']['glue']:.0f} Glue requests; a run's ledger item "
          f"{counted['item']['fixed']:.0f} bytes and {counted['item']['per_member']:.0f} a member.")
    print(f"CPU {args.segment_cpu_ms:.3f} ms per segment plus {args.throughput:.0f} MiB/s per "
          f"vCPU; converter {args.converter_memory_mb} MB, committer "
          f"{args.committer_memory_mb} MB; {args.latency_ms:.0f} ms per S3 read, "
          f"{args.read_ahead} in flight; a commit a minute at {args.rate:g} MiB/s (with "
          f"wake-ups, one per converter invocation, at most one per "
          f"{args.min_interval:g} s), {args.commit_seconds:g} s each; batching windows "
          f"{args.batching_window:g} s, {args.wakeup_window:g} s with wake-ups.\n")
    print("| segment size | way in | requests (DynamoDB write units) per GiB | GB-s per GiB | Lambda | S3 | DynamoDB | "
          "SQS | Glue | **total per GiB** |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, size in SIZES:
        for path in ("events", "wakeups", "sweep"):
            c = cost_per_gib(size, path, counted, args)
            print(f"| {label} | {path} | {c['requests']:,.0f} | {c['gb_seconds']:.1f} | "
                  f"${c['Lambda']:.5f} | ${c['S3']:.5f} | ${c['DynamoDB']:.5f} | "
                  f"${c['SQS']:.5f} | ${c['Glue']:.5f} | **${c['total']:.5f}** |")
    print(f"| Amazon Data Firehose to Iceberg (list price) | | | | | | | | | "
          f"**${PRICES['firehose_iceberg_gib']:.4f}** |")
    print_upsert(args)


def print_upsert(args) -> None:
    """What a mirror (`TableMode=upsert`) adds per million changes: the committer's CPU
    beyond the log's (measured by `scripts/upsert_bench.py`: changes per CPU-second of
    the whole run, both modes, the key index's look-up and rewrite included), and per
    commit the key index's requests (a HEAD and a GET to read it, a PUT of the new
    one) and the delete file's PUT. A commit after another engine's snapshot reads the
    table's live files once instead of the index (not counted)."""
    extra_cpu = 1e6 / args.upsert_changes_per_cpu_second - 1e6 / args.append_changes_per_cpu_second
    vcpu = min(args.committer_memory_mb / 1769, 1.0)
    compute = extra_cpu / vcpu * args.committer_memory_mb / 1024 * PRICES["lambda_gb_second_arm64"]
    commits = 1e6 / args.changes_per_commit
    requests = commits * (2 * PRICES["s3_get"] + 2 * PRICES["s3_put"])
    print(f"\nA mirror (TableMode=upsert), per million changes at {args.changes_per_commit:,.0f} "
          f"changes a commit ({args.upsert_changes_per_cpu_second:,.0f} against "
          f"{args.append_changes_per_cpu_second:,.0f} changes per CPU-second, "
          f"scripts/upsert_bench.py): {extra_cpu:.1f} CPU-seconds more, "
          f"${compute:.5f} of committer compute and ${requests:.5f} of S3 requests "
          f"(the key index read and written, a delete file): "
          f"**${compute + requests:.5f}** beyond the change log's cost.")

if __name__ == "__main__":
    main()
