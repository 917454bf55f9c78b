#!/usr/bin/env python3
"""Write a realistic KafScale bucket layout of VALID segments plus the records
a decoder must produce from them.

    python3 make_segments.py --out DIR [--seed N] [--ns NAMESPACE] [--no-verify]

Output (deterministic for a given seed):
  DIR/{ns}/{topic}/{partition}/segment-{base:020}.kfs            segment
  DIR/{ns}/{topic}/{partition}/segment-{base:020}.index          sparse index
  DIR/{ns}/{topic}/{partition}/segment-{base:020}.expected.jsonl one JSON object
      per DATA record in offset order: {"offset", "timestamp_ms", "key", "value",
      "headers": [{"key", "value"}]}; bytes are standard base64, null stays null
  DIR/__health/startup_probe_1, DIR/{ns}/{topic}/lfs/2026/11/30/obj-<uuid>
      unrelated objects a lister must ignore
  one orphan .kfs without .index (an incomplete segment: no .expected.jsonl)
  DIR/manifest.json  summary of every object written (not part of the format)

Coverage: 3 topics (one named `Orders.v2-eu`), 1-3 partitions, offset gaps
between segments, every codec (none, gzip, snappy xerial, snappy raw, lz4,
zstd) plus a segment mixing them, null/empty/non-UTF-8 keys, values and header
values, non-ASCII header keys, duplicate header keys, ~300 KB values (plain and
compressed), a 60-batch segment, a 250-record batch, LogAppendTime batches, a
control batch (not data), negative timestamp deltas, and one batch with gaps
in its offset deltas (as left by compaction: offset = base + offsetDelta).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kfs_writer import CODECS, Batch, Record, build_index, build_segment  # noqa: E402

TS0 = 1_700_000_000_000
INDEX_INTERVAL = 100

# Fixed edge-case material, cycled through by edge_records() so that every
# value appears regardless of the seed.
EDGE_KEYS = [None, b"", b"\xff\xfe\x00\x80bin-key", "ключ-ü".encode(), b"plain-key", b"\xc3\x28"]
EDGE_VALUES = [b"", None, b"\x00\x01\x02\xc3\x28\xa0\xa1 not utf-8 \xff", b"{}",
               "värde ✓".encode(), b"\x80" * 7]
EDGE_HEADERS = [
    [],
    [("trace-id", None)],
    [("empty", b"")],
    [("ключ", b"\xff\x00\xfe\xfd"), ("日本語", "値".encode())],
    [("emoji-🚀", b"launch"), ("dup", b"1"), ("dup", b"2"), ("dup", None)],
    [("é", b""), ("", b"empty-key-is-legal"), ("bin", bytes(range(256)))],
    # A key that is not UTF-8, as librdkafka and Go clients may send it.
    [(b"\xff\xfe-bin", b"raw"), ("ok", None)],
]

# A CreateTime delta putting the record beyond what microseconds hold (Kafka does not
# bound CreateTime): its `timestamp` is null, its `timestamp_ms` exact.
BEYOND_MICROS_DELTA = 9_300_000_000_000_000


class Gen:
    """Random content and offset/time bookkeeping for one partition."""

    def __init__(self, rng: random.Random, first_offset: int, ts: int):
        self.rng, self.next_offset, self.clock = rng, first_offset, ts

    # ---- record content
    def ts_deltas(self, n: int, force_negative: bool = False) -> list[int]:
        """First delta 0 (the producer's first record), then a random walk that
        may go below the base timestamp."""
        d, out = 0, [0]
        for _ in range(n - 1):
            d += self.rng.randint(-400, 900)
            out.append(d)
        if force_negative and n > 1 and min(out) >= 0:
            out[1] = -self.rng.randint(1, 5000)
        return out

    def normal_records(self, n: int) -> list[Record]:
        r, recs = self.rng, []
        for i, td in enumerate(self.ts_deltas(n, force_negative=n > 2)):
            key = None if r.random() < 0.1 else f"cust-{r.randint(1, 5000):05d}".encode()
            value = json.dumps({"order_id": r.randint(1, 10**9), "amount": round(r.uniform(1, 999), 2),
                                "items": r.randint(1, 9), "note": "x" * r.randint(0, 200)}).encode()
            headers = []
            if r.random() < 0.6:
                headers.append(("content-type", b"application/json"))
            if r.random() < 0.4:
                headers.append(("trace-id", r.randbytes(8).hex().encode()))
            recs.append(Record(i, td, key, value, headers))
        return recs

    def edge_records(self, n: int, start: int = 0) -> list[Record]:
        """Cycle through the edge-case tables (offsetting each column so the
        combinations vary), mixing in a few random binary payloads."""
        r, recs = self.rng, []
        for i, td in enumerate(self.ts_deltas(n, force_negative=True)):
            j = start + i
            key = EDGE_KEYS[j % len(EDGE_KEYS)]
            value = EDGE_VALUES[(j // 2) % len(EDGE_VALUES)]
            headers = list(EDGE_HEADERS[(j // 3) % len(EDGE_HEADERS)])
            if r.random() < 0.2:
                value = r.randbytes(r.randint(1, 64))
            if j % 11 == 7:
                td = BEYOND_MICROS_DELTA
            recs.append(Record(i, td, key, value, headers))
        return recs

    def big_value(self, size: int, compressible: bool) -> bytes:
        if not compressible:
            return self.rng.randbytes(size)
        lines, total = [], 0
        while total < size:
            line = f"{self.rng.randint(0, 10**6)},sensor-{self.rng.randint(1, 40)},{self.rng.random():.6f}\n".encode()
            lines.append(line)
            total += len(line)
        return b"".join(lines)[:size]

    # ---- batches
    def batch(self, records: list[Record], codec: str = "none", log_append: bool = False,
              **kw) -> Batch:
        base_ts = self.clock
        lat = None
        if log_append:
            lat = base_ts + max(r.timestamp_delta for r in records) + self.rng.randint(1, 50)
        b = Batch(self.next_offset, base_ts, records, codec=codec, log_append_time=lat, **kw)
        self.next_offset = b.last_offset + 1
        self.clock = max(b.max_timestamp, base_ts + max(r.timestamp_delta for r in records)) \
            + self.rng.randint(1, 3000)
        return b

    def control_batch(self) -> Batch:
        # Transaction marker: key = version i16 0, type i16 1 (COMMIT);
        # value = version i16 0, coordinatorEpoch i32 0.
        rec = Record(0, 0, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), [])
        return self.batch([rec], control=True, transactional=True, producer_id=4242,
                          producer_epoch=0)

    def gap(self):
        """Offsets lost between segments (failed uploads)."""
        self.next_offset += self.rng.randint(1, 1000)
        self.clock += self.rng.randint(1000, 600_000)


def partition_plans(g: Gen, topic: str, part: int) -> list[tuple[list[Batch], list[str]]]:
    """Segments for one partition: list of (batches, feature tags)."""
    r = g.rng
    n = lambda lo, hi: r.randint(lo, hi)  # noqa: E731
    segs = []

    def seg(tags, *batches):
        segs.append((list(batches), tags))
        g.gap()

    if topic == "tiny":
        # One small produce request per segment, back to back: what fills a table with
        # small files (maintenance tests).
        for _ in range(TINY_PER_PARTITION):
            segs.append(([g.batch(g.normal_records(n(1, 3)), r.choice(list(CODECS)))], ["tiny"]))
        return segs
    if topic == "orders" and part == 0:
        seg(["codec:none"], *[g.batch(g.normal_records(n(1, 6))) for _ in range(3)])
        seg(["codec:gzip"], *[g.batch(g.normal_records(n(2, 9)), "gzip") for _ in range(4)])
        seg(["codec:snappy-xerial"], *[g.batch(g.normal_records(n(2, 9)), "snappy-xerial") for _ in range(3)])
    elif topic == "orders" and part == 1:
        seg(["codec:snappy-raw"], *[g.batch(g.normal_records(n(2, 9)), "snappy-raw") for _ in range(3)])
        seg(["control-batch"], g.batch(g.normal_records(3)), g.control_batch(),
            g.batch(g.normal_records(2)))
        seg(["codec:lz4"], *[g.batch(g.normal_records(n(2, 9)), "lz4") for _ in range(2)])
    elif topic == "orders" and part == 2:
        seg(["codec:zstd"], *[g.batch(g.normal_records(n(2, 9)), "zstd") for _ in range(3)])
        # compaction-style batch: offset deltas 0, 2, 5 (lastOffsetDelta 5, recordCount 3)
        recs = g.normal_records(3)
        for rec, d in zip(recs, (0, 2, 5)):
            rec.offset_delta = d
        seg(["offset-delta-gaps"], g.batch(g.normal_records(2)), g.batch(recs), g.batch(g.normal_records(2)))
    elif topic == "Orders.v2-eu" and part == 0:
        seg(["edge-values"], g.batch(g.edge_records(12)), g.batch(g.edge_records(12, 12)))
        seg(["mixed-codecs", "edge-values"],
            *[g.batch(g.edge_records(n(3, 8), k * 5), c) for k, c in enumerate(CODECS)])
        seg(["log-append-time"], g.batch(g.normal_records(4), log_append=True),
            g.batch(g.edge_records(6), "zstd", log_append=True),
            g.batch(g.normal_records(3)),                      # CreateTime in between
            g.batch(g.normal_records(5), "lz4", log_append=True))
    elif topic == "Orders.v2-eu" and part == 1:
        big = Record(0, 0, b"big-1", g.big_value(300 * 1024, compressible=False), [("kind", b"random")])
        seg(["big-value", "codec:none"], g.batch(g.normal_records(2)), g.batch([big]))
        big2 = Record(0, 0, b"big-2", g.big_value(300 * 1024, compressible=True), [("kind", b"csv")])
        big3 = Record(1, 7, None, g.big_value(450 * 1024, compressible=True), [])
        seg(["big-value", "codec:zstd", "codec:snappy-xerial"], g.batch([big2, big3], "zstd"),
            g.batch([Record(0, 0, b"big-4", g.big_value(200 * 1024, compressible=True), [])],
                    "snappy-xerial"))
    elif topic == "clickstream":
        codecs = list(CODECS)
        seg(["many-batches", "mixed-codecs"],
            *[g.batch(g.normal_records(n(1, 8)), r.choice(codecs)) for _ in range(60)])
        seg(["large-batch"], g.batch(g.normal_records(3)), g.batch(g.normal_records(250), "lz4"),
            *[g.batch(g.normal_records(n(1, 4))) for _ in range(5)])
        seg(["single-record", "codec:gzip"], g.batch(g.normal_records(1), "gzip"))
    return segs


TOPICS = [("orders", 3), ("Orders.v2-eu", 2), ("clickstream", 1)]
TINY_PER_PARTITION = 0


def write(path: str, data: bytes):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ns", default="default")
    ap.add_argument("--no-verify", action="store_true", help="skip decoding the output with kfs_check.py")
    ap.add_argument("--tiny-segments", type=int, default=0,
                    help="also write a topic 'tiny' of this many 1-3 record segments over 2 partitions")
    a = ap.parse_args()
    global TINY_PER_PARTITION
    TINY_PER_PARTITION = (a.tiny_segments + 1) // 2
    topics = TOPICS + ([("tiny", 2)] if a.tiny_segments else [])

    rng = random.Random(a.seed)
    out, ns = a.out, a.ns
    manifest = {"seed": a.seed, "namespace": ns, "segments": [], "orphans": [], "unrelated": []}

    def uuid4() -> str:
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    probe = "__health/startup_probe_1"
    write(os.path.join(out, probe), b"ok")
    manifest["unrelated"].append(probe)

    for t_idx, (topic, nparts) in enumerate(topics):
        for part in range(nparts):
            first = 0 if part == 0 else rng.randint(1, 20_000)
            g = Gen(rng, first, TS0 + t_idx * 86_400_000 + rng.randint(0, 3_600_000))
            prefix = f"{ns}/{topic}/{part}"
            for batches, tags in partition_plans(g, topic, part):
                encoded = [b.encode() for b in batches]
                created = max(b.max_timestamp for b in batches) + rng.randint(5, 500)
                kfs = build_segment(encoded, created)
                stem = f"{prefix}/segment-{batches[0].base_offset:020d}"
                rows = [row for b in batches for row in b.data_records()]
                write(os.path.join(out, stem + ".kfs"), kfs)
                write(os.path.join(out, stem + ".index"), build_index(encoded, INDEX_INTERVAL))
                write(os.path.join(out, stem + ".expected.jsonl"),
                      "".join(json.dumps(row) + "\n" for row in rows).encode())
                manifest["segments"].append({
                    "kfs": stem + ".kfs", "index": stem + ".index", "expected": stem + ".expected.jsonl",
                    "topic": topic, "partition": part, "base_offset": batches[0].base_offset,
                    "last_offset": batches[-1].last_offset, "batches": len(batches),
                    "message_count": sum(len(b.records) for b in batches), "data_records": len(rows),
                    "codecs": sorted({b.codec for b in batches}), "features": tags, "bytes": len(kfs)})
            if topic == "orders" and part == 2:
                # orphan: the .index upload "failed"; not a complete segment
                b = g.batch(g.normal_records(4), "snappy-raw")
                stem = f"{prefix}/segment-{b.base_offset:020d}"
                write(os.path.join(out, stem + ".kfs"), build_segment([b.encode()], b.max_timestamp + 20))
                manifest["orphans"].append(stem + ".kfs")
        for day in ("2026/11/30", "2026/12/01"):
            key = f"{ns}/{topic}/lfs/{day}/obj-{uuid4()}"
            write(os.path.join(out, key), rng.randbytes(rng.randint(1024, 20_000)))
            manifest["unrelated"].append(key)

    write(os.path.join(out, "manifest.json"), (json.dumps(manifest, indent=1) + "\n").encode())

    if not a.no_verify:
        verify(out, manifest)
    n_rec = sum(s["data_records"] for s in manifest["segments"])
    print(f"wrote {len(manifest['segments'])} segments ({n_rec} data records), "
          f"{len(manifest['orphans'])} orphan, {len(manifest['unrelated'])} unrelated objects to {out}")
    return 0


def verify(out: str, manifest: dict):
    """Decode everything with the reference reader and compare to expected."""
    from kfs_check import read_index, read_segment
    for s in manifest["segments"]:
        seg = read_segment(open(os.path.join(out, s["kfs"]), "rb").read())
        read_index(open(os.path.join(out, s["index"]), "rb").read(), seg)
        with open(os.path.join(out, s["expected"])) as f:
            want = [json.loads(line) for line in f]
        if seg["rows"] != want:
            raise SystemExit(f"verify failed: {s['kfs']}")
    for o in manifest["orphans"]:
        read_segment(open(os.path.join(out, o), "rb").read())


if __name__ == "__main__":
    sys.exit(main())
