#!/usr/bin/env python3
"""The problem key (include/flashjit.h, "Problem keys") and the grids of
tools/grids/ for the Python tools (compare_torch.py, dev/decode_timeline.py),
so they name and list problems exactly as `flashjit bench` does:

    b<batch>.hq<heads_q>.hkv<heads_kv>.sq<seqlen_q>.sk<seqlen_k>.d<head_dim>.<dtype>.<mask>
    b4.hq16.hkv4.sq4096.sk4096.d128.bf16.causal_br

<mask>: "nomask", or causal_br|causal_tl, wl<N>, wr<N> in that order, each at
most once; then, with a softcap, sc<value> (the shortest decimal that reads
back as the same float32, 'p' for the point: sc50, sc2p5, sc1e-05); then
"alibi", "sinks", "varlen" and "paged<page_size>" (FJ_FEATURE_ALIBI,
FJ_FEATURE_SINKS, FJ_FEATURE_VARLEN, FJ_FEATURE_PAGED_KV with its page size),
in that order, each at most once; last, only where V's head dim differs from
head_dim, "dv<head_dim_v>" (fj_attention_desc.head_dim_v). The C library's fj_problem_key_parse is the
definition; this reader follows it, and `problem_key.py --check
path/to/flashjit` (a meson test) compares the two on every grid and on a grid
of keys with every tail field: the keys this module lists for a grid must be
those `flashjit bench --grid NAME --list` prints, and the keys it refuses
must be those flashjit refuses.

usage: problem_key.py --check FLASHJIT   (exit 0 when C and Python agree)
"""
import collections
import math
import os
import struct
import subprocess
import sys

GRIDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grids")
INT_MAX = 2**31 - 1
MAX_HEAD_DIM = 576  # FJ_MAX_HEAD_DIM
DTYPES = ("f32", "f16", "bf16")

Problem = collections.namedtuple(
    "Problem",
    "batch heads_q heads_kv seqlen_q seqlen_k head_dim dtype causal window_left window_right softcap alibi "
    "sinks varlen page_size head_dim_v")
# page_size 0: not paged; head_dim_v 0: the same as head_dim (the key has no dv field)
Problem.__new__.__defaults__ = ("none", -1, -1, 0.0, False, False, False, 0, 0)


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def softcap_text(v):
    """src/problem_key.c's softcap_text: the fewest decimals in [1e-4, 1e9), else
    the fewest significant digits in exponent form; '.' written 'p'."""
    text = None
    if 1e-4 <= v < 1e9:
        for k in range(17):
            if _f32(float("%.*f" % (k, v))) == v:
                text = "%.*f" % (k, v)
                break
    if text is None:
        for k in range(9):
            if _f32(float("%.*e" % (k, v))) == v:
                text = "%.*e" % (k, v)
                break
    return text.replace(".", "p")


def _softcap(field):
    t = field[2:]
    try:
        v = _f32(float(t.replace("p", "."))) if field.startswith("sc") and "." not in t else None
    except ValueError:
        v = None
    if v is None or not (v > 0) or math.isinf(v) or softcap_text(v) != t:
        raise ValueError("field '%s' is not sc<softcap>" % field)
    return v


def format_key(p):
    """The key of a Problem (causal: "none", "bottom-right" or "top-left")."""
    mask = []
    if p.causal != "none":
        mask.append("causal_br" if p.causal == "bottom-right" else "causal_tl")
    if p.window_left >= 0:
        mask.append("wl%d" % p.window_left)
    if p.window_right >= 0:
        mask.append("wr%d" % p.window_right)
    return "b%d.hq%d.hkv%d.sq%d.sk%d.d%d.%s.%s%s%s%s%s%s%s" % (
        p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim, p.dtype,
        ".".join(mask) or "nomask", ".sc" + softcap_text(p.softcap) if p.softcap > 0 else "",
        ".alibi" if p.alibi else "", ".sinks" if p.sinks else "", ".varlen" if p.varlen else "",
        ".paged%d" % p.page_size if p.page_size else "",
        ".dv%d" % p.head_dim_v if p.head_dim_v and p.head_dim_v != p.head_dim else "")


def _number(field, prefix, what):
    digits = field[len(prefix):]
    if (not field.startswith(prefix) or not digits.isdigit() or not digits.isascii() or
            (digits[0] == "0" and len(digits) > 1) or int(digits) > INT_MAX):
        raise ValueError("field '%s' is not %s<%s>" % (field, prefix, what))
    return int(digits)


def parse_key(key):
    """The Problem a key names; ValueError for anything fj_problem_key_parse refuses."""
    fields = key.split(".")
    if len(fields) < 8:
        raise ValueError("problem key '%s' has %d fields, not 8 or more" % (key, len(fields)))
    names = (("b", "batch"), ("hq", "heads_q"), ("hkv", "heads_kv"), ("sq", "seqlen_q"),
             ("sk", "seqlen_k"), ("d", "head_dim"))
    try:
        n = [_number(f, prefix, what) for f, (prefix, what) in zip(fields, names)]
        if fields[6] not in DTYPES:
            raise ValueError("field '%s' is not a dtype" % fields[6])
        causal, wl, wr, cap = "none", -1, -1, 0.0
        mask = fields[7:]
        page_size = head_dim_v = 0
        if len(mask) > 1 and mask[-1].startswith("dv"):
            head_dim_v = _number(mask.pop(), "dv", "head_dim_v")
            if not 1 <= head_dim_v <= MAX_HEAD_DIM or head_dim_v == n[5]:
                raise ValueError("field 'dv%d' is not dv<head_dim_v> with head_dim_v in 1..%d and "
                                 "not %d" % (head_dim_v, MAX_HEAD_DIM, n[5]))
        if len(mask) > 1 and mask[-1].startswith("paged"):
            page_size = _number(mask.pop(), "paged", "page_size")
            if page_size < 1:
                raise ValueError("field 'paged0' is not paged<page_size> with page_size >= 1")
        varlen = len(mask) > 1 and mask[-1] == "varlen"
        if varlen:
            mask.pop()
        sinks = len(mask) > 1 and mask[-1] == "sinks"
        if sinks:
            mask.pop()
        alibi = len(mask) > 1 and mask[-1] == "alibi"
        if alibi:
            mask.pop()
        if len(mask) > 1 and mask[-1].startswith("sc"):
            cap = _softcap(mask.pop())
        if mask == ["nomask"]:
            pass
        else:
            stage = 0
            for f in mask:
                if stage < 1 and f in ("causal_br", "causal_tl"):
                    causal, stage = ("bottom-right" if f == "causal_br" else "top-left"), 1
                elif stage < 2 and f.startswith("wl"):
                    wl, stage = _number(f, "wl", "window_left"), 2
                elif stage < 3 and f.startswith("wr"):
                    wr, stage = _number(f, "wr", "window_right"), 3
                else:
                    raise ValueError("field '%s' is not the next mask field" % f)
    except ValueError as e:
        raise ValueError("problem key '%s': %s" % (key, e)) from None
    p = Problem(*n, fields[6], causal, wl, wr, cap, alibi, sinks, varlen, page_size, head_dim_v)
    if page_size and p.batch * -(-p.seqlen_k // page_size) > INT_MAX:
        raise ValueError("problem key '%s': its pools would need batch x ceil(sk / %d) pages, "
                         "more than num_pages (an int) holds" % (key, page_size))
    if min(n) < 1 or p.head_dim > MAX_HEAD_DIM or p.heads_q % p.heads_kv:
        raise ValueError("problem key '%s' breaks a rule of the desc (sizes >= 1, head_dim <= %d, "
                         "heads_q a multiple of heads_kv)" % (key, MAX_HEAD_DIM))
    return p


def read_grid(name, depth=0):
    """The Problems of tools/grids/<name>.txt (or of a path with a '/'), '@name'
    lines expanded in place."""
    if depth > 8:
        raise ValueError("grid '@%s' nests more than 8 deep" % name)
    path = name if "/" in name else os.path.join(GRIDS, name + ".txt")
    if not os.path.exists(path):
        known = sorted(f[:-4] for f in os.listdir(GRIDS) if f.endswith(".txt"))
        raise ValueError("'%s' is not a grid (%s; or a file path with a '/')" % (name, ", ".join(known)))
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("@"):
                rows += read_grid(line[1:], depth + 1)
                continue
            try:
                rows.append(parse_key(line))
            except ValueError as e:
                raise ValueError("%s:%d: %s" % (path, lineno, e)) from None
    return rows


def shapes_and_dtypes(rows):
    """A grid's distinct shapes (dtype left out) and its dtypes, each in order of
    first appearance: a benchmark runs every shape in every dtype."""
    shapes, dtypes = [], []
    for p in rows:
        s = p._replace(dtype="f32")
        if s not in shapes:
            shapes.append(s)
        if p.dtype not in dtypes:
            dtypes.append(p.dtype)
    return shapes, dtypes


def bench_keys(name, dtypes=None):
    """The keys `flashjit bench --grid name [--dtypes ...] --list` prints, in order."""
    shapes, grid_dtypes = shapes_and_dtypes(read_grid(name))
    return [format_key(s._replace(dtype=t)) for t in (dtypes or grid_dtypes) for s in shapes]


def check(flashjit):
    """Every grid listed by C and by Python alike; 0 when they agree."""
    bad = 0
    for f in sorted(os.listdir(GRIDS)):
        if not f.endswith(".txt"):
            continue
        name = f[:-4]
        for p in read_grid(name):  # each line is canonical: it prints back as written
            assert parse_key(format_key(p)) == p
        with open(os.path.join(GRIDS, f), encoding="utf-8") as fh:
            for line in fh:
                line = line.split("#", 1)[0].strip()
                if line and not line.startswith("@") and format_key(parse_key(line)) != line:
                    print("%s: '%s' is not canonical" % (f, line))
                    bad += 1
        before = bad
        for dtypes in (None, ["f32"]):
            args = [flashjit, "bench", "--grid", name, "--list"] + (["--dtypes", "f32"] if dtypes else [])
            c = subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()
            py = bench_keys(name, dtypes)
            if c != py:
                print("grid %s%s: flashjit lists %d keys, Python %d; first difference: %s" % (
                    name, " --dtypes f32" if dtypes else "", len(c), len(py),
                    next(((a, b) for a, b in zip(c, py) if a != b), "(length)")))
                bad += 1
        if bad == before:
            print("grid %-12s %3d rows, C and Python agree" % (name, len(read_grid(name))))
    bad += check_tail_fields(flashjit)
    return 1 if bad else 0


# Keys with every tail field, in each combination the grammar allows.
GOOD_KEYS = (
    "b2.hq4.hkv2.sq1.sk100.d64.bf16.nomask.paged16",
    "b16.hq32.hkv8.sq1.sk8192.d128.bf16.causal_br.paged16",
    "b3.hq4.hkv2.sq20.sk50.d64.f16.causal_br.sinks.varlen.paged7",
    "b1.hq8.hkv8.sq512.sk512.d128.f32.causal_tl.wl64.wr0.sc2p5.alibi.sinks.varlen.paged1",
    "b1.hq2.hkv2.sq1.sk1.d8.f32.wr3.sc50.paged2147483647",
    "b2.hq4.hkv2.sq20.sk50.d64.f16.nomask.varlen",
    "b2.hq4.hkv2.sq20.sk50.d64.f16.causal_br.alibi.paged64",
    "b1.hq4.hkv2.sq3.sk300.d512.bf16.causal_br",
    "b1.hq4.hkv2.sq2.sk300.d576.bf16.causal_br",
    "b1.hq2.hkv1.sq1.sk9.d257.f32.nomask",
    "b1.hq16.hkv1.sq1.sk4096.d576.bf16.causal_br.dv512",
    "b2.hq16.hkv16.sq512.sk512.d192.bf16.causal_br.dv128",
    "b1.hq8.hkv8.sq1.sk64.d1.f32.nomask.dv576",
    "b3.hq4.hkv2.sq20.sk50.d64.f16.causal_br.sc50.alibi.sinks.varlen.paged7.dv33",
    "b2.hq4.hkv2.sq1.sk100.d576.bf16.nomask.paged16.dv512",
)
BAD_KEYS = (
    "b01.hq1.hkv1.sq1.sk1.d8.f32.nomask", "b1.hq1.hkv1.sq1.sk1.d8.f32.wl1.causal_br",
    "b1.hq1.hkv1.sq1.sk1.d8.f32.nomask.wl1", "b1.hq2.hkv3.sq1.sk1.d8.f32.nomask",
    "b1.hq1.hkv1.sq1.sk1.d8.fp16.nomask", "b1.hq1.hkv1.sq1.sk1.d8.f32",
    "b1.hq1.hkv1.sq1.sk1.d8.f32.sc50", "b1.hq1.hkv1.sq1.sk1.d8.f32.nomask.sc50p0",
    "b1.hq1.hkv1.sq1.sk1.d8.f32.nomask.sc5e+01", "b1.hq1.hkv1.sq1.sk1.d8.f32.nomask.sc0",
    "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged0", "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged016",
    "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged", "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged-4",
    "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged16.varlen",
    "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged16.paged16",
    "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged16.sinks",
    "b1.hq8.hkv8.sq1.sk4.d64.bf16.paged16", "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged16.",
    "b100000.hq8.hkv8.sq1.sk2147483647.d64.bf16.nomask.paged1",
    "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged2147483648",
    "b1.hq8.hkv8.sq1.sk4.d577.bf16.nomask",
    "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv64", "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv0",
    "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv577", "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv032",
    "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv32.paged16",
    "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv32.dv32", "b1.hq8.hkv8.sq1.sk4.d64.bf16.dv32",
    "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv", "b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv32.",
)


def check_tail_fields(flashjit):
    """GOOD_KEYS read and printed back alike by C and Python (a grid file of
    them through `flashjit bench --list`); each of BAD_KEYS refused by both."""
    import tempfile
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        grid = os.path.join(tmp, "tails.txt")
        with open(grid, "w", encoding="utf-8") as f:
            f.write("\n".join(GOOD_KEYS) + "\n")
        c = subprocess.run([flashjit, "bench", "--grid", grid, "--list"], capture_output=True,
                           text=True, check=True).stdout.split()
        py = bench_keys(grid)
        if c != py:
            print("tail fields: flashjit lists %s, Python %s" % (c, py))
            bad += 1
        for key in GOOD_KEYS:
            if format_key(parse_key(key)) != key:
                print("'%s' does not print back as written" % key)
                bad += 1
        for key in BAD_KEYS:
            try:
                parse_key(key)
                print("'%s' parsed" % key)
                bad += 1
            except ValueError:
                pass
            with open(grid, "w", encoding="utf-8") as f:
                f.write(key + "\n")
            r = subprocess.run([flashjit, "bench", "--grid", grid, "--list"], capture_output=True,
                               text=True)
            if r.returncode != 2 or "problem key" not in r.stderr:
                print("'%s': flashjit bench --list exits %d: %s" % (key, r.returncode,
                                                                    r.stderr.strip()))
                bad += 1
    if not bad:
        print("tail fields: %d keys read alike, %d refused by both" % (len(GOOD_KEYS), len(BAD_KEYS)))
    return bad


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--check":
        sys.exit(__doc__)
    sys.exit(check(sys.argv[2]))
