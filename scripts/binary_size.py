#!/usr/bin/env python3
"""Where the Lambda binaries' bytes go: code size per crate, from the symbol table.

Build the functions with symbols kept, then run this on the binaries:

    CARGO_PROFILE_RELEASE_STRIP=none cargo lambda build --release --arm64 --locked \\
        --bin kfs-converter --bin kfs-committer
    python3 scripts/binary_size.py target/lambda/kfs-committer/bootstrap

Prints the stripped size (what the Lambda package holds, via `llvm-strip`) and the
largest crates by the size of their functions and data (`llvm-nm --print-size`,
demangled; generic code is counted in the crate that defines it).
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SYMBOL = re.compile(r"^([0-9a-f]+) ([0-9a-f]+) (\w) (.*)$")
CRATE = re.compile(r"^(?:<|_<)?(?:&(?:mut )?)?(?:dyn )?([A-Za-z_][A-Za-z0-9_]*)::")


def readable(symbol: str) -> str:
    """Undoes the legacy mangling escapes llvm-nm leaves in place."""
    for escaped, plain in (("_$LT$", "<"), ("$LT$", "<"), ("$GT$", ">"), ("$u20$", " "),
                           ("$RF$", "&"), ("$BP$", "*"), ("$C$", ","), ("..", "::")):
        symbol = symbol.replace(escaped, plain)
    return symbol


def crate_of(symbol: str) -> str:
    symbol = readable(symbol)
    match = CRATE.match(symbol.lstrip("<&* "))
    if match:
        return match.group(1)
    if symbol.startswith(("ZSTD", "HUF_", "FSE_", "ZSTDv", "HIST_", "COVER_")):
        return "zstd-sys (C)"
    if symbol.startswith(("sqlite3", "sqlite")):
        return "libsqlite3-sys (C)"
    if symbol.startswith(("aws_lc", "AWS_LC", "bssl", "BORINGSSL", "EVP_", "RSA_", "EC_", "BN_")):
        return "aws-lc-sys (C)"
    if "ring_core" in symbol:
        return "ring (C/asm)"
    if symbol.startswith(("ecp_nistz256", "curve25519", "edwards25519", "fiat_", "kObjects")):
        return "aws-lc-sys (C)"
    if symbol.startswith("anon."):
        return "(anonymous constants)"
    return "(other)"


def main() -> None:
    for binary in map(Path, sys.argv[1:]):
        with tempfile.TemporaryDirectory() as tmp:
            stripped = Path(tmp) / "stripped"
            subprocess.run(["llvm-strip", "-o", str(stripped), str(binary)], check=True)
            stripped_size = stripped.stat().st_size
        out = subprocess.run(
            ["llvm-nm", "--print-size", "--size-sort", "--demangle", str(binary)],
            check=True, capture_output=True, text=True,
        ).stdout
        sizes: collections.Counter[str] = collections.Counter()
        for line in out.splitlines():
            match = SYMBOL.match(line)
            if not match or match.group(3).lower() not in "tdrb":
                continue
            sizes[crate_of(match.group(4))] += int(match.group(2), 16)
        total = sum(sizes.values())
        sections = subprocess.run(
            ["llvm-size", "-A", str(binary)], check=True, capture_output=True, text=True
        ).stdout
        unwind = sum(int(line.split()[1]) for line in sections.splitlines()
                     if line.startswith((".eh_frame", ".gcc_except_table")))
        relocations = sum(int(line.split()[1]) for line in sections.splitlines()
                          if line.startswith((".rela", ".data.rel.ro")))
        print(f"{binary}: {stripped_size:,} bytes stripped; {total:,} bytes in sized symbols, "
              f"{unwind:,} in unwind tables, {relocations:,} in relocations and relocated data")
        for crate, size in sizes.most_common(25):
            print(f"  {size / 1e6:6.2f} MB  {size / total:5.1%}  {crate}")


if __name__ == "__main__":
    main()
