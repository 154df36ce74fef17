/* CURVE in the worker (docs/security.md): the scheduler link as a CURVE
 * client, and the data socket as a CURVE server whose ZAP handler admits
 * only the keys the scheduler introduced in `peers` messages (the workers
 * and clients registered with it now). Plaintext when no keys were given. */
#include <stdio.h>
#include <string.h>

#include "zmtp/zmtp.h"
#include "worker_int.h"

int tsr_wsec_open_data(tsr_worker *w, const char *endpoint, const char *host, tsr_errbuf *err)
{
  const tsr_curve *curve = &w->opts.curve;
  if (curve->on) {
    int rc = tsr_zap_start(w->zctx, "data socket", "not introduced by the scheduler", &w->zap, err);
    if (rc == 0) rc = tsr_zap_allow(w->zap, curve->public_key, true);
    if (rc != 0) return rc;
  }
  int rc = tsr_xfer_server_open_transport(w->zctx, endpoint, host, curve, w->opts.transport, &w->server, err);
  if (rc == 0 && w->zap != NULL) rc = tsr_zap_monitor(w->zap, tsr_xfer_server_socket(w->server), err);
  return rc;
}

void tsr_wsec_tag_address(tsr_worker *w)
{
  if (!w->opts.curve.on) return;
  size_t len = strlen(w->data_address);
  if (len + strlen(TSR_CURVE_ADDR_TAG) + TSR_CURVE_KEY_LEN >= sizeof w->data_address) {
    TSR_WARN("data address %s is too long to carry the CURVE key; peers cannot fetch from it", w->data_address);
    return;
  }
  snprintf(w->data_address + len, sizeof w->data_address - len, "%s%s", TSR_CURVE_ADDR_TAG, w->opts.curve.public_key);
}

int tsr_wsec_link(tsr_worker *w, tsr_zmtp **sock_p)
{
  const tsr_curve *curve = &w->opts.curve;
  /* retries while the scheduler is not up yet: soon, then once a second */
  tsr_zmtp_opts o = {.what = "scheduler link", .reconnect_ms = 100, .reconnect_max_ms = 1000,
                     .secret_key = curve->on ? curve->secret_key : NULL, .server_key = curve->on ? curve->server_key : NULL};
  tsr_errbuf err = {{0}};
  int rc = tsr_zmtp_connect(w->opts.scheduler, &o, sock_p, &err);
  if (rc != 0) TSR_ERROR("scheduler link: %s", err.text);
  return rc;
}

/* Applies one key list of a `peers` message. */
static void apply_keys(tsr_worker *w, const msgpack_object *keys, size_t n, bool allow)
{
  for (size_t i = 0; i < n; i++) {
    const char *key;
    size_t len;
    if (tsr_obj_str(&keys[i], TSR_CURVE_KEY_LEN, &key, &len, NULL) != 0 || !tsr_curve_key_valid(key, len)) {
      TSR_WARN("peers: entry %zu is not a CURVE key; ignored", i);
      continue;
    }
    char text[TSR_CURVE_KEY_LEN + 1];
    memcpy(text, key, len);
    text[len] = '\0';
    if (tsr_zap_allow(w->zap, text, allow) != 0) TSR_ERROR("peers: out of memory admitting a key");
  }
}

void tsr_wsec_on_peers(tsr_worker *w, const msgpack_object *map)
{
  if (w->zap == NULL) return;   /* plaintext: the data socket admits anyone who can reach it */
  tsr_errbuf err = {{0}};
  bool reset = false;
  const msgpack_object *add = NULL, *remove = NULL;
  size_t nadd = 0, nremove = 0;
  int rc = tsr_wire_opt_bool(map, "reset", false, &reset, &err);
  if (rc == 0 && tsr_wire_field(map, "add") != NULL) rc = tsr_wire_array(map, "add", 1u << 20, &add, &nadd, &err);
  if (rc == 0 && tsr_wire_field(map, "remove") != NULL)
    rc = tsr_wire_array(map, "remove", 1u << 20, &remove, &nremove, &err);
  if (rc != 0) {
    TSR_WARN("malformed peers from scheduler: %s", err.text);
    tsr_report_error(w, rc, err.text, "peers");
    return;
  }
  if (reset) {
    tsr_keyset own = {0};
    if (tsr_keyset_add(&own, w->opts.curve.public_key) == 0) tsr_zap_replace(w->zap, &own);
    tsr_keyset_free(&own);
  }
  apply_keys(w, add, nadd, true);
  apply_keys(w, remove, nremove, false);
  TSR_DEBUG("peers: %zu keys admitted, %zu withdrawn%s", nadd, nremove, reset ? " (reset)" : "");
}
