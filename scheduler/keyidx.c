/* The key -> task id index: open addressing with linear probing over
 * 8-byte slots {hash low 32 bits, id + 1}; the key bytes themselves are
 * not copied: they are the task's own key in its graph's arena.
 *
 * Why not tsr_strmap: at 10^6 tasks the generic map costs a malloc'd key
 * copy per task (~40 B and a malloc/free pair each) plus 24-byte slots,
 * and insert-if-absent takes two probes. Here a slot is 8 bytes, a new key
 * costs one probe and no allocation, growth rehashes from the stored hash
 * bits without touching keys, and deletion shifts entries back instead of
 * leaving tombstones, so a long-running scheduler never degrades.
 * Invariant: count <= cap / 2; cap is a power of two (or 0). */
#include <stdlib.h>
#include <string.h>

#include "sched.h"

#define SLOT_ID(s) ((uint32_t)(s) - 1u)
#define SLOT_HASH(s) ((uint32_t)((s) >> 32))
#define MAKE_SLOT(hash, id) (((uint64_t)(hash) << 32) | ((uint64_t)(id) + 1u))

/* 8 bytes per step (FNV's byte-at-a-time loop was a tenth of admission
 * time); a multiply-xorshift mix per word and at the end. */
uint32_t sched_key_hash(const char *key, size_t len)
{
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (len * 0xff51afd7ed558ccdull);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, key + i, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  memcpy(&tail, key + i, len - i);
  h = (h ^ tail) * 0x94d049bb133111ebull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return (uint32_t)h;
}

static bool slot_is(const sched_state *st, uint64_t s, uint32_t hash, const char *key, size_t len)
{
  if (SLOT_HASH(s) != hash) return false;
  const sched_task *t = &st->tasks[SLOT_ID(s)];
  return t->key_len == len && memcmp(t->key, key, len) == 0;
}

uint32_t sched_task_find(const sched_state *st, const char *key, size_t len)
{
  return sched_task_find_hashed(st, key, len, sched_key_hash(key, len));
}

void sched_key_prefetch(const sched_state *st, uint32_t hash)
{
  if (st->keyidx.cap) __builtin_prefetch(&st->keyidx.slots[hash & (st->keyidx.cap - 1)]);
}

uint32_t sched_task_find_hashed(const sched_state *st, const char *key, size_t len, uint32_t hash)
{
  const sched_keyidx *ix = &st->keyidx;
  if (ix->count == 0) return SCHED_NONE;
  uint32_t mask = ix->cap - 1;
  for (uint32_t i = hash & mask;; i = (i + 1) & mask) {
    uint64_t s = ix->slots[i];
    if (s == 0) return SCHED_NONE;
    if (slot_is(st, s, hash, key, len)) return SLOT_ID(s);
  }
}

static int keyidx_grow(sched_keyidx *ix, uint32_t cap)
{
  uint64_t *slots = calloc(cap, sizeof *slots);
  if (slots == NULL) return TSR_ENOMEM;
  for (uint32_t i = 0; i < ix->cap; i++) {
    uint64_t s = ix->slots[i];
    if (s == 0) continue;
    uint32_t j = SLOT_HASH(s) & (cap - 1);
    while (slots[j] != 0) j = (j + 1) & (cap - 1);
    slots[j] = s;
  }
  free(ix->slots);
  ix->slots = slots;
  ix->cap = cap;
  return 0;
}

int sched_keyidx_reserve(sched_state *st, uint64_t n)
{
  sched_keyidx *ix = &st->keyidx;
  uint64_t cap = ix->cap ? ix->cap : 1024;
  while (cap < 2 * n) cap *= 2;
  if (cap > (1ull << 31)) return TSR_ELIMIT;
  return cap > ix->cap ? keyidx_grow(ix, (uint32_t)cap) : 0;
}

int sched_task_index(sched_state *st, uint32_t id)
{
  const sched_task *t = &st->tasks[id];
  return sched_task_index_hashed(st, id, sched_key_hash(t->key, t->key_len));
}

int sched_task_index_hashed(sched_state *st, uint32_t id, uint32_t hash)
{
  sched_keyidx *ix = &st->keyidx;
  if ((uint64_t)(ix->count + 1) * 2 > ix->cap) {
    int rc = sched_keyidx_reserve(st, (uint64_t)ix->count + 1);
    if (rc != 0) return rc;
  }
  uint32_t mask = ix->cap - 1;
  uint32_t i = hash & mask;
  while (ix->slots[i] != 0) i = (i + 1) & mask;
  ix->slots[i] = MAKE_SLOT(hash, id);
  ix->count++;
  return 0;
}

void sched_task_unindex(sched_state *st, uint32_t id)
{
  sched_keyidx *ix = &st->keyidx;
  if (ix->count == 0) return;
  const sched_task *t = &st->tasks[id];
  uint32_t hash = sched_key_hash(t->key, t->key_len), mask = ix->cap - 1;
  uint32_t i = hash & mask;
  while (ix->slots[i] != 0 && SLOT_ID(ix->slots[i]) != id) i = (i + 1) & mask;
  if (ix->slots[i] == 0) return;
  /* Backward-shift deletion: pull later members of the probe run into the
   * hole when the hole lies on their path from their home slot. */
  for (uint32_t j = i;;) {
    j = (j + 1) & mask;
    uint64_t s = ix->slots[j];
    if (s == 0) break;
    uint32_t home = SLOT_HASH(s) & mask;
    bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
    if (movable) {
      ix->slots[i] = s;
      i = j;
    }
  }
  ix->slots[i] = 0;
  ix->count--;
  if (ix->count == 0) {
    free(ix->slots);
    memset(ix, 0, sizeof *ix);
  }
}

void sched_keyidx_free(sched_keyidx *ix)
{
  free(ix->slots);
  memset(ix, 0, sizeof *ix);
}
