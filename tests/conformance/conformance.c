/* fj_conformance: every case of the conformance list (cases.c) on every
 * backend of the registry that this machine can create, each checked against
 * the double oracle and the CPU reference's output (check.c); with --perf,
 * the same cases timed and printed as `flashjit bench` rows (perf.c).
 *
 *   fj_conformance [--backend LIST] [--filter PATTERNS] [--list] [--perf]
 *                  [--repeat N] [--warmup N] [--threads N] [--quick | --full]
 *
 * One line per case and backend: "ok", "FAIL" (the bounds broken and the
 * measures) or "SKIP" (the backend's own reason it does not support the
 * problem; a case that backend must run fails instead). The seed is printed
 * first; FLASHJIT_TEST_SEED=<seed> fj_conformance --filter <group/name>
 * replays one case with the same numbers. Exit status: 0 all passed, 1 a
 * case failed, 2 a usage error, 77 nothing ran (no requested backend usable
 * here, such as --backend cuda without a GPU, or every case skipped). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "case.h"
#include "check.h"
#include "perf.h"

#define MAX_BACKENDS 8

/* Under the sanitizers the heavy cases (the CUDA families' long keys and
 * 2048 x 1000 rows) take half the run and reach no CPU code the others do
 * not; the plain build runs them all. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifdef SANITIZED
#define DEFAULT_QUICK true
#else
#define DEFAULT_QUICK false
#endif

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

typedef struct options {
    unsigned backends;  /* FJT_ON bits; 0: every backend in the registry */
    const char *filter; /* comma-separated substrings of "group/name"; NULL: all */
    bool list, perf, quick;
    int repeat, warmup, threads;
} options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: fj_conformance [--backend LIST] [--filter PATTERNS] [--list] [--perf]\n"
            "                      [--repeat N] [--warmup N] [--threads N] [--quick | --full]\n\n"
            "Runs every conformance case on every backend this machine can create, against\n"
            "the double-precision oracle and the CPU reference.\n\n"
            "  --backend LIST     comma-separated: cpu-reference (or reference), cpu, cuda\n"
            "                     (default: every backend in the registry; an unusable one\n"
            "                     is skipped, saying why)\n"
            "  --filter PATTERNS  comma-separated substrings of a case's \"group/name\";\n"
            "                     a case runs when it contains any of them\n"
            "  --list             print the selected cases, one per line, and exit\n"
            "  --perf             time the cases instead: `flashjit bench` rows (median of\n"
            "                     --repeat runs (30) after --warmup (5))\n"
            "  --threads N        CPU worker threads (default: one per online core)\n"
            "  --quick            skip the heavy cases (the CUDA families' largest, each\n"
            "                     with a SKIP line); the default in a build with sanitizers\n"
            "  --full             run every case (the default otherwise)\n\n"
            "FLASHJIT_TEST_SEED=N replays a run (the seed is printed first).\n"
            "Exit: 0 passed, 1 a case failed, 2 usage, 77 nothing ran.\n");
}

static bool parse_backends(const char *val, unsigned *bits)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", val);
    *bits = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "reference")) tok = "cpu-reference";
        const fj_backend_entry *const *e = fj_backend_registry;
        for (; *e && strcmp((*e)->name, tok); e++) {
        }
        if (!*e) {
            fprintf(stderr, "fj_conformance: --backend: '%s' is not one of", tok);
            for (e = fj_backend_registry; *e; e++) fprintf(stderr, " %s", (*e)->name);
            fprintf(stderr, "\n");
            return false;
        }
        *bits |= FJT_ON((*e)->kind);
    }
    return *bits != 0;
}

static bool parse_int(const char *flag, const char *val, int lo, int hi, int *out)
{
    char *end;
    long v = val ? strtol(val, &end, 10) : 0;
    if (!val || !*val || *end || v < lo || v > hi) {
        fprintf(stderr, "fj_conformance: %s: '%s' is not a whole number in %d..%d\n", flag,
                val ? val : "", lo, hi);
        return false;
    }
    *out = (int)v;
    return true;
}

/* -1: go on; else the exit status. */
static int parse_options(int argc, char **argv, options *o)
{
    *o = (options){.repeat = 30, .warmup = 5, .quick = DEFAULT_QUICK};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes_value = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--list")) {
            o->list = true;
            takes_value = false;
        } else if (!strcmp(a, "--perf")) {
            o->perf = true;
            takes_value = false;
        } else if (!strcmp(a, "--backend") || !strcmp(a, "--backends")) {
            if (!val || !parse_backends(val, &o->backends)) return 2;
        } else if (!strcmp(a, "--filter")) {
            if (!val || !*val) {
                fprintf(stderr, "fj_conformance: --filter needs a value\n");
                return 2;
            }
            o->filter = val;
        } else if (!strcmp(a, "--repeat")) {
            if (!parse_int(a, val, 1, 100000, &o->repeat)) return 2;
        } else if (!strcmp(a, "--warmup")) {
            if (!parse_int(a, val, 0, 100000, &o->warmup)) return 2;
        } else if (!strcmp(a, "--threads")) {
            if (!parse_int(a, val, 0, 4096, &o->threads)) return 2;
        } else if (!strcmp(a, "--quick") || !strcmp(a, "--full")) {
            o->quick = !strcmp(a, "--quick");
            takes_value = false;
        } else {
            fprintf(stderr, "fj_conformance: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (takes_value) i++;
    }
    return -1;
}

static bool selected(const fjt_case *c, const char *filter)
{
    if (!filter) return true;
    char full[96], buf[512];
    snprintf(full, sizeof full, "%s/%s", c->group, c->name);
    snprintf(buf, sizeof buf, "%s", filter);
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (strstr(full, tok)) return true;
    return false;
}

typedef struct backend_run {
    fj_context *ctx;
    fj_backend kind;
    int passed, failed, skipped;
} backend_run;

/* A context for each requested registry row; an unusable one gets a SKIP
 * line with its reason. Returns how many were created. */
static int create_contexts(const options *o, backend_run *runs)
{
    int n = 0;
    for (const fj_backend_entry *const *e = fj_backend_registry; *e && n < MAX_BACKENDS; e++) {
        if (o->backends && !(o->backends & FJT_ON((*e)->kind))) continue;
        fj_context_options co;
        fj_context_options_init(&co);
        co.backend = (*e)->kind;
        co.cpu_threads = o->threads;
        fj_context *ctx = NULL;
        fj_status s = fj_context_create(&co, &ctx);
        if (s) {
            printf("SKIP %-13s every case: the backend is not usable here: %s: %s\n", (*e)->name,
                   fj_status_name(s), fj_last_error());
            continue;
        }
        runs[n++] = (backend_run){.ctx = ctx, .kind = (*e)->kind};
        printf("# %s context:\n", (*e)->name);
        for (const char *line = fj_context_describe(ctx); *line;) {
            int len = (int)strcspn(line, "\n");
            printf("#   %.*s\n", len, line);
            line += len + (line[len] == '\n');
        }
    }
    fflush(stdout);
    return n;
}

static fj_context *reference_context(const options *o, backend_run *runs, int n, bool *owned)
{
    *owned = false;
    for (int b = 0; b < n; b++)
        if (runs[b].kind == FJ_BACKEND_CPU_REFERENCE) return runs[b].ctx;
    fj_context_options co;
    fj_context_options_init(&co);
    co.backend = FJ_BACKEND_CPU_REFERENCE;
    co.cpu_threads = o->threads;
    fj_context *ref = NULL;
    if (fj_context_create(&co, &ref) != FJ_OK) return NULL;
    *owned = true;
    return ref;
}

static void count(backend_run *r, fjt_verdict v)
{
    if (v == FJT_PASS) r->passed++;
    else if (v == FJT_FAIL) r->failed++;
    else r->skipped++;
}

/* Every backend's run of one case, judged; the reference runs first (when
 * its context exists) as the yardstick of the others. Backends are asked for
 * a plan first, so that a case no backend here takes (f32 on CUDA) costs no
 * oracle. */
static void check_case(const fjt_case *c, uint64_t seed, backend_run *runs, int n, fj_context *ref)
{
    fjt_output *outs = calloc((size_t)n, sizeof *outs);
    bool any = false;
    for (int b = 0; outs && b < n; b++) {
        fj_plan *plan = NULL;
        outs[b].backend = runs[b].kind;
        outs[b].status = fjt_case_plan(c, runs[b].ctx, &plan);
        snprintf(outs[b].message, sizeof outs[b].message, "%s", fj_last_error());
        fj_plan_destroy(plan);
        any |= outs[b].status != FJ_ERR_UNSUPPORTED || (c->must_run & FJT_ON(runs[b].kind));
    }
    fjt_problem p;
    double t0 = now();
    bool made = outs && any && fjt_case_problem(c, seed, &p);
    double oracle_s = now() - t0;
    if (outs && any && !made) {
        for (int b = 0; b < n; b++) {
            fjt_case_print(FJT_FAIL, c, runs[b].kind, "out of host memory making the problem");
            runs[b].failed++;
        }
        free(outs);
        return;
    }
    if (!outs) {
        for (int b = 0; b < n; b++) {
            fjt_case_print(FJT_FAIL, c, runs[b].kind, "out of host memory");
            runs[b].failed++;
        }
        return;
    }
    fjt_output yard;
    memset(&yard, 0, sizeof yard);
    t0 = now();
    if (made && ref) fjt_case_run(c, &p, ref, &yard);
    double ref_s = now() - t0;
    for (int b = 0; b < n; b++) {
        char note[1024];
        if (!made) { /* every backend said UNSUPPORTED, and may */
            fjt_verdict v = fjt_case_verdict(c, NULL, &outs[b], NULL, note, sizeof note);
            fjt_case_print(v, c, runs[b].kind, note);
            count(&runs[b], v);
            continue;
        }
        fjt_output *out = &outs[b];
        double run_s = ref_s;
        t0 = now();
        if (runs[b].ctx == ref) out = &yard;
        else if (out->status != FJ_ERR_UNSUPPORTED)
            fjt_case_run(c, &p, runs[b].ctx, out), run_s = now() - t0;
        fjt_verdict v = fjt_case_verdict(c, &p, out, ref ? &yard : NULL, note, sizeof note);
        if (v != FJT_SKIP) {
            size_t len = strlen(note);
            snprintf(note + len, sizeof note - len, " | %.3f s (oracle %.3f s)", run_s, oracle_s);
        }
        fjt_case_print(v, c, runs[b].kind, note);
        count(&runs[b], v);
        if (out != &yard) fjt_output_free(out);
    }
    fjt_output_free(&yard);
    if (made) fjt_problem_free(&p);
    free(outs);
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0) return rc;
    uint64_t seed = fjt_seed();
    fjt_case_list all = {0};
    if (!fjt_cases_build(&all, seed)) {
        fprintf(stderr, "fj_conformance: out of memory building the case list\n");
        return 1;
    }
    int chosen = 0;
    for (int i = 0; i < all.n; i++) chosen += selected(&all.cases[i], o.filter);
    if (o.list) {
        char what[640];
        for (int i = 0; i < all.n; i++) {
            if (!selected(&all.cases[i], o.filter)) continue;
            fjt_case_str(&all.cases[i], what, sizeof what);
            printf("%s work=%.3g%s\n", what, fjt_case_work(&all.cases[i]),
                   all.cases[i].heavy ? " heavy" : "");
        }
        printf("# %d of %d cases\n", chosen, all.n);
        fjt_case_list_free(&all);
        return 0;
    }
    if (!chosen) {
        fprintf(stderr,
                "fj_conformance: --filter '%s' matches none of the %d cases (--list shows them)\n",
                o.filter, all.n);
        fjt_case_list_free(&all);
        return 2;
    }

    backend_run runs[MAX_BACKENDS];
    int n = create_contexts(&o, runs);
    if (!n) {
        printf("SKIP: no requested backend is usable here; nothing ran\n");
        fjt_case_list_free(&all);
        return 77;
    }
    if (o.quick)
        printf("# --quick%s: the heavy cases are skipped (--full runs them)\n",
               DEFAULT_QUICK ? " (the default in a build with sanitizers)" : "");
    double t0 = now();
    bool owned_ref = false;
    fj_context *ref = o.perf ? NULL : reference_context(&o, runs, n, &owned_ref);
    if (!o.perf && !ref)
        printf("# no cpu-reference context (%s): the bounds relative to it are not checked\n",
               fj_last_error());
    if (o.perf) fjt_perf_header();
    for (int i = 0; i < all.n; i++) {
        const fjt_case *c = &all.cases[i];
        if (!selected(c, o.filter)) continue;
        if (o.quick && c->heavy) {
            char note[96];
            snprintf(note, sizeof note, "heavy (oracle work %.3g), and --quick", fjt_case_work(c));
            for (int b = 0; b < n; b++) {
                if (o.perf) { /* stdout keeps bench's table */
                    char what[640];
                    fjt_case_str(c, what, sizeof what);
                    fprintf(stderr, "SKIP %s %s: %s\n", fj_backend_name(runs[b].kind), what, note);
                } else {
                    fjt_case_print(FJT_SKIP, c, runs[b].kind, note);
                }
                runs[b].skipped++;
            }
            continue;
        }
        if (!o.perf) {
            check_case(c, seed, runs, n, ref);
            continue;
        }
        for (int b = 0; b < n; b++) {
            char why[512];
            fj_status s = fjt_perf_row(c, runs[b].ctx, seed, o.warmup, o.repeat, why, sizeof why);
            if (s == FJ_OK) {
                runs[b].passed++;
                continue;
            }
            char what[640];
            fjt_case_str(c, what, sizeof what);
            /* stderr, as bench's: stdout keeps bench's table */
            fprintf(stderr, "%s %s %s: %s: %s\n", s == FJ_ERR_UNSUPPORTED ? "SKIP" : "FAIL",
                    fj_backend_name(runs[b].kind), what, fj_status_name(s), why);
            if (s == FJ_ERR_UNSUPPORTED) runs[b].skipped++;
            else runs[b].failed++;
        }
    }
    int failed = 0, ran = 0;
    for (int b = 0; b < n; b++) {
        printf("# %s: %d %s, %d failed, %d skipped\n", fj_backend_name(runs[b].kind),
               runs[b].passed, o.perf ? "timed" : "passed", runs[b].failed, runs[b].skipped);
        failed += runs[b].failed;
        ran += runs[b].passed + runs[b].failed;
    }
    printf("# %d cases in %.1f s (seed %llu; rerun with FLASHJIT_TEST_SEED=%llu)\n", chosen,
           now() - t0, (unsigned long long)seed, (unsigned long long)seed);
    if (owned_ref) fj_context_destroy(ref);
    for (int b = 0; b < n; b++) fj_context_destroy(runs[b].ctx);
    fjt_case_list_free(&all);
    if (failed) return 1;
    if (!ran) {
        printf("SKIP: every selected case was skipped; nothing ran\n");
        return 77;
    }
    return 0;
}
