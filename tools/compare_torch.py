#!/usr/bin/env python3
"""flashjit next to PyTorch SDPA's backends (math, efficient, flash, cudnn) and
FlashAttention-3 (fa3: the fa3_fwd wheel, bf16 on Hopper, when importable) on
the same tensors, in one process, timed the same way (CUDA events around each
call after warm-up, median of many runs).

libflashjit.so is loaded with ctypes; the tensors are PyTorch's dense
[batch, heads, seq, head_dim] ones, passed to flashjit with BHSD strides.

usage: compare_torch.py [--lib build/libflashjit.so] [--grid NAME[,NAME...]]
                        [--dtypes bf16,fp16] [--json FILE] [--backends math,efficient,flash,cudnn,fa3]
                        [--match REGEX] [--rounds R] [--seed N] [--layout bhsd|bshd]

--layout bshd allocates [batch, seq, heads, head_dim] tensors (the layout of
FlashAttention and of ../shared/anchors.md): FlashAttention-3 (backend fa3,
the fa3_fwd wheel, bf16 only) takes them as they are, PyTorch's SDPA their
[batch, heads, seq, head_dim] views, flashjit their strides.

--grid takes the grids of tools/grids/ (prefill, extra, hopper, decode,
decode64, anchors; "all" = anchors), the files `flashjit bench --grid` reads; rows are
printed as problem keys, which --match searches.

--rounds R measures each row R times. Every round allocates the row's tensors
anew behind a spacer of random size, so they land elsewhere in memory, and
odd rounds run the PyTorch backends before flashjit. Measured once, a row can
be decided by something other than the kernels: on the H200 the first one or
two rounds of b64 h32/8 sk32768 read 3.9-4.1 TB/s for whichever library ran
then and 4.5 afterwards, and small rows move with the order. The medians over
the rounds are printed, and with cudnn the median of the per-round ratios.
"""
import argparse
import json
import math
import os
import random
import re
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashjit_ctypes import FJ_BACKEND_CUDA, FJ_BF16, FJ_F16, Library
from problem_key import Problem, format_key, read_grid, shapes_and_dtypes


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
    """The rows (b, hq, hkv, sq, sk, d, causal) of one or more grids of
    tools/grids/ ("prefill,extra", "decode", "decode64", "anchors"; "all" is
    anchors): each distinct shape once, in order, the dtype left to --dtypes."""
    rows = []
    for name in names.split(","):
        shapes, _ = shapes_and_dtypes(read_grid("anchors" if name == "all" else name))
        for p in shapes:
            if p.page_size or p.varlen:
                sys.exit("grid %s: %s: compare_torch.py runs dense batches only (no varlen "
                         "batch, no paged KV cache)" % (name, format_key(p)))
            if p.window_left >= 0 or p.window_right >= 0 or (p.causal == "top-left" and p.seqlen_q != p.seqlen_k):
                sys.exit("grid %s: %s: compare_torch.py runs no window and bottom-right causal "
                         "only where PyTorch's is_causal agrees" % (name, format_key(p)))
            row = (p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim, p.causal != "none")
            if row not in rows:
                rows.append(row)
    return rows


def label(row, dtype="bf16"):
    """A grid row as printed: its problem key (include/flashjit.h), as
    `flashjit bench` prints it; dtype "fp16" is written f16."""
    b, hq, hkv, sq, sk, d, causal = row
    return format_key(Problem(b, hq, hkv, sq, sk, d, "f16" if dtype == "fp16" else dtype,
                              "bottom-right" if causal else "none"))


SDPA = {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def measure_flashjit(fj, t, causal, dtype, rate, check):
    """flashjit on the round's tensors: ms, rate, kernel, and (check) its
    relative error against PyTorch's math on float copies."""
    q, k, v, o = t
    o.fill_(float("nan"))  # unwritten elements show up in the error
    plan, kernel = fj.plan(q, k, v, causal, FJ_BF16 if dtype == torch.bfloat16 else FJ_F16)
    try:
        # the stream current at each call: inside time_ms's capture it is
        # the capturing stream, and a launch elsewhere would leave the graph empty
        run = lambda: fj.execute(plan, q, k, v, o, torch.cuda.current_stream().cuda_stream)
        ms = time_ms(run)
        res = {"flashjit_ms": ms, "flashjit": rate(ms), "kernel": kernel}
        if check:
            o.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            b, hq, sq, _ = q.shape
            sk, hkv = k.shape[2], k.shape[1]
            if sq * sk * b * hq <= 2**31:
                ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                                     enable_gqa=hq != hkv)
                res["rel_err"] = ((o.float() - ref).norm() / ref.norm()).item()
                del ref
        return res
    finally:
        fj.destroy(plan)  # a split-KV plan holds its partials workspace


def measure_fa3(t, causal, rate):
    """FlashAttention-3 (the fa3_fwd wheel) on the BSHD tensors behind the
    round's views."""
    q, k, v, _ = t
    try:
        import fa3_fwd_interface as fa3
        qs, ks, vs = (x.transpose(1, 2) for x in (q, k, v))
        if not all(x.is_contiguous() for x in (qs, ks, vs)):
            return {"fa3": None}  # takes BSHD tensors only (--layout bshd)

        def fn():
            out = fa3.flash_attn_func(qs, ks, vs, causal=causal)
            return out[0] if isinstance(out, tuple) else out
        ms = time_ms(fn)
        return {"fa3": rate(ms), "fa3_ms": ms}
    except Exception:  # no wheel, or a shape or dtype it does not take
        return {"fa3": None}


def measure_backend(name, t, causal, rate):
    if name == "fa3":
        return measure_fa3(t, causal, rate)
    q, k, v, _ = t
    try:
        with sdpa_kernel([SDPA[name]]):
            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                        enable_gqa=q.shape[1] != k.shape[1])
            ms = time_ms(fn)
        return {name: rate(ms), name + "_ms": ms}
    except Exception:  # a backend that does not take this shape
        return {name: None}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else 0.5 * (xs[len(xs) // 2 - 1] + xs[len(xs) // 2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                   "libflashjit.so"))
    ap.add_argument("--grid", default="all")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--backends", default="efficient,flash,cudnn")
    ap.add_argument("--match", help="only the rows whose problem key (as printed) matches this regex")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure each row this many times, on fresh tensors behind a spacer of "
                         "random size, alternating which library goes first; print the medians")
    ap.add_argument("--seed", type=int, help="the spacers' sizes (default: from the clock, printed)")
    ap.add_argument("--layout", choices=("bhsd", "bshd"), default="bhsd",
                    help="the tensors' memory layout (bshd: FlashAttention's)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.rounds < 1:
        sys.exit("--rounds (%d) must be at least 1" % args.rounds)
    match = re.compile(args.match) if args.match else None
    fj = Library(args.lib)
    if fj.backend() != FJ_BACKEND_CUDA:
        sys.exit("flashjit did not choose CUDA here:\n" + fj.describe())
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % (1 << 31)
    spacers = random.Random(seed)
    if args.rounds > 1:
        print("%d rounds per row, spacer seed %d: figures are medians over the rounds, ratio the "
              "median of flashjit/cudnn per round" % (args.rounds, seed))
    results = []
    names = [n for n in args.backends.split(",") if n]
    ratio = args.rounds > 1 and "cudnn" in names
    print("%-5s %-44s %9s %9s" % ("dtype", "problem", "flashjit", "err") +
          "".join(" %9s" % n for n in names) + (" %6s" % "ratio" if ratio else "") +
          "  (TFLOP/s; decode rows: TB/s of K+V)  kernel")
    for dt in args.dtypes.split(","):
        dtype = torch.bfloat16 if dt == "bf16" else torch.float16
        for (b, hq, hkv, sq, sk, d, causal) in grid(args.grid):
            shape = label((b, hq, hkv, sq, sk, d, causal), dt)
            if match and not match.search(shape):
                continue
            decode = sq <= 16
            flops = 4.0 * b * hq * sq * sk * d * (0.5 if causal and sq == sk else 1.0)
            kv_bytes = 2.0 * b * hkv * sk * d * 2  # K and V, 2-byte elements
            rate = (lambda ms: kv_bytes / ms / 1e9) if decode else (lambda ms: flops / ms / 1e9)
            row = {"problem": shape, "dtype": dt, "batch": b, "heads_q": hq, "heads_kv": hkv, "seqlen_q": sq,
                   "seqlen_k": sk, "head_dim": d, "causal": causal, "unit": "TB/s" if decode else "TFLOP/s"}
            rounds = []
            for r in range(args.rounds):
                # one round's tensors: the same seed for every round (the same
                # values), a new placement in memory when there are rounds
                spacer = (torch.empty(spacers.randrange(1, 1024) << 20, dtype=torch.uint8, device="cuda")
                          if args.rounds > 1 else None)
                torch.manual_seed(0)
                if args.layout == "bshd":  # [b, h, s, d] views of [b, s, h, d] tensors
                    t = (torch.randn(b, sq, hq, d, device="cuda", dtype=dtype).transpose(1, 2),
                         torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype).transpose(1, 2),
                         torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype).transpose(1, 2),
                         torch.empty(b, sq, hq, d, device="cuda", dtype=dtype).transpose(1, 2))
                else:
                    t = (torch.randn(b, hq, sq, d, device="cuda", dtype=dtype),
                         torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype),
                         torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype),
                         torch.empty(b, hq, sq, d, device="cuda", dtype=dtype))
                res = {}
                libs = ["flashjit"] + names
                if r % 2:
                    libs = names + ["flashjit"]
                for lib in libs:
                    if lib != "flashjit":
                        res.update(measure_backend(lib, t, causal, rate))
                        continue
                    try:
                        res.update(measure_flashjit(fj, t, causal, dtype, rate, check=r == 0))
                    except Exception as e:
                        res.update(flashjit=None, error=str(e)[:200], kernel="")
                rounds.append(res)
                del t, spacer
                if args.rounds > 1:
                    torch.cuda.empty_cache()  # the next round's tensors come from new allocations
            row.update(rounds[0])  # the kernel and error; the rates become medians below
            for lib in ["flashjit"] + names:
                vals = [x.get(lib) for x in rounds]
                if args.rounds > 1 and all(isinstance(x, float) for x in vals):
                    row[lib] = median(vals)
                    row[lib + "_ms"] = median([x[lib + "_ms"] for x in rounds])
            if args.rounds > 1:
                row["rounds"] = rounds
            if ratio and all(isinstance(x.get("flashjit"), float) and isinstance(x.get("cudnn"), float)
                             for x in rounds):
                row["ratio_cudnn"] = median([x["flashjit"] / x["cudnn"] for x in rounds])
            results.append(row)
            f = lambda x: "%9.2f" % x if isinstance(x, float) else "%9s" % "-"
            print("%-5s %-44s %s %9.1e" % (dt, shape, f(row.get("flashjit")), row.get("rel_err", float("nan"))) +
                  "".join(" " + f(row.get(n)) for n in names) +
                  ((" %6.3f" % row["ratio_cudnn"] if "ratio_cudnn" in row else " %6s" % "-") if ratio else "") +
                  "  " + row.get("kernel", row.get("error", "")),
                  flush=True)
    copy = None
    if any(g.startswith("decode") or g in ("all", "anchors", "gpu") for g in args.grid.split(",")):
        copy = copy_tbps()
        print("copy bandwidth: %.2f TB/s (device-to-device copy of 4 GiB, read + write bytes); "
              "decode rows at 80%% of it: %.2f TB/s" % (copy, 0.8 * copy))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "copy_tbps": copy, "rounds": args.rounds, "spacer_seed": seed,
                       "rows": results}, fh, indent=1)


def copy_tbps():
    """The decode rows' yardstick: HBM bandwidth of a large device-to-device
    copy (bytes read plus bytes written per second), median of the runs."""
    src = torch.randn(2 << 30, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), reps=20)
    return 2.0 * src.numel() * src.element_size() / ms / 1e9


if __name__ == "__main__":
    main()
