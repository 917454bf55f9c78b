#!/usr/bin/env python3
"""Checks that an upsert table (the mirror) reads as the fold of its topic's change log,
with two independent readers: the log is a table of the same topic in append mode,
read with pyiceberg; its records are folded here, per key, by the documented order
(a partition's records in offset order; one key's records from two partitions by
timestamp, then partition and offset, when a commit sees them together: the log's
commits, which took the same segments as the mirror's, each folded against the
key's live row or, keyed by fields, the marker of its delete (for a day), as the
mirror commits); a record with a null value deletes its key, a
record without a key is kept as it is. It also prints how many rows the whole log
folded at once in event order would change (keyed by the record key: a key deleted in
one commit and changed from another partition with an earlier timestamp in a later
one). With `--key-fields F[,F...]` the key is those
fields of the JSON value (each as text: strings as they are, integers in decimal,
booleans), a tombstone's from its record key (a JSON object holding them, with or
without the converter's schema wrapper; with one field a JSON scalar or the key's
bytes, if UTF-8 without control characters); a value without them is kept, a tombstone naming
no key is no row (the converter sends it to the dead-letter table). The
mirror is read with pyiceberg
(`scan().to_arrow()`, which applies position deletes) and DuckDB's iceberg extension.

    python3 tests/python/check_mirror.py --log-warehouse WH1 --mirror-warehouse WH2 \
        --table default.topic_0

Prints the rows, keys and tombstones seen and each reader's time; exits non-zero,
naming the reader and the difference, when either reads other rows than the fold.
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify_tables import open_duckdb  # noqa: E402


def open_table(warehouse: Path, name: str):
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = warehouse.resolve()
    catalog = SqlCatalog(
        "local", uri=f"sqlite:///{warehouse / 'catalog.db'}", warehouse=f"file://{warehouse}"
    )
    return catalog.load_table(name)


def supersedes(new: tuple, old: tuple) -> bool:
    """Whether change `new` (partition, offset, timestamp) applies after `old`."""
    if new[0] == old[0]:
        return new[1] > old[1]
    return (new[2], new[0], new[1]) > (old[2], old[0], old[1])


def field_text(value) -> bytes | None:
    """The text a key field's JSON value keys by, or None."""
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, str):
        return value.encode()
    return None


def fields_key(obj, fields: list[str], wrapped: bool = False):
    """The key tuple of a JSON object's `fields`, or None when one is missing; a
    record key (`wrapped`) may come in the JSON converter's schema wrapper."""
    if wrapped and isinstance(obj, dict) and "schema" in obj and isinstance(obj.get("payload"), dict):
        obj = obj["payload"]
    if not isinstance(obj, dict):
        return None
    texts = tuple(field_text(obj.get(f)) for f in fields)
    return None if any(t is None for t in texts) else texts


def record_key_fields(key: bytes | None, fields: list[str]):
    """The key a tombstone's record key names, or None."""
    if key is None:
        return None
    try:
        parsed = json.loads(key)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return fields_key(parsed, fields, wrapped=True)
    if len(fields) != 1:
        return None
    text = field_text(parsed) if parsed is not None else None
    if text is not None:
        return (text,)
    # A raw key names a text field as UTF-8 without control characters; a binary key
    # (a registry frame, a serialized number) names none.
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if any(unicodedata.category(c) == "Cc" for c in text) else (key,)


# How long a mirror keyed by fields keeps a deleted key's marker behind a commit's
# newest change (`kfs_plan::key_index::MARKER_RETENTION_MS`).
MARKER_RETENTION_MS = 24 * 60 * 60 * 1000


def keys_of(log, key_fields: list[str] | None) -> list:
    """Each record's key: its record key, or its key fields' (see the module)."""
    keys = log["key"].to_pylist()
    if not key_fields:
        return keys
    found = []
    for key, value in zip(keys, log["value"].to_pylist()):
        if value is None:
            found.append(record_key_fields(key, key_fields))
            continue
        try:
            found.append(fields_key(json.loads(value), key_fields))
        except ValueError:
            found.append(None)
    return found


def commit_offsets(table) -> list[dict[int, int]]:
    """The next offset per partition after each of `table`'s commits, oldest first
    (its snapshots' `kfs.offsets`): where the log's commits, and so the mirror's (the
    same segments run into both), split the records."""
    found = []
    for snapshot in sorted(table.metadata.snapshots, key=lambda s: s.sequence_number):
        text = (snapshot.summary or {}).get("kfs.offsets")
        if text:
            found.append({int(p): int(o) for p, o in json.loads(text).items()})
    return found


def fold(log, skipped: frozenset = frozenset(), key_fields=None, commits=None) -> tuple[Counter, dict]:
    """The (partition, offset) rows the mirror of `log` (an Arrow table) holds, the
    records at `skipped` (partition, offset) left out: a record the mirror's table could
    not hold went to its dead-letter table and changed nothing.

    With `commits` (`commit_offsets`), folded as the mirror commits: each commit's
    changes of a key against the key's live row, or keyed by fields its delete's
    marker (a key deleted by an earlier commit keeps no row to compare with); without,
    the whole log at once, in event order (what differs is a key's changes from two
    partitions that arrive in different commits against their timestamps' order after
    a delete, or after a marker's day)."""
    if skipped:
        import pyarrow as pa

        keep = [
            (p, o) not in skipped
            for p, o in zip(log["partition"].to_pylist(), log["offset"].to_pylist())
        ]
        log = log.filter(pa.array(keep))
    keys = keys_of(log, key_fields)
    tombstones = log["value"].is_null().to_pylist()
    partitions = log["partition"].to_pylist()
    offsets = log["offset"].to_pylist()
    stamps = log["timestamp_ms"].to_pylist()
    ends: dict[int, list[int]] = {}
    for commit in commits or []:
        for partition, end in commit.items():
            ends.setdefault(partition, []).append(end)

    def commit_of(i: int) -> int:
        return bisect.bisect_right(ends.get(partitions[i], []), offsets[i])

    kept = Counter()
    batches: dict[int, dict] = {}
    for i in range(len(keys)):
        key = keys[i]
        if key is None:
            # A tombstone naming no key of a mirror keyed by fields deletes nothing
            # (a dead letter since the converter refuses it; before, deleted).
            if not (key_fields and tombstones[i]):
                kept[(partitions[i], offsets[i])] += 1
            continue
        batches.setdefault(commit_of(i), {}).setdefault(key, []).append(i)
    live: dict = {}
    for batch in sorted(batches):
        newest = max(stamps[i] for changes in batches[batch].values() for i in changes)
        for key, changes in batches[batch].items():
            if key in live:
                changes = changes + [live[key]]
            winner = None
            for i in sorted(changes, key=lambda i: (partitions[i], offsets[i])):
                change = (partitions[i], offsets[i], stamps[i])
                if winner is None or supersedes(
                    change, (partitions[winner], offsets[winner], stamps[winner])
                ):
                    winner = i
            if tombstones[winner] and not key_fields:
                live.pop(key, None)
            else:
                # Keyed by fields, a delete stays as the key's marker (for a day).
                live[key] = winner
        if key_fields:
            cutoff = newest - MARKER_RETENTION_MS
            live = {k: i for k, i in live.items() if not tombstones[i] or stamps[i] >= cutoff}
    for i in live.values():
        if not tombstones[i]:
            kept[(partitions[i], offsets[i])] += 1
    stats = {
        "records": len(keys),
        "keys": len({k for k in keys if k is not None}),
        "tombstones": sum(tombstones),
        "keyless": sum(1 for k in keys if k is None),
    }
    return kept, stats


def event_order_note(expected: Counter, in_event_order: Counter) -> str:
    """How the fold as committed differs from the whole log's in event order."""
    differ = sum((expected - in_event_order).values()) + sum((in_event_order - expected).values())
    return f"rows that event order across commits would change: {differ}"


def dead_letters(warehouse: Path, table: str) -> frozenset:
    """The (partition, offset) of the records the mirror's dead-letter table holds."""
    letters = open_table(warehouse, f"{table}__dlq").scan(
        selected_fields=("partition", "offset")
    ).to_arrow()
    return frozenset(zip(letters["partition"].to_pylist(), letters["offset"].to_pylist()))


def check_change_log(log, mirror_warehouse: Path, table: str, skipped: frozenset) -> list[str]:
    """Checks that the mirror's change log (`<table>__changes`) holds every record of
    `log` (an Arrow table of the append log's rows) but those `skipped` (the mirror's
    dead letters) exactly once, as pyiceberg and DuckDB read it: one line per reader,
    starting with `change log:`, and `DIFFERS` when it does not."""
    expected = Counter(
        at for at in zip(log["partition"].to_pylist(), log["offset"].to_pylist())
        if at not in skipped
    )
    changes = open_table(mirror_warehouse, f"{table}__changes")
    rows = changes.scan(selected_fields=("partition", "offset")).to_arrow()
    seen = {
        "pyiceberg": Counter(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist())),
        "DuckDB": Counter(
            open_duckdb()
            .execute('SELECT "partition", "offset" FROM iceberg_scan(?)', [changes.metadata_location])
            .fetchall()
        ),
    }
    lines = []
    for reader, found in seen.items():
        verdict = "holds every record once" if found == expected else "DIFFERS"
        lines.append(
            f"change log: {reader} {verdict} ({sum(found.values())} rows; the log's "
            f"{sum(expected.values())} records but {len(skipped)} dead letters)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-warehouse", required=True, type=Path)
    parser.add_argument("--mirror-warehouse", required=True, type=Path)
    parser.add_argument("--table", required=True, help="namespace.name, in both warehouses")
    parser.add_argument(
        "--key-fields",
        help="the mirror's upsert_key: value fields, comma-separated (default: the record key)",
    )
    parser.add_argument(
        "--dead-letters",
        action="store_true",
        help="leave out the records the mirror's dead-letter table holds (a JSON mirror's)",
    )
    parser.add_argument(
        "--change-log",
        action="store_true",
        help="check the mirror's change log too: every record but the dead letters once",
    )
    args = parser.parse_args()

    log = open_table(args.log_warehouse, args.table).scan(
        selected_fields=("key", "value", "partition", "offset", "timestamp_ms")
    ).to_arrow()
    skipped: frozenset = frozenset()
    if args.dead_letters:
        skipped = dead_letters(args.mirror_warehouse, args.table)
        print(f"dead letters left out of the fold: {len(skipped)}")
    key_fields = [f.strip() for f in args.key_fields.split(",")] if args.key_fields else None
    commits = commit_offsets(open_table(args.log_warehouse, args.table))
    expected, stats = fold(log, skipped, key_fields, commits)
    print(event_order_note(expected, fold(log, skipped, key_fields)[0]))
    mirror = open_table(args.mirror_warehouse, args.table)

    seen = {}
    started = time.perf_counter()
    rows = mirror.scan(selected_fields=("partition", "offset")).to_arrow()
    seen["pyiceberg"] = (
        Counter(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist())),
        time.perf_counter() - started,
    )
    con = open_duckdb()
    started = time.perf_counter()
    found = con.execute(
        'SELECT "partition", "offset" FROM iceberg_scan(?)', [mirror.metadata_location]
    ).fetchall()
    seen["DuckDB"] = (Counter(found), time.perf_counter() - started)

    print(
        f"log: {stats['records']} records, {stats['keys']} keys, "
        f"{stats['tombstones']} tombstones, {stats['keyless']} without a key; "
        f"the fold keeps {sum(expected.values())} rows"
    )
    failed = False
    names = [field.name for field in mirror.schema().fields]
    if "order_id" in names:
        # `kfs-iceberg gen`'s JSON values carry their offset as `order_id`: a mirror of
        # JSON values must hold each row's own record's fields.
        pairs = mirror.scan(selected_fields=("offset", "order_id")).to_arrow()
        wrong = [
            (o, i)
            for o, i in zip(pairs["offset"].to_pylist(), pairs["order_id"].to_pylist())
            if i is not None and i != o
        ]
        held = sum(1 for i in pairs["order_id"].to_pylist() if i is not None)
        print(f"columns: {', '.join(names)}; order_id is the row's own in {held} rows")
        if wrong:
            failed = True
            print(f"order_id of another record in {len(wrong)} rows: {wrong[:5]}")
    for reader, (rows, seconds) in seen.items():
        if rows != expected:
            failed = True
            extra = sorted((rows - expected).elements())[:10]
            missing = sorted((expected - rows).elements())[:10]
            print(f"{reader}: {sum(rows.values())} rows; extra {extra}, missing {missing}")
        else:
            print(f"{reader}: reads the fold exactly ({sum(rows.values())} rows, {seconds:.2f} s)")
    if args.change_log:
        for line in check_change_log(log, args.mirror_warehouse, args.table, skipped):
            failed |= "DIFFERS" in line
            print(line)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
