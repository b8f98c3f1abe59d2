"""The rules of flashjit.varlen_attention and flashjit.attention_with_kvcache
on the operands' metadata (shape, strides, dtype, device; no data), and
their call into the library (fj_attention_ex with fj_execute_extras).

A checked call is a `SeqCall`: the `Problem` (the fields of its
fj_attention_desc, with FJ_FEATURE_VARLEN or FJ_FEATURE_PAGED_KV) and what
the execute needs beyond it. The values of cu_seqlens_*, seqused_k,
cache_seqlens and block_table are data: the C library checks them on the
CPU backends before it writes anything, and its message (with the
library's names of these arguments replaced by the Python ones) surfaces
as flashjit.ArgumentError, a ValueError.

A dense KV cache (attention_with_kvcache without block_table) is the paged
problem with one page per sequence: k_cache [B, Sk_max, Hkv, D] is a pool
of B pages of Sk_max keys, and the block table, made here, names page b for
sequence b (the CPU backends then copy nothing: each page is the dense
sequence).
"""
import ctypes
import numbers
from typing import NamedTuple, Tuple

from . import _execute, _lib
from ._problem import (CUDA_MAX_HEAD_DIM, INT_MAX, MAX_HEAD_DIM, Problem, _check_row_layout,
                       check_dim_v,
                       _check_values, _extent, _fail, _resolve_backend, _rows_overlap,
                       parse_causal, parse_scale, parse_window)

VARLEN = "flashjit.varlen_attention"
KVCACHE = "flashjit.attention_with_kvcache"


class SeqCall(NamedTuple):
    problem: Problem
    out_shape: Tuple[int, ...]
    lse_shape: Tuple[int, ...]
    total_q: int               # varlen: the tokens of q and out
    total_k: int               # varlen: the tokens of k and v
    empty: bool                # nothing to compute (no query row)
    dense_cache: bool          # attention_with_kvcache without block_table
    rename: Tuple[Tuple[str, str], ...]  # the library's names -> the caller's, for messages


def _int32_label(t):
    return t.itemsize == 4 and t.dtype_label in (
        "torch.int32", "int32", "DLPack dtype (code 0, 32 bits, 1 lanes)")


def _check_index(t, name, ndim, shape, q, where):
    """An int32 index array (cu_seqlens, seqused_k, cache_seqlens,
    block_table): its dtype, dimensions, device and shape; returns its row
    stride for 2-D (block_table)."""
    if not _int32_label(t):
        _fail(TypeError, where, "%s must be int32, not %s" % (name, t.dtype_label))
    if len(t.shape) != ndim:
        _fail(ValueError, where, "%s must be %d-D %s, got shape %s"
              % (name, ndim, shape, tuple(t.shape)))
    if (t.device_type, t.device_index) != (q.device_type, q.device_index):
        _fail(ValueError, where, "devices differ: %s is on %s and %s on %s"
              % (q.name, q.device, name, t.device))
    if t.shape[-1] > 1 and t.strides[-1] != 1:
        _fail(ValueError, where, "%s's last dimension is not contiguous (strides %s): pass "
              "%s.contiguous()" % (name, tuple(t.strides), name))


def _check_count(n, name, where):
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        _fail(TypeError, where, "%s must be an int, not %s" % (name, type(n).__name__))
    if n < 0 or n > INT_MAX:
        _fail(ValueError, where, "%s (%d) must be in 0..%d" % (name, n, INT_MAX))
    return int(n)


def _check_heads(q, k, v, Hq, Hkv, D, where):
    """q's and k's head_dim agree (v's may differ: head_dim_v, check_dim_v),
    and the head counts."""
    if k.shape[-1] != D:
        _fail(ValueError, where, "head_dim differs: %s has %d and %s has %d; %s and %s need one "
              "head_dim (%s's may differ: head_dim_v)" % (q.name, D, k.name, k.shape[-1], q.name,
                                                          k.name, v.name))
    if v.shape[-2] != Hkv:
        _fail(ValueError, where, "head counts differ: %s has %d heads and %s %d"
              % (k.name, Hkv, v.name, v.shape[-2]))
    if Hkv == 0 and Hq > 0 or Hkv > 0 and Hq % Hkv:
        _fail(ValueError, where,
              "head counts not divisible: %s has %d heads and %s %d; the query heads must be a "
              "multiple of the key/value heads (GQA, MQA)" % (q.name, Hq, k.name, Hkv))
    if D < 1 or D > MAX_HEAD_DIM:
        _fail(ValueError, where, "head_dim (%d) must be in 1..%d" % (D, MAX_HEAD_DIM))


def _check_cuda(q, D, where):
    if q.dtype == _lib.F32:
        _fail(TypeError, where, "%s is %s and the CUDA backend computes float16 and bfloat16: "
              "convert the tensors, or use CPU tensors for float32" % (q.name, q.dtype_label))
    if D > CUDA_MAX_HEAD_DIM:
        _fail(ValueError, where,
              "head_dim %d is not supported by the CUDA backend, which takes head dims up to %d "
              "(a multiple of 8); CPU tensors take up to %d" % (D, CUDA_MAX_HEAD_DIM, MAX_HEAD_DIM))
    if D % 8:
        _fail(ValueError, where,
              "head_dim %d is not supported by the CUDA backend, which needs a multiple of 8 in "
              "8..%d (or use CPU tensors)" % (D, CUDA_MAX_HEAD_DIM))


def _packed_layout(t, where, cuda):
    """A packed [tokens, heads, head_dim] tensor's (0, token, head) strides
    for the desc (no batch axis), by the 4-D rules on it as one batch."""
    s4 = _check_row_layout(t._replace(shape=(1,) + tuple(t.shape),
                                      strides=(0,) + tuple(t.strides)), where, cuda)
    if s4[1] == 0 and s4[2] == 0 and t.shape[0] and t.shape[1] and t.shape[2]:
        _fail(ValueError, where,
              "%s broadcasts one row over all tokens and heads (strides %s): the library reads "
              "all-zero strides as dense; pass %s.contiguous()" % (t.name, tuple(t.strides), t.name))
    return (0, s4[1], s4[2])


def _check_out(out, shape, q, inputs, strides_of, row_axes, where, cuda):
    if tuple(out.shape) != tuple(shape):
        _fail(ValueError, where, "%s has shape %s; it must be %s, %s"
              % (out.name, tuple(out.shape), tuple(shape),
                 "the shape of %s" % q.name if shape[-1] == q.shape[-1] else
                 "%s's with V's head_dim (head_dim_v)" % q.name))
    if out.dtype != q.dtype:
        _fail(TypeError, where, "dtypes differ: %s is %s and %s is %s"
              % (out.name, out.dtype_label, q.name, q.dtype_label))
    if (out.device_type, out.device_index) != (q.device_type, q.device_index):
        _fail(ValueError, where, "devices differ: %s is on %s and %s on %s"
              % (q.name, q.device, out.name, out.device))
    o_strides = strides_of(out)
    rows = tuple(shape[:-1])
    if all(rows) and _rows_overlap([o_strides[a] for a in row_axes], rows, shape[-1]):
        _fail(ValueError, where, "%s's rows overlap (strides %s): two results would be written "
              "to the same memory" % (out.name, tuple(out.strides)))
    if out.ptr is not None and all(shape):
        lo, hi = _extent(out)
        for t in inputs:
            if t is None or t.ptr is None:
                continue
            tlo, thi = _extent(t)
            if tlo < hi and lo < thi:
                _fail(ValueError, where, "%s overlaps %s in memory: the output must not alias an "
                      "input" % (out.name, t.name))
    return o_strides


def check_varlen(q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                 max_seqlen_k, *, causal=None, window=(-1, -1), scale=None, backend="auto",
                 where=VARLEN):
    """flashjit.varlen_attention's rules: q [total_q, Hq, D], k and v
    [total_k, Hkv, D], cu_seqlens_q/k int32 [B + 1], seqused_k None or
    int32 [B]; returns its SeqCall."""
    for t in (q, k, v) + ((out,) if out is not None else ()):
        if len(t.shape) != 3:
            _fail(ValueError, where, "%s must be 3-D [tokens, heads, head_dim] (packed "
                  "sequences), got shape %s" % (t.name, tuple(t.shape)))
    _check_values(q, k, v, where)
    be = _resolve_backend(backend, q, where)
    cuda = be == "cuda"
    _check_index(cu_seqlens_q, "cu_seqlens_q", 1, "[batch + 1]", q, where)
    _check_index(cu_seqlens_k, "cu_seqlens_k", 1, "[batch + 1]", q, where)
    nq, nk = cu_seqlens_q.shape[0], cu_seqlens_k.shape[0]
    if nq < 1:
        _fail(ValueError, where, "cu_seqlens_q must have batch + 1 >= 1 entries, got shape %s"
              % (tuple(cu_seqlens_q.shape),))
    if nk != nq:
        _fail(ValueError, where, "cu_seqlens_q has %d entries and cu_seqlens_k %d: both are "
              "[batch + 1]" % (nq, nk))
    B = nq - 1
    if seqused_k is not None:
        _check_index(seqused_k, "seqused_k", 1, "[batch]", q, where)
        if seqused_k.shape[0] != B:
            _fail(ValueError, where, "seqused_k has %d entries; it must have batch = %d (one per "
                  "sequence of cu_seqlens_q)" % (seqused_k.shape[0], B))
    msq = _check_count(max_seqlen_q, "max_seqlen_q", where)
    msk = _check_count(max_seqlen_k, "max_seqlen_k", where)

    total_q, Hq, D = q.shape
    total_k, Hkv, _ = k.shape
    Dv = v.shape[-1]  # V's and out's head dim
    if v.shape[0] != total_k:
        _fail(ValueError, where, "token counts differ: %s has %d keys and %s %d values"
              % (k.name, total_k, v.name, v.shape[0]))
    _check_heads(q, k, v, Hq, Hkv, D, where)
    for label, n in (("tokens of %s" % q.name, total_q), ("tokens of %s" % k.name, total_k),
                     ("batch", B), ("heads of %s" % q.name, Hq)):
        if n >= INT_MAX:
            _fail(ValueError, where, "%s (%d) must be below %d" % (label, n, INT_MAX))
    causal_code = parse_causal(causal, where)
    wl, wr = parse_window(window, where)
    scale_value = parse_scale(scale, D, where)
    dim_v = check_dim_v(q, v, D, Dv, where, cuda)
    if cuda:
        _check_cuda(q, D, where)
    qs, ks, vs = (_packed_layout(t, where, cuda) for t in (q, k, v))
    if out is not None:
        os_ = _check_out(out, (total_q, Hq, Dv), q, (q, k, v),
                         lambda t: _packed_layout(t, where, cuda), (1, 2), where, cuda)
    else:
        os_ = (0, Hq * Dv, Dv)
    # seqlen_q and seqlen_k are >= 1 in a desc: a batch whose longest
    # sequence is empty is one of longest length 1 with nothing in it
    problem = Problem(be, q.device_index if cuda else 0, max(B, 1), Hq, max(Hkv, 1), max(msq, 1),
                      max(msk, 1), D, q.dtype, causal_code, wl, wr, scale_value, qs, ks, vs, os_,
                      features=_lib.FEATURE_VARLEN, head_dim_v=dim_v)
    empty = B == 0 or total_q == 0 or Hq == 0
    return SeqCall(problem, (total_q, Hq, Dv), (Hq, total_q), total_q, total_k, empty, False,
                   (("seqlen_q", "max_seqlen_q"), ("seqlen_k", "max_seqlen_k")))


def check_kvcache(q, k_cache, v_cache, out, cache_seqlens, block_table, *, causal=None,
                  window=(-1, -1), scale=None, backend="auto", where=KVCACHE):
    """flashjit.attention_with_kvcache's rules: q [B, Sq, Hq, D]; k_cache and
    v_cache dense [B, Sk_max, Hkv, D] (block_table None) or page pools
    [num_pages, page_size, Hkv, D] with block_table int32 [B, max_pages];
    cache_seqlens int32 [B]; returns its SeqCall."""
    for t in (q, k_cache, v_cache) + ((out,) if out is not None else ()):
        if len(t.shape) != 4:
            _fail(ValueError, where, "%s must be 4-D, got shape %s" % (t.name, tuple(t.shape)))
    _check_values(q, k_cache, v_cache, where)
    be = _resolve_backend(backend, q, where)
    cuda = be == "cuda"
    B, Sq, Hq, D = q.shape
    P, page, Hkv, _ = k_cache.shape
    Dv = v_cache.shape[-1]  # V's and out's head dim
    kn, vn = k_cache.name, v_cache.name
    if tuple(v_cache.shape[:2]) != (P, page):
        _fail(ValueError, where, "%s has shape %s and %s %s: they must hold the same %s"
              % (kn, tuple(k_cache.shape), vn, tuple(v_cache.shape),
                 "pages" if block_table is not None else "sequences and keys"))
    _check_heads(q, k_cache, v_cache, Hq, Hkv, D, where)
    _check_index(cache_seqlens, "cache_seqlens", 1, "[batch]", q, where)
    if cache_seqlens.shape[0] != B:
        _fail(ValueError, where, "cache_seqlens has %d entries; it must have batch = %d (q's "
              "first dimension)" % (cache_seqlens.shape[0], B))
    empty = B == 0 or Sq == 0 or Hq == 0
    if block_table is None:
        if P != B:
            _fail(ValueError, where, "batch sizes differ: %s has %d and %s has %d (without "
                  "block_table the cache is dense [batch, seqlen_k, heads_kv, head_dim])"
                  % (q.name, B, kn, P))
        if page == 0 and not empty:
            _fail(ValueError, where, "%s holds no keys (shape %s): every query row would see "
                  "none" % (kn, tuple(k_cache.shape)))
        num_pages, max_pages, bt_stride, seqlen_k = max(B, 1), 1, 0, max(page, 1)
        rename = (("seqused_k", "cache_seqlens"), ("seqlen_k", "%s.shape[1]" % kn))
    else:
        _check_index(block_table, "block_table", 2, "[batch, max_pages]", q, where)
        if block_table.shape[0] != B:
            _fail(ValueError, where, "block_table has %d rows; it must have batch = %d (q's first "
                  "dimension)" % (block_table.shape[0], B))
        max_pages = block_table.shape[1]
        if not empty:
            if max_pages == 0:
                _fail(ValueError, where, "block_table has no columns (shape %s): each sequence "
                      "needs at least one page" % (tuple(block_table.shape),))
            if P == 0 or page == 0:
                _fail(ValueError, where, "%s holds no keys (shape %s): a page pool is [num_pages "
                      ">= 1, page_size >= 1, heads_kv, head_dim]" % (kn, tuple(k_cache.shape)))
        row = block_table.strides[0] if B > 1 else max_pages
        if row < max_pages:
            _fail(ValueError, where, "block_table's rows overlap (strides %s): each row holds "
                  "max_pages = %d entries" % (tuple(block_table.strides), max_pages))
        if max_pages * page > INT_MAX or row > INT_MAX or P > INT_MAX:
            _fail(ValueError, where, "the block table names %d x %d keys per sequence (row "
                  "stride %d, %d pages), above %d" % (max_pages, page, row, P, INT_MAX))
        num_pages, max_pages, bt_stride = max(P, 1), max(max_pages, 1), max(row, 1)
        seqlen_k = max(max_pages * page, 1)
        rename = (("seqused_k", "cache_seqlens"),
                  ("seqlen_k", "max_pages x page_size"))
    for label, n in (("batch", B), ("seqlen of %s" % q.name, Sq), ("heads of %s" % q.name, Hq)):
        if n > INT_MAX:
            _fail(ValueError, where, "%s (%d) is above %d" % (label, n, INT_MAX))
    causal_code = parse_causal(causal, where)
    wl, wr = parse_window(window, where)
    scale_value = parse_scale(scale, D, where)
    dim_v = check_dim_v(q, v_cache, D, Dv, where, cuda)
    if cuda:
        _check_cuda(q, D, where)
    qs = _check_row_layout(q, where, cuda)
    ks, vs = (_check_row_layout(t, where, cuda) for t in (k_cache, v_cache))
    if out is not None:
        os_ = _check_out(out, (B, Sq, Hq, Dv), q, (q, k_cache, v_cache),
                         lambda t: _check_row_layout(t, where, cuda), (0, 1, 2), where, cuda)
    else:
        os_ = (Sq * Hq * Dv, Hq * Dv, Dv)
    problem = Problem(be, q.device_index if cuda else 0, max(B, 1), Hq, max(Hkv, 1), max(Sq, 1),
                      seqlen_k, D, q.dtype, causal_code, wl, wr, scale_value, qs, ks, vs, os_,
                      features=_lib.FEATURE_PAGED_KV, page_size=max(page, 1),
                      num_pages=num_pages, max_pages=max_pages, block_table_stride=bt_stride,
                      head_dim_v=dim_v)
    return SeqCall(problem, (B, Sq, Hq, Dv), (B, Hq, Sq), 0, 0, empty, block_table is None, rename)


_NOTHING = ctypes.c_double(0.0)


def run(call, q, k, v, out, lse, index, stream, where):
    """Computes a checked call: q, k, v, out, lse pointers (lse None: not
    written); index: the pointers of cu_seqlens_q, cu_seqlens_k, seqused_k
    (varlen) or cache_seqlens, block_table (kvcache; block_table None for a
    dense cache: made here on the host, or given by the caller for CUDA)."""
    if call.empty:
        return
    p = call.problem
    rename = dict(call.rename)
    if p.features & _lib.FEATURE_VARLEN:
        cu_q, cu_k, used = index
        if not call.total_k and p.backend != "cuda":
            # no keys at all (every sequence sees none): an empty k or v
            # may have no memory, and the library takes no NULL tensor;
            # nothing is read from it (cu_seqlens_k[batch] <= total_k = 0)
            k = k or ctypes.addressof(_NOTHING)
            v = v or ctypes.addressof(_NOTHING)
        _execute.run_ex(p, q, k, v, out, lse, stream, where, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                        seqused_k=used, total_q=call.total_q, total_k=call.total_k, rename=rename)
        return
    seqlens, table = index
    keep = None
    if table is None:  # a dense cache: page b is sequence b
        keep = (ctypes.c_int32 * p.batch)(*range(p.batch))
        table = ctypes.addressof(keep)
    _execute.run_ex(p, q, k, v, out, lse, stream, where, seqused_k=seqlens, block_table=table,
                    rename=rename)
    del keep
