#!/usr/bin/env python3
"""Checks a Puffin file of deletion vectors with pyiceberg's own reader (its Puffin
parser and pyroaring): every blob's referenced data file and positions are the
expected ones, and each blob's CRC-32 and magic are right (pyiceberg skips both).

    python3 tests/python/check_vectors.py FILE.puffin '{"s3://…/a.parquet": [1, 5]}'
"""

from __future__ import annotations

import json
import sys
import zlib


def main() -> None:
    path, expected_json = sys.argv[1:3]
    from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
    from pyiceberg.table.puffin import PuffinFile

    with open(path, "rb") as f:
        puffin = PuffinFile(f.read())
    expected = {k: sorted(v) for k, v in json.loads(expected_json).items()}
    seen = {dv.referenced_data_file: sorted(dv.to_vector().to_pylist())
            for dv in deletion_vectors_from_puffin_file(puffin)}
    if seen != expected:
        for file in sorted(set(seen) | set(expected)):
            a, b = seen.get(file, []), expected.get(file, [])
            if a != b:
                print(f"{file}: pyiceberg read {len(a)} positions {a[:5]}…, expected {len(b)} {b[:5]}…")
        sys.exit(1)
    for blob in puffin.footer.blobs:
        payload = puffin.get_blob_payload(blob)
        length = int.from_bytes(payload[:4], "big")
        vector = payload[4:4 + length]
        if vector[:4] != bytes([0xD1, 0xD3, 0x39, 0x64]):
            sys.exit(f"{blob.properties}: wrong magic {vector[:4]!r}")
        if int.from_bytes(payload[4 + length:8 + length], "big") != zlib.crc32(vector):
            sys.exit(f"{blob.properties}: wrong CRC")
        if blob.properties.get("cardinality") != str(len(expected[blob.properties["referenced-data-file"]])):
            sys.exit(f"{blob.properties}: wrong cardinality")
    print(f"pyiceberg read {len(seen)} deletion vectors, CRCs and magics right")


if __name__ == "__main__":
    main()
