/* Unit tests of the GPU worker's device tier (worker/devtier.c) on a fake
 * device: "device" chunks are host buffers freed through a release
 * callback that counts the device bytes, and the copy down is a memcpy.
 * So the rules run here without a GPU: thresholds, LRU order, chunks in
 * use kept, recomputable chunks dropped (unread ones only on demand), the
 * reclaim hook's freed and busy bytes, a chunk taken during its copy kept,
 * moved chunks handed to the host tiers (spilled to disk, reloaded
 * bit-identical), the pinned host tier (its allocator over malloc'd
 * "slabs", and chunks moved into it while it has room), and the flags. No
 * daemon, no sockets. */
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "devtier.h"
#include "kit.h"
#include "slabs.h"
#include "store.h"
#include "tiers.h"

#define LIMIT 1000

static atomic_uint_fast64_t dev_used;      /* bytes of live fake device chunks */
static int copies;                         /* copy_down calls */
static tsr_wstore *steal_from;             /* copy_down takes a reference to steal_key */
static const char *steal_key;
static tsr_chunk *stolen;
static char tmp_dir[256];

static void fake_release(void *arg, void *data, size_t nbytes)
{
  (void)arg;
  free(data);
  atomic_fetch_sub(&dev_used, nbytes);
}

static int wakes;                          /* wake calls */

static void fake_wake(void *arg)
{
  (void)arg;
  wakes++;
}

static uint64_t fake_used(void *arg)
{
  (void)arg;
  return atomic_load(&dev_used);
}

/* A task's get in the middle of a copy, when asked to play one. */
static int fake_copy(void *arg, void *dst, const void *src, size_t nbytes, tsr_errbuf *err)
{
  (void)arg, (void)err;
  copies++;
  memcpy(dst, src, nbytes);
  if (steal_key != NULL && stolen == NULL) tsr_wstore_get(steal_from, steal_key, &stolen);
  return 0;
}

static unsigned char pattern(size_t i, unsigned seed) { return (unsigned char)((i * 37 + seed) % 253); }

static void put_device(tsr_wstore *store, const char *key, size_t nbytes, unsigned seed, bool recompute)
{
  tsr_meta meta = {TSR_U8, 1, {(int64_t)nbytes}};
  unsigned char *data = malloc(nbytes);
  for (size_t i = 0; i < nbytes; i++) data[i] = pattern(i, seed);
  tsr_chunk *c = NULL;
  if (tsr_chunk_new_device(store, key, &meta, data, nbytes, 0, fake_release, NULL, &c) != 0) abort();
  atomic_fetch_add(&dev_used, nbytes);
  c->recompute = recompute;
  tsr_wstore_put(store, c, tsr_wstore_epoch(store), NULL);
  tsr_chunk_unref(&c);
}

/* Reads key once (a consumer ran), leaving nothing pinned. */
static void touch(tsr_wstore *store, const char *key)
{
  tsr_chunk *c = NULL;
  if (tsr_wstore_get(store, key, &c) == 0) tsr_chunk_unref(&c);
}

/* key is in the store, on the host, with the bytes it was made with. */
static bool on_host_intact(tsr_wstore *store, const char *key, size_t nbytes, unsigned seed)
{
  tsr_chunk *c = NULL;
  if (tsr_wstore_get(store, key, &c) != 0) return false;
  bool ok = !tsr_chunk_on_device(c) && c->nbytes == nbytes;
  for (size_t i = 0; ok && i < nbytes; i++) ok = ((unsigned char *)c->data)[i] == pattern(i, seed);
  tsr_chunk_unref(&c);
  return ok;
}

/* key is in the store, on the device (the get marks it read). */
static bool on_device(tsr_wstore *store, const char *key)
{
  tsr_chunk *c = NULL;
  if (tsr_wstore_get_mem(store, key, &c) != 0) return false;
  bool dev = tsr_chunk_on_device(c);
  tsr_chunk_unref(&c);
  return dev;
}

static tsr_devtier *make_tier(tsr_wstore *store, double target, double spill)
{
  tsr_devtier_opts o = TSR_DEVTIER_OPTS_DEFAULT;
  o.target = target;
  o.spill = spill;
  tsr_devtier_dev dev = {NULL, LIMIT, fake_used, fake_copy, fake_wake, NULL, NULL, NULL};
  tsr_devtier *dt = NULL;
  tsr_errbuf err = {{0}};
  if (tsr_devtier_new(&o, &dev, store, &dt, &err) != 0) {
    fprintf(stderr, "devtier: %s\n", err.text);
    exit(1);
  }
  tsr_wstore_set_devtier(store, dt);
  copies = 0;
  steal_key = NULL;
  return dt;
}

static void close_all(tsr_wstore **store, tsr_devtier **dt)
{
  tsr_wstore_destroy(store);
  tsr_devtier_destroy(dt);
}

TEST(balance_moves_lru_device_chunks_to_host_down_to_target)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_devtier *dt = make_tier(store, 0.5, 1.0);
  put_device(store, "a", 200, 1, false);
  put_device(store, "b", 200, 2, false);
  put_device(store, "c", 200, 3, false);
  put_device(store, "d", 200, 4, false);
  touch(store, "a");  /* a is now the most recent: LRU order b, c, d, a */
  tsr_wstore_balance(store);
  /* 800 > 500: b and c go down (800 -> 600 -> 400) */
  ASSERT_EQ(tsr_wstore_device_bytes(store), 400);
  ASSERT_EQ(atomic_load(&dev_used), 400);
  ASSERT_EQ(tsr_wstore_bytes(store), 400);
  ASSERT_EQ(copies, 2);
  ASSERT_TRUE(on_device(store, "a"));
  ASSERT_TRUE(on_device(store, "d"));
  ASSERT_TRUE(on_host_intact(store, "b", 200, 2));
  ASSERT_TRUE(on_host_intact(store, "c", 200, 3));
  tsr_devtier_stats st;
  tsr_devtier_stats_get(dt, &st);
  ASSERT_EQ(st.bytes_moved, 400);
  ASSERT_EQ(st.chunks_moved, 2);
  ASSERT_EQ(st.bytes_dropped, 0);
  /* under target: nothing more moves, but waiting allocations are woken
   * at every balance (a task ended) */
  int woken = wakes;
  tsr_wstore_balance(store);
  ASSERT_EQ(copies, 2);
  ASSERT_EQ(wakes, woken + 1);
  ASSERT_EQ(tsr_wstore_count(store), 4);
  close_all(&store, &dt);
  ASSERT_EQ(atomic_load(&dev_used), 0);
}

TEST(chunks_in_use_stay_and_recomputable_ones_are_dropped)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_devtier *dt = make_tier(store, 0.3, 1.0);
  put_device(store, "x", 300, 1, true);   /* random data, already read: dropped */
  touch(store, "x");
  put_device(store, "pinned", 300, 2, false);
  put_device(store, "m", 300, 3, false);
  tsr_chunk *task_input = NULL;
  ASSERT_OK(tsr_wstore_get(store, "pinned", &task_input));  /* a running task reads it */
  tsr_wstore_balance(store);
  /* LRU: x (touched before pinned's get), m, pinned (in use: stays). */
  ASSERT_EQ(tsr_wstore_device_bytes(store), 300);
  ASSERT_TRUE(!tsr_wstore_has(store, "x"));  /* dropped: recomputed if needed again */
  ASSERT_TRUE(on_host_intact(store, "m", 300, 3));
  ASSERT_TRUE(on_device(store, "pinned"));
  ASSERT_EQ(copies, 1);  /* x was not copied */
  tsr_devtier_stats st;
  tsr_devtier_stats_get(dt, &st);
  ASSERT_EQ(st.chunks_dropped, 1);
  ASSERT_EQ(st.bytes_dropped, 300);
  ASSERT_EQ(st.chunks_moved, 1);
  tsr_chunk_unref(&task_input);
  close_all(&store, &dt);
}

TEST(unread_recomputable_chunk_moves_only_on_demand_and_last)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_devtier *dt = make_tier(store, 0.2, 1.0);
  put_device(store, "fresh", 300, 1, true);  /* oldest, but its consumer has not run */
  put_device(store, "m1", 300, 2, false);
  put_device(store, "m2", 300, 3, false);
  tsr_wstore_balance(store);
  /* thresholds never move it (checked without reading it: a get marks it read) */
  ASSERT_EQ(tsr_wstore_device_bytes(store), 300);
  ASSERT_EQ(tsr_wstore_bytes(store), 600);
  ASSERT_TRUE(tsr_wstore_has(store, "fresh"));
  /* On demand (an allocation needs 500): nothing else is left, so it goes,
   * copied down rather than dropped (its consumer has not run). */
  uint64_t busy = 99;
  uint64_t freed = tsr_devtier_reclaim(dt, 500, &busy);
  ASSERT_EQ(freed, 300);
  ASSERT_EQ(busy, 0);
  ASSERT_EQ(atomic_load(&dev_used), 0);
  tsr_devtier_stats st;
  tsr_devtier_stats_get(dt, &st);
  ASSERT_EQ(st.chunks_dropped, 0);
  ASSERT_EQ(st.chunks_moved, 3);
  tsr_chunk *c = NULL;
  ASSERT_OK(tsr_wstore_get_mem(store, "fresh", &c));
  ASSERT_TRUE(c->recompute && !tsr_chunk_on_device(c));  /* the host tiers may still drop it */
  tsr_chunk_unref(&c);
  close_all(&store, &dt);
}

TEST(reclaim_frees_what_is_needed_and_reports_busy_bytes)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_devtier *dt = make_tier(store, 1.0, 1.0);
  put_device(store, "a", 100, 1, false);
  put_device(store, "b", 200, 2, false);
  put_device(store, "c", 300, 3, false);
  put_device(store, "d", 150, 4, false);
  tsr_chunk *held = NULL;
  ASSERT_OK(tsr_wstore_get(store, "d", &held));
  uint64_t busy = 0;
  /* need 250: a (100) then b (200) -> 300 freed; c stays */
  ASSERT_EQ(tsr_devtier_reclaim(dt, 250, &busy), 300);
  ASSERT_EQ(busy, 150);
  ASSERT_TRUE(on_device(store, "c"));
  ASSERT_TRUE(on_host_intact(store, "a", 100, 1));
  ASSERT_TRUE(on_host_intact(store, "b", 200, 2));
  /* only d (in use) is left besides c; asking for more takes c, not d */
  ASSERT_EQ(tsr_devtier_reclaim(dt, 1000, &busy), 300);
  ASSERT_EQ(busy, 150);
  ASSERT_EQ(tsr_devtier_reclaim(dt, 1000, &busy), 0);
  ASSERT_EQ(busy, 150);
  tsr_chunk_unref(&held);
  /* released by its task: movable now */
  ASSERT_EQ(tsr_devtier_reclaim(dt, 1, &busy), 150);
  ASSERT_EQ(busy, 0);
  ASSERT_EQ(atomic_load(&dev_used), 0);
  close_all(&store, &dt);
}

TEST(chunk_taken_during_its_copy_stays_on_the_device)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_devtier *dt = make_tier(store, 0.1, 1.0);
  put_device(store, "a", 400, 1, false);
  steal_from = store;
  steal_key = "a";
  stolen = NULL;
  uint64_t busy = 0;
  ASSERT_EQ(tsr_devtier_reclaim(dt, 400, &busy), 0);
  ASSERT_TRUE(stolen != NULL);
  ASSERT_TRUE(on_device(store, "a"));
  ASSERT_EQ(tsr_wstore_bytes(store), 0);  /* the host copy was thrown away */
  tsr_devtier_stats st;
  tsr_devtier_stats_get(dt, &st);
  ASSERT_EQ(st.chunks_moved, 0);
  tsr_chunk_unref(&stolen);
  steal_key = NULL;
  ASSERT_EQ(tsr_devtier_reclaim(dt, 400, &busy), 400);
  ASSERT_TRUE(on_host_intact(store, "a", 400, 1));
  close_all(&store, &dt);
}

TEST(moved_chunks_reach_disk_through_the_host_tiers)
{
  tsr_tiers_opts o = TSR_TIERS_OPTS_DEFAULT;
  o.memory_limit = 1000;
  o.target = 0.5;
  o.spill = 0;
  snprintf(o.dir, sizeof o.dir, "%s", tmp_dir);
  tsr_tiers *tiers = NULL;
  tsr_errbuf err = {{0}};
  ASSERT_OK(tsr_tiers_new(&o, &tiers, &err));
  tsr_wstore *store = tsr_wstore_new(o.memory_limit);
  tsr_wstore_set_tiers(store, tiers);
  tsr_devtier *dt = make_tier(store, 0.1, 1.0);
  for (int i = 0; i < 5; i++) {
    char key[8];
    snprintf(key, sizeof key, "k%d", i);
    put_device(store, key, 300, (unsigned)i, false);
  }
  tsr_wstore_balance(store);  /* device: 1500 -> 0 ... host tiers: -> <= 500 */
  ASSERT_EQ(tsr_wstore_device_bytes(store), 0);
  ASSERT_TRUE(tsr_wstore_bytes(store) <= 500);
  tsr_tiers_stats ts;
  tsr_tiers_stats_get(tiers, &ts);
  ASSERT_TRUE(ts.chunks_spilled >= 3);
  ASSERT_EQ(ts.chunks_dropped, 0);
  for (int i = 0; i < 5; i++) {
    char key[8];
    snprintf(key, sizeof key, "k%d", i);
    ASSERT_TRUE(on_host_intact(store, key, 300, (unsigned)i));  /* from disk where spilled */
  }
  tsr_tiers_stats_get(tiers, &ts);
  ASSERT_TRUE(ts.bytes_loaded >= 900);
  tsr_wstore_set_devtier(store, NULL);
  tsr_wstore_destroy(&store);
  tsr_devtier_destroy(&dt);
  tsr_tiers_destroy(&tiers);
}

TEST(spill_threshold_counts_all_device_bytes)
{
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_devtier *dt = make_tier(store, 1.0, 0.6);
  put_device(store, "a", 200, 1, false);
  put_device(store, "b", 200, 2, false);
  atomic_fetch_add(&dev_used, 300);  /* a running task's staged inputs and scratch */
  tsr_wstore_balance(store);
  /* 700 > 600: a goes (-> 500); b stays */
  ASSERT_EQ(tsr_wstore_device_bytes(store), 200);
  ASSERT_TRUE(on_device(store, "b"));
  atomic_fetch_sub(&dev_used, 300);
  close_all(&store, &dt);
}

static int slabs_made, slabs_unmade;

static void *fake_slab(void *arg, size_t bytes)
{
  (void)arg;
  slabs_made++;
  return malloc(bytes);
}

static void fake_unslab(void *arg, void *slab, size_t bytes)
{
  (void)arg, (void)bytes;
  slabs_unmade++;
  free(slab);
}

TEST(pinned_allocator_first_fit_coalesces_and_grows_to_its_limit)
{
  slabs_made = slabs_unmade = 0;
  tsr_slabs *p = tsr_slabs_new(3 << 16, 1 << 16, fake_slab, fake_unslab, NULL);
  char *a = tsr_slabs_alloc(p, 10000);   /* 12 KiB */
  char *b = tsr_slabs_alloc(p, 20000);   /* 20 KiB */
  char *c = tsr_slabs_alloc(p, 32768);   /* 32 KiB: the first slab is full */
  ASSERT_TRUE(a && b && c);
  ASSERT_TRUE(b == a + 12288 && c == a + 32768);
  ASSERT_EQ(slabs_made, 1);
  char *d = tsr_slabs_alloc(p, 1);       /* a second slab */
  ASSERT_TRUE(d != NULL);
  ASSERT_EQ(slabs_made, 2);
  ASSERT_EQ(tsr_slabs_used(p), 65536 + 4096);
  ASSERT_TRUE(tsr_slabs_owns(p, a + 100) && tsr_slabs_owns(p, d));
  int local;
  ASSERT_TRUE(!tsr_slabs_owns(p, &local));
  tsr_slabs_free(p, b, 20000);
  char *x = tsr_slabs_alloc(p, 16384);   /* first fit: b's hole */
  ASSERT_TRUE(x == b);
  tsr_slabs_free(p, a, 10000);
  tsr_slabs_free(p, x, 16384);
  char *y = tsr_slabs_alloc(p, 32768);   /* a, x and the rest of b's hole merged */
  ASSERT_TRUE(y == a);
  /* 128 KiB more would need a slab past the 192 KiB limit */
  ASSERT_TRUE(tsr_slabs_alloc(p, 1 << 17) == NULL);
  ASSERT_EQ(slabs_made, 2);
  tsr_slabs_free(p, y, 32768);
  tsr_slabs_free(p, c, 32768);
  tsr_slabs_free(p, d, 1);
  ASSERT_EQ(tsr_slabs_used(p), 0);
  char *whole = tsr_slabs_alloc(p, 1 << 16);  /* the first slab is one free extent again */
  ASSERT_TRUE(whole == a);
  tsr_slabs_free(p, whole, 1 << 16);
  ASSERT_EQ(tsr_slabs_made(p), 2 << 16);
  tsr_slabs_destroy(&p);
  ASSERT_EQ(slabs_unmade, 2);
}

static void *fake_pinned_alloc(void *pool, size_t nbytes) { return tsr_slabs_alloc(pool, nbytes); }

TEST(moved_chunks_land_in_pinned_memory_while_it_has_room)
{
  tsr_slabs *pool = tsr_slabs_new(8192, 4096, fake_slab, fake_unslab, NULL);
  tsr_wstore *store = tsr_wstore_new(0);
  tsr_devtier_opts o = TSR_DEVTIER_OPTS_DEFAULT;
  o.target = 0.1;
  tsr_devtier_dev dev = {NULL, LIMIT, fake_used, fake_copy, fake_wake, fake_pinned_alloc, tsr_slabs_free, pool};
  tsr_devtier *dt = NULL;
  tsr_errbuf err = {{0}};
  ASSERT_OK(tsr_devtier_new(&o, &dev, store, &dt, &err));
  tsr_wstore_set_devtier(store, dt);
  steal_key = NULL;
  put_device(store, "a", 300, 1, false);
  put_device(store, "b", 300, 2, false);
  put_device(store, "c", 300, 3, false);
  tsr_wstore_balance(store);  /* each takes a 4 KiB extent: a and b fit in 8 KiB, c does not */
  ASSERT_EQ(tsr_wstore_device_bytes(store), 0);
  const char *keys[3] = {"a", "b", "c"};
  tsr_chunk_owner want[3] = {TSR_CHUNK_PINNED, TSR_CHUNK_PINNED, TSR_CHUNK_MALLOC};
  for (int i = 0; i < 3; i++) {
    tsr_chunk *ch = NULL;
    ASSERT_OK(tsr_wstore_get(store, keys[i], &ch));
    bool owner_ok = ch->owner == want[i];
    tsr_chunk_unref(&ch);
    ASSERT_TRUE(owner_ok);
    ASSERT_TRUE(on_host_intact(store, keys[i], 300, (unsigned)i + 1));
  }
  tsr_devtier_stats st;
  tsr_devtier_stats_get(dt, &st);
  ASSERT_EQ(st.bytes_moved, 900);
  ASSERT_EQ(st.bytes_pinned, 600);
  ASSERT_EQ(tsr_slabs_used(pool), 8192);
  tsr_wstore_del(store, "a");  /* the last reference gives its extent back */
  ASSERT_EQ(tsr_slabs_used(pool), 4096);
  close_all(&store, &dt);
  ASSERT_EQ(tsr_slabs_used(pool), 0);
  tsr_slabs_destroy(&pool);
}

TEST(flags)
{
  tsr_devtier_opts o = TSR_DEVTIER_OPTS_DEFAULT;
  tsr_errbuf err = {{0}};
  ASSERT_EQ(o.target, 0.8);
  ASSERT_OK(tsr_devtier_opt(&o, "--device-memory-target", "0.5", &err));
  ASSERT_OK(tsr_devtier_opt(&o, "--device-memory-spill", "0.75", &err));
  ASSERT_TRUE(o.target == 0.5 && o.spill == 0.75);
  ASSERT_EQ(tsr_devtier_opt(&o, "--device-memory-target", "0", &err), TSR_EINVAL);
  ASSERT_EQ(tsr_devtier_opt(&o, "--device-memory-spill", "1.5", &err), TSR_EINVAL);
  ASSERT_EQ(tsr_devtier_opt(&o, "--device-memory-spill", "half", &err), TSR_EINVAL);
  ASSERT_EQ(tsr_devtier_opt(&o, "--memory-target", "0.5", &err), TSR_ENOTFOUND);
  tsr_devtier_dev none = {NULL, 0, fake_used, fake_copy, NULL, NULL, NULL, NULL};
  tsr_devtier *dt = NULL;
  ASSERT_EQ(tsr_devtier_new(&o, &none, NULL, &dt, &err), TSR_EINVAL);
}

int main(void)
{
  const char *base = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/tsr-devtier-test-XXXXXX", base && base[0] ? base : "/tmp");
  if (mkdtemp(tmp_dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  RUN(balance_moves_lru_device_chunks_to_host_down_to_target);
  RUN(chunks_in_use_stay_and_recomputable_ones_are_dropped);
  RUN(unread_recomputable_chunk_moves_only_on_demand_and_last);
  RUN(reclaim_frees_what_is_needed_and_reports_busy_bytes);
  RUN(chunk_taken_during_its_copy_stays_on_the_device);
  RUN(moved_chunks_reach_disk_through_the_host_tiers);
  RUN(spill_threshold_counts_all_device_bytes);
  RUN(pinned_allocator_first_fit_coalesces_and_grows_to_its_limit);
  RUN(moved_chunks_land_in_pinned_memory_while_it_has_room);
  RUN(flags);
  rmdir(tmp_dir);
  return kit_summary();
}
