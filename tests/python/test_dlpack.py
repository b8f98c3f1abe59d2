"""Arrays that are not torch tensors, through DLPack: numpy (versioned and
plain capsules, views, read-only inputs, out=, lse), a producer without an
array namespace, and the refusal of device memory."""
import math

import numpy as np
import pytest
import torch

import flashjit
import oracle


def arrays(gen, b, hq, hkv, sq, sk, d, dtype=np.float32):
    return tuple(oracle.uniform(gen, shape).numpy().astype(dtype)
                 for shape in ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d)))


def check(out, lse, q, k, v, causal=None, window=(-1, -1), scale=None):
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    oracle.check(t(out), None if lse is None else t(lse), t(q), t(k), t(v), causal, window, scale)


@pytest.mark.parametrize("causal", [None, "bottom-right", "top-left"])
def test_numpy_f32(gen, causal):
    q, k, v = arrays(gen, 2, 6, 2, 19, 23, 40)
    out, lse = flashjit.attention(q, k, v, causal=causal, return_lse=True)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == q.shape
    assert isinstance(lse, np.ndarray) and lse.dtype == np.float32 and lse.shape == (2, 6, 19)
    check(out, lse, q, k, v, causal)


def test_numpy_f16_window_and_scale(gen):
    q, k, v = arrays(gen, 1, 4, 4, 33, 33, 64, np.float16)
    out = flashjit.attention(q, k, v, causal="bottom-right", window=(5, 0), scale=0.2)
    assert out.dtype == np.float16
    check(out, None, q, k, v, "bottom-right", (5, 0), 0.2)


def test_numpy_views_read_only_inputs_and_out(gen):
    qh, kh, vh = arrays(gen, 2, 4, 4, 9, 9, 16)
    q, k, v = (a.transpose(0, 2, 1, 3) for a in (qh, kh, vh))  # BHSD-shaped data as BSHD views
    k1 = np.broadcast_to(k[:1], k.shape)  # read-only, batch stride 0
    out = np.full((4, 2, 9, 16), math.nan, dtype=np.float32).transpose(1, 0, 2, 3)
    got = flashjit.attention(q, k1, v, out=out, causal="top-left")
    assert got is out
    check(out, None, q, k1, v, "top-left")


def test_numpy_matches_torch_path(gen):
    q, k, v = arrays(gen, 1, 8, 2, 50, 70, 128)
    a = flashjit.attention(q, k, v, causal="bottom-right")
    b = flashjit.attention(*(torch.from_numpy(x) for x in (q, k, v)), causal="bottom-right")
    assert np.array_equal(a, b.numpy())


class PlainProducer:
    """A DLPack producer of the old protocol: no max_version keyword, no
    array namespace (so flashjit cannot allocate like it)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_plain_dlpack_producer(gen):
    q, k, v = arrays(gen, 1, 2, 1, 7, 12, 24)
    with pytest.raises(TypeError, match=r"cannot make the output for a PlainProducer"):
        flashjit.attention(PlainProducer(q), PlainProducer(k), PlainProducer(v))
    out = np.full(q.shape, math.nan, dtype=np.float32)
    flashjit.attention(PlainProducer(q), PlainProducer(k), PlainProducer(v), out=PlainProducer(out))
    check(out, None, q, k, v)


class DeviceArray:
    def __dlpack__(self, stream=None):
        raise AssertionError("exported an array the call refuses")

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA


def test_device_memory_is_refused():
    with pytest.raises(ValueError, match=r"q is on cuda: arrays other than torch tensors are read "
                       r"in host memory only; .*torch.from_dlpack\(q\)"):
        flashjit.attention(DeviceArray(), DeviceArray(), DeviceArray())


def test_describe_numpy(gen):
    q, k, v = arrays(gen, 1, 4, 2, 3, 30, 32)
    text = flashjit.describe(q, k, v, causal="bottom-right", window=(8, 0))
    assert "problem: b1.hq4.hkv2.sq3.sk30.d32.f32.causal_br.wl8.wr0 " in text
    assert "backend: cpu" in text
