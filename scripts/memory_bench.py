#!/usr/bin/env python3
"""Memory benchmark: peak RSS of `kfs-iceberg run` converting the inputs that used to
hold a whole batch or segment in memory, against a budget.

* **tombstones**: one segment holding one uncompressed batch of about 255 MiB of
  8-to-10-byte tombstones (null key, null value, no headers): about 27 million records
  in one Kafka batch, into a raw table.
* **json**: one segment of about 1 GiB of JSON object values (1 KiB each, in 1 MiB
  batches), into a JSON table (`--value-format json`): scanned for its columns, then
  converted.

Each runs in a fresh process on the embedded default (local folder in, SQLite catalog
and ledger out), timed from start to exit, its peak RSS read from the kernel
(`wait4`). The segments are written by the independent Python writer
(`tests/independent/kfs_writer.py`), not by the code under test. The script checks
the record count each run reports, and prints the peak against the budget (512 MiB).

    python3 scripts/memory_bench.py [--cases tombstones,json] [--json-mib 1024]

Needs a release build (`cargo build --profile cli --locked -p kfs-iceberg`; built when
missing) and `pip install crc32c` (tests/requirements.txt).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "independent"))
sys.path.insert(0, str(REPO / "scripts"))

import kfs_writer as kw  # noqa: E402
from macro_bench import kfs_binary  # noqa: E402

MIB = 1 << 20
BUDGET = 512 * MIB
CREATED_MS = 1_700_000_000_000


def run_measured(cmd: list[str]) -> tuple[float, int, str]:
    """Runs `cmd`, returning wall seconds, peak RSS in bytes and its output."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - started
        out.seek(0)
        text = out.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({code}):\n{text}")
    return elapsed, usage.ru_maxrss * 1024, text


def write_segment(source: Path, topic: str, batches: list[bytes]) -> Path:
    """Writes `batches` as segment 0 of `topic` partition 0 (with its index)."""
    folder = source / "ns" / topic / "0"
    folder.mkdir(parents=True, exist_ok=True)
    kfs = folder / f"segment-{0:020}.kfs"
    kfs.write_bytes(kw.build_segment(batches, CREATED_MS))
    (folder / f"segment-{0:020}.index").write_bytes(kw.build_index(batches))
    return kfs


def tombstone_batch(target_bytes: int) -> tuple[bytes, int]:
    """One uncompressed batch of tombstones filling about `target_bytes`."""
    parts = []
    size = 0
    count = 0
    # attributes 0, timestampDelta 0, offsetDelta, key null, value null, no headers.
    while size < target_bytes:
        body = b"\x00\x00" + kw.varint(count) + b"\x01\x01\x00"
        framed = kw.varint(len(body)) + body
        parts.append(framed)
        size += len(framed)
        count += 1
    section = b"".join(parts)
    batch = kw.assemble_batch(0, 0, count - 1, CREATED_MS, CREATED_MS, count, section)
    return batch, count


def json_batches(total_bytes: int, batch_bytes: int = MIB) -> tuple[list[bytes], int]:
    """Batches of 1 KiB JSON object values, `batch_bytes` each, about `total_bytes`."""
    filler = "x" * 900
    batches = []
    offset = 0
    size = 0
    while size < total_bytes:
        parts = []
        section_size = 0
        base = offset
        while section_size < batch_bytes:
            value = (
                f'{{"id":{offset},"customer":"c{offset % 9973}","amount":{offset % 1000}.25,'
                f'"tags":["a","b"],"address":{{"city":"Oslo","zip":{offset % 10000}}},'
                f'"note":"{filler}"}}'
            ).encode()
            body = kw.encode_record_fields(offset - base, 0, f"k{offset}".encode(), value)
            framed = kw.frame_record(body)
            parts.append(framed)
            section_size += len(framed)
            offset += 1
        count = offset - base
        batch = kw.assemble_batch(
            base, 0, count - 1, CREATED_MS, CREATED_MS, count, b"".join(parts)
        )
        batches.append(batch)
        size += len(batch)
    return batches, offset


def generate(case: str, source: Path, mib: int) -> int:
    """Writes the segment of `case` under `source`; returns its record count."""
    if case == "tombstones":
        batch, expected = tombstone_batch(mib * MIB)
        write_segment(source, "tombstones", [batch])
    elif case == "json":
        batches, expected = json_batches(mib * MIB)
        write_segment(source, "orders", batches)
    else:
        sys.exit(f"unknown case {case!r}")
    return expected


def records_converted(output: str) -> int:
    match = re.search(r"converted \((\d+) records\)", output)
    return int(match.group(1)) if match else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="tombstones,json")
    parser.add_argument("--tombstone-mib", type=int, default=255)
    parser.add_argument("--json-mib", type=int, default=1024)
    parser.add_argument("--build", action="store_true", help="rebuild the release binary")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--generate", nargs=3, metavar=("CASE", "DIR", "MIB"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        # In a process of its own: a child forked from a parent holding the segment
        # would count the parent's pages in its peak RSS.
        case, folder, mib = args.generate
        print(generate(case, Path(folder), int(mib)))
        return
    binary = kfs_binary(args.build)
    work = Path(tempfile.mkdtemp(prefix="kfs-memory-"))
    failed = False
    try:
        for case in args.cases.split(","):
            source = work / case / "source"
            warehouse = work / case / "warehouse"
            mib = args.tombstone_mib if case == "tombstones" else args.json_mib
            made = subprocess.run(
                [sys.executable, __file__, "--generate", case, str(source), str(mib)],
                check=True, capture_output=True, text=True,
            )
            expected = int(made.stdout.strip())
            kfs = next(source.rglob("*.kfs"))
            extra = ["--value-format", "json"] if case == "json" else []
            seconds, peak, output = run_measured(
                [str(binary), "run", "--source", str(source), "--warehouse", str(warehouse),
                 "--quiet", *extra]
            )
            converted = records_converted(output)
            verdict = "within" if peak <= BUDGET else "OVER"
            failed |= peak > BUDGET or converted != expected
            print(
                f"{case}: segment {kfs.stat().st_size / MIB:.0f} MiB, {expected} records "
                f"({converted} converted), peak RSS {peak / MIB:.0f} MiB ({verdict} the "
                f"{BUDGET // MIB} MiB budget), {seconds:.1f} s"
            )
            shutil.rmtree(work / case, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
