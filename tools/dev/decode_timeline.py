#!/usr/bin/env python3
"""Where a decode call's time goes: each decode row of compare_torch.py's grid,
run as a CUDA graph of back-to-back calls under torch.profiler (CUPTI sees
flashjit's driver-API launches as well as PyTorch's), for flashjit and the
cudnn backend. Per call it prints the span (first kernel start to the next
call's first kernel start), each kernel's median duration, and what is left
between them (launch gaps; negative when a programmatic dependent launch
overlaps the kernels). Also flashjit's plan lines (tiles, splits, blocks per
SM), so a row's split count is on the same screen as its time.

usage (GPU machine): tools/dev/decode_timeline.py --lib build-gpu/libflashjit.so [--calls 20]
                     [--grid decode|decode64] [--match REGEX]
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from compare_torch import grid, label  # noqa: E402
from flashjit_ctypes import FJ_BF16, Library  # noqa: E402


def kernel_events(fn, calls):
    """Kernel (name, start us, duration us) of `calls` calls of fn replayed from a graph."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as fh:
            trace = json.load(fh)
    ev = [(e["name"], float(e["ts"]), float(e["dur"])) for e in trace.get("traceEvents", [])
          if e.get("cat") == "kernel"]
    return sorted(ev, key=lambda e: e[1])


def summarize(ev, calls):
    if not ev or len(ev) % calls:
        return "%d kernel events for %d calls: cannot split them into calls" % (len(ev), calls)
    per = len(ev) // calls
    starts = [ev[i * per][1] for i in range(calls)]
    span = (ev[-1][1] + ev[-1][2] - starts[0]) / calls
    parts = []
    busy = 0.0
    for j in range(per):
        durs = [ev[i * per + j][2] for i in range(calls)]
        med = statistics.median(durs)
        busy += med
        parts.append("%s %.1f" % (ev[j][0][:28], med))
    # between kernel j's end and kernel j+1's start, within a call and to the next call
    gaps = []
    for i in range(calls - 1):
        for j in range(per):
            a = ev[i * per + j]
            b = ev[i * per + j + 1]
            gaps.append((j, b[1] - (a[1] + a[2])))
    gap_txt = ", ".join("after k%d %.1f" % (j, statistics.median([g for jj, g in gaps if jj == j]))
                        for j in range(per))
    return "span %.1f us/call; kernels: %s; gaps: %s" % (span, "; ".join(parts), gap_txt)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--grid", default="decode", help="compare_torch.py's decode or decode64 rows")
    ap.add_argument("--match", help="only the rows whose label (as printed) matches this regex")
    a = ap.parse_args()
    fj = Library(a.lib)
    torch.manual_seed(0)
    for row in grid(a.grid):
        b, hq, hkv, sq, sk, d, causal = row
        name = label(row)
        if a.match and not re.search(a.match, name):
            continue
        q = torch.randn(b, hq, sq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, hkv, sk, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, hkv, sk, d, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(q)
        mb = 2.0 * b * hkv * sk * d * 2 / 1e6
        print("== %s (K+V %.1f MB)" % (name, mb), flush=True)
        plan, _ = fj.plan(q, k, v, causal, FJ_BF16)
        for line in fj.lib.fj_plan_describe(plan).decode().splitlines():
            if line.split(":")[0] in ("kernel", "launch", "resources", "split-KV"):
                print("   ", line[:160])
        run = lambda: fj.execute(plan, q, k, v, o, torch.cuda.current_stream().cuda_stream)
        print("  flashjit:", summarize(kernel_events(run, a.calls), a.calls), flush=True)
        fj.destroy(plan)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=hq != hkv)
            print("  cudnn:   ", summarize(kernel_events(fn, a.calls), a.calls), flush=True)
        del q, k, v, o
    return 0


if __name__ == "__main__":
    sys.exit(main())
