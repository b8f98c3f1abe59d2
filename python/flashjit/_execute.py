"""A checked Problem run on the library: its fj_attention_desc (made once
per distinct problem and kept), the context of its backend and device, and
the call.

Plans are cached per shape by the library: fj_attention keeps one plan per
(desc, stream) in the context, which this package keeps for the life of the
process, so a shape's kernel is chosen, compiled (or loaded from the disk
cache) and its plan made once; later calls only look it up. Keying by stream
is what makes a split-KV plan's workspace safe when torch runs on several
streams.
"""
import ctypes
import threading

from . import _lib

_DESC_CACHE_MAX = 4096
_descs = {}
_descs_lock = threading.Lock()


def desc_for(problem, where):
    """The problem's fj_attention_desc, validated by the library (its rules
    are the last word; the Python checks came first and name the arguments)."""
    d = _descs.get(problem)
    if d is not None:
        return d
    d = _lib.Desc()
    _lib.lib.fj_attention_desc_init(ctypes.byref(d), problem.batch, problem.heads_q,
                                    problem.heads_kv, problem.seqlen_q, problem.seqlen_k,
                                    problem.head_dim, problem.dtype)
    d.causal = problem.causal
    d.window_left = problem.window_left
    d.window_right = problem.window_right
    d.scale = problem.scale
    d.q_stride[:] = problem.q_stride
    d.k_stride[:] = problem.k_stride
    d.v_stride[:] = problem.v_stride
    d.o_stride[:] = problem.o_stride
    d.features = problem.features
    d.page_size = problem.page_size
    d.num_pages = problem.num_pages
    d.max_pages = problem.max_pages
    d.block_table_stride = problem.block_table_stride
    d.head_dim_v = problem.head_dim_v
    _lib.check(_lib.lib.fj_attention_desc_validate(ctypes.byref(d)), where)
    with _descs_lock:
        if len(_descs) >= _DESC_CACHE_MAX:
            _descs.clear()
        _descs[problem] = d
    return d


def run(problem, q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, stream, where):
    """Computes the problem: host pointers for the CPU backends, device
    pointers and a CUstream (None: the default stream) for CUDA. On CUDA the
    call is asynchronous on that stream."""
    if problem.empty:
        return
    d = desc_for(problem, where)
    ctx = _lib.context(problem.backend, problem.device_index)
    _lib.check(_lib.lib.fj_attention(ctx, ctypes.byref(d), q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
                                     stream), where)


def run_ex(problem, q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, stream, where, *, cu_seqlens_q=None,
           cu_seqlens_k=None, seqused_k=None, total_q=0, total_k=0, block_table=None,
           rename=None):
    """run with the varlen and paged inputs of fj_execute_extras (pointers
    to int32 arrays in the backend's memory, or None). The caller decides
    when there is nothing to compute. rename: the library's names of the
    caller's arguments in its messages (_lib.check)."""
    d = desc_for(problem, where)
    ctx = _lib.context(problem.backend, problem.device_index)
    x = _lib.ExecuteExtras()
    x.cu_seqlens_q = cu_seqlens_q
    x.cu_seqlens_k = cu_seqlens_k
    x.seqused_k = seqused_k
    x.total_q = total_q
    x.total_k = total_k
    x.block_table = block_table
    _lib.check(_lib.lib.fj_attention_ex(ctx, ctypes.byref(d), q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
                                        ctypes.byref(x), stream), where, rename)


def describe(problem, where):
    """What the library's plan for the problem chose and why (backend,
    kernel or CPU method, tiles, where they came from), after the context's
    own description (what was found on this machine)."""
    ctx = _lib.context(problem.backend, problem.device_index)
    head = _lib.context_describe(ctx)
    if problem.empty:
        return head + "plan: none (the output is empty: batch, seqlen_q or heads_q is 0)\n"
    d = desc_for(problem, where)
    plan = ctypes.c_void_p()
    _lib.check(_lib.lib.fj_plan_create(ctx, ctypes.byref(d), ctypes.byref(plan)), where)
    try:
        text = _lib.lib.fj_plan_describe(plan).decode(errors="replace")
    finally:
        _lib.lib.fj_plan_destroy(plan)
    return head + text
