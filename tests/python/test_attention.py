"""flashjit.attention and flashjit.sdpa against torch's SDPA math backend
(float64, tests/python/oracle.py): odd sizes, seqlen_q != seqlen_k both
ways, GQA and MQA, every mask, the backends, and the layouts the C API
accepts. Outputs are poisoned (NaN) before each call to catch unwritten
elements. CUDA cases are marked `cuda`."""
import math

import pytest
import torch

import flashjit
import oracle
from oracle import uniform

# (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim)
CASES = [
    (1, 1, 1, 1, 1, 8),
    (2, 4, 2, 17, 31, 40),
    (1, 8, 1, 1, 129, 64),      # decode, MQA
    (3, 6, 3, 65, 64, 80),      # a tile +- 1
    (1, 2, 2, 128, 127, 128),
    (2, 3, 1, 31, 7, 24),       # more queries than keys
    (1, 4, 4, 5, 5, 256),
]
CPU_ONLY_CASES = [
    (1, 1, 1, 1, 1, 1),
    (1, 2, 1, 97, 53, 13),      # primes, an odd head dim
    (1, 4, 2, 1, 70, 300),      # head dims above CUDA's 256: decode, GQA
    (2, 2, 2, 3, 9, 257),       # odd
    (1, 6, 2, 40, 33, 512),     # GQA rows
    (1, 4, 2, 9, 40, 576),      # FJ_MAX_HEAD_DIM (MLA's queries and keys)
]
# (causal, window): every mask kind, windows on either side and both
MASKS = [
    (None, (-1, -1)),
    ("bottom-right", (-1, -1)),
    ("top-left", (-1, -1)),
    ("bottom-right", (3, 0)),
    ("top-left", (4, -1)),
    (None, (2, 5)),
    (None, (0, 0)),
    (None, (-1, 3)),
]
SIZES = [1, 2, 3, 5, 7, 8, 13, 16, 31, 32, 33, 63, 64, 65, 127, 128, 129]


def case_id(c):
    return "b%d_hq%d_hkv%d_sq%d_sk%d_d%d" % c


def mask_id(m):
    return "%s_w%d,%d" % (m[0] or "none", m[1][0], m[1][1])


def make(gen, case, dtype, device):
    b, hq, hkv, sq, sk, d = case
    return (uniform(gen, (b, sq, hq, d), dtype, device), uniform(gen, (b, sk, hkv, d), dtype, device),
            uniform(gen, (b, sk, hkv, d), dtype, device))


def run_and_check(q, k, v, causal, window, backend, scale=None, context=""):
    out = torch.full_like(q, math.nan)
    got, lse = flashjit.attention(q, k, v, causal=causal, window=window, scale=scale,
                                  return_lse=True, out=out, backend=backend)
    assert got is out
    oracle.check(out, lse, q, k, v, causal, window, scale, context)
    return out


# ---- CPU -------------------------------------------------------------------

@pytest.mark.parametrize("mask", MASKS, ids=mask_id)
@pytest.mark.parametrize("case", CASES + CPU_ONLY_CASES, ids=case_id)
def test_cpu_f32(gen, case, mask):
    q, k, v = make(gen, case, torch.float32, "cpu")
    run_and_check(q, k, v, mask[0], mask[1], "cpu")


@pytest.mark.parametrize("mask", MASKS[:4], ids=mask_id)
@pytest.mark.parametrize("case", CASES[1:4] + CPU_ONLY_CASES[1:], ids=case_id)
def test_cpu_reference_f32(gen, case, mask):
    q, k, v = make(gen, case, torch.float32, "cpu")
    run_and_check(q, k, v, mask[0], mask[1], "cpu-reference")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mask", MASKS[:3], ids=mask_id)
@pytest.mark.parametrize("case", CASES[1:4] + CPU_ONLY_CASES[2:], ids=case_id)
def test_cpu_half_types(gen, case, mask, dtype):
    """The CPU computes f16 and bf16 in float32 and rounds the output."""
    q, k, v = make(gen, case, dtype, "cpu")
    run_and_check(q, k, v, mask[0], mask[1], "cpu")


def random_problem(gen):
    pick = lambda xs: xs[int(torch.randint(len(xs), (1,), generator=gen))]
    hkv = pick([1, 2, 3])
    case = (pick([1, 2, 3]), hkv * pick([1, 2, 4]), hkv, pick(SIZES), pick(SIZES),
            8 * pick([1, 3, 5, 8, 16, 32]))
    causal = pick([None, "bottom-right", "top-left"])
    window = (pick([-1, -1, 0, 1, 6]), pick([-1, -1, 0, 2]))
    scale = pick([None, 0.3, -0.7, 2.0])
    return case, causal, window, scale


def test_cpu_random_problems(gen):
    for n in range(25):
        case, causal, window, scale = random_problem(gen)
        q, k, v = make(gen, case, torch.float32, "cpu")
        run_and_check(q, k, v, causal, window, "cpu", scale,
                      "(problem %d: %s causal=%s window=%s scale=%s)"
                      % (n, case_id(case), causal, window, scale))


def test_allocating_call_and_plain_return(gen):
    q, k, v = make(gen, (2, 4, 2, 9, 12, 16), torch.float32, "cpu")
    out = flashjit.attention(q, k, v, causal="bottom-right")
    assert isinstance(out, torch.Tensor) and out.shape == q.shape and out.is_contiguous()
    oracle.check(out, None, q, k, v, "bottom-right")
    out, lse = flashjit.attention(q, k, v, return_lse=True)
    oracle.check(out, lse, q, k, v)


def test_scale(gen):
    q, k, v = make(gen, (1, 2, 2, 6, 9, 32), torch.float32, "cpu")
    for scale in (0.05, 1.0, -1.5, 3):
        run_and_check(q, k, v, None, (-1, -1), "cpu", scale, "(scale %r)" % scale)


def test_causal_alignments_differ_and_match_torch_is_causal(gen):
    """top-left is PyTorch's is_causal; bottom-right is FlashAttention's."""
    q, k, v = make(gen, (1, 2, 2, 5, 9, 16), torch.float32, "cpu")
    tl = flashjit.attention(q, k, v, causal="top-left")
    br = flashjit.attention(q, k, v, causal="bottom-right")
    want = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
    assert (tl - want).abs().max() < 1e-5
    assert (br - tl).abs().max() > 1e-2


# ---- layouts -----------------------------------------------------------------

def layouts(gen, b, hq, hkv, sq, sk, d, dtype, device):
    """(name, q, k, v) in the layouts the C API accepts: BSHD, BHSD views,
    slices of a packed QKV projection, a key/value batch broadcast with
    stride 0, and size-1 axes with odd strides."""
    yield "bshd", *make(gen, (b, hq, hkv, sq, sk, d), dtype, device)
    bhsd = [uniform(gen, (b, h, s, d), dtype, device) for h, s in ((hq, sq), (hkv, sk), (hkv, sk))]
    yield "bhsd", *(t.transpose(1, 2) for t in bhsd)
    if hq == hkv and sq == sk:
        qkv = uniform(gen, (b, sq, 3, hq, d), dtype, device)
        yield "packed_qkv", qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    kv1 = uniform(gen, (1, sk, hkv, d), dtype, device)
    yield "broadcast_batch", uniform(gen, (b, sq, hq, d), dtype, device), kv1.expand(b, -1, -1, -1), \
        kv1.expand(b, -1, -1, -1)
    padded = uniform(gen, (b, sk, hkv, d + 8), dtype, device)[..., :d]  # rows longer than head_dim
    yield "padded_rows", uniform(gen, (b, sq, hq, d), dtype, device), padded, padded
    single = uniform(gen, (1, 1, hq, d), dtype, device)
    odd = torch.as_strided(single, (1, 1, hq, d), (8, 8, d, 1))  # size-1 axes, odd strides
    yield "size1_axes", odd, *make(gen, (1, hq, hkv, 1, sk, d), dtype, device)[1:]


@pytest.mark.parametrize("mask", MASKS[:3], ids=mask_id)
def test_cpu_layouts(gen, mask):
    for name, q, k, v in layouts(gen, 2, 4, 2, 11, 11, 24, torch.float32, "cpu"):
        run_and_check(q, k, v, mask[0], mask[1], "cpu", context="(layout %s)" % name)
    for name, q, k, v in layouts(gen, 2, 3, 3, 7, 7, 16, torch.float32, "cpu"):
        run_and_check(q, k, v, mask[0], mask[1], "cpu", context="(layout %s)" % name)


def test_strided_out(gen):
    q, k, v = make(gen, (2, 4, 2, 9, 12, 16), torch.float32, "cpu")
    buf = torch.full((2, 4, 9, 24), math.nan)  # BHSD with padded rows
    out = buf[..., :16].transpose(1, 2)
    flashjit.attention(q, k, v, out=out, causal="top-left")
    oracle.check(out, None, q, k, v, "top-left")
    assert torch.isnan(buf[..., 16:]).all(), "wrote outside out's rows"


def test_empty_problems():
    q = torch.empty(0, 5, 4, 16)
    k = torch.empty(0, 7, 2, 16)
    out, lse = flashjit.attention(q, k, k, return_lse=True)
    assert out.shape == (0, 5, 4, 16) and lse.shape == (0, 4, 5)
    q = torch.empty(2, 0, 4, 16)
    assert flashjit.attention(q, torch.ones(2, 3, 2, 16), torch.ones(2, 3, 2, 16)).shape == q.shape


# ---- sdpa ------------------------------------------------------------------------

@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("case", CASES[1:6], ids=case_id)
def test_sdpa_matches_torch(gen, case, is_causal):
    b, hq, hkv, sq, sk, d = case
    q, k, v = (uniform(gen, (b, h, s, d)) for h, s in ((hq, sq), (hkv, sk), (hkv, sk)))
    got = flashjit.sdpa(q, k, v, is_causal=is_causal, enable_gqa=hq != hkv)
    assert got.shape == (b, hq, sq, d)
    want, _ = oracle.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                               "top-left" if is_causal else None)
    assert oracle.rel_error(got.transpose(1, 2), want) <= oracle.TOLERANCE[torch.float32]
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal,
                                                           enable_gqa=hq != hkv)
    assert (got - ref).abs().max() < 1e-4


def test_sdpa_signature(gen):
    q, k, v = (uniform(gen, (1, 2, 5, 16)) for _ in range(3))
    got = flashjit.sdpa(q, k, v, None, 0.0, True, scale=0.5)  # torch's positional order
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, None, 0.0, True, scale=0.5)
    assert (got - ref).abs().max() < 1e-5


# ---- CUDA ------------------------------------------------------------------------

CUDA_DTYPES = [torch.float16, torch.bfloat16]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", CUDA_DTYPES, ids=str)
@pytest.mark.parametrize("mask", MASKS, ids=mask_id)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_cuda(gen, case, mask, dtype):
    q, k, v = make(gen, case, dtype, "cuda")
    run_and_check(q, k, v, mask[0], mask[1], "auto")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", CUDA_DTYPES, ids=str)
def test_cuda_random_problems(gen, dtype):
    for n in range(25):
        case, causal, window, scale = random_problem(gen)
        q, k, v = make(gen, case, dtype, "cuda")
        run_and_check(q, k, v, causal, window, "cuda", scale,
                      "(problem %d: %s causal=%s window=%s scale=%s)"
                      % (n, case_id(case), causal, window, scale))


@pytest.mark.cuda
@pytest.mark.parametrize("mask", MASKS[:3], ids=mask_id)
def test_cuda_layouts(gen, mask):
    for name, q, k, v in layouts(gen, 2, 4, 2, 11, 11, 64, torch.bfloat16, "cuda"):
        run_and_check(q, k, v, mask[0], mask[1], "cuda", context="(layout %s)" % name)
    for name, q, k, v in layouts(gen, 2, 3, 3, 70, 70, 128, torch.float16, "cuda"):
        run_and_check(q, k, v, mask[0], mask[1], "cuda", context="(layout %s)" % name)


@pytest.mark.cuda
def test_cuda_runs_on_torch_current_stream(gen):
    """The kernel is queued on torch's current stream: after a side stream
    is synchronized the result is there, and the default stream's work
    (the poisoning fill) is ordered before it through the stream's wait."""
    q, k, v = make(gen, (2, 8, 2, 300, 300, 128), torch.bfloat16, "cuda")
    side = torch.cuda.Stream()
    out = torch.empty_like(q)
    out.fill_(math.nan)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        flashjit.attention(q, k, v, causal="bottom-right", out=out)
    side.synchronize()
    oracle.check(out, None, q, k, v, "bottom-right")


@pytest.mark.cuda
def test_cuda_sdpa_decode_and_describe(gen):
    """A decode step through sdpa (GQA 32:8, one query row, 4099 keys: the
    split-KV kernels), against the oracle and next to torch's own SDPA."""
    q, k, v = (uniform(gen, (4, h, s, 128), torch.float16, "cuda")
               for h, s in ((32, 1), (8, 4099), (8, 4099)))
    got = flashjit.sdpa(q, k, v, enable_gqa=True)
    bshd = [t.transpose(1, 2) for t in (q, k, v)]
    oracle.check(got.transpose(1, 2), None, *bshd)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert oracle.rel_error(got, ref.double().cpu()) < 2 * oracle.TOLERANCE[torch.float16]
    text = flashjit.describe(*bshd)
    assert "backend: cuda" in text, text


def test_threads(gen):
    """Concurrent calls from several threads (shared contexts and plan
    cache, the GIL released during each call) give each its own result."""
    import concurrent.futures

    problems = [make(gen, (1, 4, 2, 7 + n, 9 + 2 * n, 32), torch.float32, "cpu") for n in range(6)]

    def work(n):
        q, k, v = problems[n % len(problems)]
        out = torch.full_like(q, math.nan)
        for _ in range(20):
            flashjit.attention(q, k, v, causal="bottom-right", out=out)
        return n, out

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for n, out in pool.map(work, range(24)):
            q, k, v = problems[n % len(problems)]
            oracle.check(out, None, q, k, v, "bottom-right", context="(thread task %d)" % n)
