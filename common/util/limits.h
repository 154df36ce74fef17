/* common/util/limits.h — the configurable limits on sizes that come from
 * outside (docs/limits.md), in one place. The compile-time TSR_MAX_* of
 * wire.h stay the protocol's ceilings (what any Tessera peer may ever
 * send); these are what one deployment admits, at most those ceilings,
 * set with daemon flags, TESSERA_* variables or the config file and
 * checked before anything is allocated for the thing they bound.
 *
 *   setting              bounds                                      checked by
 *   max-message-bytes    one control frame                           scheduler (ZMQ_MAXMSGSIZE, then each frame)
 *   max-graph-tasks      tasks of one submitted graph (all parts)    scheduler, before decoding the tasks
 *   max-pending-bytes    parts a client sent before their last one   scheduler, before keeping a part
 *   max-key-bytes        one task key                                scheduler, per task
 *   max-params-bytes     one task's params map, encoded              scheduler, per task
 *   max-workers          workers connected at once                   scheduler, at hello
 *   max-clients          clients connected at once                   scheduler, at hello
 *   max-client-tasks     tasks a client has submitted, not finished  scheduler, at submit (flood control)
 *   max-chunk-bytes      one chunk a worker makes or receives        worker, before allocating it
 *
 * Each limit is a positive number; a refusal is TSR_ELIMIT with a message
 * naming the setting, the value met and the limit (tsr_limit_fail). */
#ifndef TSR_COMMON_LIMITS_H
#define TSR_COMMON_LIMITS_H

#include <stdbool.h>
#include <stdint.h>

#include "util.h"

/* All fields are uint64_t (scheduler/limits.c fills zeros field by field). */
typedef struct tsr_limits {
  uint64_t message_bytes;
  uint64_t graph_tasks;
  uint64_t pending_bytes;
  uint64_t key_bytes;
  uint64_t params_bytes;
  uint64_t workers;
  uint64_t clients;
  uint64_t client_tasks;
  uint64_t chunk_bytes;
} tsr_limits;

/* The defaults: generous for one site's HPC use (a 10^7-task graph, 64 GiB
 * chunks), tight enough that one peer cannot make a daemon allocate
 * without bound. */
#define TSR_LIMITS_DEFAULT                                                                          \
  {                                                                                                 \
    .message_bytes = 256ull << 20, .graph_tasks = 20000000, .pending_bytes = 8ull << 30, .key_bytes = 1024, .params_bytes = 1u << 20, \
    .workers = 4096, .clients = 1024, .client_tasks = 50000000, .chunk_bytes = 64ull << 30,       \
  }

/* True when name is one of the settings above ("max-graph-tasks"). */
bool tsr_limits_has(const char *name);
/* Sets the named limit from text ("1GiB" for the byte limits, a count
 * for the others), checked against the protocol's ceiling. 0, or
 * TSR_EINVAL naming the setting and the value. */
int tsr_limits_set(tsr_limits *limits, const char *name, const char *text, tsr_errbuf *err);
/* The setting names, NULL-terminated, in the order above (for KEYS tables). */
extern const char *const TSR_LIMIT_NAMES[];

/* Formats the refusal "<what>: <value>, over the limit of <limit>
 * (--<setting>, TESSERA_<SETTING>)" into err; returns TSR_ELIMIT. */
int tsr_limit_fail(tsr_errbuf *err, const char *setting, const char *what, uint64_t value, uint64_t limit);

#endif
