/* The UCX fetcher's receive-buffer pool (ucx.h, docs/transport.md
 * "Receive-buffer pool").
 *
 * Why: a 64 MiB chunk received into a fresh buffer pays for the buffer's
 * page faults (the kernel zeroes every page) and, with huge pages, the odd
 * compaction stall, inside the fetch; a buffer that already holds its
 * pages costs nothing. So rendezvous receives go into buffers the process
 * owns: mapped once (2 MiB aligned, huge pages advised), faulted in once,
 * registered with UCX once (ucp_mem_map), and put back here when the chunk
 * received into them is freed, to be reused by the next chunk of a fitting
 * size.
 *
 * Sizes: a buffer's capacity is its first chunk's size rounded up to
 * 2 MiB; a later chunk takes the smallest idle buffer that holds it and
 * wastes at most a quarter of it (+ 2 MiB). Chunks under TSR_XFER_POOL_MIN
 * are not pooled (few faults), nor chunks over the largest class (a plain
 * allocation, freed at release). Idle buffers are kept up to the idle
 * limit; a buffer put back beyond it is unmapped.
 *
 * A spare: when a chunk takes the last idle buffer that fits it (or a new
 * one), a background thread maps, faults and registers one more of that
 * capacity, when the idle limit allows: a worker that fetches chunk after
 * chunk still holds the last one (its release comes a round trip later)
 * when the next arrives, and a second buffer made inside that fetch costs
 * as much as the first (100-300 ms on a busy VM). A take that finds no
 * idle buffer while a fitting buffer is being made waits for it rather
 * than mapping another. Only in a process that asks
 * (tsr_xfer_pool_configure: the worker): a detached thread still mapping
 * when a client program exits would race UCX's own teardown.
 *
 * Warming (tsr_xfer_pool_warm / _fill): a worker asks for buffers of a
 * size before any fetch needs them: at start (--recv-pool-warm: made on
 * the starting thread, before the worker says hello, so before any
 * graph) and when a task whose input it will fetch is queued (the size
 * is in the task's input metadata: made by the background maker, at a
 * lower CPU priority, so a fetch in progress keeps its core). A want is
 * "COUNT buffers that fit this size, idle or lent": the maker makes the
 * missing ones within the idle limit, then forgets the want. One maker
 * thread at a time, detached, gone when nothing is wanted; spares are
 * wants of one more idle buffer.
 *
 * Threading: one pool per process under a mutex: a chunk is released on
 * whichever thread drops its last reference (a worker's executor, ZeroMQ's
 * I/O thread). Each mapped buffer holds a reference on the UCP context, so
 * the context outlives every registration; tsr_xfer_pool_trim drops them. */
#define _GNU_SOURCE
#include "ucx_int.h"

#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define HUGE_2M ((size_t)2 << 20)

struct tsr_ucx_buf {
  void *data;
  size_t capacity;      /* 0: not pooled (a plain allocation, freed at put) */
  ucp_mem_h memh;       /* NULL when registration failed (UCX still works) */
  ucp_context_h ctx;
  struct tsr_ucx_buf *next;   /* idle list */
  struct tsr_ucx_buf *all_prev, *all_next;   /* every pooled buffer, idle or lent */
};

/* Buffers wanted ahead (tsr_xfer_pool_warm): COUNT that fit chunks of
 * nbytes, idle or lent. idle_only: a spare (one more idle one). */
#define MAX_WANTS 8
typedef struct pool_want {
  size_t nbytes;
  unsigned count;
  bool idle_only;
} pool_want;

/* The maker's CPU priority (nice): below the fetching threads, so
 * faulting a buffer in does not slow a receive in progress on two cores. */
#define MAKER_NICE 10

static struct {
  pthread_mutex_t lock;
  pthread_cond_t spare_done;
  tsr_ucx_buf *idle;
  tsr_ucx_buf *all;        /* every pooled buffer (all_next) */
  size_t idle_limit, max_class;
  bool spares;             /* make spares (tsr_xfer_pool_configure) */
  pool_want wants[MAX_WANTS];
  unsigned nwants;
  bool maker;              /* a maker thread runs */
  size_t making;           /* capacity of the buffer being made, 0 when none */
  tsr_xfer_pool_stats stats;
} pool = {
  .lock = PTHREAD_MUTEX_INITIALIZER,
  .spare_done = PTHREAD_COND_INITIALIZER,
  .idle_limit = TSR_XFER_POOL_IDLE_DEFAULT,
  .max_class = TSR_XFER_POOL_MAX_CLASS,
  .spares = false,   /* a worker turns them on; a client exits too soon after a gather */
};

void tsr_xfer_pool_configure(size_t idle_limit, size_t max_class, bool spares)
{
  pthread_mutex_lock(&pool.lock);
  pool.idle_limit = idle_limit;
  pool.max_class = max_class;
  pool.spares = spares;
  pthread_mutex_unlock(&pool.lock);
}

void tsr_xfer_pool_get_stats(tsr_xfer_pool_stats *stats)
{
  pthread_mutex_lock(&pool.lock);
  *stats = pool.stats;
  pthread_mutex_unlock(&pool.lock);
}

/* Maps capacity bytes on a 2 MiB boundary (so huge pages can back it) and
 * faults them in now, outside any fetch. NULL when out of memory. */
static void *map_faulted(size_t capacity)
{
  size_t span = capacity + HUGE_2M;
  char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  char *start = (char *)(((uintptr_t)raw + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
  if (start > raw) munmap(raw, (size_t)(start - raw));
  size_t tail = (size_t)((raw + span) - (start + capacity));
  if (tail > 0) munmap(start + capacity, tail);
  madvise(start, capacity, MADV_HUGEPAGE);
  if (madvise(start, capacity, MADV_POPULATE_WRITE) == 0) return start;
  if (errno != EINVAL) {   /* out of memory: say so rather than be killed touching pages */
    munmap(start, capacity);
    return NULL;
  }
  long page = sysconf(_SC_PAGESIZE);   /* kernels before 5.14 */
  for (size_t off = 0; off < capacity; off += (size_t)page) start[off] = 0;
  return start;
}

/* Registers buf with UCX; failure leaves memh NULL (UCX registers on the
 * fly then, as for any buffer). */
static void register_buf(tsr_ucx_buf *buf)
{
  tsr_errbuf err = {{0}};
  if (tsr_ucx_context_take(TSR_UCX_ALL, &buf->ctx, &err) != 0) {
    buf->ctx = NULL;
    return;
  }
  ucp_mem_map_params_t p = {
    .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
    .address = buf->data,
    .length = buf->capacity,
  };
  if (ucp_mem_map(buf->ctx, &p, &buf->memh) != UCS_OK) buf->memh = NULL;
}

static size_t capacity_for(size_t nbytes) { return (nbytes + HUGE_2M - 1) & ~(HUGE_2M - 1); }

static tsr_ucx_buf *buf_new_pooled(size_t nbytes)
{
  tsr_ucx_buf *buf = calloc(1, sizeof *buf);
  if (buf == NULL) return NULL;
  buf->capacity = capacity_for(nbytes);
  buf->data = map_faulted(buf->capacity);
  if (buf->data == NULL) {
    free(buf);
    return NULL;
  }
  register_buf(buf);
  return buf;
}

/* Under the lock: buf joins / leaves the list of every pooled buffer. */
static void link_all(tsr_ucx_buf *buf)
{
  buf->all_prev = NULL;
  buf->all_next = pool.all;
  if (pool.all != NULL) pool.all->all_prev = buf;
  pool.all = buf;
  pool.stats.buffers++;
}

static void unlink_all(tsr_ucx_buf *buf)
{
  if (buf->all_prev != NULL) buf->all_prev->all_next = buf->all_next;
  else pool.all = buf->all_next;
  if (buf->all_next != NULL) buf->all_next->all_prev = buf->all_prev;
  buf->all_prev = buf->all_next = NULL;
  pool.stats.buffers--;
}

static tsr_ucx_buf *buf_new_plain(size_t nbytes)
{
  tsr_ucx_buf *buf = calloc(1, sizeof *buf);
  if (buf != NULL && posix_memalign(&buf->data, 64, nbytes ? nbytes : 1) != 0) {
    free(buf);
    buf = NULL;
  }
  return buf;
}

static void buf_free(tsr_ucx_buf *buf)
{
  if (buf->capacity == 0) {
    free(buf->data);
  } else {
    if (buf->memh != NULL) ucp_mem_unmap(buf->ctx, buf->memh);
    if (buf->ctx != NULL) tsr_ucx_context_drop(TSR_UCX_ALL);
    munmap(buf->data, buf->capacity);
  }
  free(buf);
}

/* True when a buffer of capacity may take a chunk of nbytes: it holds it
 * and wastes at most a quarter (+ 2 MiB) of itself. */
static bool fits(size_t capacity, size_t nbytes)
{
  return capacity >= nbytes && capacity <= nbytes + nbytes / 4 + HUGE_2M;
}

/* Unlinks and returns the smallest idle buffer that holds nbytes without
 * wasting more than a quarter (+ 2 MiB) of it, or NULL. Under the lock. */
static tsr_ucx_buf *take_idle(size_t nbytes)
{
  tsr_ucx_buf **best = NULL;
  for (tsr_ucx_buf **at = &pool.idle; *at != NULL; at = &(*at)->next)
    if (fits((*at)->capacity, nbytes) && (best == NULL || (*at)->capacity < (*best)->capacity)) best = at;
  if (best == NULL) return NULL;
  tsr_ucx_buf *buf = *best;
  *best = buf->next;
  buf->next = NULL;
  pool.stats.idle_buffers--;
  pool.stats.idle_bytes -= buf->capacity;
  return buf;
}

/* Under the lock: an idle buffer fits nbytes. */
static bool idle_fits(size_t nbytes)
{
  for (tsr_ucx_buf *b = pool.idle; b != NULL; b = b->next)
    if (fits(b->capacity, nbytes)) return true;
  return false;
}

/* Adds buf to the idle list if the limit allows; false when it does not
 * (the caller frees it). Under the lock. */
static bool keep_idle(tsr_ucx_buf *buf)
{
  if (pool.stats.idle_bytes + buf->capacity > pool.idle_limit) return false;
  buf->next = pool.idle;
  pool.idle = buf;
  pool.stats.idle_buffers++;
  pool.stats.idle_bytes += buf->capacity;
  return true;
}

/* Under the lock: pooled buffers that fit nbytes, lent ones included or
 * idle only. */
static unsigned count_fitting(size_t nbytes, bool idle_only)
{
  unsigned n = 0;
  if (idle_only) {
    for (tsr_ucx_buf *b = pool.idle; b != NULL; b = b->next) n += fits(b->capacity, nbytes);
  } else {
    for (tsr_ucx_buf *b = pool.all; b != NULL; b = b->all_next) n += fits(b->capacity, nbytes);
  }
  return n;
}

/* Under the lock: the capacity of a buffer the oldest want still lacks
 * and the idle limit has room for, forgetting wants that are met (or
 * cannot be); 0 when nothing is wanted. */
static size_t next_wanted(void)
{
  while (pool.nwants > 0) {
    const pool_want *w = &pool.wants[0];
    size_t capacity = capacity_for(w->nbytes);
    if (count_fitting(w->nbytes, w->idle_only) < w->count && pool.stats.idle_bytes + capacity <= pool.idle_limit)
      return capacity;
    memmove(&pool.wants[0], &pool.wants[1], --pool.nwants * sizeof pool.wants[0]);
  }
  return 0;
}

/* Under the lock, back from making buf (NULL: out of memory, so forget
 * every want): keeps it idle, or returns it for the caller to free. */
static tsr_ucx_buf *land_made(tsr_ucx_buf *buf, bool spare)
{
  pool.making = 0;
  pthread_cond_broadcast(&pool.spare_done);
  if (buf == NULL) {
    pool.nwants = 0;
    return NULL;
  }
  link_all(buf);
  if (!keep_idle(buf)) {
    unlink_all(buf);
    return buf;
  }
  if (spare) pool.stats.spares++;
  else pool.stats.warmed++;
  return NULL;
}

/* The maker thread: makes what is wanted, at a lower priority than the
 * fetching threads, then ends. */
static void *maker_main(void *arg)
{
  (void)arg;
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), MAKER_NICE);
  pthread_mutex_lock(&pool.lock);
  size_t capacity;
  while ((capacity = next_wanted()) != 0) {
    bool spare = pool.wants[0].idle_only;
    pool.making = capacity;
    pthread_mutex_unlock(&pool.lock);
    uint64_t t0 = tsr_now_us();
    tsr_ucx_buf *buf = buf_new_pooled(capacity);
    if (buf != NULL)
      TSR_DEBUG("receive pool: %s %zu-byte buffer ready in %.3f ms (background)", spare ? "spare" : "warmed", capacity,
                (double)(tsr_now_us() - t0) / 1e3);
    pthread_mutex_lock(&pool.lock);
    tsr_ucx_buf *surplus = land_made(buf, spare);
    if (surplus != NULL) {
      pthread_mutex_unlock(&pool.lock);
      buf_free(surplus);
      pthread_mutex_lock(&pool.lock);
    }
  }
  pool.maker = false;
  pthread_cond_broadcast(&pool.spare_done);
  pthread_mutex_unlock(&pool.lock);
  return NULL;
}

/* Under the lock: records a want (raising the count of an equal one)
 * and starts the maker when none runs. */
static void add_want(size_t nbytes, unsigned count, bool idle_only)
{
  size_t capacity = capacity_for(nbytes);
  unsigned i = 0;
  while (i < pool.nwants && !(capacity_for(pool.wants[i].nbytes) == capacity && pool.wants[i].idle_only == idle_only))
    i++;
  if (i == pool.nwants) {
    if (pool.nwants == MAX_WANTS) return;
    pool.wants[pool.nwants++] = (pool_want){nbytes, 0, idle_only};
  }
  if (pool.wants[i].count < count) pool.wants[i].count = count;
  if (pool.maker) return;
  pthread_attr_t attr;
  pthread_t thread;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&thread, &attr, maker_main, NULL) == 0) pool.maker = true;
  else pool.nwants = 0;
  pthread_attr_destroy(&attr);
}

/* Under the lock, after a take of a buffer of capacity: wants a spare of
 * that capacity when none fits among the idle ones and the idle limit
 * has room for it. */
static void want_spare(size_t capacity)
{
  if (!pool.spares || idle_fits(capacity) || pool.stats.idle_bytes + capacity > pool.idle_limit) return;
  add_want(capacity, 1, true);
}

/* Under the lock: a fitting idle buffer, waiting for a fitting one being
 * made; NULL when neither. */
static tsr_ucx_buf *take_pooled(size_t nbytes)
{
  tsr_ucx_buf *buf = take_idle(nbytes);
  while (buf == NULL && pool.making != 0 && fits(pool.making, nbytes)) {
    pthread_cond_wait(&pool.spare_done, &pool.lock);
    buf = take_idle(nbytes);
  }
  return buf;
}

static tsr_ucx_buf *new_pooled_logged(size_t nbytes)
{
  uint64_t t0 = tsr_now_us();
  tsr_ucx_buf *buf = buf_new_pooled(nbytes);
  if (buf != NULL)
    TSR_DEBUG("receive pool: new %zu-byte buffer for a %zu-byte chunk, mapped and faulted in %.3f ms%s", buf->capacity,
              nbytes, (double)(tsr_now_us() - t0) / 1e3, buf->memh ? ", registered" : "");
  return buf;
}

/* TESSERA_RECV_POOL=0 (or off): every receive gets a fresh buffer, as
 * before the pool (the A/B of bench/hosts/transfer.sh; a way out). */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static bool pool_off;

static void read_env(void)
{
  const char *v = getenv("TESSERA_RECV_POOL");
  pool_off = v != NULL && (strcmp(v, "0") == 0 || strcmp(v, "off") == 0);
}

static bool pooled_size(size_t nbytes) { return !pool_off && nbytes >= TSR_XFER_POOL_MIN && nbytes <= pool.max_class; }

tsr_ucx_buf *tsr_ucx_buf_take(size_t nbytes)
{
  pthread_once(&env_once, read_env);
  pthread_mutex_lock(&pool.lock);
  bool pooled = pooled_size(nbytes);
  tsr_ucx_buf *buf = pooled ? take_pooled(nbytes) : NULL;
  bool fresh = buf == NULL;
  pool.stats.taken++;
  if (buf != NULL) pool.stats.reused++;
  if (!pooled) pool.stats.unpooled++;
  pthread_mutex_unlock(&pool.lock);
  if (buf == NULL) buf = pooled ? new_pooled_logged(nbytes) : buf_new_plain(nbytes);
  if (buf == NULL || !pooled) return buf;
  pthread_mutex_lock(&pool.lock);
  if (fresh) link_all(buf);
  pool.stats.lent_buffers++;
  want_spare(buf->capacity);
  pthread_mutex_unlock(&pool.lock);
  return buf;
}

void *tsr_ucx_buf_data(const tsr_ucx_buf *buf) { return buf->data; }
void *tsr_ucx_buf_memh(const tsr_ucx_buf *buf) { return buf->memh; }

void tsr_ucx_buf_put(tsr_ucx_buf *buf)
{
  if (buf == NULL) return;
  if (buf->capacity == 0) {
    buf_free(buf);
    return;
  }
  pthread_mutex_lock(&pool.lock);
  pool.stats.lent_buffers--;
  bool kept = keep_idle(buf);
  if (!kept) unlink_all(buf);
  pthread_mutex_unlock(&pool.lock);
  if (!kept) buf_free(buf);
}

void tsr_xfer_pool_warm(size_t nbytes, unsigned count)
{
  pthread_once(&env_once, read_env);
  pthread_mutex_lock(&pool.lock);
  if (pool.spares && count > 0 && pooled_size(nbytes)) add_want(nbytes, count, false);
  pthread_mutex_unlock(&pool.lock);
}

unsigned tsr_xfer_pool_fill(size_t nbytes, unsigned count)
{
  pthread_once(&env_once, read_env);
  unsigned made = 0;
  uint64_t t0 = tsr_now_us();
  pthread_mutex_lock(&pool.lock);
  size_t capacity = capacity_for(nbytes);
  while (pooled_size(nbytes) && count_fitting(nbytes, false) < count &&
         pool.stats.idle_bytes + capacity <= pool.idle_limit) {
    pthread_mutex_unlock(&pool.lock);
    tsr_ucx_buf *buf = buf_new_pooled(capacity);
    pthread_mutex_lock(&pool.lock);
    if (buf == NULL) break;
    link_all(buf);
    if (!keep_idle(buf)) {   /* the limit shrank meanwhile */
      unlink_all(buf);
      pthread_mutex_unlock(&pool.lock);
      buf_free(buf);
      pthread_mutex_lock(&pool.lock);
      break;
    }
    pool.stats.warmed++;
    made++;
  }
  pthread_mutex_unlock(&pool.lock);
  if (made > 0)
    TSR_DEBUG("receive pool: %u %zu-byte buffer(s) mapped, faulted and registered ahead in %.3f ms", made, capacity,
              (double)(tsr_now_us() - t0) / 1e3);
  return made;
}

void tsr_xfer_pool_trim(void)
{
  pthread_mutex_lock(&pool.lock);
  pool.nwants = 0;   /* memory is short, or we are stopping: make nothing more */
  while (pool.maker) pthread_cond_wait(&pool.spare_done, &pool.lock);   /* what it made lands in idle */
  tsr_ucx_buf *idle = pool.idle;
  pool.idle = NULL;
  for (tsr_ucx_buf *b = idle; b != NULL; b = b->next) unlink_all(b);
  pool.stats.idle_buffers = 0;
  pool.stats.idle_bytes = 0;
  pthread_mutex_unlock(&pool.lock);
  while (idle != NULL) {
    tsr_ucx_buf *next = idle->next;
    buf_free(idle);
    idle = next;
  }
}
