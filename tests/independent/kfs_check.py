#!/usr/bin/env python3
"""Strict reference reader for `.kfs` / `.index`, used only to verify the
generated test data: that make_segments.py output decodes to its
`.expected.jsonl`, and that each corpus file fails at the intended check.

It is not the project's decoder and is deliberately simple. Every failure
raises KfsError with a short code (e.g. "batch-crc"); make_corpus.py asserts
these codes.

    python3 kfs_check.py FILE.kfs [FILE.index]   # prints rows or the error code
"""

from __future__ import annotations

import json
import struct
import sys
import zlib

import cramjam

from kfs_writer import (BATCH_HEADER_LEN, BATCH_MAGIC, FOOTER_LEN, FOOTER_MAGIC, HEADER_LEN,
                        INDEX_ENTRY_LEN, INDEX_HEADER_LEN, INDEX_MAGIC, SEGMENT_MAGIC,
                        XERIAL_MAGIC, crc32c, expected_row, wrap_i64)

MAX_DECOMPRESSED = 64 << 20   # per batch; refuse larger (decompression bombs)


class KfsError(Exception):
    def __init__(self, code: str, detail: str = ""):
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code


# ---------------------------------------------------------------- varints

class Reader:
    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None):
        self.buf, self.pos, self.end = buf, pos, len(buf) if end is None else end

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise KfsError("record-overrun", f"{what}: need {n} bytes at {self.pos}, end {self.end}")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def varint(self, max_bytes: int, bits: int, what: str) -> int:
        """Zigzag varint of at most `max_bytes` bytes whose value fits `bits`."""
        u = shift = 0
        for i in range(max_bytes):
            b = self.take(1, what)[0]
            u |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                n = (u >> 1) ^ -(u & 1)
                if not -(1 << (bits - 1)) <= n < (1 << (bits - 1)):
                    raise KfsError("varint-range", f"{what}={n} does not fit i{bits}")
                return n
        raise KfsError("varint-too-long", f"{what}: more than {max_bytes} bytes")

    def vint(self, what: str) -> int:
        return self.varint(5, 32, what)

    def vlong(self, what: str) -> int:
        return self.varint(10, 64, what)

    def nbytes(self, what: str):
        n = self.vint(what + " length")
        if n == -1:
            return None
        if n < -1:
            raise KfsError("negative-length", f"{what} length {n}")
        return self.take(n, what)


# ---------------------------------------------------------------- decompression

def _limit(n: int):
    if n > MAX_DECOMPRESSED:
        raise KfsError("decompressed-too-large", f"{n} bytes")


def _zstd_bound(data: bytes) -> int:
    """Upper bound of a zstd frame's output, from headers only."""
    if data[:4] != b"\x28\xb5\x2f\xfd" or len(data) < 6:
        raise KfsError("decompress", "zstd magic")
    fhd = data[4]
    fcs_flag, single = fhd >> 6, (fhd >> 5) & 1
    pos = 5 + (0 if single else 1) + [0, 1, 2, 4][fhd & 3]
    fcs_len = [1 if single else 0, 2, 4, 8][fcs_flag]
    if fcs_len:
        fcs = int.from_bytes(data[pos:pos + fcs_len], "little") + (256 if fcs_len == 2 else 0)
        _limit(fcs)
    pos += fcs_len
    total = 0
    while pos + 3 <= len(data):
        h = int.from_bytes(data[pos:pos + 3], "little")
        last, btype, size = h & 1, (h >> 1) & 3, h >> 3
        total += size if btype in (0, 1) else 128 * 1024
        _limit(total)
        pos += 3 + (1 if btype == 1 else size)
        if last:
            break
    return total


def _snappy_raw(block: bytes) -> bytes:
    """Raw snappy, refusing a declared (preamble) length over the limit."""
    r = Reader(block)
    n = u = shift = 0
    while True:
        b = r.take(1, "snappy preamble")[0]
        u |= (b & 0x7F) << shift
        shift += 7
        n += 1
        if not b & 0x80 or n == 5:
            break
    _limit(u)
    return bytes(cramjam.snappy.decompress_raw(block))


def decompress(codec: int, data: bytes) -> bytes:
    try:
        if codec == 1:
            d = zlib.decompressobj(wbits=31)
            out = d.decompress(data, MAX_DECOMPRESSED + 1)
            _limit(len(out))
            if not d.eof:
                raise KfsError("decompress", "gzip stream truncated")
            return out
        if codec == 2:
            if data.startswith(XERIAL_MAGIC):
                pos, out = 16, []
                while pos < len(data):
                    if pos + 4 > len(data):
                        raise KfsError("decompress", "xerial block header truncated")
                    (n,) = struct.unpack_from(">i", data, pos)
                    if n < 0 or pos + 4 + n > len(data):
                        raise KfsError("decompress", "xerial block length")
                    out.append(_snappy_raw(data[pos + 4:pos + 4 + n]))
                    _limit(sum(map(len, out)))
                    pos += 4 + n
                return b"".join(out)
            return _snappy_raw(data)
        if codec == 3:
            return bytes(cramjam.lz4.decompress(data))
        if codec == 4:
            _zstd_bound(data)
            return bytes(cramjam.zstd.decompress(data))
    except KfsError:
        raise
    except Exception as e:  # library errors
        raise KfsError("decompress", f"codec {codec}: {e}") from None
    raise KfsError("unknown-codec", str(codec))


# ---------------------------------------------------------------- segment

def _records(section: bytes, count: int, base_offset: int, last_offset_delta: int,
             base_ts: int, max_ts: int, log_append: bool) -> list[dict]:
    r = Reader(section)
    rows, prev_delta = [], -1
    for i in range(count):
        if r.pos == r.end:
            raise KfsError("record-count", f"{count} declared, section ends after {i}")
        length = r.vint("record length")
        if length < 0:
            raise KfsError("negative-length", f"record length {length}")
        if r.pos + length > r.end:
            raise KfsError("record-overrun", f"record length {length} past section end")
        rec = Reader(section, r.pos, r.pos + length)
        rec.take(1, "attributes")
        ts_delta = rec.vlong("timestampDelta")
        off_delta = rec.vint("offsetDelta")
        key = rec.nbytes("key")
        value = rec.nbytes("value")
        nh = rec.vint("headerCount")
        if nh < 0:
            raise KfsError("negative-length", f"header count {nh}")
        headers = []
        for _ in range(nh):
            hk = rec.nbytes("header key")
            if hk is None:
                raise KfsError("negative-length", "null header key")
            # Kept as bytes: Kafka does not check that header keys are UTF-8.
            headers.append((hk, rec.nbytes("header value")))
        if rec.pos != rec.end:
            raise KfsError("record-length-mismatch", f"{rec.end - rec.pos} unread bytes in record")
        r.pos = rec.end
        if off_delta <= prev_delta or off_delta > last_offset_delta:
            raise KfsError("offset-delta", f"{off_delta} after {prev_delta}, last {last_offset_delta}")
        prev_delta = off_delta
        rows.append(expected_row(base_offset + off_delta, max_ts if log_append else wrap_i64(base_ts + ts_delta),
                                 key, value, headers))
    if r.pos != r.end:
        raise KfsError("records-trailing", f"{r.end - r.pos} bytes after {count} records")
    return rows


def read_segment(data: bytes) -> dict:
    """Validate a whole segment; return its data rows and batch positions."""
    if len(data) < HEADER_LEN + FOOTER_LEN:
        raise KfsError("too-short", f"{len(data)} bytes")
    if data[:4] != SEGMENT_MAGIC:
        raise KfsError("segment-magic", repr(data[:4]))
    version, flags, base, count, _created, _res = struct.unpack_from(">HHqiqI", data, 4)
    if version != 1:
        raise KfsError("segment-version", str(version))
    crc, last = struct.unpack_from(">Iq", data, len(data) - FOOTER_LEN)
    if data[-4:] != FOOTER_MAGIC:
        raise KfsError("footer-magic", repr(data[-4:]))
    body_end = len(data) - FOOTER_LEN
    if crc32c(data[HEADER_LEN:body_end]) != crc:
        raise KfsError("body-crc")
    pos, rows, positions, total, prev_last, batch_base = HEADER_LEN, [], [], 0, None, []
    while pos < body_end:
        if body_end - pos < 12:
            raise KfsError("batch-truncated", f"{body_end - pos} bytes left")
        b_base, b_len = struct.unpack_from(">qi", data, pos)
        if b_len < BATCH_HEADER_LEN - 12 or pos + 12 + b_len > body_end:
            raise KfsError("batch-length", f"{b_len} at {pos}")
        end = pos + 12 + b_len
        _epoch, magic, b_crc = struct.unpack_from(">ibI", data, pos + 12)
        if magic != BATCH_MAGIC:
            raise KfsError("batch-magic", str(magic))
        if crc32c(data[pos + 21:end]) != b_crc:
            raise KfsError("batch-crc", f"at {pos}")
        attrs, lod, base_ts, max_ts, _pid, _pe, _seq, n = struct.unpack_from(">hiqqqhii", data, pos + 21)
        if n < 0:
            raise KfsError("record-count", str(n))
        if lod < 0:
            raise KfsError("offset-delta", f"lastOffsetDelta {lod}")
        if prev_last is not None and b_base <= prev_last:
            raise KfsError("offsets-not-increasing", f"batch base {b_base} <= {prev_last}")
        codec = attrs & 7
        if codec > 4:
            raise KfsError("unknown-codec", str(codec))
        section = data[pos + BATCH_HEADER_LEN:end]
        if codec:
            section = decompress(codec, section)
        brows = _records(section, n, b_base, lod, base_ts, max_ts, bool(attrs & 0x08))
        if not attrs & 0x20:   # control batches carry no data records
            rows += brows
        positions.append(pos)
        batch_base.append(b_base)
        total += n
        prev_last = b_base + lod
        pos = end
    if not positions:
        raise KfsError("no-batches")
    if base != batch_base[0]:
        raise KfsError("header-base-offset", f"{base} != {batch_base[0]}")
    if count != total:
        raise KfsError("header-message-count", f"{count} != {total}")
    if last != prev_last:
        raise KfsError("footer-last-offset", f"{last} != {prev_last}")
    return {"rows": rows, "positions": positions, "bases": batch_base}


# ---------------------------------------------------------------- index

def read_index(data: bytes, segment: dict | None = None) -> list[tuple[int, int]]:
    """Validate an index; with a decoded segment, check entries point at batches."""
    if len(data) < INDEX_HEADER_LEN:
        raise KfsError("index-too-short", f"{len(data)} bytes")
    if data[:4] != INDEX_MAGIC:
        raise KfsError("index-magic", repr(data[:4]))
    version, count, _interval, _res = struct.unpack_from(">Hiih", data, 4)
    if version != 1:
        raise KfsError("index-version", str(version))
    if count < 0 or len(data) != INDEX_HEADER_LEN + INDEX_ENTRY_LEN * count:
        raise KfsError("index-count", f"count {count}, {len(data)} bytes")
    entries = [struct.unpack_from(">qi", data, INDEX_HEADER_LEN + i * INDEX_ENTRY_LEN)
               for i in range(count)]
    for (o1, p1), (o2, p2) in zip(entries, entries[1:]):
        if o2 <= o1 or p2 <= p1:
            raise KfsError("index-not-increasing", f"({o1},{p1}) then ({o2},{p2})")
    if entries and entries[0][1] != HEADER_LEN:
        raise KfsError("index-first-position", str(entries[0][1]))
    if segment is not None:
        at = dict(zip(segment["positions"], segment["bases"]))
        for o, p in entries:
            if p not in at:
                raise KfsError("index-position", f"{p} is not a batch start")
            if at[p] != o:
                raise KfsError("index-offset", f"offset {o} but batch at {p} has base {at[p]}")
    return entries


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        sys.exit(2)
    try:
        seg = read_segment(open(sys.argv[1], "rb").read())
        if len(sys.argv) == 3:
            read_index(open(sys.argv[2], "rb").read(), seg)
    except KfsError as e:
        print("error", e)
        sys.exit(1)
    for row in seg["rows"]:
        print(json.dumps(row))
