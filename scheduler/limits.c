/* The scheduler's side of the limits on what peers send (util/limits.h,
 * docs/limits.md): how many workers and clients may register, how large a
 * graph may be, how many unfinished tasks one client may have (so a
 * client that floods submissions is refused while everyone else's graphs
 * go on), and each task's key and params. Every check runs before the
 * scheduler allocates anything for what it bounds; every refusal names
 * the setting, the value met and the limit. The frame-size limit is in
 * handlers.c (each frame) and loop.c (ZMQ_MAXMSGSIZE). */
#include "sched.h"

#include <stdio.h>
#include <string.h>

void sched_limits_defaults(tsr_limits *limits)
{
  const tsr_limits def = TSR_LIMITS_DEFAULT;
  uint64_t *field = (uint64_t *)limits;
  const uint64_t *value = (const uint64_t *)&def;
  /* tsr_limits is a run of uint64_t: fill each zero one */
  for (size_t i = 0; i < sizeof def / sizeof *value; i++)
    if (field[i] == 0) field[i] = value[i];
}

bool sched_limits_refuse_hello(sched_state *st, uint32_t p, const char *role, size_t role_len)
{
  bool worker = role_len == 6 && memcmp(role, "worker", 6) == 0;
  bool client = role_len == 6 && memcmp(role, "client", 6) == 0;
  uint8_t has = st->peers[p].role;
  /* a peer saying hello again keeps its place */
  uint64_t count = worker ? st->nworkers_alive - (has == PEER_WORKER) : st->nclients_alive - (has == PEER_CLIENT);
  uint64_t limit = worker ? st->cfg.limits.workers : st->cfg.limits.clients;
  if ((!worker && !client) || count < limit) return false;
  tsr_errbuf err;
  tsr_limit_fail(&err, worker ? "max-workers" : "max-clients", worker ? "workers connected" : "clients connected",
                 count + 1, limit);
  char label[TSR_MAX_NAME_LEN + 32];
  TSR_WARN("rejected 'hello' from %s: %s", sched_peer_label(st, p, label, sizeof label), err.text);
  sched_send_error(st, p, TSR_ELIMIT, "hello", "%s", err.text);
  return true;
}

/* Tasks of client's graphs not yet finished (neither done nor erred). */
static uint64_t client_unfinished(const sched_state *st, uint32_t client)
{
  uint64_t n = 0;
  for (uint32_t g = 0; g < st->ngraphs; g++) {
    const sched_graph *gr = st->graphs[g];
    if (gr != NULL && gr->client == client && gr->ntasks > gr->ndone + gr->nerred)
      n += gr->ntasks - gr->ndone - gr->nerred;
  }
  return n;
}

int sched_limits_check_graph(const sched_state *st, uint32_t client, uint64_t graph_id, uint64_t ntasks,
                             tsr_errbuf *err)
{
  const tsr_limits *l = &st->cfg.limits;
  char what[96];
  if (ntasks > l->graph_tasks) {
    snprintf(what, sizeof what, "tasks in graph %llu", (unsigned long long)graph_id);
    return tsr_limit_fail(err, "max-graph-tasks", what, ntasks, l->graph_tasks);
  }
  uint64_t unfinished = client == SCHED_NONE ? 0 : client_unfinished(st, client);
  if (unfinished + ntasks > l->client_tasks) {
    snprintf(what, sizeof what, "unfinished tasks of this client with graph %llu (%llu before it)",
             (unsigned long long)graph_id, (unsigned long long)unfinished);
    int rc = tsr_limit_fail(err, "max-client-tasks", what, unfinished + ntasks, l->client_tasks);
    size_t len = strlen(err->text);
    snprintf(err->text + len, sizeof err->text - len, "; retry when some of them finish");
    return rc;
  }
  return 0;
}

int sched_limits_check_pending(const sched_state *st, const sched_client *c, size_t len, tsr_errbuf *err)
{
  uint64_t kept = 0;
  for (uint32_t i = 0; i < c->npending; i++) kept += c->pending[i].bytes;
  if (kept + len <= st->cfg.limits.pending_bytes) return 0;
  return tsr_limit_fail(err, "max-pending-bytes", "bytes of graph parts kept for this client", kept + len,
                        st->cfg.limits.pending_bytes);
}

int sched_limits_check_task(const sched_state *st, size_t key_len, size_t params_len, tsr_errbuf *err)
{
  const tsr_limits *l = &st->cfg.limits;
  if (key_len > l->key_bytes) return tsr_limit_fail(err, "max-key-bytes", "key bytes", key_len, l->key_bytes);
  if (params_len > l->params_bytes)
    return tsr_limit_fail(err, "max-params-bytes", "encoded params bytes", params_len, l->params_bytes);
  return 0;
}
