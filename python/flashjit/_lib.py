"""The C library (libflashjit.so inside this package) through ctypes: the
declarations of include/flashjit.h that the package uses, its errors as Python
exceptions, and one context per backend and device for the life of the
process.

ctypes rather than a C extension: the package then compiles nothing against
Python's headers, so one build serves every Python version, and importing it
needs only the C library and OpenBLAS (no CUDA toolkit, no torch). ctypes
releases the GIL around each foreign call, so a CPU computation or a kernel
compile does not block other Python threads.
"""
import ctypes
import glob
import os
import re
import sys
import threading

LIBRARY_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libflashjit.so")

# enum values of include/flashjit.h
F32, F16, BF16 = 0, 1, 2
CAUSAL_NONE, CAUSAL_BOTTOM_RIGHT, CAUSAL_TOP_LEFT = 0, 1, 2
BACKEND_AUTO, BACKEND_CPU_REFERENCE, BACKEND_CPU, BACKEND_CUDA = 0, 1, 2, 3
STATUS_OK, STATUS_INVALID_ARGUMENT, STATUS_UNSUPPORTED = 0, 1, 2
FEATURE_VARLEN, FEATURE_PAGED_KV = 1 << 2, 1 << 3

BACKENDS = {"cpu": BACKEND_CPU, "cpu-reference": BACKEND_CPU_REFERENCE, "cuda": BACKEND_CUDA}


class Error(RuntimeError):
    """A call into the flashjit library failed. `status` is the C status
    name (e.g. "FJ_ERR_NO_DEVICE", "FJ_ERR_COMPILE"); the message is the
    library's, which names the cause."""

    def __init__(self, message, status=""):
        super().__init__(message)
        self.status = status


class ArgumentError(Error, ValueError):
    """The library refused the problem (FJ_ERR_INVALID_ARGUMENT, or
    FJ_ERR_UNSUPPORTED by the chosen backend). The Python API checks its
    arguments first and raises TypeError or ValueError naming the argument;
    this is for a rule only the library knows (e.g. a CUDA grid limit)."""


# Shown as flashjit.Error, where the package exports them.
Error.__module__ = ArgumentError.__module__ = "flashjit"


class Desc(ctypes.Structure):
    """fj_attention_desc"""
    _fields_ = [("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int),
                ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("dtype", ctypes.c_int), ("causal", ctypes.c_int),
                ("window_left", ctypes.c_int), ("window_right", ctypes.c_int),
                ("scale", ctypes.c_float),
                ("q_stride", ctypes.c_int64 * 3), ("k_stride", ctypes.c_int64 * 3),
                ("v_stride", ctypes.c_int64 * 3), ("o_stride", ctypes.c_int64 * 3),
                ("softcap", ctypes.c_float), ("features", ctypes.c_uint32),
                ("page_size", ctypes.c_int), ("num_pages", ctypes.c_int),
                ("max_pages", ctypes.c_int), ("block_table_stride", ctypes.c_int),
                ("head_dim_v", ctypes.c_int), ("reserved_i32", ctypes.c_int32),
                ("reserved", ctypes.c_int64 * 4)]


class ExecuteExtras(ctypes.Structure):
    """fj_execute_extras"""
    _fields_ = [("alibi_slopes", ctypes.c_void_p), ("sinks", ctypes.c_void_p),
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
                ("seqused_k", ctypes.c_void_p), ("total_q", ctypes.c_int32),
                ("total_k", ctypes.c_int32), ("block_table", ctypes.c_void_p),
                ("reserved", ctypes.c_int64 * 1)]


class ContextOptions(ctypes.Structure):
    """fj_context_options"""
    _fields_ = [("backend", ctypes.c_int), ("device", ctypes.c_int),
                ("cache_dir", ctypes.c_char_p), ("tuning_file", ctypes.c_char_p),
                ("cpu_threads", ctypes.c_int), ("reserved", ctypes.c_int64 * 8)]


def _load():
    if not os.path.exists(LIBRARY_PATH):
        raise ImportError(
            "flashjit: %s is missing: this copy of the package was not built; install it with "
            "`pip install .` from the flashjit repository" % LIBRARY_PATH)
    lib = ctypes.CDLL(LIBRARY_PATH)
    P, I, cstr = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    protos = {
        "fj_version": (ctypes.c_uint, []),
        "fj_status_name": (cstr, [I]),
        "fj_last_error": (cstr, []),
        "fj_backend_name": (cstr, [I]),
        "fj_context_options_init": (None, [ctypes.POINTER(ContextOptions)]),
        "fj_context_create": (I, [ctypes.POINTER(ContextOptions), ctypes.POINTER(P)]),
        "fj_context_backend": (I, [P]),
        "fj_context_describe": (cstr, [P]),
        "fj_attention_desc_init": (None, [ctypes.POINTER(Desc), I, I, I, I, I, I, I]),
        "fj_attention_desc_validate": (I, [ctypes.POINTER(Desc)]),
        "fj_plan_create": (I, [P, ctypes.POINTER(Desc), ctypes.POINTER(P)]),
        "fj_plan_describe": (cstr, [P]),
        "fj_plan_destroy": (None, [P]),
        "fj_attention": (I, [P, ctypes.POINTER(Desc), P, P, P, P, P, P]),
        "fj_attention_ex": (I, [P, ctypes.POINTER(Desc), P, P, P, P, P,
                                ctypes.POINTER(ExecuteExtras), P]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib = _load()


def version():
    """The linked library's version as "major.minor.patch"."""
    v = lib.fj_version()
    return "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)


def check(status, what, rename=None):
    """Raises the exception for a failed C call (status != FJ_OK): the
    library's own message, which names the field and the rule. rename:
    {library name: the caller's argument name} applied to whole words of
    the message, for the Python functions whose arguments the library knows
    by other names (cache_seqlens is its seqused_k)."""
    if status == STATUS_OK:
        return
    name = lib.fj_status_name(status).decode()
    detail = lib.fj_last_error().decode(errors="replace")
    if rename:
        detail = re.sub(r"\b(%s)\b" % "|".join(map(re.escape, rename)),
                        lambda m: rename[m.group(1)], detail)
    message = "%s: %s: %s" % (what, name, detail)
    if status in (STATUS_INVALID_ARGUMENT, STATUS_UNSUPPORTED):
        raise ArgumentError(message, name)
    raise Error(message, name)


# ---- NVRTC from a pip wheel -------------------------------------------------

_NVRTC_NAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
# Where NVIDIA's wheels put it: nvidia-cuda-nvrtc (CUDA 13, which PyTorch's
# cu13 wheels install) and nvidia-cuda-nvrtc-cu12.
_NVRTC_WHEEL_PATHS = ("nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12")


def _nvrtc_from_wheels():
    """The path of libnvrtc inside an installed NVIDIA wheel, or None."""
    for entry in sys.path:
        for rel in _NVRTC_WHEEL_PATHS:
            path = os.path.join(entry or ".", rel)
            if os.path.isfile(path):
                return path
    for entry in sys.path:
        found = sorted(glob.glob(os.path.join(entry or ".", "nvidia", "*", "lib", "libnvrtc.so.*[0-9]")))
        found = [f for f in found if "builtins" not in f and "alt" not in os.path.basename(f)]
        if found:
            return found[-1]
    return None


def point_at_wheel_nvrtc():
    """Before the first CUDA context: when FLASHJIT_LIBNVRTC is unset and the
    dynamic loader finds no libnvrtc (the C library's own search), set
    FLASHJIT_LIBNVRTC to the one in an NVIDIA pip wheel (PyTorch's CUDA
    wheels bring it), so that a pip-only machine needs no CUDA toolkit.
    Returns the path it set, or None."""
    if os.environ.get("FLASHJIT_LIBNVRTC"):
        return None
    for name in _NVRTC_NAMES:
        try:
            ctypes.CDLL(name)  # stays loaded; the library would load it next anyway
            return None
        except OSError:
            pass
    path = _nvrtc_from_wheels()
    if path:
        os.environ["FLASHJIT_LIBNVRTC"] = path
    return path


# ---- contexts ---------------------------------------------------------------

_contexts = {}
_contexts_lock = threading.Lock()


def context(backend, device=0):
    """The process's context for backend ("cpu", "cpu-reference" or "cuda")
    and CUDA device ordinal, created on first use and kept for the life of
    the process (its plan cache lives as long). Thread-safe."""
    key = (backend, device if backend == "cuda" else 0)
    ctx = _contexts.get(key)
    if ctx is not None:
        return ctx
    with _contexts_lock:
        ctx = _contexts.get(key)
        if ctx is None:
            if backend == "cuda":
                point_at_wheel_nvrtc()
            opts = ContextOptions()
            lib.fj_context_options_init(ctypes.byref(opts))
            opts.backend = BACKENDS[backend]
            opts.device = key[1]
            handle = ctypes.c_void_p()
            check(lib.fj_context_create(ctypes.byref(opts), ctypes.byref(handle)),
                  "flashjit: creating the %s context%s" % (
                      backend, " for CUDA device %d" % device if backend == "cuda" else ""))
            ctx = _contexts[key] = handle
    return ctx


def context_describe(ctx):
    return lib.fj_context_describe(ctx).decode(errors="replace")
