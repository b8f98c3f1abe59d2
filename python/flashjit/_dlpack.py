"""Arrays that are not torch tensors, through the DLPack protocol
(`__dlpack__`, `__dlpack_device__`): numpy and any other producer of host
memory. The capsule is read with ctypes and kept alive for the call; it is
not renamed "used_...", so when it is dropped its own destructor calls the
producer's deleter, as the protocol asks of a consumer that did not take
ownership.

Arrays in CUDA memory are refused: DLPack hands a consumer the producer's
stream only when the consumer names its own, and flashjit has none outside
torch; torch.from_dlpack(x) makes them torch tensors, which run on torch's
current stream.
"""
import ctypes
from typing import NamedTuple, Any

from . import _lib
from ._problem import Operand

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 0, 1, 2, 4
DLPACK_FLAG_READ_ONLY = 1
_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal",
                 10: "rocm", 13: "cuda_managed", 14: "oneapi"}
_DTYPES = {(KDL_FLOAT, 32): _lib.F32, (KDL_FLOAT, 16): _lib.F16, (KDL_BFLOAT, 16): _lib.BF16}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]


class Exported(NamedTuple):
    operand: Operand
    capsule: Any        # keeps the producer's memory alive until dropped
    read_only: bool


def is_array(x):
    return hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__")


def _dtype_label(x, dt):
    label = getattr(x, "dtype", None)
    if label is not None:
        return str(label)
    return "DLPack dtype (code %d, %d bits, %d lanes)" % (dt.code, dt.bits, dt.lanes)


def export(x, name, where):
    """The DLPack view of array x as an Operand (BSHD axes as given)."""
    if not is_array(x):
        raise TypeError("%s: %s must be a torch.Tensor or an array with __dlpack__ (numpy, ...), "
                        "not %s" % (where, name, type(x).__name__))
    dev_type, dev_id = x.__dlpack_device__()
    if int(dev_type) != KDL_CPU:
        label = _DEVICE_NAMES.get(int(dev_type), "DLPack device type %d" % int(dev_type))
        raise ValueError(
            "%s: %s is on %s: arrays other than torch tensors are read in host memory only; "
            "for CUDA memory pass torch tensors (torch.from_dlpack(%s)), which run on torch's "
            "current stream" % (where, name, label, name))
    try:
        try:
            # Versioned first: it carries a read-only flag, and numpy exports
            # read-only arrays (np.broadcast_to, ...) only that way.
            capsule = x.__dlpack__(max_version=(1, 0))
        except TypeError:  # a producer older than DLPack 1.0's keyword
            capsule = x.__dlpack__()
    except (BufferError, TypeError, ValueError) as e:
        raise ValueError("%s: %s cannot be read through DLPack: %s" % (where, name, e)) from None
    cname = _capsule_name(capsule)
    if cname == b"dltensor_versioned":
        managed = DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, cname))
        if managed.version.major != 1:
            raise ValueError("%s: %s's DLPack capsule is version %d.%d; flashjit reads 1.x"
                             % (where, name, managed.version.major, managed.version.minor))
        read_only = bool(managed.flags & DLPACK_FLAG_READ_ONLY)
    elif cname == b"dltensor":
        managed = DLManagedTensor.from_address(_capsule_pointer(capsule, cname))
        read_only = False
    else:
        raise ValueError("%s: %s.__dlpack__() returned a capsule named %r, not a DLPack tensor"
                         % (where, name, cname))
    t = managed.dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
    else:  # NULL strides: compact row-major
        strides, step = [], 1
        for n in reversed(shape):
            strides.insert(0, step)
            step *= max(n, 1)
        strides = tuple(strides)
    dt = t.dtype
    dtype = _DTYPES.get((dt.code, dt.bits)) if dt.lanes == 1 else None
    itemsize = max(dt.bits * dt.lanes // 8, 1)
    ptr = (t.data or 0) + t.byte_offset
    op = Operand(name, shape, strides, dtype, _dtype_label(x, dt), "cpu", 0, ptr, itemsize)
    return Exported(op, capsule, read_only)


def empty_like_namespace(x, shape, dtype, where, name):
    """A new array of x's kind (its array API namespace, or numpy)."""
    ns = getattr(x, "__array_namespace__", None)
    if ns is not None:
        xp = ns()
        dt = x.dtype if dtype is None else getattr(xp, dtype)
        try:
            return xp.empty(shape, dtype=dt, device=x.device)
        except TypeError:  # namespaces without the device keyword
            return xp.empty(shape, dtype=dt)
    if type(x).__module__ == "numpy":
        import numpy
        return numpy.empty(shape, dtype=x.dtype if dtype is None else getattr(numpy, dtype))
    raise TypeError("%s: cannot make %s for a %s (it has no __array_namespace__): pass it "
                    "yourself" % (where, name, type(x).__name__))
