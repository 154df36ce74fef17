/* The ZAP handler (ZeroMQ RFC 27): one thread per zmq context, bound to
 * inproc://zeromq.zap.01, answering every CURVE handshake of the context's
 * server sockets. It admits a client whose public key is in the key set,
 * names the key as the connection's User-Id (so the daemon can read who a
 * message came from), and logs each refusal with the key and the peer's
 * address. Handshakes that fail before ZAP is asked (a plaintext peer, a
 * wrong server key) are seen only by a socket monitor: tsr_zap_monitor. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "curve.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define POLL_MS 100   /* how soon a stop or a reload flag is seen */

struct tsr_zap {
  void *zctx;
  void *rep;                 /* the handler's socket, used by the thread only */
  void *monitor;             /* PAIR of a socket monitor, or NULL; handed over under mu */
  pthread_t thread;
  pthread_mutex_t mu;        /* guards keys, monitor, watch_path, stop */
  tsr_keyset keys;
  char what[64], refusal[96];
  char *watch_path;
  volatile sig_atomic_t *reload;
  bool stop;
  unsigned long refusals;
};

/* Reads the ZAP request's frames (RFC 27: version, request id, domain,
 * address, identity, mechanism, credentials...). Returns the count. */
static int recv_request(void *rep, zmq_msg_t *parts, int cap)
{
  int n = 0, more = 1;
  while (more) {
    zmq_msg_t scratch, *part = n < cap ? &parts[n] : &scratch;
    zmq_msg_init(part);
    if (zmq_msg_recv(part, rep, 0) < 0) {
      zmq_msg_close(part);
      break;
    }
    more = zmq_msg_more(part);
    if (part == &scratch) zmq_msg_close(part);
    else n++;
  }
  return n;
}

static void send_reply(void *rep, zmq_msg_t *request_id, const char *code, const char *text, const char *user)
{
  zmq_send(rep, "1.0", 3, ZMQ_SNDMORE);
  zmq_send(rep, zmq_msg_data(request_id), zmq_msg_size(request_id), ZMQ_SNDMORE);
  zmq_send(rep, code, strlen(code), ZMQ_SNDMORE);
  zmq_send(rep, text, strlen(text), ZMQ_SNDMORE);
  zmq_send(rep, user, strlen(user), ZMQ_SNDMORE);
  zmq_send(rep, "", 0, 0);
}

static void answer(tsr_zap *zap)
{
  zmq_msg_t parts[8];
  int n = recv_request(zap->rep, parts, 8);
  if (n < 2) {
    for (int i = 0; i < n; i++) zmq_msg_close(&parts[i]);
    return;
  }
  char key[TSR_CURVE_KEY_LEN + 1] = "", address[64] = "?";
  bool curve = n >= 7 && zmq_msg_size(&parts[5]) == 5 && memcmp(zmq_msg_data(&parts[5]), "CURVE", 5) == 0 &&
               zmq_msg_size(&parts[6]) == 32;
  if (curve) zmq_z85_encode(key, zmq_msg_data(&parts[6]), 32);
  if (n >= 4) snprintf(address, sizeof address, "%.*s", (int)zmq_msg_size(&parts[3]), (char *)zmq_msg_data(&parts[3]));
  pthread_mutex_lock(&zap->mu);
  bool allowed = curve && tsr_keyset_has(&zap->keys, key);
  if (!allowed) zap->refusals++;
  pthread_mutex_unlock(&zap->mu);
  if (allowed) {
    send_reply(zap->rep, &parts[1], "200", "OK", key);
  } else {
    TSR_WARN("%s: refused CURVE key %s from %s: %s", zap->what, curve ? key : "(none)", address, zap->refusal);
    send_reply(zap->rep, &parts[1], "400", zap->refusal, "");
  }
  for (int i = 0; i < n; i++) zmq_msg_close(&parts[i]);
}

/* A plaintext peer shows as a mechanism mismatch, or, when it noticed the
 * mismatch first and hung up, as a failure with an errno (EPIPE). */
static const char *handshake_why(uint16_t event, uint32_t value)
{
  if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) return "the peer has no CURVE keys (plaintext)";
  if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) return "the peer used a wrong server key";
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) return strerror((int)value);
  return "protocol error";
}

static void read_event(tsr_zap *zap, void *monitor)
{
  zmq_msg_t parts[2];
  int n = recv_request(monitor, parts, 2);
  if (n >= 1 && zmq_msg_size(&parts[0]) == 6) {
    uint16_t event;
    uint32_t value;
    memcpy(&event, zmq_msg_data(&parts[0]), 2);
    memcpy(&value, (char *)zmq_msg_data(&parts[0]) + 2, 4);
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      pthread_mutex_lock(&zap->mu);
      zap->refusals++;
      pthread_mutex_unlock(&zap->mu);
      TSR_WARN("%s: refused a connection without a valid CURVE handshake: %s (0x%x)", zap->what,
               handshake_why(event, value), value);
    }
  }
  for (int i = 0; i < n; i++) zmq_msg_close(&parts[i]);
}

static void maybe_reload(tsr_zap *zap)
{
  if (zap->reload == NULL || !*zap->reload) return;
  *zap->reload = 0;
  tsr_keyset fresh = {0};
  tsr_errbuf err = {{0}};
  if (tsr_keyset_load(&fresh, zap->watch_path, &err) != 0) {
    TSR_ERROR("%s: allow-list not reloaded, keeping the old one: %s", zap->what, err.text);
    return;
  }
  TSR_INFO("%s: reloaded the allow-list %s: %zu keys", zap->what, zap->watch_path, fresh.n);
  tsr_zap_replace(zap, &fresh);
}

static void *zap_main(void *arg)
{
  tsr_zap *zap = arg;
  for (;;) {
    pthread_mutex_lock(&zap->mu);
    bool stop = zap->stop;
    void *monitor = zap->monitor;
    pthread_mutex_unlock(&zap->mu);
    if (stop) break;
    maybe_reload(zap);
    zmq_pollitem_t items[2] = {{zap->rep, 0, ZMQ_POLLIN, 0}, {monitor, 0, ZMQ_POLLIN, 0}};
    int rc = zmq_poll(items, monitor ? 2 : 1, POLL_MS);
    if (rc < 0 && zmq_errno() == ETERM) break;
    if (rc > 0 && (items[0].revents & ZMQ_POLLIN)) answer(zap);
    if (rc > 0 && monitor && (items[1].revents & ZMQ_POLLIN)) read_event(zap, monitor);
  }
  return NULL;
}

int tsr_zap_start(void *zctx, const char *what, const char *refusal, tsr_zap **zap_p, tsr_errbuf *err)
{
  tsr_zap *zap = calloc(1, sizeof *zap);
  if (zap == NULL) return TSR_ENOMEM;
  zap->zctx = zctx;
  snprintf(zap->what, sizeof zap->what, "%s", what);
  snprintf(zap->refusal, sizeof zap->refusal, "%s", refusal);
  pthread_mutex_init(&zap->mu, NULL);
  zap->rep = zmq_socket(zctx, ZMQ_REP);
  int linger = 0;
  if (zap->rep != NULL) zmq_setsockopt(zap->rep, ZMQ_LINGER, &linger, sizeof linger);
  if (zap->rep == NULL || zmq_bind(zap->rep, ZAP_ENDPOINT) != 0) {
    int rc = tsr_fail(err, TSR_ECONN, "cannot start the ZAP handler: %s", zmq_strerror(zmq_errno()));
    if (zap->rep != NULL) zmq_close(zap->rep);
    free(zap);
    return rc;
  }
  if (pthread_create(&zap->thread, NULL, zap_main, zap) != 0) {
    zmq_close(zap->rep);
    free(zap);
    return tsr_fail(err, TSR_ENOMEM, "cannot start the ZAP thread");
  }
  *zap_p = zap;
  return 0;
}

void tsr_zap_stop(tsr_zap **zap_p)
{
  if (zap_p == NULL || *zap_p == NULL) return;
  tsr_zap *zap = *zap_p;
  pthread_mutex_lock(&zap->mu);
  zap->stop = true;
  pthread_mutex_unlock(&zap->mu);
  pthread_join(zap->thread, NULL);
  zmq_close(zap->rep);
  if (zap->monitor != NULL) zmq_close(zap->monitor);
  tsr_keyset_free(&zap->keys);
  free(zap->watch_path);
  pthread_mutex_destroy(&zap->mu);
  free(zap);
  *zap_p = NULL;
}

void tsr_zap_replace(tsr_zap *zap, tsr_keyset *set)
{
  pthread_mutex_lock(&zap->mu);
  tsr_keyset_free(&zap->keys);
  zap->keys = *set;
  pthread_mutex_unlock(&zap->mu);
  *set = (tsr_keyset){0};
}

int tsr_zap_allow(tsr_zap *zap, const char *key, bool allow)
{
  int rc = 0;
  pthread_mutex_lock(&zap->mu);
  if (allow) rc = tsr_keyset_add(&zap->keys, key);
  else tsr_keyset_remove(&zap->keys, key);
  pthread_mutex_unlock(&zap->mu);
  return rc;
}

void tsr_zap_watch(tsr_zap *zap, const char *path, volatile sig_atomic_t *flag)
{
  pthread_mutex_lock(&zap->mu);
  free(zap->watch_path);
  zap->watch_path = strdup(path);
  zap->reload = zap->watch_path != NULL ? flag : NULL;
  pthread_mutex_unlock(&zap->mu);
}

int tsr_zap_monitor(tsr_zap *zap, void *sock, tsr_errbuf *err)
{
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "inproc://tsr-zap-monitor-%p", (void *)zap);
  int events = ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
  if (zmq_socket_monitor(sock, endpoint, events) != 0)
    return tsr_fail(err, TSR_ECONN, "cannot monitor the socket: %s", zmq_strerror(zmq_errno()));
  void *pair = zmq_socket(zap->zctx, ZMQ_PAIR);
  int linger = 0;
  if (pair != NULL) zmq_setsockopt(pair, ZMQ_LINGER, &linger, sizeof linger);
  if (pair == NULL || zmq_connect(pair, endpoint) != 0) {
    if (pair != NULL) zmq_close(pair);
    return tsr_fail(err, TSR_ECONN, "cannot connect the socket monitor: %s", zmq_strerror(zmq_errno()));
  }
  pthread_mutex_lock(&zap->mu);
  zap->monitor = pair;   /* the mutex is the barrier that hands it to the thread */
  pthread_mutex_unlock(&zap->mu);
  return 0;
}

unsigned long tsr_zap_refusals(tsr_zap *zap)
{
  pthread_mutex_lock(&zap->mu);
  unsigned long n = zap->refusals;
  pthread_mutex_unlock(&zap->mu);
  return n;
}
