#!/usr/bin/env python3
"""Large-file (LFS) claim-check records, end to end, written and checked independently
of the Rust code (envelopes and checksums from hashlib and zlib, the segment from
tests/independent/kfs_writer.py).

    check_lfs.py make DIR --bucket BUCKET --prefix PREFIX
        Writes, under DIR, the blobs of topic `docs` (namespace `ns`) and one segment
        whose eleven records are: a plain value, claim checks by sha256, md5 and crc32,
        one whose blob is missing, one whose checksum is wrong, one in another bucket,
        one pointing at another topic's blob, one above 64 bytes, one envelope that does
        not decode, and a tombstone. Envelope keys are bucket keys (under PREFIX), as the
        LFS proxy writes them; upload DIR to s3://BUCKET/PREFIX.

    check_lfs.py check --mode MODE --catalog-db DB --warehouse WH [--s3-endpoint URL]
        Reads `kafscale.docs` and its `__dlq` with pyiceberg (and DuckDB's iceberg_scan
        for a local warehouse) after `kfs-iceberg run --lfs-mode MODE
        --lfs-max-inline-size 64`, and checks that every record is in the table or the
        dead-letter table exactly once (a claim check in mode skip in neither), that
        resolved values are the blobs' bytes, the lfs_* columns, and the reasons.
        Prints one JSON line of facts; exits non-zero on the first mismatch.
"""

import argparse
import hashlib
import json
import os
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "independent"))

import kfs_writer  # noqa: E402

NAMESPACE, TOPIC = "ns", "docs"
MAX_INLINE = 64


def blob(n, length):
    return bytes((i * 7 + n) % 256 for i in range(length))


def blob_key(prefix, n):
    return f"{prefix}/{NAMESPACE}/{TOPIC}/lfs/2026/12/02/obj-{n}".lstrip("/")


def envelope(bucket, key, body, alg):
    sha256 = hashlib.sha256(body).hexdigest()
    checksum = {
        "sha256": sha256,
        "md5": hashlib.md5(body).hexdigest(),
        "crc32": f"{zlib.crc32(body) & 0xFFFFFFFF:08x}",
    }[alg]
    return json.dumps({
        "kfs_lfs": 1, "bucket": bucket, "key": key, "size": len(body), "sha256": sha256,
        "checksum": checksum, "checksum_alg": alg, "content_type": "application/octet-stream",
        "created_at": "2026-12-02T10:00:00Z", "proxy_id": "lfs-proxy-1",
    }, separators=(",", ":")).encode()


# Blobs present in the bucket: number -> length.
BLOBS = {1: 10, 2: 20, 3: 30, 5: 12, 8: 100}


def values(bucket, prefix):
    other_topic = f"{prefix}/{NAMESPACE}/other/lfs/2026/12/02/obj-7".lstrip("/")
    return [
        b"plain value",
        envelope(bucket, blob_key(prefix, 1), blob(1, 10), "sha256"),
        envelope(bucket, blob_key(prefix, 2), blob(2, 20), "md5"),
        envelope(bucket, blob_key(prefix, 3), blob(3, 30), "crc32"),
        envelope(bucket, blob_key(prefix, 4), blob(4, 11), "sha256"),
        envelope(bucket, blob_key(prefix, 5), blob(50, 12), "sha256"),
        envelope("another-bucket", blob_key(prefix, 1), blob(1, 10), "sha256"),
        envelope(bucket, other_topic, blob(7, 9), "sha256"),
        envelope(bucket, blob_key(prefix, 8), blob(8, 100), "sha256"),
        b'{"kfs_lfs":1,"bucket":"' + bucket.encode() + b'","key":',
        None,
    ]


def make(args):
    root = args.dir
    for n, length in BLOBS.items():
        write(os.path.join(root, NAMESPACE, TOPIC, "lfs", "2026", "12", "02", f"obj-{n}"), blob(n, length))
    write(os.path.join(root, NAMESPACE, "other", "lfs", "2026", "12", "02", "obj-7"), blob(7, 9))
    records = [kfs_writer.Record(i, i, f"k{i}".encode(), v) for i, v in enumerate(values(args.bucket, args.prefix))]
    batch = kfs_writer.Batch(base_offset=0, base_timestamp=1_764_669_600_000, records=records).encode()
    segment = os.path.join(root, NAMESPACE, TOPIC, "0", f"segment-{0:020}")
    write(segment + ".kfs", kfs_writer.build_segment([batch], 1_764_669_600_000))
    write(segment + ".index", kfs_writer.build_index([batch]))


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def fail(message):
    print(f"check_lfs: {message}", file=sys.stderr)
    sys.exit(1)


def expected(mode):
    """(offsets in the table, offsets in the dead-letter table) for `mode`."""
    everything = set(range(11))
    return {
        "off": (everything, set()),
        "reference": (everything, set()),
        "skip": ({0, 9, 10}, set()),
        "resolve": ({0, 1, 2, 3, 10}, {4, 5, 6, 7, 8, 9}),
        "hybrid": ({0, 1, 2, 3, 8, 10}, {4, 5, 6, 7, 9}),
    }[mode]


REASONS = {
    4: "does not exist",
    5: "fails its sha256 checksum",
    6: "not in the segment bucket",
    7: "read only its own blobs",
    9: "does not decode",
}


def check(args):
    from pyiceberg.catalog.sql import SqlCatalog

    properties = {}
    if args.s3_endpoint:
        properties = {
            "s3.endpoint": args.s3_endpoint,
            "s3.access-key-id": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
            "s3.secret-access-key": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
            "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
        }
    warehouse = args.warehouse if args.warehouse.startswith("s3://") else f"file://{os.path.abspath(args.warehouse)}"
    catalog = SqlCatalog("local", uri=f"sqlite:///{os.path.abspath(args.catalog_db)}", warehouse=warehouse, **properties)
    sent = values(args.bucket, args.prefix)
    in_table, in_dead = expected(args.mode)

    table = catalog.load_table(f"kafscale.{TOPIC}")
    rows = table.scan().to_arrow().to_pylist()
    offsets = sorted(r["offset"] for r in rows)
    if offsets != sorted(in_table):
        fail(f"mode {args.mode}: table holds offsets {offsets}, expected {sorted(in_table)}")
    described = "lfs_resolved" in table.schema().column_names
    if described != (args.mode in ("resolve", "reference", "hybrid")):
        fail(f"mode {args.mode}: lfs columns {'present' if described else 'absent'}")
    for row in rows:
        offset = row["offset"]
        resolved = args.mode in ("resolve", "hybrid") and offset in (1, 2, 3)
        if resolved:
            n = offset
            if row["value"] != blob(n, BLOBS[n]):
                fail(f"offset {offset}: value is not the blob's {BLOBS[n]} bytes")
            if row["lfs_resolved"] is not True or row["lfs_key"] != blob_key(args.prefix, n):
                fail(f"offset {offset}: lfs columns {row['lfs_resolved']}, {row['lfs_key']}")
            if row["lfs_blob_size"] != BLOBS[n] or row["lfs_content_type"] != "application/octet-stream":
                fail(f"offset {offset}: lfs_blob_size {row['lfs_blob_size']}, content type {row['lfs_content_type']}")
            continue
        if row["value"] != sent[offset]:
            fail(f"mode {args.mode} offset {offset}: value {row['value']!r} is not the value sent")
        if described:
            claim = 1 <= offset <= 8
            want = False if claim else None
            if row["lfs_resolved"] is not want or (row["lfs_key"] is None) == claim:
                fail(f"mode {args.mode} offset {offset}: lfs columns {row['lfs_resolved']}, {row['lfs_key']}")

    dead_offsets = []
    if in_dead:
        dead = catalog.load_table(f"kafscale.{TOPIC}__dlq").scan().to_arrow().to_pylist()
        dead_offsets = sorted(r["offset"] for r in dead)
        if dead_offsets != sorted(in_dead):
            fail(f"mode {args.mode}: dead-letter table holds {dead_offsets}, expected {sorted(in_dead)}")
        for row in dead:
            if row["value"] != sent[row["offset"]]:
                fail(f"dead letter {row['offset']}: value is not the record's own")
            needle = REASONS.get(row["offset"], "above the inline limit")
            if needle not in row["error"]:
                fail(f"dead letter {row['offset']}: reason {row['error']!r} lacks {needle!r}")
    if len(set(offsets) | set(dead_offsets)) != len(offsets) + len(dead_offsets):
        fail("an offset is in both tables")

    duckdb_rows = None
    if not args.warehouse.startswith("s3://"):
        sys.path.insert(0, os.path.dirname(__file__))
        from verify_tables import open_duckdb

        con = open_duckdb()
        if con is not None:
            found = con.execute(
                "SELECT \"offset\", value FROM iceberg_scan(?) ORDER BY \"offset\"",
                [table.metadata_location],
            ).fetchall()
            duckdb_rows = len(found)
            by_pyiceberg = sorted((r["offset"], r["value"]) for r in rows)
            if [(o, bytes(v) if v is not None else None) for o, v in found] != by_pyiceberg:
                fail("DuckDB reads other rows than pyiceberg")
    print(json.dumps({"mode": args.mode, "rows": len(offsets), "dead_letters": len(dead_offsets),
                      "skipped": 11 - len(offsets) - len(dead_offsets), "duckdb_rows": duckdb_rows}))


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    c = sub.add_parser("check")
    c.add_argument("--mode", required=True)
    c.add_argument("--catalog-db", required=True)
    c.add_argument("--warehouse", required=True)
    c.add_argument("--s3-endpoint")
    for p in (m, c):
        p.add_argument("--bucket", default="kafscale-segments")
        p.add_argument("--prefix", default="")
    args = parser.parse_args()
    {"make": make, "check": check}[args.command](args)


if __name__ == "__main__":
    main()
