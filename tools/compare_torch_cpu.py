#!/usr/bin/env python3
"""flashjit's CPU backends next to PyTorch's CPU scaled_dot_product_attention,
on the same tensors, in one process, with the same thread count.

flashjit (FLASHJIT_BACKEND=cpu, or reference with --reference) is loaded with
ctypes and given PyTorch's dense [batch, heads, seq, head_dim] tensors with
BHSD strides. Each round times one call of each (time.perf_counter around a
synchronous call), flashjit and torch alternating so that drift on a shared
machine hits both; the medians over the rounds are printed, with flashjit's
error against PyTorch's float64 math.

--grid decode: one query row against 4k and 32k keys (32/8 and 32/32 heads,
head dim 128, f32, bf16 and f16). Each round also reads the same K and V bytes
once with the same number of threads (tests/cpu/read_bandwidth.c, built as
build/tests/cpu/libfjt_read.so): the machine's read bandwidth for those bytes,
measured in the same run. GB/s count the K and V bytes; "of read" is the
median over the rounds of read time / flashjit time.

--ggml-lib LIB adds ggml's CPU attention (GGML_OP_FLASH_ATTN_EXT, what
llama.cpp runs) as a third column, on copies of the same tensors in ggml's
layout (Q in f32, as ggml takes it; K and V in the row's type), on a
thread pool of the same size, timed in the same rounds: LIB is
tools/dev/ggml_attention.c built against a ggml checkout by
tools/dev/build_ggml_peer.sh.

--stat best prints the best round of each (flashjit, torch, read) instead of
the medians, and "of read" as best read time / best flashjit time: on a
machine shared with other jobs, the rounds least disturbed by them.

usage: compare_torch_cpu.py [--lib build/libflashjit.so] [--read-lib LIB] [--threads N]
                            [--rounds R] [--stat median|best] [--reference]
                            [--grid cpu|decode|causal|smoke] [--ggml-lib LIB] [--json FILE]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

from flashjit_ctypes import FJ_BF16, FJ_F16, FJ_F32, Library


def grid(name):
    """The foundation's CPU grid (`flashjit bench --grid cpu`), the decode
    grid of issue 24, its causal grid (each shape causal and not, S 512 to
    2048), or three tiny problems (smoke) to check the script itself. Causal rows have seqlen_q == seqlen_k, where PyTorch's is_causal
    (top-left) and flashjit's bottom-right alignment agree."""
    if name == "smoke":
        return [("f32", 1, 2, 2, 64, 64, 64, False), ("f32", 1, 2, 2, 80, 80, 64, True),
                ("bf16", 1, 4, 2, 1, 100, 128, False), ("f16", 1, 4, 4, 1, 3000, 64, False)]
    if name == "causal":
        # issue 24's causal target: causal against non-causal at S 512-2048
        # on the tiled path's dtypes (bf16 prefill takes AMX where it can)
        return [(dt, 1, hq, 8, s, s, d, causal) for s in (512, 1024, 2048)
                for (dt, hq, d) in (("f32", 8, 64), ("f32", 8, 128), ("f32", 32, 128),
                                    ("f16", 8, 128))
                for causal in (False, True)]
    if name == "decode":
        return [(dt, 1, 32, hkv, 1, sk, 128, False) for dt in ("f32", "bf16", "f16")
                for hkv in (8, 32) for sk in (4096, 32768)]
    rows = []
    for dt in ("f32", "bf16"):
        for s in (512, 2048, 4096):
            for d in (64, 128):
                for causal in (False, True):
                    rows.append((dt, 1, 8, 8, s, s, d, causal))
        rows.append((dt, 1, 32, 8, 1, 8192, 128, False))
    return rows


class Ggml:
    """tools/dev/ggml_attention.c: one problem's ggml graph, computed on demand."""

    TYPES = {"f32": 0, "f16": 1, "bf16": 2}

    def __init__(self, path, threads):
        self.lib = ctypes.CDLL(path)
        self.lib.fjt_ggml_prepare.restype = ctypes.c_void_p
        self.lib.fjt_ggml_prepare.argtypes = [ctypes.c_int] * 8 + [ctypes.c_float, ctypes.c_int] + \
            [ctypes.c_void_p] * 3
        self.lib.fjt_ggml_run.argtypes = [ctypes.c_void_p]
        self.lib.fjt_ggml_output.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.lib.fjt_ggml_free.argtypes = [ctypes.c_void_p]
        self.threads = threads

    def prepare(self, q, k, v, dt, causal):
        b, hq, sq, d = q.shape
        hkv, sk = k.shape[1], k.shape[2]
        h = self.lib.fjt_ggml_prepare(b, hq, hkv, sq, sk, d, self.TYPES[dt], int(causal),
                                      d ** -0.5, self.threads, q.data_ptr(), k.data_ptr(),
                                      v.data_ptr())
        if not h:
            raise RuntimeError("fjt_ggml_prepare failed")
        return h

    def run(self, h):
        if self.lib.fjt_ggml_run(h):
            raise RuntimeError("ggml_graph_compute failed")

    def output(self, h, o):
        self.lib.fjt_ggml_output(h, o.data_ptr())

    def free(self, h):
        self.lib.fjt_ggml_free(h)


class Reader:
    """fjt_read_seconds from libfjt_read.so: one timed read of buffers."""

    def __init__(self, path, threads):
        self.lib = ctypes.CDLL(path)
        self.lib.fjt_read_seconds.restype = ctypes.c_int
        self.lib.fjt_read_seconds.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                              ctypes.POINTER(ctypes.c_size_t), ctypes.c_int,
                                              ctypes.c_int, ctypes.c_int,
                                              ctypes.POINTER(ctypes.c_double)]
        self.threads = threads

    def seconds(self, tensors):
        n = len(tensors)
        ptrs = (ctypes.c_void_p * n)(*[t.data_ptr() for t in tensors])
        sizes = (ctypes.c_size_t * n)(*[t.numel() * t.element_size() for t in tensors])
        out = ctypes.c_double()
        if self.lib.fjt_read_seconds(ptrs, sizes, n, self.threads, 1, ctypes.byref(out)):
            raise RuntimeError("fjt_read_seconds: cannot start %d threads" % self.threads)
        return out.value


def main():
    here = os.path.dirname(__file__)
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(here, "..", "build", "libflashjit.so"))
    ap.add_argument("--read-lib", default=os.path.join(here, "..", "build", "tests", "cpu",
                                                        "libfjt_read.so"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--stat", default="median", choices=["median", "best"])
    ap.add_argument("--reference", action="store_true", help="time FJ_BACKEND_CPU_REFERENCE")
    ap.add_argument("--grid", default="cpu", choices=["cpu", "decode", "causal", "smoke"])
    ap.add_argument("--ggml-lib", help="tools/dev/build_ggml_peer.sh's libfjt_ggml.so: a ggml column")
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
    fj = Library(args.lib, cpu_threads=args.threads)
    if "%d threads" % args.threads not in fj.describe():
        sys.exit("flashjit's CPU worker count is not %d:\n%s" % (args.threads, fj.describe()))
    reader = Reader(args.read_lib, args.threads) if args.grid in ("decode", "smoke") else None
    ggml = Ggml(args.ggml_lib, args.threads) if args.ggml_lib else None
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    fj_dtype = {torch.float32: FJ_F32, torch.float16: FJ_F16, torch.bfloat16: FJ_BF16}
    torch.manual_seed(0)
    backend = [line for line in fj.describe().splitlines() if line.startswith("backend:")]
    stat = statistics.median if args.stat == "median" else min
    print("flashjit %s, torch %s, %d threads, %s of %d rounds"
          % (backend[0][len("backend:"):].strip() if backend else "?", torch.__version__,
             args.threads, args.stat, args.rounds))
    decode_cols = reader is not None
    if decode_cols:
        print("%-36s %9s %9s %8s %8s %8s %7s %8s %8s" % ("shape", "fj ms", "torch ms", "fj GB/s",
              "torch", "read", "of read", "fj/torch", "err"), end="")
    else:
        print("%-40s %10s %10s %9s %9s %8s %9s" % ("shape", "fj ms", "torch ms", "fj GF/s",
                                                   "torch GF/s", "fj/torch", "err"), end="")
    print(" %9s %8s %9s" % ("ggml ms", "fj/ggml", "ggml err") if ggml else "")
    results = []
    for (dt, b, hq, hkv, sq, sk, d, causal) in grid(args.grid):
        dtype = torch_dtype[dt]
        q = torch.randn(b, hq, sq, d, dtype=dtype)
        k = torch.randn(b, hkv, sk, d, dtype=dtype)
        v = torch.randn(b, hkv, sk, d, dtype=dtype)
        o = torch.full_like(q, float("nan"))
        plan, method = fj.plan(q, k, v, causal, fj_dtype[dtype])
        gqa = hq != hkv
        torch_fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        fj_fn = lambda: fj.execute(plan, q, k, v, o, None)
        fj_fn()
        torch_fn()
        t_fj, t_torch, t_read, t_ggml = [], [], [], []
        fns = [(fj_fn, t_fj), (torch_fn, t_torch)]
        if ggml:
            gh = ggml.prepare(q, k, v, dt, causal)
            fns.append((lambda: ggml.run(gh), t_ggml))
            fns[-1][0]()
        for _ in range(args.rounds):
            for fn, out in fns:
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e3)
            if reader:
                t_read.append(reader.seconds([k, v]) * 1e3)
        ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal,
                                             enable_gqa=gqa)
        err = ((o.double() - ref).norm() / ref.norm()).item()
        fj.destroy(plan)
        ggml_cols = ""
        if ggml:
            og = torch.empty(q.shape, dtype=torch.float32)
            ggml.output(gh, og)
            ggml.free(gh)
            g_err = ((og.double() - ref).norm() / ref.norm()).item()
            ms_ggml = stat(t_ggml)
            ggml_cols = " %9.3f %8.2f %9.1e" % (ms_ggml, ms_ggml / stat(t_fj), g_err)
        flops = 4.0 * b * hq * sq * sk * d * (0.5 if causal and sq == sk else 1.0)
        kv_bytes = 2 * k.numel() * k.element_size()
        ms_fj, ms_torch = stat(t_fj), stat(t_torch)
        shape = "%s b%d h%d/%d s%d/%d d%d%s" % (dt, b, hq, hkv, sq, sk, d, " causal" if causal else "")
        row = {"shape": shape, "method": method, "flashjit_ms": ms_fj, "torch_ms": ms_torch,
               "rel_err": err}
        if decode_cols:
            ms_read = stat(t_read)
            of_read = (statistics.median([r / f for r, f in zip(t_read, t_fj)])
                       if args.stat == "median" else ms_read / ms_fj)
            print("%-36s %9.3f %9.3f %8.1f %8.1f %8.1f %6.0f%% %8.2f %8.1e" % (
                shape, ms_fj, ms_torch, kv_bytes / ms_fj / 1e6, kv_bytes / ms_torch / 1e6,
                kv_bytes / ms_read / 1e6, 100 * of_read, ms_torch / ms_fj, err) + ggml_cols,
                flush=True)
            row.update({"read_ms": ms_read, "of_read": of_read, "kv_bytes": kv_bytes})
        else:
            print("%-40s %10.3f %10.3f %9.1f %9.1f %8.2f %9.1e" % (
                shape, ms_fj, ms_torch, flops / ms_fj / 1e6, flops / ms_torch / 1e6,
                ms_torch / ms_fj, err) + ggml_cols, flush=True)
        if ggml:
            row.update({"ggml_ms": ms_ggml, "ggml_rel_err": g_err})
        results.append(row)
        del q, k, v, o, ref
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"torch": torch.__version__, "threads": args.threads, "stat": args.stat,
                       "rows": results}, fh, indent=1)


if __name__ == "__main__":
    main()
