"""The public functions: attention (BSHD, torch tensors or DLPack arrays),
sdpa (torch's scaled_dot_product_attention signature, BHSD), describe and
info; varlen_attention and attention_with_kvcache (packed variable-length
batches, a paged or dense KV cache)."""
from . import _dlpack, _execute, _lib, _problem, _seq

try:
    import torch
except ImportError:  # the package works on DLPack arrays without torch
    torch = None
if torch is not None:
    from . import _torch_ops


def _is_torch(x):
    return torch is not None and isinstance(x, torch.Tensor)


def attention(q, k, v, *, causal=None, window=(-1, -1), scale=None, return_lse=False, out=None,
              backend="auto"):
    """Scaled dot-product attention, forward: softmax(scale * q k^T + mask) v.

    q: [batch, seqlen_q, heads_q, head_dim]; k, v: [batch, seqlen_k,
    heads_kv, head_dim] (BSHD, as flash_attn_func), with heads_q a multiple
    of heads_kv (GQA, MQA). torch tensors (CPU or CUDA) or any array with
    __dlpack__ in host memory (numpy). Any strides >= 0 whose last dimension
    is contiguous (CUDA: strides a multiple of 8 elements, data 16-byte
    aligned). dtype: float32, float16 or bfloat16, one for q, k, v and out
    (CUDA: float16 and bfloat16; the CPU computes in float32 and rounds).

    causal: None (no mask), "bottom-right" (FlashAttention's causal=True:
    query i sees key j when j <= i + seqlen_k - seqlen_q) or "top-left"
    (PyTorch's is_causal=True: j <= i). They agree when seqlen_q == seqlen_k.
    window: (left, right) sliding window around that diagonal, -1 for
    unbounded. scale: None for 1/sqrt(head_dim). A query row that sees no key
    gets zeros (and lse -inf).

    return_lse: also return the float32 [batch, heads_q, seqlen_q] natural
    log of each row's softmax denominator. out: write the result there
    (shape of q, same dtype and device, rows not overlapping, not sharing
    memory with q, k or v) instead of a new dense tensor.

    backend: "auto" (CUDA for CUDA tensors, "cpu" for host memory), "cpu"
    (tiled online softmax), "cpu-reference" (the yardstick), or "cuda".

    On CUDA the call is asynchronous on torch's current stream. The first call
    of a shape chooses its kernel and compiles it (or loads it from the disk
    cache); later calls reuse the plan. Returns out, or (out, lse).

    Raises TypeError or ValueError naming the argument and the rule, before
    anything is written; flashjit.Error when the library fails (no device,
    compile error, ...)."""
    where = "flashjit.attention"
    if not isinstance(return_lse, bool):
        raise TypeError("%s: return_lse must be a bool, not %s" % (where, type(return_lse).__name__))
    if _is_torch(q):
        r = _torch_ops.fast_attention(q, k, v, causal, window, scale, return_lse, out, backend)
        if r is _torch_ops.SLOW:  # through the operator (see _torch_ops: when, and why)
            r = _torch_ops.attention(q, k, v, causal, window, scale, return_lse, out, backend,
                                     "attention")
        return r
    return _attention_dlpack(q, k, v, causal, window, scale, return_lse, out, backend, where)


def _attention_dlpack(q, k, v, causal, window, scale, return_lse, out, backend, where):
    if not _dlpack.is_array(q):
        raise TypeError("%s: q must be a torch.Tensor or an array with __dlpack__ (numpy, ...), "
                        "not %s" % (where, type(q).__name__))
    for x, n in ((k, "k"), (v, "v"), (out, "out")):
        if _is_torch(x):
            raise TypeError("%s: %s is a torch.Tensor but q is a %s: pass tensors of one kind "
                            "(torch.from_dlpack(q), or %s.numpy())" % (where, n, type(q).__name__, n))
    exported = [_dlpack.export(x, n, where) for x, n in ((q, "q"), (k, "k"), (v, "v"))]
    ops = [e.operand for e in exported]
    if out is not None:
        eo = _dlpack.export(out, "out", where)
        if eo.read_only:
            raise ValueError("%s: out is read-only" % where)
        exported.append(eo)
    problem = _problem.check(*ops, exported[3].operand if out is not None else None,
                             causal=causal, window=window, scale=scale, backend=backend,
                             where=where)
    if out is None:
        out = _dlpack.empty_like_namespace(q, problem.out_shape, None, where, "the output")
        eo = _dlpack.export(out, "out", where)
        exported.append(eo)
        # Checked again with the new array's own strides (a namespace may
        # not allocate dense rows).
        problem = _problem.check(*ops, eo.operand, causal=causal, window=window, scale=scale,
                                 backend=backend, where=where)
    lse_ptr, lse = None, None
    if return_lse:
        lse = _dlpack.empty_like_namespace(q, problem.lse_shape, "float32", where, "lse")
        el = _dlpack.export(lse, "lse", where)
        exported.append(el)
        n = problem.lse_shape
        if el.operand.itemsize != 4 or el.operand.strides != (n[1] * n[2], n[2], 1):
            raise TypeError("%s: the lse array made by %s is not dense float32"
                            % (where, type(q).__name__))
        lse_ptr = el.operand.ptr
    _execute.run(problem, ops[0].ptr, ops[1].ptr, ops[2].ptr, eo.operand.ptr, lse_ptr, None, where)
    del exported  # now the producers may free their exports
    return (out, lse) if return_lse else out


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                     seqused_k=None, causal=None, window=(-1, -1), scale=None, return_lse=False,
                     out=None, backend="auto"):
    """Attention over a batch of sequences of different lengths packed one
    after another along the token axis (flash_attn_varlen_func's layout).

    q: [total_q, heads_q, head_dim]; k, v: [total_k, heads_kv, head_dim]
    (heads_q a multiple of heads_kv). cu_seqlens_q, cu_seqlens_k: int32
    [batch + 1] on q's device (host memory for numpy): sequence b's queries
    are the tokens cu_seqlens_q[b]:cu_seqlens_q[b + 1] of q (and of out), its
    keys and values the tokens cu_seqlens_k[b]:cu_seqlens_k[b + 1] of k and
    v; cu[0] is 0 and the offsets do not decrease. max_seqlen_q,
    max_seqlen_k: the most queries and keys a sequence has (ints, as
    flash_attn's; 0 counts as 1). seqused_k: None, or int32 [batch]: sequence
    b uses only its first seqused_k[b] keys. Empty sequences are allowed:
    one without queries writes nothing, one without keys gets zeros (lse
    -inf).

    Each sequence is computed as its own attention problem, its causal
    mask and window aligned on its own lengths. Where flash_attn_varlen_func
    differs: causal names the alignment, None, "bottom-right"
    (flash_attn's causal=True) or "top-left" (torch's is_causal=True), and
    causal=True is refused as ambiguous; window is flash_attn's
    window_size; scale its softmax_scale; return_lse its
    return_attn_probs' softmax_lse only; no dropout, softcap, ALiBi or
    block table here.

    return_lse: also return the float32 [heads_q, total_q] lse
    (flash_attn's varlen layout). out: write the result there ([total_q,
    heads_q, head_dim], q's dtype and device, rows not overlapping, not
    sharing memory with q, k or v). Rows and lse entries of tokens past
    cu_seqlens_q[batch] are not written (left as allocated).

    torch tensors (through the operators flashjit::varlen_attention and
    flashjit::varlen_attention_out, so torch.compile traces a call) or
    DLPack arrays in host memory (numpy). Every backend computes it (on
    CUDA one launch of flash_fwd's varlen kernel, which reads the offsets
    from device memory).

    Raises TypeError or ValueError naming the argument and the rule before
    anything is written; the values in cu_seqlens_* and seqused_k are
    checked by the library before it writes anything (flashjit.ArgumentError
    naming the array, the index and the rule). Returns out, or (out, lse)."""
    where = _seq.VARLEN
    if not isinstance(return_lse, bool):
        raise TypeError("%s: return_lse must be a bool, not %s" % (where, type(return_lse).__name__))
    if _is_torch(q):
        return _torch_ops.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                           max_seqlen_k, seqused_k, causal, window, scale,
                                           return_lse, out, backend)
    arrays = (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q),
              ("cu_seqlens_k", cu_seqlens_k), ("seqused_k", seqused_k))
    ex, eo = _export_all(q, arrays, out, where)
    ops = [None if e is None else e.operand for e in ex]

    def check(o):
        return _seq.check_varlen(ops[0], ops[1], ops[2], o, ops[3], ops[4], ops[5], max_seqlen_q,
                                 max_seqlen_k, causal=causal, window=window, scale=scale,
                                 backend=backend, where=where)

    return _seq_dlpack(q, check, eo, ops, return_lse, out, where)


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table=None, *, causal=None,
                           window=(-1, -1), scale=None, return_lse=False, out=None,
                           backend="auto", k=None, v=None):
    """Attention of new queries over a KV cache, dense or paged
    (flash_attn_with_kvcache's layout and its appending of new keys).

    q: [batch, seqlen_q, heads_q, head_dim]. cache_seqlens: int32 [batch]
    on q's device: sequence b's KV length L_b. Without block_table, k_cache
    and v_cache are dense [batch, seqlen_k_max, heads_kv, head_dim] and
    sequence b's keys are k_cache[b, :L_b]. With block_table, int32
    [batch, max_pages], they are page pools [num_pages, page_size, heads_kv,
    head_dim] and sequence b's key j is row j % page_size of page
    block_table[b, j // page_size] (pages in any order, shared or not; only
    the first ceil(L_b / page_size) entries of a row are read, the tail may
    hold anything). L_b is at most seqlen_k_max, or max_pages x page_size.

    Each sequence is its own problem with seqlen_k = L_b: with
    causal="bottom-right" (flash_attn's causal=True) its query i sees keys
    j <= i + L_b - seqlen_q, so new queries whose keys are already in the
    cache see the cache and themselves. "top-left" is torch's alignment,
    causal=True is refused as ambiguous; window is flash_attn's
    window_size, scale its softmax_scale. A sequence with L_b = 0 gets zeros
    (lse -inf).

    k, v (torch tensors, both or neither): [batch, n, heads_kv, head_dim]
    new keys and values, written into the caches first at each sequence's
    positions L_b .. L_b + n - 1 (dense: k_cache[b, L_b + t]; paged: through
    block_table), then attended to with lengths L_b + n, as
    flash_attn_with_kvcache does. cache_seqlens is not changed (the caller
    advances it). Every rule is checked before the caches are written,
    L_b + n against the cache's room included; two sequences whose block
    tables share a page must not append into the same slot. No rotary, no
    cache_batch_idx. A torch.compile graph breaks at the append (it reads
    cache_seqlens on the host to check it).

    return_lse: also return the float32 [batch, heads_q, seqlen_q] lse.
    out: write the result there (q's shape, dtype and device).

    torch tensors (through the operators flashjit::attention_with_kvcache
    and flashjit::attention_with_kvcache_out, so torch.compile traces a
    call) or DLPack arrays in host memory (numpy). Every backend computes
    it; on CUDA the page size (a dense cache: its seqlen_k) must be a
    multiple of 16, else flashjit.ArgumentError (a ValueError, status
    "FJ_ERR_UNSUPPORTED") naming page_size.

    Raises TypeError or ValueError naming the argument and the rule before
    anything is written; the values of cache_seqlens and block_table are
    checked by the library before it writes anything (flashjit.ArgumentError
    naming the array, the index and the rule). Returns out, or (out, lse)."""
    where = _seq.KVCACHE
    if not isinstance(return_lse, bool):
        raise TypeError("%s: return_lse must be a bool, not %s" % (where, type(return_lse).__name__))
    if _is_torch(q):
        return _torch_ops.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table,
                                                 causal, window, scale, return_lse, out, backend,
                                                 k, v)
    if k is not None or v is not None:
        raise TypeError("%s: k= and v= (appending new keys) take torch tensors; with DLPack "
                        "arrays, write the new keys into the cache first and pass the lengths "
                        "including them" % where)
    arrays = (("q", q), ("k_cache", k_cache), ("v_cache", v_cache),
              ("cache_seqlens", cache_seqlens), ("block_table", block_table))
    ex, eo = _export_all(q, arrays, out, where)
    ops = [None if e is None else e.operand for e in ex]

    def check(o):
        return _seq.check_kvcache(ops[0], ops[1], ops[2], o, ops[3], ops[4], causal=causal,
                                  window=window, scale=scale, backend=backend, where=where)

    return _seq_dlpack(q, check, eo, ops, return_lse, out, where)


def _export_all(q, arrays, out, where):
    """The DLPack exports of the arrays (None stays None) and of out."""
    if not _dlpack.is_array(q):
        raise TypeError("%s: q must be a torch.Tensor or an array with __dlpack__ (numpy, ...), "
                        "not %s" % (where, type(q).__name__))
    for n, x in arrays[1:] + (("out", out),):
        if _is_torch(x):
            raise TypeError("%s: %s is a torch.Tensor but q is a %s: pass arrays of one kind"
                            % (where, n, type(q).__name__))
    ex = [None if x is None else _dlpack.export(x, n, where) for n, x in arrays]
    eo = None
    if out is not None:
        eo = _dlpack.export(out, "out", where)
        if eo.read_only:
            raise ValueError("%s: out is read-only" % where)
    return ex, eo


def _seq_dlpack(q, check, eo, ops, return_lse, out, where):
    call = check(eo.operand if eo is not None else None)
    if out is None:
        out = _dlpack.empty_like_namespace(q, call.out_shape, None, where, "the output")
        eo = _dlpack.export(out, "out", where)
        call = check(eo.operand)  # with the new array's own strides
    lse, lse_ptr, el = None, None, None
    if return_lse:
        lse = _dlpack.empty_like_namespace(q, call.lse_shape, "float32", where, "lse")
        el = _dlpack.export(lse, "lse", where)
        n = call.lse_shape
        dense = tuple(int(_prod(n[i + 1:])) for i in range(len(n)))
        if el.operand.itemsize != 4 or (_prod(n) and el.operand.strides != dense):
            raise TypeError("%s: the lse array made by %s is not dense float32"
                            % (where, type(q).__name__))
        lse_ptr = el.operand.ptr
    index = [None if o is None else o.ptr for o in ops[3:]]
    _seq.run(call, ops[0].ptr, ops[1].ptr, ops[2].ptr, eo.operand.ptr, lse_ptr, index, None, where)
    del eo, el
    return (out, lse) if return_lse else out


def _prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
         enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's signature on
    flashjit: query [batch, heads_q, seqlen_q, head_dim], key and value
    [batch, heads_kv, seqlen_k, head_dim] (BHSD) torch tensors; returns
    [batch, heads_q, seqlen_q, head_dim] (dense BSHD memory seen as BHSD:
    strides [Sq*Hq*D, D, Hq*D, 1]).

    is_causal is PyTorch's (top-left: query i sees keys 0..i). attn_mask must
    be None and dropout_p 0 (flashjit computes causal and window masks only,
    forward only); heads_q != heads_kv needs enable_gqa=True, as in PyTorch.
    scale and enable_gqa are keyword-only, as in torch. Raises ValueError for
    what it cannot express."""
    if torch is not None:
        r = _torch_ops.fast_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                 enable_gqa)
        if r is not _torch_ops.SLOW:
            return r
    where = "flashjit.sdpa"
    if not _is_torch(query):
        raise TypeError("%s: query must be a torch.Tensor (flashjit.attention takes DLPack arrays), "
                        "not %s" % (where, type(query).__name__))
    for x, n in ((key, "key"), (value, "value")):
        if not _is_torch(x):
            raise TypeError("%s: %s must be a torch.Tensor, not %s" % (where, n, type(x).__name__))
    if attn_mask is not None:
        raise ValueError("%s: attn_mask must be None: flashjit computes no mask given as a tensor, "
                         "only causal masks (is_causal=True here; flashjit.attention also has "
                         "bottom-right causal and sliding windows)" % where)
    if dropout_p != 0.0:
        raise ValueError("%s: dropout_p (%r) must be 0: flashjit has no dropout" % (where, dropout_p))
    if not isinstance(is_causal, bool) or not isinstance(enable_gqa, bool):
        raise TypeError("%s: is_causal and enable_gqa must be bools" % where)
    for x, n in ((query, "query"), (key, "key"), (value, "value")):
        if x.dim() != 4:
            raise ValueError("%s: %s must be 4-D [batch, heads, seqlen, head_dim], got shape %s"
                             % (where, n, tuple(x.shape)))
    if not enable_gqa and query.shape[1] != key.shape[1]:
        raise ValueError("%s: query has %d heads and key %d: pass enable_gqa=True for grouped-query "
                         "attention (as torch's SDPA requires)" % (where, query.shape[1], key.shape[1]))
    out = _torch_ops.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                               "top-left" if is_causal else None, (-1, -1), scale, False, None,
                               "auto", "sdpa")
    return out.transpose(1, 2)


def _problem_of(q, k, v, causal, window, scale, backend, where):
    if _is_torch(q):
        for x, n in ((k, "k"), (v, "v")):
            if not _is_torch(x):
                raise TypeError("%s: q is a torch.Tensor, so %s must be one too" % (where, n))
        ops = [_torch_ops.operand(t, n, False) for t, n in ((q, "q"), (k, "k"), (v, "v"))]
        return _problem.check(*ops, None, causal=causal, window=window, scale=scale,
                              backend=backend, where=where)
    exported = [_dlpack.export(x, n, where) for x, n in ((q, "q"), (k, "k"), (v, "v"))]
    return _problem.check(*(e.operand for e in exported), None, causal=causal, window=window,
                          scale=scale, backend=backend, where=where)


def describe(q, k, v, *, causal=None, window=(-1, -1), scale=None, backend="auto"):
    """What flashjit.attention would do with these arguments, as text: the
    context (what was found on this machine: CPU, BLAS, CUDA driver, NVRTC,
    device) and the plan (backend, kernel or CPU method, tiles, and why they
    were chosen). Creates the plan (compiling its kernel if it is not cached)
    but computes nothing."""
    where = "flashjit.describe"
    return _execute.describe(_problem_of(q, k, v, causal, window, scale, backend, where), where)


def info(backend="cpu", device=0):
    """The description of this process's context for backend ("cpu",
    "cpu-reference" or "cuda") and CUDA device: what was found (CPU threads,
    BLAS, CUDA driver, NVRTC, the device), the cache directory and the tuning
    file. Raises flashjit.Error saying why when CUDA is not usable."""
    if backend not in _lib.BACKENDS:
        raise ValueError("flashjit.info: backend must be one of %s, not %r"
                         % (", ".join(sorted(_lib.BACKENDS)), backend))
    return _lib.context_describe(_lib.context(backend, device))
