#!/usr/bin/env python3
"""Instruments a copy of kernel_templates/flash_tma.cu to find where a launch
hangs. Every mbarrier wait gives up after about 4 M tries: it prints which
barrier it waited on (its index: 0 Q full, 1 Q empty, then K full, K empty,
V full, V empty, FJ_STAGES each), the parity, the block and the thread, and
traps, so the launch fails with an error instead of hanging. The producer
prints each work tile it starts (with FJ_VARLEN its sequence's words) and
each consumer warpgroup the tile number it was handed.

A diagnostic build only: the printf calls cost registers (the kernels spill)
and every tile prints. Use it on a copy of the tree, never on the checkout:

    cp -r . /tmp/fj-trace && python3 tools/dev/trace_flash_tma.py \\
        /tmp/fj-trace/kernel_templates/flash_tma.cu
    cd /tmp/fj-trace && meson setup build -Dtests=disabled && ninja -C build
    timeout 30 build/tools/flashjit run --backend cuda ... --repeat 1 --warmup 0

then `grep -E '^(P|C|HANG) '` the output: lines start with P (producer), C
(consumer) or HANG. Exits 1, naming the anchor, when the template no longer
has one of the places it instruments.
"""
import re
import sys

SPINS_LOG2 = 22


def fail(what):
    sys.exit("trace_flash_tma: %s not found in the template (update the anchors)" % what)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: trace_flash_tma.py PATH/kernel_templates/flash_tma.cu")
    path = sys.argv[1]
    src = open(path).read()

    # 1. bounded waits
    wait = re.search(r"__device__ __forceinline__ void mbar_wait\(unsigned a, unsigned parity\)\n"
                     r"\{\n    while \(!mbar_try_wait\(a, parity\)\) \{\n    \}\n\}", src)
    if not wait:
        fail("mbar_wait's loop")
    src = src[:wait.start()] + """extern "C" __device__ int vprintf(const char *, const char *);
/* out of line, so that the wait sites keep their registers */
__device__ __noinline__ void report_hang(unsigned a, unsigned parity)
{
    struct {
        int varlen, blk, tid, index;
        unsigned parity;
    } args = {FJ_VARLEN, (int)blockIdx.x, (int)threadIdx.x,
              (int)((a - smem_base() - SMEM_BAR) / 8u), parity};
    vprintf("HANG varlen %%d blk %%d tid %%d barrier %%d parity %%u\\n", (const char *)&args);
    __trap();
}
__device__ __forceinline__ void mbar_wait(unsigned a, unsigned parity)
{
    long long tries = 0;
    while (!mbar_try_wait(a, parity))
        if (++tries == (1ll << %d)) report_hang(a, parity);
}""" % SPINS_LOG2 + src[wait.end():]

    # 2. the producer: the first `if (tile < 0) break;` (in produce)
    produce = src.find("void produce(")
    consume = src.find("void consume(")
    if produce < 0 or consume < 0:
        fail("produce() or consume()")
    brk = "        if (tile < 0) break;\n"
    at = src.find(brk, produce)
    if at < 0 or at > consume:
        fail("the producer's `if (tile < 0) break;`")
    src = src[:at] + """        if (leader) {
            struct {
                int blk, tile, q_uses, it;
            } args = {(int)blockIdx.x, tile, (int)q_uses, (int)it};
            vprintf("P blk %d tile %d q_uses %d it %d\\n", (const char *)&args);
#if FJ_VARLEN
            if (tile >= 0) {
                struct {
                    int blk, b, h, m0, q0, k0, sq, sk, n_begin, n_end;
                } seq = {(int)blockIdx.x, w.b, w.h, w.m0, w.seq.q0, w.seq.k0, w.seq.sq, w.seq.sk,
                         w.n_begin, w.n_end};
                vprintf("P blk %d b %d h %d m0 %d q0 %d k0 %d sq %d sk %d keys %d..%d\\n",
                        (const char *)&seq);
            }
#endif
        }
""" + src[at:]

    # 3. the consumers: the `if (tile < 0) break;` in consume
    consume = src.find("void consume(")
    at = src.find(brk, consume)
    if at < 0:
        fail("the consumers' `if (tile < 0) break;`")
    at += len(brk)
    src = src[:at] + """        if ((threadIdx.x & 127u) == 0) {
            struct {
                int blk, c, tile, q_uses, it;
            } args = {(int)blockIdx.x, c, tile, (int)k.q_uses, (int)k.it};
            vprintf("C blk %d c %d tile %d q_uses %d it %d\\n", (const char *)&args);
        }
""" + src[at:]
    open(path, "w").write(src)


if __name__ == "__main__":
    main()
