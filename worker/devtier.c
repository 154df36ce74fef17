/* The device tier: moving idle device chunks down to host memory (or
 * dropping recomputable ones). See devtier.h for the rules.
 *
 * Invariants: `moving` is held by the one thread that copies chunks down
 * (the device's copy path has one stream and one pair of staging blocks);
 * `lock` guards the counters only. A device chunk leaves the store's map
 * only through tsr_wstore_evict (dropped) or tsr_wstore_replace (its host
 * copy takes its place), both of which refuse a chunk anybody else holds. */
#include "devtier.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tiers.h"

struct tsr_devtier {
  tsr_devtier_opts opts;
  tsr_devtier_dev dev;
  tsr_wstore *store;
  pthread_mutex_t moving;
  pthread_mutex_t lock;
  tsr_devtier_stats stats;   /* under lock */
  bool warned_copy;          /* under moving */
};

static bool fraction_ok(double f) { return f > 0 && f <= 1; }

int tsr_devtier_new(const tsr_devtier_opts *opts, const tsr_devtier_dev *dev, tsr_wstore *store,
                    tsr_devtier **dt_p, tsr_errbuf *err)
{
  if (!fraction_ok(opts->target) || !fraction_ok(opts->spill))
    return tsr_fail(err, TSR_EINVAL, "device memory target and spill fractions must be in (0, 1]");
  if (dev->limit == 0 || dev->used == NULL || dev->copy_down == NULL)
    return tsr_fail(err, TSR_EINVAL, "device tier without a limit or a copy path");
  tsr_devtier *dt = calloc(1, sizeof *dt);
  if (dt == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory");
  dt->opts = *opts;
  dt->dev = *dev;
  dt->store = store;
  pthread_mutex_init(&dt->moving, NULL);
  pthread_mutex_init(&dt->lock, NULL);
  *dt_p = dt;
  return 0;
}

void tsr_devtier_destroy(tsr_devtier **dt_p)
{
  if (dt_p == NULL || *dt_p == NULL) return;
  tsr_devtier *dt = *dt_p;
  pthread_mutex_destroy(&dt->lock);
  pthread_mutex_destroy(&dt->moving);
  free(dt);
  *dt_p = NULL;
}

void tsr_devtier_stats_get(tsr_devtier *dt, tsr_devtier_stats *stats)
{
  pthread_mutex_lock(&dt->lock);
  *stats = dt->stats;
  pthread_mutex_unlock(&dt->lock);
}

static void count(tsr_devtier *dt, bool dropped, bool pinned, size_t nbytes, uint64_t us)
{
  pthread_mutex_lock(&dt->lock);
  dt->stats.move_us += us;
  if (pinned) dt->stats.bytes_pinned += nbytes;
  if (dropped) {
    dt->stats.bytes_dropped += nbytes;
    dt->stats.chunks_dropped++;
  } else {
    dt->stats.bytes_moved += nbytes;
    dt->stats.chunks_moved++;
  }
  pthread_mutex_unlock(&dt->lock);
}

/* Host memory for a copy of nbytes: pinned while the pinned tier has room. */
static void *host_buffer(tsr_devtier *dt, size_t nbytes, bool *pinned_p)
{
  void *host = dt->dev.host_alloc != NULL ? dt->dev.host_alloc(dt->dev.host_arg, nbytes) : NULL;
  *pinned_p = host != NULL;
  return host != NULL ? host : malloc(nbytes ? nbytes : 1);
}

/* Copies chunk to a new host chunk of the same key and metadata; NULL when
 * host memory or the copy fails (logged once: the chunk then stays). */
static tsr_chunk *host_copy(tsr_devtier *dt, const tsr_chunk *chunk)
{
  tsr_errbuf err = {{0}};
  bool pinned;
  void *host = host_buffer(dt, chunk->nbytes, &pinned);
  int rc = host == NULL ? tsr_fail(&err, TSR_ENOMEM, "out of host memory")
                        : dt->dev.copy_down(dt->dev.arg, host, chunk->data, chunk->nbytes, &err);
  tsr_chunk *copy = NULL;
  if (rc == 0) {
    rc = pinned ? tsr_chunk_new_pinned(dt->store, chunk->key, &chunk->meta, host, chunk->nbytes, dt->dev.host_free,
                                       dt->dev.host_arg, &copy)
                : tsr_chunk_new_malloc(dt->store, chunk->key, &chunk->meta, host, chunk->nbytes, &copy);
    if (rc != 0) tsr_fail(&err, rc, "out of host memory");
  }
  if (rc == 0) return copy;
  if (pinned)
    dt->dev.host_free(dt->dev.host_arg, host, chunk->nbytes);
  else
    free(host);
  if (!dt->warned_copy) {
    TSR_WARN("cannot move device chunk '%s' (%zu bytes) to host memory: %s; it stays on the device (logged once)",
             chunk->key, chunk->nbytes, err.text);
    dt->warned_copy = true;
  }
  return NULL;
}

/* Moves one idle device chunk out of device memory (under `moving`).
 * Returns the device bytes that go with the caller's reference, 0 when the
 * chunk stays (someone took it meanwhile, or the copy failed). */
static uint64_t move_one(tsr_devtier *dt, tsr_chunk *chunk)
{
  if (chunk->recompute && atomic_load(&chunk->read)) {
    if (!tsr_wstore_evict(dt->store, chunk)) return 0;
    count(dt, true, false, chunk->nbytes, 0);
    TSR_DEBUG("dropped device chunk '%s' (%zu bytes, recomputable)", chunk->key, chunk->nbytes);
    return chunk->nbytes;
  }
  uint64_t t0 = tsr_now_us();
  tsr_chunk *copy = host_copy(dt, chunk);
  if (copy == NULL) return 0;
  bool copy_pinned = copy->owner == TSR_CHUNK_PINNED;
  copy->replica = chunk->replica;
  bool replaced = tsr_wstore_replace(dt->store, chunk, copy);
  tsr_chunk_unref(&copy);  /* the map's reference keeps it when replaced */
  if (!replaced) return 0;
  count(dt, false, copy_pinned, chunk->nbytes, tsr_now_us() - t0);
  TSR_DEBUG("moved device chunk '%s' (%zu bytes) to host memory", chunk->key, chunk->nbytes);
  return chunk->nbytes;
}

static bool fresh_recomputable(const tsr_chunk *c) { return c->recompute && !atomic_load(&c->read); }

void tsr_devtier_balance(tsr_devtier *dt)
{
  uint64_t target = (uint64_t)((double)dt->dev.limit * dt->opts.target);
  uint64_t spill = (uint64_t)((double)dt->dev.limit * dt->opts.spill);
  if (dt->dev.wake != NULL) dt->dev.wake(dt->dev.arg);
  if (tsr_wstore_device_bytes(dt->store) <= target && dt->dev.used(dt->dev.arg) <= spill) return;
  if (pthread_mutex_trylock(&dt->moving) != 0) return;
  tsr_chunk **idle = NULL;
  size_t n = tsr_wstore_idle_device(dt->store, &idle);
  for (size_t i = 0; i < n; i++) {
    bool over = tsr_wstore_device_bytes(dt->store) > target || dt->dev.used(dt->dev.arg) > spill;
    if (over && !fresh_recomputable(idle[i])) move_one(dt, idle[i]);
    tsr_chunk_unref(&idle[i]);  /* the device bytes go here when the chunk left the store */
  }
  free(idle);
  pthread_mutex_unlock(&dt->moving);
}

uint64_t tsr_devtier_reclaim(void *arg, uint64_t need, uint64_t *busy_p)
{
  tsr_devtier *dt = arg;
  uint64_t t0 = tsr_now_us();
  pthread_mutex_lock(&dt->moving);
  tsr_chunk **idle = NULL;
  size_t n = tsr_wstore_idle_device(dt->store, &idle);
  uint64_t idle_bytes = 0, freed = 0;
  for (size_t i = 0; i < n; i++) idle_bytes += idle[i]->nbytes;
  /* Every live device chunk not idle now is held by a task or a send (or
   * was replaced and is still read): its bytes come back when they end. */
  uint64_t live = tsr_wstore_device_bytes(dt->store);
  for (size_t i = 0; i < n; i++) {
    if (freed < need) freed += move_one(dt, idle[i]);
    tsr_chunk_unref(&idle[i]);
  }
  free(idle);
  pthread_mutex_unlock(&dt->moving);
  pthread_mutex_lock(&dt->lock);
  dt->stats.reclaims++;
  dt->stats.reclaim_us += tsr_now_us() - t0;
  pthread_mutex_unlock(&dt->lock);
  if (busy_p != NULL) *busy_p = live > idle_bytes ? live - idle_bytes : 0;
  if (freed > 0 && tsr_wstore_tiers(dt->store) != NULL) tsr_tiers_balance(tsr_wstore_tiers(dt->store), dt->store);
  return freed;
}

int tsr_devtier_opt(tsr_devtier_opts *o, const char *flag, const char *v, tsr_errbuf *err)
{
  bool target = strcmp(flag, "--device-memory-target") == 0;
  if (!target && strcmp(flag, "--device-memory-spill") != 0) return TSR_ENOTFOUND;
  char *end;
  double f = strtod(v, &end);
  if (end == v || *end != '\0' || !fraction_ok(f)) return tsr_fail(err, TSR_EINVAL, "expected a fraction in (0, 1]");
  *(target ? &o->target : &o->spill) = f;
  return 0;
}
