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
import ctypes
import json
import os
import statistics
import sys
import time

FJ_F32, FJ_F16, FJ_BF16 = 0, 1, 2
FJ_CAUSAL_NONE, FJ_CAUSAL_BOTTOM_RIGHT = 0, 1


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
    fj = Flashjit(args.lib, args.threads)
    torch.manual_seed(0)
    print("flashjit %s, torch %s, %d threads, median of %d rounds"
          % (fj.backend_line(), torch.__version__, args.threads, args.rounds))
    print("%-40s %10s %10s %9s %9s %8s %9s" % ("shape", "fj ms", "torch ms", "fj GF/s",
                                               "torch GF/s", "fj/torch", "err"))
    results = []
    for (dt, b, hq, hkv, sq, sk, d, causal) in grid(args.grid):
        dtype = torch.float32 if dt == "f32" else torch.bfloat16
        q = torch.randn(b, hq, sq, d, dtype=dtype)
        k = torch.randn(b, hkv, sk, d, dtype=dtype)
        v = torch.randn(b, hkv, sk, d, dtype=dtype)
        o = torch.full_like(q, float("nan"))
        plan = fj.plan(q, k, v, causal)
        gqa = hq != hkv
        torch_fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        fj_fn = lambda: fj.run(plan, q, k, v, o)
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


class Desc(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int),
                ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("dtype", ctypes.c_int), ("causal", ctypes.c_int),
                ("window_left", ctypes.c_int), ("window_right", ctypes.c_int),
                ("scale", ctypes.c_float),
                ("q_stride", ctypes.c_int64 * 3), ("k_stride", ctypes.c_int64 * 3),
                ("v_stride", ctypes.c_int64 * 3), ("o_stride", ctypes.c_int64 * 3)]


class Flashjit:
    def __init__(self, path, threads):
        lib = ctypes.CDLL(path)
        lib.fj_last_error.restype = ctypes.c_char_p
        lib.fj_status_name.restype = ctypes.c_char_p
        lib.fj_context_describe.restype = ctypes.c_char_p
        lib.fj_context_describe.argtypes = [ctypes.c_void_p]
        lib.fj_plan_execute.argtypes = [ctypes.c_void_p] * 7
        lib.fj_plan_destroy.argtypes = [ctypes.c_void_p]
        self.lib = lib
        self.ctx = ctypes.c_void_p()
        self.check(lib.fj_context_create(None, ctypes.byref(self.ctx)), "fj_context_create")
        text = self.lib.fj_context_describe(self.ctx).decode()
        if "%d threads" % threads not in text:
            sys.exit("flashjit's CPU worker count is not %d (set --threads to the core count):\n%s"
                     % (threads, text))

    def backend_line(self):
        for line in self.lib.fj_context_describe(self.ctx).decode().splitlines():
            if line.startswith("backend:"):
                return line[len("backend:"):].strip()
        return "?"

    def check(self, status, what):
        if status:
            raise RuntimeError("%s: %s: %s" % (what, self.lib.fj_status_name(status).decode(),
                                                self.lib.fj_last_error().decode()))

    def plan(self, q, k, v, causal):
        import torch
        b, hq, sq, d = q.shape
        _, hkv, sk, _ = k.shape
        dtype = {torch.float32: FJ_F32, torch.float16: FJ_F16, torch.bfloat16: FJ_BF16}[q.dtype]
        desc = Desc()
        self.lib.fj_attention_desc_init(ctypes.byref(desc), b, hq, hkv, sq, sk, d, dtype)
        desc.causal = FJ_CAUSAL_BOTTOM_RIGHT if causal else FJ_CAUSAL_NONE
        for name, t in (("q_stride", q), ("k_stride", k), ("v_stride", v), ("o_stride", q)):
            st = t.stride()  # [b, h, s, d] tensor -> flashjit (batch, seq, head)
            getattr(desc, name)[:] = (st[0], st[2], st[1])
        plan = ctypes.c_void_p()
        self.check(self.lib.fj_plan_create(self.ctx, ctypes.byref(desc), ctypes.byref(plan)),
                   "fj_plan_create")
        return plan

    def run(self, plan, q, k, v, o):
        self.check(self.lib.fj_plan_execute(plan, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                            o.data_ptr(), None, None), "fj_plan_execute")

    def destroy(self, plan):
        self.lib.fj_plan_destroy(plan)


if __name__ == "__main__":
    main()
