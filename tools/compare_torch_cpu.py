#!/usr/bin/env python3
"""flashjit's CPU backends next to PyTorch's CPU scaled_dot_product_attention,
on the same tensors, in one process, with the same thread count.

flashjit (FLASHJIT_BACKEND=cpu, or reference with --reference) is loaded with
ctypes and given PyTorch's dense [batch, heads, seq, head_dim] tensors with
BHSD strides. Each round times one call of each (time.perf_counter around a
synchronous call), flashjit and torch alternating so that drift on a shared
machine hits both; the medians over the rounds are printed, with flashjit's
error against PyTorch's float64 math.

usage: compare_torch_cpu.py [--lib build/libflashjit.so] [--threads N] [--rounds R]
                            [--reference] [--grid cpu|smoke] [--json FILE]
"""
import argparse
import json
import os
import statistics
import sys
import time

from flashjit_ctypes import FJ_BF16, FJ_F16, FJ_F32, Library


def grid(name):
    """The foundation's CPU grid (`flashjit bench --grid cpu`), or three tiny
    problems (smoke) to check the script itself. Causal rows have
    seqlen_q == seqlen_k, where PyTorch's is_causal (top-left) and
    flashjit's bottom-right alignment agree."""
    if name == "smoke":
        return [("f32", 1, 2, 2, 64, 64, 64, False), ("f32", 1, 2, 2, 80, 80, 64, True),
                ("bf16", 1, 4, 2, 1, 100, 128, False)]
    rows = []
    for dt in ("f32", "bf16"):
        for s in (512, 2048, 4096):
            for d in (64, 128):
                for causal in (False, True):
                    rows.append((dt, 1, 8, 8, s, s, d, causal))
        rows.append((dt, 1, 32, 8, 1, 8192, 128, False))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                   "libflashjit.so"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reference", action="store_true", help="time FJ_BACKEND_CPU_REFERENCE")
    ap.add_argument("--grid", default="cpu", choices=["cpu", "smoke"])
    ap.add_argument("--json")
    args = ap.parse_args()
    # Before the library reads them: the backend, and one worker per thread.
    os.environ["FLASHJIT_BACKEND"] = "reference" if args.reference else "cpu"
    # PyTorch's OpenMP threads otherwise spin after each call and take the
    # cores from the flashjit run that follows it (the same care as
    # bench_cpu_tiled's sleep after a threaded sgemm).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    fj = Library(args.lib)
    if "%d threads" % args.threads not in fj.describe():
        sys.exit("flashjit's CPU worker count is not %d (set --threads to the core count):\n%s"
                 % (args.threads, fj.describe()))
    fj_dtype = {torch.float32: FJ_F32, torch.float16: FJ_F16, torch.bfloat16: FJ_BF16}
    torch.manual_seed(0)
    backend = [line for line in fj.describe().splitlines() if line.startswith("backend:")]
    print("flashjit %s, torch %s, %d threads, median of %d rounds"
          % (backend[0][len("backend:"):].strip() if backend else "?", torch.__version__,
             args.threads, args.rounds))
    print("%-40s %10s %10s %9s %9s %8s %9s" % ("shape", "fj ms", "torch ms", "fj GF/s",
                                               "torch GF/s", "fj/torch", "err"))
    results = []
    for (dt, b, hq, hkv, sq, sk, d, causal) in grid(args.grid):
        dtype = torch.float32 if dt == "f32" else torch.bfloat16
        q = torch.randn(b, hq, sq, d, dtype=dtype)
        k = torch.randn(b, hkv, sk, d, dtype=dtype)
        v = torch.randn(b, hkv, sk, d, dtype=dtype)
        o = torch.full_like(q, float("nan"))
        plan, _ = fj.plan(q, k, v, causal, fj_dtype[dtype])
        gqa = hq != hkv
        torch_fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        fj_fn = lambda: fj.execute(plan, q, k, v, o, None)
        fj_fn()
        torch_fn()
        t_fj, t_torch = [], []
        for _ in range(args.rounds):
            for fn, out in ((fj_fn, t_fj), (torch_fn, t_torch)):
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e3)
        ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal,
                                             enable_gqa=gqa)
        err = ((o.double() - ref).norm() / ref.norm()).item()
        fj.destroy(plan)
        flops = 4.0 * b * hq * sq * sk * d * (0.5 if causal and sq == sk else 1.0)
        ms_fj, ms_torch = statistics.median(t_fj), statistics.median(t_torch)
        shape = "%s b%d h%d/%d s%d/%d d%d%s" % (dt, b, hq, hkv, sq, sk, d, " causal" if causal else "")
        print("%-40s %10.3f %10.3f %9.1f %9.1f %8.2f %9.1e" % (
            shape, ms_fj, ms_torch, flops / ms_fj / 1e6, flops / ms_torch / 1e6, ms_torch / ms_fj,
            err), flush=True)
        results.append({"shape": shape, "flashjit_ms": ms_fj, "torch_ms": ms_torch,
                        "rel_err": err})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"torch": torch.__version__, "threads": args.threads, "rows": results}, fh,
                      indent=1)


if __name__ == "__main__":
    main()
