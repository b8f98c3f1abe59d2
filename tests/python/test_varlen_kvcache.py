"""flashjit.varlen_attention and flashjit.attention_with_kvcache against the
float64 oracle (tests/python/oracle.py) run per sequence: odd lengths,
empty sequences, GQA, every causal kind and windows, seqused_k, dense and
paged caches with shuffled and shared pages and junk in the unused tail of
the block table, lse, out=, numpy, the custom operators (opcheck,
torch.compile) and every bad input (raised before anything is written).
Outputs are poisoned (NaN) before each call. CUDA cases are marked `cuda`."""
import math

import numpy as np
import pytest
import torch

import flashjit
import oracle
from oracle import uniform

SENTINEL = 7.25
MASKS = [
    (None, (-1, -1)),
    ("bottom-right", (-1, -1)),
    ("top-left", (-1, -1)),
    ("bottom-right", (3, 0)),
    ("top-left", (2, -1)),
    (None, (2, 5)),
]


def mask_id(m):
    return "%s_w%d,%d" % (m[0] or "none", m[1][0], m[1][1])


def reference(q, k, v, causal, window, scale=None):
    """(out [Sq, Hq, D], lse [Hq, Sq]) in float64 of one sequence (no keys:
    zeros and -inf)."""
    Sq, Hq, D = q.shape
    if k.shape[0] == 0:
        return (torch.zeros(Sq, Hq, D, dtype=torch.float64),
                torch.full((Hq, Sq), -math.inf, dtype=torch.float64))
    out, lse = oracle.attention(q[None], k[None], v[None], causal, window, scale)
    return out[0], lse[0]


def check_close(got, want, dtype, what):
    got = got.detach().to(torch.float64)
    assert not torch.isnan(got).any(), "unwritten (NaN) elements in %s" % what
    err = oracle.rel_error(got, want)
    assert err <= oracle.TOLERANCE[dtype], "%s: relative error %.3g" % (what, err)


def check_lse(got, want, dtype, what):
    got = got.to(torch.float64)
    inf = torch.isneginf(want)
    assert torch.equal(torch.isneginf(got), inf), "%s: -inf rows differ" % what
    if (~inf).any():
        e = (got[~inf] - want[~inf]).abs().max().item()
        assert e <= max(1e-4, 4 * oracle.TOLERANCE[dtype]), "%s: lse error %.3g" % (what, e)


def random_lengths(gen, batch, most, empty_every=3):
    """batch lengths in 0..most, every empty_every-th one empty."""
    n = torch.randint(1, most + 1, (batch,), generator=gen)
    n[::empty_every] = 0 if empty_every else n[::empty_every]
    return [int(x) for x in n]


def offsets(lengths):
    return torch.tensor([0] + list(np.cumsum(lengths)), dtype=torch.int32)


# ---- varlen ----------------------------------------------------------------------------


def varlen_case(gen, dtype, lq, lk, hq=6, hkv=2, d=24, spare_q=0, spare_k=0):
    tq, tk = sum(lq) + spare_q, sum(lk) + spare_k
    return (uniform(gen, (tq, hq, d), dtype), uniform(gen, (tk, hkv, d), dtype),
            uniform(gen, (tk, hkv, d), dtype), offsets(lq), offsets(lk))


def varlen_reference(q, k, v, cu_q, cu_k, used, causal, window, scale=None):
    """Per-sequence oracle: (out [total_q, Hq, D], lse [Hq, total_q]) for the
    tokens the sequences own (others NaN)."""
    out = torch.full(q.shape, math.nan, dtype=torch.float64)
    lse = torch.full((q.shape[1], q.shape[0]), math.nan, dtype=torch.float64)
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if used is not None:
            k1 = k0 + int(used[b])
        if q1 > q0:
            o, l = reference(q[q0:q1], k[k0:k1], v[k0:k1], causal, window, scale)
            out[q0:q1], lse[:, q0:q1] = o, l
    return out, lse


@pytest.mark.parametrize("mask", MASKS, ids=mask_id)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", ["cpu", "cpu-reference"])
def test_varlen_matches_oracle(gen, mask, dtype, backend):
    causal, window = mask
    batch = 7
    lq = random_lengths(gen, batch, 37)
    lk = [n + int(torch.randint(0, 9, (1,), generator=gen)) - 4 for n in lq]  # Sq != Sk both ways
    lk = [max(n, 0) for n in lk]
    lk[1] = 0  # a sequence with queries and no keys
    lq[4] = max(lq[4], 1)
    q, k, v, cu_q, cu_k = varlen_case(gen, dtype, lq, lk)
    out = torch.full_like(q, math.nan)
    got, lse = flashjit.varlen_attention(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal,
                                         window=window, return_lse=True, out=out, backend=backend)
    assert got is out and lse.shape == (6, q.shape[0]) and lse.dtype == torch.float32
    want, want_lse = varlen_reference(q, k, v, cu_q, cu_k, None, causal, window)
    check_close(got, want, dtype, "varlen %s" % (lq,))
    check_lse(lse, want_lse, dtype, "varlen lse")


def test_varlen_seqused_and_spare_tokens(gen):
    """seqused_k takes a prefix of each sequence's keys; tokens past
    cu_seqlens_q[batch] are not written (out's NaN poison stays)."""
    lq, lk = [5, 0, 13, 1, 9], [11, 4, 13, 0, 20]
    q, k, v, cu_q, cu_k = varlen_case(gen, torch.float32, lq, lk, hq=4, hkv=4, d=13, spare_q=3,
                                      spare_k=2)
    used = torch.tensor([7, 4, 0, 0, 20], dtype=torch.int32)
    out = torch.full_like(q, math.nan)
    _, lse = flashjit.varlen_attention(q, k, v, cu_q, cu_k, 13, 20, seqused_k=used,
                                       causal="bottom-right", window=(6, -1), scale=0.3, out=out,
                                       return_lse=True)
    want, want_lse = varlen_reference(q, k, v, cu_q, cu_k, used, "bottom-right", (6, -1), 0.3)
    n = sum(lq)
    check_close(out[:n], want[:n], torch.float32, "seqused_k")
    check_lse(lse[:, :n], want_lse[:, :n], torch.float32, "seqused_k lse")
    assert torch.isnan(out[n:]).all(), "tokens past cu_seqlens_q[batch] were written"
    # without out=: the same values
    again = flashjit.varlen_attention(q, k, v, cu_q, cu_k, 13, 20, seqused_k=used,
                                      causal="bottom-right", window=(6, -1), scale=0.3)
    assert torch.equal(again[:n], out[:n])


def test_varlen_strided_layouts(gen):
    """Slices of a packed QKV projection (token stride > heads x head_dim)."""
    lq = [3, 17, 0, 8]
    cu = offsets(lq)
    qkv = uniform(gen, (sum(lq), 3, 4, 16))
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    got = flashjit.varlen_attention(q, k, v, cu, cu, 17, 17, causal="top-left")
    want, _ = varlen_reference(q, k, v, cu, cu, None, "top-left", (-1, -1))
    check_close(got, want, torch.float32, "strided")


def test_varlen_equals_attention_on_one_sequence(gen):
    q, k, v = uniform(gen, (1, 29, 8, 32)), uniform(gen, (1, 41, 2, 32)), uniform(gen, (1, 41, 2, 32))
    want = flashjit.attention(q, k, v, causal="bottom-right", window=(9, 2))
    got = flashjit.varlen_attention(q[0], k[0], v[0], offsets([29]), offsets([41]), 29, 41,
                                    causal="bottom-right", window=(9, 2))
    torch.testing.assert_close(got, want[0], rtol=1e-6, atol=1e-6)


def test_varlen_all_empty(gen):
    q, k, v, cu_q, cu_k = varlen_case(gen, torch.float32, [0, 0], [0, 4])
    out = flashjit.varlen_attention(q, k, v, cu_q, cu_k, 0, 4)
    assert out.shape == (0, 6, 24)
    q, k, v, cu_q, cu_k = varlen_case(gen, torch.float32, [3, 2], [0, 0])
    out, lse = flashjit.varlen_attention(q, k, v, cu_q, cu_k, 3, 0, return_lse=True)
    assert (out == 0).all() and torch.isneginf(lse).all()


def test_varlen_numpy(gen):
    lq, lk = [4, 0, 9], [6, 3, 9]
    q, k, v, cu_q, cu_k = varlen_case(gen, torch.float32, lq, lk, hq=2, hkv=1, d=8)
    out, lse = flashjit.varlen_attention(q.numpy(), k.numpy(), v.numpy(), cu_q.numpy(),
                                         cu_k.numpy(), 9, 9, causal="bottom-right",
                                         return_lse=True)
    assert isinstance(out, np.ndarray) and isinstance(lse, np.ndarray)
    want, want_lse = varlen_reference(q, k, v, cu_q, cu_k, None, "bottom-right", (-1, -1))
    check_close(torch.from_numpy(out), want, torch.float32, "numpy")
    check_lse(torch.from_numpy(lse), want_lse, torch.float32, "numpy lse")
    with pytest.raises(TypeError, match="cu_seqlens_k is a torch.Tensor but q is a ndarray"):
        flashjit.varlen_attention(q.numpy(), k.numpy(), v.numpy(), cu_q.numpy(), cu_k, 9, 9)


# ---- KV cache --------------------------------------------------------------------------


def cache_reference(q, kc, vc, lengths, causal, window, scale=None):
    """Per-sequence oracle over dense caches [B, Sk_max, Hkv, D]."""
    out = torch.empty(q.shape, dtype=torch.float64)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float64)
    for b, n in enumerate(lengths):
        out[b], lse[b] = reference(q[b], kc[b, :n], vc[b, :n], causal, window, scale)
    return out, lse


def paged_from_dense(gen, kc, vc, lengths, page, spare_pages=3, tail=-1):
    """The dense caches' used keys in page pools, pages shuffled (and spare
    pages of noise), with a block table whose unused tail holds `tail`."""
    B, S, H, D = kc.shape
    per = [math.ceil(n / page) for n in lengths]
    total = sum(per) + spare_pages
    order = torch.randperm(total, generator=gen)
    kp = uniform(gen, (total, page, H, D), kc.dtype)
    vp = uniform(gen, (total, page, H, D), kc.dtype)
    max_pages = max(math.ceil(S / page), 1) + 1
    table = torch.full((B, max_pages), tail, dtype=torch.int32)
    i = 0
    for b, n in enumerate(lengths):
        for j in range(per[b]):
            p = int(order[i])
            i += 1
            table[b, j] = p
            rows = min(page, n - j * page)
            kp[p, :rows] = kc[b, j * page:j * page + rows]
            vp[p, :rows] = vc[b, j * page:j * page + rows]
    return kp, vp, table


@pytest.mark.parametrize("mask", MASKS, ids=mask_id)
@pytest.mark.parametrize("sq", [1, 5])
def test_kvcache_dense_and_paged_match_oracle(gen, mask, sq):
    causal, window = mask
    B, S, hq, hkv, d = 5, 23, 6, 3, 20
    q = uniform(gen, (B, sq, hq, d))
    kc, vc = uniform(gen, (B, S, hkv, d)), uniform(gen, (B, S, hkv, d))
    lengths = [23, 0, 1, 7, int(torch.randint(2, 23, (1,), generator=gen))]
    seqlens = torch.tensor(lengths, dtype=torch.int32)
    want, want_lse = cache_reference(q, kc, vc, lengths, causal, window)
    out = torch.full_like(q, math.nan)
    got, lse = flashjit.attention_with_kvcache(q, kc, vc, seqlens, causal=causal, window=window,
                                               return_lse=True, out=out)
    assert got is out
    check_close(got, want, torch.float32, "dense cache %s" % (lengths,))
    check_lse(lse, want_lse, torch.float32, "dense cache lse")
    for page, tail in ((4, -1), (5, 2**31 - 1), (1, 12345), (16, -7)):
        kp, vp, table = paged_from_dense(gen, kc, vc, lengths, page, tail=tail)
        got, lse = flashjit.attention_with_kvcache(q, kp, vp, seqlens, table, causal=causal,
                                                   window=window, return_lse=True)
        check_close(got, want, torch.float32, "paged (page %d)" % page)
        check_lse(lse, want_lse, torch.float32, "paged lse (page %d)" % page)


def test_kvcache_shared_pages_gqa_bf16(gen):
    """Two sequences sharing a prefix's pages, the same pages named twice,
    a strided pool ([pages, heads, page, dim] memory), bf16."""
    page, hq, hkv, d = 4, 8, 2, 32
    kp = uniform(gen, (6, hkv, page, d), torch.bfloat16).transpose(1, 2)
    vp = uniform(gen, (6, hkv, page, d), torch.bfloat16).transpose(1, 2)
    table = torch.tensor([[3, 0, 5], [3, 0, 1], [2, 2, -1]], dtype=torch.int32)
    lengths = [10, 12, 6]
    q = uniform(gen, (3, 3, hq, d), torch.bfloat16)
    got = flashjit.attention_with_kvcache(q, kp, vp, torch.tensor(lengths, dtype=torch.int32),
                                          table, causal="bottom-right")
    for b, n in enumerate(lengths):
        pages = [int(p) for p in table[b, :math.ceil(n / page)]]
        k = torch.cat([kp[p] for p in pages])[:n]
        v = torch.cat([vp[p] for p in pages])[:n]
        want, _ = reference(q[b], k, v, "bottom-right", (-1, -1))
        check_close(got[b], want, torch.bfloat16, "shared pages, sequence %d" % b)


def test_kvcache_dense_equals_attention(gen):
    """Without a block table and with full caches, attention_with_kvcache is
    flashjit.attention on the same tensors; with shorter lengths, it is
    flashjit.attention on each sequence's prefix."""
    B, S, sq = 3, 37, 4
    q = uniform(gen, (B, sq, 4, 64))
    kc, vc = uniform(gen, (B, S, 2, 64)), uniform(gen, (B, S, 2, 64))
    full = torch.full((B,), S, dtype=torch.int32)
    for causal, window in MASKS:
        got, lse = flashjit.attention_with_kvcache(q, kc, vc, full, causal=causal, window=window,
                                                   return_lse=True)
        want, want_lse = flashjit.attention(q, kc, vc, causal=causal, window=window,
                                            return_lse=True)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(lse, want_lse, rtol=1e-6, atol=1e-6)
    lengths = [37, 5, 20]
    got = flashjit.attention_with_kvcache(q, kc, vc, torch.tensor(lengths, dtype=torch.int32),
                                          causal="bottom-right")
    for b, n in enumerate(lengths):
        want = flashjit.attention(q[b:b + 1], kc[b:b + 1, :n], vc[b:b + 1, :n],
                                  causal="bottom-right")
        torch.testing.assert_close(got[b:b + 1], want, rtol=1e-6, atol=1e-6)


def test_kvcache_numpy(gen):
    q = uniform(gen, (2, 3, 2, 8))
    kc, vc = uniform(gen, (5, 4, 1, 8)), uniform(gen, (5, 4, 1, 8))
    table = torch.tensor([[4, 1], [0, 99]], dtype=torch.int32)
    lengths = [7, 3]
    got = flashjit.attention_with_kvcache(q.numpy(), kc.numpy(), vc.numpy(),
                                          np.array(lengths, dtype=np.int32), table.numpy(),
                                          causal="bottom-right")
    assert isinstance(got, np.ndarray)
    want = flashjit.attention_with_kvcache(q, kc, vc, torch.tensor(lengths, dtype=torch.int32),
                                           table, causal="bottom-right")
    assert torch.equal(torch.from_numpy(got), want)
    k0 = torch.cat([kc[4], kc[1]])[:7]
    v0 = torch.cat([vc[4], vc[1]])[:7]
    check_close(want[0], reference(q[0], k0, v0, "bottom-right", (-1, -1))[0], torch.float32,
                "numpy paged")


# ---- the operators ---------------------------------------------------------------------


def test_opcheck(gen):
    q, k, v, cu_q, cu_k = varlen_case(gen, torch.float32, [3, 0, 5], [4, 2, 6])
    used = torch.tensor([4, 1, 6], dtype=torch.int32)
    for return_lse in (False, True):
        torch.library.opcheck(torch.ops.flashjit.varlen_attention.default,
                              (q, k, v, cu_q, cu_k, used, 5, 6, "bottom-right", -1, -1, None,
                               return_lse, "auto"))
        torch.library.opcheck(torch.ops.flashjit.varlen_attention_out.default,
                              (q, k, v, torch.empty_like(q), cu_q, cu_k, None, 5, 6, "top-left",
                               2, -1, 0.5, return_lse, "auto"))
    qc = uniform(gen, (2, 3, 4, 16))
    kc, vc = uniform(gen, (5, 4, 2, 16)), uniform(gen, (5, 4, 2, 16))
    seqlens = torch.tensor([6, 3], dtype=torch.int32)
    table = torch.tensor([[2, 0], [4, -1]], dtype=torch.int32)
    for return_lse in (False, True):
        torch.library.opcheck(torch.ops.flashjit.attention_with_kvcache.default,
                              (qc, kc, vc, seqlens, table, "bottom-right", -1, -1, None,
                               return_lse, "auto"))
        torch.library.opcheck(torch.ops.flashjit.attention_with_kvcache_out.default,
                              (qc, kc[:2], vc[:2], torch.empty_like(qc), seqlens.clamp(max=4),
                               None, "none",
                               -1, 1, None, return_lse, "auto"))


def test_compile_fullgraph(gen):
    q, k, v, cu_q, cu_k = varlen_case(gen, torch.float32, [3, 7, 5], [4, 9, 6])
    qc = uniform(gen, (3, 2, 6, 24))
    kc, vc = uniform(gen, (6, 4, 2, 24)), uniform(gen, (6, 4, 2, 24))
    seqlens = torch.tensor([6, 3, 8], dtype=torch.int32)
    table = torch.tensor([[2, 0], [4, -1], [1, 3]], dtype=torch.int32)

    def varlen(q, k, v):
        out, lse = flashjit.varlen_attention(q * 2, k, v, cu_q, cu_k, 7, 9,
                                             causal="bottom-right", return_lse=True)
        return out + 1, lse

    def kvcache(q, kc, vc):
        return flashjit.attention_with_kvcache(q, kc, vc, seqlens, table, causal="top-left",
                                               window=(3, 0)).sum(-1)

    for fn, args in ((varlen, (q, k, v)), (kvcache, (qc, kc, vc))):
        torch._dynamo.reset()
        got = torch.compile(fn, fullgraph=True)(*args)
        want = fn(*args)
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, msg=fn.__name__)


def test_no_backward(gen):
    q, k, v, cu_q, cu_k = varlen_case(gen, torch.float32, [3], [4])
    q.requires_grad_(True)
    with pytest.raises(RuntimeError, match="forward pass of attention only"):
        flashjit.varlen_attention(q, k, v, cu_q, cu_k, 3, 4).sum().backward()


# ---- bad input: raised before anything is written -------------------------------------


def expect(exc, match, fn, *args, out, **kw):
    out.fill_(SENTINEL)
    before = out.clone()
    with pytest.raises(exc, match=match):
        fn(*args, out=out, **kw)
    assert torch.equal(out, before), "a failed call wrote to out"


def varlen_args():
    q, k, v = torch.randn(9, 4, 16), torch.randn(11, 2, 16), torch.randn(11, 2, 16)
    cu_q = torch.tensor([0, 4, 4, 9], dtype=torch.int32)
    cu_k = torch.tensor([0, 3, 8, 11], dtype=torch.int32)
    return q, k, v, cu_q, cu_k


I32 = torch.int32
VARLEN_ERRORS = [
    # (exception, message, change to (q, k, v, cu_q, cu_k, max_q, max_k), keywords)
    (TypeError, r"cu_seqlens_q must be int32, not torch.int64",
     lambda a: a[:3] + (a[3].long(),) + a[4:], {}),
    (ValueError, r"cu_seqlens_q has 4 entries and cu_seqlens_k 3: both are \[batch \+ 1\]",
     lambda a: a[:4] + (a[4][:3],) + a[5:], {}),
    (ValueError, r"cu_seqlens_k must be 1-D \[batch \+ 1\], got shape \(1, 4\)",
     lambda a: a[:4] + (a[4][None],) + a[5:], {}),
    (ValueError, r"cu_seqlens_k's last dimension is not contiguous",
     lambda a: a[:4] + (torch.tensor([0, 0, 3, 0, 8, 0, 11, 0], dtype=I32)[::2],) + a[5:], {}),
    (ValueError, r"devices differ: q is on cpu and cu_seqlens_q on meta",
     lambda a: a[:3] + (a[3].to("meta"),) + a[4:], {}),
    (ValueError, r"seqused_k has 2 entries; it must have batch = 3",
     lambda a: a, {"seqused_k": torch.tensor([1, 2], dtype=I32)}),
    (TypeError, r"seqused_k must be int32, not torch.float32",
     lambda a: a, {"seqused_k": torch.ones(3)}),
    (TypeError, r"max_seqlen_q must be an int, not float", lambda a: a[:5] + (5.0, 5), {}),
    (ValueError, r"max_seqlen_k \(-1\) must be in 0\.\.", lambda a: a[:5] + (5, -1), {}),
    (ValueError, r"q must be 3-D \[tokens, heads, head_dim\]",
     lambda a: (a[0][None],) + a[1:], {}),
    (TypeError, r"dtypes differ: q is torch.float32 and v is torch.float16",
     lambda a: a[:2] + (a[2].half(),) + a[3:], {}),
    (ValueError, r"token counts differ: k has 11 keys and v 10 values",
     lambda a: a[:2] + (a[2][:10],) + a[3:], {}),
    (ValueError, r"head counts not divisible: q has 4 heads and k 3",
     lambda a: (a[0], torch.randn(11, 3, 16), torch.randn(11, 3, 16)) + a[3:], {}),
    (TypeError, r"causal=True is ambiguous", lambda a: a, {"causal": True}),
    (ValueError, r"window left \(-2\) must be -1", lambda a: a, {"window": (-2, 0)}),
    # the values, checked by the library
    (flashjit.ArgumentError, r"cu_seqlens_q\[2\] \(3\) is below cu_seqlens_q\[1\] \(4\)",
     lambda a: a[:3] + (torch.tensor([0, 4, 3, 9], dtype=I32),) + a[4:], {}),
    (flashjit.ArgumentError, r"cu_seqlens_k\[0\] \(1\) must be 0",
     lambda a: a[:4] + (torch.tensor([1, 3, 8, 11], dtype=I32),) + a[5:], {}),
    (flashjit.ArgumentError, r"cu_seqlens_q\[batch = 3\] \(10\) is past total_q \(9\)",
     lambda a: a[:3] + (torch.tensor([0, 4, 4, 10], dtype=I32), a[4], 6, 5), {}),
    (flashjit.ArgumentError, r"sequence 1 has 5 keys .* more than the plan's max_seqlen_k \(4\)",
     lambda a: a[:5] + (5, 4), {}),
    (flashjit.ArgumentError, r"seqused_k\[1\] \(6\) must be in \[0, 5\]",
     lambda a: a, {"seqused_k": torch.tensor([3, 6, 0], dtype=I32)}),
]


@pytest.mark.parametrize("case", range(len(VARLEN_ERRORS)))
def test_varlen_errors(case):
    exc, match, change, kw = VARLEN_ERRORS[case]
    args = change(varlen_args() + (5, 5))
    expect(exc, match, flashjit.varlen_attention, *args, out=torch.empty(9, 4, 16), **kw)


def test_varlen_bad_out():
    q, k, v, cu_q, cu_k = varlen_args()
    expect(ValueError, r"out has shape \(9, 4, 8\); it must be \(9, 4, 16\)",
           flashjit.varlen_attention, q, k, v, cu_q, cu_k, 5, 5, out=torch.empty(9, 4, 8))
    expect(TypeError, r"dtypes differ: out is torch.float16 and q is torch.float32",
           flashjit.varlen_attention, q, k, v, cu_q, cu_k, 5, 5,
           out=torch.empty(9, 4, 16, dtype=torch.float16))
    expect(ValueError, r"out's rows overlap", flashjit.varlen_attention, q, k, v, cu_q, cu_k, 5, 5,
           out=torch.empty(1, 4, 16).expand(9, 4, 16))
    with pytest.raises(ValueError, match=r"out overlaps q in memory"):
        flashjit.varlen_attention(q, k, v, cu_q, cu_k, 5, 5, out=q)
    with pytest.raises(TypeError, match=r"q is a torch.Tensor, so cu_seqlens_k must be one too"):
        flashjit.varlen_attention(q, k, v, cu_q, [0, 3, 8, 11], 5, 5)
    with pytest.raises(TypeError, match=r"return_lse must be a bool"):
        flashjit.varlen_attention(q, k, v, cu_q, cu_k, 5, 5, return_lse=1)


@pytest.mark.parametrize("mask", MASKS[:4], ids=mask_id)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kvcache_append_matches_writing_first(gen, mask, dtype):
    """k=, v= appended into dense and paged caches (odd page sizes, pages
    shuffled, a sequence whose new keys start a page, one that was empty):
    the caches afterwards equal writing the new keys by hand, and the output
    the oracle over the lengths with them."""
    causal, window = mask
    B, S, hq, hkv, d = 4, 19, 6, 2, 24
    for n in (1, 3):
        lengths = [0, 4, 7, S - n]
        q = uniform(gen, (B, n, hq, d), dtype)
        kc, vc = uniform(gen, (B, S, hkv, d), dtype), uniform(gen, (B, S, hkv, d), dtype)
        k, v = uniform(gen, (B, n, hkv, d), dtype), uniform(gen, (B, n, hkv, d), dtype)
        seqlens = torch.tensor(lengths, dtype=torch.int32)
        kw, vw = kc.clone(), vc.clone()
        for b, L in enumerate(lengths):
            kw[b, L:L + n], vw[b, L:L + n] = k[b], v[b]
        total = [L + n for L in lengths]
        want, want_lse = cache_reference(q, kw, vw, total, causal, window)
        for page in (None, 1, 4, 7):
            if page is None:
                kx, vx, table = kc.clone(), vc.clone(), None
            else:
                # pages for the keys after appending, the new ones still noise
                kx, vx, table = paged_from_dense(gen, kc, vc, total, page)
                kpw, vpw = kx.clone(), vx.clone()
                for b, L in enumerate(lengths):
                    for t in range(n):
                        p, r = int(table[b, (L + t) // page]), (L + t) % page
                        kpw[p, r], vpw[p, r] = k[b, t], v[b, t]
            out = torch.full_like(q, math.nan)
            got, lse = flashjit.attention_with_kvcache(q, kx, vx, seqlens, table, causal=causal,
                                                       window=window, return_lse=True, out=out,
                                                       k=k, v=v)
            what = "append n=%d page %s %s" % (n, page, dtype)
            assert got is out
            check_close(got, want, dtype, what)
            check_lse(lse, want_lse, dtype, what + " lse")
            assert torch.equal(seqlens, torch.tensor(lengths, dtype=torch.int32)), what
            if page is None:
                assert torch.equal(kx, kw) and torch.equal(vx, vw), what
            else:
                assert torch.equal(kx, kpw) and torch.equal(vx, vpw), what


def test_kvcache_append_errors_write_nothing():
    """Every bad append is refused before either cache is written: k
    without v, shapes and dtypes of k and v, a length past the cache's
    room, a page entry outside the pools where the new keys go, a bad out,
    DLPack arrays."""
    q, kc, vc, seqlens, table = kvcache_args()  # pages of 4, 2 columns: room for 8 keys
    k, v = torch.randn(2, 3, 2, 16), torch.randn(2, 3, 2, 16)
    cases = [
        (TypeError, r"k was given without v", dict(k=k)),
        (TypeError, r"v was given without k", dict(v=v)),
        (ValueError, r"k must be 4-D", dict(k=k[0], v=v)),
        (ValueError, r"v has shape \(2, 3, 2, 8\); it must be \(2, 3, 2, 16\)",
         dict(k=k, v=torch.randn(2, 3, 2, 8))),
        (ValueError, r"k has shape \(1, 3, 2, 16\); it must be \(2, 3, 2, 16\)",
         dict(k=k[:1], v=v)),
        (ValueError, r"k is torch.bfloat16 on cpu; it must match k_cache",
         dict(k=k.bfloat16(), v=v)),
        (ValueError, r"cache_seqlens\[0\] \(6\) \+ the 3 new keys must be in \[0, 8\]",
         dict(k=k, v=v)),
        (ValueError, r"out has shape", dict(k=k[:, :1], v=v[:, :1], out=torch.empty(2, 3, 4, 8))),
    ]
    for exc, match, kw in cases:
        before = (kc.clone(), vc.clone())
        out = kw.pop("out", torch.full_like(q, SENTINEL))
        with pytest.raises(exc, match=match):
            flashjit.attention_with_kvcache(q, kc, vc, seqlens, table, out=out, **kw)
        assert torch.equal(kc, before[0]) and torch.equal(vc, before[1]), match
    # the new keys' page outside the pools (sequence 1: keys 3..5 go to its
    # second page, entry -1)
    bad = torch.tensor([[2, 0], [4, -1]], dtype=I32)
    before = (kc.clone(), vc.clone())
    with pytest.raises(ValueError, match=r"block_table\[1\]\[1\] \(-1\) is outside the pools"):
        flashjit.attention_with_kvcache(q, kc, vc, torch.tensor([1, 3], dtype=I32), bad,
                                        k=k, v=v)
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])
    # dense: past the cache's seqlen
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\] \(3\) \+ the 3 new keys must be in "
                       r"\[0, 4\]: .*k_cache's seqlen"):
        flashjit.attention_with_kvcache(q, kc[:2], vc[:2], torch.tensor([1, 3], dtype=I32), None,
                                        k=k, v=v)
    with pytest.raises(TypeError, match=r"k= and v= \(appending new keys\) take torch tensors"):
        flashjit.attention_with_kvcache(q.numpy(), kc.numpy(), vc.numpy(), seqlens.numpy(),
                                        table.numpy(), k=k.numpy(), v=v.numpy())


def kvcache_args():
    q = torch.randn(2, 3, 4, 16)
    kc, vc = torch.randn(5, 4, 2, 16), torch.randn(5, 4, 2, 16)
    seqlens = torch.tensor([6, 3], dtype=I32)
    table = torch.tensor([[2, 0], [4, -1]], dtype=I32)
    return q, kc, vc, seqlens, table


KVCACHE_ERRORS = [
    # (exception, message, change to (q, k_cache, v_cache, cache_seqlens, block_table))
    (TypeError, r"cache_seqlens must be int32, not torch.int64",
     lambda a: a[:3] + (a[3].long(), a[4])),
    (ValueError, r"cache_seqlens has 3 entries; it must have batch = 2",
     lambda a: a[:3] + (torch.tensor([1, 2, 3], dtype=I32), a[4])),
    (TypeError, r"block_table must be int32, not torch.int64", lambda a: a[:4] + (a[4].long(),)),
    (ValueError, r"block_table must be 2-D \[batch, max_pages\]",
     lambda a: a[:4] + (a[4].flatten(),)),
    (ValueError, r"block_table has 1 rows; it must have batch = 2", lambda a: a[:4] + (a[4][:1],)),
    (ValueError, r"block_table has no columns", lambda a: a[:4] + (a[4][:, :0],)),
    (ValueError, r"block_table's rows overlap",
     lambda a: a[:4] + (torch.tensor([[2, 0]], dtype=I32).expand(2, 2),)),
    (ValueError, r"k_cache has shape \(5, 4, 2, 16\) and v_cache \(5, 3, 2, 16\): they must hold "
     r"the same pages", lambda a: (a[0], a[1], a[2][:, :3]) + a[3:]),
    (ValueError, r"batch sizes differ: q has 2 and k_cache has 5 \(without block_table",
     lambda a: a[:4] + (None,)),
    (ValueError, r"k_cache must be 4-D", lambda a: (a[0], a[1][0], a[2][0]) + a[3:]),
    (TypeError, r"dtypes differ: q is torch.float32 and k_cache is torch.bfloat16",
     lambda a: (a[0], a[1].bfloat16(), a[2].bfloat16()) + a[3:]),
    (ValueError, r"head_dim differs: q has 16 and k_cache has 8; q and k_cache need one head_dim",
     lambda a: (a[0], torch.randn(5, 4, 2, 8), a[2]) + a[3:]),
    (ValueError, r"v_cache's head_dim \(577, head_dim_v\) must be in 1..576",
     lambda a: (a[0], a[1], torch.randn(5, 4, 2, 577)) + a[3:]),
    # the values, checked by the library
    (flashjit.ArgumentError, r"block_table\[0\]\[1\] \(5, entry 1\) is outside the pools: a page "
     r"must be in \[0, num_pages = 5\)",
     lambda a: a[:4] + (torch.tensor([[2, 5], [4, -1]], dtype=I32),)),
    (flashjit.ArgumentError, r"cache_seqlens\[1\] \(9\) must be in \[0, max_pages x page_size = 8\]",
     lambda a: a[:3] + (torch.tensor([6, 9], dtype=I32), a[4])),
    (flashjit.ArgumentError, r"cache_seqlens\[0\] \(-1\) must be in",
     lambda a: a[:3] + (torch.tensor([-1, 3], dtype=I32), a[4])),
    (flashjit.ArgumentError, r"cache_seqlens\[1\] \(5\) must be in \[0, k_cache.shape\[1\] = 4\]",
     lambda a: (a[0], a[1][:2], a[2][:2], torch.tensor([4, 5], dtype=I32), None)),
]


@pytest.mark.parametrize("case", range(len(KVCACHE_ERRORS)))
def test_kvcache_errors(case):
    exc, match, change = KVCACHE_ERRORS[case]
    args = change(kvcache_args())
    expect(exc, match, flashjit.attention_with_kvcache, *args, out=torch.empty(2, 3, 4, 16))


def test_kvcache_bad_out_and_kinds():
    q, kc, vc, seqlens, table = kvcache_args()
    expect(ValueError, r"out has shape \(2, 3, 4, 8\); it must be \(2, 3, 4, 16\)",
           flashjit.attention_with_kvcache, q, kc, vc, seqlens, table,
           out=torch.empty(2, 3, 4, 8))
    with pytest.raises(ValueError, match=r"out overlaps k_cache in memory"):
        flashjit.attention_with_kvcache(q, kc, vc, seqlens, table,
                                        out=kc.view(-1)[:q.numel()].view(q.shape))
    with pytest.raises(TypeError, match=r"so block_table must be one too \(or None\)"):
        flashjit.attention_with_kvcache(q, kc, vc, seqlens, [[2, 0], [4, -1]])
    with pytest.raises(TypeError, match=r"block_table is a torch.Tensor but q is a ndarray"):
        flashjit.attention_with_kvcache(q.numpy(), kc.numpy(), vc.numpy(), seqlens.numpy(), table)


@pytest.mark.cuda
def test_cuda_matches_cpu():
    """CUDA runs varlen batches and KV-cache problems (flash_fwd's varlen and
    paged kernels): the same calls on CUDA tensors give the CPU backends'
    results within bf16's rounding, appending included; a page size that is
    no multiple of 16 (a dense cache of 12 keys is one page of 12) is CUDA's
    FJ_ERR_UNSUPPORTED naming page_size, with out untouched."""
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator().manual_seed(22)
    q, k, v = (torch.randn(9, 4, 64, generator=g).to(bf), torch.randn(11, 2, 64, generator=g).to(bf),
               torch.randn(11, 2, 64, generator=g).to(bf))
    cu_q = torch.tensor([0, 4, 9], dtype=I32)
    cu_k = torch.tensor([0, 3, 11], dtype=I32)
    for causal in (None, "bottom-right"):
        ref = flashjit.varlen_attention(q, k, v, cu_q, cu_k, 5, 8, causal=causal)
        got = flashjit.varlen_attention(q.to(dev), k.to(dev), v.to(dev), cu_q.to(dev),
                                        cu_k.to(dev), 5, 8, causal=causal)
        torch.testing.assert_close(got.cpu().float(), ref.float(), atol=2e-2, rtol=2e-2)
    qc = torch.randn(2, 1, 4, 64, generator=g).to(bf)
    kc = torch.randn(2, 16, 2, 64, generator=g).to(bf)
    vc = torch.randn(2, 16, 2, 64, generator=g).to(bf)
    seqlens = torch.tensor([5, 16], dtype=I32)
    for table in (None, torch.tensor([[1], [0]], dtype=I32)):
        ref = flashjit.attention_with_kvcache(qc, kc, vc, seqlens, table)
        got = flashjit.attention_with_kvcache(qc.to(dev), kc.to(dev), vc.to(dev), seqlens.to(dev),
                                              None if table is None else table.to(dev))
        torch.testing.assert_close(got.cpu().float(), ref.float(), atol=2e-2, rtol=2e-2)
        # appending one key per sequence, then attending
        kn = torch.randn(2, 1, 2, 64, generator=g).to(bf)
        kc_ref, vc_ref, kc_dev, vc_dev = kc.clone(), vc.clone(), kc.to(dev), vc.to(dev)
        ref = flashjit.attention_with_kvcache(qc, kc_ref, vc_ref, seqlens - 1, table, k=kn, v=kn)
        got = flashjit.attention_with_kvcache(qc.to(dev), kc_dev, vc_dev, (seqlens - 1).to(dev),
                                              None if table is None else table.to(dev),
                                              k=kn.to(dev), v=kn.to(dev))
        torch.testing.assert_close(got.cpu().float(), ref.float(), atol=2e-2, rtol=2e-2)
        assert torch.equal(kc_dev.cpu(), kc_ref) and torch.equal(vc_dev.cpu(), vc_ref)
    k12 = torch.randn(2, 12, 2, 64, device=dev, dtype=bf)
    out = torch.full_like(qc.to(dev), SENTINEL)
    with pytest.raises(flashjit.ArgumentError, match="FJ_ERR_UNSUPPORTED.*page_size 12") as e:
        flashjit.attention_with_kvcache(qc.to(dev), k12, k12, seqlens.clamp(max=12).to(dev),
                                        out=out)
    assert e.value.status == "FJ_ERR_UNSUPPORTED" and (out == SENTINEL).all()
