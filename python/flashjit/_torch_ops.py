"""flashjit on torch tensors: two custom operators, flashjit::attention
(allocates its output) and flashjit::attention_out (writes a given one), so
that torch.compile traces through a call as one opaque node (no graph
break), and CUDA calls run on torch's current stream.

Both operators check their arguments with the rules of _problem, in the
real kernel and in the fake one (the one torch.compile runs on FakeTensors),
so a bad call fails before any memory is written, whether it came through
flashjit.attention or straight through torch.ops.flashjit.
They are forward only: a backward through them raises.
"""
import ctypes
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _execute, _lib, _problem, _seq

DTYPES = {torch.float32: _lib.F32, torch.float16: _lib.F16, torch.bfloat16: _lib.BF16}
CAUSAL_NAMES = {_lib.CAUSAL_NONE: "none", _lib.CAUSAL_BOTTOM_RIGHT: "bottom-right",
                _lib.CAUSAL_TOP_LEFT: "top-left"}
# The operators' last argument, api, names the function a call came through,
# so that the operator's messages use that function's argument names (a bad
# call through flashjit.sdpa speaks of "query") and a call is checked once,
# in the operator (in its fake kernel under torch.compile).
API_NAMES = {"attention": ("flashjit.attention", ("q", "k", "v")),
             "sdpa": ("flashjit.sdpa", ("query", "key", "value"))}
DIRECT = ("torch.ops.flashjit", ("q", "k", "v"))


def operand(t, name, with_ptr):
    """A torch tensor as the rules see it (with_ptr False for fake tensors,
    which have no memory)."""
    dev = t.device
    return _problem.Operand(name, tuple(t.shape), tuple(t.stride()), DTYPES.get(t.dtype),
                            str(t.dtype), dev.type, dev.index or 0,
                            t.data_ptr() if with_ptr else None, t.element_size())


def _checked(q, k, v, out, causal, window_left, window_right, scale, backend, api, with_ptr):
    where, names = API_NAMES.get(api, DIRECT)
    ops = [operand(t, n, with_ptr) for t, n in zip((q, k, v), names)]
    o = operand(out, "out", with_ptr) if out is not None else None
    problem = _problem.check(*ops, o, causal=causal, window=(window_left, window_right),
                             scale=scale, backend=backend, where=where)
    return problem, ops + ([o] if o is not None else []), where


def _run(problem, ops, q, out, lse, where):
    if problem.empty:
        return
    o = operand(out, "out", True) if len(ops) == 3 else ops[3]
    _problem.check_pointers(problem, ops[:3] + [o], where)
    stream = torch.cuda.current_stream(q.device).cuda_stream if problem.backend == "cuda" else None
    _execute.run(problem, ops[0].ptr, ops[1].ptr, ops[2].ptr, o.ptr,
                 lse.data_ptr() if lse is not None else None, stream, where)


def _lse_like(q, problem, return_lse):
    return q.new_empty(problem.lse_shape if return_lse else (0,), dtype=torch.float32)


@torch.library.custom_op("flashjit::attention", mutates_args=())
def attention_op(q: Tensor, k: Tensor, v: Tensor, causal: str, window_left: int,
                 window_right: int, scale: Optional[float], return_lse: bool, backend: str,
                 api: str = "") -> Tuple[Tensor, Tensor]:
    """flashjit.attention as an operator: q [B, Sq, Hq, D], k and v
    [B, Sk, Hkv, D]; returns out (dense [B, Sq, Hq, D]) and lse (float32
    [B, Hq, Sq], or empty when return_lse is False). causal: "none",
    "bottom-right" or "top-left"; scale None: 1/sqrt(D); api: whose argument
    names the error messages use ("attention", "sdpa", "")."""
    problem, ops, where = _checked(q, k, v, None, causal, window_left, window_right, scale,
                                   backend, api, True)
    out = q.new_empty(problem.out_shape)  # dense BSHD: the o_stride the problem assumed
    lse = _lse_like(q, problem, return_lse)
    _run(problem, ops, q, out, lse if return_lse else None, where)
    return out, lse


@attention_op.register_fake
def _attention_fake(q, k, v, causal, window_left, window_right, scale, return_lse, backend,
                    api=""):
    problem, _, _ = _checked(q, k, v, None, causal, window_left, window_right, scale, backend,
                             api, False)
    return q.new_empty(problem.out_shape), _lse_like(q, problem, return_lse)


@torch.library.custom_op("flashjit::attention_out", mutates_args=("out",))
def attention_out_op(q: Tensor, k: Tensor, v: Tensor, out: Tensor, causal: str, window_left: int,
                     window_right: int, scale: Optional[float], return_lse: bool, backend: str,
                     api: str = "") -> Tensor:
    """flashjit.attention with out=: writes out [B, Sq, Hq, D] (any strides
    whose rows do not overlap) and returns lse (empty unless return_lse)."""
    problem, ops, where = _checked(q, k, v, out, causal, window_left, window_right, scale,
                                   backend, api, True)
    lse = _lse_like(q, problem, return_lse)
    _run(problem, ops, q, out, lse if return_lse else None, where)
    return lse


@attention_out_op.register_fake
def _attention_out_fake(q, k, v, out, causal, window_left, window_right, scale, return_lse,
                        backend, api=""):
    problem, _, _ = _checked(q, k, v, out, causal, window_left, window_right, scale, backend,
                             api, False)
    return _lse_like(q, problem, return_lse)


def _no_backward(ctx, *grads):
    raise RuntimeError("flashjit computes the forward pass of attention only: it has no "
                       "backward, so no gradient flows through flashjit.attention (use "
                       "torch.nn.functional.scaled_dot_product_attention for training)")


def _keep_nothing(ctx, inputs, output):
    pass


torch.library.register_autograd("flashjit::attention", _no_backward, setup_context=_keep_nothing)


def attention(q, k, v, causal, window, scale, return_lse, out, backend, api):
    """The torch path of flashjit.attention and flashjit.sdpa (q, k, v, out:
    BSHD torch tensors). The arguments are checked in the operator; here only
    what the operator's schema cannot carry."""
    where, names = API_NAMES[api]
    for t, n in zip((k, v), names[1:]):
        if not isinstance(t, Tensor):
            raise TypeError("%s: %s is a torch.Tensor, so %s must be one too, not %s"
                            % (where, names[0], n, type(t).__name__))
    if out is not None and not isinstance(out, Tensor):
        raise TypeError("%s: out must be a torch.Tensor like %s, not %s"
                        % (where, names[0], type(out).__name__))
    _problem.parse_backend(backend, where)  # (the schema would refuse a non-str less clearly)
    causal_name = CAUSAL_NAMES[_problem.parse_causal(causal, where)]
    window_left, window_right = _problem.parse_window(window, where)
    if scale is not None:
        scale = _problem.parse_scale(scale, q.shape[-1], where)
    if out is None:
        out, lse = attention_op(q, k, v, causal_name, window_left, window_right, scale,
                                return_lse, backend, api)
    else:
        lse = attention_out_op(q, k, v, out, causal_name, window_left, window_right, scale,
                               return_lse, backend, api)
    return (out, lse) if return_lse else out


# ---- variable-length batches and the KV cache ---------------------------------
#
# flashjit.varlen_attention and flashjit.attention_with_kvcache go through
# operators of their own (no fast path): flashjit::varlen_attention(_out)
# and flashjit::attention_with_kvcache(_out), each with a fake kernel that
# checks the metadata as the real one does (_seq), so torch.compile traces
# them as one node and a bad call fails before anything is written.


def _ops(tensors, with_ptr):
    return [None if t is None else operand(t, n, with_ptr) for n, t in tensors]


def _stream(call, q):
    return torch.cuda.current_stream(q.device).cuda_stream if call.problem.backend == "cuda" \
        else None


def _varlen_checked(q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                    max_seqlen_k, causal, window_left, window_right, scale, backend, with_ptr):
    q_, k_, v_, o_, cq, ck, used = _ops(
        (("q", q), ("k", k), ("v", v), ("out", out), ("cu_seqlens_q", cu_seqlens_q),
         ("cu_seqlens_k", cu_seqlens_k), ("seqused_k", seqused_k)), with_ptr)
    call = _seq.check_varlen(q_, k_, v_, o_, cq, ck, used, max_seqlen_q, max_seqlen_k,
                             causal=causal, window=(window_left, window_right), scale=scale,
                             backend=backend)
    return call, (q_, k_, v_, o_, cq, ck, used)


def _varlen_run(call, ops, q, out, lse):
    q_, k_, v_, o_, cq, ck, used = ops
    _seq.run(call, q_.ptr, k_.ptr, v_.ptr, out.data_ptr(),
             lse.data_ptr() if lse is not None else None,
             (cq.ptr, ck.ptr, used.ptr if used is not None else None), _stream(call, q),
             _seq.VARLEN)


@torch.library.custom_op("flashjit::varlen_attention", mutates_args=())
def varlen_op(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
              seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int, causal: str,
              window_left: int, window_right: int, scale: Optional[float], return_lse: bool,
              backend: str) -> Tuple[Tensor, Tensor]:
    """flashjit.varlen_attention as an operator: returns out (dense
    [total_q, Hq, D]) and lse (float32 [Hq, total_q], or empty unless
    return_lse)."""
    call, ops = _varlen_checked(q, k, v, None, cu_seqlens_q, cu_seqlens_k, seqused_k,
                                max_seqlen_q, max_seqlen_k, causal, window_left, window_right,
                                scale, backend, True)
    out = q.new_empty(call.out_shape)
    lse = q.new_empty(call.lse_shape if return_lse else (0,), dtype=torch.float32)
    _varlen_run(call, ops, q, out, lse if return_lse else None)
    return out, lse


@varlen_op.register_fake
def _varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                 causal, window_left, window_right, scale, return_lse, backend):
    call, _ = _varlen_checked(q, k, v, None, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                              max_seqlen_k, causal, window_left, window_right, scale, backend,
                              False)
    return (q.new_empty(call.out_shape),
            q.new_empty(call.lse_shape if return_lse else (0,), dtype=torch.float32))


@torch.library.custom_op("flashjit::varlen_attention_out", mutates_args=("out",))
def varlen_out_op(q: Tensor, k: Tensor, v: Tensor, out: Tensor, cu_seqlens_q: Tensor,
                  cu_seqlens_k: Tensor, seqused_k: Optional[Tensor], max_seqlen_q: int,
                  max_seqlen_k: int, causal: str, window_left: int, window_right: int,
                  scale: Optional[float], return_lse: bool, backend: str) -> Tensor:
    """flashjit.varlen_attention with out=: writes out [total_q, Hq, D];
    returns lse (empty unless return_lse)."""
    call, ops = _varlen_checked(q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqused_k,
                                max_seqlen_q, max_seqlen_k, causal, window_left, window_right,
                                scale, backend, True)
    lse = q.new_empty(call.lse_shape if return_lse else (0,), dtype=torch.float32)
    _varlen_run(call, ops, q, out, lse if return_lse else None)
    return lse


@varlen_out_op.register_fake
def _varlen_out_fake(q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                     max_seqlen_k, causal, window_left, window_right, scale, return_lse, backend):
    call, _ = _varlen_checked(q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                              max_seqlen_k, causal, window_left, window_right, scale, backend,
                              False)
    return q.new_empty(call.lse_shape if return_lse else (0,), dtype=torch.float32)


def _kvcache_checked(q, k_cache, v_cache, out, cache_seqlens, block_table, causal, window_left,
                     window_right, scale, backend, with_ptr):
    ops = _ops((("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("out", out),
                ("cache_seqlens", cache_seqlens), ("block_table", block_table)), with_ptr)
    call = _seq.check_kvcache(ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], causal=causal,
                              window=(window_left, window_right), scale=scale, backend=backend)
    return call, ops


def _kvcache_run(call, ops, q, out, lse):
    q_, k_, v_, o_, seqlens, table = ops
    keep = None
    if table is not None:
        table_ptr = table.ptr
    elif call.problem.backend == "cuda" and not call.empty:  # the dense cache's table, on the GPU
        keep = torch.arange(q.shape[0], dtype=torch.int32, device=q.device)
        table_ptr = keep.data_ptr()
    else:
        table_ptr = None  # made on the host by _seq.run
    _seq.run(call, q_.ptr, k_.ptr, v_.ptr, out.data_ptr(),
             lse.data_ptr() if lse is not None else None, (seqlens.ptr, table_ptr),
             _stream(call, q), _seq.KVCACHE)
    del keep


@torch.library.custom_op("flashjit::attention_with_kvcache", mutates_args=())
def kvcache_op(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Tensor,
               block_table: Optional[Tensor], causal: str, window_left: int, window_right: int,
               scale: Optional[float], return_lse: bool, backend: str) -> Tuple[Tensor, Tensor]:
    """flashjit.attention_with_kvcache as an operator: returns out (dense
    [B, Sq, Hq, D]) and lse (float32 [B, Hq, Sq], or empty unless
    return_lse)."""
    call, ops = _kvcache_checked(q, k_cache, v_cache, None, cache_seqlens, block_table, causal,
                                 window_left, window_right, scale, backend, True)
    out = q.new_empty(call.out_shape)
    lse = q.new_empty(call.lse_shape if return_lse else (0,), dtype=torch.float32)
    _kvcache_run(call, ops, q, out, lse if return_lse else None)
    return out, lse


@kvcache_op.register_fake
def _kvcache_fake(q, k_cache, v_cache, cache_seqlens, block_table, causal, window_left,
                  window_right, scale, return_lse, backend):
    call, _ = _kvcache_checked(q, k_cache, v_cache, None, cache_seqlens, block_table, causal,
                               window_left, window_right, scale, backend, False)
    return (q.new_empty(call.out_shape),
            q.new_empty(call.lse_shape if return_lse else (0,), dtype=torch.float32))


@torch.library.custom_op("flashjit::attention_with_kvcache_out", mutates_args=("out",))
def kvcache_out_op(q: Tensor, k_cache: Tensor, v_cache: Tensor, out: Tensor, cache_seqlens: Tensor,
                   block_table: Optional[Tensor], causal: str, window_left: int,
                   window_right: int, scale: Optional[float], return_lse: bool,
                   backend: str) -> Tensor:
    """flashjit.attention_with_kvcache with out=: writes out [B, Sq, Hq, D];
    returns lse (empty unless return_lse)."""
    call, ops = _kvcache_checked(q, k_cache, v_cache, out, cache_seqlens, block_table, causal,
                                 window_left, window_right, scale, backend, True)
    lse = q.new_empty(call.lse_shape if return_lse else (0,), dtype=torch.float32)
    _kvcache_run(call, ops, q, out, lse if return_lse else None)
    return lse


@kvcache_out_op.register_fake
def _kvcache_out_fake(q, k_cache, v_cache, out, cache_seqlens, block_table, causal, window_left,
                      window_right, scale, return_lse, backend):
    call, _ = _kvcache_checked(q, k_cache, v_cache, out, cache_seqlens, block_table, causal,
                               window_left, window_right, scale, backend, False)
    return q.new_empty(call.lse_shape if return_lse else (0,), dtype=torch.float32)


torch.library.register_autograd("flashjit::varlen_attention", _no_backward,
                                setup_context=_keep_nothing)
torch.library.register_autograd("flashjit::attention_with_kvcache", _no_backward,
                                setup_context=_keep_nothing)


def _keywords(q, causal, window, scale, backend, where):
    """What the operators' schemas cannot carry, checked here: the
    keyword arguments as the operators take them."""
    _problem.parse_backend(backend, where)
    causal_name = CAUSAL_NAMES[_problem.parse_causal(causal, where)]
    wl, wr = _problem.parse_window(window, where)
    if scale is not None:
        scale = _problem.parse_scale(scale, q.shape[-1], where)
    return causal_name, wl, wr, scale


def _tensors(where, first, pairs):
    for n, t, optional in pairs:
        if t is None and optional:
            continue
        if not isinstance(t, Tensor):
            raise TypeError("%s: %s is a torch.Tensor, so %s must be one too%s, not %s"
                            % (where, first, n, " (or None)" if optional else "",
                               type(t).__name__))


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                     causal, window, scale, return_lse, out, backend):
    """The torch path of flashjit.varlen_attention."""
    where = _seq.VARLEN
    _tensors(where, "q", (("k", k, False), ("v", v, False), ("cu_seqlens_q", cu_seqlens_q, False),
                          ("cu_seqlens_k", cu_seqlens_k, False), ("seqused_k", seqused_k, True),
                          ("out", out, True)))
    for n, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        _seq._check_count(x, n, where)
    c, wl, wr, s = _keywords(q, causal, window, scale, backend, where)
    args = (cu_seqlens_q, cu_seqlens_k, seqused_k, int(max_seqlen_q), int(max_seqlen_k), c, wl,
            wr, s, return_lse, backend)
    if out is None:
        out, lse = varlen_op(q, k, v, *args)
    else:
        lse = varlen_out_op(q, k, v, out, *args)
    return (out, lse) if return_lse else out


def _append(q, k_cache, v_cache, cache_seqlens, block_table, out, k, v, keywords, where):
    """k and v ([batch, n, heads_kv, head_dim]) written into the caches at
    each sequence's positions L_b .. L_b + n - 1 (L_b = cache_seqlens[b]):
    dense, k_cache[b, L_b + t]; paged, row (L_b + t) % page_size of page
    block_table[b, (L_b + t) // page_size]. Every rule the attention that
    follows checks is checked first (its shapes; the library's refusal of
    the problem; the lengths L_b + n against the cache and the block
    table's entries that the attention will read), so nothing is written
    unless the call goes through. Returns cache_seqlens + n, the lengths the
    attention takes."""
    if k is None or v is None:
        missing, given = ("v", "k") if v is None else ("k", "v")
        raise TypeError("%s: %s was given without %s: new keys are appended as a pair, k= and "
                        "v= both or neither" % (where, given, missing))
    c, wl, wr, s, backend = keywords
    call, _ = _kvcache_checked(q, k_cache, v_cache, out, cache_seqlens, block_table, c, wl, wr,
                               s, backend, True)  # pointers too: out overlapping a cache
    for name, new, cache in (("k", k, k_cache), ("v", v, v_cache)):
        if new.dim() != 4:
            raise ValueError("%s: %s must be 4-D [batch, seqlen_new, heads_kv, head_dim], got "
                             "shape %s" % (where, name, tuple(new.shape)))
        want = (q.shape[0], k.shape[1], cache.shape[2], cache.shape[3])
        if tuple(new.shape) != want:
            raise ValueError("%s: %s has shape %s; it must be %s: q's batch, k's seqlen_new, "
                             "and %s_cache's heads and head dim" % (where, name, tuple(new.shape),
                                                                     want, name))
        if new.dtype != cache.dtype or new.device != cache.device:
            raise ValueError("%s: %s is %s on %s; it must match %s_cache (%s on %s)"
                             % (where, name, new.dtype, new.device, name, cache.dtype,
                                cache.device))
    if not call.empty and call.problem.backend == "cuda":
        _execute.describe(call.problem, where)  # the library's refusal, before any write
    n = k.shape[1]
    lengths = cache_seqlens.tolist()
    paged = block_table is not None
    capacity = block_table.shape[1] * k_cache.shape[1] if paged else k_cache.shape[1]
    table = block_table.tolist() if paged else None
    page = k_cache.shape[1]
    for b, length in enumerate(lengths):
        if length < 0 or length + n > capacity:
            raise ValueError("%s: cache_seqlens[%d] (%d) + the %d new keys must be in [0, %d]: "
                             "sequence %d's keys after appending must fit %s"
                             % (where, b, length, n, capacity, b,
                                "its block_table row (max_pages x page_size)" if paged
                                else "k_cache's seqlen"))
        if paged:
            for j in range((length + n + page - 1) // page):
                if not 0 <= table[b][j] < k_cache.shape[0]:
                    raise ValueError("%s: block_table[%d][%d] (%d) is outside the pools: a page "
                                     "must be in [0, num_pages = %d) (sequence %d's %d keys after "
                                     "appending use its first %d entries)"
                                     % (where, b, j, table[b][j], k_cache.shape[0], b, length + n,
                                        (length + n + page - 1) // page))
    if n and q.shape[0]:
        dev = k_cache.device
        pos = (cache_seqlens.to(device=dev, dtype=torch.int64)[:, None] +
               torch.arange(n, device=dev)[None, :])  # [batch, n]
        if paged:
            rows = block_table.to(device=dev, dtype=torch.int64).gather(1, pos // page)
            at = (rows.reshape(-1), (pos % page).reshape(-1))
        else:
            at = (torch.arange(q.shape[0], device=dev)[:, None].expand(-1, n).reshape(-1),
                  pos.reshape(-1))
        k_cache.index_put_(at, k.reshape(-1, *k.shape[2:]))
        v_cache.index_put_(at, v.reshape(-1, *v.shape[2:]))
    return cache_seqlens + n


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, causal, window, scale,
                           return_lse, out, backend, k=None, v=None):
    """The torch path of flashjit.attention_with_kvcache."""
    where = _seq.KVCACHE
    _tensors(where, "q", (("k_cache", k_cache, False), ("v_cache", v_cache, False),
                          ("cache_seqlens", cache_seqlens, False),
                          ("block_table", block_table, True), ("out", out, True),
                          ("k", k, True), ("v", v, True)))
    c, wl, wr, s = _keywords(q, causal, window, scale, backend, where)
    if k is not None or v is not None:
        cache_seqlens = _append(q, k_cache, v_cache, cache_seqlens, block_table, out, k, v,
                                (c, wl, wr, s, backend), where)
    args = (cache_seqlens, block_table, c, wl, wr, s, return_lse, backend)
    if out is None:
        out, lse = kvcache_op(q, k_cache, v_cache, *args)
    else:
        lse = kvcache_out_op(q, k_cache, v_cache, out, *args)
    return (out, lse) if return_lse else out


# ---- the fast eager path ------------------------------------------------------
#
# The operators above cost tens of microseconds a call on the host: torch's
# Python dispatch of a custom op (autograd wrapper, redispatch, fake-kernel
# bookkeeping) and the full argument checks on Operands built afresh. A
# decode step is 10-30 us of GPU work, so that would bound it.
#
# When nothing can observe the difference, flashjit.attention and
# flashjit.sdpa skip the dispatcher and call the library straight from here:
# plain torch.Tensor arguments (no subclass: no FakeTensor, FunctionalTensor,
# DTensor, Parameter; no lazily negated view, no ZeroTensor), not under
# torch.compile / torch.export tracing, no torch function or dispatch mode
# active (TorchFunctionMode such as `with torch.device(...)`,
# TorchDispatchMode, FakeTensorMode, make_fx), no functorch transform (vmap,
# grad, functionalize) active, and no gradient to track (grad mode off or no
# argument requires grad). Anything else goes through the operator as
# before, so torch.compile, autograd (the backward that raises), opcheck,
# modes and subclasses see the operator. Under torch.profiler a fast call is
# recorded under the operator's name. What the operator does to `out` that
# autograd can see, the fast path does too: out's version counter is bumped.
#
# The checks are the operator's, cached per call signature: the keyword
# arguments (normalized, only for exact int/float/str/None/bool values whose
# meaning the signature fixes) and each tensor's shape, strides, dtype and
# device. A signature is cached only after _problem.check (and the library's
# fj_attention_desc_validate, and the context's creation) accepted it; a call
# whose signature is new and fails, or that fails a per-call check (the
# CUDA alignment of its pointers, out aliasing an input), is handed to the
# operator path, which raises its usual exception. So every error comes from
# the same code with the same message, and nothing is written before it.
# What remains per call: the guards, the key, one dict lookup, the output
# allocation, the pointer checks and the ctypes call.

SLOW = object()  # "not taken: use the operator path"

_FAST_CACHE_MAX = 4096
_fast_entries = {}


def _bind_guards():
    """The state checks the fast path runs, bound once (a global lookup per
    call, not an attribute chain); None where this torch lacks one of them:
    then every call goes through the operator."""
    C = torch._C
    try:
        return (torch.compiler.is_compiling, C._is_torch_function_mode_enabled,
                C._len_torch_dispatch_stack, C._are_functorch_transforms_active,
                C.is_grad_enabled, torch.autograd.graph.increment_version,
                C._autograd._profiler_enabled, torch.autograd.profiler.record_function)
    except AttributeError:
        return None


_guards = _bind_guards()
_FAST = _guards is not None
(_is_compiling, _tf_mode, _dispatch_len, _functorch_active, _grad_enabled,
 _increment_version, _profiling, _record_function) = _guards or (None,) * 8
_cuda_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_FLOAT32 = torch.float32
_fj_attention = _lib.lib.fj_attention
_CAUSAL_CODES = {None: _lib.CAUSAL_NONE, False: _lib.CAUSAL_NONE}
_CAUSAL_CODES.update((n, c) for n, c in _problem.CAUSAL.items() if isinstance(n, str))


def fast_path_enabled():
    """Whether this torch has what the fast path needs (else every call
    goes through the operator)."""
    return _FAST


def _fast_ok(q, k, v, out):
    """The call may skip the operator (see above): plain tensors, no
    gradient to track, and no tracing, mode or transform that must see the
    operator."""
    T = Tensor
    if not _FAST or _is_compiling():  # first: dynamo traces none of the rest
        return False
    if type(q) is not T or type(k) is not T or type(v) is not T or (
            out is not None and type(out) is not T):
        return False
    if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or (
            out is not None and out.requires_grad)):
        return False
    # A lazily negated view (Tensor._neg_view, the .imag of a conjugate view)
    # or a ZeroTensor has memory that is not its value: the dispatcher's
    # fallbacks materialize them for the operator. (The conjugate bit exists
    # only on complex dtypes, which the checks refuse.)
    if (q.is_neg() or k.is_neg() or v.is_neg() or q._is_zerotensor() or k._is_zerotensor()
            or v._is_zerotensor() or out is not None and (out.is_neg() or out._is_zerotensor())):
        return False
    return not (_tf_mode() or _dispatch_len() or _functorch_active())


def _fast_keywords(causal, window, scale, backend):
    """The keyword arguments as the cache key holds them, or None when one is
    not of a plain type whose value alone fixes its meaning (True == 1 ==
    1.0 as dict keys, yet the checks tell them apart): such a call takes the
    operator path."""
    if causal is None or causal is False:
        c = _lib.CAUSAL_NONE
    elif type(causal) is str:
        c = _CAUSAL_CODES.get(causal)
        if c is None:
            return None
    else:
        return None
    if type(window) is not tuple or len(window) != 2:
        return None
    wl, wr = window
    if type(wl) is not int or type(wr) is not int or not (
            -1 <= wl <= _problem.INT_MAX and -1 <= wr <= _problem.INT_MAX):
        return None
    if scale is not None:
        if type(scale) is not float and type(scale) is not int:
            return None
        scale = float(scale)
        if not (_problem.FLOAT32_MIN_NORMAL <= abs(scale) <= _problem.FLOAT32_MAX):
            return None
    if type(backend) is not str:
        return None
    return c, wl, wr, scale, backend


def _dense_strides(shape):
    """torch's contiguous strides for shape (an extent of 0 counts as 1)."""
    strides, n = [], 1
    for e in reversed(shape):
        strides.append(n)
        n *= max(e, 1)
    return tuple(reversed(strides))


class _Entry:
    """A checked call signature: what a call of it needs beyond its
    pointers."""
    __slots__ = ("problem", "empty", "out_shape", "out_strides", "lse_shape", "lse_strides",
                 "ctx", "desc", "desc_ref", "cuda_index", "spans", "where")

    def __init__(self, problem, ops, where, out_view=None):
        B, Sq, Hq, D = problem.out_shape
        dense = _dense_strides(problem.out_shape)
        self.problem = problem
        self.empty = problem.empty
        self.where = where
        if out_view is None:  # the dense BSHD output, as the operator allocates it
            self.out_shape = problem.out_shape
            self.out_strides = dense
        else:  # sdpa: that tensor seen as BHSD (its transpose(1, 2))
            self.out_shape = (B, Hq, Sq, D)
            self.out_strides = (dense[0], dense[2], dense[1], dense[3])
        self.lse_shape = problem.lse_shape
        self.lse_strides = _dense_strides(problem.lse_shape)
        self.cuda_index = problem.device_index if problem.backend == "cuda" else None
        if self.empty:
            self.ctx = self.desc = self.desc_ref = None
        else:
            self.desc = _execute.desc_for(problem, where)
            self.desc_ref = ctypes.byref(self.desc)
            self.ctx = _lib.context(problem.backend, problem.device_index)
        # bytes each operand spans from its first element, in the order of
        # ops (q, k, v, out): the aliasing rule of an out= call, on this
        # call's pointers
        self.spans = tuple(_problem._extent(t._replace(ptr=0))[1] for t in ops)


def _fast_run(e, q, k, v, out, return_lse, out_given):
    """One call of a checked signature; SLOW when a per-call rule fails (the
    operator path then raises its message)."""
    lse = q.new_empty_strided(e.lse_shape, e.lse_strides, dtype=_FLOAT32) if return_lse else None
    if e.empty:
        if out_given:
            _increment_version(out)  # as the operator: out counts as modified
        return (out, lse) if return_lse else out
    qp, kp, vp, op = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
    if e.cuda_index is not None:
        if (qp | kp | vp | op) % _problem.CUDA_PTR_ALIGN:
            return SLOW
        stream = _cuda_raw_stream(e.cuda_index)
    else:
        stream = None
    if out_given:
        sq, sk, sv, so = e.spans  # the order of _checked's operands: q, k, v, out
        oe = op + so
        if qp < oe and op < qp + sq or kp < oe and op < kp + sk or vp < oe and op < vp + sv:
            return SLOW
    status = _fj_attention(e.ctx, e.desc_ref, qp, kp, vp, op,
                           lse.data_ptr() if return_lse else None, stream)
    if status:
        _lib.check(status, e.where)
    if out_given:
        _increment_version(out)
    return (out, lse) if return_lse else out


def _remember(key, entry):
    if len(_fast_entries) >= _FAST_CACHE_MAX:
        _fast_entries.clear()
    _fast_entries[key] = entry


def fast_attention(q, k, v, causal, window, scale, return_lse, out, backend):
    """flashjit.attention on plain tensors without the dispatcher, or SLOW."""
    if not _fast_ok(q, k, v, out):
        return SLOW
    kw = _fast_keywords(causal, window, scale, backend)
    if kw is None:
        return SLOW
    try:  # stride() raises for a sparse, mkldnn or nested tensor: the operator's error
        key = ("attention", kw, q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(),
               k.dtype, k.device, v.shape, v.stride(), v.dtype, v.device)
        if out is not None:
            key += (out.shape, out.stride(), out.dtype, out.device)
    except RuntimeError:
        return SLOW
    e = _fast_entries.get(key)
    if e is None:
        try:
            c, wl, wr, s, be = kw
            problem, ops, where = _checked(q, k, v, out, CAUSAL_NAMES[c], wl, wr, s, be,
                                           "attention", False)
            e = _Entry(problem, ops, where)
        except Exception:  # the operator path raises it, as it always has
            return SLOW
        _remember(key, e)
    if _profiling():  # the profile shows the call, under the operator's name
        with _record_function("flashjit::attention" if out is None else
                              "flashjit::attention_out"):
            return _fast_out(e, q, k, v, out, return_lse)
    return _fast_out(e, q, k, v, out, return_lse)


def _fast_out(e, q, k, v, out, return_lse):
    if out is None:
        out = q.new_empty_strided(e.out_shape, e.out_strides)
        return _fast_run(e, q, k, v, out, return_lse, False)
    return _fast_run(e, q, k, v, out, return_lse, True)


def fast_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """flashjit.sdpa on plain BHSD tensors without the dispatcher (and
    without the three transposes: the entry holds the BSHD problem), or
    SLOW. Returns dense BSHD memory seen as BHSD: the shape, strides and
    values of the operator path's out.transpose(1, 2), made in one
    allocation (not a view of another tensor)."""
    if (attn_mask is not None or type(is_causal) is not bool
            or type(enable_gqa) is not bool or not _fast_ok(query, key, value, None)):
        return SLOW
    if not ((type(dropout_p) is float or type(dropout_p) is int) and dropout_p == 0):
        return SLOW
    kw = _fast_keywords("top-left" if is_causal else None, (-1, -1), scale, "auto")
    if kw is None:
        return SLOW
    try:
        sig = ("sdpa", kw, enable_gqa, query.shape, query.stride(), query.dtype, query.device,
               key.shape, key.stride(), key.dtype, key.device,
               value.shape, value.stride(), value.dtype, value.device)
    except RuntimeError:
        return SLOW
    e = _fast_entries.get(sig)
    if e is None:
        try:
            if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
                return SLOW
            if not enable_gqa and query.shape[1] != key.shape[1]:
                return SLOW
            c, wl, wr, s, be = kw
            problem, ops, where = _checked(query.transpose(1, 2), key.transpose(1, 2),
                                           value.transpose(1, 2), None, CAUSAL_NAMES[c], wl, wr,
                                           s, be, "sdpa", False)
            e = _Entry(problem, ops, where, out_view="bhsd")
        except Exception:
            return SLOW
        _remember(sig, e)
    # BHSD tensors, BSHD problem: the pointers are the same (element 0)
    if _profiling():
        with _record_function("flashjit::attention"):
            return _fast_run(e, query, key, value,
                             query.new_empty_strided(e.out_shape, e.out_strides), False, False)
    return _fast_run(e, query, key, value, query.new_empty_strided(e.out_shape, e.out_strides),
                     False, False)
