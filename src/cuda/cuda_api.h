/* The few CUDA driver and NVRTC types and functions flashjit uses, declared
 * here so building flashjit needs no CUDA toolkit. Their ABI is stable; the
 * driver entry points are resolved for an explicit CUDA version
 * (FJ_CUDA_API_VERSION) through cuGetProcAddress, so we get the _v2 ABI of
 * cuMemAlloc and friends, never the old one that a plain dlsym would give.
 *
 * Everything goes through one table of function pointers (fj_cuda_api).
 * Tests install a fake table (fj_cuda_api_override) to drive every error
 * path: no driver, cuInit failing, no device, module load or launch failing,
 * out of memory. */
#ifndef FJ_CUDA_API_H
#define FJ_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#include "flashjit.h"

/* ---- driver types ----------------------------------------------------- */

typedef int CUresult; /* CUDA_SUCCESS = 0 */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef uint64_t cuuint64_t;

enum {
    FJ_CUDA_SUCCESS = 0,
    FJ_CUDA_ERROR_INVALID_VALUE = 1,
    FJ_CUDA_ERROR_OUT_OF_MEMORY = 2,
    FJ_CUDA_ERROR_NOT_INITIALIZED = 3,
    FJ_CUDA_ERROR_NO_DEVICE = 100,
    FJ_CUDA_ERROR_INVALID_DEVICE = 101,
    FJ_CUDA_ERROR_INVALID_IMAGE = 200,
    FJ_CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    FJ_CUDA_ERROR_NOT_FOUND = 500,
    FJ_CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
    FJ_CUDA_ERROR_LAUNCH_FAILED = 719,
};

/* CUdevice_attribute values used */
enum {
    FJ_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    FJ_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
    FJ_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    FJ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    FJ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    FJ_CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
    FJ_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    FJ_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
};

/* CUfunction_attribute values used */
enum {
    FJ_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
    FJ_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
    FJ_CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
    FJ_CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
    FJ_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

enum { FJ_CU_EVENT_DEFAULT = 0 };

/* cuLaunchKernelEx (CUDA 12.0+), as laid out in cuda.h: only the
 * programmatic-stream-serialization attribute is used (programmatic
 * dependent launch: the combine kernel may start while the split-KV kernel
 * drains, and waits for it with griddepcontrol.wait). */
enum { FJ_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };
typedef struct fj_cu_launch_attribute {
    int id;
    char pad[8 - sizeof(int)];
    union {
        char pad[64];
        int programmatic_stream_serialization_allowed;
    } value;
} fj_cu_launch_attribute;
typedef struct fj_cu_launch_config {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem_bytes;
    CUstream stream;
    fj_cu_launch_attribute *attrs;
    unsigned num_attrs;
} fj_cu_launch_config;

/* cuTensorMapEncodeTiled (CUDA 12.0+): the enum values used, as in cuda.h. */
enum {
    FJ_CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
    FJ_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
    FJ_CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
    FJ_CU_TENSOR_MAP_SWIZZLE_32B = 1,
    FJ_CU_TENSOR_MAP_SWIZZLE_64B = 2,
    FJ_CU_TENSOR_MAP_SWIZZLE_128B = 3,
    FJ_CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,
    FJ_CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
    FJ_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0, /* out-of-bounds elements read as zero */
};

/* cuGetProcAddress (CUDA 12+): flags and result */
enum { FJ_CU_GET_PROC_ADDRESS_DEFAULT = 0 };
typedef int CUdriverProcAddressQueryResult; /* 0 = found */

/* Driver entry points are asked for at this API version (12.0): the oldest
 * driver generation with cuGetProcAddress_v2; all we call exists there. */
#define FJ_CUDA_API_VERSION 12000

/* ---- NVRTC types ------------------------------------------------------ */

typedef int nvrtcResult; /* NVRTC_SUCCESS = 0 */
typedef struct _nvrtcProgram *nvrtcProgram;

/* ---- the function table ------------------------------------------------ */

typedef struct fj_cuda_api {
    /* driver */
    CUresult (*cuInit)(unsigned flags);
    CUresult (*cuDriverGetVersion)(int *version);
    CUresult (*cuGetErrorName)(CUresult e, const char **name);
    CUresult (*cuGetErrorString)(CUresult e, const char **text);
    CUresult (*cuDeviceGetCount)(int *count);
    CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*cuDeviceGetName)(char *name, int len, CUdevice dev);
    CUresult (*cuDeviceGetAttribute)(int *value, int attrib, CUdevice dev);
    CUresult (*cuDeviceTotalMem)(size_t *bytes, CUdevice dev); /* _v2 */
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice dev); /* _v2 */
    CUresult (*cuCtxPushCurrent)(CUcontext ctx);         /* _v2 */
    CUresult (*cuCtxPopCurrent)(CUcontext *ctx);         /* _v2 */
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuModuleLoadData)(CUmodule *mod, const void *image);
    CUresult (*cuModuleUnload)(CUmodule mod);
    CUresult (*cuModuleGetFunction)(CUfunction *fn, CUmodule mod, const char *name);
    CUresult (*cuFuncSetAttribute)(CUfunction fn, int attrib, int value);
    CUresult (*cuFuncGetAttribute)(int *value, int attrib, CUfunction fn);
    CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *blocks, CUfunction fn,
                                                            int block_size, size_t dyn_smem);
    CUresult (*cuLaunchKernel)(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned smem, CUstream stream,
                               void **params, void **extra);
    /* NULL in a test's table that lacks it: launches then use cuLaunchKernel */
    CUresult (*cuLaunchKernelEx)(const fj_cu_launch_config *config, CUfunction fn, void **params,
                                 void **extra);
    /* tensor_map: 128 bytes, 64-byte aligned (fj_tensor_map) */
    CUresult (*cuTensorMapEncodeTiled)(void *tensor_map, int data_type, uint32_t rank,
                                       void *global_address, const cuuint64_t *global_dim,
                                       const cuuint64_t *global_strides, const uint32_t *box_dim,
                                       const uint32_t *element_strides, int interleave, int swizzle,
                                       int l2_promotion, int oob_fill);
    CUresult (*cuMemAlloc)(CUdeviceptr *ptr, size_t bytes);                   /* _v2 */
    CUresult (*cuMemFree)(CUdeviceptr ptr);                                   /* _v2 */
    CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes); /* _v2 */
    CUresult (*cuMemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);       /* _v2 */
    CUresult (*cuMemsetD8)(CUdeviceptr dst, unsigned char value, size_t n);   /* _v2 */
    CUresult (*cuStreamSynchronize)(CUstream stream);
    CUresult (*cuEventCreate)(CUevent *ev, unsigned flags);
    CUresult (*cuEventRecord)(CUevent ev, CUstream stream);
    CUresult (*cuEventSynchronize)(CUevent ev);
    CUresult (*cuEventElapsedTime)(float *ms, CUevent start, CUevent end);
    CUresult (*cuEventDestroy)(CUevent ev); /* _v2 */

    /* NVRTC */
    nvrtcResult (*nvrtcVersion)(int *major, int *minor);
    nvrtcResult (*nvrtcGetNumSupportedArchs)(int *n);
    nvrtcResult (*nvrtcGetSupportedArchs)(int *archs);
    const char *(*nvrtcGetErrorString)(nvrtcResult r);
    nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram *prog, const char *src, const char *name,
                                      int num_headers, const char *const *headers,
                                      const char *const *include_names);
    nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram *prog);
    nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram prog, int num_options,
                                       const char *const *options);
    nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram prog, char *log);
    nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram prog, char *cubin);
    nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*nvrtcGetPTX)(nvrtcProgram prog, char *ptx);

    /* what was loaded, for describe and error messages */
    char driver_path[256]; /* "" when the driver part is not loaded */
    char nvrtc_path[256];  /* "" when NVRTC is not loaded */
    int driver_version;    /* e.g. 13000 */
    int nvrtc_major, nvrtc_minor;
} fj_cuda_api;

/* The driver part of the table, loaded once (thread-safe, first use).
 * FJ_ERR_NO_DEVICE with the reason in fj_last_error() (which library, the
 * loader's text, FLASHJIT_LIBCUDA) when it cannot be loaded. */
fj_status fj_cuda_driver(const fj_cuda_api **api);

/* The NVRTC part, loaded once, never unloaded: libnvrtc.so.13, .so.12, .so,
 * or FLASHJIT_LIBNVRTC. Works without a driver (compile-all). */
fj_status fj_cuda_nvrtc(const fj_cuda_api **api);

/* Replaces the table for tests (NULL: back to the real libraries). Not
 * thread-safe: call it while no other thread uses flashjit. */
void fj_cuda_api_override(const fj_cuda_api *fake);

/* "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED (unspecified launch
 * failure)" into fj_last_error(); returns FJ_ERR_DRIVER, or
 * FJ_ERR_OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY. */
fj_status fj_cuda_fail(const fj_cuda_api *api, CUresult r, const char *what);

#endif
