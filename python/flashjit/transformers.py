"""flashjit as a Hugging Face transformers attention implementation.

    import flashjit.transformers
    flashjit.transformers.register()        # once per process
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="flashjit")

register() adds the attention function to transformers' AttentionInterface
and, for the masks, FlashAttention's mask function to AttentionMaskInterface
(transformers >= 4.53): a batch without padding then reaches flashjit with no
mask tensor at all (causal is the module's is_causal, bottom-right, as
FlashAttention's; sliding windows from the model), and a padded batch as its
2-D padding mask, which flashjit computes one sequence at a time on the
sequence's unpadded keys. A padding mask with holes, a 4-D mask given by
the caller, attention sinks, soft-capping, position biases and dropout
raise ValueError: flashjit cannot express them.
"""
import torch

from . import _api

NAME = "fj_attention"


def _valid_range(row):
    """(start, end) of the True run of a 1-D bool mask row, or None when the
    Trues are not one run (a mask with holes)."""
    idx = torch.nonzero(row).flatten()
    if idx.numel() == 0:
        return (0, 0)
    s, e = int(idx[0]), int(idx[-1]) + 1
    return (s, e) if e - s == idx.numel() else None


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, sliding_window=None, softcap=None, **kwargs):
    """transformers' attention function signature: query [batch, heads_q,
    q_len, head_dim], key and value [batch, heads_kv, kv_len, head_dim];
    returns ([batch, q_len, heads_q, head_dim], None)."""
    where = "flashjit.transformers"
    if dropout:
        raise ValueError("%s: dropout (%r) must be 0: flashjit has no dropout (evaluate with "
                         "model.eval(), or train with another attn_implementation)" % (where, dropout))
    if softcap:
        raise ValueError("%s: softcap is not supported by flashjit" % where)
    for unsupported in ("s_aux", "sinks", "position_bias"):
        if kwargs.get(unsupported) is not None:
            raise ValueError("%s: %s is not supported by flashjit" % (where, unsupported))
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    window = (-1, -1)
    if sliding_window:
        # transformers' window: key j is seen from query i when i - sliding_window < j.
        window = (sliding_window - 1, sliding_window - 1)
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    mask = "bottom-right" if causal else None
    if attention_mask is None:
        out = _api.attention(q, k, v, causal=mask, window=window, scale=scaling)
        return out, None
    if attention_mask.dim() != 2 or attention_mask.dtype != torch.bool:
        raise ValueError(
            "%s: got a %d-D %s attention mask; flashjit takes transformers' 2-D padding mask only "
            "(the model's own masks, through the mask function register() installs)"
            % (where, attention_mask.dim(), attention_mask.dtype))
    return _padded(q, k, v, attention_mask, mask, window, scaling, where), None


def _padded(q, k, v, padding, causal, window, scale, where):
    """A padded batch, one sequence at a time: sequence b's valid keys are
    the run [s, e) of padding[b] (length L <= kv_len: a static cache's
    unwritten slots come after L), and its query i is at position
    L - q_len + i. Rows that see no valid key, and padded rows of a causal or
    windowed mask, are zeros."""
    B, q_len = q.shape[0], q.shape[1]
    L = padding.shape[1]
    if L > k.shape[1]:
        raise ValueError("%s: the padding mask covers %d keys and there are %d"
                         % (where, L, k.shape[1]))
    out = q.new_zeros(q.shape)
    rows = padding.cpu()
    offset = L - q_len
    for b in range(B):
        run = _valid_range(rows[b])
        if run is None:
            raise ValueError("%s: padding mask row %d has holes: flashjit computes one run of "
                             "valid keys per sequence (left or right padding)" % (where, b))
        s, e = run
        if causal is None and window == (-1, -1):
            i0, i1 = 0, q_len  # every query row sees every valid key
        else:
            # Bottom-right on the slice keeps each row's diagonal: row i of
            # the slice ends at key e - 1 exactly when i1 = e - offset.
            i0, i1 = max(0, s - offset), min(q_len, e - offset)
        if e <= s or i1 <= i0:
            continue
        _api.attention(q[b:b + 1, i0:i1], k[b:b + 1, s:e], v[b:b + 1, s:e], causal=causal,
                       window=window, scale=scale, out=out[b:b + 1, i0:i1])
    return out


def register(name=NAME):
    """Makes attn_implementation=name ("flashjit") available to every
    transformers model in this process: the attention function, and
    FlashAttention's padding-mask function for its masks. Idempotent;
    returns name."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask
    except ImportError as e:
        raise ImportError("flashjit.transformers.register needs transformers >= 4.53 "
                          "(AttentionInterface and AttentionMaskInterface): %s" % e) from None
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, flash_attention_mask)
    return name
