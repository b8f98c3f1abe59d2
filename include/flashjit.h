/*
 * flashjit: the forward pass of scaled dot-product attention,
 *
 *     O = softmax(scale * Q K^T + mask) V
 *
 * computed by a CUDA kernel generated for the exact problem (compiled at run
 * time with NVRTC, cached on disk) when an NVIDIA GPU is usable, and on the CPU
 * (OpenBLAS) otherwise. One application binary runs on both.
 *
 * This header is the whole public API and its documentation.
 *
 * Usage in three steps, FFTW style:
 *
 *     fj_context *ctx;  fj_context_create(NULL, &ctx);       // once
 *     fj_attention_desc d;
 *     fj_attention_desc_init(&d, batch, hq, hkv, sq, sk, 128, FJ_BF16);
 *     d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
 *     fj_plan *plan;  fj_plan_create(ctx, &d, &plan);          // once per shape
 *     fj_plan_execute(plan, q, k, v, o, lse, stream);          // many times
 *
 * Every function that can fail returns an fj_status; on failure,
 * fj_last_error() gives this thread's detail (which field, which rule).
 * The library never prints. FLASHJIT_LOG=info|debug, or fj_set_log_callback,
 * turns on messages (cache HIT/MISS/SAVE, compile times, backend choice).
 *
 * Ownership and thread safety, one sentence per object:
 *  - fj_context: owned by the caller from fj_context_create to
 *    fj_context_destroy; every function taking a context may be called from
 *    any number of threads at once, except fj_context_destroy, which must be
 *    the last call on it (destroy its plans first).
 *  - fj_plan: owned by the caller from fj_plan_create to fj_plan_destroy; it is
 *    immutable, so fj_plan_execute and fj_plan_describe may run concurrently
 *    from any threads; it must not outlive its context. One exception on the
 *    device side: a CUDA plan that owns device memory its kernels write
 *    (a plan that splits its keys, for few query rows over many keys, keeps
 *    the partial results there, its describe text's "split-KV:" line says;
 *    the persistent sm_90 kernel keeps the counter its blocks take work
 *    tiles from, its "schedule:" line says) must not have executes that
 *    overlap on the GPU: issue them on one stream (from any threads), or
 *    create one plan per stream (each has its own), as with a cuBLAS
 *    workspace.
 *  - a context's tuning (the entries plans look their tiles up in: its tuning
 *    file's, those imported, those measured) belongs to the context; it only
 *    grows, under a lock, so fj_tuning_import*, fj_tuning_export* and plan
 *    creation (measuring or not) may run concurrently from any threads.
 *  - strings returned by the library (describe, status names, last error) are
 *    owned by the library: describe strings live as long as their object,
 *    status names forever, fj_last_error until this thread's next call. The
 *    one exception, fj_tuning_export's text, is the caller's to free().
 *  - tensors and streams are the caller's; the library never frees them.
 */
#ifndef FLASHJIT_H
#define FLASHJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FLASHJIT_BUILDING) && defined(__GNUC__)
#define FJ_API __attribute__((visibility("default")))
#else
#define FJ_API
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */

/* Versions and the ABI. MAJOR.MINOR.PATCH, bumped by these rules:
 *  - MAJOR: a change that can break a program built against an earlier
 *    header of the same MAJOR: a function removed or its signature changed,
 *    a struct's size or a field's offset or meaning changed, an enum value
 *    renumbered. The shared library's soname is libflashjit.so.MAJOR and its
 *    symbols carry the version node FLASHJIT_MAJOR, so an old program never
 *    loads an incompatible library.
 *  - MINOR: compatible additions: a function (exported under a new node
 *    FLASHJIT_MAJOR.MINOR), an enum value appended, a field given meaning in
 *    a struct's reserved room (zero keeps the earlier behaviour).
 *  - PATCH: fixes that change no declaration.
 * A program built against MAJOR.m runs with any library MAJOR.n, n >= m.
 *
 * Structs and ABI room. The structs the caller allocates (fj_context_options,
 * fj_attention_desc, fj_plan_options) keep their size for the whole of a
 * MAJOR version: new fields take slots of their trailing reserved[] array,
 * with zero meaning "as before". So fill them with their init function
 * (which zeroes them) and then set fields by name. The library rejects a
 * nonzero reserved slot with FJ_ERR_INVALID_ARGUMENT naming it. Structs the
 * library fills (fj_plan_info) are zeroed first, reserved slots included,
 * so a field added later reads as zero from an older library.
 *
 * 1.0.0: first release with these rules (0.1 structs had no reserved room).
 * 1.1.0: fj_merge_desc, fj_merge_desc_init, fj_merge (node FLASHJIT_1.1);
 *        fj_attention_desc.softcap (its first reserved slot);
 *        fj_attention_desc.features (FJ_FEATURE_ALIBI, FJ_FEATURE_SINKS; the
 *        32 bits beside softcap), fj_execute_extras, fj_execute_extras_init,
 *        fj_plan_execute_ex, fj_attention_ex (node FLASHJIT_1.1);
 *        FJ_FEATURE_VARLEN and fj_execute_extras.cu_seqlens_q, cu_seqlens_k,
 *        seqused_k, total_q, total_k (four of its reserved slots);
 *        FJ_FEATURE_PAGED_KV, fj_attention_desc.page_size, num_pages,
 *        max_pages, block_table_stride (two int32 pairs: the first two of
 *        the seven reserved int64 slots softcap and features left) and
 *        fj_execute_extras.block_table (the first of its two reserved
 *        slots left; seqused_k is each sequence's KV length); no new
 *        symbol. FJ_MAX_HEAD_DIM grew from 256 to 576 (the CPU
 *        backends; CUDA still takes up to 256): a program that sizes
 *        buffers by the macro gets larger ones.
 *        fj_attention_desc.head_dim_v (V's and O's head dim when it
 *        differs from Q's and K's; the int64 slot after the paged
 *        fields', with reserved_i32 beside it); no new symbol. */
#define FLASHJIT_VERSION_MAJOR 1
#define FLASHJIT_VERSION_MINOR 1
#define FLASHJIT_VERSION_PATCH 0
#define FLASHJIT_VERSION_STRING "1.1.0"

/* MAJOR*10000 + MINOR*100 + PATCH of the library actually linked (compare
 * with the macros to detect a header/library mismatch). Thread-safe. */
FJ_API unsigned fj_version(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

/* Values are stable; new ones are appended before FJ_STATUS_COUNT_. */
typedef enum fj_status {
    FJ_OK = 0,
    FJ_ERR_INVALID_ARGUMENT, /* a field breaks a documented rule            */
    FJ_ERR_UNSUPPORTED,      /* valid, but this backend cannot do it (yet)  */
    FJ_ERR_NO_DEVICE,        /* CUDA asked for but not usable (reason given) */
    FJ_ERR_OUT_OF_MEMORY,    /* host or device allocation failed            */
    FJ_ERR_COMPILE,          /* NVRTC rejected a generated kernel (log given) */
    FJ_ERR_DRIVER,           /* a CUDA driver call failed (call and code given) */
    FJ_ERR_IO,               /* a file could not be read or written         */
    FJ_ERR_INTERNAL,         /* a bug in flashjit: please report it         */
    FJ_STATUS_COUNT_
} fj_status;

/* "FJ_ERR_INVALID_ARGUMENT"; "FJ_STATUS_UNKNOWN" for a value out of range.
 * The string is static. Thread-safe. */
FJ_API const char *fj_status_name(fj_status s);

/* This thread's detail for its last failed call, naming the field and the
 * rule, e.g. "heads_q (12) is not a multiple of heads_kv (5)"; "" when the
 * thread's last call succeeded or it made none. Valid until this thread's
 * next flashjit call. Thread-local, so thread-safe. */
FJ_API const char *fj_last_error(void);

/* ------------------------------------------------------------------------ */
/* Logging (off by default)                                                  */

typedef enum fj_log_level { FJ_LOG_OFF = 0, FJ_LOG_INFO = 1, FJ_LOG_DEBUG = 2 } fj_log_level;

/* Receives each message (one line, no trailing newline). May be called from
 * any thread that calls into flashjit, so it must be thread-safe itself. */
typedef void (*fj_log_fn)(fj_log_level level, const char *message, void *user);

/* Installs a process-wide log callback and level (NULL fn: messages go to
 * stderr at the level of FLASHJIT_LOG, which is read at the first message).
 * FLASHJIT_LOG is off|info|debug (or 0|1|2; unset or empty: off); any other
 * value makes fj_context_create fail with FJ_ERR_INVALID_ARGUMENT naming it.
 * Thread-safe; messages in flight may still reach the previous callback. */
FJ_API void fj_set_log_callback(fj_log_fn fn, fj_log_level level, void *user);

/* ------------------------------------------------------------------------ */
/* Enumerations                                                              */

typedef enum fj_dtype { FJ_F32, FJ_F16, FJ_BF16 } fj_dtype;

typedef enum fj_backend {
    FJ_BACKEND_AUTO,          /* CUDA when usable, else CPU                 */
    FJ_BACKEND_CPU_REFERENCE, /* plain OpenBLAS reference, the yardstick    */
    FJ_BACKEND_CPU,           /* CPU tiled (online softmax) backend         */
    FJ_BACKEND_CUDA           /* generated, NVRTC-compiled CUDA kernels     */
} fj_backend;

/* Causal alignment; see docs/semantics.md. BOTTOM_RIGHT (FlashAttention's):
 * query i sees key j when j <= i + (seqlen_k - seqlen_q). TOP_LEFT
 * (PyTorch's is_causal): when j <= i. */
typedef enum fj_causal { FJ_CAUSAL_NONE, FJ_CAUSAL_BOTTOM_RIGHT, FJ_CAUSAL_TOP_LEFT } fj_causal;

/* "f32", "f16", "bf16"; "cpu-reference", "cpu", "cuda", "auto";
 * "none", "bottom-right", "top-left". NULL for a value out of range. Static. */
FJ_API const char *fj_dtype_name(fj_dtype t);
FJ_API const char *fj_backend_name(fj_backend b);
FJ_API const char *fj_causal_name(fj_causal c);

/* Bytes per element: 4 for FJ_F32, 2 for FJ_F16 and FJ_BF16; 0 for a value
 * out of range. Thread-safe. */
FJ_API size_t fj_dtype_size(fj_dtype t);

/* Converts count elements of host memory from src (src_dtype) into dst
 * (dst_dtype), e.g. an application's float32 data into the bf16 tensors a
 * plan takes, and its results back. Narrowing rounds to nearest, ties to
 * even; beyond the target's range gives an infinity of the same sign;
 * f16's subnormals are produced and read (never flushed); NaN stays NaN of
 * the same sign (quieted when narrowed); f16 <-> bf16 rounds once (through
 * float32, which holds both exactly); the same dtype is a copy. Uses
 * AVX-512 or AVX2 where the CPU has them. dst and src must not overlap and
 * must be aligned to their element size (NULL is allowed with count 0).
 * FJ_ERR_INVALID_ARGUMENT naming the argument otherwise, with nothing
 * written. Thread-safe; allocates nothing. */
FJ_API fj_status fj_convert(fj_dtype dst_dtype, void *dst, fj_dtype src_dtype, const void *src,
                            size_t count);

/* ------------------------------------------------------------------------ */
/* Context                                                                   */

typedef struct fj_context fj_context; /* opaque; safe to share between threads */
typedef struct fj_plan fj_plan;       /* opaque; immutable once created; execute is thread-safe */

typedef struct fj_context_options {
    fj_backend backend;      /* AUTO: CUDA when a device, the driver and NVRTC are usable,
                                else CPU. The environment variable FLASHJIT_BACKEND
                                (cpu|reference|cuda) overrides AUTO (only AUTO). */
    int device;              /* CUDA device ordinal (>= 0) */
    const char *cache_dir;   /* NULL: FLASHJIT_CACHE_DIR, else $XDG_CACHE_HOME/flashjit,
                                else ~/.cache/flashjit; "": no disk cache. Copied. */
    const char *tuning_file; /* NULL: FLASHJIT_TUNING_FILE, else tuning.txt in the cache
                                directory; "": none. Copied. */
    int cpu_threads;         /* 0: one per online core; > 0: exactly that many */
    int64_t reserved[8];     /* zero: room for options added later (see "Structs and ABI room") */
} fj_context_options;

/* Fills the defaults: AUTO, device 0, NULL, NULL, 0; reserved zero. */
FJ_API void fj_context_options_init(fj_context_options *o);

/* Creates a context (o NULL: the defaults). On failure *out is NULL.
 * FJ_ERR_INVALID_ARGUMENT for an option that breaks its rule, a nonzero
 * reserved slot, or an unknown FLASHJIT_BACKEND or FLASHJIT_LOG value.
 * FJ_ERR_NO_DEVICE when CUDA was asked for explicitly and is not usable; the
 * message says why (which library, the loader's text, which variable to set). */
FJ_API fj_status fj_context_create(const fj_context_options *o, fj_context **out);

/* Frees the context, its cached plans and its device resources. NULL: no-op.
 * Plans created from it must be destroyed first. */
FJ_API void fj_context_destroy(fj_context *ctx);

/* What AUTO resolved to (never FJ_BACKEND_AUTO for a valid context). */
FJ_API fj_backend fj_context_backend(const fj_context *ctx);

/* The CPU worker threads the context runs CPU plans (and the tuner's checks)
 * on: the cpu_threads option, or one per online core. */
FJ_API int fj_context_cpu_threads(const fj_context *ctx);

/* Several lines: what was found (CPU, BLAS, CUDA driver, NVRTC, device), what
 * was chosen and why, the cache directory and tuning file in use. Owned by the
 * context, constant for its life. */
FJ_API const char *fj_context_describe(const fj_context *ctx);

/* ------------------------------------------------------------------------ */
/* Problem description                                                       */

/* The largest head_dim any backend takes (576 since 1.1, the 512 + 64 of
 * DeepSeek's MLA queries and keys; 256 in 1.0). The
 * CPU backends take every head dim 1..FJ_MAX_HEAD_DIM; the CUDA backend a
 * multiple of 8 in 8..256 and refuses the rest with FJ_ERR_UNSUPPORTED at
 * plan creation. A 1.0 library refuses head dims above 256 with
 * FJ_ERR_INVALID_ARGUMENT, whatever the header a program was built with. */
#define FJ_MAX_HEAD_DIM 576

typedef struct fj_attention_desc {
    int batch, heads_q, heads_kv;     /* heads_q % heads_kv == 0: GQA and MQA */
    int seqlen_q, seqlen_k, head_dim; /* head_dim 1..FJ_MAX_HEAD_DIM (CUDA: 8..256, by 8) */
    fj_dtype dtype;                   /* q, k, v and o share it */
    fj_causal causal;
    int window_left, window_right; /* sliding window; -1 = unbounded */
    float scale;                   /* 0: 1/sqrt(head_dim); must be finite */
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
    /* element strides of the batch, seq and head axes; the head_dim axis is
       contiguous; a tensor whose three strides are all zero is dense
       [batch, seq, heads, head_dim] (with FJ_FEATURE_VARLEN packed [token,
       heads, head_dim], the batch strides always 0). Strides are >= 0;
       inputs may overlap (stride 0 broadcasts); output rows must not
       overlap. */
    /* Logit softcap (Gemma 2/3): with softcap c > 0 every score s = scale * q.k
       becomes c * tanh(s / c) before the mask and the softmax (lse is over
       the capped scores; docs/semantics.md). 0: off. Negative, NaN or
       infinite: FJ_ERR_INVALID_ARGUMENT. softcap and features took the
       first int64 slot of the reserved room, so the struct's size and the
       other fields' offsets are unchanged. */
    float softcap;
    /* FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS | FJ_FEATURE_VARLEN |
       FJ_FEATURE_PAGED_KV (since 1.1; the 32 bits beside softcap): inputs
       beyond q, k and v that join the softmax, their per-head values given
       at execute time (fj_execute_extras), variable-length batches and a
       paged KV cache. 0: none. Any other bit: FJ_ERR_INVALID_ARGUMENT naming
       features. */
    uint32_t features;
    /* FJ_FEATURE_PAGED_KV (since 1.1; these took the two int64 slots after
       softcap's, so the struct's size and the other fields' offsets are
       unchanged): k and v are page pools [num_pages,
       page_size, heads_kv, head_dim] (v: head_dim_v; k_stride/v_stride step a page, a row
       of a page, a head), and each execute's block table, int32
       [batch, block_table_stride] (fj_execute_extras.block_table), names
       the pages of each sequence, of which it reads the first max_pages
       columns at most. page_size, num_pages and max_pages >= 1 with the
       feature; block_table_stride 0 means max_pages, else it must be >=
       max_pages. Without the feature all four must be 0
       (FJ_ERR_INVALID_ARGUMENT naming the field). docs/semantics.md, "Paged
       KV cache". */
    int page_size, num_pages;          /* keys per page; pages in each pool */
    int max_pages, block_table_stride; /* the block table's columns; its row stride */
    /* V's head dim (since 1.1; took the int64 slot after the paged
       fields', with reserved_i32 beside it, so the struct's size and the
       other fields' offsets are unchanged): O = softmax(scale Q K^T +
       mask) V with q and k rows of head_dim elements and v and o rows of
       head_dim_v (DeepSeek's MLA: 192 and 128, or 576 and 512). 0 means
       head_dim (as before); else 1..FJ_MAX_HEAD_DIM (anything else:
       FJ_ERR_INVALID_ARGUMENT naming head_dim_v). The scale's default
       stays 1/sqrt(head_dim); v_stride and o_stride step rows of
       head_dim_v elements (all-zero: dense [batch, seq, heads,
       head_dim_v]); lse is unchanged. The CPU backends take any pair;
       CUDA refuses head_dim_v != head_dim (FJ_ERR_UNSUPPORTED).
       docs/semantics.md, "Layout". */
    int head_dim_v;
    int32_t reserved_i32; /* zero: room for a 32-bit field added later */
    int64_t reserved[4];  /* zero: room for fields added later (see "Structs and ABI room") */
} fj_attention_desc;

/* Bits of fj_attention_desc.features (docs/semantics.md states the math).
 * The flag says the problem has the input (it is part of the problem key and
 * chooses the kernel); the per-head values are data, passed to each execute
 * in fj_execute_extras, so one plan serves any values. */
enum {
    /* ALiBi: each score gains -slope_h |i + off - j| (off: seqlen_k -
       seqlen_q, or 0 with FJ_CAUSAL_TOP_LEFT), after the scale and the
       softcap; slope_h per query head, fj_execute_extras.alibi_slopes.
       Every backend (CUDA: kernels of their own; docs/semantics.md). */
    FJ_FEATURE_ALIBI = 1u << 0,
    /* Attention sinks (gpt-oss): per query head a logit sink_h joins each
       row's softmax denominator without a value row, so a row may attend to
       "nothing"; fj_execute_extras.sinks. lse includes it (once, also when
       CUDA splits the keys). Every backend. */
    FJ_FEATURE_SINKS = 1u << 1,
    /* Variable-length batches (FlashAttention's varlen): q, k, v and o hold
       `batch` sequences of different lengths packed one after another
       along the token axis ([total_tokens, heads, head_dim]), placed by
       fj_execute_extras.cu_seqlens_q and cu_seqlens_k (and seqused_k)
       at each execute. seqlen_q and seqlen_k are the most query and key
       rows a sequence may have: one plan runs any mix of lengths within
       them. Each sequence is its own problem: causal and window alignment,
       ALiBi's offset, use its own lengths. There is no batch axis: the
       batch strides (q_stride[0] ...) must be 0 (all-zero strides are the
       packed [token, heads, head_dim]); the seq strides step one token.
       lse is float32 [heads_q, total_q]. Every backend (since 1.1; CUDA
       reads the arrays in device memory from its kernels, so a captured
       CUDA graph replays for any lengths; on CUDA not with ALiBi or
       sinks). docs/semantics.md,
       "Variable-length batches" and "CUDA: varlen and paged kernels". */
    FJ_FEATURE_VARLEN = 1u << 2,
    /* Paged KV cache (vLLM's PagedAttention, flash_attn_with_kvcache's
       block_table): k and v are pools of pages (the desc's page_size,
       num_pages, max_pages, block_table_stride say their shape), and
       sequence b's keys are its first seqused_k[b] keys read from the pages
       fj_execute_extras.block_table[b * stride + 0, 1, ...] names, in that
       order (key j in page block_table[b][j / page_size], row j %
       page_size). q, o and lse are dense [batch, seqlen_q, ...] as without
       the feature (every sequence has seqlen_q query rows: decode, and
       chunked prefill of equal chunks), or, with FJ_FEATURE_VARLEN too,
       packed and placed by cu_seqlens_q (chunked prefill of uneven chunks;
       cu_seqlens_k is then NULL and total_k 0: the keys are in the pages).
       seqlen_k is the most keys a sequence may use. Each sequence is its
       own problem (as with FJ_FEATURE_VARLEN): causal and window alignment
       use its own query rows and key count, so new queries attend to the
       cached keys and themselves under FJ_CAUSAL_BOTTOM_RIGHT. Every
       backend; on CUDA page_size must be a multiple of 16
       (FJ_ERR_UNSUPPORTED naming page_size otherwise). docs/semantics.md,
       "Paged KV cache" and "CUDA: varlen and paged kernels". */
    FJ_FEATURE_PAGED_KV = 1u << 3,
};

/* No mask, no window, default scale, no softcap, no features, dense strides, reserved zero. */
FJ_API void fj_attention_desc_init(fj_attention_desc *d, int batch, int heads_q, int heads_kv,
                                   int seqlen_q, int seqlen_k, int head_dim, fj_dtype dtype);

/* Checks d against every rule without creating anything: FJ_OK or
 * FJ_ERR_INVALID_ARGUMENT with the rule in fj_last_error(). Thread-safe. */
FJ_API fj_status fj_attention_desc_validate(const fj_attention_desc *d);

/* 4*B*Hq*Sq*Sk*D (2*B*Hq*Sq*Sk*(D + Dv) with head_dim_v), halved when
 * causal with Sq == Sk (FlashAttention's convention, so figures compare
 * with theirs). With FJ_FEATURE_VARLEN or
 * FJ_FEATURE_PAGED_KV that of the longest lengths, a bound: count a batch's
 * FLOPs per sequence. */
FJ_API double fj_attention_flops(const fj_attention_desc *d);

/* ------------------------------------------------------------------------ */
/* Problem keys: one text form of a problem                                  */

/* A problem's key is the one way flashjit writes a problem: in plan describe
 * texts and logs, bench rows, the tuner's report, the grids of tools/grids/
 * and (bucketed, docs/tuning.md) the tuning file. Its fields, in this order,
 * separated by '.':
 *
 *     b<batch>.hq<heads_q>.hkv<heads_kv>.sq<seqlen_q>.sk<seqlen_k>.d<head_dim>.<dtype>.<mask>
 *     b4.hq16.hkv4.sq4096.sk4096.d128.bf16.causal_br
 *
 * <dtype> is f32, f16 or bf16; <mask> is "nomask", or in this order and each
 * at most once: causal_br or causal_tl (FJ_CAUSAL_BOTTOM_RIGHT, _TOP_LEFT),
 * wl<N> (window_left N), wr<N> (window_right N), e.g. "causal_br.wl256".
 * Numbers are decimal, without sign or leading zeros. A problem with a
 * softcap ends in one more field, sc<softcap>: the shortest decimal that
 * reads back as the same float, with 'p' for the decimal point ("sc50",
 * "sc2p5"; in exponent form outside [1e-4, 1e9): "sc1e-05").
 * Then, with FJ_FEATURE_ALIBI, the field "alibi", with FJ_FEATURE_SINKS
 * the field "sinks", with FJ_FEATURE_VARLEN the field "varlen" (b is
 * then the number of sequences, sq and sk the longest lengths), and with
 * FJ_FEATURE_PAGED_KV the field "paged<page_size>", in that order, after
 * the softcap's ("b1.hq8.hkv8.sq1.sk4096.d64.bf16.nomask.alibi.sinks",
 * "b8.hq32.hkv8.sq4096.sk4096.d128.bf16.causal_br.varlen",
 * "b16.hq32.hkv8.sq1.sk8192.d128.bf16.causal_br.paged16"). Last, only
 * where head_dim_v differs from head_dim, the field "dv<head_dim_v>"
 * ("b1.hq128.hkv1.sq1.sk4096.d576.bf16.causal_br.dv512"; "dv" equal to
 * the head dim is refused: one problem, one key). The scale,
 * the strides and the pools' page counts are not part of it (a parsed
 * paged key gets batch x ceil(sk / page_size) pages, ceil(sk / page_size)
 * of them per sequence): a key names the shape, the mask, the softcap and
 * the features, which choose the kernel (its tuning point leaves the
 * softcap, the features and head_dim_v out: such problems share tiles with
 * plain ones;
 * FJ_PLAN_MEASURE measures the problem without its features, a varlen or
 * paged one as one sequence of the longest lengths).
 * FJ_PROBLEM_KEY_MAX bytes hold any key with its NUL (128 before 1.1's
 * features; 128 still hold every key without them). */
#define FJ_PROBLEM_KEY_MAX 160

/* Writes d's key into buf (n bytes). FJ_ERR_INVALID_ARGUMENT when d breaks a
 * rule (the message as fj_attention_desc_validate's) or n is too small; buf
 * is then "" (when n > 0). Thread-safe. */
FJ_API fj_status fj_problem_key(const fj_attention_desc *d, char *buf, size_t n);

/* Parses a key written as fj_problem_key writes it into *d: the fields the
 * key has, and fj_attention_desc_init's for the rest (dense strides, the
 * default scale), so fj_problem_key of the result gives the key back. Any
 * other text (another order, spaces, a leading zero, a value breaking a rule
 * of the desc) is FJ_ERR_INVALID_ARGUMENT naming the field and what it
 * should be, and *d is left as it was. Thread-safe. */
FJ_API fj_status fj_problem_key_parse(const char *key, fj_attention_desc *d);

/* ------------------------------------------------------------------------ */
/* Plans                                                                     */

/* Validates d, chooses the kernel's tiles (the context's tuning entry for the
 * problem's point, else the table shipped with flashjit, else the built-in
 * heuristic), and on CUDA generates, compiles (or loads from cache) and loads
 * it. Expensive the first time for a kernel; cheap for a kernel the context
 * or the disk cache holds. On failure *out is NULL. Thread-safe.
 * fj_plan_create_ex with NULL options. */
FJ_API fj_status fj_plan_create(fj_context *ctx, const fj_attention_desc *d, fj_plan **out);

/* Flags of fj_plan_options. */
enum {
    /* FFTW's FFTW_MEASURE: when the context's tuning has no entry for the
       problem's point (docs/tuning.md: device, arch, head dim, dtype, mask
       kind, sequence-length bucket), time the backend's candidate tiles on
       this problem first, each checked against the CPU reference before it
       is timed (a candidate giving wrong results is never chosen), and keep
       the fastest, or the default when none beats it head to head, as a
       "measured" entry of the context's tuning, which this plan and every
       later one of the point use. Seconds (a CPU problem) to minutes (CUDA:
       the candidates are compiled first, in parallel, through the disk
       cache); time_limit bounds it. Measurements of one context take turns.
       Nothing to measure on FJ_BACKEND_CPU_REFERENCE: the flag is ignored. */
    FJ_PLAN_MEASURE = 1 << 0,
    /* With FJ_PLAN_MEASURE: also append the measured entry to the context's
       tuning file (fj_context_options.tuning_file; FJ_ERR_INVALID_ARGUMENT
       when it has none, FJ_ERR_IO when it cannot be written or is not a
       tuning file, and no plan is made). Without this flag the file is never
       written: fj_tuning_export_file saves the whole tuning when asked. */
    FJ_PLAN_SAVE_TUNING = 1 << 1,
};

typedef struct fj_plan_options {
    unsigned flags;    /* FJ_PLAN_MEASURE, FJ_PLAN_SAVE_TUNING */
    double time_limit; /* FJ_PLAN_MEASURE: seconds the candidates' checks and timing may
                           take (candidates left when it runs out are not timed); 0: no limit */
    const char *tiles; /* NULL: choose as above; else these tiles, in the syntax of
                           fj_plan_info.tiles ("m128n64w4s2" on CUDA, "q256k512" on the CPU
                           tiled backend; FJ_TILES_GIVEN), FJ_ERR_INVALID_ARGUMENT when they
                           do not parse and FJ_ERR_UNSUPPORTED when the device cannot run
                           them; not measured. Not copied: read during the call only. */
    int reserved[8];   /* zero: room for fields added later (see "Structs and ABI room") */
} fj_plan_options;

/* Fills the defaults: no flags, no time limit, no tiles. */
FJ_API void fj_plan_options_init(fj_plan_options *o);

/* fj_plan_create with options (NULL: the defaults). Thread-safe; measuring
 * plans of one context take turns. */
FJ_API fj_status fj_plan_create_ex(fj_context *ctx, const fj_attention_desc *d,
                                   const fj_plan_options *o, fj_plan **out);

/* Runs the plan. q, k, v, o point to memory of the context's backend (device
 * memory on CUDA, host memory on CPU; fj_malloc gives either) laid out by the
 * desc's strides (with FJ_FEATURE_PAGED_KV k and v are the page pools).
 * lse: NULL, or float32 [batch, heads_q, seqlen_q] (natural
 * log of each row's softmax denominator; -inf for a row that sees no key,
 * or its sink with FJ_FEATURE_SINKS); with FJ_FEATURE_VARLEN [heads_q,
 * total_q] (fj_execute_extras).
 * stream: a CUstream on CUDA (NULL: the default stream; the call is
 * asynchronous), ignored on CPU (the call returns when done). Allocates
 * nothing. Thread-safe; concurrent executes must not share an output, and
 * those of a split-KV plan must be on one stream (see fj_plan above). */
FJ_API fj_status fj_plan_execute(const fj_plan *p, const void *q, const void *k, const void *v,
                                 void *o, float *lse, void *stream);

/* The inputs of an execute beyond q, k, v, o and lse (since 1.1): the
 * per-head values of the desc's features, and the sequences of a
 * variable-length batch. Each array is in memory of the context's backend
 * (device memory on CUDA, host memory on the CPU; fj_malloc gives either),
 * aligned to 4 bytes, read during the execute only (on CUDA: by the kernels
 * the call queues on its stream, so keep it alive and unchanged until they
 * finish); the caller owns it, the library never frees or copies it.
 * A plan whose desc has the feature needs its arrays (NULL:
 * FJ_ERR_INVALID_ARGUMENT naming it); an array or count given for a feature
 * the desc does not have is FJ_ERR_INVALID_ARGUMENT too (it would be
 * ignored).
 *
 * ALiBi and sinks: float32 [heads_q] (query head h's value at index h, GQA
 * included). The values are data, as q and k: not inspected
 * (docs/semantics.md, "Non-finite values", says what non-finite values give).
 *
 * Variable length (FJ_FEATURE_VARLEN; docs/semantics.md, "Variable-length
 * batches"): sequence b's queries and output rows are the tokens
 * [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q and o, its keys and values
 * the tokens [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v, of which it
 * uses the first seqused_k[b] (all of them when seqused_k is NULL); its
 * lse is lse[h * total_q + t] for its token t. Rules, each checked in full
 * on the CPU backends before anything is written (FJ_ERR_INVALID_ARGUMENT
 * naming the array, the index and the rule; nothing written), on CUDA only
 * with FLASHJIT_CHECK=1 in the environment when the plan is made (a debug
 * mode: each execute synchronizes its stream and copies the arrays back
 * first; not inside a graph capture). Without it CUDA's kernels read the
 * arrays as they are, clamping lengths and page indices so that nothing is
 * read or written outside the buffers: cu[0] = 0;
 * cu[b] <= cu[b + 1]; a sequence's queries <= the desc's seqlen_q and the
 * keys it uses <= seqlen_k; cu_seqlens_q[batch] <= total_q and
 * cu_seqlens_k[batch] <= total_k (the buffers' sizes: q, o hold total_q
 * tokens, k, v total_k, lse heads_q x total_q floats); 0 <= seqused_k[b] <=
 * the sequence's keys. Empty sequences are legal: no query rows, nothing
 * written; no keys, every row sees none (O = 0, lse = -inf or the sink).
 * Tokens past cu_seqlens_q[batch] (of o and lse) are not written.
 *
 * Paged KV cache (FJ_FEATURE_PAGED_KV; docs/semantics.md, "Paged KV
 * cache"): block_table is int32 [batch, the desc's block_table_stride (or
 * max_pages)] and seqused_k, required, int32 [batch]: sequence b uses
 * seqused_k[b] keys (flash_attn_with_kvcache's cache_seqlens), key j being
 * row j % page_size of page block_table[b * stride + j / page_size] of the
 * pools k and v. Only the first ceil(seqused_k[b] / page_size) entries of a
 * row are read; the rest (unused tail entries) may hold anything. Rules,
 * each checked in full on the CPU backends before anything is written
 * (FJ_ERR_INVALID_ARGUMENT naming the array, the index and the rule;
 * nothing written): 0 <= seqused_k[b] <= the desc's seqlen_k and <=
 * max_pages x page_size (the keys the table's row can name); every entry
 * read is in [0, num_pages) (on CUDA: with FLASHJIT_CHECK=1, as above).
 * Pages may be in any order and shared between
 * sequences (a common prefix). cu_seqlens_k must be NULL and total_k 0
 * (the keys are in the pages); with FJ_FEATURE_VARLEN too, cu_seqlens_q
 * and total_q place the queries as above. On the CPU backends a
 * decode-shaped plan (at most 16 query rows per kv head, the cpu backend)
 * reads the keys through the block table where they lie in the pools;
 * other plans copy each sequence's keys out of the pages (a run of
 * consecutive pages at a time; none when they are one run already laid out
 * as a dense sequence) into a plan-owned buffer of seqlen_k keys, so the
 * executes of one such plan take turns on it (a lock). On CUDA every paged
 * plan reads the keys through the block table in its kernel (one launch,
 * plus the combine kernel's when it splits the keys). */
typedef struct fj_execute_extras {
    const float *alibi_slopes; /* FJ_FEATURE_ALIBI: slope_h, [heads_q] */
    const float *sinks;        /* FJ_FEATURE_SINKS: sink_h (natural log units), [heads_q] */
    /* FJ_FEATURE_VARLEN (these took four of the 1.1.0 struct's six reserved
       int64 slots, each pointer one slot, the two counts one: on LP64 the
       size and the other fields' offsets are unchanged) */
    const int32_t *cu_seqlens_q; /* int32 [batch + 1]: where each sequence's queries start */
    const int32_t *cu_seqlens_k; /* int32 [batch + 1]: where each sequence's keys start */
    const int32_t *seqused_k;    /* NULL, or int32 [batch]: the keys each sequence uses
                                    (FJ_FEATURE_PAGED_KV: required, its KV length) */
    int32_t total_q, total_k;    /* tokens q and o hold, and k and v (>= cu_seqlens_*[batch]) */
    /* FJ_FEATURE_PAGED_KV: int32 [batch, block_table_stride], the pages of
       each sequence (took the first of the two reserved slots left) */
    const int32_t *block_table;
    int64_t reserved[1]; /* zero: room for inputs added later (see "Structs and ABI room") */
} fj_execute_extras;

/* Fills *x: no arrays, counts zero, reserved zero. */
FJ_API void fj_execute_extras_init(fj_execute_extras *x);

/* fj_plan_execute with the extra inputs x (NULL: none, as fj_plan_execute,
 * which is this with x NULL). Same rules: allocates nothing, thread-safe
 * (concurrent executes may share x, which is only read). */
FJ_API fj_status fj_plan_execute_ex(const fj_plan *p, const void *q, const void *k, const void *v,
                                    void *o, float *lse, const fj_execute_extras *x, void *stream);

/* Backend, kernel name, tiles, and why they were chosen. Owned by the plan. */
FJ_API const char *fj_plan_describe(const fj_plan *p);

/* Where a plan's tiles came from. */
typedef enum fj_tiles_source {
    FJ_TILES_HEURISTIC = 0,     /* the built-in heuristic */
    FJ_TILES_TUNING_FILE = 1,   /* an entry of the context's tuning file */
    FJ_TILES_SHIPPED_TABLE = 2, /* an entry of the table shipped with flashjit */
    FJ_TILES_GIVEN = 3,         /* given by the caller (the tuner's candidates) */
    FJ_TILES_FORCED = 4,        /* forced by a test hook */
    FJ_TILES_IMPORTED = 5,      /* an entry fj_tuning_import* added to the context */
    FJ_TILES_MEASURED = 6,      /* an entry the context measured (FJ_PLAN_MEASURE) */
} fj_tiles_source;

/* "heuristic", "tuning file", "shipped table", "given", "forced",
 * "imported", "measured"; NULL out of range. Static. */
FJ_API const char *fj_tiles_source_name(fj_tiles_source s);

/* What a plan runs, as data (fj_plan_describe says the same in words). */
typedef struct fj_plan_info {
    fj_backend backend; /* never AUTO */
    char kernel[128];   /* CUDA: the canonical kernel name (the split variant when
                                    split-KV); CPU: "cpu_tiled", "cpu_decode_<loops>"
                                    or "cpu_reference" ("cpu_tiled_varlen",
                                    "cpu_reference_varlen" with FJ_FEATURE_VARLEN,
                                    "_paged" with FJ_FEATURE_PAGED_KV, "_varlen_paged"
                                    with both) */
    char tiles[32];     /* CUDA "m128n64w4s2", CPU tiled "q128k256"; "" when the
                                    backend has no tiles (reference, CPU decode) */
    fj_tiles_source tiles_source;
    int registers;    /* CUDA: registers per thread; 0 on the CPU */
    int local_bytes;  /* CUDA: local memory per thread (spills); 0 on the CPU */
    int shared_bytes; /* CUDA: shared memory per block (dynamic + static); 0 on the CPU */
    int threads;      /* CUDA: threads per block; CPU: worker threads */
    int splits;       /* key splits (1: none); CPU decode: key chunks (paged: the most
                                    chunks of a sequence at the plan's latest execute, or before
                                    one, of a batch of seqlen_k-key sequences) */
    int launches;     /* kernel launches per execute; 0 on the CPU */
    int reserved[8];  /* zero: room for fields added later (see "Structs and ABI room") */
} fj_plan_info;

/* Fills *info (zeroed first) from the plan. FJ_ERR_INVALID_ARGUMENT for a
 * NULL argument. Thread-safe. */
FJ_API fj_status fj_plan_get_info(const fj_plan *p, fj_plan_info *info);

/* Frees the plan (NULL: no-op). */
FJ_API void fj_plan_destroy(fj_plan *p);

/* One shot: a plan cached in the context per distinct (desc, stream), then
 * execute. Thread-safe, split-KV problems included: calls on different
 * streams use different cached plans. */
FJ_API fj_status fj_attention(fj_context *ctx, const fj_attention_desc *d, const void *q,
                              const void *k, const void *v, void *o, float *lse, void *stream);

/* fj_attention with the extra inputs x (fj_plan_execute_ex; NULL: none). The
 * cached plan is chosen by (desc, stream) as fj_attention's; x is not part
 * of it (only read during the call). Thread-safe. */
FJ_API fj_status fj_attention_ex(fj_context *ctx, const fj_attention_desc *d, const void *q,
                                 const void *k, const void *v, void *o, float *lse,
                                 const fj_execute_extras *x, void *stream);

/* ------------------------------------------------------------------------ */
/* Merging partial attention results (since 1.1)                             */

/* Attention over a key set K = K1 u K2 (disjoint) is the merge of attention
 * over K1 and attention over K2, each given by its output O and its lse (as
 * fj_plan_execute writes them). An engine uses it for cascade attention (a
 * shared prefix once for many sequences, then each sequence's own keys,
 * merged in place into the first result) and for context parallelism (each
 * GPU attends to its share of the keys, the results merged afterwards). Per
 * row (b, i, h), in float32 (docs/semantics.md, "Merging"):
 *
 *     m = max(lse_a, lse_b),  w_a = exp(lse_a - m),  w_b = exp(lse_b - m)
 *     O = (w_a O_a + w_b O_b) / (w_a + w_b),  lse = m + ln(w_a + w_b)
 *
 * rounded once to dtype on store. A side with lse = -inf (it saw no key)
 * weighs exactly 0 and its O is not read; both -inf gives O = 0 and
 * lse = -inf; a NaN lse, or +inf, makes the row NaN. */
typedef struct fj_merge_desc {
    int batch, heads_q, seqlen_q, head_dim; /* each >= 1; any head_dim */
    fj_dtype dtype;                         /* o_a, o_b and o share it (f32, f16, bf16) */
    int64_t a_stride[3], b_stride[3], o_stride[3];
    /* element strides of the batch, seq and head axes of o_a, o_b and o, as
       fj_attention_desc's (all three zero: dense [batch, seqlen_q, heads_q,
       head_dim]; the head_dim axis is contiguous; >= 0; rows of o must not
       overlap). lse_a, lse_b and lse are always dense float32 [batch, heads_q,
       seqlen_q], as fj_plan_execute's lse. */
    int64_t reserved[8]; /* zero: room for fields added later (see "Structs and ABI room") */
} fj_merge_desc;

/* Dense strides, reserved zero. */
FJ_API void fj_merge_desc_init(fj_merge_desc *d, int batch, int heads_q, int seqlen_q, int head_dim,
                               fj_dtype dtype);

/* o, lse = merge(o_a, lse_a, o_b, lse_b) as above. Tensors are memory of the
 * context's backend (device memory on CUDA, host memory on CPU), each aligned
 * to its element size. lse: NULL (not written) or the merged lse.
 * Aliasing, exactly: o may be o_a or o_b (the same pointer, then with the
 * same strides), and lse may be lse_a or lse_b, so a result accumulates in
 * place (merge(a, b) into a); any other overlap of an output with an input
 * is not allowed (not checked: the result is undefined). Inputs may overlap
 * each other.
 * stream: a CUstream on CUDA (NULL: the default stream; the call is
 * asynchronous, ordered after the stream's earlier work, e.g. the executes
 * that wrote o_a and o_b), ignored on CPU (the call returns when done, on
 * the context's worker threads when large). Allocates nothing (on CUDA, a
 * context's first merge of a dtype compiles or loads its kernel once, as a
 * plan does). Thread-safe; concurrent calls must not share an output.
 * FJ_ERR_INVALID_ARGUMENT naming the argument and the rule for a NULL
 * tensor, a size < 1, a dtype out of range, a negative stride, overlapping
 * rows of o, an alias with other strides, a misaligned pointer or a nonzero
 * reserved slot; nothing is written then. */
FJ_API fj_status fj_merge(fj_context *ctx, const fj_merge_desc *d, const void *o_a,
                          const float *lse_a, const void *o_b, const float *lse_b, void *o,
                          float *lse, void *stream);

/* ------------------------------------------------------------------------ */
/* Tuning: import and export (FFTW's wisdom)                                 */

/* A context's tuning is the list of entries its plans look their tiles up in
 * (format and lookup: docs/tuning.md): those of its tuning file, read at
 * creation, then those imported, then those measured, a later entry for a
 * point replacing an earlier one. The table shipped with flashjit is not
 * part of it (plans fall back to it). Every function here is thread-safe,
 * also against plan creation on the same context: an entry added while a
 * plan is being created is used by that plan or by the next one. */

/* The context's tuning as the text of a tuning file (format 2; each point's
 * winning entry once, in the order they were added), in *text, malloc'd:
 * the caller frees it with free(). On failure *text is NULL. */
FJ_API fj_status fj_tuning_export(const fj_context *ctx, char **text);

/* The same text written to path, replacing the file at once (a temporary
 * file in the same directory, renamed over it): a reader never sees half of
 * it. FJ_ERR_IO naming the path and the reason. */
FJ_API fj_status fj_tuning_export_file(const fj_context *ctx, const char *path);

/* Adds the entries of a tuning file's text (format 1 or 2) to the context's
 * tuning, after those it has: for a point in both, the imported entry is
 * used by plans created from now on (plans made before, fj_attention's
 * cached ones included, keep their tiles). All or nothing: text that is not a tuning file, of
 * another format version, or with a malformed entry line is
 * FJ_ERR_INVALID_ARGUMENT naming the line and the rule, and nothing is
 * added. Entries for other devices are kept (never used here, exported). */
FJ_API fj_status fj_tuning_import(fj_context *ctx, const char *text);

/* fj_tuning_import of a file's text; FJ_ERR_IO when it cannot be read. */
FJ_API fj_status fj_tuning_import_file(fj_context *ctx, const char *path);

/* ------------------------------------------------------------------------ */
/* Memory of the context's backend: device memory on CUDA, host memory on the
 * CPU backends, so one program runs on both. Thread-safe. fj_malloc'd memory
 * is aligned to at least 64 bytes and freed with fj_free on the same context. */

FJ_API fj_status fj_malloc(fj_context *ctx, size_t bytes, void **ptr);
FJ_API void fj_free(fj_context *ctx, void *ptr); /* NULL: no-op */
FJ_API fj_status fj_copy_to_device(fj_context *ctx, void *dst, const void *host_src, size_t bytes);
FJ_API fj_status fj_copy_to_host(fj_context *ctx, void *host_dst, const void *src, size_t bytes);
/* Waits for the stream's work (NULL: all of the context's work). No-op on CPU. */
FJ_API fj_status fj_synchronize(fj_context *ctx, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* FLASHJIT_H */
