#!/usr/bin/env python3
"""Checks the layering docs/architecture.md states, from the #include lines:

- the core (src/*.c, src/*.h) and src/tune/ include no backend header
  (nothing under src/cpu/ or src/cuda/);
- the CLI (tools/*.c, tools/*.h) includes no backend header and neither
  context.h nor plan.h, except that `flashjit source`, `compile-all` and
  `cache` may use the JIT's own API (src/cuda/jit/);
- no include circle: a.c including b.h while b.c includes a.h, or any longer
  cycle of such edges between source files.

usage: tools/dev/check_layers.py   (from anywhere; exits 1 naming each breach)
"""
import os
import re
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
JIT_TOOLS = {"tools/cmd_source.c", "tools/cmd_compile_all.c", "tools/cmd_cache.c"}


def sources():
    for root in ("src", "tools"):
        for dirpath, _, files in os.walk(os.path.join(TOP, root)):
            for f in files:
                if f.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(dirpath, f), TOP)


def resolve(path, inc):
    """The repository path an include names: next to the file, else under
    src/ (the build's include directory), else under tools/."""
    for base in (os.path.dirname(path), "src", "tools", "include"):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(os.path.join(TOP, cand)):
            return cand
    return None


def main():
    includes = {}
    for path in sources():
        with open(os.path.join(TOP, path), encoding="utf-8") as fh:
            text = fh.read()
        includes[path] = [r for r in (resolve(path, i) for i in INCLUDE.findall(text)) if r]
    breaches = []
    backend = ("src/cpu/", "src/cuda/")
    for path, incs in sorted(includes.items()):
        core = path.startswith("src/") and (path.count("/") == 1 or path.startswith("src/tune/"))
        cli = path.startswith("tools/")
        for inc in incs:
            if core and inc.startswith(backend):
                breaches.append("%s (core) includes the backend header %s" % (path, inc))
            if cli:
                jit_ok = path in JIT_TOOLS and inc.startswith("src/cuda/jit/")
                if inc.startswith(backend) and not jit_ok:
                    breaches.append("%s (CLI) includes the backend header %s" % (path, inc))
                if inc in ("src/context.h", "src/plan.h"):
                    breaches.append("%s (CLI) includes the core's internals %s" % (path, inc))
    # Edges between translation units: a.c -> b.c when a.c (or a header it
    # includes directly) includes b.h and b.c exists.
    def unit(h):
        c = h[:-2] + ".c"
        return c if h.endswith(".h") and c in includes else None
    edges = {}
    for path, incs in includes.items():
        if not path.endswith(".c"):
            continue
        out = set()
        for inc in incs:
            u = unit(inc)
            if u and u != path:
                out.add(u)
        edges[path] = out
    # Tarjan's strongly connected components
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    for comp in comps:
        breaches.append("include circle: " + " <-> ".join(comp))
    for b in breaches:
        print(b)
    print("check_layers: %d files, %d breaches" % (len(includes), len(breaches)))
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
