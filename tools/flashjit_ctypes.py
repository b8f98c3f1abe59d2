"""libflashjit.so through ctypes, for the scripts that put flashjit next to
PyTorch (compare_torch.py on the GPU, compare_torch_cpu.py on the CPU):
the desc struct, status checks, and plans for PyTorch's dense
[batch, heads, seq, head_dim] tensors (passed with BHSD strides)."""
import ctypes

FJ_F32, FJ_F16, FJ_BF16 = 0, 1, 2
FJ_CAUSAL_NONE, FJ_CAUSAL_BOTTOM_RIGHT = 0, 1
FJ_BACKEND_CUDA = 3


class Desc(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int),
                ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("dtype", ctypes.c_int), ("causal", ctypes.c_int),
                ("window_left", ctypes.c_int), ("window_right", ctypes.c_int),
                ("scale", ctypes.c_float),
                ("q_stride", ctypes.c_int64 * 3), ("k_stride", ctypes.c_int64 * 3),
                ("v_stride", ctypes.c_int64 * 3), ("o_stride", ctypes.c_int64 * 3),
                ("softcap", ctypes.c_float), ("features", ctypes.c_uint32),
                ("reserved", ctypes.c_int64 * 7)]


class ContextOptions(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("device", ctypes.c_int),
                ("cache_dir", ctypes.c_char_p), ("tuning_file", ctypes.c_char_p),
                ("cpu_threads", ctypes.c_int), ("reserved", ctypes.c_int64 * 8)]


class Library:
    """A loaded libflashjit with one context (FLASHJIT_BACKEND and the other
    variables apply as for any program); cpu_threads 0: one CPU worker per
    online core, as the default context has."""

    def __init__(self, path, cpu_threads=0):
        lib = ctypes.CDLL(path)
        lib.fj_last_error.restype = ctypes.c_char_p
        lib.fj_status_name.restype = ctypes.c_char_p
        lib.fj_context_describe.restype = ctypes.c_char_p
        lib.fj_context_describe.argtypes = [ctypes.c_void_p]
        lib.fj_context_backend.argtypes = [ctypes.c_void_p]
        lib.fj_plan_describe.restype = ctypes.c_char_p
        lib.fj_plan_describe.argtypes = [ctypes.c_void_p]
        lib.fj_plan_execute.argtypes = [ctypes.c_void_p] * 7
        lib.fj_plan_destroy.argtypes = [ctypes.c_void_p]
        self.lib = lib
        self.ctx = ctypes.c_void_p()
        opts = ContextOptions()
        lib.fj_context_options_init(ctypes.byref(opts))
        opts.cpu_threads = cpu_threads
        self.check(lib.fj_context_create(ctypes.byref(opts), ctypes.byref(self.ctx)),
                   "fj_context_create")

    def describe(self):
        return self.lib.fj_context_describe(self.ctx).decode()

    def backend(self):
        return self.lib.fj_context_backend(self.ctx)

    def check(self, status, what):
        if status:
            raise RuntimeError("%s: %s: %s" % (what, self.lib.fj_status_name(status).decode(),
                                                self.lib.fj_last_error().decode()))

    def plan(self, q, k, v, causal, dtype):
        """A plan for torch tensors q [b, hq, sq, d], k and v [b, hkv, sk, d]
        (dtype: FJ_F32, FJ_F16 or FJ_BF16); returns (plan, kernel or CPU
        method line of its describe)."""
        b, hq, sq, d = q.shape
        _, hkv, sk, _ = k.shape
        desc = Desc()
        self.lib.fj_attention_desc_init(ctypes.byref(desc), b, hq, hkv, sq, sk, d, dtype)
        desc.causal = FJ_CAUSAL_BOTTOM_RIGHT if causal else FJ_CAUSAL_NONE
        for name, t in (("q_stride", q), ("k_stride", k), ("v_stride", v), ("o_stride", q)):
            st = t.stride()  # [b, h, s, d] tensor -> flashjit (batch, seq, head)
            getattr(desc, name)[:] = (st[0], st[2], st[1])
        plan = ctypes.c_void_p()
        self.check(self.lib.fj_plan_create(self.ctx, ctypes.byref(desc), ctypes.byref(plan)),
                   "fj_plan_create")
        kernel = ""
        for line in self.lib.fj_plan_describe(plan).decode().splitlines():
            if line.startswith("kernel: ") or line.startswith("method: "):
                kernel = line.split(": ", 1)[1]
        return plan, kernel

    def execute(self, plan, q, k, v, o, stream):
        self.check(self.lib.fj_plan_execute(plan, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                            o.data_ptr(), None, stream), "fj_plan_execute")

    def destroy(self, plan):
        self.lib.fj_plan_destroy(plan)
