/* tests/unit/nvjpeg_abi.c — checks kernels/cuda/nvjpeg_dl.h (our
 * declarations of nvJPEG's C ABI, for loading it at run time) against the
 * real nvjpeg.h, on a machine that has it (the GPU machine:
 * scripts/device-tests.sh tiles). Built twice — with -DREAL against
 * <nvjpeg.h>, without against ours — the two outputs must be equal. */
#include <stddef.h>
#include <stdio.h>

#ifdef REAL
#include <nvjpeg.h>
#define V(ours, real) (int)(real)
typedef nvjpegImage_t image_t;
#else
#include "nvjpeg_dl.h"
#define V(ours, real) (int)(ours)
typedef nvjpegImage_t image_t;
#endif

int main(void)
{
  printf("backend default %d\n", V(TSR_NVJPEG_BACKEND_DEFAULT, NVJPEG_BACKEND_DEFAULT));
  printf("backend hardware %d\n", V(TSR_NVJPEG_BACKEND_HARDWARE, NVJPEG_BACKEND_HARDWARE));
  printf("output unchanged %d\n", V(TSR_NVJPEG_OUTPUT_UNCHANGED, NVJPEG_OUTPUT_UNCHANGED));
  printf("output y %d\n", V(TSR_NVJPEG_OUTPUT_Y, NVJPEG_OUTPUT_Y));
  printf("output rgbi %d\n", V(TSR_NVJPEG_OUTPUT_RGBI, NVJPEG_OUTPUT_RGBI));
  printf("max component %d\n", V(TSR_NVJPEG_MAX_COMPONENT, NVJPEG_MAX_COMPONENT));
  printf("image size %zu pitch at %zu\n", sizeof(image_t), offsetof(image_t, pitch));
  return 0;
}
