#!/usr/bin/env python3
"""What a call of the Python package costs on the host, next to PyTorch's
scaled_dot_product_attention in the same process on the same tensors.

A problem so small that the work is negligible (CPU: one query row, one key,
head_dim 8), called back to back: the time per call is the call's overhead
(argument checks, the torch operator dispatch, ctypes, the plan lookup, the
output allocation). With --device cuda, a decode step (b1 hq32 hkv8 sk128
d128 bf16): the host time per call, the GPU queue kept busy by the calls
themselves (a synchronize after each timed batch). Each round times a batch
of calls of each function, alternating which goes first; medians over the
rounds are printed.

The rows "(operator path)" are the same functions with the package's fast
eager path switched off (flashjit._torch_ops._FAST = False for the batch):
every call through the torch custom operator, as all calls went before the
fast path existed (and as they still go under torch.compile, autograd, modes
and subclasses). A package without the fast path has no such rows.

usage: python_overhead.py [--device cpu|cuda] [--rounds R] [--calls N]
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import flashjit

try:
    from flashjit import _torch_ops
except ImportError:
    _torch_ops = None
HAS_FAST_PATH = _torch_ops is not None and hasattr(_torch_ops, "_FAST")


def problem(device):
    if device == "cpu":
        shape_q, shape_kv, dtype = (1, 1, 1, 8), (1, 1, 1, 8), torch.float32
    else:
        shape_q, shape_kv, dtype = (1, 1, 32, 128), (1, 128, 8, 128), torch.bfloat16
    q = torch.randn(shape_q, device=device, dtype=dtype)
    k = torch.randn(shape_kv, device=device, dtype=dtype)
    v = torch.randn(shape_kv, device=device, dtype=dtype)
    return q, k, v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    q, k, v = problem(args.device)
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # BHSD views for the SDPA signature
    gqa = q.shape[2] != k.shape[2]
    attention = lambda: flashjit.attention(q, k, v)
    sdpa = lambda: flashjit.sdpa(qh, kh, vh, enable_gqa=gqa)
    # name: (function, whether the fast path is on for it)
    fns = {"flashjit.attention": (attention, True), "flashjit.sdpa": (sdpa, True)}
    if HAS_FAST_PATH:
        fns["flashjit.attention (operator path)"] = (attention, False)
        fns["flashjit.sdpa (operator path)"] = (sdpa, False)
    fns["torch SDPA"] = (lambda: F.scaled_dot_product_attention(qh, kh, vh, enable_gqa=gqa), True)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    def batch(name, n):
        fn, fast = fns[name]
        if HAS_FAST_PATH:
            _torch_ops._FAST = fast
        try:
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            return time.perf_counter() - t0
        finally:
            if HAS_FAST_PATH:
                _torch_ops._FAST = True

    for name in fns:  # warm-up: plans, kernels, torch's dispatch caches
        batch(name, 200)
    times = {name: [] for name in fns}
    order = list(fns)
    for r in range(args.rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            times[name].append(batch(name, args.calls) / args.calls * 1e6)
    print("device %s, torch %s, %d rounds of %d calls, problem q %s k %s %s"
          % (args.device, torch.__version__, args.rounds, args.calls, tuple(q.shape),
             tuple(k.shape), str(q.dtype).replace("torch.", "")))
    if not HAS_FAST_PATH:
        print("this flashjit has no fast path (%s): every call goes through the operator"
              % flashjit.__file__)
    torch_median = statistics.median(times["torch SDPA"])
    print("%-36s %10s %10s %10s %12s" % ("call", "median us", "min us", "max us", "x torch"))
    for name, ts in times.items():
        m = statistics.median(ts)
        print("%-36s %10.1f %10.1f %10.1f %12.2f" % (name, m, min(ts), max(ts), m / torch_median))


if __name__ == "__main__":
    main()
