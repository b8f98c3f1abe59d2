#!/usr/bin/env python3
"""The shared library exports exactly the header's functions, each versioned.

usage: check_exports.py NM LIBRARY HEADER MAP

Three lists must agree: the functions include/flashjit.h declares with
FJ_API, the global names of the version script (src/libflashjit.map), and
what `nm -D --defined-only` finds in libflashjit.so (every one with the
default version of the script's node that lists it). Each difference is
printed by name; the exit status is 1 when there is one."""
import re
import subprocess
import sys


def header_functions(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^\s*#[^\n]*(\\\n[^\n]*)*", " ", text, flags=re.M)
    # FJ_API, a return type, the name, then '('; declarations may span lines.
    return set(re.findall(r"\bFJ_API\b[^;{}()]*?\b(fj_\w+)\s*\(", text))


def map_nodes(path):
    """{name: node} for every global of the version script."""
    text = re.sub(r"#[^\n]*", " ", open(path, encoding="utf-8").read())
    names = {}
    for node, body in re.findall(r"([A-Za-z_][\w.]*)\s*\{(.*?)\}", text, flags=re.S):
        scope = None
        for token in re.findall(r"[\w.*]+:|[^\s;]+", body):
            if token.endswith(":"):
                scope = token[:-1]
            elif scope == "global":
                names[token] = node
    return names


def exported(nm, lib):
    """{name: (type, version, default)} of the defined dynamic symbols, and
    the names of the version nodes (absolute symbols)."""
    out = subprocess.run([nm, "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    symbols, nodes = {}, set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        kind, full = parts[-2], parts[-1]
        name, sep, version = full.partition("@")
        default = version.startswith("@")
        version = version.lstrip("@")
        if kind == "A" and not sep:
            nodes.add(name)
            continue
        symbols[name] = (kind, version if sep else None, default)
    return symbols, nodes


def main(argv):
    if len(argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    nm, lib, header, version_map = argv[1:]
    declared = header_functions(header)
    listed = map_nodes(version_map)
    symbols, nodes = exported(nm, lib)
    problems = []
    if not declared:
        problems.append("%s: no FJ_API function found (the parser is out of date?)" % header)
    for name in sorted(declared - set(listed)):
        problems.append("%s is declared in the header but not listed in %s" % (name, version_map))
    for name in sorted(set(listed) - declared):
        problems.append("%s is listed in %s but not declared in the header" % (name, version_map))
    for name in sorted(declared - set(symbols)):
        problems.append("%s is declared in the header but %s does not export it" % (name, lib))
    for name in sorted(set(symbols) - declared):
        problems.append("%s is exported (nm type %s) but not declared in the header"
                        % (name, symbols[name][0]))
    for name in sorted(declared & set(symbols)):
        kind, version, default = symbols[name]
        want = listed.get(name)
        if kind != "T":
            problems.append("%s is exported as nm type %s, not T (a plain function)" % (name, kind))
        if version != want or not default:
            problems.append("%s has version %s; want the default version %s (%s@@%s)"
                            % (name, version or "none", want, name, want))
    for node in sorted(set(listed.values()) - nodes):
        problems.append("version node %s of %s is not defined in %s" % (node, version_map, lib))
    for p in problems:
        print("check_exports: " + p)
    if problems:
        return 1
    print("check_exports: %s exports the header's %d functions, versioned %s"
          % (lib, len(declared), ", ".join(sorted(set(listed.values())))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
