/* The CUDA device of one context: discovery (driver, NVRTC, device, primary
 * context), device memory and synchronize. Every driver call made for a
 * context runs with that context's primary context pushed, so contexts on
 * different GPUs in one process, or an application's own current context,
 * never see each other's state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/device.h"
#include "log.h"
#include "status.h"

fj_status fj_cuda_push(const fj_cuda_state *s)
{
    CUresult r = s->api->cuCtxPushCurrent(s->primary);
    return r == FJ_CUDA_SUCCESS ? FJ_OK : fj_cuda_fail(s->api, r, "cuCtxPushCurrent");
}

void fj_cuda_pop(const fj_cuda_state *s)
{
    CUcontext popped;
    CUresult r = s->api->cuCtxPopCurrent(&popped);
    /* Nothing useful to do about it: the work itself went through. */
    if (r != FJ_CUDA_SUCCESS) FJ_DEBUG("cuda: cuCtxPopCurrent returned %d", r);
}

/* ---- discovery --------------------------------------------------------------- */

/* Device discovery that fails means "no usable device" (so AUTO falls back
 * to the CPU), except when memory ran out. */
static fj_status discovery_fail(const fj_cuda_api *api, CUresult r, const char *what)
{
    fj_status s = fj_cuda_fail(api, r, what);
    return s == FJ_ERR_OUT_OF_MEMORY ? s : FJ_ERR_NO_DEVICE;
}

static fj_status attribute(fj_cuda_state *s, int attrib, const char *name, int *value)
{
    CUresult r = s->api->cuDeviceGetAttribute(value, attrib, s->device);
    if (r == FJ_CUDA_SUCCESS) return FJ_OK;
    discovery_fail(s->api, r, "cuDeviceGetAttribute");
    return fj_fail_prefix(FJ_ERR_NO_DEVICE, "reading %s of CUDA device %d", name, s->ordinal);
}

static fj_status read_device(fj_cuda_state *s)
{
    const fj_cuda_api *api = s->api;
    CUresult r;
    if ((r = api->cuDeviceGet(&s->device, s->ordinal)))
        return discovery_fail(api, r, "cuDeviceGet");
    if ((r = api->cuDeviceGetName(s->name, (int)sizeof s->name, s->device)))
        return discovery_fail(api, r, "cuDeviceGetName");
    s->name[sizeof s->name - 1] = '\0';
    int major = 0, minor = 0, l2 = 0;
    fj_status st;
    if ((st = attribute(s, FJ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                        "COMPUTE_CAPABILITY_MAJOR", &major)) ||
        (st = attribute(s, FJ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                        "COMPUTE_CAPABILITY_MINOR", &minor)) ||
        (st = attribute(s, FJ_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT",
                        &s->sm_count)) ||
        (st = attribute(s, FJ_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", &s->smem_optin)) ||
        (st = attribute(s, FJ_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK",
                        &s->max_threads_per_block)) ||
        (st = attribute(s, FJ_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2_CACHE_SIZE", &l2)))
        return st;
    s->l2_bytes = l2 > 0 ? (size_t)l2 : 0;
    s->arch = major * 10 + minor;
    if ((r = api->cuDeviceTotalMem(&s->total_mem, s->device)))
        return discovery_fail(api, r, "cuDeviceTotalMem");
    if (s->arch < FJ_CUDA_MIN_ARCH)
        return fj_fail(FJ_ERR_NO_DEVICE,
                       "CUDA device %d (%s) is sm_%d; the flashjit kernels need sm_%d or newer "
                       "(mma.sync bf16, cp.async)",
                       s->ordinal, s->name, s->arch, FJ_CUDA_MIN_ARCH);
    return FJ_OK;
}

void fj_cuda_device_close(fj_cuda_state *s)
{
    if (!s) return;
    if (s->primary) {
        CUresult r = s->api->cuDevicePrimaryCtxRelease(s->device);
        if (r != FJ_CUDA_SUCCESS) FJ_DEBUG("cuda: cuDevicePrimaryCtxRelease returned %d", r);
    }
    free(s);
}

static fj_status bring_up(fj_cuda_state *s)
{
    const fj_cuda_api *api;
    fj_status st = fj_cuda_driver(&api);
    if (st) return st;
    const fj_cuda_api *nvrtc;
    if ((st = fj_cuda_nvrtc(&nvrtc)))
        return fj_fail_prefix(FJ_ERR_NO_DEVICE,
                              "the CUDA driver %s is usable, but NVRTC (which compiles the "
                              "kernels) is missing",
                              api->driver_path);
    /* Both parts live in one table (the real one, or a test's). */
    s->api = api;
    CUresult r;
    if ((r = api->cuInit(0))) return discovery_fail(api, r, "cuInit");
    int count = 0;
    if ((r = api->cuDeviceGetCount(&count))) return discovery_fail(api, r, "cuDeviceGetCount");
    if (count == 0)
        return fj_fail(FJ_ERR_NO_DEVICE, "no CUDA device (cuDeviceGetCount returned 0)");
    if (s->ordinal >= count)
        return fj_fail(FJ_ERR_NO_DEVICE,
                       "device (%d) is out of range: the driver sees %d CUDA device%s (ordinals "
                       "0..%d)",
                       s->ordinal, count, count == 1 ? "" : "s", count - 1);
    if ((st = read_device(s))) return st;
    if ((r = api->cuDevicePrimaryCtxRetain(&s->primary, s->device))) {
        s->primary = NULL;
        return discovery_fail(api, r, "cuDevicePrimaryCtxRetain");
    }
    return FJ_OK;
}

/* NVRTC loads apart from the driver and compiles kernels without one
 * (`flashjit source --ptx`, compile-all), so when the device is not usable
 * describe still says whether NVRTC is. The device's reason stays this
 * thread's last error: the caller reports it. */
static void describe_nvrtc_alone(fj_strbuf *describe)
{
    char reason[8192]; /* as much as the last-error text holds */
    snprintf(reason, sizeof reason, "%s", fj_last_error());
    const fj_cuda_api *api;
    if (fj_cuda_nvrtc(&api) == FJ_OK)
        fj_strbuf_printf(describe,
                         "nvrtc: usable: NVRTC %d.%d (%s), compiles kernels without a GPU\n",
                         api->nvrtc_major, api->nvrtc_minor, api->nvrtc_path);
    else fj_strbuf_printf(describe, "nvrtc: not usable: %s\n", fj_last_error());
    fj_fail(FJ_ERR_NO_DEVICE, "%s", reason);
}

fj_status fj_cuda_device_open(int ordinal, fj_cuda_state **out, fj_strbuf *describe)
{
    *out = NULL;
    fj_cuda_state *s = calloc(1, sizeof *s);
    if (!s) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory for the CUDA device state");
    s->ordinal = ordinal;
    fj_status st = bring_up(s);
    if (st) {
        fj_strbuf_printf(describe, "cuda: not usable: %s\n", fj_last_error());
        fj_cuda_device_close(s);
        describe_nvrtc_alone(describe);
        return st;
    }
    const fj_cuda_api *a = s->api;
    fj_strbuf_printf(describe,
                     "cuda: %s, sm_%d, %d SMs, %.0f GiB; driver %d.%d (%s); NVRTC %d.%d (%s)\n"
                     "cuda device %d: %d KiB shared memory per block (opt-in), %d threads per "
                     "block\n",
                     s->name, s->arch, s->sm_count, (double)s->total_mem / (1u << 30),
                     a->driver_version / 1000, a->driver_version % 1000 / 10, a->driver_path,
                     a->nvrtc_major, a->nvrtc_minor, a->nvrtc_path, s->ordinal,
                     s->smem_optin / 1024, s->max_threads_per_block);
    FJ_INFO("cuda: device %d: %s, sm_%d, %d SMs", s->ordinal, s->name, s->arch, s->sm_count);
    *out = s;
    return FJ_OK;
}

/* ---- memory and synchronization ------------------------------------------- */

fj_status fj_cuda_mem_alloc(const fj_cuda_state *s, size_t bytes, void **ptr)
{
    fj_status st = fj_cuda_push(s);
    if (st) return st;
    CUdeviceptr d = 0;
    /* cuMemAlloc refuses 0 bytes; fj_malloc(0) gives a valid block on every
       backend. Its blocks are 256-byte aligned, more than fj_malloc promises. */
    CUresult r = s->api->cuMemAlloc(&d, bytes ? bytes : 1);
    fj_cuda_pop(s);
    if (r != FJ_CUDA_SUCCESS) {
        st = fj_cuda_fail(s->api, r, "cuMemAlloc");
        return fj_fail_prefix(st, "fj_malloc of %zu bytes on CUDA device %d", bytes, s->ordinal);
    }
    *ptr = (void *)(uintptr_t)d;
    return FJ_OK;
}

void fj_cuda_mem_free(const fj_cuda_state *s, void *ptr)
{
    if (fj_cuda_push(s)) {
        FJ_DEBUG("cuda: fj_free(%p): %s", ptr, fj_last_error());
        return;
    }
    CUresult r = s->api->cuMemFree((CUdeviceptr)(uintptr_t)ptr);
    fj_cuda_pop(s);
    if (r != FJ_CUDA_SUCCESS) FJ_DEBUG("cuda: cuMemFree(%p) returned %d", ptr, r);
}

fj_status fj_cuda_copy_to_device(const fj_cuda_state *s, void *dst, const void *src, size_t bytes)
{
    fj_status st = fj_cuda_push(s);
    if (st) return st;
    CUresult r = s->api->cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, bytes);
    fj_cuda_pop(s);
    if (r == FJ_CUDA_SUCCESS) return FJ_OK;
    st = fj_cuda_fail(s->api, r, "cuMemcpyHtoD");
    return fj_fail_prefix(st, "fj_copy_to_device of %zu bytes to %p", bytes, dst);
}

fj_status fj_cuda_copy_to_host(const fj_cuda_state *s, void *dst, const void *src, size_t bytes)
{
    fj_status st = fj_cuda_push(s);
    if (st) return st;
    CUresult r = s->api->cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, bytes);
    fj_cuda_pop(s);
    if (r == FJ_CUDA_SUCCESS) return FJ_OK;
    st = fj_cuda_fail(s->api, r, "cuMemcpyDtoH");
    return fj_fail_prefix(st, "fj_copy_to_host of %zu bytes from %p", bytes, src);
}

fj_status fj_cuda_synchronize(const fj_cuda_state *s, void *stream)
{
    fj_status st = fj_cuda_push(s);
    if (st) return st;
    CUresult r =
        stream ? s->api->cuStreamSynchronize((CUstream)stream) : s->api->cuCtxSynchronize();
    fj_cuda_pop(s);
    if (r == FJ_CUDA_SUCCESS) return FJ_OK;
    /* An asynchronous fault of an earlier launch surfaces here. */
    return fj_cuda_fail(s->api, r, stream ? "cuStreamSynchronize" : "cuCtxSynchronize");
}
