#!/usr/bin/env python3
"""Writes the hand-made seeds of tests/fuzz/corpus: attention descriptors in
fuzz_attention.c's byte order, and cache edits in fuzz_cache.c's. (The
tuning seeds are text files, the cubin seeds tiny nvcc cubins, the raw cache
seeds files written by fj_cache_store: see tests/fuzz/README.md.)

    python3 tests/fuzz/seeds.py        # rewrites corpus/attention/seed-* and corpus/cache/edit-*
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def u8(v):
    return struct.pack("<B", v & 0xFF)


def u16(v):
    return struct.pack("<H", v & 0xFFFF)


def u32(v):
    return struct.pack("<I", v & 0xFFFFFFFF)


def u64(v):
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def rng_range(lo, hi, v):
    """The u32 that fuzz_range(lo, hi) maps to v."""
    return u32(v - lo)


GROUPS = [1, 2, 3, 4, 5, 8]


def execution(flags, hkv, group, batch, sq, sk, dim, dtype, causal, wl, wr, scale_kind,
              scale_arg, layout, layout_arg=b"", seed=12345, tail=b"", softcap=b"", features=b"",
              dim_v=None):
    # softcap: with flags bit 5, its kind byte and value (read after the scale)
    # features: with flags bit 4, one byte (% 3: alibi, sinks, both), after the softcap
    # dim_v: with flags bit 3 (not bit 2), V's head dim, after the features
    b = u8(flags)
    b += rng_range(1, 3, hkv)
    b += rng_range(1, 3, batch)
    b += u8(GROUPS.index(group))
    max_seq = 300 if flags & 1 else 40
    b += rng_range(1, max_seq, sq) + rng_range(1, max_seq, sk)
    b += rng_range(1, 256, dim) + u8(dtype) + u8(causal)
    b += (u8(0) if wl == -1 else u8(200) + rng_range(-2, max_seq + 8, wl))
    b += (u8(0) if wr == -1 else u8(200) + rng_range(-2, max_seq + 8, wr))
    b += u8(scale_kind) + scale_arg + softcap + features
    if dim_v is not None:
        assert flags & 0x0C == 0x08
        b += rng_range(1, 576, dim_v)
    b += u8(layout) + layout_arg
    b += u64(seed) + tail
    return b


def attention_seeds():
    s = {}
    # dtype 0 f32, 1 f16, 2 bf16; causal 0 none, 1 bottom-right, 2 top-left
    s["dense-f32"] = execution(0, 2, 2, 2, 17, 23, 64, 0, 0, -1, -1, 0, b"", 0)
    s["causal-br-empty-rows-bf16"] = execution(0, 1, 1, 1, 33, 9, 40, 2, 1, -1, -1, 0, b"", 0)
    s["causal-tl-f16"] = execution(0, 1, 3, 1, 20, 30, 8, 1, 2, -1, -1, 1, u32(400 + 150), 0)
    s["window-both-f32"] = execution(0, 1, 1, 2, 31, 31, 16, 0, 0, 3, 2, 0, b"", 0)
    s["decode-gqa8-bf16"] = execution(1, 1, 8, 1, 1, 300, 128, 2, 0, -1, -1, 0, b"", 0)
    s["bhsd-f16"] = execution(0, 1, 4, 2, 12, 19, 32, 1, 1, -1, -1, 0, b"", 1)
    s["padded-f32"] = execution(0, 3, 1, 1, 9, 40, 24, 0, 0, -1, 5, 0, b"", 2, u32(3))
    s["kv-broadcast-bf16"] = execution(0, 1, 2, 3, 7, 13, 96, 2, 0, -1, -1, 0, b"", 3)
    s["q-broadcast-f32"] = execution(0, 2, 1, 2, 5, 11, 80, 0, 1, -1, -1, 0, b"", 4)
    s["head-dim-1-f32"] = execution(0, 1, 1, 1, 40, 40, 1, 0, 0, -1, -1, 0, b"", 0)
    s["head-dim-256-bf16"] = execution(0, 1, 1, 1, 8, 40, 256, 2, 1, -1, -1, 0, b"", 0)
    s["negative-scale-f32"] = execution(0, 1, 1, 1, 16, 16, 64, 0, 0, -1, -1, 1, u32(400 - 250), 0)
    s["denormal-scale-f16"] = execution(0, 1, 1, 1, 16, 16, 64, 1, 0, -1, -1, 2, u32(140), 0)
    s["no-lse-f32"] = execution(2, 1, 2, 1, 21, 35, 48, 0, 2, 4, -1, 0, b"", 0)
    s["long-keys-f32"] = execution(1, 1, 1, 1, 3, 300, 64, 0, 0, -1, -1, 0, b"", 0)
    # raw strides: twelve u16 (invalid or overlapping ones are refused)
    raw = b"".join(u16(v + 2) for v in [1024, 64, 64, 0, 64, 64, 2048, 64, 64, 1024, 64, 64])
    s["raw-strides-f32"] = execution(0, 1, 1, 1, 16, 16, 64, 0, 0, -1, -1, 0, b"", 5, raw)
    # non-finite sprinkles: count, then (tensor, index, kind) each; kind 0 NaN, 1 +inf, 2 -inf
    sprinkle = rng_range(1, 6, 2) + u8(0) + u32(100) + u8(0) + u8(1) + u32(77) + u8(1)
    s["nonfinite-causal-bf16"] = execution(0x40, 1, 2, 1, 30, 20, 64, 2, 1, -1, -1, 0, b"", 0,
                                           tail=sprinkle)
    sprinkle = (rng_range(1, 6, 3) + u8(1) + u32(5) + u8(2) + u8(2) + u32(9) + u8(0) + u8(0) +
                u32(1) + u8(1))
    s["nonfinite-window-f32"] = execution(0x40, 1, 1, 1, 24, 24, 16, 0, 0, 2, 0, 0, b"", 0,
                                          tail=sprinkle)
    # softcap (flags bit 5): kind 0 hundredths 1..1000, 1 integer 1..100,
    # 2 2^-n, 3 raw float bits
    s["softcap-causal-bf16"] = execution(0x20, 2, 2, 1, 33, 37, 64, 2, 1, -1, -1, 1, u32(400 + 200),
                                         0, softcap=u8(0) + rng_range(1, 1000, 250))
    s["softcap-window-f32"] = execution(0x21, 1, 3, 1, 60, 100, 16, 0, 0, 17, 3, 0, b"", 1,
                                        softcap=u8(1) + rng_range(1, 100, 30))
    s["softcap-decode-f16"] = execution(0x21, 1, 8, 1, 2, 300, 64, 1, 1, -1, -1, 1, u32(400 + 300),
                                        0, softcap=u8(0) + rng_range(1, 1000, 5))
    s["softcap-negative"] = execution(0x20, 1, 1, 1, 8, 8, 16, 0, 0, -1, -1, 0, b"", 0,
                                      softcap=u8(3) + u32(0xBF800000))
    sprinkle = rng_range(1, 6, 2) + u8(1) + u32(40) + u8(1) + u8(1) + u32(3) + u8(0)
    s["softcap-nonfinite-f32"] = execution(0x60, 1, 1, 1, 10, 12, 8, 0, 0, -1, -1, 0, b"", 0,
                                           tail=sprinkle, softcap=u8(1) + rng_range(1, 100, 2))
    # validation mode: raw sizes (kind byte, then the value's bytes)
    def size(kind, v):
        return u8(kind) + (rng_range(-2, 300, v) if kind == 0 else
                           rng_range(0, 4200, v) if kind == 1 else
                           rng_range(0, 30, v) if kind == 2 else u32(v))
    s["valid-int-max-seqlen"] = (u8(0x80) + size(0, 1) + size(0, 1) + size(0, 1) + size(1, 0) +
                                 size(0, 4) + size(0, 8) + u8(2) + u8(0) + u32(1) + u8(0) +
                                 u8(0) + u8(0) * 4)
    s["valid-int-max-heads"] = (u8(0x80) + size(0, 1) + size(1, 0) + size(0, 1) + size(0, 1) +
                                size(0, 4) + size(0, 8) + u8(2) + u8(0) + u32(1) + u8(0) +
                                u8(0) + u8(0) * 4)
    s["overflowing-dense"] = (u8(0x80) + size(0, 2) + size(2, 25) + size(2, 25) + size(1, 0) +
                              size(0, 8) + size(0, 256) + u8(2) + u8(0) + u32(1) + u8(0) +
                              u8(0) + u8(0) * 4)
    s["nan-scale"] = (u8(0x80) + size(0, 1) * 3 + size(0, 8) * 2 + size(0, 64) + u8(0) + u8(0) +
                      u32(1) + u8(0) + u8(200) + u32(0x7FC00000) + u8(0) * 4)
    s["huge-scale"] = (u8(0x80) + size(0, 1) * 3 + size(0, 8) * 2 + size(0, 64) + u8(0) + u8(0) +
                       u32(1) + u8(0) + u8(200) + u32(0x7F7FFFFF) + u8(0) * 4)
    s["nan-softcap"] = (u8(0xA0) + size(0, 1) * 3 + size(0, 8) * 2 + size(0, 64) + u8(0) + u8(0) +
                        u32(1) + u8(0) + u8(0) + u32(0x7FC00000) + u8(0) * 4)
    s["tiny-softcap"] = (u8(0xA0) + size(0, 1) * 3 + size(0, 8) * 2 + size(0, 64) + u8(0) + u8(0) +
                         u32(1) + u8(0) + u8(0) + u32(0x00000001) + u8(0) * 4)
    # ALiBi and sinks (flags bit 4): 0 alibi, 1 sinks, 2 both
    s["alibi-causal-bf16"] = execution(0x10, 2, 2, 1, 33, 37, 64, 2, 1, -1, -1, 1, u32(400 + 200),
                                       0, features=u8(0))
    s["sinks-empty-rows-f16"] = execution(0x11, 1, 4, 1, 90, 30, 32, 1, 1, -1, -1, 0, b"", 1,
                                          features=u8(1))
    s["alibi-sinks-window-f32"] = execution(0x11, 1, 3, 1, 60, 100, 16, 0, 2, 17, 3, 0, b"", 0,
                                            features=u8(2))
    s["alibi-sinks-softcap-decode-f32"] = execution(0x31, 2, 4, 1, 3, 280, 40, 0, 1, -1, -1, 0,
                                                    b"", 0, softcap=u8(1) + rng_range(1, 100, 30),
                                                    features=u8(2))
    s["unknown-features"] = (u8(0x90) + size(0, 1) * 3 + size(0, 8) * 2 + size(0, 64) + u8(0) +
                             u8(0) + u32(1) + u8(0) + u8(0) + u32(0x11) + u8(0) * 4)
    # a paged KV cache (features bit 3): the page fields after the strides
    # (page_size 16, num_pages 9, max_pages 3, block_table_stride 0), then
    # a page size past INT_MAX - 4200 with a table row shorter than max_pages
    s["paged-valid"] = (u8(0x90) + size(0, 2) + size(0, 4) + size(0, 2) + size(0, 3) +
                        size(0, 40) + size(0, 64) + u8(1) + u8(1) + u32(1) + u8(0) + u8(0) +
                        u32(0xC) + u8(0) * 4 + size(0, 16) + size(0, 9) + size(0, 3) + u8(0))
    s["paged-huge-page"] = (u8(0x90) + size(0, 1) * 3 + size(0, 8) * 2 + size(0, 64) + u8(0) +
                            u8(0) + u32(1) + u8(0) + u8(0) + u32(0x8) + u8(0) * 4 + size(1, 0) +
                            size(2, 20) + size(0, 5) + u8(200) + size(0, 2))
    # V's own head dim (flags bit 3 without bit 2): execution draws it after
    # the features; validation reads it raw, last
    s["vdim-mla-decode-bf16"] = execution(0x09, 1, 8, 1, 1, 60, 576, 2, 0, -1, -1, 0, b"", 0,
                                          dim_v=512)
    s["vdim-wider-padded-f32"] = execution(0x08, 1, 2, 1, 33, 37, 16, 0, 1, -1, -1, 0, b"", 2,
                                           u32(3), dim_v=40)
    s["vdim-narrower-bhsd-f16"] = execution(0x08, 2, 2, 1, 12, 19, 64, 1, 2, -1, -1, 0, b"", 1,
                                            dim_v=8)
    s["vdim-kv-broadcast-bf16"] = execution(0x08, 1, 2, 3, 7, 13, 96, 2, 0, -1, -1, 0, b"", 3,
                                            dim_v=33)
    s["vdim-softcap-sinks-f32"] = execution(0x39, 1, 3, 1, 60, 100, 16, 0, 2, 17, 3, 0, b"", 0,
                                            softcap=u8(1) + rng_range(1, 100, 30),
                                            features=u8(2), dim_v=5)
    sprinkle = rng_range(1, 6, 2) + u8(2) + u32(40) + u8(0) + u8(1) + u32(3) + u8(1)
    s["vdim-nonfinite-f32"] = execution(0x48, 1, 1, 1, 10, 12, 8, 0, 1, -1, -1, 0, b"", 0,
                                        tail=sprinkle, dim_v=24)
    plain = (size(0, 1) * 3 + size(0, 8) * 2 + size(0, 64) + u8(0) + u8(0) + u32(1) + u8(0) +
             u8(0) + u8(0) * 4)
    s["vdim-valid"] = u8(0x88) + plain + size(0, 40)
    s["vdim-negative"] = u8(0x88) + plain + size(0, -2)
    s["vdim-past-max"] = u8(0x88) + plain + size(3, 577)
    return s


def cache_edit_seeds():
    s = {}
    payload = bytes(range(256)) * 2
    def edit(ops):
        return u8(1) + u16(len(payload)) + payload + u8(len(ops)) + b"".join(ops)
    s["edit-none"] = edit([])
    s["edit-flip-header"] = edit([u8(0) + u32(30) + u8(3)])
    s["edit-flip-payload"] = edit([u8(0) + u32(400) + u8(7)])
    s["edit-truncate"] = edit([u8(2) + u32(100)])
    s["edit-append"] = edit([u8(3) + u32(0) + u8(5) + b"abcde"])
    s["edit-name-length"] = edit([u8(4) + u32(0) + u8(10) + u32(300)])
    s["edit-payload-size"] = edit([u8(4) + u32(0) + u8(6) + u32(1)])
    s["edit-empty-payload"] = u8(1) + u16(0) + u8(0)
    return s


def write(sub, seeds):
    d = os.path.join(HERE, "corpus", sub)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("attention", attention_seeds())
    write("cache", cache_edit_seeds())
