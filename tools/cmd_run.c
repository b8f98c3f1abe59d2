/* flashjit run: one problem from flags. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_problem.h"

static void help(void)
{
    printf("usage: flashjit run [problem flags] [--verbose]\n\n"
           "Plans and runs one problem on the chosen backend, timing --repeat runs after\n"
           "--warmup runs, and with --check compares the output with the CPU reference\n"
           "(a varlen or paged problem: each sequence as the dense problem of its lengths).\n\n%s"
           "  --verbose: also print the context's and the plan's describe text\n",
           cli_problem_flags_help());
}

int cmd_run(int argc, char **argv)
{
    cli_problem_flags f;
    cli_problem_flags_init(&f);
    bool verbose = false, heads_kv_set = false, seqlen_k_set = false, batch_set = false;
    char shape_flag[64] = ""; /* --batch, --seqlen-q or --seqlen-k, which --varlen sets */
    enum { OPT_VERBOSE = 1 };
    static const cli_option own[] = {{"verbose", no_argument, OPT_VERBOSE}, {NULL, 0, 0}};
    const cli_option *const tables[] = {own, cli_problem_options(), NULL};
    cli_options p;
    cli_options_begin(&p, "run", argc, argv, tables);
    const char *val;
    for (int c; (c = cli_next_option(&p, &val)) != -1;) {
        if (c == CLI_OPTION_ERROR || c == CLI_OPTION_HELP) {
            if (c == CLI_OPTION_HELP) help();
            cli_problem_flags_free(&f);
            return c == CLI_OPTION_HELP ? 0 : 2;
        }
        if (c == OPT_VERBOSE) {
            verbose = true;
            continue;
        }
        if (!strcmp(p.flag, "--heads-kv")) heads_kv_set = true;
        if (!strcmp(p.flag, "--seqlen-k")) seqlen_k_set = true;
        if (!strcmp(p.flag, "--batch")) batch_set = true;
        if (!strcmp(p.flag, "--batch") || !strcmp(p.flag, "--seqlen-q") ||
            !strcmp(p.flag, "--seqlen-k"))
            snprintf(shape_flag, sizeof shape_flag, "%s", p.flag);
        if (cli_problem_option("run", c, p.flag, val, &f) < 0) {
            cli_problem_flags_free(&f);
            return 2;
        }
    }
    if (f.varlen.n && shape_flag[0]) {
        cli_problem_flags_free(&f);
        return cli_usage_error("run",
                               "%s and --varlen: --varlen sets batch, seqlen-q and seqlen-k (the "
                               "number of sequences and the longest lengths)",
                               shape_flag);
    }
    const bool paged = (f.d.features & FJ_FEATURE_PAGED_KV) != 0;
    const char *bad = !paged && f.nkv             ? "--kv-lens needs --page-size (the KV lengths "
                                                    "of a paged cache's sequences)"
                      : !paged && f.shuffle_pages ? "--shuffle-pages needs --page-size (it "
                                                    "orders a paged cache's pages)"
                      : f.nkv && f.varlen.n       ? "--kv-lens and --varlen: with --page-size, "
                                                    "--varlen's Q:K items are the sequences' KV "
                                                    "lengths"
                      : f.nkv && batch_set        ? "--batch and --kv-lens: --kv-lens sets batch "
                                                    "(the number of sequences)"
                                                  : NULL;
    if (bad) {
        cli_problem_flags_free(&f);
        return cli_usage_error("run", "%s", bad);
    }
    if (cli_no_arguments(&p)) {
        cli_problem_flags_free(&f);
        return 2;
    }
    if (!heads_kv_set) f.d.heads_kv = f.d.heads_q;
    if (f.nkv) {
        f.d.batch = f.nkv;
        if (!seqlen_k_set) { /* the longest; else --seqlen-k bounds them (the library checks) */
            f.d.seqlen_k = 1;
            for (int b = 0; b < f.nkv; b++)
                if (f.kv_lens[b] > f.d.seqlen_k) f.d.seqlen_k = f.kv_lens[b];
        }
    }
    if (!seqlen_k_set && !f.varlen.n && !f.nkv) f.d.seqlen_k = f.d.seqlen_q;
    cli_varlen seqs; /* a varlen or paged problem's sequences */
    if (!cli_problem_sequences(&f, &seqs)) {
        cli_problem_flags_free(&f);
        fprintf(stderr, "flashjit run: out of memory for the sequences' lengths\n");
        return 1;
    }
    if (paged) cli_paged_layout(&f.d, &seqs);

    fj_status s = fj_attention_desc_validate(&f.d);
    if (s) {
        cli_varlen_free(&seqs);
        cli_problem_flags_free(&f);
        return cli_fail("run", s);
    }
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = f.backend;
    fj_context *ctx = NULL, *ref = NULL;
    if ((s = fj_context_create(&o, &ctx))) {
        cli_varlen_free(&seqs);
        cli_problem_flags_free(&f);
        return cli_fail("run", s);
    }
    if (f.check) {
        o.backend = FJ_BACKEND_CPU_REFERENCE;
        if ((s = fj_context_create(&o, &ref))) {
            fj_context_destroy(ctx);
            cli_varlen_free(&seqs);
            cli_problem_flags_free(&f);
            return cli_fail("run", s);
        }
    }
    if (verbose) printf("%s\n", fj_context_describe(ctx));
    cli_result r;
    s = cli_measure_ex(ctx, ref, &f.d, &seqs, f.shuffle_pages, f.warmup, f.repeat, f.lse, f.seed,
                       &r);
    int rc = 0;
    if (s) {
        rc = cli_fail("run", s);
    } else {
        char shape[128];
        cli_shape_str(&f.d, shape, sizeof shape);
        /* Plan creation now finds the kernel in the context (cli_measure made
           the first plan), and execute's host cost is the launch alone. */
        fj_plan *plan;
        double t0 = cli_now();
        if (fj_plan_create(ctx, &f.d, &plan) == FJ_OK) {
            double t1 = cli_now();
            if (verbose) printf("%s\n", fj_plan_describe(plan));
            printf("plan creation: %.3f ms the first time (%s), %.3f ms again in this context\n",
                   r.plan_ms, r.plan_note, (t1 - t0) * 1e3);
            fj_plan_destroy(plan);
        }
        if (r.host_us > 0) printf("host time per fj_plan_execute call: %.1f us\n", r.host_us);
        if (f.varlen.n) {
            long long tq = 0, tk = 0;
            for (int b = 0; b < f.varlen.n; b++) {
                tq += f.varlen.len_q[b];
                tk += f.varlen.len_k[b];
            }
            printf("varlen: %d sequences, %lld query and %lld key tokens (TFLOP/s and GB/s "
                   "from each sequence's lengths)\n",
                   f.varlen.n, tq, tk);
        }
        if (paged) {
            long long keys = 0, pages = 0;
            for (int b = 0; b < seqs.n; b++) {
                keys += seqs.len_k[b];
                pages += (seqs.len_k[b] + f.d.page_size - 1) / f.d.page_size;
            }
            printf("paged: %d sequences, %lld keys in %lld pages of %d keys (%s), pools of %d "
                   "pages, block table %d x %d\n",
                   seqs.n, keys, pages, f.d.page_size,
                   f.shuffle_pages ? "shuffled" : "in pool order", f.d.num_pages, seqs.n,
                   f.d.max_pages);
        }
        printf("%-14s %-46s %10s %10s %9s %9s %s\n", "backend", "problem", "ms", "TFLOP/s", "GB/s",
               "rel.err", "kernel");
        char err[32] = "-";
        if (r.rel_err >= 0) snprintf(err, sizeof err, "%.2e", r.rel_err);
        printf("%-14s %-46s %10.4f %10.3f %9.1f %9s %s\n", r.backend, shape, r.ms_median, r.tflops,
               r.gbps, err, r.kernel);
        printf("(median of %d runs after %d warm-up; min %.4f ms, max %.4f ms)\n", r.runs, f.warmup,
               r.ms_min, r.ms_max);
        if (!r.ok) {
            fprintf(stderr, "flashjit run: check FAILED: relative error %.3e exceeds %.1e\n",
                    r.rel_err, r.tolerance);
            rc = 1;
        }
    }
    cli_result_free(&r);
    fj_context_destroy(ref);
    fj_context_destroy(ctx);
    cli_varlen_free(&seqs);
    cli_problem_flags_free(&f);
    return rc;
}
