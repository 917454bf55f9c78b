#!/usr/bin/env python3
"""Independent encoder for KafScale `.kfs` segments and `.index` files.

Written from /work/shared/kafscale-format.md only, so that the Rust decoder is
tested against bytes it did not produce. All integers are big-endian; record
fields are zigzag varints. Run `python3 kfs_writer.py --self-test` to check the
encoder against the worked example in the spec.

Layers, from high to low level:
  Record / Batch          -> Batch.encode() gives RecordBatch v2 bytes,
                             Batch.data_records() gives the expected JSON rows
  build_segment()         -> .kfs bytes from a list of batch byte strings
  build_index()           -> .index bytes from the same list
  assemble_batch(), encode_record_fields(), compress(), fix_batch_crc(), ...
                          -> raw building blocks with every field overridable,
                             used by make_corpus.py to build malformed files
"""

from __future__ import annotations

import base64
import gzip
import struct
import sys
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import cramjam
import crc32c as _crc32c

# ---------------------------------------------------------------- constants

SEGMENT_MAGIC = b"KAFS"
SEGMENT_VERSION = 1
FOOTER_MAGIC = b"END!"
HEADER_LEN = 32
FOOTER_LEN = 16

INDEX_MAGIC = b"IDX\x00"
INDEX_VERSION = 1
INDEX_HEADER_LEN = 16
INDEX_ENTRY_LEN = 12
INDEX_INTERVAL = 100

BATCH_MAGIC = 2
BATCH_HEADER_LEN = 61      # bytes before the records section
BATCH_LENGTH_OFFSET = 8    # batchLength field
BATCH_CRC_OFFSET = 17      # crc field; the CRC covers [21 .. end of batch]
BATCH_CRC_START = 21

ATTR_TIMESTAMP_LOG_APPEND = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

# codec name -> attribute bits 0-2. Both snappy framings use id 2.
CODEC_IDS = {
    "none": 0,
    "gzip": 1,
    "snappy-xerial": 2,
    "snappy-raw": 2,
    "lz4": 3,
    "zstd": 4,
}
CODECS = tuple(CODEC_IDS)

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_BLOCK = 32 * 1024


def crc32c(data: bytes) -> int:
    return _crc32c.crc32c(data) & 0xFFFFFFFF


# ---------------------------------------------------------------- varints

def zigzag(n: int) -> int:
    """Signed -> unsigned zigzag mapping (0,-1,1,-2,... -> 0,1,2,3,...)."""
    return (n << 1) if n >= 0 else ((-n) << 1) - 1


def uvarint(u: int) -> bytes:
    """Unsigned LEB128."""
    if u < 0:
        raise ValueError("uvarint of negative value")
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(n: int) -> bytes:
    """Zigzag varint (Kafka varint / varlong: same encoding, different range)."""
    return uvarint(zigzag(n))


# ---------------------------------------------------------------- compression

def snappy_xerial(data: bytes, block: int = XERIAL_BLOCK) -> bytes:
    """Java/xerial snappy framing: magic, version 1, compatible 1, then
    [i32 length][raw snappy block] for each `block`-sized chunk of input."""
    out = [XERIAL_MAGIC, struct.pack(">ii", 1, 1)]
    for i in range(0, len(data), block):
        raw = bytes(cramjam.snappy.compress_raw(data[i:i + block]))
        out.append(struct.pack(">i", len(raw)))
        out.append(raw)
    return b"".join(out)


def compress(codec: str, data: bytes) -> bytes:
    """Compress a records section with one of CODECS. Deterministic."""
    if codec == "none":
        return data
    if codec == "gzip":
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == "snappy-xerial":
        return snappy_xerial(data)
    if codec == "snappy-raw":
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == "lz4":
        return bytes(cramjam.lz4.compress(data))       # LZ4 frame format
    if codec == "zstd":
        return bytes(cramjam.zstd.compress(data, level=3))
    raise ValueError(f"unknown codec {codec!r}")


# ---------------------------------------------------------------- records

def _bytes_field(b: Optional[bytes]) -> bytes:
    """Length-prefixed nullable bytes (-1 = null)."""
    if b is None:
        return varint(-1)
    return varint(len(b)) + b


def encode_header(key: str | bytes, value: Optional[bytes]) -> bytes:
    """One record header. A str key is UTF-8 encoded; a bytes key is written
    as is (the corpus uses this for invalid UTF-8)."""
    kb = key.encode("utf-8") if isinstance(key, str) else key
    return varint(len(kb)) + kb + _bytes_field(value)


def encode_record_fields(offset_delta: int, timestamp_delta: int,
                         key: Optional[bytes], value: Optional[bytes],
                         headers: Sequence[tuple] = (), attributes: int = 0) -> bytes:
    """Record body WITHOUT the leading length varint."""
    parts = [bytes([attributes & 0xFF]), varint(timestamp_delta), varint(offset_delta),
             _bytes_field(key), _bytes_field(value), varint(len(headers))]
    parts += [encode_header(k, v) for k, v in headers]
    return b"".join(parts)


def frame_record(body: bytes) -> bytes:
    """Prefix a record body with its length varint."""
    return varint(len(body)) + body


@dataclass
class Record:
    """One Kafka record. offset_delta/timestamp_delta are relative to the batch."""
    offset_delta: int
    timestamp_delta: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: list = field(default_factory=list)   # [(str key, bytes|None value)]

    def encode(self) -> bytes:
        return frame_record(encode_record_fields(
            self.offset_delta, self.timestamp_delta, self.key, self.value, self.headers))


# ---------------------------------------------------------------- batches

def assemble_batch(base_offset: int, attributes: int, last_offset_delta: int,
                   base_timestamp: int, max_timestamp: int, record_count: int,
                   records_section: bytes, *, partition_leader_epoch: int = -1,
                   magic: int = BATCH_MAGIC, producer_id: int = -1,
                   producer_epoch: int = -1, base_sequence: int = -1,
                   crc: Optional[int] = None, batch_length: Optional[int] = None) -> bytes:
    """Lay out a RecordBatch v2 from raw parts. `records_section` is written
    verbatim (already compressed if the codec says so). The CRC and the
    batchLength are computed unless overridden."""
    after_crc = struct.pack(">hiqqqhii", attributes, last_offset_delta, base_timestamp,
                            max_timestamp, producer_id, producer_epoch, base_sequence,
                            record_count) + records_section
    if crc is None:
        crc = crc32c(after_crc)
    if batch_length is None:
        batch_length = 4 + 1 + 4 + len(after_crc)   # epoch + magic + crc + rest
    return (struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch,
                        magic, crc) + after_crc)


@dataclass
class Batch:
    """A RecordBatch v2 with convenient defaults.

    timestamps: CreateTime -> record ts = base_timestamp + timestamp_delta and
    maxTimestamp = max of those; LogAppendTime -> maxTimestamp is
    `log_append_time` and every record's timestamp is that value.
    """
    base_offset: int
    base_timestamp: int
    records: list
    codec: str = "none"
    log_append_time: Optional[int] = None     # set => LogAppendTime batch
    control: bool = False
    transactional: bool = False
    partition_leader_epoch: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1

    @property
    def attributes(self) -> int:
        a = CODEC_IDS[self.codec]
        if self.log_append_time is not None:
            a |= ATTR_TIMESTAMP_LOG_APPEND
        if self.transactional:
            a |= ATTR_TRANSACTIONAL
        if self.control:
            a |= ATTR_CONTROL
        return a

    @property
    def last_offset_delta(self) -> int:
        return max(r.offset_delta for r in self.records)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def max_timestamp(self) -> int:
        if self.log_append_time is not None:
            return self.log_append_time
        return max(self.base_timestamp + r.timestamp_delta for r in self.records)

    def records_section(self) -> bytes:
        return compress(self.codec, b"".join(r.encode() for r in self.records))

    def encode(self) -> bytes:
        return assemble_batch(
            self.base_offset, self.attributes, self.last_offset_delta,
            self.base_timestamp, self.max_timestamp, len(self.records),
            self.records_section(), partition_leader_epoch=self.partition_leader_epoch,
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence)

    def data_records(self) -> list[dict]:
        """Expected decoder output rows (empty for control batches)."""
        if self.control:
            return []
        return [expected_row(self.base_offset + r.offset_delta,
                             self.max_timestamp if self.log_append_time is not None
                             else self.base_timestamp + r.timestamp_delta,
                             r.key, r.value, r.headers)
                for r in self.records]


def _b64(b: Optional[bytes]) -> Optional[str]:
    return None if b is None else base64.b64encode(b).decode("ascii")


def wrap_i64(n: int) -> int:
    """`n` as Java's `long` arithmetic leaves it (Kafka adds timestamp deltas so)."""
    return ((n + 2**63) % 2**64) - 2**63


def _header(key, value: Optional[bytes]) -> dict:
    """A header as the dump prints it: the key decoded as Kafka's Java consumer does
    (invalid UTF-8 replaced by U+FFFD) and, where that lost something, its bytes."""
    raw = key.encode("utf-8") if isinstance(key, str) else key
    try:
        return {"key": raw.decode("utf-8"), "value": _b64(value)}
    except UnicodeDecodeError:
        return {"key": raw.decode("utf-8", errors="replace"), "key_bytes": _b64(raw),
                "value": _b64(value)}


def expected_row(offset: int, timestamp_ms: int, key: Optional[bytes],
                 value: Optional[bytes], headers: Iterable[tuple]) -> dict:
    """One line of a `.expected.jsonl` file."""
    return {"offset": offset, "timestamp_ms": timestamp_ms, "key": _b64(key),
            "value": _b64(value),
            "headers": [_header(k, v) for k, v in headers]}


# ---------------------------------------------------------------- batch bytes helpers

@dataclass
class BatchInfo:
    base_offset: int
    batch_length: int
    last_offset_delta: int
    record_count: int

    @property
    def size(self) -> int:
        return 12 + self.batch_length


def batch_info(batch: bytes) -> BatchInfo:
    """Read the framing fields of an encoded batch."""
    base_offset, batch_length = struct.unpack_from(">qi", batch, 0)
    (last_offset_delta,) = struct.unpack_from(">i", batch, 23)
    (record_count,) = struct.unpack_from(">i", batch, 57)
    return BatchInfo(base_offset, batch_length, last_offset_delta, record_count)


def fix_batch_crc(batch: bytes) -> bytes:
    """Recompute the batch CRC over [21 .. end] after a mutation."""
    crc = crc32c(batch[BATCH_CRC_START:])
    return batch[:BATCH_CRC_OFFSET] + struct.pack(">I", crc) + batch[BATCH_CRC_OFFSET + 4:]


def patch(buf: bytes, offset: int, fmt: str, *values) -> bytes:
    """Return `buf` with struct-packed `values` written at `offset`."""
    b = bytearray(buf)
    struct.pack_into(fmt, b, offset, *values)
    return bytes(b)


# ---------------------------------------------------------------- segment and index

def build_header(base_offset: int, message_count: int, created_ms: int, *,
                 magic: bytes = SEGMENT_MAGIC, version: int = SEGMENT_VERSION,
                 flags: int = 0, reserved: int = 0) -> bytes:
    return magic + struct.pack(">HHqiqI", version, flags, base_offset, message_count,
                               created_ms, reserved)


def build_footer(body_crc: int, last_offset: int, *, magic: bytes = FOOTER_MAGIC) -> bytes:
    return struct.pack(">Iq", body_crc, last_offset) + magic


def build_segment(batches: Sequence[bytes], created_ms: int, *,
                  base_offset: Optional[int] = None, message_count: Optional[int] = None,
                  last_offset: Optional[int] = None, body_crc: Optional[int] = None) -> bytes:
    """Header + batches + footer. Derived fields come from the batch bytes
    unless overridden (the corpus overrides them to inject defects)."""
    infos = [batch_info(b) for b in batches]
    body = b"".join(batches)
    if base_offset is None:
        base_offset = infos[0].base_offset
    if message_count is None:
        message_count = sum(i.record_count for i in infos)
    if last_offset is None:
        last_offset = infos[-1].base_offset + infos[-1].last_offset_delta
    if body_crc is None:
        body_crc = crc32c(body)
    return (build_header(base_offset, message_count, created_ms) + body
            + build_footer(body_crc, last_offset))


def index_entries(batches: Sequence[bytes], interval: int = INDEX_INTERVAL) -> list[tuple[int, int]]:
    """(offset, position) pairs: the first batch always, later batches once at
    least `interval` messages (record counts) have passed since the batch that
    got the previous entry (that batch's own records included)."""
    entries, since, pos = [], 0, HEADER_LEN
    for b in batches:
        info = batch_info(b)
        if not entries or since >= interval:
            entries.append((info.base_offset, pos))
            since = 0
        since += info.record_count
        pos += len(b)
    return entries


def build_index_bytes(entries: Sequence[tuple[int, int]], *, interval: int = INDEX_INTERVAL,
                      count: Optional[int] = None, magic: bytes = INDEX_MAGIC,
                      version: int = INDEX_VERSION, reserved: int = 0) -> bytes:
    if count is None:
        count = len(entries)
    out = [magic, struct.pack(">Hiih", version, count, interval, reserved)]
    out += [struct.pack(">qi", o, p) for o, p in entries]
    return b"".join(out)


def build_index(batches: Sequence[bytes], interval: int = INDEX_INTERVAL) -> bytes:
    return build_index_bytes(index_entries(batches, interval), interval=interval)


# ---------------------------------------------------------------- self-test

WORKED_KFS = bytes.fromhex("""
4b 41 46 53 00 01 00 00 00 00 00 00 00 00 00 00
00 00 00 01 00 00 01 8b cf e5 68 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 00 40 ff ff ff ff
02 d3 98 10 ba 00 00 00 00 00 00 00 00 01 8b cf
e5 68 00 00 00 01 8b cf e5 68 00 ff ff ff ff ff
ff ff ff ff ff ff ff ff ff 00 00 00 01 1c 00 00
00 04 6b 31 04 76 31 02 02 68 02 78 b7 1b a4 54
00 00 00 00 00 00 00 00 45 4e 44 21""")
WORKED_INDEX = bytes.fromhex("""
49 44 58 00 00 01 00 00 00 01 00 00 00 64 00 00
00 00 00 00 00 00 00 00 00 00 00 20""")


def _diff(name: str, got: bytes, want: bytes) -> bool:
    if got == want:
        print(f"ok   {name}: {len(got)} bytes match")
        return True
    print(f"FAIL {name}: got {len(got)} bytes, want {len(want)}")
    for i in range(max(len(got), len(want))):
        g = got[i] if i < len(got) else None
        w = want[i] if i < len(want) else None
        if g != w:
            print(f"     first difference at byte {i}: got {g}, want {w}")
            break
    print("     got :", got.hex(" "))
    return False


def self_test() -> int:
    ts = 1_700_000_000_000
    batch = Batch(0, ts, [Record(0, 0, b"k1", b"v1", [("h", b"x")])]).encode()
    ok = True
    ok &= crc32c(batch[BATCH_CRC_START:]) == 0xD39810BA
    seg = build_segment([batch], created_ms=ts)
    ok &= _diff(".kfs", seg, WORKED_KFS)
    ok &= _diff(".index", build_index([batch]), WORKED_INDEX)
    ok &= crc32c(seg[HEADER_LEN:-FOOTER_LEN]) == 0xB71BA454
    # varint sanity (Kafka examples): 0->00, -1->01, 1->02, 300 -> ac 04 (zigzag 600 -> d8 04)
    ok &= varint(0) == b"\x00" and varint(-1) == b"\x01" and varint(1) == b"\x02"
    ok &= uvarint(300) == b"\xac\x02" and varint(300) == b"\xd8\x04"
    # every codec round-trips through its library's decoder
    sample = bytes(range(256)) * 600
    ok &= bytes(cramjam.snappy.decompress_raw(compress("snappy-raw", sample))) == sample
    ok &= bytes(cramjam.lz4.decompress(compress("lz4", sample))) == sample
    ok &= bytes(cramjam.zstd.decompress(compress("zstd", sample))) == sample
    ok &= gzip.decompress(compress("gzip", sample)) == sample
    x = compress("snappy-xerial", sample)
    pos, out = 16, b""
    while pos < len(x):
        (n,) = struct.unpack_from(">i", x, pos)
        out += bytes(cramjam.snappy.decompress_raw(x[pos + 4:pos + 4 + n]))
        pos += 4 + n
    ok &= out == sample and x[:16] == XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
    print("self-test", "passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    print(__doc__)
    print("usage: kfs_writer.py --self-test")
    sys.exit(2)
