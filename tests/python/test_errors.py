"""Every bad call raises TypeError or ValueError naming the argument and the
rule, before anything is written: each call here gets an `out` filled with
a sentinel, which must come back untouched."""
import math

import numpy as np
import pytest
import torch

import flashjit

SENTINEL = 7.25


def qkv(b=2, hq=4, hkv=2, sq=5, sk=7, d=16, dtype=torch.float32, device="cpu"):
    return (torch.randn(b, sq, hq, d, dtype=dtype, device=device),
            torch.randn(b, sk, hkv, d, dtype=dtype, device=device),
            torch.randn(b, sk, hkv, d, dtype=dtype, device=device))


def expect(exc, match, q, k, v, out=None, **kw):
    """The call raises exc with a message matching `match`, and out (a
    sentinel-filled tensor shaped like q unless given) is unchanged."""
    if out is None:
        out = torch.full(q.shape, SENTINEL, dtype=q.dtype, device=q.device)
    before = out.clone()
    with pytest.raises(exc, match=match):
        flashjit.attention(q, k, v, out=out, **kw)
    assert torch.equal(out, before), "a failed call wrote to out"


def test_dtypes_differ():
    q, k, v = qkv()
    expect(TypeError, r"dtypes differ: q is torch.float32 and k is torch.bfloat16", q,
           k.bfloat16(), v)
    expect(TypeError, r"dtypes differ: q is torch.bfloat16 and v is torch.float32", q.bfloat16(),
           k.bfloat16(), v)


def test_unsupported_dtype():
    q, k, v = qkv()
    expect(TypeError, r"q has dtype torch.float64: flashjit computes float32, float16 and bfloat16",
           q.double(), k.double(), v.double())


def test_out_dtype_differs():
    q, k, v = qkv()
    expect(TypeError, r"dtypes differ: out is torch.float16 and q is torch.float32", q, k, v,
           out=torch.full(q.shape, SENTINEL, dtype=torch.float16))


def test_devices_differ():
    q, k, v = qkv()
    expect(ValueError, r"devices differ: q is on cpu and v on meta", q, k, v.to("meta"))


def test_last_dimension_not_contiguous():
    q, k, v = qkv(d=16)
    strided = torch.randn(2, 7, 2, 32)[..., ::2]
    expect(ValueError, r"k's last dimension \(head_dim\) is not contiguous \(stride 2", q, strided, v)
    expect(ValueError, r"out's last dimension \(head_dim\) is not contiguous", q, k, v,
           out=torch.full((2, 5, 4, 32), SENTINEL)[..., ::2])


def test_head_counts_not_divisible():
    q, k, v = qkv(hq=6, hkv=4)
    expect(ValueError, r"head counts not divisible: q has 6 heads and k 4; the query heads must be "
           r"a multiple of the key/value heads", q, k, v)


def test_shapes_that_disagree():
    q, k, v = qkv()
    expect(ValueError, r"batch sizes differ: q has 2 and k has 3", q, torch.randn(3, 7, 2, 16), v)
    expect(ValueError, r"head_dim differs: q has 16 and k has 8; q and k need one head_dim \(v's "
           r"may differ: head_dim_v\)", q, torch.randn(2, 7, 2, 8), v)
    expect(ValueError, r"seqlens differ: k has 7 keys and v 6 values", q, k, torch.randn(2, 6, 2, 16))
    expect(ValueError, r"head counts differ: k has 2 heads and v 1", q, k, torch.randn(2, 7, 1, 16))
    expect(ValueError, r"q must be 4-D, got shape \(5, 4, 16\)", q[0], k, v, out=torch.zeros(1))
    expect(ValueError, r"k has no keys \(seqlen 0\)", q, k[:, :0], v[:, :0])


def test_unsupported_head_dim():
    q, k, v = qkv(d=577)
    expect(ValueError, r"head_dim \(577\) must be in 1..576", q, k, v)


def test_out_shape_overlap_and_alias():
    q, k, v = qkv()
    expect(ValueError, r"out has shape \(2, 5, 4, 8\); it must be \(2, 5, 4, 16\)", q, k, v,
           out=torch.full((2, 5, 4, 8), SENTINEL))
    one_batch = torch.full((1, 5, 4, 16), SENTINEL)
    expect(ValueError, r"out's rows overlap \(strides \(0, 64, 16, 1\)\)", q, k, v,
           out=one_batch.expand(2, 5, 4, 16))
    expect(ValueError, r"out overlaps q in memory", q, k, v, out=q)
    both = torch.randn(2, 12, 4, 16)
    expect(ValueError, r"out overlaps k in memory", q, both[:, 5:, :2], both[:, 5:, 2:],
           out=both[:, :5])


def test_broadcast_row_everywhere():
    q, k, v = qkv()
    one = torch.randn(1, 1, 1, 16)
    expect(ValueError, r"k broadcasts one row over batch, seqlen and heads", q,
           one.expand(2, 7, 2, 16), v)


def test_bad_keyword_values():
    q, k, v = qkv()
    expect(TypeError, r'causal=True is ambiguous: pass causal="bottom-right" .* or causal="top-left"',
           q, k, v, causal=True)
    expect(ValueError, r'causal must be None, "bottom-right" or "top-left", not \'diagonal\'', q, k,
           v, causal="diagonal")
    expect(TypeError, r"causal must be None", q, k, v, causal=1)
    expect(TypeError, r"window must be a pair of ints", q, k, v, window=(3,))
    expect(TypeError, r"window must be a pair of ints", q, k, v, window=(1.5, 2))
    expect(ValueError, r"window left \(-2\) must be -1 \(unbounded\)", q, k, v, window=(-2, 0))
    expect(ValueError, r"scale \(0.0\) must be a finite non-zero float32", q, k, v, scale=0.0)
    expect(ValueError, r"scale \(nan\) must be", q, k, v, scale=math.nan)
    expect(ValueError, r"scale \(1e\+39\) must be", q, k, v, scale=1e39)
    expect(TypeError, r"scale must be None or a real number, not str", q, k, v, scale="0.5")
    expect(TypeError, r"scale must be None or a real number, not Tensor", q, k, v,
           scale=torch.tensor(0.5))
    expect(ValueError, r'backend must be one of "auto", "cpu", "cpu-reference", "cuda", not \'gpu\'',
           q, k, v, backend="gpu")
    expect(ValueError, r'backend="cuda" needs CUDA tensors, and q is on cpu', q, k, v,
           backend="cuda")
    expect(ValueError, r'backend must be one of "auto", "cpu", "cpu-reference", "cuda", not 3',
           q, k, v, backend=3)
    expect(TypeError, r"return_lse must be a bool, not int", q, k, v, return_lse=1)


def test_mixed_kinds():
    q, k, v = qkv()
    expect(TypeError, r"q is a torch.Tensor, so k must be one too, not ndarray", q, k.numpy(), v)
    out = np.full(q.shape, SENTINEL, dtype=np.float32)
    with pytest.raises(TypeError, match=r"out must be a torch.Tensor like q, not ndarray"):
        flashjit.attention(q, k, v, out=out)
    assert (out == SENTINEL).all()
    with pytest.raises(TypeError, match=r"k is a torch.Tensor but q is a ndarray"):
        flashjit.attention(q.numpy(), k, v.numpy())
    with pytest.raises(TypeError, match=r"q must be a torch.Tensor or an array with __dlpack__"):
        flashjit.attention([[1.0]], k, v)


def test_operator_called_directly_checks_too():
    q, k, v = qkv()
    out = torch.full(q.shape, SENTINEL)
    with pytest.raises(ValueError, match=r"torch.ops.flashjit: causal must be None"):
        torch.ops.flashjit.attention_out(q, k, v, out, "diagonal", -1, -1, None, False, "auto")
    with pytest.raises(TypeError, match=r"torch.ops.flashjit: dtypes differ"):
        torch.ops.flashjit.attention_out(q, k.half(), v, out, "none", -1, -1, None, False, "auto")
    assert (out == SENTINEL).all()


def test_sdpa_rejects_what_it_cannot_express():
    q, k, v = (t.transpose(1, 2) for t in qkv(hq=4, hkv=4))
    with pytest.raises(ValueError, match=r"flashjit.sdpa: attn_mask must be None"):
        flashjit.sdpa(q, k, v, attn_mask=torch.ones(5, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"flashjit.sdpa: dropout_p \(0.1\) must be 0"):
        flashjit.sdpa(q, k, v, dropout_p=0.1)
    q8 = torch.randn(2, 8, 5, 16)
    with pytest.raises(ValueError, match=r"query has 8 heads and key 4: pass enable_gqa=True"):
        flashjit.sdpa(q8, k, v)
    with pytest.raises(ValueError, match=r"query must be 4-D \[batch, heads, seqlen, head_dim\]"):
        flashjit.sdpa(q[0], k[0], v[0])
    with pytest.raises(TypeError, match=r"dtypes differ: query is torch.float32 and key is "
                       r"torch.float16; query, key and value must share one dtype"):
        flashjit.sdpa(q, k.half(), v)
    with pytest.raises(TypeError, match=r"is_causal and enable_gqa must be bools"):
        flashjit.sdpa(q, k, v, is_causal=1)


def test_numpy_errors_write_nothing():
    q, k, v = (t.numpy() for t in qkv())
    out = np.full(q.shape, SENTINEL, dtype=np.float32)
    with pytest.raises(ValueError, match=r"head counts not divisible"):
        flashjit.attention(q[:, :, :3], k, v, out=out[:, :, :3])
    with pytest.raises(TypeError, match=r"dtypes differ: q is float32 and k is float16"):
        flashjit.attention(q, k.astype(np.float16), v, out=out)
    with pytest.raises(ValueError, match=r"v has a negative stride"):
        flashjit.attention(q, k, v[:, ::-1], out=out)
    with pytest.raises(ValueError, match=r"out is read-only"):
        flashjit.attention(q, k, v, out=np.broadcast_to(out, out.shape))
    with pytest.raises(TypeError, match=r"q has dtype float64"):
        flashjit.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    assert (out == SENTINEL).all()


# ---- CUDA ------------------------------------------------------------------------

@pytest.mark.cuda
def test_cuda_errors():
    q, k, v = qkv(dtype=torch.bfloat16, device="cuda", d=64)
    expect(TypeError, r"q is torch.float32 and the CUDA backend computes float16 and bfloat16",
           q.float(), k.float(), v.float())
    q12, k12, v12 = qkv(dtype=torch.float16, device="cuda", d=12)
    expect(ValueError, r"head_dim 12 is not supported by the CUDA backend, which needs a multiple "
           r"of 8 in 8..256", q12, k12, v12)
    q264, k264, v264 = qkv(dtype=torch.float16, device="cuda", d=264)
    expect(ValueError, r"head_dim 264 is not supported by the CUDA backend, which takes head dims "
           r"up to 256 \(a multiple of 8\); CPU tensors take up to 576", q264, k264, v264)
    expect(ValueError, r"devices differ: q is on cuda:0 and k on cpu", q, k.cpu(), v)
    expect(ValueError, r'backend="cpu" computes on host memory, and q is on cuda:0', q, k, v,
           backend="cpu")
    rows = torch.randn(2, 7, 2, 68, dtype=torch.bfloat16, device="cuda")[..., :64]
    expect(ValueError, r"k's heads stride \(68 elements; .*\) is not a multiple of 8", q, rows, v)
    flat = torch.randn(2 * 5 * 4 * 64 + 1, dtype=torch.bfloat16, device="cuda")
    shifted = flat[1:].view(2, 5, 4, 64)
    expect(ValueError, r"q's data pointer \(0x[0-9a-f]+\) is not 16-byte aligned", shifted, k, v)


def test_cuda_rules_on_metadata_alone():
    """The CUDA backend's rules, checked without a GPU on operands that say
    they live on cuda:0 (the same checks run on real CUDA tensors)."""
    from flashjit import _lib, _problem

    def op(name, shape, strides=None, dtype=_lib.BF16, ptr=0x10000):
        if strides is None:
            strides = (shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1)
        return _problem.Operand(name, shape, strides, dtype, "torch.bfloat16", "cuda", 0, ptr, 2)

    q, k = op("q", (2, 5, 4, 64)), op("k", (2, 7, 2, 64))
    p = _problem.check(q, k, k)
    assert (p.backend, p.device_index, p.o_stride) == ("cuda", 0, (1280, 256, 64))
    with pytest.raises(TypeError, match=r"the CUDA backend computes float16 and bfloat16"):
        _problem.check(op("q", (2, 5, 4, 64), dtype=_lib.F32), op("k", (2, 7, 2, 64), dtype=_lib.F32),
                       op("v", (2, 7, 2, 64), dtype=_lib.F32))
    with pytest.raises(ValueError, match=r"head_dim 20 is not supported by the CUDA backend.*"
                       r"zero-pad q and k to 24"):
        _problem.check(op("q", (2, 5, 4, 20)), op("k", (2, 7, 2, 20)), op("v", (2, 7, 2, 20)))
    with pytest.raises(ValueError, match=r"v's seqlen stride \(132 elements"):
        _problem.check(q, k, op("v", (2, 7, 2, 64), (7 * 136, 132, 64, 1)))
    # size-1 axes take the dense stride, whatever the tensor says
    p = _problem.check(op("q", (1, 1, 4, 64), (3, 3, 64, 1)), op("k", (1, 7, 2, 64)),
                       op("v", (1, 7, 2, 64)))
    assert p.q_stride == (256, 256, 64)
    p = _problem.check(q, k, k)
    _problem.check_pointers(p, [q, k, k], "test")
    with pytest.raises(ValueError, match=r"k's data pointer \(0x10002\) is not 16-byte aligned"):
        _problem.check_pointers(p, [q, op("k", (2, 7, 2, 64), ptr=0x10002), k], "test")
    with pytest.raises(ValueError, match=r'backend="cpu" computes on host memory, and q is on '
                       r'cuda:0'):
        _problem.check(q, k, k, backend="cpu")
