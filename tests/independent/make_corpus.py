#!/usr/bin/env python3
"""Write a corpus of MALFORMED `.kfs` and `.index` files, one defect each.

    python3 make_corpus.py --out tests/corpus

Every file is built from a small valid segment with exactly one defect
injected. CRCs (batch and body) are recomputed after the mutation wherever
they would otherwise hide the defect, so the intended defect is the first
thing a correct decoder hits. Each file is checked with kfs_check.py, which
must fail with the expected error code (listed in README.md).

Output:
  OUT/*.kfs              malformed segments
  OUT/index/X.index      malformed index, paired with a VALID OUT/index/X.kfs
  OUT/valid/             the unmutated sources (must decode cleanly)
  OUT/manifest.json      {"relative/path": "defect description"} for every malformed file
  OUT/README.md          the same as a table, with sizes and the reference check code
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kfs_check import KfsError, read_index, read_segment  # noqa: E402
from kfs_writer import (CODEC_IDS, FOOTER_LEN, HEADER_LEN, Batch, Record, assemble_batch,  # noqa: E402
                        build_index, build_index_bytes, build_segment, compress, crc32c,
                        encode_header, frame_record, index_entries, patch, uvarint, varint)

TS = 1_700_000_000_000
CREATED = TS + 1_000

# ---------------------------------------------------------------- valid material


def base_batches() -> list[Batch]:
    """Three small uncompressed batches: offsets 100-102, 103-104, 105-106."""
    return [
        Batch(100, TS, [Record(0, 0, b"k0", b"v0", [("h", b"x")]),
                        Record(1, 5, b"k1", b"v1", []),
                        Record(2, -3, None, b"v2", [("h2", None)])]),
        Batch(103, TS + 10, [Record(0, 0, b"k3", b"v3", []), Record(1, 1, b"k4", b"", [])]),
        Batch(105, TS + 20, [Record(0, 0, b"k5", None, []), Record(1, 2, b"", b"v6", [])]),
    ]


def compressible_records() -> list[Record]:
    text = b"the quick brown fox jumps over the lazy dog; " * 12
    return [Record(i, i, b"key-%d" % i, text, [("n", b"%d" % i)]) for i in range(4)]


def seg_of(batches: list[bytes], **kw) -> bytes:
    return build_segment(batches, CREATED, **kw)


def enc(batches: list[Batch]) -> list[bytes]:
    return [b.encode() for b in batches]


def raw_batch(base: int, blobs: list[bytes], *, codec: str = "none", count: int | None = None,
              lod: int | None = None, attributes: int | None = None,
              section: bytes | None = None) -> bytes:
    """A batch from pre-encoded record blobs; CRC and length are computed."""
    if section is None:
        section = compress(codec, b"".join(blobs))
    return assemble_batch(base, CODEC_IDS[codec] if attributes is None else attributes,
                          len(blobs) - 1 if lod is None else lod, TS, TS + 10,
                          len(blobs) if count is None else count, section)


def rec(body_parts: list[bytes]) -> bytes:
    """Length-prefixed record from raw field encodings."""
    return frame_record(b"".join(body_parts))


def good_fields(i: int, key=b"k", value=b"v") -> list[bytes]:
    """Field encodings of a plain record (attributes, tsDelta, offsetDelta, key, value, 0 headers)."""
    return [b"\x00", varint(i), varint(i), varint(len(key)) + key, varint(len(value)) + value,
            varint(0)]


def with_segment(first_batch: bytes, base: int = 100) -> bytes:
    """Segment: the given (defective) batch followed by a normal batch."""
    tail = Batch(base + 10, TS + 30, [Record(0, 0, b"tail", b"t", [])]).encode()
    return seg_of([first_batch, tail])


def set_body_crc(seg: bytes) -> bytes:
    crc = crc32c(seg[HEADER_LEN:-FOOTER_LEN])
    return patch(seg, len(seg) - FOOTER_LEN, ">I", crc)


# ---------------------------------------------------------------- codec corruption

def corrupt_payload(codec: str, data: bytes) -> bytes:
    """Make a compressed stream structurally invalid (not just bit-flipped, so
    every conforming decoder fails whether or not it verifies checksums)."""
    b = bytearray(data)
    if codec == "gzip":
        b[10] |= 0x06          # first deflate block: BTYPE = 11 (reserved)
    elif codec in ("snappy-raw", "snappy-xerial"):
        p = 20 if codec == "snappy-xerial" else 0   # xerial: 16-byte header + i32 length
        while b[p] & 0x80:     # skip the uncompressed-length preamble
            p += 1
        b[p + 1] = 0x01        # first element: a copy at output position 0
    elif codec == "lz4":
        flg = b[4]
        p = 7 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
        (size,) = struct.unpack_from("<I", b, p)
        assert not size & 0x80000000, "lz4 block stored uncompressed; use more compressible data"
        b[p + 4:p + 7] = b"\x00\x00\x00"   # token: 0 literals, then match offset 0 (invalid)
    elif codec == "zstd":
        fhd = b[4]
        single = (fhd >> 5) & 1
        fcs = [1 if single else 0, 2, 4, 8][fhd >> 6]
        p = 5 + (0 if single else 1) + [0, 1, 2, 4][fhd & 3] + fcs
        b[p] |= 0x06           # first block: Block_Type = 3 (reserved)
    else:
        raise ValueError(codec)
    return bytes(b)


def zstd_rle_bomb(total: int, declare_size: bool) -> bytes:
    """A zstd frame of RLE blocks of zeros: 4 bytes per 128 KiB of output.
    With declare_size, Frame_Content_Size (8 bytes) states `total`."""
    block = 128 * 1024
    assert total % block == 0
    fhd = 0xC0 if declare_size else 0x00       # FCS 8 bytes / none; not single-segment
    out = [b"\x28\xb5\x2f\xfd", bytes([fhd, 0x38])]   # window descriptor: 2^17 bytes
    if declare_size:
        out.append(struct.pack("<Q", total))
    n = total // block
    for i in range(n):
        hdr = (block << 3) | (1 << 1) | (1 if i == n - 1 else 0)   # RLE block
        out.append(hdr.to_bytes(3, "little") + b"\x00")
    return b"".join(out)


def gzip_bomb(total: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(16 << 20)
    parts = [c.compress(chunk) for _ in range(total // len(chunk))]
    return b"".join(parts) + c.flush()


# ---------------------------------------------------------------- the corpus

def build_corpus() -> tuple[dict, dict, dict]:
    """Return (segments, indexes, valid): name -> (bytes, expected code, description)."""
    S: dict[str, tuple[bytes, str, str]] = {}

    def add(name, data, code, desc):
        assert name not in S, name
        S[name] = (data, code, desc)

    batches = enc(base_batches())
    good = seg_of(batches)
    b1_len = len(batches[0])

    # ---- file-level: truncation and header/footer
    add("empty.kfs", b"", "too-short", "zero-length file")
    add("header-only-truncated.kfs", good[:HEADER_LEN], "too-short",
        "only the 32-byte header; no body, no footer")
    cuts = {
        10: "inside the segment header",
        HEADER_LEN + 30: "inside the first batch header",
        HEADER_LEN + 61 + 6: "inside the first batch's records",
        HEADER_LEN + b1_len + 5: "inside the second batch's baseOffset",
        len(good) - 8: "inside the footer",
        len(good) - FOOTER_LEN: "footer missing (body complete)",
    }
    for n, where in cuts.items():
        add(f"truncated-at-{n}.kfs", good[:n], "too-short" if n < 48 else "footer-magic",
            f"valid {len(good)}-byte segment cut to {n} bytes: {where}")
    add("bad-magic.kfs", b"KAFZ" + good[4:], "segment-magic", "header magic KAFZ instead of KAFS")
    add("bad-version.kfs", patch(good, 4, ">H", 2), "segment-version", "header version 2 (only 1 exists)")
    add("bad-footer-magic.kfs", good[:-4] + b"END?", "footer-magic", "footer magic END? instead of END!")
    add("body-crc-mismatch.kfs", patch(good, len(good) - FOOTER_LEN, ">I",
                                       crc32c(good[HEADER_LEN:-FOOTER_LEN]) ^ 0x1),
        "body-crc", "footer CRC-32C field off by one bit; batches and their CRCs are intact")
    add("header-message-count-mismatch.kfs", seg_of(batches, message_count=8),
        "header-message-count", "header message count 8, batches hold 7 records")
    add("header-base-offset-mismatch.kfs", seg_of(batches, base_offset=99),
        "header-base-offset", "header base offset 99, first batch base offset 100")
    add("footer-last-offset-mismatch.kfs", seg_of(batches, last_offset=107),
        "footer-last-offset", "footer last offset 107, last batch ends at 106 (body CRC valid)")

    # ---- batch framing
    b2_bad = bytearray(batches[1])
    b2_bad[-1] ^= 0x40                                    # flip a bit in the last record
    add("batch-crc-mismatch.kfs", seg_of([batches[0], bytes(b2_bad), batches[2]]), "batch-crc",
        "second batch's records altered without updating its CRC (body CRC recomputed)")
    add("batch-magic-1.kfs", seg_of([batches[0], patch(batches[1], 16, ">b", 1), batches[2]]),
        "batch-magic", "second batch has magic 1 (v0/v1 message set), not 2; body CRC recomputed")
    big = seg_of([Batch(100, TS, [Record(0, 0, b"pad", b"p" * 3900, [])]).encode()])
    add("huge-batch-length.kfs", set_body_crc(patch(big, HEADER_LEN + 8, ">i", 0x7FFFFFFF)),
        "batch-length", f"{len(big)}-byte file whose only batch claims batchLength 0x7fffffff")
    add("negative-batch-length.kfs", seg_of([patch(batches[0], 8, ">i", -12)] + batches[1:]),
        "batch-length", "first batch batchLength -12 (12 + length = 0: a naive reader loops forever)")
    add("batch-length-too-small.kfs", seg_of([patch(batches[0], 8, ">i", 20)] + batches[1:]),
        "batch-length", "first batch batchLength 20, less than the 49 bytes of fixed batch header after it")
    last = batches[2]
    add("batch-overruns-footer.kfs", seg_of(batches[:2] + [patch(last, 8, ">i", len(last) - 12 + 10)]),
        "batch-length", "last batch's batchLength 10 bytes too long: it would extend into the footer")
    add("body-trailing-partial-batch.kfs", set_body_crc(good[:-FOOTER_LEN] + b"\x00" * 7 + good[-FOOTER_LEN:]), "batch-truncated",
        "7 zero bytes between the last batch and the footer (too short for a batch); body CRC covers them")

    # ---- offsets across batches
    add("offsets-not-increasing.kfs", seg_of([batches[0], patch(batches[1], 0, ">q", 100), batches[2]]),
        "offsets-not-increasing", "second batch base offset 100 equals the first batch's (CRCs valid)")
    add("batches-overlap.kfs", seg_of([batches[0], patch(batches[1], 0, ">q", 102), batches[2]]),
        "offsets-not-increasing", "second batch starts at 102 but the first covers 100-102")

    # ---- batch header fields (CRC recomputed by assemble_batch)
    blobs = [rec(good_fields(i)) for i in range(3)]
    add("unknown-codec-5.kfs", with_segment(raw_batch(100, blobs, attributes=5)), "unknown-codec",
        "attributes codec bits = 5 (only 0-4 exist); records stored plain")
    add("record-count-too-high.kfs", with_segment(raw_batch(100, blobs, count=4, lod=3)), "record-count",
        "recordCount 4 (lastOffsetDelta 3) but only 3 records in the batch")
    add("record-count-too-low.kfs", with_segment(raw_batch(100, blobs, count=2, lod=1)),
        "records-trailing", "recordCount 2 (lastOffsetDelta 1) but 3 records in the batch")
    add("record-count-huge.kfs", seg_of([raw_batch(100, blobs, count=0x7FFFFFFF)]), "record-count",
        "recordCount 0x7fffffff with 3 records (do not pre-allocate by count)")
    add("negative-record-count.kfs", with_segment(raw_batch(100, blobs, count=-1)), "record-count",
        "recordCount -1")
    add("trailing-garbage-in-records.kfs", with_segment(raw_batch(100, blobs + [b"\x00\x01\x02"], count=3, lod=2)),
        "records-trailing", "3 stray bytes after the last of the 3 declared records, inside the batch")
    add("trailing-garbage-in-compressed-records.kfs",
        with_segment(raw_batch(100, blobs + [b"\x00\x01\x02"], codec="zstd", count=3, lod=2)),
        "records-trailing", "zstd batch whose decompressed records section has 3 stray bytes after the 3 records")
    add("offset-delta-past-last-offset-delta.kfs", with_segment(raw_batch(100, blobs, lod=1)),
        "offset-delta", "records have offsetDelta 0,1,2 but lastOffsetDelta is 1")
    nonmono = [rec(good_fields(0)), rec(good_fields(2)), rec(good_fields(1))]
    add("offset-deltas-not-increasing.kfs", with_segment(raw_batch(100, nonmono, lod=2)),
        "offset-delta", "record offsetDeltas 0, 2, 1 (must increase)")

    # ---- record-level (batch CRC and body CRC valid; the decoder must catch the field)
    f = good_fields(0)
    body = b"".join(f)
    add("record-huge-length.kfs", with_segment(raw_batch(100, [varint(1_000_000) + body])),
        "record-overrun", "record length varint 1000000, far past the end of the batch")
    add("record-negative-length.kfs", with_segment(raw_batch(100, [varint(-3) + body])),
        "negative-length", "record length varint -3")
    add("record-negative-key-length.kfs",
        with_segment(raw_batch(100, [rec([f[0], f[1], f[2], varint(-5) + b"k", f[4], f[5]])])),
        "negative-length", "record keyLength -5 (only -1 means null)")
    add("record-negative-value-length.kfs",
        with_segment(raw_batch(100, [rec([f[0], f[1], f[2], f[3], varint(-2) + b"v", f[5]])])),
        "negative-length", "record valueLength -2 (only -1 means null)")
    add("record-negative-header-count.kfs",
        with_segment(raw_batch(100, [rec(f[:5] + [varint(-1)])])),
        "negative-length", "record headerCount -1")
    add("record-value-length-overrun.kfs",
        with_segment(raw_batch(100, [rec([f[0], f[1], f[2], f[3], varint(200) + b"v", f[5]]), rec(good_fields(1))],
                               count=2)),
        "record-overrun", "record valueLength 200 but the record has 2 bytes left")
    add("record-length-exceeds-fields.kfs", with_segment(raw_batch(100, [rec(f + [b"\xaa\xbb"]), rec(good_fields(1))])),
        "record-length-mismatch", "record length covers 2 bytes more than its fields use")
    short = varint(len(body) - 2) + body
    add("record-length-short-of-fields.kfs", with_segment(raw_batch(100, [short, rec(good_fields(1))])),
        "record-overrun", "record length 2 bytes less than its fields need (fields run into the next record)")
    add("varint-overflow.kfs",
        with_segment(raw_batch(100, [rec([f[0], b"\xff" * 10 + b"\x01", f[2], f[3], f[4], f[5]])])),
        "varint-too-long", "record timestampDelta is an 11-byte varint (a varlong has at most 10)")
    add("varint-int32-out-of-range.kfs",
        with_segment(raw_batch(100, [rec([f[0], f[1], uvarint(1 << 34), f[3], f[4], f[5]])])),
        "varint-range", "record offsetDelta varint decodes to 2^33, outside i32")
    hk = lambda k: [f[0], f[1], f[2], f[3], f[4], varint(1), k]  # noqa: E731
    add("header-key-null.kfs",
        with_segment(raw_batch(100, [rec(hk(varint(-1) + varint(1) + b"x"))])),
        "negative-length", "record header key length -1 (header keys cannot be null)")
    assert encode_header("h", b"x") == varint(1) + b"h" + varint(1) + b"x"

    # ---- compression
    crecs = compressible_records()
    plain = b"".join(r.encode() for r in crecs)
    for codec in ("gzip", "snappy-raw", "snappy-xerial", "lz4", "zstd"):
        payload = corrupt_payload(codec, compress(codec, plain))
        b = raw_batch(100, [r.encode() for r in crecs], codec=codec, section=payload)
        add(f"corrupt-{codec}.kfs", with_segment(b), "decompress",
            f"{codec} payload made structurally invalid; batch CRC and body CRC recomputed")
    snappy_lie = uvarint(0xFFFFFFFF) + b"\x0chell"   # preamble 4 GiB, one 4-byte literal
    add("snappy-raw-huge-declared-length.kfs",
        with_segment(raw_batch(100, [b""], codec="snappy-raw", count=1, lod=0, section=snappy_lie)),
        "decompressed-too-large", "raw snappy preamble declares 4 GiB of output for a 10-byte stream "
                                  "(do not pre-allocate by the declared length)")
    gib = 1 << 30
    add("zstd-bomb.kfs", with_segment(raw_batch(100, [b""], codec="zstd", section=zstd_rle_bomb(gib, True))),
        "decompressed-too-large", "zstd payload (RLE blocks) expanding to 1 GiB of zeros, "
                                  "content size declared in the frame header")
    add("zstd-bomb-no-content-size.kfs",
        with_segment(raw_batch(100, [b""], codec="zstd", section=zstd_rle_bomb(gib, False))),
        "decompressed-too-large", "zstd payload expanding to 1 GiB of zeros, no content size in the frame header")
    add("gzip-bomb.kfs", with_segment(raw_batch(100, [b""], codec="gzip", section=gzip_bomb(320 << 20))),
        "decompressed-too-large", "gzip payload expanding to 320 MiB of zeros")

    # ---- index files, each paired with a valid segment of the same stem
    pos = [p for _, p in index_entries(batches, interval=1)]      # 32, start of batch 2, batch 3
    I: dict[str, tuple[bytes, str, str]] = {}

    def add_index(name, data, code, desc):
        I[name] = (data, code, desc)

    add_index("empty.index", b"", "index-too-short", "zero-length index")
    add_index("header-truncated.index", build_index(batches)[:10], "index-too-short", "index cut to 10 bytes")
    add_index("bad-magic.index", b"IDX1" + build_index(batches)[4:], "index-magic", "magic IDX1 instead of IDX\\0")
    add_index("bad-version.index", build_index_bytes([(100, 32)], version=2), "index-version", "version 2")
    add_index("count-larger-than-file.index", build_index_bytes([(100, 32), (103, pos[1])], count=1000),
              "index-count", "entry count 1000, file holds 2 entries")
    add_index("negative-count.index", build_index_bytes([(100, 32)], count=-1), "index-count", "entry count -1")
    add_index("trailing-bytes.index", build_index_bytes([(100, 32)]) + b"\x00" * 5, "index-count",
              "5 bytes after the last of the declared entries")
    add_index("offsets-not-increasing.index", build_index_bytes([(100, 32), (105, pos[2]), (103, pos[1])]),
              "index-not-increasing", "entries (100,32), (105,p3), (103,p2): each names a real batch, out of order")
    add_index("position-not-batch-start.index", build_index_bytes([(100, 32), (103, pos[1] + 5)]),
              "index-position", f"second entry position {pos[1] + 5}: 5 bytes into the batch at {pos[1]}")
    add_index("position-past-end.index", build_index_bytes([(100, 32), (103, len(good) + 100)]),
              "index-position", "second entry position beyond the end of the segment")
    add_index("first-position-not-32.index", build_index_bytes([(103, pos[1])]), "index-first-position",
              "single entry for the second batch; the first batch (position 32) has none")
    add_index("offset-mismatch-at-position.index", build_index_bytes([(100, 32), (104, pos[1])]),
              "index-offset", f"entry (104,{pos[1]}) but the batch at {pos[1]} has base offset 103")

    valid = {"base.kfs": good, "base.index": build_index(batches),
             "base.expected.jsonl": jsonl([r for b in base_batches() for r in b.data_records()])}
    for codec in ("gzip", "snappy-raw", "snappy-xerial", "lz4", "zstd"):
        b = Batch(100, TS, crecs, codec=codec)
        tail = Batch(110, TS + 30, [Record(0, 0, b"tail", b"t", [])])
        stem = f"compressible-{codec}"
        valid[stem + ".kfs"] = seg_of([b.encode(), tail.encode()])
        valid[stem + ".expected.jsonl"] = jsonl(b.data_records() + tail.data_records())
    return S, I, valid | {"_index_pair": good}


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


# ---------------------------------------------------------------- output


def check(name: str, data: bytes, code: str, segment: bytes | None = None):
    try:
        if segment is None:
            read_segment(data)
        else:
            read_index(data, read_segment(segment))
    except KfsError as e:
        if e.code != code:
            raise SystemExit(f"{name}: expected {code}, reference reader says {e}")
        return
    raise SystemExit(f"{name}: reference reader accepted it")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out

    segs, idxs, valid = build_corpus()
    pair = valid.pop("_index_pair")
    for sub in ("index", "valid"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    os.makedirs(os.path.join(out, "index"), exist_ok=True)
    os.makedirs(os.path.join(out, "valid"), exist_ok=True)
    for name in os.listdir(out):          # drop stale corpus files from earlier runs
        if name.endswith(".kfs"):
            os.remove(os.path.join(out, name))

    manifest, rows = {}, []
    for name, (data, code, desc) in segs.items():
        check(name, data, code)
        open(os.path.join(out, name), "wb").write(data)
        manifest[name] = desc
        rows.append((name, len(data), code, desc))
    for name, (data, code, desc) in idxs.items():
        check(name, data, code, pair)
        stem = name[:-len(".index")]
        open(os.path.join(out, "index", name), "wb").write(data)
        open(os.path.join(out, "index", stem + ".kfs"), "wb").write(pair)
        manifest["index/" + name] = desc + f" (paired with the valid index/{stem}.kfs)"
        rows.append(("index/" + name, len(data), code, desc))
    for name, data in valid.items():
        open(os.path.join(out, "valid", name), "wb").write(data)
        if name.endswith(".kfs"):
            seg = read_segment(data)
            want = [json.loads(line) for line in valid[name[:-4] + ".expected.jsonl"].splitlines()]
            assert seg["rows"] == want, name
    read_index(valid["base.index"], read_segment(valid["base.kfs"]))

    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1, ensure_ascii=False, sort_keys=True)
        fh.write("\n")
    write_readme(out, rows, pair)
    total = sum(r[1] for r in rows)
    print(f"wrote {len(segs)} malformed segments, {len(idxs)} malformed indexes "
          f"({total} bytes) and {len(valid)} valid files to {out}")
    return 0


def write_readme(out: str, rows: list, pair: bytes):
    lines = [
        "# Malformed KafScale segment corpus",
        "",
        "Generated by `tests/independent/make_corpus.py` (do not edit by hand; regenerate with",
        "`python3 tests/independent/make_corpus.py --out tests/corpus`). Every file below must be",
        "REJECTED by the decoder with an error, never a panic, hang or huge allocation.",
        "",
        "Each file is a small valid segment with one injected defect. Batch and body CRCs are",
        "recomputed wherever they would otherwise mask the defect, so the defect is the first thing",
        "a correct decoder hits. `check` is the error code of the Python reference reader",
        "(`tests/independent/kfs_check.py`), which make_corpus.py asserts; it shows which check",
        "should fire, and the Rust error kind need not match it by name.",
        "",
        "- `manifest.json`: `{\"file\": \"defect\"}` for every malformed file (paths relative to here).",
        f"- `index/X.index` is malformed and `index/X.kfs` is the same VALID {len(pair)}-byte segment",
        "  (3 batches, offsets 100-106, batch positions as in `valid/base.index`); read them together.",
        "- `valid/`: the unmutated sources (`base.kfs`, `base.index`, and `compressible-<codec>.kfs`,",
        "  which are what the `corrupt-<codec>.kfs` files were made from) with `.expected.jsonl`.",
        "  These must decode cleanly.",
        "",
        "| file | bytes | check | defect |",
        "|---|---:|---|---|",
    ]
    for name, size, code, desc in rows:
        lines.append(f"| `{name}` | {size} | {code} | {desc.replace('|', '/')} |")
    lines += ["", f"Total malformed bytes: {sum(r[1] for r in rows)}.", ""]
    with open(os.path.join(out, "README.md"), "w") as fh:
        fh.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
