"""Every rule a call must satisfy, checked on the tensors' metadata alone
(shape, strides, dtype, device; no data), with a message that names the
argument and the rule; a checked call is a `Problem`, the fields of the
fj_attention_desc it becomes.

Torch tensors, torch's fake tensors (torch.compile) and DLPack arrays all
reach here as `Operand`s in BSHD order, so the rules are written once.
Nothing here touches the tensors' memory (a call that fails here has
written nothing) or calls the library (torch.compile traces it as plain
Python).
"""
import math
import numbers
from typing import NamedTuple, Optional, Tuple

from . import _lib

INT_MAX = 2**31 - 1
MAX_HEAD_DIM = 576  # FJ_MAX_HEAD_DIM (the CPU backends)
CUDA_MAX_HEAD_DIM = 256  # src/cuda/jit/kernel_desc.h's FJ_CUDA_MAX_HEAD_DIM
CUDA_ROW_ALIGN_ELEMS = 8  # the CUDA kernels move 16-byte rows of 2-byte elements
CUDA_PTR_ALIGN = 16

CAUSAL = {None: _lib.CAUSAL_NONE, False: _lib.CAUSAL_NONE, "none": _lib.CAUSAL_NONE,
          "bottom-right": _lib.CAUSAL_BOTTOM_RIGHT, "top-left": _lib.CAUSAL_TOP_LEFT}
BACKEND_CHOICES = ("auto", "cpu", "cpu-reference", "cuda")


class Operand(NamedTuple):
    """One tensor argument as the rules see it, axes in BSHD order."""
    name: str                  # the argument's name in messages: "q", "key", "out", ...
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]   # in elements
    dtype: Optional[int]       # F32, F16, BF16, or None for any other dtype
    dtype_label: str           # the dtype as its library names it ("torch.bfloat16")
    device_type: str           # "cpu" or "cuda"
    device_index: int
    ptr: Optional[int]         # address of element [0, 0, 0, 0]; None for a fake tensor
    itemsize: int

    @property
    def device(self):
        return self.device_type if self.device_type == "cpu" else "%s:%d" % (
            self.device_type, self.device_index)


class Problem(NamedTuple):
    """A checked call: the fields of its fj_attention_desc, and where it runs.
    Plain ints and tuples, so it is hashable (the key of the desc cache)."""
    backend: str               # "cpu", "cpu-reference" or "cuda"
    device_index: int
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    dtype: int
    causal: int
    window_left: int
    window_right: int
    scale: float               # 0.0: 1/sqrt(head_dim)
    q_stride: Tuple[int, int, int]
    k_stride: Tuple[int, int, int]
    v_stride: Tuple[int, int, int]
    o_stride: Tuple[int, int, int]
    # FJ_FEATURE_VARLEN / FJ_FEATURE_PAGED_KV and the paged fields
    # (flashjit.varlen_attention, flashjit.attention_with_kvcache: _seq.py)
    features: int = 0
    page_size: int = 0
    num_pages: int = 0
    max_pages: int = 0
    block_table_stride: int = 0
    # V's and O's head dim where it differs from head_dim (DeepSeek's MLA);
    # 0: the same (fj_attention_desc.head_dim_v)
    head_dim_v: int = 0

    @property
    def empty(self):
        """Nothing to compute: batch, seqlen_q or heads_q is 0."""
        return self.batch == 0 or self.seqlen_q == 0 or self.heads_q == 0

    @property
    def dim_v(self):
        """The length of v's and out's rows."""
        return self.head_dim_v or self.head_dim

    @property
    def out_shape(self):
        return (self.batch, self.seqlen_q, self.heads_q, self.dim_v)

    @property
    def lse_shape(self):
        return (self.batch, self.heads_q, self.seqlen_q)


def _fail(exc, where, text):
    raise exc("%s: %s" % (where, text))


def parse_causal(causal, where):
    if causal is True:
        _fail(TypeError, where,
              'causal=True is ambiguous: pass causal="bottom-right" (FlashAttention\'s '
              'causal=True: the last query row sees the last key) or causal="top-left" '
              "(PyTorch's is_causal=True: query row i sees keys 0..i)")
    if isinstance(causal, str) or causal is None or causal is False:
        code = CAUSAL.get(causal)
        if code is not None:
            return code
    _fail(ValueError if isinstance(causal, str) else TypeError, where,
          'causal must be None, "bottom-right" or "top-left", not %r' % (causal,))


def parse_window(window, where):
    ok = isinstance(window, (tuple, list)) and len(window) == 2 and all(
        isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in window)
    if not ok:
        _fail(TypeError, where,
              "window must be a pair of ints (left, right), -1 for unbounded; got %r" % (window,))
    for side, w in zip(("left", "right"), window):
        if w < -1 or w > INT_MAX:
            _fail(ValueError, where,
                  "window %s (%d) must be -1 (unbounded) or a key count in 0..%d" % (side, w, INT_MAX))
    return int(window[0]), int(window[1])


FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_MIN_NORMAL = 1.1754943508222875e-38


def parse_scale(scale, head_dim, where):
    if scale is None:
        return 0.0  # the C API's 0: 1/sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        _fail(TypeError, where, "scale must be None or a real number, not %s" % type(scale).__name__)
    scale = float(scale)
    # Not 0 either: the C API reads a zero scale as "the default".
    if not (FLOAT32_MIN_NORMAL <= abs(scale) <= FLOAT32_MAX):
        _fail(ValueError, where,
              "scale (%r) must be a finite non-zero float32 (magnitude %g..%g; None: "
              "1/sqrt(head_dim) = %g)" % (scale, FLOAT32_MIN_NORMAL, FLOAT32_MAX,
                                          1.0 / math.sqrt(max(head_dim, 1))))
    return scale


def parse_backend(backend, where):
    if not isinstance(backend, str) or backend not in BACKEND_CHOICES:
        _fail(ValueError, where, "backend must be one of %s, not %r"
              % (", ".join('"%s"' % b for b in BACKEND_CHOICES), backend))
    return backend


def _resolve_backend(backend, q, where):
    parse_backend(backend, where)
    if q.device_type not in ("cpu", "cuda"):
        _fail(ValueError, where, "%s is on %s: flashjit computes on the CPU and on CUDA devices"
              % (q.name, q.device))
    if backend == "auto":
        return "cuda" if q.device_type == "cuda" else "cpu"
    if backend == "cuda" and q.device_type != "cuda":
        _fail(ValueError, where, 'backend="cuda" needs CUDA tensors, and %s is on %s'
              % (q.name, q.device))
    if backend != "cuda" and q.device_type == "cuda":
        _fail(ValueError, where, 'backend="%s" computes on host memory, and %s is on %s '
              '(use backend="auto" or "cuda")' % (backend, q.name, q.device))
    return backend


def _check_row_layout(t, where, cuda):
    """Rules on one tensor's strides; returns its (batch, seq, head) strides
    for the desc, with the stride of an axis of extent 1 (which addresses
    nothing) replaced by the dense one."""
    if len(t.shape) != 4 or len(t.strides) != 4:
        _fail(ValueError, where, "%s must be 4-D, got shape %s" % (t.name, tuple(t.shape)))
    b, s, h, d = t.shape
    if not (b and s and h and d):
        return (s * h * d, h * d, d)  # nothing is read or written
    if any(x < 0 for x in t.strides):
        _fail(ValueError, where, "%s has a negative stride %s: flashjit reads strides >= 0"
              % (t.name, tuple(t.strides)))
    if d > 1 and t.strides[3] != 1:
        _fail(ValueError, where,
              "%s's last dimension (head_dim) is not contiguous (stride %d, strides %s): each row "
              "of head_dim elements must be contiguous; pass %s.contiguous()"
              % (t.name, t.strides[3], tuple(t.strides), t.name))
    dense = (s * h * d, h * d, d)
    strides = tuple(dense[a] if t.shape[a] == 1 else t.strides[a] for a in range(3))
    if all(x == 0 for x in strides):
        # The C API reads three zero strides as "dense".
        _fail(ValueError, where,
              "%s broadcasts one row over batch, seqlen and heads (strides %s): the library "
              "reads all-zero strides as dense; pass %s.contiguous()"
              % (t.name, tuple(t.strides), t.name))
    if cuda:
        for axis, x in zip(("batch", "seqlen", "heads"), strides):
            if x % CUDA_ROW_ALIGN_ELEMS:
                _fail(ValueError, where,
                      "%s's %s stride (%d elements; strides %s) is not a multiple of %d: the CUDA "
                      "kernels move 16-byte rows; pass %s.contiguous(), or use CPU tensors"
                      % (t.name, axis, x, tuple(t.strides), CUDA_ROW_ALIGN_ELEMS, t.name))
    return strides


def _extent(t):
    """(first byte, one past the last byte) of the memory t addresses."""
    if any(x == 0 for x in t.shape):
        return (t.ptr, t.ptr)
    last = sum((e - 1) * s for e, s in zip(t.shape, t.strides))
    return (t.ptr, t.ptr + (last + 1) * t.itemsize)


def _rows_overlap(strides, shape, head_dim):
    """True when two output rows (head_dim contiguous elements) can share
    memory: the library's rule (src/desc.c), checked here to name `out`."""
    axes = sorted((s, n) for s, n in zip(strides, shape) if n > 1)
    span = head_dim
    for s, n in axes:
        if s < span:
            return True
        span += (n - 1) * s
    return False


def check_dim_v(q, v, D, Dv, where, cuda):
    """V's head dim (its last dimension) may differ from q's and k's (the
    CPU backends; CUDA refuses it): 1..MAX_HEAD_DIM. Returns the
    Problem's head_dim_v (0 where it equals D)."""
    if Dv < 1 or Dv > MAX_HEAD_DIM:
        _fail(ValueError, where, "%s's head_dim (%d, head_dim_v) must be in 1..%d"
              % (v.name, Dv, MAX_HEAD_DIM))
    if cuda and Dv != D:
        _fail(ValueError, where,
              "head_dim_v: %s's head_dim (%d) differs from %s's (%d), which the CUDA backend does "
              "not take (its kernels need one head_dim); CPU tensors take any head_dim_v in 1..%d"
              % (v.name, Dv, q.name, D, MAX_HEAD_DIM))
    return 0 if Dv == D else Dv


def _check_values(q, k, v, where):
    """The dtype and device rules of q, k and v: a dtype flashjit computes,
    one dtype, one device (also the varlen and KV-cache calls', _seq)."""
    qkv = "%s, %s and %s" % (q.name, k.name, v.name)
    for t in (q, k, v):
        if t.dtype is None:
            _fail(TypeError, where, "%s has dtype %s: flashjit computes float32, float16 and "
                  "bfloat16" % (t.name, t.dtype_label))
    for t in (k, v):
        if t.dtype != q.dtype:
            _fail(TypeError, where, "dtypes differ: %s is %s and %s is %s; %s must share one dtype"
                  % (q.name, q.dtype_label, t.name, t.dtype_label, qkv))
    for t in (k, v):
        if (t.device_type, t.device_index) != (q.device_type, q.device_index):
            _fail(ValueError, where, "devices differ: %s is on %s and %s on %s"
                  % (q.name, q.device, t.name, t.device))


def check(q, k, v, out=None, *, causal=None, window=(-1, -1), scale=None, backend="auto",
          where="flashjit.attention"):
    """Checks a call on the operands' metadata; returns its Problem or
    raises TypeError/ValueError naming the argument and the rule."""
    for t in (q, k, v) + ((out,) if out is not None else ()):
        if len(t.shape) != 4:
            _fail(ValueError, where, "%s must be 4-D, got shape %s" % (t.name, tuple(t.shape)))
    _check_values(q, k, v, where)
    be = _resolve_backend(backend, q, where)
    cuda = be == "cuda"

    B, Sq, Hq, D = q.shape
    _, Sk, Hkv, _ = k.shape
    Dv = v.shape[3]  # V's and the output's head dim: D, or head_dim_v (MLA)
    for t in (k, v):
        if t.shape[0] != B:
            _fail(ValueError, where, "batch sizes differ: %s has %d and %s has %d"
                  % (q.name, B, t.name, t.shape[0]))
    if k.shape[3] != D:
        _fail(ValueError, where, "head_dim differs: %s has %d and %s has %d; %s and %s need one "
              "head_dim (%s's may differ: head_dim_v)" % (q.name, D, k.name, k.shape[3], q.name,
                                                          k.name, v.name))
    if v.shape[1] != Sk:
        _fail(ValueError, where, "seqlens differ: %s has %d keys and %s %d values"
              % (k.name, Sk, v.name, v.shape[1]))
    if v.shape[2] != Hkv:
        _fail(ValueError, where, "head counts differ: %s has %d heads and %s %d"
              % (k.name, Hkv, v.name, v.shape[2]))
    if Hkv == 0 and Hq > 0 or Hkv > 0 and Hq % Hkv:
        _fail(ValueError, where,
              "head counts not divisible: %s has %d heads and %s %d; the query heads must be a "
              "multiple of the key/value heads (GQA, MQA)" % (q.name, Hq, k.name, Hkv))
    if D < 1 or D > MAX_HEAD_DIM:
        _fail(ValueError, where, "head_dim (%d) must be in 1..%d" % (D, MAX_HEAD_DIM))
    if Sk == 0 and B and Sq and Hq:
        _fail(ValueError, where, "%s has no keys (seqlen 0): every query row would see none"
              % k.name)
    for label, n in (("batch", B), ("seqlen of %s" % q.name, Sq), ("seqlen of %s" % k.name, Sk),
                     ("heads of %s" % q.name, Hq)):
        if n > INT_MAX:
            _fail(ValueError, where, "%s (%d) is above %d" % (label, n, INT_MAX))

    causal_code = parse_causal(causal, where)
    wl, wr = parse_window(window, where)
    scale_value = parse_scale(scale, D, where)
    dim_v = check_dim_v(q, v, D, Dv, where, cuda)

    if cuda:
        if q.dtype == _lib.F32:
            _fail(TypeError, where, "%s is %s and the CUDA backend computes float16 and bfloat16: "
                  "convert the tensors, or use CPU tensors for float32" % (q.name, q.dtype_label))
        if D > CUDA_MAX_HEAD_DIM:
            _fail(ValueError, where,
                  "head_dim %d is not supported by the CUDA backend, which takes head dims up to "
                  "%d (a multiple of 8); CPU tensors take up to %d"
                  % (D, CUDA_MAX_HEAD_DIM, MAX_HEAD_DIM))
        if D % 8:
            _fail(ValueError, where,
                  "head_dim %d is not supported by the CUDA backend, which needs a multiple of 8 "
                  "in 8..%d (zero-pad %s and %s to %d, or use CPU tensors)"
                  % (D, CUDA_MAX_HEAD_DIM, q.name, k.name, (D // 8 + 1) * 8))

    q_strides, k_strides, v_strides = (_check_row_layout(t, where, cuda) for t in (q, k, v))
    if out is not None:
        if tuple(out.shape) != (B, Sq, Hq, Dv):
            _fail(ValueError, where, "%s has shape %s; it must be %s, %s"
                  % (out.name, tuple(out.shape), (B, Sq, Hq, Dv),
                     "the shape of %s" % q.name if Dv == D else
                     "%s's with %s's head_dim (head_dim_v)" % (q.name, v.name)))
        if out.dtype != q.dtype:
            _fail(TypeError, where, "dtypes differ: %s is %s and %s is %s" % (
                out.name, out.dtype_label, q.name, q.dtype_label))
        if (out.device_type, out.device_index) != (q.device_type, q.device_index):
            _fail(ValueError, where, "devices differ: %s is on %s and %s on %s"
                  % (q.name, q.device, out.name, out.device))
        o_strides = _check_row_layout(out, where, cuda)
        if B and Sq and Hq and _rows_overlap(o_strides, (B, Sq, Hq), Dv):  # else none written
            _fail(ValueError, where, "%s's rows overlap (strides %s): two results would be written "
                  "to the same memory" % (out.name, tuple(out.strides)))
        if out.ptr is not None and B and Sq and Hq:
            lo, hi = _extent(out)
            for t in (q, k, v):
                tlo, thi = _extent(t)
                if tlo < hi and lo < thi:
                    _fail(ValueError, where, "%s overlaps %s in memory: the output must not alias "
                          "an input" % (out.name, t.name))
    else:
        o_strides = (Sq * Hq * Dv, Hq * Dv, Dv)  # the dense BSHD output this package allocates

    return Problem(be, q.device_index if cuda else 0, B, Hq, Hkv, Sq, Sk, D, q.dtype, causal_code,
                   wl, wr, scale_value, q_strides, k_strides, v_strides, o_strides,
                   head_dim_v=dim_v)


def check_pointers(problem, operands, where):
    """The CUDA kernels' alignment rule on the data pointers (known only for
    real tensors, so checked just before the call)."""
    if problem.backend != "cuda":
        return
    for t in operands:
        if t.ptr is not None and t.ptr % CUDA_PTR_ALIGN:
            _fail(ValueError, where,
                  "%s's data pointer (0x%x) is not %d-byte aligned, which the CUDA kernels need "
                  "(a view that starts mid-row, e.g. a slice of the head_dim axis); pass %s.clone()"
                  % (t.name, t.ptr, CUDA_PTR_ALIGN, t.name))
