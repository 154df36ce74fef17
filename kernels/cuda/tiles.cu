/* kernels/cuda/tiles.cu — whole-slide ops on GPU workers (docs/tiles.md):
 *
 * - tiff_read: the region's compressed JPEG tiles are read on the host
 *   (tsr_k_tiff_jpeg_blocks: libtiff, the shared tables spliced in) and
 *   decoded on the device by nvJPEG's default backend (or the JPEG
 *   engines of an A100/H100/H200 through its hardware backend, with
 *   TSR_NVJPEG_BACKEND=hardware) into scratch, then one kernel copies each
 *   tile's overlap
 *   into the output (planar RGB interleaved, grey replicated). Not JPEG,
 *   or no libnvjpeg: TSR_ENODEV, so the worker runs the CPU variant.
 *   nvJPEG's IDCT is not libjpeg-turbo's: pixels may differ by a few
 *   levels from the CPU decode (docs/tiles.md, "On GPU workers").
 * - tile_stats: one block per tile (a chunk may hold many: the param
 *   `tile`), a 256-bin shared-memory histogram of
 *   grey8 (percentiles, min, max: no sort) and block reductions of the
 *   sums; the same formulas as kernels/cpu/tiles.c, so on the same pixels
 *   the histogram values are exact and the means agree to rounding. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "common.cuh"
#include "nvjpeg_dl.h"

/* ---------- loading nvJPEG ---------- */

static tsr_nvjpeg_api g_api;
static const char *g_why = "not loaded";
static bool g_loaded;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void nvjpeg_load(void)
{
  void *lib = dlopen("libnvjpeg.so.13", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) lib = dlopen("libnvjpeg.so", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    g_why = "libnvjpeg.so.13 not found";
    return;
  }
#define SYM(field, name)                                                \
  if ((*(void **)&g_api.field = dlsym(lib, name)) == NULL) {            \
    g_why = "libnvjpeg lacks " name;                                    \
    return;                                                             \
  }
  SYM(CreateEx, "nvjpegCreateEx");
  SYM(Destroy, "nvjpegDestroy");
  SYM(JpegStateCreate, "nvjpegJpegStateCreate");
  SYM(JpegStateDestroy, "nvjpegJpegStateDestroy");
  SYM(GetImageInfo, "nvjpegGetImageInfo");
  SYM(Decode, "nvjpegDecode");
  SYM(DecodeBatchedInitialize, "nvjpegDecodeBatchedInitialize");
  SYM(DecodeBatched, "nvjpegDecodeBatched");
#undef SYM
  g_loaded = true;
  g_why = NULL;
}

const tsr_nvjpeg_api *tsr_nvjpeg(const char **why_p)
{
  pthread_once(&g_once, nvjpeg_load);
  if (why_p != NULL) *why_p = g_why;
  return g_loaded ? &g_api : NULL;
}

/* nvJPEG handles are thread-safe, its decode states are not: one pair of
 * handles per device, made once and kept for the process (creating one
 * costs milliseconds; with a pair per executor thread a 16-thread GPU
 * worker took 12.35 s on bench/tiles/gpu.sh's 40,000² slide, shared 11.22
 * s, 8 threads 9.66 s either way), and a pair of states per thread.
 * hw: the hardware backend, made only when TSR_NVJPEG_BACKEND=hardware
 * asks for the JPEG engines (it refuses to be created on GPUs without
 * them). They won with a task a tile (~4 source tiles a batch: 9.95 s
 * against 13.19 s for a 40,000² slide on an H200) and lose with the
 * regions tsr-tiles reads on GPU workers (~100 a batch: 2.3-2.4 s of
 * tsr-tiles' own clock against 1.3-2.0 s on the default backend, which
 * also slowed while the hardware handle merely existed; bench/RESULTS.md,
 * 2026-11-25), so the default backend is the default. */
#define NVJPEG_MAX_DEVICES 64
struct jpeg_handles {
  bool made = false;
  int status = 0;   /* the default backend's creation status */
  nvjpegHandle_t hw = nullptr, sw = nullptr;
};
static jpeg_handles g_handles[NVJPEG_MAX_DEVICES];
static pthread_mutex_t g_handles_mu = PTHREAD_MUTEX_INITIALIZER;

struct jpeg_decoder {
  int device = -1;
  nvjpegHandle_t hw = nullptr, sw = nullptr;
  nvjpegJpegState_t hw_state = nullptr, sw_state = nullptr;
};
static thread_local jpeg_decoder t_dec;

static const jpeg_handles *handles_get(const tsr_nvjpeg_api *api, int device)
{
  pthread_mutex_lock(&g_handles_mu);
  jpeg_handles *h = &g_handles[device];
  if (!h->made) {
    const char *want = getenv("TSR_NVJPEG_BACKEND");
    bool try_hw = want != NULL && strcmp(want, "hardware") == 0;
    if (!try_hw || api->CreateEx(TSR_NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &h->hw) != 0) h->hw = nullptr;
    h->status = api->CreateEx(TSR_NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &h->sw);
    h->made = true;
  }
  pthread_mutex_unlock(&g_handles_mu);
  return h;
}

static int decoder_get(const tsr_nvjpeg_api *api, int device, jpeg_decoder **dec_p, tsr_errbuf *err)
{
  jpeg_decoder *d = &t_dec;
  if (device < 0 || device >= NVJPEG_MAX_DEVICES) return TSR_ENODEV;
  if (d->device != device) {
    if (d->sw_state) api->JpegStateDestroy(d->sw_state);
    if (d->hw_state) api->JpegStateDestroy(d->hw_state);
    *d = jpeg_decoder();
    const jpeg_handles *h = handles_get(api, device);
    if (h->status != 0) return tsr_fail(err, TSR_EINTERNAL, "nvJPEG: cannot create a decoder (status %d)", h->status);
    d->hw = h->hw, d->sw = h->sw;
    if (d->hw != nullptr && api->JpegStateCreate(d->hw, &d->hw_state) != 0) d->hw = nullptr, d->hw_state = nullptr;
    int s = api->JpegStateCreate(d->sw, &d->sw_state);
    if (s != 0) return tsr_fail(err, TSR_EINTERNAL, "nvJPEG: cannot create a decode state (status %d)", s);
    d->device = device;
  }
  *dec_p = d;
  return 0;
}

/* ---------- tiff_read ---------- */

/* Where block k's pixels are in scratch: planar (UNCHANGED: 3 planes of
 * bw x bh) or interleaved (RGBI: one plane of bw x bh x 3) or grey. */
struct block_geom {
  int64_t x0, y0, w, h;   /* the region */
  int64_t bw, bh;         /* a block */
  int format;
  size_t block_bytes;
};

static __device__ void pixel_of(const uint8_t *blk, const block_geom g, int64_t bx, int64_t by, uint8_t rgb[3])
{
  size_t plane = (size_t)g.bw * g.bh, at = (size_t)by * g.bw + bx;
  if (g.format == TSR_NVJPEG_OUTPUT_RGBI) {
    rgb[0] = blk[3 * at], rgb[1] = blk[3 * at + 1], rgb[2] = blk[3 * at + 2];
  } else if (g.format == TSR_NVJPEG_OUTPUT_Y) {
    rgb[0] = rgb[1] = rgb[2] = blk[at];
  } else {
    rgb[0] = blk[at], rgb[1] = blk[plane + at], rgb[2] = blk[2 * plane + at];
  }
}

/* One thread per output pixel: which block holds it, and where. */
__global__ void k_blocks_to_region(const uint8_t *scratch, const int64_t *bx, const int64_t *by, int64_t nx,
                                   block_geom g, uint8_t *out)
{
  TSR_GRID_STRIDE(i, g.w * g.h)
  {
    int64_t y = g.y0 + i / g.w, x = g.x0 + i % g.w;
    int64_t k = (y - by[0]) / g.bh * nx + (x - bx[0]) / g.bw;
    uint8_t rgb[3];
    pixel_of(scratch + (size_t)k * g.block_bytes, g, x - bx[k], y - by[k], rgb);
    out[3 * i] = rgb[0], out[3 * i + 1] = rgb[1], out[3 * i + 2] = rgb[2];
  }
}

static void images_of(const block_geom &g, uint8_t *scratch, size_t n, nvjpegImage_t *img)
{
  size_t plane = (size_t)g.bw * g.bh;
  for (size_t k = 0; k < n; k++) {
    uint8_t *b = scratch + k * g.block_bytes;
    memset(&img[k], 0, sizeof img[k]);
    int planes = g.format == TSR_NVJPEG_OUTPUT_UNCHANGED ? 3 : 1;
    for (int c = 0; c < planes; c++) {
      img[k].channel[c] = b + (size_t)c * plane;
      img[k].pitch[c] = (size_t)(g.format == TSR_NVJPEG_OUTPUT_RGBI ? 3 * g.bw : g.bw);
    }
  }
}

/* RGB stored as is must come out planar and unconverted; then every
 * component must be full size (no chroma subsampling). 0 or TSR_ENODEV. */
static int check_streams(const tsr_nvjpeg_api *api, nvjpegHandle_t h, const tsr_k_jpeg_blocks *b, int format)
{
  for (size_t k = 0; k < b->n; k++) {
    int nc = 0, ss = 0, wd[4] = {0}, ht[4] = {0};
    if (api->GetImageInfo(h, b->data[k], b->len[k], &nc, &ss, wd, ht) != 0) return TSR_ENODEV;
    if (nc != b->spp || wd[0] > (int)b->block_w || ht[0] > (int)b->block_h) return TSR_ENODEV;
    for (int c = 1; format == TSR_NVJPEG_OUTPUT_UNCHANGED && c < nc; c++)
      if (wd[c] != wd[0] || ht[c] != ht[0]) return TSR_ENODEV;
  }
  return 0;
}

/* The whole batch on the JPEG engines when they were asked for, else (or
 * when they refuse it) one by one on the default backend. 0, or the nvJPEG
 * status of the failure. */
static int decode_all(const tsr_nvjpeg_api *api, jpeg_decoder *d, const tsr_k_jpeg_blocks *b, int format,
                      nvjpegImage_t *img, cudaStream_t stream)
{
  if (d->hw != nullptr && api->DecodeBatchedInitialize(d->hw, d->hw_state, (int)b->n, 1, format) == 0 &&
      api->DecodeBatched(d->hw, d->hw_state, b->data, b->len, img, stream) == 0)
    return 0;
  for (size_t k = 0; k < b->n; k++) {
    int s = api->Decode(d->sw, d->sw_state, b->data[k], b->len[k], format, &img[k], stream);
    if (s != 0) return s;
  }
  return 0;
}

static int tiff_read_gpu(const tsr_k_jpeg_blocks *b, tsr_buf *out, const tsr_gpu_ctx *gpu, tsr_errbuf *err)
{
  const char *why = NULL;
  const tsr_nvjpeg_api *api = tsr_nvjpeg(&why);
  if (api == NULL) return TSR_ENODEV;
  jpeg_decoder *d = NULL;
  int rc = decoder_get(api, gpu->device, &d, err);
  if (rc != 0) return rc;
  block_geom g = {b->x0, b->y0, b->w, b->h, b->block_w, b->block_h, 0, 0};
  g.format = b->spp == 1 ? TSR_NVJPEG_OUTPUT_Y : b->ycbcr ? TSR_NVJPEG_OUTPUT_RGBI : TSR_NVJPEG_OUTPUT_UNCHANGED;
  g.block_bytes = (size_t)g.bw * g.bh * (b->spp == 1 ? 1 : 3);
  if (check_streams(api, d->sw, b, g.format) != 0) return TSR_ENODEV;
  tsr_scratch scratch(gpu);
  uint8_t *blocks = nullptr;
  int64_t *pos = nullptr;
  rc = scratch.get(g.block_bytes * b->n, (void **)&blocks, "decoded tiles", err);
  if (rc == 0) rc = scratch.get((int64_t)(2 * b->n), &pos, "tile origins", err);
  if (rc != 0) return rc;
  nvjpegImage_t *img = (nvjpegImage_t *)calloc(b->n, sizeof *img);
  if (img == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory");
  images_of(g, blocks, b->n, img);
  cudaStream_t stream = tsr_stream(gpu);
  int s = decode_all(api, d, b, g.format, img, stream);
  if (s != 0) {
    free(img);
    return tsr_fail(err, TSR_EIO, "%s: nvJPEG cannot decode a tile (status %d)", b->path, s);
  }
  /* the origins: pageable copies, finished before this returns */
  rc = TSR_CUDA_CHECK(cudaMemcpyAsync(pos, b->bx, b->n * sizeof *pos, cudaMemcpyHostToDevice, stream), err);
  if (rc == 0)
    rc = TSR_CUDA_CHECK(cudaMemcpyAsync(pos + b->n, b->by, b->n * sizeof *pos, cudaMemcpyHostToDevice, stream), err);
  if (rc != 0) return rc;
  int64_t nx = (b->x0 + b->w - b->bx[0] + g.bw - 1) / g.bw;
  k_blocks_to_region<<<tsr_grid(b->w * b->h, 256), 256, 0, stream>>>(blocks, pos, pos + b->n, nx, g,
                                                                     (uint8_t *)out->data);
  rc = TSR_CUDA_LAUNCHED("k_blocks_to_region", err);
  /* nvJPEG's default backend reads the streams on the host during the
   * call, the hardware one while the stream runs: wait before they go. */
  if (rc == 0) rc = TSR_CUDA_CHECK(cudaStreamSynchronize(stream), err);
  free(img);
  return rc;
}

extern "C" int tsr_cuda_tiff_read(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out,
                                  const tsr_gpu_ctx *gpu, tsr_errbuf *err)
{
  (void)in, (void)n_in;
  tsr_k_jpeg_blocks b;
  int rc = tsr_k_tiff_jpeg_blocks(p, &b, err);
  if (rc != 0) return rc == TSR_ENODEV ? rc : tsr_cuda_fail_op("tiff_read", rc, err);
  rc = tiff_read_gpu(&b, out, gpu, err);
  tsr_k_jpeg_blocks_free(&b);
  return rc;
}

/* ---------- tile_stats ---------- */

#define STATS_THREADS 256

/* The value of rank k (0-based) in the histogram's sorted values. */
static __device__ double hist_rank(const unsigned *hist, uint64_t k)
{
  uint64_t seen = 0;
  for (int v = 0; v < 256; v++) {
    seen += hist[v];
    if (seen > k) return v;
  }
  return 255;
}

/* numpy.percentile (linear), as kernels/cpu/tiles.c computes it. */
static __device__ double hist_percentile(const unsigned *hist, uint64_t n, double q)
{
  double pos = q / 100.0 * (double)(n - 1);
  uint64_t lo = (uint64_t)pos, hi = lo + 1 < n ? lo + 1 : lo;
  double t = pos - (double)lo, a = hist_rank(hist, lo), b = hist_rank(hist, hi), diff = b - a;
  return t >= 0.5 ? b - diff * (1.0 - t) : a + diff * t;
}

/* Sum of v over the block (every thread gets it). */
template <class T>
static __device__ T block_sum(T v, T *shared)
{
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = STATS_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  T total = shared[0];
  __syncthreads();
  return total;
}

static __device__ double gray_of(unsigned r, unsigned g, unsigned b)
{
  return 0.299 * r + 0.587 * g + 0.114 * b;
}

/* A thread's walk over a sub-tile's pixels i = first, first + step, ...
 * in the order a chunk of that tile alone has (row i / cols, column
 * i % cols), the position kept by additions: no division per pixel. */
struct px_walk {
  const uint8_t *base;
  int64_t w, cols, row, col;
  __device__ px_walk(const uint8_t *b, int64_t width, int64_t c, int64_t first)
      : base(b), w(width), cols(c), row(first / c), col(first % c) {}
  __device__ const uint8_t *at() const { return base + (row * w + col) * 3; }
  __device__ void next(int64_t step)
  {
    for (col += step; col >= cols; col -= cols) row++;  /* one pass when cols >= step */
  }
};

/* Block (blockIdx.x, blockIdx.y) takes sub-tile (x, y) of the h x w chunk
 * (th x tw, smaller at the edges; output row-major over the sub-tiles),
 * its pixels in a chunk of that tile alone's order, so the sums run in the
 * same order. */
__global__ void k_tile_stats(const uint8_t *chunk, int64_t h, int64_t w, int64_t th, int64_t tw, double *out_all)
{
  int64_t y0 = (int64_t)blockIdx.y * th, x0 = (int64_t)blockIdx.x * tw;
  int64_t rows = h - y0 < th ? h - y0 : th, cols = w - x0 < tw ? w - x0 : tw, n = rows * cols;
  double *out = out_all + ((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * TSR_K_TS_N;
  const uint8_t *base = chunk + (y0 * w + x0) * 3;
  __shared__ unsigned hist[256];
  __shared__ double dsum[STATS_THREADS];
  __shared__ unsigned long long usum[STATS_THREADS];
  for (int v = threadIdx.x; v < 256; v += STATS_THREADS) hist[v] = 0;
  __syncthreads();
  unsigned long long rgb[3] = {0, 0, 0}, bg = 0;
  double gsum = 0, ssum = 0;
  px_walk p(base, w, cols, threadIdx.x);
  for (int64_t i = threadIdx.x; i < n; i += STATS_THREADS, p.next(STATS_THREADS)) {
    const uint8_t *q = p.at();
    unsigned r = q[0], g = q[1], b = q[2];
    atomicAdd(&hist[(19595u * r + 38470u * g + 7471u * b + 32768u) >> 16], 1u);
    rgb[0] += r, rgb[1] += g, rgb[2] += b;
    double gray = gray_of(r, g, b);
    unsigned mx = max(r, max(g, b)), mn = min(r, min(g, b));
    double sat = mx == 0 ? 0.0 : (double)(mx - mn) / (double)mx;
    gsum += gray, ssum += sat, bg += gray > 220.0 && sat < 0.1;
  }
  unsigned long long sr = block_sum(rgb[0], usum), sg = block_sum(rgb[1], usum), sb = block_sum(rgb[2], usum);
  unsigned long long nbg = block_sum(bg, usum);
  double sum_gray = block_sum(gsum, dsum), sum_sat = block_sum(ssum, dsum);
  double dn = (double)n, mean = sum_gray / dn, ss = 0;
  px_walk p2(base, w, cols, threadIdx.x);
  for (int64_t i = threadIdx.x; i < n; i += STATS_THREADS, p2.next(STATS_THREADS)) {
    const uint8_t *q = p2.at();
    double d = gray_of(q[0], q[1], q[2]) - mean;
    ss += d * d;
  }
  ss = block_sum(ss, dsum);
  if (threadIdx.x != 0) return;
  int lo = 0, hi = 255;
  while (lo < 255 && hist[lo] == 0) lo++;
  while (hi > 0 && hist[hi] == 0) hi--;
  out[TSR_K_TS_MIN] = n ? lo : 0;
  out[TSR_K_TS_MAX] = n ? hi : 0;
  out[TSR_K_TS_P5] = hist_percentile(hist, (uint64_t)n, 5);
  out[TSR_K_TS_P50] = hist_percentile(hist, (uint64_t)n, 50);
  out[TSR_K_TS_MEAN_R] = (double)sr / dn;
  out[TSR_K_TS_MEAN_G] = (double)sg / dn;
  out[TSR_K_TS_MEAN_B] = (double)sb / dn;
  out[TSR_K_TS_MEAN_GRAY] = mean;
  out[TSR_K_TS_STD_GRAY] = sqrt(ss / dn);
  out[TSR_K_TS_MEAN_SAT] = sum_sat / dn;
  out[TSR_K_TS_FRAC_BG] = (double)nbg / dn;
  out[TSR_K_TS_PIXELS] = dn;
}

extern "C" int tsr_cuda_tile_stats(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out,
                                   const tsr_gpu_ctx *gpu, tsr_errbuf *err)
{
  (void)n_in;
  int64_t h = in[0].meta.shape[0], w = in[0].meta.shape[1], th, tw;
  int rc = tsr_k_tile_size(p, &in[0].meta, &th, &tw, err);
  if (rc != 0) return rc;
  dim3 grid((unsigned)((w + tw - 1) / tw), (unsigned)((h + th - 1) / th));
  k_tile_stats<<<grid, STATS_THREADS, 0, tsr_stream(gpu)>>>((const uint8_t *)in[0].data, h, w, th, tw,
                                                             (double *)out->data);
  return TSR_CUDA_LAUNCHED("k_tile_stats", err);
}
