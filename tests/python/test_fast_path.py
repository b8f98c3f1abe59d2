"""The fast eager path (python/flashjit/_torch_ops.py): flashjit.attention
and flashjit.sdpa on plain tensors, with no gradient to track and nothing
tracing, call the library without torch's dispatcher, the checks cached per
call signature. Here: it is taken when it should be and not otherwise, and
every call gives what the operator path gives: the same values bit for bit,
shapes, strides, dtypes and version counters, and the same exception with
the same message, before anything is written."""
import math

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import flashjit
import oracle
from flashjit import _torch_ops
from oracle import uniform

SENTINEL = 7.25


@pytest.fixture
def op_calls(monkeypatch):
    """Counts the calls that went through the operators (the dispatcher
    path); the fast path makes none."""
    calls = []
    for name in ("attention_op", "attention_out_op"):
        real = getattr(_torch_ops, name)

        def counted(*args, _real=real, _name=name, **kw):
            calls.append(_name)
            return _real(*args, **kw)
        monkeypatch.setattr(_torch_ops, name, counted)
    return calls


def via_operator(monkeypatch, fn):
    """fn() with the fast path switched off: every call through the
    operator, as before the fast path existed."""
    with monkeypatch.context() as m:
        m.setattr(_torch_ops, "_FAST", False)
        return fn()


def outcome(fn):
    """What fn() did: ("ok", result) or ("raised", type, message)."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - compared whole below
        return ("raised", type(e), str(e))


def assert_same_tensors(a, b, what):
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    assert len(a) == len(b), what
    for x, y in zip(a, b):
        assert (x.shape, x.stride(), x.dtype, x.device, x.storage_offset(), x.requires_grad) == (
            y.shape, y.stride(), y.dtype, y.device, y.storage_offset(), y.requires_grad), what
        assert torch.equal(x, y), "%s: the fast path's values differ" % what


def make(gen, b=2, hq=4, hkv=2, sq=5, sk=7, d=16, dtype=torch.float32, device="cpu"):
    return (uniform(gen, (b, sq, hq, d), dtype, device),
            uniform(gen, (b, sk, hkv, d), dtype, device),
            uniform(gen, (b, sk, hkv, d), dtype, device))


def test_fast_path_available():
    assert _torch_ops.fast_path_enabled(), (
        "this torch (%s) lacks a function the fast path needs: every call pays the dispatcher"
        % torch.__version__)


# (kwargs) for flashjit.attention: every keyword, defaults and not, plain
# and non-plain types (those take the operator path and must agree too)
ATTENTION_KWARGS = [
    {},
    {"causal": "bottom-right"},
    {"causal": "top-left", "window": (3, 0)},
    {"causal": None, "window": (2, 5), "scale": 0.3},
    {"causal": False, "scale": 2},
    {"window": (0, 0), "return_lse": True},
    {"causal": "bottom-right", "return_lse": True, "backend": "cpu-reference"},
    {"scale": np.float64(0.7), "window": [4, -1]},            # not plain types: operator path
    {"causal": "none", "scale": -1.5, "backend": "cpu"},
]


@pytest.mark.parametrize("kwargs", ATTENTION_KWARGS, ids=str)
@pytest.mark.parametrize("with_out", [False, True])
def test_attention_matches_operator_path(gen, monkeypatch, op_calls, kwargs, with_out):
    q, k, v = make(gen, sq=9, sk=13)
    out_fast = torch.full_like(q, math.nan) if with_out else None
    out_slow = torch.full_like(q, math.nan) if with_out else None
    fast = flashjit.attention(q, k, v, out=out_fast, **kwargs)
    fast_calls = len(op_calls)
    slow = via_operator(monkeypatch, lambda: flashjit.attention(q, k, v, out=out_slow, **kwargs))
    assert len(op_calls) == fast_calls + 1, "the switched-off call skipped the operator"
    plain = not isinstance(kwargs.get("scale"), np.floating)
    assert fast_calls == (0 if plain else 1), "fast path taken: %s" % (fast_calls == 0)
    assert_same_tensors(fast, slow, str(kwargs))
    if with_out:
        assert (fast[0] if isinstance(fast, tuple) else fast) is out_fast
        assert out_fast._version == out_slow._version, "out's version counter differs"
    oracle.check(fast[0] if isinstance(fast, tuple) else fast,
                 fast[1] if isinstance(fast, tuple) else None, q, k, v, kwargs.get("causal"),
                 tuple(kwargs.get("window", (-1, -1))), kwargs.get("scale"))


@pytest.mark.parametrize("layout", ["bshd", "bhsd-view", "padded-rows", "kv-broadcast-heads"])
def test_strided_inputs_and_repeat_calls(gen, monkeypatch, op_calls, layout):
    """The signature holds the strides: layouts with the same shapes get
    their own entries, and repeat calls (cache hits) agree with the first."""
    b, hq, hkv, sq, sk, d = 2, 4, 2, 6, 11, 24
    if layout == "bshd":
        q, k, v = make(gen, b, hq, hkv, sq, sk, d)
    elif layout == "bhsd-view":
        q, k, v = (uniform(gen, (b, h, s, d)).transpose(1, 2)
                   for h, s in ((hq, sq), (hkv, sk), (hkv, sk)))
    elif layout == "padded-rows":
        q, k, v = (uniform(gen, (b, s, h, d + 8))[..., :d] for h, s in ((hq, sq), (hkv, sk),
                                                                        (hkv, sk)))
    else:
        q = uniform(gen, (b, sq, hq, d))
        k, v = (uniform(gen, (b, sk, 1, d)).expand(b, sk, hkv, d) for _ in range(2))
    slow = via_operator(monkeypatch, lambda: flashjit.attention(q, k, v, return_lse=True,
                                                                causal="bottom-right"))
    for _ in range(3):
        fast = flashjit.attention(q, k, v, return_lse=True, causal="bottom-right")
        assert_same_tensors(fast, slow, layout)
    assert len(op_calls) == 1  # the switched-off call only


def test_sdpa_matches_operator_path(gen, monkeypatch, op_calls):
    for hq, hkv, sq, sk, is_causal, scale in ((4, 2, 9, 13, False, None), (3, 3, 1, 40, True, 0.5),
                                               (8, 1, 17, 5, True, None)):
        q, k, v = (uniform(gen, (2, h, s, 16)) for h, s in ((hq, sq), (hkv, sk), (hkv, sk)))
        args = dict(is_causal=is_causal, scale=scale, enable_gqa=hq != hkv)
        fast = flashjit.sdpa(q, k, v, **args)
        assert not op_calls, "flashjit.sdpa went through the operator"
        slow = via_operator(monkeypatch, lambda: flashjit.sdpa(q, k, v, **args))
        assert_same_tensors(fast, slow, str(args))
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, **args)
        assert (fast - ref).abs().max() < 1e-4
        del op_calls[:]


def test_empty_problems_match(monkeypatch, op_calls):
    for q, k in ((torch.empty(0, 5, 4, 16), torch.empty(0, 7, 2, 16)),
                 (torch.empty(2, 0, 4, 16), torch.ones(2, 3, 2, 16)),
                 (torch.empty(2, 3, 0, 16), torch.ones(2, 3, 0, 16))):
        fast = flashjit.attention(q, k, k, return_lse=True)
        slow = via_operator(monkeypatch, lambda: flashjit.attention(q, k, k, return_lse=True))
        assert_same_tensors(fast, slow, "empty %s" % (tuple(q.shape),))
        o_fast, o_slow = torch.empty_like(q), torch.empty_like(q)
        flashjit.attention(q, k, k, out=o_fast)
        via_operator(monkeypatch, lambda: flashjit.attention(q, k, k, out=o_slow))
        assert o_fast._version == o_slow._version
    assert len(op_calls) == 6  # the switched-off calls only


def bad_attention_calls():
    """(name, fn(q, k, v, out)) calls that must fail; some after a valid call
    of a signature that looks the same to a naive cache key (True == 1 ==
    1.0, (1, 2) == [1, 2]) or shares it (the pointers alone are wrong)."""
    def call(**kw):
        return lambda q, k, v, out: flashjit.attention(q, k, v, out=out, **kw)
    return [
        ("causal True", call(causal=True)),
        ("causal 0", call(causal=0)),
        ("causal 1", call(causal=1)),
        ("causal diagonal", call(causal="diagonal")),
        ("window float", call(window=(1.0, 2))),
        ("window bool", call(window=(True, 0))),
        ("window 3", call(window=(1, 2, 3))),
        ("window -2", call(window=(-2, 0))),
        ("window huge", call(window=(0, 2**31))),
        ("scale True", call(scale=True)),
        ("scale 0", call(scale=0)),
        ("scale nan", call(scale=math.nan)),
        ("scale str", call(scale="0.5")),
        ("scale tensor", call(scale=torch.tensor(0.5))),
        ("backend gpu", call(backend="gpu")),
        ("backend cuda", call(backend="cuda")),
        ("backend int", call(backend=3)),
        ("return_lse int", call(return_lse=1)),
        ("k half", lambda q, k, v, out: flashjit.attention(q, k.half(), v, out=out)),
        ("v double", lambda q, k, v, out: flashjit.attention(q, k, v.double(), out=out)),
        ("k numpy", lambda q, k, v, out: flashjit.attention(q, k.numpy(), v, out=out)),
        ("v on meta", lambda q, k, v, out: flashjit.attention(q, k, v.to("meta"), out=out)),
        ("q 3-D", lambda q, k, v, out: flashjit.attention(q[0], k, v)),
        ("heads", lambda q, k, v, out: flashjit.attention(q[:, :, :3], k, v)),
        ("batch", lambda q, k, v, out: flashjit.attention(q, k[:1], v[:1], out=out)),
        ("no keys", lambda q, k, v, out: flashjit.attention(q, k[:, :0], v[:, :0], out=out)),
        ("k strided d", lambda q, k, v, out: flashjit.attention(
            q, torch.randn(2, 7, 2, 32)[..., ::2], v, out=out)),
        ("k broadcast", lambda q, k, v, out: flashjit.attention(
            q, torch.randn(1, 1, 1, 16).expand(2, 7, 2, 16), v, out=out)),
        ("out is q", lambda q, k, v, out: flashjit.attention(q, k, v, out=q)),
        ("out half", lambda q, k, v, out: flashjit.attention(q, k, v, out=out.half())),
        ("out shape", lambda q, k, v, out: flashjit.attention(q, k, v, out=out[:, :4])),
        ("out rows overlap", lambda q, k, v, out: flashjit.attention(
            q, k, v, out=out[:1].expand(q.shape))),
        ("out numpy", lambda q, k, v, out: flashjit.attention(q, k, v, out=out.numpy())),
    ]


@pytest.mark.parametrize("name,bad", bad_attention_calls(), ids=[n for n, _ in
                                                                   bad_attention_calls()])
def test_errors_match_operator_path(gen, monkeypatch, name, bad):
    q, k, v = make(gen)
    # Valid calls first, so the fast path has entries of these signatures
    # and of the keyword values the bad ones resemble.
    good = torch.empty_like(q)
    for kw in ({}, {"causal": False}, {"causal": None}, {"window": (1, 2)}, {"scale": 1},
               {"scale": 1.0}, {"backend": "cpu"}, {"return_lse": True}):
        flashjit.attention(q, k, v, **kw)
        flashjit.attention(q, k, v, out=good, **kw)
    results = []
    for fast in (True, False):
        out = torch.full(q.shape, SENTINEL)
        if fast:
            got = outcome(lambda: bad(q, k, v, out))
        else:
            got = via_operator(monkeypatch, lambda: outcome(lambda: bad(q, k, v, out)))
        assert got[0] == "raised", "%s: no exception (fast=%s)" % (name, fast)
        assert issubclass(got[1], (TypeError, ValueError)), got  # never the dispatcher's
        assert (out == SENTINEL).all(), "%s: a failed call wrote to out" % name
        results.append(got)
    assert results[0] == results[1], "the fast path raised otherwise than the operator path"


def test_aliasing_out_with_a_known_signature(gen, monkeypatch):
    """The aliasing rule depends on the pointers, not the signature: a call
    whose signature is cached and whose out overlaps an input still fails,
    with the operator's message, and writes nothing."""
    buf = uniform(gen, (2, 12, 4, 16))
    q = uniform(gen, (2, 5, 4, 16))
    k, v = buf[:, 5:, :2], buf[:, 5:, 2:]
    other = torch.full((2, 12, 4, 16), SENTINEL)[:, :5]  # out's signature, its own memory
    flashjit.attention(q, k, v, out=other)
    before = buf.clone()
    for fast in (True, False):
        fn = lambda: outcome(lambda: flashjit.attention(q, k, v, out=buf[:, :5]))
        got = fn() if fast else via_operator(monkeypatch, fn)
        assert got[:2] == ("raised", ValueError) and "out overlaps k in memory" in got[2], got
        assert torch.equal(buf, before)


def test_out_next_to_q_takes_the_fast_path(gen, op_calls):
    """out right after q in one buffer, k longer than q: no overlap, so the
    fast path is taken (the spans must be matched to their operands, not
    k's span used for q)."""
    buf = torch.full((2 * 9 * 4 * 16 * 2,), SENTINEL)
    q = buf[:2 * 9 * 4 * 16].view(2, 9, 4, 16)
    q.copy_(uniform(gen, (2, 9, 4, 16)))
    out = buf[2 * 9 * 4 * 16:].view(2, 9, 4, 16)
    k, v = uniform(gen, (2, 13, 4, 16)), uniform(gen, (2, 13, 4, 16))  # k spans more than q
    for _ in range(2):  # the first call checks and caches, the second is the cached one
        got = flashjit.attention(q, k, v, out=out)
        assert got is out
    assert op_calls == [], "an out= call with no overlap went through the operator"
    oracle.check(out, None, q, k, v, None, (-1, -1), None)


@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_out_whose_padding_holds_an_input(gen, monkeypatch, name):
    """out with padded rows spans three times q's bytes; an input lying in
    the last third of out's span overlaps it: both paths refuse it with the
    same message, and nothing is written."""
    rows = {"q": 9, "k": 13, "v": 13}
    heads = {"q": 4, "k": 2, "v": 2}
    flat = torch.full((2 * 9 * 4 * 48,), SENTINEL)
    out = flat.view(2, 9, 4, 48)[..., :16]
    n = 2 * rows[name] * heads[name] * 16
    start = flat.numel() - n  # at the end of flat: inside out's extent, past q's span
    assert 2 * 9 * 4 * 16 < start < (2 * 9 * 4 - 1) * 48 + 16
    inside = flat[start:start + n].view(2, rows[name], heads[name], 16)
    inside.copy_(uniform(gen, inside.shape))
    ops = {"q": uniform(gen, (2, 9, 4, 16)), "k": uniform(gen, (2, 13, 2, 16)),
           "v": uniform(gen, (2, 13, 2, 16))}
    ops[name] = inside
    flashjit.attention(ops["q"], ops["k"], ops["v"],
                       out=torch.zeros(2, 9, 4, 48)[..., :16])  # the signature, cached
    before = flat.clone()
    results = []
    for fast in (True, False):
        fn = lambda: outcome(lambda: flashjit.attention(ops["q"], ops["k"], ops["v"], out=out))
        got = fn() if fast else via_operator(monkeypatch, fn)
        assert got[:2] == ("raised", ValueError), got
        assert "out overlaps %s in memory" % name in got[2], got
        assert torch.equal(flat, before), "a refused call wrote to out"
        results.append(got)
    assert results[0] == results[1]


def test_sdpa_errors_match_operator_path(gen, monkeypatch):
    q, k, v = (uniform(gen, (2, 4, s, 16)) for s in (5, 7, 7))
    flashjit.sdpa(q, k, v)
    flashjit.sdpa(q, k[:, :2], v[:, :2], enable_gqa=True)
    bad = [
        lambda: flashjit.sdpa(q, k, v, attn_mask=torch.ones(5, 7, dtype=torch.bool)),
        lambda: flashjit.sdpa(q, k, v, dropout_p=0.1),
        lambda: flashjit.sdpa(q, k, v, dropout_p="0"),
        lambda: flashjit.sdpa(q, k, v, is_causal=1),
        lambda: flashjit.sdpa(q, k, v, enable_gqa=1),
        lambda: flashjit.sdpa(q, k[:, :2], v[:, :2]),
        lambda: flashjit.sdpa(q[0], k[0], v[0]),
        lambda: flashjit.sdpa(q, k.half(), v),
        lambda: flashjit.sdpa(q, k, v, scale=0.0),
        lambda: flashjit.sdpa(q, k, v, scale=True),
        lambda: flashjit.sdpa(q.numpy(), k, v),
        lambda: flashjit.sdpa(q, k, v[:, :, :6]),
    ]
    for i, fn in enumerate(bad):
        fast = outcome(fn)
        slow = via_operator(monkeypatch, lambda: outcome(fn))
        assert fast[0] == "raised", "bad sdpa call %d passed" % i
        assert fast == slow, "bad sdpa call %d: %r vs %r" % (i, fast, slow)


def test_grad_and_subclasses_take_the_operator(gen, op_calls):
    q, k, v = make(gen)
    qg = q.clone().requires_grad_()
    out = flashjit.attention(qg, k, v)
    assert op_calls == ["attention_op"] and out.grad_fn is not None
    with pytest.raises(RuntimeError, match=r"flashjit computes the forward pass of attention only"):
        out.sum().backward()
    del op_calls[:]
    with torch.no_grad():  # nothing to track: fast
        assert_same_tensors(flashjit.attention(qg, k, v), out.detach(), "no_grad")
    with torch.inference_mode():
        assert_same_tensors(flashjit.attention(q, k, v), out.detach(), "inference_mode")
    assert op_calls == []
    p = torch.nn.Parameter(q.clone(), requires_grad=False)  # a subclass
    assert_same_tensors(flashjit.attention(p, k, v), out.detach(), "Parameter")
    assert op_calls == ["attention_op"]
    out_g = torch.zeros_like(q).requires_grad_()
    flashjit.attention(q, k, v, out=out_g)
    assert op_calls == ["attention_op", "attention_out_op"]
    assert torch.equal(out_g.detach(), out.detach())


def test_lazy_views_and_other_layouts_take_the_operator(gen, monkeypatch, op_calls):
    """Tensors whose memory is not their value (a negated view, the .imag of
    a conjugate view, a ZeroTensor) are materialized by the dispatcher for
    the operator: the fast path must not read their memory. Layouts other
    than strided fail as they always have."""
    q, k, v = make(gen, d=1)  # head_dim 1: .imag's stride-2 last axis is allowed
    want = flashjit.attention(q, -k, v)
    assert op_calls == []
    kn = torch._neg_view(k)
    z = torch.complex(torch.zeros_like(k), k)  # its conjugate's .imag: -k, lazily
    for name, kk in (("neg view", kn), ("imag of conj", z.conj().imag)):
        assert kk.is_neg(), name
        assert torch.equal(flashjit.attention(q, kk, v), want), name
    # A ZeroTensor has no memory (data_ptr 0); of one element its strides pass
    z1, k1, v1 = torch._efficientzerotensor((1, 1, 1, 1)), k[:1, :, :1], v[:1, :, :1]
    assert torch.equal(flashjit.attention(z1, k1, v1),
                       flashjit.attention(torch.zeros(1, 1, 1, 1), k1, v1))
    assert op_calls == ["attention_op"] * 3
    zeros = torch._efficientzerotensor(q.shape)  # refused (all-zero strides), as always
    for x in (zeros, k.to_sparse()):
        args = (zeros, k, v) if x is zeros else (q, x, v)
        fast = outcome(lambda: flashjit.attention(*args))
        slow = via_operator(monkeypatch, lambda: outcome(lambda: flashjit.attention(*args)))
        assert fast[0] == "raised" and fast == slow, (fast, slow)


def test_profiler_shows_the_call(gen, monkeypatch, op_calls):
    """Under torch.profiler the fast path's call is a record under the
    operator's name, as the operator's call is."""
    q, k, v = make(gen)
    out = torch.empty_like(q)
    names = []
    for fast in (True, False):
        def run():
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
                flashjit.attention(q, k, v)
                flashjit.attention(q, k, v, out=out)
                flashjit.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                              enable_gqa=True)
            return [e.name for e in p.events() if e.name.startswith("flashjit::")]
        names.append(run() if fast else via_operator(monkeypatch, run))
    assert op_calls == ["attention_op", "attention_out_op", "attention_op"]  # operator path only
    assert names[0] == ["flashjit::attention", "flashjit::attention_out", "flashjit::attention"]
    assert set(names[0]) <= set(names[1]), names


def test_modes_see_the_operator(gen, op_calls):
    """A torch function or dispatch mode active: the call goes through the
    operator, so the mode sees flashjit::attention."""
    q, k, v = make(gen)
    want = flashjit.attention(q, k, v)
    assert op_calls == []
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Record():
        got = flashjit.attention(q, k, v)
    assert torch.ops.flashjit.attention.default in seen
    assert_same_tensors(got, want, "dispatch mode")

    class Nothing(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Nothing():
        assert_same_tensors(flashjit.attention(q, k, v), want, "function mode")
    with torch.device("cpu"):  # a TorchFunctionMode too
        assert_same_tensors(flashjit.sdpa(q.transpose(1, 2), k.transpose(1, 2),
                                          v.transpose(1, 2), enable_gqa=True).transpose(1, 2),
                            want, "torch.device")
    assert op_calls == ["attention_op"] * 3


@pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")
def test_functorch_transforms_take_the_operator(gen, op_calls):
    """Under vmap the tensors are plain torch.Tensor to Python, but batched:
    the call goes through the operator (torch's per-sample fallback)."""
    q, k, v = make(gen)
    qs = torch.stack([q, q.flip(1)])
    got = torch.func.vmap(lambda a: flashjit.attention(a, k, v))(qs)
    assert op_calls == ["attention_op"]  # (torch's fallback then runs the kernel per sample)
    for i in range(2):
        assert torch.equal(got[i], flashjit.attention(qs[i], k, v)), "vmap sample %d" % i


def test_compile_traces_the_operator(gen, op_calls):
    """Under torch.compile the call is traced as the operator (one node of
    the graph), never as the fast path's ctypes call."""
    q, k, v = make(gen)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(q, k, v):
        a = flashjit.attention(q, k, v, causal="bottom-right", return_lse=True)
        b = flashjit.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                          enable_gqa=True)
        return a[0] + b.transpose(1, 2), a[1]

    torch._dynamo.reset()
    got = torch.compile(fn, backend=backend, fullgraph=True)(q, k, v)
    targets = [n.target for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.flashjit.attention.default) == 2, targets
    del op_calls[:]
    want = fn(q, k, v)
    assert op_calls == []  # eager: fast
    assert_same_tensors(got, want, "compiled")


@pytest.mark.cuda
def test_cuda_fast_path(gen, monkeypatch, op_calls):
    q, k, v = make(gen, 1, 32, 8, 1, 4099, 128, torch.bfloat16, "cuda")
    fast = flashjit.attention(q, k, v, return_lse=True)
    assert op_calls == []
    slow = via_operator(monkeypatch, lambda: flashjit.attention(q, k, v, return_lse=True))
    assert_same_tensors(fast, slow, "cuda decode")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # the side stream's work: ordered after q's writes
        side.wait_stream(torch.cuda.current_stream())
        out_side = flashjit.attention(q, k, v)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(out_side, fast[0])
    # a signature seen before, misaligned pointers: the operator's message
    flat = torch.zeros(q.numel() + 8, dtype=q.dtype, device="cuda")
    flashjit.attention(flat[:q.numel()].view(q.shape), k, v)
    shifted = flat[1:q.numel() + 1].view(q.shape)
    results = [outcome(lambda: flashjit.attention(shifted, k, v)),
               via_operator(monkeypatch, lambda: outcome(lambda: flashjit.attention(shifted, k,
                                                                                     v)))]
    assert results[0][0] == "raised" and results[0] == results[1]
    assert "is not 16-byte aligned" in results[0][2]
