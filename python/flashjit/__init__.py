"""flashjit: the forward pass of scaled dot-product attention,
O = softmax(scale * Q K^T + mask) V, on torch tensors (CPU or CUDA) and
DLPack arrays (numpy).

On CUDA it runs a kernel generated and compiled (NVRTC) for the exact problem
and cached on disk; on the CPU it computes with OpenBLAS. See docs/python.md.

    import flashjit
    out = flashjit.attention(q, k, v, causal="bottom-right")   # BSHD
    out = flashjit.sdpa(query, key, value, is_causal=True)      # BHSD, torch's signature
    print(flashjit.describe(q, k, v))                           # what the plan chose, and why
    out = flashjit.varlen_attention(q, k, v, cu_q, cu_k, max_q, max_k)   # packed sequences
    out = flashjit.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table)

flashjit.transformers registers attn_implementation="flashjit" with Hugging
Face transformers.
"""
from ._api import attention, attention_with_kvcache, describe, info, sdpa, varlen_attention
from ._lib import ArgumentError, Error, version as _library_version

__version__ = _library_version()
__all__ = ["attention", "sdpa", "varlen_attention", "attention_with_kvcache", "describe", "info",
           "Error", "ArgumentError"]
