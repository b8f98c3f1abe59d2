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
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _execute, _lib, _problem

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
