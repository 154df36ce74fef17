/* CURVE on the scheduler's socket, and introductions (docs/security.md).
 *
 * With --curve-secret and --allow-keys the router is a CURVE server
 * (common/zmtp) that admits a connecting worker or client only when its
 * public key is on the allow-list, reloaded on SIGHUP; every received
 * message carries its sender's key, which a hello records on the peer.
 *
 * Introductions: a worker's data socket admits only the keys the scheduler
 * told it about in `peers` messages: the keys of the workers and clients
 * registered now. A worker's first `peers` after its welcome has `reset`
 * and every key; afterwards each newly seen key is added to every worker,
 * and a key whose last peer left is removed. Without CURVE nothing is sent. */
#include <string.h>

#include "net/curve.h"
#include "net/net.h"
#include "zmtp/zmtp.h"
#include "sched.h"

static bool admit_key(void *arg, const char *key, const char *peer_address)
{
  sched_security *sec = arg;
  if (tsr_keyset_has(&sec->allow, key)) return true;
  TSR_WARN("scheduler: refused CURVE key %s from %s: not on the allow-list", key, peer_address);
  return false;
}

int sched_security_open(const sched_loop_opts *opts, sched_security *sec, struct tsr_zmtp_opts *zo)
{
  if (opts->curve_secret == NULL) return 0;
  tsr_errbuf err = {{0}};
  int rc = tsr_curve_load(&sec->curve, opts->curve_secret, NULL, &err);
  if (rc == 0) rc = tsr_keyset_load(&sec->allow, opts->allow_keys, &err);
  if (rc != 0) {
    TSR_ERROR("CURVE: %s", err.text);
    tsr_keyset_free(&sec->allow);
    return rc;
  }
  TSR_INFO("CURVE on: public key %s, %zu keys allowed from %s (SIGHUP reloads it)", sec->curve.public_key,
           sec->allow.n, opts->allow_keys);
  sec->on = true;
  sec->allow_path = opts->allow_keys;
  sec->reload = opts->reload;
  zo->secret_key = sec->curve.secret_key;
  zo->admit = admit_key;
  zo->admit_arg = sec;
  return 0;
}

void sched_security_tick(sched_security *sec)
{
  if (!sec->on || sec->reload == NULL || !*sec->reload) return;
  *sec->reload = 0;
  tsr_keyset fresh = {0};
  tsr_errbuf err = {{0}};
  if (tsr_keyset_load(&fresh, sec->allow_path, &err) != 0) {
    TSR_ERROR("scheduler: allow-list not reloaded, keeping the old one: %s", err.text);
    return;
  }
  TSR_INFO("scheduler: reloaded the allow-list %s: %zu keys", sec->allow_path, fresh.n);
  tsr_keyset_free(&sec->allow);
  sec->allow = fresh;
}

void sched_security_close(sched_security *sec) { tsr_keyset_free(&sec->allow); }

/* True for tcp://127.x.x.x, tcp://localhost, tcp://[::1], ipc:// and inproc://. */
static bool is_loopback(const char *endpoint)
{
  if (strncmp(endpoint, "tcp://", 6) != 0) return true;
  const char *host = endpoint + 6;
  return strncmp(host, "127.", 4) == 0 || strncmp(host, "localhost:", 10) == 0 || strncmp(host, "[::1]", 5) == 0;
}

void sched_security_warn(const sched_loop_opts *opts)
{
  if (opts->curve_secret == NULL && !is_loopback(opts->listen))
    TSR_WARN("listening on %s without CURVE keys: anyone who reaches this port can register a worker, submit "
             "tasks and read results; give --curve-secret and --allow-keys (docs/security.md)",
             opts->listen);
}

void sched_security_note_frame(sched_state *st, const char *key)
{
  if (st->cfg.curve && key[0] != '\0') memcpy(st->frame_key, key, sizeof st->frame_key);
  else st->frame_key[0] = '\0';
}

/* True when a registered peer other than skip holds key. */
static bool key_held(const sched_state *st, const char *key, uint32_t skip)
{
  for (uint32_t p = 0; p < st->npeers_slots; p++) {
    const sched_peer *peer = &st->peers[p];
    if (p != skip && peer->in_use && peer->role != PEER_NONE && strcmp(peer->curve_key, key) == 0) return true;
  }
  return false;
}

/* Sends {op: peers, field: [key]} to every registered worker but skip. */
static void tell_workers(sched_state *st, const char *field, const char *key, uint32_t skip)
{
  for (uint32_t p = 0; p < st->npeers_slots; p++) {
    if (p == skip || !st->peers[p].in_use || st->peers[p].role != PEER_WORKER) continue;
    tsr_wbuf *wb = sched_out(st, p);
    tsr_wbuf_begin(wb, "peers", 2);
    tsr_pack_str(&wb->pk, field);
    msgpack_pack_array(&wb->pk, 1);
    tsr_pack_str(&wb->pk, key);
  }
}

/* A new worker learns every key registered now, its own included. */
static void introduce_all(sched_state *st, uint32_t w)
{
  uint32_t n = 0;
  for (uint32_t p = 0; p < st->npeers_slots; p++)
    if (st->peers[p].in_use && st->peers[p].role != PEER_NONE && st->peers[p].curve_key[0] != '\0') n++;
  tsr_wbuf *wb = sched_out(st, w);
  tsr_wbuf_begin(wb, "peers", 3);
  tsr_pack_kv_bool(&wb->pk, "reset", true);
  tsr_pack_str(&wb->pk, "add");
  msgpack_pack_array(&wb->pk, n);
  for (uint32_t p = 0; p < st->npeers_slots; p++)
    if (st->peers[p].in_use && st->peers[p].role != PEER_NONE && st->peers[p].curve_key[0] != '\0')
      tsr_pack_str(&wb->pk, st->peers[p].curve_key);
}

void sched_security_hello(sched_state *st, uint32_t p)
{
  sched_peer *peer = &st->peers[p];
  memcpy(peer->curve_key, st->frame_key, sizeof peer->curve_key);
  if (!st->cfg.curve || peer->curve_key[0] == '\0') return;
  if (!key_held(st, peer->curve_key, p)) tell_workers(st, "add", peer->curve_key, p);
  if (peer->role == PEER_WORKER) introduce_all(st, p);
}

void sched_security_gone(sched_state *st, uint32_t p)
{
  sched_peer *peer = &st->peers[p];
  if (st->cfg.curve && peer->curve_key[0] != '\0' && peer->role != PEER_NONE && !key_held(st, peer->curve_key, p))
    tell_workers(st, "remove", peer->curve_key, p);
}
