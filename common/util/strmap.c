/* A string-keyed open-addressing hash map. Keys live in one malloc each
 * (length-prefixed), or, in a borrowing map, stay the caller's (no malloc
 * per key: the client's million-key graphs and key tables use that);
 * tombstones mark deletions and are reclaimed on growth.
 * Invariant: count + tombstones <= 70% of capacity. */
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define SLOT_EMPTY ((char *)0)
#define SLOT_TOMB ((char *)1)

typedef struct slot {
  char *key;        /* SLOT_EMPTY, SLOT_TOMB, or malloc'd key bytes + NUL */
  uint32_t key_len;
  uint32_t hash_hi; /* upper hash bits, to skip most memcmp calls */
  uint64_t value;
} slot;

struct tsr_strmap {
  slot *slots;
  size_t cap;      /* power of two */
  size_t count;
  size_t tombs;
  bool borrowed;   /* keys are the caller's: never copied or freed */
};

uint64_t tsr_hash_bytes(const void *data, size_t len)
{
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  /* FNV's low bits are weak for short similar keys; mix them (splitmix). */
  h ^= h >> 31;
  h *= 0x7fb5d329728ea185ull;
  h ^= h >> 27;
  return h;
}

static size_t round_capacity(size_t expected)
{
  size_t cap = 16;
  while (cap * 7 / 10 < expected) cap *= 2;
  return cap;
}

tsr_strmap *tsr_strmap_new(size_t expected)
{
  tsr_strmap *map = calloc(1, sizeof *map);
  if (map == NULL) return NULL;
  map->cap = round_capacity(expected);
  map->slots = calloc(map->cap, sizeof *map->slots);
  if (map->slots == NULL) {
    free(map);
    return NULL;
  }
  return map;
}

tsr_strmap *tsr_strmap_new_borrowed(size_t expected)
{
  tsr_strmap *map = tsr_strmap_new(expected);
  if (map != NULL) map->borrowed = true;
  return map;
}

void tsr_strmap_destroy(tsr_strmap **map_p)
{
  if (map_p == NULL || *map_p == NULL) return;
  tsr_strmap *map = *map_p;
  for (size_t i = 0; i < map->cap && !map->borrowed; i++)
    if (map->slots[i].key > SLOT_TOMB) free(map->slots[i].key);
  free(map->slots);
  free(map);
  *map_p = NULL;
}

/* Returns the slot holding key, or NULL; *insert_p gets the first free slot
 * on the probe path (tombstone or empty) for an insertion. */
static slot *probe(const tsr_strmap *map, const char *key, size_t key_len, uint64_t hash, slot **insert_p)
{
  size_t mask = map->cap - 1;
  slot *first_free = NULL;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    slot *s = &map->slots[i];
    if (s->key == SLOT_EMPTY) {
      if (insert_p) *insert_p = first_free ? first_free : s;
      return NULL;
    }
    if (s->key == SLOT_TOMB) {
      if (first_free == NULL) first_free = s;
      continue;
    }
    if (s->hash_hi == (uint32_t)(hash >> 32) && s->key_len == key_len && memcmp(s->key, key, key_len) == 0)
      return s;
  }
}

static int grow_to(tsr_strmap *map, size_t new_cap)
{
  slot *old = map->slots;
  size_t old_cap = map->cap;
  slot *fresh = calloc(new_cap, sizeof *fresh);
  if (fresh == NULL) return TSR_ENOMEM;
  map->slots = fresh;
  map->cap = new_cap;
  map->tombs = 0;
  for (size_t i = 0; i < old_cap; i++) {
    if (old[i].key <= SLOT_TOMB) continue;
    uint64_t hash = tsr_hash_bytes(old[i].key, old[i].key_len);
    slot *dest = NULL;
    probe(map, old[i].key, old[i].key_len, hash, &dest);
    *dest = old[i];
  }
  free(old);
  return 0;
}

static int grow(tsr_strmap *map) { return grow_to(map, round_capacity((map->count + 1) * 2)); }

int tsr_strmap_reserve(tsr_strmap *map, size_t more)
{
  size_t cap = round_capacity(map->count + more);
  return cap > map->cap ? grow_to(map, cap) : 0;
}

int tsr_strmap_put(tsr_strmap *map, const char *key, size_t key_len, uint64_t value)
{
  if (key_len > UINT32_MAX) return TSR_ELIMIT;
  if ((map->count + map->tombs + 1) * 10 > map->cap * 7) {
    int rc = grow(map);
    if (rc != 0) return rc;
  }
  uint64_t hash = tsr_hash_bytes(key, key_len);
  slot *dest = NULL;
  slot *found = probe(map, key, key_len, hash, &dest);
  if (found != NULL) {
    found->value = value;
    return 0;
  }
  char *copy = map->borrowed ? (char *)(uintptr_t)key : malloc(key_len + 1);
  if (copy == NULL) return TSR_ENOMEM;
  if (!map->borrowed) {
    memcpy(copy, key, key_len);
    copy[key_len] = '\0';
  }
  if (dest->key == SLOT_TOMB) map->tombs--;
  dest->key = copy;
  dest->key_len = (uint32_t)key_len;
  dest->hash_hi = (uint32_t)(hash >> 32);
  dest->value = value;
  map->count++;
  return 0;
}

bool tsr_strmap_get(const tsr_strmap *map, const char *key, size_t key_len, uint64_t *value_p)
{
  slot *found = probe(map, key, key_len, tsr_hash_bytes(key, key_len), NULL);
  if (found == NULL) return false;
  if (value_p) *value_p = found->value;
  return true;
}

bool tsr_strmap_del(tsr_strmap *map, const char *key, size_t key_len)
{
  slot *found = probe(map, key, key_len, tsr_hash_bytes(key, key_len), NULL);
  if (found == NULL) return false;
  if (!map->borrowed) free(found->key);
  found->key = SLOT_TOMB;
  map->count--;
  map->tombs++;
  return true;
}

size_t tsr_strmap_count(const tsr_strmap *map) { return map->count; }

void tsr_strmap_each(const tsr_strmap *map, void (*fn)(void *, const char *, size_t, uint64_t), void *arg)
{
  for (size_t i = 0; i < map->cap; i++)
    if (map->slots[i].key > SLOT_TOMB) fn(arg, map->slots[i].key, map->slots[i].key_len, map->slots[i].value);
}
