/* The slab allocator: slabs made on demand, each with a
 * sorted array of free extents; first fit, coalescing on free.
 *
 * Invariants (under lock): a slab's free extents are sorted by offset,
 * never overlap, never touch (neighbours are merged), and lie inside the
 * slab; `used` is the sum of the sizes handed out (rounded to ALIGN). */
#include "slabs.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define ALIGN ((size_t)4096)
#define MAX_SLABS 1024

typedef struct extent {
  size_t off, len;
} extent;

typedef struct slab {
  char *base;
  size_t size;
  extent *free;     /* sorted by off */
  size_t n_free, cap;
} slab;

struct tsr_slabs {
  pthread_mutex_t lock;
  uint64_t limit, made, used;
  size_t slab_bytes;
  tsr_slabs_make_fn make;
  tsr_slabs_unmake_fn unmake;
  void *arg;
  slab slabs[MAX_SLABS];
  size_t n_slabs;
};

static size_t round_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

tsr_slabs *tsr_slabs_new(uint64_t limit, size_t slab_bytes, tsr_slabs_make_fn slab_fn, tsr_slabs_unmake_fn unslab,
                         void *arg)
{
  tsr_slabs *p = calloc(1, sizeof *p);
  if (p == NULL) return NULL;
  pthread_mutex_init(&p->lock, NULL);
  p->limit = limit;
  p->slab_bytes = round_up(slab_bytes ? slab_bytes : ALIGN);
  p->make = slab_fn;
  p->unmake = unslab;
  p->arg = arg;
  return p;
}

void tsr_slabs_destroy(tsr_slabs **p_p)
{
  if (p_p == NULL || *p_p == NULL) return;
  tsr_slabs *p = *p_p;
  if (p->used != 0) TSR_ERROR("slab allocator destroyed with %llu bytes still in use", (unsigned long long)p->used);
  for (size_t i = 0; i < p->n_slabs; i++) {
    p->unmake(p->arg, p->slabs[i].base, p->slabs[i].size);
    free(p->slabs[i].free);
  }
  pthread_mutex_destroy(&p->lock);
  free(p);
  *p_p = NULL;
}

/* Inserts a free extent at index i (under lock). False on ENOMEM. */
static bool insert_at(slab *s, size_t i, extent e)
{
  if (s->n_free == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    extent *grown = realloc(s->free, cap * sizeof *grown);
    if (grown == NULL) return false;
    s->free = grown;
    s->cap = cap;
  }
  memmove(&s->free[i + 1], &s->free[i], (s->n_free - i) * sizeof *s->free);
  s->free[i] = e;
  s->n_free++;
  return true;
}

static void remove_at(slab *s, size_t i)
{
  memmove(&s->free[i], &s->free[i + 1], (s->n_free - i - 1) * sizeof *s->free);
  s->n_free--;
}

/* First fit in one slab (under lock); NULL when nothing fits. */
static void *take_from(slab *s, size_t len)
{
  for (size_t i = 0; i < s->n_free; i++) {
    if (s->free[i].len < len) continue;
    void *ptr = s->base + s->free[i].off;
    s->free[i].off += len;
    s->free[i].len -= len;
    if (s->free[i].len == 0) remove_at(s, i);
    return ptr;
  }
  return NULL;
}

/* A new slab big enough for len, within the limit (under lock). */
static slab *grow(tsr_slabs *p, size_t len)
{
  size_t size = len > p->slab_bytes ? len : p->slab_bytes;
  if (p->n_slabs == MAX_SLABS || p->made + size > p->limit) return NULL;
  slab *s = &p->slabs[p->n_slabs];
  memset(s, 0, sizeof *s);
  s->base = p->make(p->arg, size);
  if (s->base == NULL) return NULL;
  s->size = size;
  if (!insert_at(s, 0, (extent){0, size})) {
    p->unmake(p->arg, s->base, size);
    return NULL;
  }
  p->made += size;
  p->n_slabs++;
  return s;
}

void *tsr_slabs_alloc(tsr_slabs *p, size_t nbytes)
{
  size_t len = round_up(nbytes ? nbytes : 1);
  pthread_mutex_lock(&p->lock);
  void *ptr = NULL;
  for (size_t i = 0; ptr == NULL && i < p->n_slabs; i++) ptr = take_from(&p->slabs[i], len);
  if (ptr == NULL) {
    slab *s = grow(p, len);
    if (s != NULL) ptr = take_from(s, len);
  }
  if (ptr != NULL) p->used += len;
  pthread_mutex_unlock(&p->lock);
  return ptr;
}

static slab *slab_of(tsr_slabs *p, const void *ptr)
{
  const char *c = ptr;
  for (size_t i = 0; i < p->n_slabs; i++)
    if (c >= p->slabs[i].base && c < p->slabs[i].base + p->slabs[i].size) return &p->slabs[i];
  return NULL;
}

/* Gives [off, off+len) back to s, merged with its neighbours (under lock). */
static void give_back(slab *s, size_t off, size_t len)
{
  size_t i = 0;
  while (i < s->n_free && s->free[i].off < off) i++;
  bool left = i > 0 && s->free[i - 1].off + s->free[i - 1].len == off;
  bool right = i < s->n_free && off + len == s->free[i].off;
  if (left && right) {
    s->free[i - 1].len += len + s->free[i].len;
    remove_at(s, i);
  } else if (left) {
    s->free[i - 1].len += len;
  } else if (right) {
    s->free[i].off = off;
    s->free[i].len += len;
  } else if (!insert_at(s, i, (extent){off, len})) {
    /* Out of memory for the extent list: the bytes stay lost to the pool
     * (never handed out twice). */
    TSR_WARN("slab allocator: cannot record a free extent of %zu bytes (out of memory)", len);
  }
}

void tsr_slabs_free(void *arg, void *ptr, size_t nbytes)
{
  tsr_slabs *p = arg;
  if (ptr == NULL) return;
  size_t len = round_up(nbytes ? nbytes : 1);
  pthread_mutex_lock(&p->lock);
  slab *s = slab_of(p, ptr);
  if (s != NULL) {
    give_back(s, (size_t)((char *)ptr - s->base), len);
    p->used -= len;
  }
  pthread_mutex_unlock(&p->lock);
  if (s == NULL) TSR_ERROR("slab allocator: %p was not allocated here", ptr);
}

bool tsr_slabs_owns(tsr_slabs *p, const void *ptr)
{
  pthread_mutex_lock(&p->lock);
  bool owns = slab_of(p, ptr) != NULL;
  pthread_mutex_unlock(&p->lock);
  return owns;
}

uint64_t tsr_slabs_used(tsr_slabs *p)
{
  pthread_mutex_lock(&p->lock);
  uint64_t used = p->used;
  pthread_mutex_unlock(&p->lock);
  return used;
}

uint64_t tsr_slabs_made(tsr_slabs *p)
{
  pthread_mutex_lock(&p->lock);
  uint64_t made = p->made;
  pthread_mutex_unlock(&p->lock);
  return made;
}
