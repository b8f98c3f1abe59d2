/* Parameters of one fj_merge launch (merge.cu), shared by the host (C11,
 * src/cuda/cuda_merge.c) and the generated source (pasted before merge.cu),
 * so the two layouts cannot differ. Fixed-size types, 8-byte fields first;
 * no #include (NVRTC gets no include path). */
#ifndef FJ_MERGE_PARAMS_H
#define FJ_MERGE_PARAMS_H

/* Threads per block. */
#define FJ_MERGE_THREADS 256

typedef struct fj_merge_params {
    const void *o_a, *o_b;   /* device pointers; element type FJ_MERGE_DTYPE */
    void *o;                 /* may be o_a or o_b (then with its strides) */
    const float *lse_a, *lse_b; /* float32 [batch, heads_q, seqlen_q] */
    float *lse;              /* NULL: not written; may be lse_a or lse_b */
    long long a_stride[3];   /* elements, axes (batch, seq, head); head_dim is contiguous */
    long long b_stride[3];
    long long o_stride[3];
    long long rows;          /* batch * heads_q * seqlen_q */
    long long blocks;        /* ceil(rows / (FJ_MERGE_THREADS / lanes)); the grid may be smaller */
    int heads_q, seqlen_q, head_dim;
    int vec;                 /* 1, or the elements of 16 bytes when every row of o_a, o_b
                                and o starts 16-byte aligned and head_dim is a multiple */
    int lanes;               /* threads per row: a power of two in 1..FJ_MERGE_THREADS */
    int reserved;
} fj_merge_params;

#endif
