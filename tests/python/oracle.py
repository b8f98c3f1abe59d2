"""The yardstick of the Python tests: torch's SDPA math backend in float64
on the CPU, given the mask of docs/semantics.md as a boolean attn_mask, and
the rows that see no key set as flashjit defines them (zeros, lse -inf)."""
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# docs/semantics.md: relative Frobenius error against a double-precision
# oracle, inputs in [-1, 1).
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def uniform(gen, shape, dtype=torch.float32, device="cpu"):
    """Random inputs in [-1, 1), as the tolerances assume."""
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1).to(device, dtype)


def visible(seqlen_q, seqlen_k, causal, window):
    """[seqlen_q, seqlen_k] bool: which keys each query row sees."""
    i = torch.arange(seqlen_q)[:, None]
    j = torch.arange(seqlen_k)[None, :]
    d = i if causal == "top-left" else i + (seqlen_k - seqlen_q)
    ok = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool)
    if causal in ("bottom-right", "top-left"):
        ok &= j <= d
    left, right = window
    if left >= 0:
        ok &= j >= d - left
    if right >= 0:
        ok &= j <= d + right
    return ok


def attention(q, k, v, causal=None, window=(-1, -1), scale=None):
    """(out [B, Sq, Hq, D], lse [B, Hq, Sq]) in float64 for BSHD q, k, v."""
    q, k, v = (t.detach().to("cpu", torch.float64) for t in (q, k, v))
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)  # query head h: kv head h // g
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    mask = visible(Sq, Sk, causal, window)
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale)
    scores = (qh @ kh.transpose(-1, -2)) * scale
    lse = torch.logsumexp(scores.masked_fill(~mask, -math.inf), dim=-1)
    empty = ~mask.any(dim=-1)
    out = out.transpose(1, 2).clone()
    out[:, empty] = 0.0
    lse[:, :, empty] = -math.inf
    return out, lse


def rel_error(got, want):
    """Relative Frobenius error (absolute when want is all zeros)."""
    got = got.detach().to("cpu", torch.float64)
    diff = torch.linalg.vector_norm(got - want)
    norm = torch.linalg.vector_norm(want)
    return (diff / norm).item() if norm > 0 else diff.item()


def check(out, lse, q, k, v, causal=None, window=(-1, -1), scale=None, context=""):
    """Asserts out (and lse when given) match the oracle within the dtype's
    tolerance, with every element written (no NaN) and the rows that see no
    key exactly zero (lse -inf)."""
    want, want_lse = attention(q, k, v, causal, window, scale)
    got = out.detach().to("cpu", torch.float64)
    assert not torch.isnan(got).any(), "unwritten (NaN) output elements %s" % context
    err = rel_error(got, want)
    tol = TOLERANCE[q.dtype]
    assert err <= tol, "relative error %.3g above %.3g %s" % (err, tol, context)
    empty = ~visible(q.shape[1], k.shape[1], causal, window).any(dim=-1)
    if empty.any():
        assert (got[:, empty] == 0).all(), "rows that see no key are not zero %s" % context
    if lse is not None:
        got_lse = lse.detach().to("cpu", torch.float64)
        assert lse.dtype == torch.float32 and lse.shape == want_lse.shape, context
        if empty.any():
            assert torch.isneginf(got_lse[:, :, empty]).all(), "lse of empty rows %s" % context
        keep = ~empty
        lse_err = (got_lse[:, :, keep] - want_lse[:, :, keep]).abs().max().item() if keep.any() else 0.0
        # lse is a float32 sum of O(seqlen) terms: absolute error ~ tolerance of the dtype
        assert lse_err <= max(1e-4, 4 * tol), "lse error %.3g %s" % (lse_err, context)
