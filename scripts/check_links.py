#!/usr/bin/env python3
"""Checks the relative links of the project's Markdown: README.md, docs/**/*.md and
every other Markdown file git knows (tracked, or new and not ignored).

A link `[text](path)`, `![alt](path)` or `[label]: path` must name a file or folder
that exists, relative to the linking file; a `#anchor` (alone, or after a path to a
Markdown file) must be the slug of a heading of that file, as GitHub makes them
(lowercased, punctuation dropped, spaces as hyphens, `-1`, `-2` after repeats).
Links with a scheme (`https:`, `mailto:`) are not checked, nor anything inside code
blocks or code spans. Prints each broken link as `file:line: link: why` and exits 1
if there is one; exits 0 otherwise.

    python3 scripts/check_links.py [FILE.md ...]     (default: every Markdown file)
"""

import os
import re
import subprocess
import sys
import unicodedata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FENCE = re.compile(r"^\s{0,3}(```+|~~~+)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target); the text may hold code spans and brackets one deep.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def markdown_files():
    """README.md, docs/ and every other Markdown file git knows, as repository paths."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.md"],
            cwd=REPO, check=True, capture_output=True, text=True,
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        listed = []
        for root, dirs, files in os.walk(REPO):
            dirs[:] = [d for d in dirs if d not in (".git", "target")]
            listed += [os.path.relpath(os.path.join(root, f), REPO) for f in files if f.endswith(".md")]
    return sorted({path for path in listed if path and os.path.isfile(os.path.join(REPO, path))})


def slug(text):
    """GitHub's anchor of a heading: its rendered text lowercased, everything but
    letters, digits, marks, `_`, `-` and spaces dropped, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    kept = []
    for char in text.lower():
        category = unicodedata.category(char)
        if char in "-_ " or category[0] in "LNM":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def lines_outside_code(path, blank_spans=True):
    """(line number, text) of each line outside fenced code blocks, code spans blanked
    unless `blank_spans` is false."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    fence = None
    for number, line in enumerate(lines, 1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)[0] * 3
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        yield number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line) if blank_spans else line


ANCHORS = {}


def anchors(path):
    """The heading anchors of a Markdown file (cached)."""
    if path not in ANCHORS:
        found, seen = set(), {}
        # Code spans kept: their text is part of the anchor.
        for _, line in lines_outside_code(path, blank_spans=False):
            heading = HEADING.match(line)
            if not heading:
                continue
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        ANCHORS[path] = found
    return ANCHORS[path]


def targets(path):
    """(line number, target) of every link of the file outside code; a link's text
    may run over several lines."""
    kept = dict(lines_outside_code(path))
    with open(path, encoding="utf-8") as handle:
        count = handle.read().count("\n") + 1
    text = "\n".join(kept.get(number, "") for number in range(1, count + 1))
    for match in INLINE.finditer(text):
        yield text.count("\n", 0, match.start(1)) + 1, match.group(1)
    for number, line in kept.items():
        reference = REFERENCE.match(line)
        if reference:
            yield number, reference.group(1)


def check(relative):
    path = os.path.join(REPO, relative)
    broken = []
    for number, target in sorted(targets(path)):
        target = target.strip("<>")
        if not target or SCHEME.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        if file_part:
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            if not os.path.exists(resolved):
                broken.append((number, target, f"{file_part} does not exist"))
                continue
        else:
            resolved = path
        if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
            if anchor not in anchors(resolved):
                where = os.path.relpath(resolved, REPO)
                broken.append((number, target, f"no heading of {where} has the anchor #{anchor}"))
    return [f"{relative}:{number}: {target}: {why}" for number, target, why in broken]


def main(argv):
    files = argv[1:] or markdown_files()
    problems = []
    for relative in files:
        problems += check(os.path.relpath(os.path.abspath(relative), REPO) if argv[1:] else relative)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} broken link(s) in {len(files)} Markdown files", file=sys.stderr)
        return 1
    print(f"links: {len(files)} Markdown files, no broken link")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
