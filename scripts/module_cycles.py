#!/usr/bin/env python3
"""Checks that the top-level modules of each crate import each other without cycles.

A top-level module is a file of `src/` or a folder with everything in it (`catalog/`
is one module, its files included). An edge A -> B is a `crate::…` or `super::…` path
in a file of A that names B or something inside B. The check reads the code as text:
a cheap guard for CI, not a compiler. Prints each cycle found and exits 1; exits 0
when there is none. Usage: scripts/module_cycles.py [CRATE_SRC ...]
(default: every crate of the workspace)."""

import glob
import os
import re
import sys

PATH = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUP = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^}]*)\}", re.S)


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


def resolve(modules, base, segments):
    """The longest existing module named by `base` + `segments`."""
    found = None
    path = list(base)
    if tuple(path) in modules:
        found = tuple(path)
    for segment in segments:
        path.append(segment)
        if tuple(path) in modules:
            found = tuple(path)
        else:
            break
    return found


def edges(src):
    files = [f for f in glob.glob(os.path.join(src, "**", "*.rs"), recursive=True)]
    modules = {module_of(src, f): f for f in files}
    top_graph = {}
    for module, path in modules.items():
        text = strip_comments(open(path, encoding="utf-8").read())
        # The module `super` names: the parent of a file's module.
        parent = module[:-1]
        refs = []
        for kind, prefix, inner in GROUP.findall(text):
            for item in inner.split(","):
                item = item.strip().split(" as ")[0]
                if item:
                    refs.append((kind, prefix + "::" + item))
        refs += PATH.findall(text)
        for kind, rest in refs:
            segments = [s for s in rest.split("::") if s]
            if kind == "super":
                base = list(parent)
                while segments and segments[0] == "super":
                    base = base[:-1]
                    segments = segments[1:]
                if segments and segments[0] == "self":
                    segments = segments[1:]
            else:
                base = []
            target = resolve(modules, tuple(base), segments)
            if target is None:
                continue
            # Files within one top-level module may use each other.
            source_top, target_top = module[:1], target[:1]
            if not target_top or source_top == target_top:
                continue
            top_graph.setdefault(source_top, set()).add(target_top)
            top_graph.setdefault(target_top, set())
    return top_graph


def cycles(graph):
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def main():
    sources = sys.argv[1:] or sorted(
        glob.glob("shared/*/src") + glob.glob("functions/*/src") + ["cli/src"]
    )
    failed = False
    for src in sources:
        for component in cycles(edges(src)):
            failed = True
            names = ", ".join("::".join(m) or "(crate root)" for m in component)
            print(f"{src}: import cycle among {names}")
    if not failed:
        print(f"no import cycle in {len(sources)} crates")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
