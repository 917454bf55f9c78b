#!/usr/bin/env python3
"""Checks a day-partitioned topic table written by `kfs-iceberg run --partition-by
'day(timestamp)'`, with pyiceberg.

- the table's spec is day(timestamp); every data file has a day, and the days of the
  files are exactly the days of the expected records;
- for the day with the most records, a scan filtered to that day plans only files of
  that day (fewer than the table has), and returns exactly the expected records of
  that day (record ids, from the `*.expected.jsonl` files under --expected).

Prints one JSON line of facts; exits non-zero with a message on the first mismatch.
"""

import argparse
import datetime
import glob
import json
import os
import sys


def fail(message):
    print(f"check_partitioned: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--expected", required=True)
    args = parser.parse_args()

    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    expected = {}  # topic -> {record_id: timestamp_ms}
    for path in glob.glob(os.path.join(args.expected, "**", "*.expected.jsonl"), recursive=True):
        parts = os.path.relpath(path, args.expected).split(os.sep)
        topic, partition = parts[-3], int(parts[-2])
        with open(path) as f:
            for line in f:
                if line.strip():
                    record = json.loads(line)
                    expected.setdefault(topic, {})[f"{topic}:{partition}:{record['offset']}"] = record["timestamp_ms"]
    if len(expected) != 1:
        fail(f"expected one topic, found {sorted(expected)}")
    topic, records = next(iter(expected.items()))

    wh = os.path.abspath(args.warehouse)
    catalog = SqlCatalog("local", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    table = catalog.load_table(f"kafscale.{topic}")
    spec = table.spec()
    fields = [(f.name, str(f.transform)) for f in spec.fields]
    if fields != [("timestamp_day", "day")]:
        fail(f"spec is {fields}, expected day(timestamp)")

    epoch = datetime.date(1970, 1, 1)
    day_of = lambda ms: (datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).date() - epoch).days

    all_files = list(table.scan().plan_files())
    for task in all_files:
        if task.file.partition[0] is None:
            fail(f"{task.file.file_path} has no partition value")
    per_day = {}
    for rid, ms in records.items():
        per_day.setdefault(day_of(ms), set()).add(rid)
    scanned = table.scan(selected_fields=("record_id", "timestamp_ms")).to_arrow().to_pylist()
    for row in scanned:
        if row["record_id"] not in records:
            fail(f"unexpected record {row['record_id']}")
    files_by_day = {}
    for task in all_files:
        files_by_day.setdefault(task.file.partition[0], []).append(task.file.file_path)
    if set(files_by_day) != set(per_day):
        fail(f"file days {sorted(files_by_day)} differ from record days {sorted(per_day)}")

    day, ids = max(per_day.items(), key=lambda item: len(item[1]))
    start = datetime.datetime.combine(epoch + datetime.timedelta(days=day), datetime.time(), datetime.timezone.utc)
    end = start + datetime.timedelta(days=1)
    iso = lambda t: t.isoformat()
    row_filter = And(GreaterThanOrEqual("timestamp", iso(start)), LessThan("timestamp", iso(end)))
    scan = table.scan(row_filter=row_filter)
    planned = list(scan.plan_files())
    for task in planned:
        if task.file.partition[0] != day:
            fail(f"the scan of day {day} planned {task.file.file_path} of day {task.file.partition[0]}")
    got = [row["record_id"] for row in scan.to_arrow().to_pylist()]
    if len(got) != len(set(got)):
        fail("duplicate record ids in the day's scan")
    if set(got) != ids:
        fail(f"day {day}: {len(got)} rows, expected {len(ids)}; missing {sorted(ids - set(got))[:5]}, extra {sorted(set(got) - ids)[:5]}")
    print(json.dumps({
        "days": len(per_day),
        "files": len(all_files),
        "planned_files": len(planned),
        "day": str(start.date()),
        "day_rows": len(got),
        "rows": len(scanned),
    }))


if __name__ == "__main__":
    main()
