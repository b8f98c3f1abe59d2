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

usage: python_overhead.py [--device cpu|cuda] [--rounds R] [--calls N]
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import flashjit


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
    fns = {
        "flashjit.attention": lambda: flashjit.attention(q, k, v),
        "flashjit.sdpa": lambda: flashjit.sdpa(qh, kh, vh, enable_gqa=gqa),
        "torch SDPA": lambda: F.scaled_dot_product_attention(qh, kh, vh, enable_gqa=gqa),
    }
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    for fn in fns.values():  # warm-up: plans, kernels, torch's dispatch caches
        for _ in range(200):
            fn()
    sync()
    times = {name: [] for name in fns}
    order = list(fns)
    for r in range(args.rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            fn = fns[name]
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn()
            sync()
            times[name].append((time.perf_counter() - t0) / args.calls * 1e6)
    print("device %s, torch %s, %d rounds of %d calls, problem q %s k %s %s"
          % (args.device, torch.__version__, args.rounds, args.calls, tuple(q.shape),
             tuple(k.shape), str(q.dtype).replace("torch.", "")))
    print("%-20s %10s %10s %10s" % ("call", "median us", "min us", "max us"))
    for name, ts in times.items():
        print("%-20s %10.1f %10.1f %10.1f" % (name, statistics.median(ts), min(ts), max(ts)))


if __name__ == "__main__":
    main()
