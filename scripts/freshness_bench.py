#!/usr/bin/env python3
"""Upload-to-visible latency of `kfs-iceberg run --follow` on one machine.

A producer uploads segments (written beforehand by `kfs-iceberg gen`) into a source
folder at a steady rate, round robin over the partitions, each segment's index before
its data and each object whole under its final name (as S3 shows an upload), while
`run --follow` runs on the folder. After `--minutes`, the producer stops, the follow
mode is given time to commit what arrived and is stopped with SIGTERM.

Latency of a segment: from the moment both of its objects are present to the commit
time of the first snapshot whose `kfs.offsets` summary moves its partition past the
segment's last offset (read afterwards from the table's snapshots with pyiceberg).
Prints p50, p95, p99 and max, commits per minute, the table's snapshots, manifests and
data files at the end, and the bytes compaction rewrote beside those appended (write
amplification: both over the appended), as one JSON object.

    scripts/freshness_bench.py --bin target/quick/kfs-iceberg --minutes 5 --partitions 8 \\
        --rate 4 --interval 1s

Needs pyiceberg (tests/requirements.txt; scripts/python-env.sh makes the environment).
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def percentile(values, q):
    ordered = sorted(values)
    if not ordered:
        return None
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def segments_by_partition(staging):
    """{partition dir: [(base offset, .kfs path, .index path)]} in offset order."""
    found = {}
    for root, _dirs, files in os.walk(staging):
        for name in files:
            m = re.fullmatch(r"segment-(\d+)\.kfs", name)
            if m:
                found.setdefault(root, []).append(
                    (int(m.group(1)), os.path.join(root, name), os.path.join(root, name[:-4] + ".index"))
                )
    return {k: sorted(v) for k, v in sorted(found.items())}


def last_offset(kfs):
    """The segment's last offset, from its footer (crc u32, last offset i64, `END!`)."""
    with open(kfs, "rb") as f:
        f.seek(-16, os.SEEK_END)
        footer = f.read(16)
    if footer[12:] != b"END!":
        raise SystemExit(f"{kfs}: no segment footer")
    return int.from_bytes(footer[4:12], "big", signed=True)


def upload(path, staging, source):
    target = os.path.join(source, os.path.relpath(path, staging))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    partial = target + ".part"
    shutil.copyfile(path, partial)
    os.rename(partial, target)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default="target/debug/kfs-iceberg")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rate", type=float, default=4.0, help="segments uploaded per second, over all partitions")
    parser.add_argument("--records", type=int, default=200, help="records per segment")
    parser.add_argument("--interval", default="1s", help="run --follow --interval")
    parser.add_argument("--compact-interval", help="run --follow --compact-interval (default: the command's)")
    parser.add_argument("--drain-seconds", type=float, default=60.0)
    parser.add_argument("--keep", help="work in this folder and keep it (default: a temporary one)")
    args = parser.parse_args()

    work = args.keep or tempfile.mkdtemp(prefix="kfs-freshness-")
    staging, source, warehouse = (os.path.join(work, d) for d in ("staging", "source", "warehouse"))
    for d in (source, warehouse):
        os.makedirs(d, exist_ok=True)
    per_partition = int(args.minutes * 60 * args.rate / args.partitions) + 1
    subprocess.run(
        [args.bin, "gen", "--out", staging, "--topics", "1", "--partitions", str(args.partitions),
         "--segments", str(per_partition), "--records", str(args.records), "--codec", "none"],
        check=True, stdout=subprocess.DEVNULL,
    )
    partitions = segments_by_partition(staging)
    command = [args.bin, "run", "--follow", "--interval", args.interval, "--quiet",
               "--source", source, "--warehouse", warehouse]
    if args.compact_interval:
        command += ["--compact-interval", args.compact_interval]
    log = open(os.path.join(work, "follow.log"), "w")
    follow = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    uploaded = []  # (partition number, last offset, time both objects were present)
    start = time.time()
    step = 1.0 / args.rate
    queues = {d: list(s) for d, s in partitions.items()}
    n = 0
    while time.time() - start < args.minutes * 60:
        for d, queue in queues.items():
            if not queue:
                continue
            base, kfs, index = queue.pop(0)
            upload(index, staging, source)
            upload(kfs, staging, source)
            uploaded.append((int(os.path.basename(d)), last_offset(kfs), time.time()))
            n += 1
            wait = start + n * step - time.time()
            if wait > 0:
                time.sleep(wait)
            if time.time() - start >= args.minutes * 60:
                break
    produced = time.time() - start

    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("local", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")

    def table():
        for namespace in catalog.list_namespaces():
            for ident in catalog.list_tables(namespace):
                if not ident[-1].endswith("__dlq"):
                    return catalog.load_table(ident)
        return None

    def visible_offsets(t):
        props = t.metadata.properties if t else {}
        return json.loads(props.get("kfs.progress.offsets", "{}") or "{}")

    deadline = time.time() + args.drain_seconds
    last = max((u for u in uploaded), key=lambda u: u[2], default=None)
    while time.time() < deadline:
        t = table()
        offsets = visible_offsets(t)
        if all(offsets.get(str(p), 0) > off for p, off, _ in uploaded):
            break
        time.sleep(0.5)
    follow.send_signal(signal.SIGTERM)
    code = follow.wait(timeout=120)

    t = table()
    snapshots = sorted(t.metadata.snapshots, key=lambda s: s.timestamp_ms)
    moves = []
    appended = rewritten = 0
    for s in snapshots:
        summary = s.summary.additional_properties if s.summary else {}
        added = int(summary.get("added-files-size", 0) or 0)
        if s.summary and s.summary.operation.value == "replace":
            rewritten += added
        else:
            appended += added
        if "kfs.offsets" in summary:
            moves.append((s.timestamp_ms / 1000.0, {int(k): v for k, v in json.loads(summary["kfs.offsets"]).items()}))
    latencies, missing = [], []
    for p, last, at in uploaded:
        seen = next((ts for ts, offsets in moves if offsets.get(p, 0) > last), None)
        if seen is None:
            missing.append({"partition": p, "last_offset": last, "uploaded_at": at})
        else:
            latencies.append(max(0.0, seen - at))
    current = t.current_snapshot()
    manifests = len(current.manifests(t.io)) if current else 0
    files = len(t.inspect.files()) if current else 0
    result = {
        "command": " ".join(sys.argv),
        "exit_code": code,
        "segments_uploaded": len(uploaded),
        "minutes": round(produced / 60, 2),
        "partitions": args.partitions,
        "rate_per_second": args.rate,
        "interval": args.interval,
        "compact_interval": args.compact_interval or "default (10m)",
        "not_visible": missing,
        "table_offsets": visible_offsets(t),
        "latency_seconds": {
            "p50": percentile(latencies, 50),
            "p95": percentile(latencies, 95),
            "p99": percentile(latencies, 99),
            "max": max(latencies) if latencies else None,
        },
        "commits_per_minute": round(len(moves) / (produced / 60), 1),
        "snapshots": len(snapshots),
        "manifests": manifests,
        "data_files": files,
        "bytes_appended": appended,
        "bytes_rewritten_by_compaction": rewritten,
        "write_amplification": round((appended + rewritten) / appended, 2) if appended else None,
    }
    print(json.dumps(result, indent=2))
    if missing:
        # What held the partitions back: the follow mode's last words and the status.
        log.close()
        with open(os.path.join(work, "follow.log")) as f:
            sys.stderr.write("".join(f.readlines()[-40:]))
        subprocess.run([args.bin, "status", "--warehouse", warehouse], stdout=sys.stderr)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if code == 0 and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
