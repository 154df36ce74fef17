/* kernels/cuda/nvjpeg_dl.h — nvJPEG, loaded at run time.
 *
 * nvJPEG ships with the CUDA toolkit on the GPU machines (libnvjpeg.so.13,
 * nvjpeg.h) but not in every CUDA install that builds Tessera: this
 * Debian build host's CUDA 13 has neither the header nor the library, and
 * a worker must start on a machine without it. So, as worker/nvml.c does
 * for NVML, the few entry points tiff_read uses are declared here from
 * nvjpeg.h's documented C ABI (the values are checked against the real
 * header on the GPU machine: scripts/device-tests.sh nvjpeg-abi) and found
 * with dlopen on first use. Without the library tiff_read's CUDA variant
 * returns TSR_ENODEV and the worker decodes on its CPU.
 *
 * Thread safety: tsr_nvjpeg() is safe from any thread (the load happens
 * once); an nvJPEG handle and state belong to one thread at a time. */
#ifndef TSR_KERNELS_CUDA_NVJPEG_DL_H
#define TSR_KERNELS_CUDA_NVJPEG_DL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
typedef int nvjpegStatus_t;   /* NVJPEG_STATUS_SUCCESS = 0 */

enum {
  TSR_NVJPEG_BACKEND_DEFAULT = 0,
  TSR_NVJPEG_BACKEND_HARDWARE = 3,   /* the A100/H100 JPEG engines */
};
enum {
  TSR_NVJPEG_OUTPUT_UNCHANGED = 0,   /* planar components, no colour conversion */
  TSR_NVJPEG_OUTPUT_Y = 2,           /* luma only (grey) */
  TSR_NVJPEG_OUTPUT_RGBI = 5,        /* interleaved RGB, YCbCr converted */
};
enum { TSR_NVJPEG_MAX_COMPONENT = 4 };

typedef struct nvjpegImage_t {
  unsigned char *channel[TSR_NVJPEG_MAX_COMPONENT];
  size_t pitch[TSR_NVJPEG_MAX_COMPONENT];
} nvjpegImage_t;

typedef struct tsr_nvjpeg_api {
  nvjpegStatus_t (*CreateEx)(int backend, void *dev_alloc, void *pinned_alloc, unsigned flags, nvjpegHandle_t *h);
  nvjpegStatus_t (*Destroy)(nvjpegHandle_t h);
  nvjpegStatus_t (*JpegStateCreate)(nvjpegHandle_t h, nvjpegJpegState_t *s);
  nvjpegStatus_t (*JpegStateDestroy)(nvjpegJpegState_t s);
  nvjpegStatus_t (*GetImageInfo)(nvjpegHandle_t h, const unsigned char *data, size_t len, int *ncomponents,
                                 int *subsampling, int *widths, int *heights);
  nvjpegStatus_t (*Decode)(nvjpegHandle_t h, nvjpegJpegState_t s, const unsigned char *data, size_t len, int format,
                           nvjpegImage_t *out, cudaStream_t stream);
  nvjpegStatus_t (*DecodeBatchedInitialize)(nvjpegHandle_t h, nvjpegJpegState_t s, int batch, int max_cpu_threads,
                                            int format);
  nvjpegStatus_t (*DecodeBatched)(nvjpegHandle_t h, nvjpegJpegState_t s, const unsigned char *const *data,
                                  const size_t *lens, nvjpegImage_t *out, cudaStream_t stream);
} tsr_nvjpeg_api;

/* The loaded API, or NULL when libnvjpeg cannot be loaded (why: in
 * *why_p, static text). */
const tsr_nvjpeg_api *tsr_nvjpeg(const char **why_p);

#ifdef __cplusplus
}
#endif

#endif
