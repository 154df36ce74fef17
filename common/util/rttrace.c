/* Round-trip stamps (rttrace.h). The table is static: 2^18 entries of 16 B
 * (4 MiB of zero pages, touched only when tracing is on). */
#include "rttrace.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  uint64_t ns;
  const char *label;
} rt_entry;

static rt_entry rt_table[TSR_RT_MAX];
static atomic_uint rt_next;
static atomic_int rt_on = -1;   /* -1: not looked at yet */
static char rt_prefix[512];
static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

static void rt_write(void)
{
  char path[600];
  snprintf(path, sizeof path, "%s.%ld", rt_prefix, (long)getpid());
  FILE *f = fopen(path, "w");
  if (f == NULL) return;
  unsigned n = atomic_load(&rt_next);
  if (n > TSR_RT_MAX) n = TSR_RT_MAX;
  for (unsigned i = 0; i < n; i++)
    if (rt_table[i].label != NULL) fprintf(f, "%llu %s\n", (unsigned long long)rt_table[i].ns, rt_table[i].label);
  fclose(f);
}

static void rt_init(void)
{
  const char *prefix = getenv("TESSERA_RTTRACE");
  int on = prefix != NULL && prefix[0] != '\0';
  if (on) {
    snprintf(rt_prefix, sizeof rt_prefix, "%s", prefix);
    atexit(rt_write);
  }
  atomic_store(&rt_on, on);
}

void tsr_rt_stamp(const char *label)
{
  int on = atomic_load_explicit(&rt_on, memory_order_relaxed);
  if (on < 0) {
    pthread_once(&rt_once, rt_init);
    on = atomic_load(&rt_on);
  }
  if (on == 0) return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  unsigned i = atomic_fetch_add_explicit(&rt_next, 1, memory_order_relaxed);
  if (i >= TSR_RT_MAX) return;
  rt_table[i].ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  rt_table[i].label = label;
}
