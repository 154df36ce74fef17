/* examples/common/progressbar.c — see progressbar.h. The callback runs on
 * the client's I/O thread and only formats and writes one line; the
 * per-graph table is touched by that thread alone until stop (after which
 * no call comes), so it needs no lock. */
#include "progressbar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BAR_WIDTH 30
#define BAR_GRAPHS 64       /* graphs remembered; older finished ones fold into `base` */
#define TTY_REDRAW_MS 100
#define PLAIN_DEFAULT_MS 5000

typedef struct bar_graph {
  uint64_t graph, done, total, bytes;
  bool final;
} bar_graph;

struct progressbar {
  tsr_client *client;
  char label[32];
  bool tty;
  uint64_t interval_ms, start_ms, last_ms;
  bar_graph graphs[BAR_GRAPHS];
  int ngraphs;
  uint64_t base_done, base_total, base_bytes;  /* folded finished graphs */
  bool drawn;                                  /* a terminal line is open */
  bool enabled;                                /* draw (false: only feed tee) */
  tsr_progress_fn tee;                         /* also gets every report (an efficiency recorder) */
  void *tee_user;
};

static uint64_t now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* "500ms", "2s" or a plain number of ms; the default when absent or bad. */
static uint64_t env_interval(void)
{
  const char *v = getenv("TESSERA_PROGRESS_INTERVAL");
  if (v == NULL || *v == '\0') return PLAIN_DEFAULT_MS;
  char *end;
  double x = strtod(v, &end);
  if (end == v || x <= 0) return PLAIN_DEFAULT_MS;
  if (strcmp(end, "s") == 0) x *= 1000;
  else if (strcmp(end, "ms") != 0 && *end != '\0') return PLAIN_DEFAULT_MS;
  return (uint64_t)x;
}

static bar_graph *slot_of(progressbar *b, uint64_t graph)
{
  for (int i = 0; i < b->ngraphs; i++)
    if (b->graphs[i].graph == graph) return &b->graphs[i];
  if (b->ngraphs == BAR_GRAPHS) {
    /* fold the oldest finished graph into the base to make room */
    int i = 0;
    while (i < b->ngraphs && !b->graphs[i].final) i++;
    if (i == b->ngraphs) return NULL;
    b->base_done += b->graphs[i].done, b->base_total += b->graphs[i].total, b->base_bytes += b->graphs[i].bytes;
    memmove(&b->graphs[i], &b->graphs[i + 1], (size_t)(b->ngraphs - i - 1) * sizeof b->graphs[0]);
    b->ngraphs--;
  }
  b->graphs[b->ngraphs] = (bar_graph){.graph = graph};
  return &b->graphs[b->ngraphs++];
}

static void human_bytes(uint64_t n, char *buf, size_t cap)
{
  const char *unit[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double x = (double)n;
  int u = 0;
  while (x >= 1000 && u < 5) x /= 1000, u++;
  snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", x, unit[u]);
}

static void draw(progressbar *b, uint64_t now)
{
  uint64_t done = b->base_done, total = b->base_total, bytes = b->base_bytes;
  for (int i = 0; i < b->ngraphs; i++) done += b->graphs[i].done, total += b->graphs[i].total, bytes += b->graphs[i].bytes;
  int pct = total ? (int)(100 * done / total) : 100;
  uint64_t secs = (now - b->start_ms) / 1000;
  char size[32];
  human_bytes(bytes, size, sizeof size);
  if (b->tty) {
    char bar[BAR_WIDTH + 1];
    int fill = total ? (int)((uint64_t)BAR_WIDTH * done / total) : BAR_WIDTH;
    for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[BAR_WIDTH] = '\0';
    fprintf(stderr, "\r%s[%s] %3d%%  %llu/%llu tasks  %s  %02llu:%02llu\033[K", b->label, bar, pct,
            (unsigned long long)done, (unsigned long long)total, size, (unsigned long long)(secs / 60),
            (unsigned long long)(secs % 60));
    b->drawn = true;
  } else {
    fprintf(stderr, "%sprogress: %d%% %llu/%llu tasks %s %02llu:%02llu\n", b->label, pct, (unsigned long long)done,
            (unsigned long long)total, size, (unsigned long long)(secs / 60), (unsigned long long)(secs % 60));
  }
  fflush(stderr);
  b->last_ms = now;
}

static void on_progress(void *user, const tsr_progress *p)
{
  progressbar *b = user;
  if (b->tee != NULL) b->tee(b->tee_user, p);
  if (!b->enabled) return;
  bar_graph *g = slot_of(b, p->graph);
  if (g == NULL) return;
  g->done = p->tasks_done + p->tasks_erred;
  g->total = p->tasks_total;
  g->bytes = p->bytes_done;
  g->final = p->final;
  uint64_t now = now_ms();
  uint64_t every = b->tty ? TTY_REDRAW_MS : b->interval_ms;
  if (p->final || now - b->last_ms >= every) draw(b, now);
}

progressbar *progressbar_start(tsr_client *client, const char *label, bool enabled)
{
  return progressbar_start_tee(client, label, enabled, NULL, NULL);
}

progressbar *progressbar_start_tee(tsr_client *client, const char *label, bool enabled, tsr_progress_fn tee, void *tee_user)
{
  if ((!enabled && tee == NULL) || client == NULL) return NULL;
  progressbar *b = calloc(1, sizeof *b);
  if (b == NULL) return NULL;
  b->client = client;
  b->enabled = enabled;
  b->tee = tee;
  b->tee_user = tee_user;
  if (label != NULL && *label) snprintf(b->label, sizeof b->label, "%s: ", label);
  b->tty = isatty(STDERR_FILENO);
  b->interval_ms = env_interval();
  b->start_ms = b->last_ms = now_ms();
  if (tsr_client_on_progress(client, on_progress, b) != 0) {
    free(b);
    return NULL;
  }
  return b;
}

void progressbar_stop(progressbar **bar_p)
{
  if (bar_p == NULL || *bar_p == NULL) return;
  progressbar *b = *bar_p;
  tsr_client_on_progress(b->client, NULL, NULL);
  if (b->drawn) fputc('\n', stderr);
  free(b);
  *bar_p = NULL;
}
