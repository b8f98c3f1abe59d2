/* A program outside the flashjit tree, built against an installed flashjit
 * (CMake's find_package, Meson's dependency) or a vendored one (a Meson
 * subproject): it must compile with the header alone, link, load the
 * library it was built against (the header and library versions agree), and
 * compute a small GQA attention in bf16 on the CPU backend that matches a
 * double-precision computation of the same bf16 inputs. */
#include <flashjit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { B = 1, HQ = 4, HKV = 2, SQ = 3, SK = 5, D = 16 };

static int fail(const char *what, fj_status s)
{
    fprintf(stderr, "consumer: %s: %s: %s\n", what, fj_status_name(s), fj_last_error());
    return 1;
}

int main(void)
{
    unsigned want =
        FLASHJIT_VERSION_MAJOR * 10000u + FLASHJIT_VERSION_MINOR * 100u + FLASHJIT_VERSION_PATCH;
    if (fj_version() != want) {
        fprintf(stderr, "consumer: header %s but library %u\n", FLASHJIT_VERSION_STRING,
                fj_version());
        return 1;
    }
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU;
    o.cache_dir = "";
    fj_context *ctx;
    fj_status s = fj_context_create(&o, &ctx);
    if (s) return fail("fj_context_create", s);

    fj_attention_desc d;
    fj_attention_desc_init(&d, B, HQ, HKV, SQ, SK, D, FJ_BF16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    fj_plan *plan;
    if ((s = fj_plan_create(ctx, &d, &plan))) return fail("fj_plan_create", s);

    /* dense [batch, seq, heads, head_dim] */
    static float q[SQ * HQ * D], k[SK * HKV * D], v[SK * HKV * D], o32[SQ * HQ * D];
    static uint16_t qb[SQ * HQ * D], kb[SK * HKV * D], vb[SK * HKV * D], ob[SQ * HQ * D];
    for (int i = 0; i < SQ * HQ * D; i++) q[i] = (float)sin(0.37 * i);
    for (int i = 0; i < SK * HKV * D; i++)
        k[i] = (float)cos(0.11 * i), v[i] = (float)sin(0.05 * i + 1);
    if ((s = fj_convert(FJ_BF16, qb, FJ_F32, q, SQ * HQ * D)) ||
        (s = fj_convert(FJ_BF16, kb, FJ_F32, k, SK * HKV * D)) ||
        (s = fj_convert(FJ_BF16, vb, FJ_F32, v, SK * HKV * D)))
        return fail("fj_convert", s);
    /* the reference sees the same bf16 values */
    fj_convert(FJ_F32, q, FJ_BF16, qb, SQ * HQ * D);
    fj_convert(FJ_F32, k, FJ_BF16, kb, SK * HKV * D);
    fj_convert(FJ_F32, v, FJ_BF16, vb, SK * HKV * D);

    if ((s = fj_plan_execute(plan, qb, kb, vb, ob, NULL, NULL))) return fail("fj_plan_execute", s);
    fj_convert(FJ_F32, o32, FJ_BF16, ob, SQ * HQ * D);

    double worst = 0;
    for (int h = 0; h < HQ; h++)
        for (int i = 0; i < SQ; i++) {
            const int kvh = h / (HQ / HKV), last = i + (SK - SQ); /* bottom-right causal */
            double p[SK], sum = 0, mx = -INFINITY;
            for (int j = 0; j <= last; j++) {
                double dot = 0;
                for (int c = 0; c < D; c++)
                    dot += (double)q[(i * HQ + h) * D + c] * k[(j * HKV + kvh) * D + c];
                p[j] = dot / sqrt((double)D);
                if (p[j] > mx) mx = p[j];
            }
            for (int j = 0; j <= last; j++) sum += p[j] = exp(p[j] - mx);
            for (int c = 0; c < D; c++) {
                double out = 0;
                for (int j = 0; j <= last; j++) out += p[j] / sum * v[(j * HKV + kvh) * D + c];
                double err = fabs(out - o32[(i * HQ + h) * D + c]);
                if (err > worst) worst = err;
            }
        }
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
    /* bf16 output: half an ulp of values below 1 is at most 2^-9 */
    if (!(worst <= 0x1p-8)) {
        fprintf(stderr, "consumer: largest error %g exceeds %g\n", worst, 0x1p-8);
        return 1;
    }
    printf("consumer: flashjit %s, bf16 GQA %d:%d causal on the CPU, largest error %.2g\n",
           FLASHJIT_VERSION_STRING, HQ, HKV, worst);
    return 0;
}
