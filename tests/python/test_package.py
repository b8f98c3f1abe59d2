"""The package itself: its version and the library's, info and describe,
import without torch, and finding NVRTC in an NVIDIA pip wheel."""
import os
import re
import subprocess
import sys

import pytest
import torch

import flashjit
from flashjit import _lib


# The version include/flashjit.h states (the package and its library must say it).
HEADER_VERSION = re.search(
    r'#define FLASHJIT_VERSION_STRING "([^"]+)"',
    open(os.path.join(os.path.dirname(__file__), "..", "..", "include", "flashjit.h")).read()).group(1)


def test_version_is_the_library_version():
    assert flashjit.__version__ == _lib.version() == HEADER_VERSION
    assert os.path.dirname(_lib.LIBRARY_PATH) == os.path.dirname(flashjit.__file__)


def test_info_and_describe():
    text = flashjit.info()
    assert text.startswith("flashjit %s\n" % HEADER_VERSION) and "backend: cpu" in text
    q, k = torch.zeros(2, 5, 4, 16), torch.zeros(2, 7, 2, 16)
    plan = flashjit.describe(q, k, k, causal="bottom-right", scale=0.5, backend="cpu-reference")
    assert "problem: b2.hq4.hkv2.sq5.sk7.d16.f32.causal_br scale=0.5" in plan
    assert "backend: cpu-reference" in plan
    with pytest.raises(ValueError, match=r"flashjit.info: backend must be one of"):
        flashjit.info("gpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is usable here")
def test_info_says_why_cuda_is_not_usable():
    with pytest.raises(flashjit.Error) as e:
        flashjit.info("cuda")
    assert e.value.status == "FJ_ERR_NO_DEVICE" and "CUDA" in str(e.value)


def test_import_and_compute_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"  # import torch now raises ImportError
            "import flashjit, numpy as np\n"
            "q = np.ones((1, 3, 2, 8), np.float32); v = np.arange(48, dtype=np.float32).reshape(1, 3, 2, 8)\n"
            "o = flashjit.attention(q, q, v, causal='bottom-right')\n"
            "assert np.allclose(o[0, 0], v[0, 0]) and np.allclose(o[0, 2], v.mean(axis=1)[0])\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_nvrtc_found_in_a_pip_wheel(tmp_path, monkeypatch):
    lib = tmp_path / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnvrtc.so.13").write_bytes(b"")
    # Set (empty, which counts as unset) through monkeypatch, so that what the
    # function writes is undone after the test, as the variable was before it.
    monkeypatch.setenv("FLASHJIT_LIBNVRTC", "")
    monkeypatch.setattr(_lib, "_NVRTC_NAMES", ("libflashjit-test-no-such-nvrtc.so",))
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + sys.path)
    assert _lib.point_at_wheel_nvrtc() == str(lib / "libnvrtc.so.13")
    assert os.environ["FLASHJIT_LIBNVRTC"] == str(lib / "libnvrtc.so.13")
    # A variable the user set is theirs.
    monkeypatch.setenv("FLASHJIT_LIBNVRTC", "/elsewhere/libnvrtc.so.13")
    assert _lib.point_at_wheel_nvrtc() is None
    assert os.environ["FLASHJIT_LIBNVRTC"] == "/elsewhere/libnvrtc.so.13"
    # The loader finding a libnvrtc by itself wins over the wheels, as in
    # the C library's own search (libnvrtc.so.13, .12, .so).
    monkeypatch.setenv("FLASHJIT_LIBNVRTC", "")
    monkeypatch.setattr(_lib, "_NVRTC_NAMES", ("libc.so.6",))
    assert _lib.point_at_wheel_nvrtc() is None and os.environ["FLASHJIT_LIBNVRTC"] == ""
