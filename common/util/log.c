/* Process-wide logging. Daemons use the stderr sink; the client library
 * swaps in its caller's callback. Lines are formatted whole before they
 * reach the sink so concurrent threads never interleave within a line. */
#include "util.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static tsr_log_level log_level = TSR_LOG_INFO;
static const char *log_component = "tessera";
static tsr_log_sink log_sink = NULL;
static void *log_sink_arg = NULL;

void tsr_log_set_level(tsr_log_level level) { log_level = level; }
tsr_log_level tsr_log_get_level(void) { return log_level; }
void tsr_log_set_component(const char *name) { log_component = name ? name : "tessera"; }

void tsr_log_set_sink(tsr_log_sink sink, void *arg)
{
  log_sink = sink;
  log_sink_arg = arg;
}

int tsr_log_level_parse(const char *text)
{
  static const struct { const char *name; tsr_log_level level; } levels[] = {
    {"debug", TSR_LOG_DEBUG}, {"info", TSR_LOG_INFO},   {"warn", TSR_LOG_WARN},
    {"warning", TSR_LOG_WARN}, {"error", TSR_LOG_ERROR}, {"off", TSR_LOG_OFF},
  };
  for (size_t i = 0; text && i < sizeof levels / sizeof levels[0]; i++)
    if (strcmp(text, levels[i].name) == 0) return (int)levels[i].level;
  return -1;
}

void tsr_log(tsr_log_level level, const char *fmt, ...)
{
  static const char *names[] = {"debug", "info", "warn", "error"};
  if (level < log_level || level >= TSR_LOG_OFF) return;
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (log_sink != NULL) {
    log_sink(log_sink_arg, (int)level, line);
    return;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char out[2200];
  int n = snprintf(out, sizeof out, "%02d:%02d:%02d.%03ld %s[%d] %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                   ts.tv_nsec / 1000000, log_component, (int)getpid(), names[level], line);
  if (n > (int)sizeof out - 1) n = (int)sizeof out - 1;
  /* One write() per line keeps lines whole across processes sharing a log. */
  ssize_t ignored = write(2, out, (size_t)n);
  (void)ignored;
}
