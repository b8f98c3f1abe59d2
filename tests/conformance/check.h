/* Running a conformance case on a backend and judging its output against the
 * double oracle (tests/common/harness.h) and the CPU reference's output, by
 * the bounds the case states (fjt_case_bounds). Shared by the driver and the
 * backend suites that check cases of their own (forced blocks, thread
 * counts). */
#ifndef FJT_CHECK_H
#define FJT_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "case.h"
#include "harness.h"

/* The problem of c: inputs from fjt_case_seed(c, suite_seed), the oracle on
 * c's rows. False when out of memory. */
bool fjt_case_problem(const fjt_case *c, uint64_t suite_seed, fjt_problem *p);

/* fj_plan_create for c on ctx with c's knob set in the environment. */
fj_status fjt_case_plan(const fjt_case *c, fj_context *ctx, fj_plan **plan);

/* One backend's run of a case. */
typedef struct fjt_output {
    fj_backend backend; /* what the context resolved to */
    fj_status status;   /* FJ_OK, or the failing call's (message in `message`) */
    char message[512];  /* fj_last_error() of the failure; for UNSUPPORTED the backend's reason */
    char kernel[160];   /* the plan's kernel (CUDA) or method (CPU) */
    void *o;            /* host copy of the output (o_elems; poisoned before the run) */
    float *lse;         /* host copy of lse, or NULL when the case has none */
    fjt_error err;      /* against the oracle */
} fjt_output;

/* Runs c through a plan on ctx with poisoned outputs; the case's knob is set
 * in the environment while the plan is created. out->status says how it went;
 * returns it. */
fj_status fjt_case_run(const fjt_case *c, const fjt_problem *p, fj_context *ctx, fjt_output *out);
void fjt_output_free(fjt_output *out);

/* Judges a successful run: true when within c's bounds for out->backend.
 * ref is the cpu-reference's run of the same problem (NULL: the bounds that
 * need it are not checked, and said so in the note). Writes what was
 * measured, and on failure which bound broke, to note. */
bool fjt_case_judge(const fjt_case *c, const fjt_problem *p, const fjt_output *out,
                    const fjt_output *ref, char *note, size_t n);

typedef enum fjt_verdict { FJT_PASS, FJT_FAIL, FJT_SKIP } fjt_verdict;

/* The verdict on a run: SKIP when the backend answered UNSUPPORTED and c
 * allows it (note: the backend's reason), FAIL when a call failed, the
 * yardstick ref failed, or a bound broke (fjt_case_judge), else PASS. ref may
 * be out itself (the reference's own run) or NULL. */
fjt_verdict fjt_case_verdict(const fjt_case *c, const fjt_problem *p, const fjt_output *out,
                             const fjt_output *ref, char *note, size_t n);

/* Runs c on ctx (and, when ref is not NULL, on the reference context ref as
 * the yardstick), judges it and prints one line: "ok", "FAIL" or "SKIP"
 * (UNSUPPORTED where c allows it, with the backend's reason). */
fjt_verdict fjt_case_check(const fjt_case *c, uint64_t suite_seed, fj_context *ctx,
                           fj_context *ref);

/* Prints the verdict line of c on backend b. */
void fjt_case_print(fjt_verdict v, const fjt_case *c, fj_backend b, const char *note);

#endif
