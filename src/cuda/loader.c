/* Loads the CUDA driver (libcuda.so.1) and NVRTC at first use, each once per
 * process and independently of the other: `flashjit compile-all` needs NVRTC
 * on machines that have no driver, and the CPU backends need neither.
 *
 * The driver is asked for two symbols only, cuDriverGetVersion and
 * cuGetProcAddress_v2; every other entry point comes from cuGetProcAddress
 * at FJ_CUDA_API_VERSION under its base name, so the driver hands us the ABI
 * of that CUDA version (cuMemAlloc_v2 for "cuMemAlloc"), where a plain dlsym
 * would give the CUDA 3 one. NVRTC has no such versioning: plain dlsym.
 *
 * A failed load is remembered with its reason, and every later call reports
 * the same reason, so a program sees one consistent story. NVRTC is never
 * unloaded: it keeps threads and atexit handlers that crash after dlclose. */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_api.h"
#include "log.h"
#include "status.h"

/* One slot of the table: the entry point's name and where its pointer lives.
 * The same list resolves the real table and checks a test's table. */
typedef struct api_entry {
    const char *name;
    size_t offset;
} api_entry;

#define ENTRY(f)                     \
    {                                \
#f, offsetof(fj_cuda_api, f) \
    }

/* Resolved through cuGetProcAddress (cuDriverGetVersion comes from dlsym,
 * before anything else, to check the version). */
static const api_entry driver_entries[] = {
    ENTRY(cuInit),
    ENTRY(cuGetErrorName),
    ENTRY(cuGetErrorString),
    ENTRY(cuDeviceGetCount),
    ENTRY(cuDeviceGet),
    ENTRY(cuDeviceGetName),
    ENTRY(cuDeviceGetAttribute),
    ENTRY(cuDeviceTotalMem),
    ENTRY(cuDevicePrimaryCtxRetain),
    ENTRY(cuDevicePrimaryCtxRelease),
    ENTRY(cuCtxPushCurrent),
    ENTRY(cuCtxPopCurrent),
    ENTRY(cuCtxSynchronize),
    ENTRY(cuModuleLoadData),
    ENTRY(cuModuleUnload),
    ENTRY(cuModuleGetFunction),
    ENTRY(cuFuncSetAttribute),
    ENTRY(cuFuncGetAttribute),
    ENTRY(cuOccupancyMaxActiveBlocksPerMultiprocessor),
    ENTRY(cuLaunchKernel),
    ENTRY(cuLaunchKernelEx),
    ENTRY(cuTensorMapEncodeTiled),
    ENTRY(cuMemAlloc),
    ENTRY(cuMemFree),
    ENTRY(cuMemcpyHtoD),
    ENTRY(cuMemcpyDtoH),
    ENTRY(cuMemsetD8),
    ENTRY(cuStreamSynchronize),
    ENTRY(cuEventCreate),
    ENTRY(cuEventRecord),
    ENTRY(cuEventSynchronize),
    ENTRY(cuEventElapsedTime),
    ENTRY(cuEventDestroy),
};

static const api_entry nvrtc_entries[] = {
    ENTRY(nvrtcVersion),
    ENTRY(nvrtcGetNumSupportedArchs),
    ENTRY(nvrtcGetSupportedArchs),
    ENTRY(nvrtcGetErrorString),
    ENTRY(nvrtcCreateProgram),
    ENTRY(nvrtcDestroyProgram),
    ENTRY(nvrtcCompileProgram),
    ENTRY(nvrtcGetProgramLogSize),
    ENTRY(nvrtcGetProgramLog),
    ENTRY(nvrtcGetCUBINSize),
    ENTRY(nvrtcGetCUBIN),
    ENTRY(nvrtcGetPTXSize),
    ENTRY(nvrtcGetPTX),
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* POSIX guarantees that a function pointer fits in and survives a void *
 * (dlsym depends on it); memcpy keeps the conversion free of casts. */
static void set_slot(fj_cuda_api *api, const api_entry *e, void *fn)
{
    memcpy((char *)api + e->offset, &fn, sizeof fn);
}

static int slot_empty(const fj_cuda_api *api, const api_entry *e)
{
    void *fn;
    memcpy(&fn, (const char *)api + e->offset, sizeof fn);
    return fn == NULL;
}

/* ---- the real table ------------------------------------------------------ */

/* Written only inside the two pthread_once routines, each to its own fields,
 * and read only after the matching pthread_once returned. */
static fj_cuda_api real_api;

typedef struct load_result {
    pthread_once_t once;
    fj_status status;
    char reason[2048];
} load_result;

static load_result driver_load = {PTHREAD_ONCE_INIT, FJ_OK, ""};
static load_result nvrtc_load = {PTHREAD_ONCE_INIT, FJ_OK, ""};

static const fj_cuda_api *override_api;

static fj_status load_failed(load_result *r, const char *fmt, ...) FJ_PRINTF(2, 3);
static fj_status load_failed(load_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
    r->status = FJ_ERR_NO_DEVICE;
    return r->status;
}

/* The file the dynamic loader actually opened (a bare soname resolves to a
 * path), for describe and messages. */
static void loaded_path(void *handle, const char *fallback, char *out, size_t n)
{
    struct link_map *lm = NULL;
    const char *path = fallback;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
        path = lm->l_name;
    snprintf(out, n, "%s", path);
}

static const char *proc_status_text(CUdriverProcAddressQueryResult st)
{
    switch (st) {
    case 1: return "symbol not found";
    case 2: return "the driver's version of it is newer than the version asked for";
    default: return "unknown status";
    }
}

/* The version check, shared by the real table and a test's table: 0 when
 * the version will do, else 1 with the reason in buf. */
static int version_too_old(int version, const char *path, char *buf, size_t n)
{
    if (version >= FJ_CUDA_API_VERSION) return 0;
    snprintf(buf, n,
             "the CUDA driver %s is version %d.%d (%d); flashjit needs %d.%d (%d) or newer: "
             "update the NVIDIA driver, or set FLASHJIT_LIBCUDA to a newer libcuda.so.1",
             path, version / 1000, version % 1000 / 10, version, FJ_CUDA_API_VERSION / 1000,
             FJ_CUDA_API_VERSION % 1000 / 10, FJ_CUDA_API_VERSION);
    return 1;
}

typedef CUresult (*get_proc_address_fn)(const char *symbol, void **pfn, int cuda_version,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *symbol_status);
typedef CUresult (*driver_get_version_fn)(int *version);

static void load_driver(void)
{
    load_result *r = &driver_load;
    const char *env = getenv("FLASHJIT_LIBCUDA");
    const char *name = env && *env ? env : "libcuda.so.1";
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *err = dlerror();
        if (env && *env)
            load_failed(r,
                        "cannot load the CUDA driver from FLASHJIT_LIBCUDA=%s: %s; set "
                        "FLASHJIT_LIBCUDA to the path of libcuda.so.1, or unset it",
                        name, err ? err : "unknown dlopen error");
        else
            load_failed(r,
                        "cannot load the CUDA driver libcuda.so.1: %s; install the NVIDIA "
                        "driver, or set FLASHJIT_LIBCUDA to its path",
                        err ? err : "unknown dlopen error");
        return;
    }
    char path[sizeof real_api.driver_path];
    loaded_path(h, name, path, sizeof path);

    void *sym = dlsym(h, "cuDriverGetVersion");
    if (!sym) {
        load_failed(r,
                    "%s is not a CUDA driver: it has no cuDriverGetVersion; set "
                    "FLASHJIT_LIBCUDA to the path of libcuda.so.1",
                    path);
        dlclose(h);
        return;
    }
    driver_get_version_fn get_version;
    memcpy(&get_version, &sym, sizeof sym);
    int version = 0;
    CUresult cr = get_version(&version);
    if (cr != FJ_CUDA_SUCCESS) {
        load_failed(r, "cuDriverGetVersion of the CUDA driver %s failed with CUresult %d", path,
                    cr);
        dlclose(h);
        return;
    }
    char old[512];
    if (version_too_old(version, path, old, sizeof old)) {
        load_failed(r, "%s", old);
        dlclose(h);
        return;
    }

    sym = dlsym(h, "cuGetProcAddress_v2");
    if (!sym) {
        load_failed(r,
                    "the CUDA driver %s (version %d) has no cuGetProcAddress_v2; flashjit "
                    "needs a CUDA %d.%d or newer driver",
                    path, version, FJ_CUDA_API_VERSION / 1000, FJ_CUDA_API_VERSION % 1000 / 10);
        dlclose(h);
        return;
    }
    get_proc_address_fn get_proc;
    memcpy(&get_proc, &sym, sizeof sym);

    fj_cuda_api api;
    memset(&api, 0, sizeof api);
    for (size_t i = 0; i < COUNT(driver_entries); i++) {
        const api_entry *e = &driver_entries[i];
        void *fn = NULL;
        CUdriverProcAddressQueryResult st = 0;
        cr = get_proc(e->name, &fn, FJ_CUDA_API_VERSION, FJ_CU_GET_PROC_ADDRESS_DEFAULT, &st);
        if (cr != FJ_CUDA_SUCCESS || st != 0 || !fn) {
            load_failed(r,
                        "the CUDA driver %s (version %d) does not provide %s for CUDA %d: "
                        "cuGetProcAddress returned CUresult %d, %s",
                        path, version, e->name, FJ_CUDA_API_VERSION, cr,
                        st ? proc_status_text(st) : "no function");
            dlclose(h);
            return;
        }
        set_slot(&api, e, fn);
    }

    /* Only the driver's fields: load_nvrtc may be filling its own meanwhile. */
    for (size_t i = 0; i < COUNT(driver_entries); i++) {
        void *fn;
        memcpy(&fn, (char *)&api + driver_entries[i].offset, sizeof fn);
        set_slot(&real_api, &driver_entries[i], fn);
    }
    real_api.cuDriverGetVersion = get_version;
    real_api.driver_version = version;
    memcpy(real_api.driver_path, path, sizeof path);
    r->status = FJ_OK;
    FJ_INFO("cuda: loaded driver %s, version %d", path, version);
    /* The handle stays open for the life of the process. */
}

typedef nvrtcResult (*nvrtc_version_fn)(int *major, int *minor);

/* Resolves every NVRTC symbol from h into real_api; FJ_OK or the reason. */
static fj_status bind_nvrtc(load_result *r, void *h, const char *path)
{
    fj_cuda_api api;
    memset(&api, 0, sizeof api);
    for (size_t i = 0; i < COUNT(nvrtc_entries); i++) {
        void *fn = dlsym(h, nvrtc_entries[i].name);
        if (!fn)
            return load_failed(r,
                               "%s is not a usable NVRTC: it has no %s; set FLASHJIT_LIBNVRTC to "
                               "the path of libnvrtc.so (CUDA 12 or newer)",
                               path, nvrtc_entries[i].name);
        set_slot(&api, &nvrtc_entries[i], fn);
    }
    int major = 0, minor = 0;
    nvrtcResult nr = api.nvrtcVersion(&major, &minor);
    if (nr != 0)
        return load_failed(r, "nvrtcVersion of %s failed: %s", path, api.nvrtcGetErrorString(nr));
    for (size_t i = 0; i < COUNT(nvrtc_entries); i++) {
        void *fn;
        memcpy(&fn, (char *)&api + nvrtc_entries[i].offset, sizeof fn);
        set_slot(&real_api, &nvrtc_entries[i], fn);
    }
    real_api.nvrtc_major = major;
    real_api.nvrtc_minor = minor;
    snprintf(real_api.nvrtc_path, sizeof real_api.nvrtc_path, "%s", path);
    r->status = FJ_OK;
    FJ_INFO("cuda: loaded NVRTC %s, version %d.%d", path, major, minor);
    return FJ_OK;
}

static void load_nvrtc(void)
{
    load_result *r = &nvrtc_load;
    const char *env = getenv("FLASHJIT_LIBNVRTC");
    void *h;
    char path[sizeof real_api.nvrtc_path] = "";
    if (env && *env) {
        if (!(h = dlopen(env, RTLD_NOW | RTLD_LOCAL))) {
            const char *err = dlerror();
            load_failed(r,
                        "cannot load NVRTC from FLASHJIT_LIBNVRTC=%s: %s; set FLASHJIT_LIBNVRTC "
                        "to the path of libnvrtc.so, or unset it",
                        env, err ? err : "unknown dlopen error");
            return;
        }
        loaded_path(h, env, path, sizeof path);
    } else {
        /* Newest first: a CUDA 13 NVRTC knows the newest GPUs. */
        static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
        char tried[1536] = "";
        h = NULL;
        for (size_t i = 0; i < COUNT(names) && !h; i++) {
            if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) {
                loaded_path(h, names[i], path, sizeof path);
                break;
            }
            const char *err = dlerror();
            size_t used = strlen(tried);
            snprintf(tried + used, sizeof tried - used, "%s%s", used ? "; " : "",
                     err ? err : names[i]);
        }
        if (!h) {
            load_failed(r,
                        "cannot load NVRTC (tried libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so: "
                        "%s); install the CUDA NVRTC runtime (it compiles the kernels), or set "
                        "FLASHJIT_LIBNVRTC to its path",
                        tried);
            return;
        }
    }
    /* On failure too the handle stays open: see the top of the file. */
    bind_nvrtc(r, h, path);
}

/* ---- a test's table ------------------------------------------------------ */

/* A test's table must look like a loaded one; checking it with the same
 * entry lists makes a missing entry a clear failure, not a NULL call. */
static fj_status check_override(const api_entry *entries, size_t n, const char *part,
                                const char *path)
{
    for (size_t i = 0; i < n; i++)
        if (slot_empty(override_api, &entries[i]))
            return fj_fail(FJ_ERR_NO_DEVICE,
                           "the %s table installed by fj_cuda_api_override (\"%s\") has no %s",
                           part, path, entries[i].name);
    return FJ_OK;
}

/* ---- the interface --------------------------------------------------------- */

fj_status fj_cuda_driver(const fj_cuda_api **api)
{
    *api = NULL;
    if (override_api) {
        fj_status s = check_override(driver_entries, COUNT(driver_entries), "CUDA driver",
                                     override_api->driver_path);
        if (!s && !override_api->cuDriverGetVersion)
            s = fj_fail(FJ_ERR_NO_DEVICE,
                        "the CUDA driver table installed by fj_cuda_api_override (\"%s\") has no "
                        "cuDriverGetVersion",
                        override_api->driver_path);
        if (s) return s;
        char old[512];
        if (version_too_old(override_api->driver_version, override_api->driver_path, old,
                            sizeof old))
            return fj_fail(FJ_ERR_NO_DEVICE, "%s", old);
        *api = override_api;
        return FJ_OK;
    }
    pthread_once(&driver_load.once, load_driver);
    if (driver_load.status) return fj_fail(driver_load.status, "%s", driver_load.reason);
    *api = &real_api;
    return FJ_OK;
}

fj_status fj_cuda_nvrtc(const fj_cuda_api **api)
{
    *api = NULL;
    if (override_api) {
        fj_status s =
            check_override(nvrtc_entries, COUNT(nvrtc_entries), "NVRTC", override_api->nvrtc_path);
        if (s) return s;
        *api = override_api;
        return FJ_OK;
    }
    pthread_once(&nvrtc_load.once, load_nvrtc);
    if (nvrtc_load.status) return fj_fail(nvrtc_load.status, "%s", nvrtc_load.reason);
    *api = &real_api;
    return FJ_OK;
}

void fj_cuda_api_override(const fj_cuda_api *fake) { override_api = fake; }

fj_status fj_cuda_fail(const fj_cuda_api *api, CUresult r, const char *what)
{
    const char *name = NULL, *text = NULL;
    if (api && api->cuGetErrorName && api->cuGetErrorName(r, &name) != FJ_CUDA_SUCCESS) name = NULL;
    if (api && api->cuGetErrorString && api->cuGetErrorString(r, &text) != FJ_CUDA_SUCCESS)
        text = NULL;
    fj_status s = r == FJ_CUDA_ERROR_OUT_OF_MEMORY ? FJ_ERR_OUT_OF_MEMORY : FJ_ERR_DRIVER;
    if (name) return fj_fail(s, "%s failed: %s (%s)", what, name, text ? text : "no description");
    return fj_fail(s, "%s failed: CUDA error %d (unknown to this driver)", what, r);
}
