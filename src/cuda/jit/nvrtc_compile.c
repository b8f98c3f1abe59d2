/* NVRTC compile of one generated source to a cubin, or to PTX when the
 * device is newer than the loaded NVRTC knows. The options are fixed here
 * and exposed (fj_nvrtc_target), because they change the binary and so
 * belong in the cache key. */
#include "cuda/jit/nvrtc_compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda_api.h"
#include "log.h"
#include "status.h"

/* nvrtcResult values used (nvrtc.h) */
enum { NVRTC_SUCCESS = 0, NVRTC_ERROR_OUT_OF_MEMORY = 1 };

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *nvrtc_error(const fj_cuda_api *api, nvrtcResult r)
{
    const char *s = api->nvrtcGetErrorString ? api->nvrtcGetErrorString(r) : NULL;
    return s ? s : "unknown NVRTC error";
}

/* The arch to compile for: arch itself when listed, else the newest listed
 * one below it; 0 when none is. Without nvrtcGetSupportedArchs (NVRTC older
 * than 11.2) the arch is taken as supported and NVRTC's own error says
 * otherwise. */
static fj_status choose_arch(const fj_cuda_api *api, unsigned arch, unsigned *chosen, bool *exact)
{
    *chosen = arch;
    *exact = true;
    if (!api->nvrtcGetNumSupportedArchs || !api->nvrtcGetSupportedArchs) return FJ_OK;
    int n = 0;
    nvrtcResult r = api->nvrtcGetNumSupportedArchs(&n);
    if (r != NVRTC_SUCCESS || n <= 0)
        return fj_fail(FJ_ERR_NO_DEVICE, "nvrtcGetNumSupportedArchs failed: %s",
                       r != NVRTC_SUCCESS ? nvrtc_error(api, r) : "no archs");
    int *archs = malloc((size_t)n * sizeof *archs);
    if (!archs) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory listing NVRTC's archs");
    r = api->nvrtcGetSupportedArchs(archs);
    if (r != NVRTC_SUCCESS) {
        free(archs);
        return fj_fail(FJ_ERR_NO_DEVICE, "nvrtcGetSupportedArchs failed: %s", nvrtc_error(api, r));
    }
    unsigned best = 0;
    char listed[256] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        unsigned a = archs[i] > 0 ? (unsigned)archs[i] : 0;
        if (a == arch) {
            free(archs);
            return FJ_OK;
        }
        if (a < arch && a > best) best = a;
        if (used < sizeof listed) {
            int w = snprintf(listed + used, sizeof listed - used, "%s%u", i ? " " : "", a);
            if (w > 0) used += (size_t)w;
        }
    }
    free(archs);
    if (!best)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "NVRTC %d.%d cannot compile for sm_%u or any older arch (it supports %s)",
                       api->nvrtc_major, api->nvrtc_minor, arch, listed);
    *chosen = best;
    *exact = false;
    return FJ_OK;
}

/* The option list and its text for t->target. -std=c++17: what the
 * templates are written in, stated rather than left to NVRTC's default.
 * --fmad=true: FFMA in the softmax and the rescales (NVRTC's default, stated
 * because it changes results). -default-device: the templates' helpers carry
 * no __device__. */
static void set_options(fj_nvrtc_target *t)
{
    snprintf(t->options[0], sizeof t->options[0], "--gpu-architecture=%s", t->target);
    snprintf(t->options[1], sizeof t->options[1], "-std=c++17");
    snprintf(t->options[2], sizeof t->options[2], "--fmad=true");
    snprintf(t->options[3], sizeof t->options[3], "-default-device");
    t->num_options = 4;
    size_t used = 0;
    for (int i = 0; i < t->num_options; i++) {
        int w = snprintf(t->options_text + used, sizeof t->options_text - used, "%s%s",
                         i ? " " : "", t->options[i]);
        if (w > 0) used += (size_t)w;
    }
}

fj_status fj_nvrtc_target_for_arch(unsigned arch, bool want_ptx, fj_nvrtc_target *t)
{
    memset(t, 0, sizeof *t);
    const fj_cuda_api *api;
    fj_status s = fj_cuda_nvrtc(&api);
    if (s != FJ_OK) return s;
    unsigned chosen;
    bool exact;
    if ((s = choose_arch(api, arch, &chosen, &exact)) != FJ_OK) return s;
    t->nvrtc_major = api->nvrtc_major;
    t->nvrtc_minor = api->nvrtc_minor;
    t->is_ptx = want_ptx || !exact;
    snprintf(t->target, sizeof t->target, "%s_%u", t->is_ptx ? "compute" : "sm", chosen);
    if (!exact)
        FJ_DEBUG("NVRTC %d.%d does not list sm_%u: compiling PTX for %s for the driver to JIT",
                 t->nvrtc_major, t->nvrtc_minor, arch, t->target);

    set_options(t);
    return FJ_OK;
}

fj_status fj_nvrtc_target_arch_specific(fj_nvrtc_target *t, unsigned arch)
{
    char want[16];
    snprintf(want, sizeof want, "%s_%u", t->is_ptx ? "compute" : "sm", arch);
    size_t n = strlen(want);
    if (!strncmp(t->target, want, n) && !strcmp(t->target + n, "a")) return FJ_OK; /* already */
    if (strcmp(t->target, want))
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "NVRTC %d.%d does not know sm_%u (it would build %s): it cannot build "
                       "the arch-specific sm_%ua image this kernel needs",
                       t->nvrtc_major, t->nvrtc_minor, arch, t->target, arch);
    if (n + 2 > sizeof t->target)
        return fj_fail(FJ_ERR_INTERNAL, "target name %sa is too long", want);
    memcpy(t->target, want, n);
    t->target[n] = 'a';
    t->target[n + 1] = '\0';
    set_options(t);
    return FJ_OK;
}

/* The program log, malloc'd ("" when there is none or it cannot be read). */
static char *program_log(const fj_cuda_api *api, nvrtcProgram prog)
{
    size_t n = 0;
    if (api->nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS) n = 0;
    char *log = malloc(n + 1);
    if (!log) return NULL;
    if (n == 0 || api->nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) n = 0;
    log[n] = '\0';
    /* Trailing newlines would end the message with empty lines. */
    size_t len = strlen(log);
    while (len && (log[len - 1] == '\n' || log[len - 1] == '\r')) log[--len] = '\0';
    return log;
}

static fj_status nvrtc_fail(const fj_cuda_api *api, nvrtcResult r, const char *call,
                            const char *name)
{
    return fj_fail(r == NVRTC_ERROR_OUT_OF_MEMORY ? FJ_ERR_OUT_OF_MEMORY : FJ_ERR_COMPILE,
                   "%s failed for kernel %s: %s", call, name, nvrtc_error(api, r));
}

fj_status fj_nvrtc_compile(const fj_nvrtc_target *t, const char *name, const char *source,
                           void **image, size_t *size, double *seconds)
{
    *image = NULL;
    *size = 0;
    *seconds = 0;
    const fj_cuda_api *api;
    fj_status s = fj_cuda_nvrtc(&api);
    if (s != FJ_OK) return s;

    double t0 = now_seconds();
    nvrtcProgram prog = NULL;
    nvrtcResult r = api->nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) return nvrtc_fail(api, r, "nvrtcCreateProgram", name);

    const char *opts[FJ_NVRTC_MAX_OPTIONS];
    for (int i = 0; i < t->num_options; i++) opts[i] = t->options[i];
    r = api->nvrtcCompileProgram(prog, t->num_options, opts);
    char *log = program_log(api, prog);
    if (!log) {
        api->nvrtcDestroyProgram(&prog);
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory reading NVRTC's log for kernel %s",
                       name);
    }
    if (r != NVRTC_SUCCESS) {
        s = fj_fail(r == NVRTC_ERROR_OUT_OF_MEMORY ? FJ_ERR_OUT_OF_MEMORY : FJ_ERR_COMPILE,
                    "NVRTC failed to compile %s (options: %s):\n%s", name, t->options_text,
                    *log ? log : nvrtc_error(api, r));
        free(log);
        api->nvrtcDestroyProgram(&prog);
        return s;
    }
    if (*log) FJ_DEBUG("NVRTC log of %s (options: %s):\n%s", name, t->options_text, log);
    free(log);

    size_t n = 0;
    r = t->is_ptx ? api->nvrtcGetPTXSize(prog, &n) : api->nvrtcGetCUBINSize(prog, &n);
    if (r != NVRTC_SUCCESS) {
        s = nvrtc_fail(api, r, t->is_ptx ? "nvrtcGetPTXSize" : "nvrtcGetCUBINSize", name);
        api->nvrtcDestroyProgram(&prog);
        return s;
    }
    char *data = malloc(n + 1);
    if (!data) {
        api->nvrtcDestroyProgram(&prog);
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory (%zu bytes) for the image of kernel %s",
                       n + 1, name);
    }
    r = t->is_ptx ? api->nvrtcGetPTX(prog, data) : api->nvrtcGetCUBIN(prog, data);
    api->nvrtcDestroyProgram(&prog);
    if (r != NVRTC_SUCCESS) {
        free(data);
        return nvrtc_fail(api, r, t->is_ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN", name);
    }
    data[n] = '\0';
    /* NVRTC's PTX size counts its NUL; the image size does not. */
    if (t->is_ptx) n = strlen(data);
    *image = data;
    *size = n;
    *seconds = now_seconds() - t0;
    return FJ_OK;
}
