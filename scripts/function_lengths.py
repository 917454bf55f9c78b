#!/usr/bin/env python3
"""Files over a line limit and functions over a line limit in a crate's sources.

Usage: scripts/function_lengths.py [--file-limit 600] [--fn-limit 100] [--check] DIR...

Lists every `.rs` file under DIR longer than the file limit and every function body
longer than the function limit (from its `fn` line to its closing brace), longest first.
Test modules (`*_tests.rs`, `tests.rs`, `tests/`) are left out: the limits are for the
code a reader follows. With `--check`, exits 1 when anything is listed.
"""

import argparse
import pathlib
import re
import sys

FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")


def strip(line: str, state: dict) -> str:
    """The line without comments, string and char literals (braces in them do not count)."""
    out = []
    i = 0
    while i < len(line):
        c = line[i]
        if state["block"]:
            if line.startswith("*/", i):
                state["block"] = False
                i += 2
                continue
            i += 1
            continue
        if state["string"]:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                state["string"] = False
            i += 1
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        if c == '"':
            state["string"] = True
            i += 1
            continue
        if c == "'" and re.match(r"'(\\.|[^\\'])'", line[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", line[i:]).group(0))
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path: pathlib.Path):
    """(name, first line, length) of every function in the file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    state = {"block": False, "string": False}
    code = [strip(line, state) for line in lines]
    found = []
    for start, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth = 0
        opened = False
        for end in range(start, len(code)):
            for c in code[end]:
                if c == "{":
                    depth += 1
                    opened = True
                elif c == "}":
                    depth -= 1
                elif c == ";" and not opened and depth == 0:
                    break
            else:
                if opened and depth == 0:
                    found.append((m.group(1), start + 1, end - start + 1))
                    break
                continue
            break
    return found


def is_test(path: pathlib.Path) -> bool:
    return path.name == "tests.rs" or path.name.endswith("_tests.rs") or "tests" in path.parts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--file-limit", type=int, default=600)
    parser.add_argument("--fn-limit", type=int, default=100)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("dirs", nargs="+")
    args = parser.parse_args()
    long_files, long_fns = [], []
    for root in args.dirs:
        for path in sorted(pathlib.Path(root).rglob("*.rs")):
            if is_test(path):
                continue
            count = len(path.read_text(encoding="utf-8").splitlines())
            if count > args.file_limit:
                long_files.append((count, str(path)))
            for name, line, length in functions(path):
                if length > args.fn_limit:
                    long_fns.append((length, f"{path}:{line} {name}"))
    for count, where in sorted(long_files, reverse=True):
        print(f"file {count:5} lines  {where}")
    for length, where in sorted(long_fns, reverse=True):
        print(f"fn   {length:5} lines  {where}")
    if not long_files and not long_fns:
        print(f"no file over {args.file_limit} lines, no function over {args.fn_limit} lines")
    return 1 if args.check and (long_files or long_fns) else 0


if __name__ == "__main__":
    sys.exit(main())
