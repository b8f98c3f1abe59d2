"""V's head dim other than Q's and K's (head_dim_v; DeepSeek's MLA: q and k
rows of 192 against v rows of 128, or 576 against 512): flashjit.attention,
sdpa, varlen_attention and attention_with_kvcache take a v whose last
dimension differs from q's, on the CPU backends, against the float64 oracle
(tests/python/oracle.py: torch's SDPA math backend, which takes such a v);
outputs poisoned (NaN) before each call; odd sizes, Sq != Sk both ways, GQA
and MQA, every mask, f32/f16/bf16, decode and prefill shapes, lse, out=,
numpy, the operators (opcheck, the fake kernels' shapes); bad shapes and the
CUDA refusal (on metadata, no GPU needed) raised naming the argument."""
import math

import numpy as np
import pytest
import torch

import flashjit
import oracle
from oracle import uniform

SENTINEL = 7.25
# (Dqk, Dv)
PAIRS = [(192, 128), (128, 192), (576, 512), (64, 32), (1, 7), (7, 1), (33, 17), (17, 33)]
# (batch, heads_q, heads_kv, seqlen_q, seqlen_k): decode (1..16 rows per kv
# head, the cpu backend's decode path) and prefill, Sq above and below Sk
SHAPES = [(1, 16, 1, 1, 130), (2, 8, 2, 2, 41), (1, 4, 4, 16, 33), (2, 4, 1, 37, 20),
          (1, 6, 2, 65, 129)]
MASKS = [
    (None, (-1, -1)),
    ("bottom-right", (-1, -1)),
    ("top-left", (-1, -1)),
    ("bottom-right", (5, 0)),
    (None, (3, 7)),
]


def pair_id(p):
    return "d%d_dv%d" % p


def shape_id(s):
    return "b%d_hq%d_hkv%d_sq%d_sk%d" % s


def make(gen, shape, pair, dtype=torch.float32):
    b, hq, hkv, sq, sk = shape
    d, dv = pair
    return (uniform(gen, (b, sq, hq, d), dtype), uniform(gen, (b, sk, hkv, d), dtype),
            uniform(gen, (b, sk, hkv, dv), dtype))


def run_and_check(q, k, v, causal, window, backend, context):
    b, sq, hq, _ = q.shape
    out = torch.full((b, sq, hq, v.shape[3]), math.nan, dtype=q.dtype)
    got, lse = flashjit.attention(q, k, v, causal=causal, window=window, return_lse=True, out=out,
                                  backend=backend)
    assert got is out
    oracle.check(out, lse, q, k, v, causal, window, None, context)


@pytest.mark.parametrize("backend", ["cpu", "cpu-reference"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_pairs(gen, pair, shape, backend):
    """Every pair on every shape, the masks in turn, f32."""
    for i, (causal, window) in enumerate(MASKS):
        if (i + len(pair_id(pair))) % 2:  # half the masks per pair and shape
            continue
        q, k, v = make(gen, shape, pair)
        run_and_check(q, k, v, causal, window, backend, "(%s %s %s)" % (pair, shape, causal))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("pair", [(192, 128), (576, 512), (33, 17), (17, 33)], ids=pair_id)
def test_half_types(gen, pair, dtype):
    for shape, (causal, window) in zip(SHAPES, MASKS):
        q, k, v = make(gen, shape, pair, dtype)
        run_and_check(q, k, v, causal, window, "cpu", "(%s %s %s)" % (pair, shape, dtype))


def test_allocating_call_default_scale_and_strides(gen):
    """Without out=: a dense [B, Sq, Hq, Dv] result; the default scale is
    1/sqrt(q's head dim); v as a strided slice (a KV projection's V half)."""
    q, k = uniform(gen, (2, 9, 4, 48)), uniform(gen, (2, 12, 2, 48))
    kv = uniform(gen, (2, 12, 2, 48 + 20))
    v = kv[..., 48:]  # rows 68 apart, 20 long
    out, lse = flashjit.attention(q, k, v, causal="bottom-right", return_lse=True)
    assert out.shape == (2, 9, 4, 20) and out.is_contiguous()
    oracle.check(out, lse, q, k, v, "bottom-right")
    # an explicit scale equal to the default gives the same result
    again = flashjit.attention(q, k, v, causal="bottom-right", scale=1 / math.sqrt(48))
    torch.testing.assert_close(again, out, rtol=1e-6, atol=1e-6)


def test_sdpa_and_numpy(gen):
    q, k, v = make(gen, (2, 8, 2, 5, 30), (64, 40))
    got = flashjit.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                        enable_gqa=True)
    assert got.shape == (2, 8, 5, 40)
    oracle.check(got.transpose(1, 2), None, q, k, v, "top-left")
    out, lse = flashjit.attention(q.numpy(), k.numpy(), v.numpy(), causal="bottom-right",
                                  return_lse=True)
    assert isinstance(out, np.ndarray) and out.shape == (2, 5, 8, 40)
    oracle.check(torch.from_numpy(out), torch.from_numpy(lse), q, k, v, "bottom-right")


def test_operators(gen):
    """The custom operators with such a v: opcheck (fake kernel shapes and
    the real ones agree), and the describe text names both head dims."""
    q, k, v = make(gen, (1, 4, 2, 3, 11), (24, 40))
    for return_lse in (False, True):
        torch.library.opcheck(torch.ops.flashjit.attention.default,
                              (q, k, v, "bottom-right", -1, -1, None, return_lse, "cpu"))
        torch.library.opcheck(torch.ops.flashjit.attention_out.default,
                              (q, k, v, torch.empty(1, 3, 4, 40), "none", 2, -1, 0.5, return_lse,
                               "cpu"))
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        out, lse = torch.ops.flashjit.attention(fq, fk, fv, "none", -1, -1, None, True, "cpu")
        assert out.shape == (1, 3, 4, 40) and lse.shape == (1, 4, 3)
    text = flashjit.describe(q, k, v, backend="cpu")
    assert "b1.hq4.hkv2.sq3.sk11.d24.f32.nomask.dv40" in text
    assert "head dims: q and k 24, v and o 40" in text


# ---- varlen and KV cache ------------------------------------------------------------------


def one_sequence(q, k, v, causal, window):
    """(out [Sq, Hq, Dv], lse [Hq, Sq]) in float64 (no keys: zeros, -inf)."""
    if k.shape[0] == 0:
        return (torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=torch.float64),
                torch.full((q.shape[1], q.shape[0]), -math.inf, dtype=torch.float64))
    out, lse = oracle.attention(q[None], k[None], v[None], causal, window)
    return out[0], lse[0]


def close(got, want, dtype, what):
    got = got.detach().to(torch.float64)
    assert not torch.isnan(got).any(), "unwritten elements in %s" % what
    assert oracle.rel_error(got, want) <= oracle.TOLERANCE[dtype], what


@pytest.mark.parametrize("backend", ["cpu", "cpu-reference"])
@pytest.mark.parametrize("pair", [(192, 128), (40, 72), (7, 1)], ids=pair_id)
def test_varlen(gen, pair, backend):
    d, dv = pair
    lq, lk = [17, 0, 1, 40, 3], [9, 5, 0, 40, 30]
    cu_q = torch.tensor([0] + list(np.cumsum(lq)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(np.cumsum(lk)), dtype=torch.int32)
    q = uniform(gen, (sum(lq), 6, d))
    k, v = uniform(gen, (sum(lk), 2, d)), uniform(gen, (sum(lk), 2, dv))
    for causal, window in MASKS[:3]:
        out = torch.full((sum(lq), 6, dv), math.nan)
        got, lse = flashjit.varlen_attention(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal,
                                             window=window, return_lse=True, out=out,
                                             backend=backend)
        assert got is out and lse.shape == (6, sum(lq))
        for b in range(len(lq)):
            q0, q1, k0, k1 = (int(x) for x in (cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]))
            if q1 == q0:
                continue
            want, want_lse = one_sequence(q[q0:q1], k[k0:k1], v[k0:k1], causal, window)
            close(out[q0:q1], want, torch.float32, "varlen %s sequence %d" % (pair, b))
            wl, gl = want_lse, lse[:, q0:q1].to(torch.float64)
            assert torch.equal(torch.isneginf(gl), torch.isneginf(wl))
            fin = ~torch.isneginf(wl)
            assert (gl[fin] - wl[fin]).abs().max().item() <= 1e-4 if fin.any() else True


@pytest.mark.parametrize("backend", ["cpu", "cpu-reference"])
@pytest.mark.parametrize("pair", [(576, 512), (96, 33)], ids=pair_id)
def test_kvcache_dense_and_paged(gen, pair, backend):
    d, dv = pair
    B, S, hq, hkv, sq = 4, 23, 8, 1, 2
    q = uniform(gen, (B, sq, hq, d))
    kc, vc = uniform(gen, (B, S, hkv, d)), uniform(gen, (B, S, hkv, dv))
    lengths = [23, 0, 1, 9]
    seqlens = torch.tensor(lengths, dtype=torch.int32)
    want = torch.empty(B, sq, hq, dv, dtype=torch.float64)
    for b, n in enumerate(lengths):
        want[b] = one_sequence(q[b], kc[b, :n], vc[b, :n], "bottom-right", (-1, -1))[0]
    got = flashjit.attention_with_kvcache(q, kc, vc, seqlens, causal="bottom-right",
                                          backend=backend)
    assert got.shape == (B, sq, hq, dv)
    close(got, want, torch.float32, "dense cache %s" % (pair,))
    # pages of 5 keys, shuffled; unused pool rows and spare pages NaN
    page, per = 5, [math.ceil(n / 5) for n in lengths]
    total = sum(per) + 2
    order = torch.randperm(total, generator=gen)
    kp = torch.full((total, page, hkv, d), math.nan)
    vp = torch.full((total, page, hkv, dv), math.nan)
    table = torch.full((B, math.ceil(S / page)), -1, dtype=torch.int32)
    i = 0
    for b, n in enumerate(lengths):
        for j in range(per[b]):
            p = int(order[i])
            i += 1
            table[b, j] = p
            rows = min(page, n - j * page)
            kp[p, :rows] = kc[b, j * page:j * page + rows]
            vp[p, :rows] = vc[b, j * page:j * page + rows]
    out = torch.full((B, sq, hq, dv), math.nan)
    got = flashjit.attention_with_kvcache(q, kp, vp, seqlens, table, causal="bottom-right",
                                          out=out, backend=backend)
    assert got is out
    close(got, want, torch.float32, "paged cache %s" % (pair,))


# ---- bad input -------------------------------------------------------------------------------


def expect(exc, match, q, k, v, out_shape=None, **kw):
    """The call raises exc matching `match`; out (a sentinel) is untouched."""
    out = torch.full(out_shape or q.shape[:3] + v.shape[3:], SENTINEL, dtype=q.dtype)
    before = out.clone()
    with pytest.raises(exc, match=match):
        flashjit.attention(q, k, v, out=out, **kw)
    assert torch.equal(out, before)


def test_errors(gen):
    q, k, v = make(gen, (2, 4, 2, 5, 7), (16, 24))
    expect(ValueError, r"out has shape \(2, 5, 4, 16\); it must be \(2, 5, 4, 24\), q's with v's "
           r"head_dim \(head_dim_v\)", q, k, v, out_shape=(2, 5, 4, 16))
    expect(ValueError, r"v's head_dim \(577, head_dim_v\) must be in 1..576", q, k,
           torch.randn(2, 7, 2, 577))
    expect(ValueError, r"v's head_dim \(0, head_dim_v\) must be in 1..576", q, k,
           torch.randn(2, 7, 2, 0))
    expect(ValueError, r"head_dim differs: q has 16 and k has 24; q and k need one head_dim", q,
           torch.randn(2, 7, 2, 24), v)
    one_row = torch.full((1, 5, 4, 24), SENTINEL)
    with pytest.raises(ValueError, match=r"out's rows overlap"):
        flashjit.attention(q, k, v, out=one_row.expand(2, 5, 4, 24))
    lq = torch.tensor([0, 5], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"out has shape \(5, 4, 16\); it must be \(5, 4, 24\), "
                       r"q's with V's head_dim"):
        flashjit.varlen_attention(q[0], k[0], v[0], lq, torch.tensor([0, 7], dtype=torch.int32),
                                  5, 7, out=torch.empty(5, 4, 16))


def test_cuda_refuses_it_on_metadata_alone():
    """CUDA's kernels take one head dim: a CUDA call with v's differing is
    refused before the library is called, naming head_dim_v (no GPU needed:
    operands that say they live on cuda:0)."""
    from flashjit import _lib, _problem, _seq

    def op(name, shape):
        strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        return _problem.Operand(name, shape, strides, _lib.BF16, "torch.bfloat16", "cuda", 0,
                                0x10000, 2)

    q, k = op("q", (2, 5, 4, 192)), op("k", (2, 7, 2, 192))
    with pytest.raises(ValueError, match=r"head_dim_v: v's head_dim \(128\) differs from q's "
                       r"\(192\), which the CUDA backend does not take .*CPU tensors take any "
                       r"head_dim_v in 1..576"):
        _problem.check(q, k, op("v", (2, 7, 2, 128)))
    p = _problem.check(q, k, op("v", (2, 7, 2, 192)))
    assert p.head_dim_v == 0 and p.out_shape == (2, 5, 4, 192)
    with pytest.raises(ValueError, match=r"head_dim_v: v_cache's head_dim \(64\) differs"):
        _seq.check_kvcache(op("q", (2, 1, 4, 128)), op("k_cache", (2, 9, 2, 128)),
                           op("v_cache", (2, 9, 2, 64)), None,
                           _problem.Operand("cache_seqlens", (2,), (1,), None, "torch.int32",
                                            "cuda", 0, 0x20000, 4), None)
    # on the CPU the same metadata checks pass, head_dim_v recorded
    cpu = [t._replace(device_type="cpu") for t in (q, k, op("v", (2, 7, 2, 128)))]
    p = _problem.check(*cpu)
    assert (p.backend, p.head_dim, p.head_dim_v, p.out_shape) == ("cpu", 192, 128, (2, 5, 4, 128))
    assert p.o_stride == (5 * 4 * 128, 4 * 128, 128)
