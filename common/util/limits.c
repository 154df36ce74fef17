/* The limits on sizes from outside (limits.h): their names, parsing and
 * the one message format every refusal uses. */
#include "limits.h"

#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The protocol's ceilings (common/wire/wire.h: TSR_MAX_FRAME_BYTES,
 * TSR_MAX_KEY_LEN, TSR_MAX_BATCH_TASKS-sized parts up to UINT32_MAX/2
 * tasks a graph; a worker index is 16 bits). Repeated here as numbers:
 * util sits below wire. */
typedef struct limit_def {
  const char *name;
  size_t offset;
  bool bytes;          /* parsed with tsr_parse_bytes ("1GiB") */
  uint64_t ceiling;
} limit_def;

static const limit_def DEFS[] = {
  {"max-message-bytes", offsetof(tsr_limits, message_bytes), true, 1ull << 31},
  {"max-graph-tasks", offsetof(tsr_limits, graph_tasks), false, UINT32_MAX / 2},
  {"max-pending-bytes", offsetof(tsr_limits, pending_bytes), true, UINT64_MAX},
  {"max-key-bytes", offsetof(tsr_limits, key_bytes), true, 1024},
  {"max-params-bytes", offsetof(tsr_limits, params_bytes), true, 1ull << 31},
  {"max-workers", offsetof(tsr_limits, workers), false, 65000},
  {"max-clients", offsetof(tsr_limits, clients), false, 1u << 20},
  {"max-client-tasks", offsetof(tsr_limits, client_tasks), false, UINT32_MAX},
  {"max-chunk-bytes", offsetof(tsr_limits, chunk_bytes), true, UINT64_MAX},
};
#define NDEFS (sizeof DEFS / sizeof DEFS[0])

const char *const TSR_LIMIT_NAMES[] = {"max-message-bytes", "max-graph-tasks", "max-pending-bytes",
                                       "max-key-bytes",     "max-params-bytes", "max-workers",
                                       "max-clients",       "max-client-tasks", "max-chunk-bytes", NULL};

static const limit_def *find(const char *name)
{
  for (size_t i = 0; i < NDEFS; i++)
    if (strcmp(DEFS[i].name, name) == 0) return &DEFS[i];
  return NULL;
}

bool tsr_limits_has(const char *name) { return name != NULL && find(name) != NULL; }

static int parse_count(const char *text, uint64_t *value_p)
{
  char *end;
  if (!isdigit((unsigned char)text[0])) return TSR_EINVAL;
  unsigned long long v = strtoull(text, &end, 10);
  if (*end != '\0') return TSR_EINVAL;
  *value_p = v;
  return 0;
}

int tsr_limits_set(tsr_limits *limits, const char *name, const char *text, tsr_errbuf *err)
{
  const limit_def *d = find(name);
  if (d == NULL) return tsr_fail(err, TSR_EINVAL, "'%s' is not a limit", name);
  uint64_t v;
  int rc = d->bytes ? tsr_parse_bytes(text, &v) : parse_count(text, &v);
  if (rc != 0 || v == 0)
    return tsr_fail(err, TSR_EINVAL, "%s: \"%s\" is not a positive %s", name, text, d->bytes ? "size (e.g. 64MiB)" : "count");
  if (v > d->ceiling)
    return tsr_fail(err, TSR_EINVAL, "%s: %llu is above the protocol's ceiling %llu", name, (unsigned long long)v,
                    (unsigned long long)d->ceiling);
  memcpy((char *)limits + d->offset, &v, sizeof v);
  return 0;
}

int tsr_limit_fail(tsr_errbuf *err, const char *setting, const char *what, uint64_t value, uint64_t limit)
{
  char env[64] = "TESSERA_";
  size_t n = strlen(env);
  for (const char *s = setting; *s && n + 1 < sizeof env; s++) env[n++] = *s == '-' ? '_' : (char)toupper((unsigned char)*s);
  env[n] = '\0';
  return tsr_fail(err, TSR_ELIMIT, "%s: %llu, over the limit of %llu (--%s, %s)", what, (unsigned long long)value,
                  (unsigned long long)limit, setting, env);
}
