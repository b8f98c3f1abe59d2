"""Seeds and device selection for the Python package's tests.

Every random input comes from a generator seeded from FLASHJIT_TEST_SEED
(fresh each run unless set; the header prints it) and the test's name, so a
failure is repeated by setting the variable. CUDA tests are marked `cuda`
and skip, saying so, where torch sees no GPU (tests/python/run_gpu.sh runs
them on the GPU machine)."""
import os
import random
import zlib

import pytest
import torch

BASE_SEED = int(os.environ.get("FLASHJIT_TEST_SEED") or random.SystemRandom().randrange(2**31))
HAS_CUDA = torch.cuda.is_available()
NO_CUDA_REASON = ("no CUDA device (torch.cuda.is_available() is False); the CUDA tests run on the "
                  "GPU machine: tests/python/run_gpu.sh")


def pytest_report_header(config):
    return ["flashjit: FLASHJIT_TEST_SEED=%d (set it to repeat this run's inputs)" % BASE_SEED,
            "flashjit: torch %s, CUDA device: %s" % (
                torch.__version__, torch.cuda.get_device_name(0) if HAS_CUDA else "none")]


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason=NO_CUDA_REASON)
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)


@pytest.fixture
def gen(request):
    """A torch.Generator seeded from the run's seed and the test's id; the
    seed is printed (shown with a failure)."""
    seed = (BASE_SEED + zlib.crc32(request.node.nodeid.encode())) % 2**31
    print("seed %d (FLASHJIT_TEST_SEED=%d, test %s)" % (seed, BASE_SEED, request.node.nodeid))
    g = torch.Generator()
    g.manual_seed(seed)
    return g
