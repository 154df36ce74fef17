/* Surviving a scheduler restart (docs/journal.md).
 *
 * A client names itself with a random 64-bit client_id in every hello.
 * When the scheduler goes quiet (heartbeat timeout) or says it does not
 * know us, the session is *suspended*, not lost: status requests fail at
 * once (the caller may retry them), but futures and submits in flight keep
 * waiting while the I/O thread says hello again. The next welcome decides:
 *
 * - `resumed: true` — the scheduler (restarted with its journal, or the
 *   same one after a blip) still holds this client's graphs: every key
 *   goes back to PENDING and the scheduler sends key_done / key_erred anew;
 *   futures complete as if nothing happened. A submit whose parts were
 *   lost with the old connection sends its whole graph again, marked
 *   `resend` (the scheduler answers a graph it already holds with
 *   `submitted`), so a tsr_submit in flight returns its future too.
 * - otherwise the graphs are gone: futures fail with TSR_ECONN and a
 *   message that says why ("scheduler restarted without a journal; graph
 *   lost" when the scheduler's incarnation changed).
 * - no welcome within the reconnect window (TESSERA_RECONNECT_TIMEOUT,
 *   default 30 s) after the suspension: futures fail with TSR_ECONN. A
 *   scheduler that disappears for good thus fails a future after at most
 *   the heartbeat timeout plus the reconnect window, never a hang.
 *
 * Everything here runs with c->mu held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "internal.h"

uint64_t client_random_id(void)
{
  uint64_t id = 0;
  if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) id = tsr_now_ns() ^ ((uint64_t)getpid() << 40);
  return id ? id : 1;
}

int client_env_reconnect(int64_t *ms_p)
{
  const char *text = getenv("TESSERA_RECONNECT_TIMEOUT");
  uint64_t ms;
  *ms_p = CLIENT_RECONNECT_DEFAULT_MS;
  if (text == NULL || text[0] == '\0') return 0;
  if (tsr_parse_duration_ms(text, &ms) != 0 || ms > 86400000u)
    return client_fail(TSR_EINVAL, "TESSERA_RECONNECT_TIMEOUT='%s' is not a duration like '30s'", text);
  *ms_p = (int64_t)ms;
  return 0;
}

static void suspend_requests_locked(tsr_client *c, const char *why)
{
  for (pending_submit *p = c->submits; p != NULL; p = p->next) p->interrupted = true;
  for (pending_status *p = c->statuses; p != NULL; p = p->next) {
    p->done = true;
    p->rc = TSR_ECONN;
    snprintf(p->message, sizeof p->message, "lost the scheduler at %s: %s", c->address, why);
  }
}

void client_session_suspend_locked(tsr_client *c, const char *why)
{
  if (c->state != CONN_UP) return;
  c->state = CONN_LOST;
  c->suspended_ms = tsr_now_ms();
  c->suspended = true;
  /* queued frames were meant for the session that ended */
  client_free_chain(c->out_head);
  c->out_head = c->out_tail = NULL;
  snprintf(c->lost_msg, sizeof c->lost_msg, "%s", why);
  suspend_requests_locked(c, why);
  client_log(c, TSR_LOG_WARN, "lost the scheduler at %s: %s; reconnecting (futures wait up to %lld ms)", c->address,
             why, (long long)c->reconnect_ms);
  pthread_cond_broadcast(&c->cv);
}

void client_reconnect_tick_locked(tsr_client *c, uint64_t now_ms)
{
  /* now_ms may be older than suspended_ms: the I/O thread reads the clock
   * before it takes mu, and the suspension it then makes reads it again.
   * Unsigned, that difference wrapped to ~2^64 and failed every future at
   * once, with this very message (one chaos run in a hundred, `sched`). */
  if (!c->suspended || c->state != CONN_LOST || now_ms < c->suspended_ms ||
      now_ms - c->suspended_ms <= (uint64_t)c->reconnect_ms)
    return;
  char why[TSR_ERRMSG_LEN + 96];
  snprintf(why, sizeof why, "%.300s, and no answer within the reconnect window of %lld ms", c->lost_msg,
           (long long)c->reconnect_ms);
  c->suspended = false;
  client_session_lost_locked(c, TSR_ECONN, why);
}

static void reset_key(void *arg, const char *key, size_t key_len, uint64_t value)
{
  (void)key, (void)key_len;
  tsr_client *c = arg;
  key_entry *e = (key_entry *)(uintptr_t)value;
  if (e->epoch != c->epoch || e->state == KEY_PENDING) return;
  for (size_t i = 0; i < e->n_where; i++) free(e->where[i]);
  free(e->where);
  e->where = NULL;
  e->n_where = 0;
  e->state = KEY_PENDING;   /* an erred key is re-sent as erred */
  e->gen++;
}

void client_welcomed_again_locked(tsr_client *c, bool resumed, uint64_t incarnation, bool journal)
{
  bool was_suspended = c->suspended;
  uint64_t before = c->incarnation;
  c->suspended = false;
  c->incarnation = incarnation;
  if (resumed) {
    tsr_strmap_each(c->keys, reset_key, c);
    c->resets++;
    for (pending_submit *p = c->submits; p != NULL; p = p->next)
      if (p->interrupted && !p->done) p->interrupted = false, p->resend = true;
    client_log(c, TSR_LOG_INFO, "resumed the session with %s: its graphs continue", c->address);
    return;
  }
  if (!was_suspended) return;   /* a first session, or futures already failed */
  const char *why;
  if (before != 0 && incarnation != before)
    why = journal ? "scheduler restarted and its journal does not know this client; graph lost"
                  : "scheduler restarted without a journal; graph lost";
  else
    why = "the scheduler no longer knows this client (it timed the client out); graph lost";
  client_log(c, TSR_LOG_WARN, "%s", why);
  client_session_lost_locked(c, TSR_ECONN, why);
}
