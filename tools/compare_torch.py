#!/usr/bin/env python3
"""flashjit next to PyTorch SDPA's backends (math, efficient, flash, cudnn) on
the same tensors, in one process, timed the same way (CUDA events around each
call after warm-up, median of many runs).

libflashjit.so is loaded with ctypes; the tensors are PyTorch's dense
[batch, heads, seq, head_dim] ones, passed to flashjit with BHSD strides.

usage: compare_torch.py [--lib build/libflashjit.so] [--grid prefill|extra|decode|all]
                        [--dtypes bf16,fp16] [--json FILE] [--backends math,efficient,flash,cudnn]
"""
import argparse
import json
import math
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashjit_ctypes import FJ_BACKEND_CUDA, FJ_BF16, FJ_F16, Library


# An empty graph means the calls ran outside the capture and the timing would
# be of nothing: make torch's warning an error.
warnings.filterwarnings("error", message="The CUDA Graph is empty")


def _per_call_ms(fn, n):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def time_ms(fn, reps=30):
    """Median over `reps` timings of a CUDA graph holding enough calls to run
    ~2 ms, divided by the calls in it: the graph removes Python and launch
    gaps, which would otherwise dominate microsecond-long decode kernels.
    Falls back to back-to-back calls between two events if capture fails."""
    fn()
    torch.cuda.synchronize()
    est = max(_per_call_ms(fn, 3), 1e-3)
    inner = max(1, min(200, int(2.0 / est)))
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(inner):
                fn()
        g.replay()
        torch.cuda.synchronize()
        call = g.replay
    except RuntimeError:
        call, inner = fn, 1
    for _ in range(3):
        call()
    times = sorted(_per_call_ms(call, 1) / inner for _ in range(reps))
    return times[len(times) // 2]


def grid(names):
    """The rows of one or more grids: "prefill,extra", "decode", "all"."""
    names = set(names.split(","))
    if "all" in names:
        names |= {"prefill", "extra", "decode"}
    rows = []
    if "prefill" in names:
        for d in (64, 128):
            for s in (1024, 4096, 16384):
                for c in (False, True):
                    rows.append((16384 // s, 2048 // d, 2048 // d, s, s, d, c))
    if "extra" in names:
        for d, h in ((96, 21), (256, 8)):
            for s in (4096, 16384):
                for c in (False, True):
                    rows.append((16384 // s, h, h, s, s, d, c))
        for s in (4096, 16384):
            for c in (False, True):
                rows.append((16384 // s, 32, 8, s, s, 128, c))
    if "decode" in names:
        for b, hkv, sk in ((1, 32, 4096), (1, 32, 32768), (1, 8, 4096), (1, 8, 32768),
                           (8, 32, 4096), (8, 8, 32768), (64, 32, 32768), (64, 8, 32768)):
            rows.append((b, 32, hkv, 1, sk, 128, False))
    return rows


SDPA = {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                   "libflashjit.so"))
    ap.add_argument("--grid", default="all")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--backends", default="efficient,flash,cudnn")
    ap.add_argument("--json")
    args = ap.parse_args()
    fj = Library(args.lib)
    if fj.backend() != FJ_BACKEND_CUDA:
        sys.exit("flashjit did not choose CUDA here:\n" + fj.describe())
    torch.manual_seed(0)
    results = []
    names = [n for n in args.backends.split(",") if n]
    print("%-5s %-32s %9s %9s" % ("dtype", "shape", "flashjit", "err") +
          "".join(" %9s" % n for n in names) + "  (TFLOP/s; decode rows: TB/s of K+V)  kernel")
    for dt in args.dtypes.split(","):
        dtype = torch.bfloat16 if dt == "bf16" else torch.float16
        for (b, hq, hkv, sq, sk, d, causal) in grid(args.grid):
            q = torch.randn(b, hq, sq, d, device="cuda", dtype=dtype)
            k = torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype)
            v = torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype)
            o = torch.full_like(q, float("nan"))
            decode = sq <= 16
            flops = 4.0 * b * hq * sq * sk * d * (0.5 if causal and sq == sk else 1.0)
            kv_bytes = 2.0 * b * hkv * sk * d * q.element_size()
            rate = (lambda ms: kv_bytes / ms / 1e9) if decode else (lambda ms: flops / ms / 1e9)
            row = {"dtype": dt, "batch": b, "heads_q": hq, "heads_kv": hkv, "seqlen_q": sq,
                   "seqlen_k": sk, "head_dim": d, "causal": causal, "unit": "TB/s" if decode else "TFLOP/s"}
            try:
                plan, kernel = fj.plan(q, k, v, causal, FJ_BF16 if dtype == torch.bfloat16 else FJ_F16)
                # the stream current at each call: inside time_ms's capture it is
                # the capturing stream, and a launch elsewhere would leave the graph empty
                run = lambda: fj.execute(plan, q, k, v, o, torch.cuda.current_stream().cuda_stream)
                ms = time_ms(run)
                run()
                torch.cuda.synchronize()
                ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                                     enable_gqa=hq != hkv) if sq * sk * b * hq <= 2**31 else None
                err = ((o.float() - ref).norm() / ref.norm()).item() if ref is not None else float("nan")
                row.update(flashjit_ms=ms, flashjit=rate(ms), rel_err=err, kernel=kernel)
                fj.destroy(plan)  # a split-KV plan holds its partials workspace
            except Exception as e:
                row.update(flashjit=None, error=str(e)[:200], kernel="")
            for n in names:
                try:
                    with sdpa_kernel([SDPA[n]]):
                        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                    enable_gqa=hq != hkv)
                        ms = time_ms(fn)
                    row[n] = rate(ms)
                    row[n + "_ms"] = ms
                except Exception:  # a backend that does not take this shape
                    row[n] = None
            results.append(row)
            f = lambda x: "%9.2f" % x if isinstance(x, float) else "%9s" % "-"
            shape = "b%d h%d/%d s%d/%d d%d%s" % (b, hq, hkv, sq, sk, d, " causal" if causal else "")
            print("%-5s %-32s %s %9.1e" % (dt, shape, f(row.get("flashjit")), row.get("rel_err", float("nan"))) +
                  "".join(" " + f(row.get(n)) for n in names) + "  " + row.get("kernel", row.get("error", "")),
                  flush=True)
            del q, k, v, o
    copy = None
    if "decode" in args.grid or args.grid == "all":
        copy = copy_tbps()
        print("copy bandwidth: %.2f TB/s (device-to-device copy of 4 GiB, read + write bytes); "
              "decode rows at 80%% of it: %.2f TB/s" % (copy, 0.8 * copy))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "copy_tbps": copy, "rows": results}, fh, indent=1)


def copy_tbps():
    """The decode rows' yardstick: HBM bandwidth of a large device-to-device
    copy (bytes read plus bytes written per second), median of the runs."""
    src = torch.randn(2 << 30, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), reps=20)
    return 2.0 * src.numel() * src.element_size() / ms / 1e9


if __name__ == "__main__":
    main()
