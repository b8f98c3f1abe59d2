"""flashjit bench --csv and --json on the CPU backend, read back with Python's
csv and json modules: every row parses, fields quoted (RFC 4180) or escaped
(RFC 8259) so the full kernel text and the plan's description (commas,
quotes, newlines) come back exactly, as the table prints the kernel; absent
values are empty (CSV) or null (JSON); --json carries a metadata object;
progress goes to stderr only. Usage: check_bench_output.py FLASHJIT"""
import csv
import io
import json
import os
import re
import subprocess
import sys
import tempfile

exe = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def run(*args):
    p = subprocess.run([exe, "bench", *args], capture_output=True)
    out, err = p.stdout.decode(), p.stderr.decode()  # bytes: CRLF kept
    if p.returncode != 0:
        sys.exit(f"flashjit bench {' '.join(args)}: exit {p.returncode}\n{err}")
    return out, err


with tempfile.TemporaryDirectory() as tmp:
    # a grid file whose path needs escaping in JSON: quote, backslash, comma
    grid = os.path.join(tmp, 'we"ird\\name, too.txt')
    with open(grid, "w") as f:
        f.write(open(os.path.join(os.path.dirname(__file__), "..", "tools", "grids",
                                  "smoke.txt")).read())
    common = ["--backends", "cpu", "--grid", grid, "--repeat", "1", "--warmup", "0"]

    table, _ = run(*common)
    kernels = [line.split("  ")[-1].strip() for line in table.splitlines()[1:] if line.strip()]

    out, err = run(*common, "--csv")
    check(out.endswith("\r\n"), "CSV records end in CRLF")
    rows = list(csv.DictReader(io.StringIO(out, newline="")))
    header = out.split("\r\n", 1)[0].split(",")
    check(len(rows) == len(kernels) == 6, f"CSV rows {len(rows)}, table rows {len(kernels)}")
    for r in rows:
        check(None not in r and all(v is not None for v in r.values()),
              f"CSV row with {len(header)} columns expected: {r}")
        check(r["rel_err"] == "", f"CSV rel_err not checked must be empty: {r['rel_err']!r}")
        check(float(r["ms"]) > 0 and float(r["tflops"]) > 0, "CSV numbers")
        check(r["description"].startswith("problem: " + r["problem"]),
              f"CSV description cut or garbled: {r['description']!r}")
        check("\n" in r["description"] and "," in r["description"],
              "the description has newlines and commas, which must round-trip")
    check([r["kernel"] for r in rows] == kernels, f"CSV kernels {[r['kernel'] for r in rows]} "
          f"!= table's {kernels}")
    check("flashjit bench: rows" in err or err == "", "progress on stderr")
    check("flashjit bench: rows" not in out, "no progress on stdout")

    out, err = run(*common, "--json")
    doc = json.loads(out)
    meta = doc["metadata"]
    check(meta["flashjit_version"] and re.match(r"\d+\.\d+\.\d+", meta["flashjit_version"]),
          "metadata version")
    check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["date"]), "ISO 8601 UTC date")
    check(meta["command_line"] == ["flashjit", "bench", *common, "--json"],
          f"command line round-trips: {meta['command_line']}")
    check(meta["devices"][0]["backend"] == "cpu" and meta["devices"][0]["device"].startswith("CPU"),
          f"device: {meta['devices']}")
    check(meta["grid"] == grid, "grid path round-trips")
    check(len(doc["rows"]) == 6, "JSON rows")
    for r, c in zip(doc["rows"], rows):
        check(r["rel_err"] is None and r["tolerance"] is None, "rel_err null when not checked")
        check(r["error"] is None and r["ok"] is True, "ok row")
        check(r["kernel"] == c["kernel"], f"JSON kernel {r['kernel']!r} != CSV {c['kernel']!r}")
        check(r["problem"] == c["problem"], "same rows in order")
        check(r["description"].startswith("problem: " + r["problem"]) and "\n" in r["description"],
              "JSON description")
        check(isinstance(r["launches"], int), "launches an integer")

    out, _ = run(*common, "--json", "--check", "--dtypes", "f32")
    for r in json.loads(out)["rows"]:
        check(isinstance(r["rel_err"], float) and r["rel_err"] < r["tolerance"],
              f"checked rel_err: {r['rel_err']}")
    out, _ = run(*common, "--csv", "--check", "--dtypes", "f32")
    for r in csv.DictReader(io.StringIO(out, newline="")):
        check(float(r["rel_err"]) >= 0, "checked CSV rel_err")

    # --plot with GB/s on a log axis: every row, decode too, gets a bar
    svg = os.path.join(tmp, "p.svg")
    run(*common, "--plot", svg, "--plot-metric=gbps", "--plot-log")
    text = open(svg).read()
    check("GB/s per shape and backend (log scale)" in text, "plot title")
    bars = text.count('class="bar"')
    check(bars == 6, f"bars: {bars}")

if failures:
    sys.exit("FAILED:\n  " + "\n  ".join(failures))
print("ok")
