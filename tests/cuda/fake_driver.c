/* The fake driver and NVRTC of fake_driver.h. One mutex guards all shared
 * state; the current-context stack is per thread, as in the real driver. */
#include "fake_driver.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Images the fake NVRTC produces and the fake driver accepts: an ELF-looking
 * cubin (kernel_build checks the ELF magic of cached images) or a PTX text,
 * each followed by the program source, so cuModuleGetFunction can check that
 * the entry point asked for is in the source that was compiled. */
#define CUBIN_MAGIC "\177ELF-FJFAKE-CUBIN\n"
#define PTX_MAGIC "//FJFAKE-PTX\n"

#define DEFAULT_SMEM (48 * 1024)
#define SMEM_OPTIN (227 * 1024)
#define REGS_PER_SM 65536
#define MAX_DEVICES 8
#define MAX_FAILURES 16

enum {
    E_INVALID_VALUE = 1,
    E_NOT_INITIALIZED = 3,
    E_INVALID_DEVICE = 101,
    E_INVALID_IMAGE = 200,
    E_INVALID_CONTEXT = 201,
    E_INVALID_HANDLE = 400,
    E_NOT_FOUND = 500,
    E_LAUNCH_OUT_OF_RESOURCES = 701
};
enum { NVRTC_OK = 0, NVRTC_INVALID_INPUT = 3, NVRTC_INVALID_PROGRAM = 4, NVRTC_COMPILATION = 6 };

typedef struct fake_function {
    int max_dyn_smem;
} fake_function;

typedef struct fake_module {
    char *source;
    fake_function fn;
} fake_module;

typedef struct fake_program {
    char *source;
    char *log;
    bool compiled;
} fake_program;

typedef struct fake_event {
    int recorded;
} fake_event;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int device_count, major, minor, num_regs, compile_delay_us;
    bool initialized;
    struct {
        char call[48];
        int r;
    } failures[MAX_FAILURES];
    int nfailures;
    fake_counts counts;
    fake_launch last;
} st;

static fj_cuda_api table;
static char primary_storage[MAX_DEVICES];

static _Thread_local CUcontext ctx_stack[16];
static _Thread_local int ctx_depth;

/* The result injected for a call, 0 when none. */
static int injected(const char *call)
{
    int r = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < st.nfailures; i++)
        if (!strcmp(st.failures[i].call, call)) r = st.failures[i].r;
    pthread_mutex_unlock(&lock);
    return r;
}

#define INJECT(call)             \
    do {                         \
        int r_ = injected(call); \
        if (r_) return r_;       \
    } while (0)

static bool initialized(void)
{
    pthread_mutex_lock(&lock);
    bool i = st.initialized;
    pthread_mutex_unlock(&lock);
    return i;
}

/* Every call that needs a current context goes through this. */
static int need_context(void)
{
    if (!initialized()) return E_NOT_INITIALIZED;
    if (ctx_depth > 0) return 0;
    pthread_mutex_lock(&lock);
    st.counts.no_context++;
    pthread_mutex_unlock(&lock);
    return E_INVALID_CONTEXT;
}

#define NEED_CONTEXT()           \
    do {                         \
        int r_ = need_context(); \
        if (r_) return r_;       \
    } while (0)

#define COUNT(field)                 \
    do {                             \
        pthread_mutex_lock(&lock);   \
        st.counts.field++;           \
        pthread_mutex_unlock(&lock); \
    } while (0)

/* ---- driver: errors, init, devices ---------------------------------------- */

static const struct {
    int code;
    const char *name, *text;
} errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult f_cuGetErrorName(CUresult e, const char **name)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == e) {
            *name = errors[i].name;
            return 0;
        }
    *name = NULL;
    return E_INVALID_VALUE;
}

static CUresult f_cuGetErrorString(CUresult e, const char **text)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == e) {
            *text = errors[i].text;
            return 0;
        }
    *text = NULL;
    return E_INVALID_VALUE;
}

static CUresult f_cuInit(unsigned flags)
{
    INJECT("cuInit");
    if (flags) return E_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    st.initialized = true;
    pthread_mutex_unlock(&lock);
    return 0;
}

static CUresult f_cuDriverGetVersion(int *v)
{
    INJECT("cuDriverGetVersion");
    *v = table.driver_version;
    return 0;
}

static int device_count(void)
{
    pthread_mutex_lock(&lock);
    int n = st.device_count;
    pthread_mutex_unlock(&lock);
    return n;
}

static CUresult f_cuDeviceGetCount(int *n)
{
    INJECT("cuDeviceGetCount");
    if (!initialized()) return E_NOT_INITIALIZED;
    *n = device_count();
    return 0;
}

static CUresult f_cuDeviceGet(CUdevice *d, int ordinal)
{
    INJECT("cuDeviceGet");
    if (!initialized()) return E_NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= device_count()) return E_INVALID_DEVICE;
    *d = ordinal;
    return 0;
}

static CUresult f_cuDeviceGetName(char *name, int len, CUdevice d)
{
    INJECT("cuDeviceGetName");
    if (d < 0 || d >= device_count()) return E_INVALID_DEVICE;
    static const char base[] = "Fake GPU ";
    if (len < (int)sizeof base + 1) return E_INVALID_VALUE;
    memcpy(name, base, sizeof base - 1);
    name[sizeof base - 1] = (char)('0' + d);
    name[sizeof base] = '\0';
    return 0;
}

static CUresult f_cuDeviceGetAttribute(int *v, int attrib, CUdevice d)
{
    INJECT("cuDeviceGetAttribute");
    if (d < 0 || d >= device_count()) return E_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    int major = st.major, minor = st.minor;
    pthread_mutex_unlock(&lock);
    switch (attrib) {
    case FJ_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; return 0;
    case FJ_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = DEFAULT_SMEM; return 0;
    case FJ_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; return 0;
    case FJ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = major; return 0;
    case FJ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = minor; return 0;
    case FJ_CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = REGS_PER_SM; return 0;
    case FJ_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = SMEM_OPTIN; return 0;
    case FJ_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 << 20; return 0;
    }
    return E_INVALID_VALUE;
}

static CUresult f_cuDeviceTotalMem(size_t *bytes, CUdevice d)
{
    INJECT("cuDeviceTotalMem");
    if (d < 0 || d >= device_count()) return E_INVALID_DEVICE;
    *bytes = (size_t)80 << 30;
    return 0;
}

CUcontext fake_primary_context(int ordinal) { return (CUcontext)(void *)&primary_storage[ordinal]; }

static CUresult f_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    INJECT("cuDevicePrimaryCtxRetain");
    if (!initialized()) return E_NOT_INITIALIZED;
    if (d < 0 || d >= device_count()) return E_INVALID_DEVICE;
    *c = fake_primary_context(d);
    COUNT(retains);
    return 0;
}

static CUresult f_cuDevicePrimaryCtxRelease(CUdevice d)
{
    INJECT("cuDevicePrimaryCtxRelease");
    if (d < 0 || d >= device_count()) return E_INVALID_DEVICE;
    COUNT(releases);
    return 0;
}

static CUresult f_cuCtxPushCurrent(CUcontext c)
{
    INJECT("cuCtxPushCurrent");
    if (!c) return E_INVALID_CONTEXT;
    if (ctx_depth == (int)(sizeof ctx_stack / sizeof ctx_stack[0])) return E_INVALID_VALUE;
    ctx_stack[ctx_depth++] = c;
    return 0;
}

static CUresult f_cuCtxPopCurrent(CUcontext *c)
{
    INJECT("cuCtxPopCurrent");
    if (ctx_depth == 0) return E_INVALID_CONTEXT;
    CUcontext top = ctx_stack[--ctx_depth];
    if (c) *c = top;
    return 0;
}

static CUresult f_cuCtxSynchronize(void)
{
    INJECT("cuCtxSynchronize");
    NEED_CONTEXT();
    COUNT(ctx_syncs);
    return 0;
}

static CUresult f_cuStreamSynchronize(CUstream s)
{
    (void)s;
    INJECT("cuStreamSynchronize");
    NEED_CONTEXT();
    COUNT(stream_syncs);
    return 0;
}

/* ---- driver: modules and launches ----------------------------------------- */

static CUresult f_cuModuleLoadData(CUmodule *m, const void *image)
{
    INJECT("cuModuleLoadData");
    NEED_CONTEXT();
    const char *text = image;
    size_t skip;
    if (!memcmp(text, CUBIN_MAGIC, sizeof CUBIN_MAGIC - 1)) skip = sizeof CUBIN_MAGIC - 1;
    else if (!memcmp(text, PTX_MAGIC, sizeof PTX_MAGIC - 1)) skip = sizeof PTX_MAGIC - 1;
    else return E_INVALID_IMAGE;
    fake_module *fm = calloc(1, sizeof *fm);
    if (!fm || !(fm->source = strdup(text + skip))) {
        free(fm);
        return 2;
    }
    fm->fn.max_dyn_smem = DEFAULT_SMEM;
    *m = (CUmodule)(void *)fm;
    COUNT(module_loads);
    return 0;
}

static CUresult f_cuModuleUnload(CUmodule m)
{
    INJECT("cuModuleUnload");
    NEED_CONTEXT();
    fake_module *fm = (fake_module *)(void *)m;
    if (!fm) return E_INVALID_HANDLE;
    free(fm->source);
    free(fm);
    COUNT(module_unloads);
    return 0;
}

static CUresult f_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    INJECT("cuModuleGetFunction");
    NEED_CONTEXT();
    fake_module *fm = (fake_module *)(void *)m;
    if (!fm) return E_INVALID_HANDLE;
    /* The entry point must be an extern "C" kernel of the compiled source. */
    const char *p = strstr(fm->source, name);
    if (!p || !strstr(fm->source, "extern \"C\"")) return E_NOT_FOUND;
    *f = (CUfunction)(void *)&fm->fn;
    return 0;
}

static int num_regs(void)
{
    pthread_mutex_lock(&lock);
    int n = st.num_regs;
    pthread_mutex_unlock(&lock);
    return n;
}

/* What the register file allows, in whole warps. */
static int max_threads_for_regs(void)
{
    int t = REGS_PER_SM / num_regs();
    t -= t % 32;
    return t > 1024 ? 1024 : t;
}

static CUresult f_cuFuncGetAttribute(int *v, int attrib, CUfunction f)
{
    INJECT("cuFuncGetAttribute");
    NEED_CONTEXT();
    fake_function *fn = (fake_function *)(void *)f;
    if (!fn) return E_INVALID_HANDLE;
    switch (attrib) {
    case FJ_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = max_threads_for_regs(); return 0;
    case FJ_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = 0; return 0;
    case FJ_CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *v = 0; return 0;
    case FJ_CU_FUNC_ATTRIBUTE_NUM_REGS: *v = num_regs(); return 0;
    case FJ_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = fn->max_dyn_smem; return 0;
    }
    return E_INVALID_VALUE;
}

static CUresult f_cuFuncSetAttribute(CUfunction f, int attrib, int value)
{
    INJECT("cuFuncSetAttribute");
    NEED_CONTEXT();
    fake_function *fn = (fake_function *)(void *)f;
    if (!fn) return E_INVALID_HANDLE;
    if (attrib != FJ_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES || value < 0 ||
        value > SMEM_OPTIN)
        return E_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    fn->max_dyn_smem = value;
    st.counts.max_dyn_smem_set = value;
    pthread_mutex_unlock(&lock);
    return 0;
}

static CUresult f_cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction f,
                                                              int block_size, size_t dyn_smem)
{
    INJECT("cuOccupancyMaxActiveBlocksPerMultiprocessor");
    NEED_CONTEXT();
    fake_function *fn = (fake_function *)(void *)f;
    if (!fn || block_size <= 0) return E_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int max_dyn = fn->max_dyn_smem;
    pthread_mutex_unlock(&lock);
    if (block_size > max_threads_for_regs() || dyn_smem > (size_t)max_dyn) {
        *blocks = 0;
        return 0;
    }
    int by_regs = REGS_PER_SM / (num_regs() * block_size);
    int by_smem = dyn_smem ? (int)(SMEM_OPTIN / dyn_smem) : 32;
    *blocks = by_regs < by_smem ? by_regs : by_smem;
    return 0;
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned smem, CUstream stream, void **params,
                       void **extra, bool programmatic)
{
    fake_function *fn = (fake_function *)(void *)f;
    if (!fn || !params || extra || !gx || !gy || !gz || gy > 65535 || gz > 65535)
        return E_INVALID_VALUE;
    if (bx * by * bz > (unsigned)max_threads_for_regs()) return E_LAUNCH_OUT_OF_RESOURCES;
    pthread_mutex_lock(&lock);
    bool smem_ok = smem <= (unsigned)fn->max_dyn_smem;
    if (smem_ok) {
        fake_launch *l = &st.last;
        l->grid[0] = gx, l->grid[1] = gy, l->grid[2] = gz;
        l->block[0] = bx, l->block[1] = by, l->block[2] = bz;
        l->smem = smem;
        l->stream = stream;
        l->programmatic = programmatic;
        l->ctx = ctx_stack[ctx_depth - 1];
        memcpy(&l->params, params[0], sizeof l->params);
        st.counts.launches++;
    }
    pthread_mutex_unlock(&lock);
    return smem_ok ? 0 : E_INVALID_VALUE;
}

static CUresult f_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned smem, CUstream stream,
                                 void **params, void **extra)
{
    INJECT("cuLaunchKernel");
    NEED_CONTEXT();
    return launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra, false);
}

/* Takes only the attribute flashjit uses; anything else is invalid, as an
 * unknown id or a malformed list would be for the driver. */
static CUresult f_cuLaunchKernelEx(const fj_cu_launch_config *c, CUfunction f, void **params,
                                   void **extra)
{
    INJECT("cuLaunchKernelEx");
    NEED_CONTEXT();
    if (!c || (c->num_attrs && !c->attrs)) return E_INVALID_VALUE;
    bool programmatic = false;
    for (unsigned i = 0; i < c->num_attrs; i++) {
        if (c->attrs[i].id != FJ_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
            return E_INVALID_VALUE;
        programmatic = c->attrs[i].value.programmatic_stream_serialization_allowed != 0;
    }
    return launch(f, c->grid_x, c->grid_y, c->grid_z, c->block_x, c->block_y, c->block_z,
                  c->shared_mem_bytes, c->stream, params, extra, programmatic);
}

/* The rules cuda.h states for a tiled tensor map, checked as the driver
 * would; the map gets a recognisable pattern (the global address first). */
static CUresult f_cuTensorMapEncodeTiled(void *map, int type, uint32_t rank, void *address,
                                         const cuuint64_t *dim, const cuuint64_t *stride,
                                         const uint32_t *box, const uint32_t *element_strides,
                                         int interleave, int swizzle, int l2, int oob)
{
    INJECT("cuTensorMapEncodeTiled");
    NEED_CONTEXT(); /* as the driver: CUDA_ERROR_INVALID_CONTEXT without one */
    if (!map || (uintptr_t)map % 64 || (uintptr_t)address % 16 || rank < 1 || rank > 5 || !dim ||
        !box || !element_strides || interleave != 0 || swizzle < 0 || swizzle > 3 || l2 < 0 ||
        l2 > 3 || oob < 0 || oob > 1 ||
        (type != FJ_CU_TENSOR_MAP_DATA_TYPE_FLOAT16 && type != FJ_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16))
        return E_INVALID_VALUE;
    for (uint32_t i = 0; i < rank; i++) {
        if (!dim[i] || dim[i] > (1ull << 32) || !box[i] || box[i] > 256 || element_strides[i] != 1)
            return E_INVALID_VALUE;
        if (i + 1 < rank && (stride[i] % 16 || stride[i] >= (1ull << 40))) return E_INVALID_VALUE;
    }
    /* the box's inner extent: a multiple of 16 bytes, within the swizzle span */
    const uint32_t inner = box[0] * 2, span = swizzle ? 16u << swizzle : 0;
    if (inner % 16 || (span && inner > span)) return E_INVALID_VALUE;
    memset(map, 0, 128);
    memcpy(map, &address, sizeof address);
    return 0;
}

/* ---- driver: memory and events -------------------------------------------- */

static CUresult f_cuMemAlloc(CUdeviceptr *p, size_t bytes)
{
    INJECT("cuMemAlloc");
    NEED_CONTEXT();
    if (!bytes) return E_INVALID_VALUE;
    void *m = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
    if (!m) return 2;
    *p = (CUdeviceptr)(uintptr_t)m;
    COUNT(allocs);
    return 0;
}

static CUresult f_cuMemFree(CUdeviceptr p)
{
    INJECT("cuMemFree");
    NEED_CONTEXT();
    free((void *)(uintptr_t)p);
    COUNT(frees);
    return 0;
}

static CUresult f_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
    INJECT("cuMemcpyHtoD");
    NEED_CONTEXT();
    memcpy((void *)(uintptr_t)dst, src, n);
    return 0;
}

static CUresult f_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
    INJECT("cuMemcpyDtoH");
    NEED_CONTEXT();
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return 0;
}

static CUresult f_cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t n)
{
    INJECT("cuMemsetD8");
    NEED_CONTEXT();
    memset((void *)(uintptr_t)dst, v, n);
    return 0;
}

static CUresult f_cuEventCreate(CUevent *e, unsigned flags)
{
    (void)flags;
    INJECT("cuEventCreate");
    NEED_CONTEXT();
    fake_event *fe = calloc(1, sizeof *fe);
    if (!fe) return 2;
    *e = (CUevent)(void *)fe;
    return 0;
}

static CUresult f_cuEventRecord(CUevent e, CUstream s)
{
    (void)s;
    INJECT("cuEventRecord");
    NEED_CONTEXT();
    ((fake_event *)(void *)e)->recorded++;
    return 0;
}

static CUresult f_cuEventSynchronize(CUevent e)
{
    INJECT("cuEventSynchronize");
    return ((fake_event *)(void *)e)->recorded ? 0 : E_INVALID_HANDLE;
}

static CUresult f_cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    INJECT("cuEventElapsedTime");
    if (!((fake_event *)(void *)a)->recorded || !((fake_event *)(void *)b)->recorded)
        return E_INVALID_HANDLE;
    *ms = 0.25f;
    return 0;
}

static CUresult f_cuEventDestroy(CUevent e)
{
    INJECT("cuEventDestroy");
    free((void *)e);
    return 0;
}

/* ---- NVRTC ------------------------------------------------------------------ */

static const char *f_nvrtcGetErrorString(nvrtcResult r)
{
    switch (r) {
    case NVRTC_OK: return "NVRTC_SUCCESS";
    case NVRTC_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case NVRTC_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    case NVRTC_COMPILATION: return "NVRTC_ERROR_COMPILATION";
    }
    return "NVRTC_ERROR unknown";
}

static nvrtcResult f_nvrtcVersion(int *major, int *minor)
{
    INJECT("nvrtcVersion");
    *major = table.nvrtc_major;
    *minor = table.nvrtc_minor;
    return 0;
}

static const int fake_archs[] = {75, 80, 86, 89, 90, 100, 120};

static nvrtcResult f_nvrtcGetNumSupportedArchs(int *n)
{
    INJECT("nvrtcGetNumSupportedArchs");
    *n = (int)(sizeof fake_archs / sizeof fake_archs[0]);
    return 0;
}

static nvrtcResult f_nvrtcGetSupportedArchs(int *archs)
{
    INJECT("nvrtcGetSupportedArchs");
    memcpy(archs, fake_archs, sizeof fake_archs);
    return 0;
}

static nvrtcResult f_nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                                        int num_headers, const char *const *headers,
                                        const char *const *include_names)
{
    (void)name, (void)headers, (void)include_names;
    INJECT("nvrtcCreateProgram");
    if (!src || num_headers) return NVRTC_INVALID_INPUT;
    fake_program *p = calloc(1, sizeof *p);
    if (!p || !(p->source = strdup(src))) {
        free(p);
        return 1;
    }
    *prog = (nvrtcProgram)(void *)p;
    return 0;
}

static nvrtcResult f_nvrtcDestroyProgram(nvrtcProgram *prog)
{
    INJECT("nvrtcDestroyProgram");
    fake_program *p = (fake_program *)(void *)*prog;
    if (!p) return NVRTC_INVALID_PROGRAM;
    free(p->source);
    free(p->log);
    free(p);
    *prog = NULL;
    return 0;
}

static nvrtcResult f_nvrtcCompileProgram(nvrtcProgram prog, int n, const char *const *options)
{
    fake_program *p = (fake_program *)(void *)prog;
    if (!p) return NVRTC_INVALID_PROGRAM;
    int r = injected("nvrtcCompileProgram");
    if (r) {
        p->log = strdup("fake.cu(1): error: compilation failed on demand (fake NVRTC)");
        return r;
    }
    bool arch = false;
    for (int i = 0; i < n; i++)
        if (!strncmp(options[i], "--gpu-architecture=", 19)) arch = true;
    if (!arch) return NVRTC_INVALID_INPUT;
    pthread_mutex_lock(&lock);
    int delay = st.compile_delay_us;
    pthread_mutex_unlock(&lock);
    if (delay) {
        struct timespec ts = {delay / 1000000, (long)(delay % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    p->compiled = true;
    COUNT(compiles);
    return 0;
}

static nvrtcResult f_nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *n)
{
    fake_program *p = (fake_program *)(void *)prog;
    *n = (p->log ? strlen(p->log) : 0) + 1;
    return 0;
}

static nvrtcResult f_nvrtcGetProgramLog(nvrtcProgram prog, char *log)
{
    fake_program *p = (fake_program *)(void *)prog;
    strcpy(log, p->log ? p->log : "");
    return 0;
}

static nvrtcResult image_size(nvrtcProgram prog, const char *magic, size_t *n, bool nul)
{
    fake_program *p = (fake_program *)(void *)prog;
    if (!p || !p->compiled) return NVRTC_INVALID_PROGRAM;
    *n = strlen(magic) + strlen(p->source) + (nul ? 1 : 0);
    return 0;
}

static nvrtcResult image_copy(nvrtcProgram prog, const char *magic, char *out)
{
    fake_program *p = (fake_program *)(void *)prog;
    if (!p || !p->compiled) return NVRTC_INVALID_PROGRAM;
    size_t m = strlen(magic);
    memcpy(out, magic, m);
    strcpy(out + m, p->source);
    return 0;
}

/* A cubin's size has no terminator; a PTX size counts its NUL (as NVRTC's). */
static nvrtcResult f_nvrtcGetCUBINSize(nvrtcProgram prog, size_t *n)
{
    INJECT("nvrtcGetCUBINSize");
    return image_size(prog, CUBIN_MAGIC, n, true);
}

static nvrtcResult f_nvrtcGetCUBIN(nvrtcProgram prog, char *out)
{
    INJECT("nvrtcGetCUBIN");
    return image_copy(prog, CUBIN_MAGIC, out);
}

static nvrtcResult f_nvrtcGetPTXSize(nvrtcProgram prog, size_t *n)
{
    INJECT("nvrtcGetPTXSize");
    return image_size(prog, PTX_MAGIC, n, true);
}

static nvrtcResult f_nvrtcGetPTX(nvrtcProgram prog, char *out)
{
    INJECT("nvrtcGetPTX");
    return image_copy(prog, PTX_MAGIC, out);
}

/* ---- control ----------------------------------------------------------------- */

static void fill_driver(void)
{
    table.cuInit = f_cuInit;
    table.cuDriverGetVersion = f_cuDriverGetVersion;
    table.cuGetErrorName = f_cuGetErrorName;
    table.cuGetErrorString = f_cuGetErrorString;
    table.cuDeviceGetCount = f_cuDeviceGetCount;
    table.cuDeviceGet = f_cuDeviceGet;
    table.cuDeviceGetName = f_cuDeviceGetName;
    table.cuDeviceGetAttribute = f_cuDeviceGetAttribute;
    table.cuDeviceTotalMem = f_cuDeviceTotalMem;
    table.cuDevicePrimaryCtxRetain = f_cuDevicePrimaryCtxRetain;
    table.cuDevicePrimaryCtxRelease = f_cuDevicePrimaryCtxRelease;
    table.cuCtxPushCurrent = f_cuCtxPushCurrent;
    table.cuCtxPopCurrent = f_cuCtxPopCurrent;
    table.cuCtxSynchronize = f_cuCtxSynchronize;
    table.cuModuleLoadData = f_cuModuleLoadData;
    table.cuModuleUnload = f_cuModuleUnload;
    table.cuModuleGetFunction = f_cuModuleGetFunction;
    table.cuFuncSetAttribute = f_cuFuncSetAttribute;
    table.cuFuncGetAttribute = f_cuFuncGetAttribute;
    table.cuOccupancyMaxActiveBlocksPerMultiprocessor =
        f_cuOccupancyMaxActiveBlocksPerMultiprocessor;
    table.cuLaunchKernel = f_cuLaunchKernel;
    table.cuLaunchKernelEx = f_cuLaunchKernelEx;
    table.cuTensorMapEncodeTiled = f_cuTensorMapEncodeTiled;
    table.cuMemAlloc = f_cuMemAlloc;
    table.cuMemFree = f_cuMemFree;
    table.cuMemcpyHtoD = f_cuMemcpyHtoD;
    table.cuMemcpyDtoH = f_cuMemcpyDtoH;
    table.cuMemsetD8 = f_cuMemsetD8;
    table.cuStreamSynchronize = f_cuStreamSynchronize;
    table.cuEventCreate = f_cuEventCreate;
    table.cuEventRecord = f_cuEventRecord;
    table.cuEventSynchronize = f_cuEventSynchronize;
    table.cuEventElapsedTime = f_cuEventElapsedTime;
    table.cuEventDestroy = f_cuEventDestroy;
    strcpy(table.driver_path, "fake-libcuda.so.1");
    table.driver_version = 13000;
}

static void fill_nvrtc(void)
{
    table.nvrtcVersion = f_nvrtcVersion;
    table.nvrtcGetNumSupportedArchs = f_nvrtcGetNumSupportedArchs;
    table.nvrtcGetSupportedArchs = f_nvrtcGetSupportedArchs;
    table.nvrtcGetErrorString = f_nvrtcGetErrorString;
    table.nvrtcCreateProgram = f_nvrtcCreateProgram;
    table.nvrtcDestroyProgram = f_nvrtcDestroyProgram;
    table.nvrtcCompileProgram = f_nvrtcCompileProgram;
    table.nvrtcGetProgramLogSize = f_nvrtcGetProgramLogSize;
    table.nvrtcGetProgramLog = f_nvrtcGetProgramLog;
    table.nvrtcGetCUBINSize = f_nvrtcGetCUBINSize;
    table.nvrtcGetCUBIN = f_nvrtcGetCUBIN;
    table.nvrtcGetPTXSize = f_nvrtcGetPTXSize;
    table.nvrtcGetPTX = f_nvrtcGetPTX;
    strcpy(table.nvrtc_path, "fake-libnvrtc.so.13");
    /* A version no real NVRTC has, so fake images never share a disk cache
       key with real ones. */
    table.nvrtc_major = 99;
    table.nvrtc_minor = 0;
}

void fake_reset(void)
{
    pthread_mutex_lock(&lock);
    memset(&st, 0, sizeof st);
    st.device_count = 1;
    st.major = 9;
    st.minor = 0;
    st.num_regs = 128;
    pthread_mutex_unlock(&lock);
    memset(&table, 0, sizeof table);
    fill_driver();
    fill_nvrtc();
    ctx_depth = 0;
}

const fj_cuda_api *fake_api(void) { return &table; }

void fake_fail(const char *call, int r)
{
    pthread_mutex_lock(&lock);
    if (st.nfailures < MAX_FAILURES) {
        strncpy(st.failures[st.nfailures].call, call, sizeof st.failures[0].call - 1);
        st.failures[st.nfailures].r = r;
        st.nfailures++;
    }
    pthread_mutex_unlock(&lock);
}

void fake_remove_driver(void)
{
    fj_cuda_api keep = table;
    memset(&table, 0, sizeof table);
    fill_nvrtc();
    table.nvrtc_major = keep.nvrtc_major;
    table.nvrtc_minor = keep.nvrtc_minor;
    strcpy(table.driver_path, "fake: no libcuda.so.1");
}

void fake_remove_nvrtc(void)
{
    fj_cuda_api keep = table;
    memset(&table, 0, sizeof table);
    fill_driver();
    table.driver_version = keep.driver_version;
    strcpy(table.nvrtc_path, "fake: no libnvrtc");
}

void fake_set_device_count(int n)
{
    pthread_mutex_lock(&lock);
    st.device_count = n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
    pthread_mutex_unlock(&lock);
}

void fake_set_arch(int major, int minor)
{
    pthread_mutex_lock(&lock);
    st.major = major;
    st.minor = minor;
    pthread_mutex_unlock(&lock);
}

void fake_set_driver_version(int v) { table.driver_version = v; }

void fake_set_num_regs(int n)
{
    pthread_mutex_lock(&lock);
    st.num_regs = n < 1 ? 1 : n;
    pthread_mutex_unlock(&lock);
}

void fake_set_compile_delay_us(int us)
{
    pthread_mutex_lock(&lock);
    st.compile_delay_us = us;
    pthread_mutex_unlock(&lock);
}

fake_counts fake_get_counts(void)
{
    pthread_mutex_lock(&lock);
    fake_counts c = st.counts;
    pthread_mutex_unlock(&lock);
    return c;
}

fake_launch fake_last_launch(void)
{
    pthread_mutex_lock(&lock);
    fake_launch l = st.last;
    pthread_mutex_unlock(&lock);
    return l;
}

int fake_ctx_depth(void) { return ctx_depth; }
