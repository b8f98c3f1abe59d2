#!/usr/bin/env python3
"""One attention shape through flashjit and PyTorch's SDPA backends, each
run a few times on the same random tensors, for a profiler to attach to
(`ncu -k regex:... python3 tools/profile_shape.py ...`). Prints nothing
but the plan's kernel line: timing is tools/compare_torch.py's job."""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashjit_ctypes import FJ_BF16, FJ_F16, Library

SDPA = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--shape", required=True, help="B,HQ,HKV,SQ,SK,D")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--backends", default="flashjit,flash", help="flashjit,flash,cudnn,fa3")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    b, hq, hkv, sq, sk, d = (int(x) for x in a.shape.split(","))
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(b, hq, sq, d, device="cuda", dtype=dt, generator=g)
    k = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt, generator=g)
    v = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt, generator=g)
    stream = torch.cuda.current_stream().cuda_stream
    for name in a.backends.split(","):
        if name == "flashjit":
            fj = Library(a.lib)
            plan, kernel = fj.plan(q, k, v, a.causal, FJ_BF16 if a.dtype == "bf16" else FJ_F16)
            print("flashjit kernel:", kernel, flush=True)
            o = torch.empty_like(q)
            for _ in range(a.runs):
                fj.execute(plan, q, k, v, o, stream)
            fj.destroy(plan)
        elif name == "fa3":
            # the fa3_fwd wheel takes BSHD tensors only
            import fa3_fwd_interface as fa3
            qs, ks, vs = (x.transpose(1, 2).contiguous() for x in (q, k, v))
            for _ in range(a.runs):
                fa3.flash_attn_func(qs, ks, vs, causal=a.causal)
        else:
            with sdpa_kernel([SDPA[name]]):
                for _ in range(a.runs):
                    F.scaled_dot_product_attention(q, k, v, is_causal=a.causal,
                                                   enable_gqa=hq != hkv)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
