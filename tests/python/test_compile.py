"""The torch custom operators: torch.library.opcheck, torch.compile with
fullgraph=True (a graph break would fail it), dynamic shapes, and the
backward that refuses with a clear message."""
import pytest
import torch

import flashjit
import oracle
from oracle import uniform


def make(gen, device="cpu", dtype=torch.float32, sq=9, sk=13):
    return (uniform(gen, (2, sq, 4, 32), dtype, device), uniform(gen, (2, sk, 2, 32), dtype, device),
            uniform(gen, (2, sk, 2, 32), dtype, device))


@pytest.mark.parametrize("return_lse", [False, True])
def test_opcheck(gen, return_lse):
    q, k, v = make(gen)
    torch.library.opcheck(torch.ops.flashjit.attention.default,
                          (q, k, v, "bottom-right", -1, -1, None, return_lse, "auto", "attention"))
    out = torch.empty_like(q)
    torch.library.opcheck(torch.ops.flashjit.attention_out.default,
                          (q, k, v, out, "top-left", 3, -1, 0.5, return_lse, "auto", "attention"))


def compiled_matches_eager(gen, device, dtype):
    q, k, v = make(gen, device, dtype)

    def attn(q, k, v):
        return flashjit.attention(q * 2, k, v, causal="bottom-right", window=(4, 0)) + 1

    def attn_lse(q, k, v):
        out, lse = flashjit.attention(q, k, v, return_lse=True, scale=0.3)
        return out.sum(-1), lse * 2

    def attn_out(q, k, v):
        out = torch.empty_like(q)
        flashjit.attention(q, k, v, out=out, causal="top-left")
        return out

    def sdpa(q, k, v):
        # a sum of squares, not of the outputs: their plain sum cancels
        # (outputs of both signs), and the rounding of 2304 terms of about
        # 0.3 then exceeded the tolerance against a sum of about 0.3
        return flashjit.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                             is_causal=True, enable_gqa=True).square().sum()

    for fn in (attn, attn_lse, attn_out, sdpa):
        torch._dynamo.reset()
        got = torch.compile(fn, fullgraph=True)(q, k, v)
        want = fn(q, k, v)
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            # inductor may sum in another order than eager: rounding only
            # (for bf16, one unit in the last place)
            tol = 1e-5 if dtype == torch.float32 else 1.6e-2
            torch.testing.assert_close(g, w, rtol=tol, atol=tol, msg=fn.__name__)


def test_compile_fullgraph_cpu(gen):
    compiled_matches_eager(gen, "cpu", torch.float32)


def test_compile_dynamic_shapes(gen):
    torch._dynamo.reset()
    fn = torch.compile(lambda q, k, v: flashjit.attention(q, k, v, causal="bottom-right"),
                       fullgraph=True, dynamic=True)
    for sq, sk in ((9, 13), (1, 40), (17, 17)):
        q, k, v = make(gen, sq=sq, sk=sk)
        oracle.check(fn(q, k, v), None, q, k, v, "bottom-right")


def test_compile_reports_bad_input_at_trace_time(gen):
    q, k, v = make(gen)
    torch._dynamo.reset()
    fn = torch.compile(lambda q, k, v: flashjit.attention(q, k, v), fullgraph=True)
    with pytest.raises(Exception, match=r"dtypes differ: q is torch.float32 and k is torch.float16"):
        fn(q, k.half(), v)


def test_backward_raises_clearly(gen):
    q, k, v = make(gen)
    q.requires_grad_()
    out = flashjit.attention(q, k, v)
    with pytest.raises(RuntimeError, match=r"flashjit computes the forward pass of attention only"):
        out.sum().backward()


@pytest.mark.cuda
def test_compile_fullgraph_cuda(gen):
    compiled_matches_eager(gen, "cuda", torch.bfloat16)
