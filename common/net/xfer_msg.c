/* The data plane's messages and addresses (xfer_int.h), shared by the
 * ZeroMQ transport (xfer.c) and the UCX one (xfer_ucx*.c). */
#include "xfer_int.h"

#include <stdio.h>
#include <string.h>

#include "curve.h"
#include "ucx.h"

void tsr_xfer_pack_get(tsr_wbuf *wb, const char *key)
{
  tsr_wbuf_begin(wb, "get", 2);
  tsr_pack_kv_str(&wb->pk, "key", key);
}

int tsr_xfer_decode_get(const void *data, size_t len, char *key, size_t cap, tsr_errbuf *err)
{
  tsr_reader rd;
  const msgpack_object *map;
  char op[TSR_MAX_NAME_LEN + 1];
  int rc = tsr_reader_init(&rd, data, len, err);
  if (rc == 0) rc = tsr_reader_next(&rd, &map, op, err);
  if (rc == 1 && strcmp(op, "get") != 0) rc = tsr_fail(err, TSR_EPROTO, "unknown data-plane op '%s'", op);
  else if (rc == 1) rc = tsr_wire_strcpy(map, "key", key, cap, err);
  else if (rc == 0) rc = tsr_fail(err, TSR_EPROTO, "empty request");
  tsr_reader_done(&rd);
  return rc < 0 ? rc : 0;
}

void tsr_xfer_pack_error(tsr_wbuf *wb, const char *key, int code, const char *message)
{
  tsr_wbuf_begin(wb, "error", 4);
  tsr_pack_kv_str(&wb->pk, "key", key);
  tsr_pack_kv_int(&wb->pk, "code", code);
  tsr_pack_kv_str(&wb->pk, "message", message);
}

void tsr_xfer_pack_chunk(tsr_wbuf *wb, const char *key, const tsr_xfer_chunk *chunk)
{
  tsr_chunk_header hdr = {0};
  snprintf(hdr.key, sizeof hdr.key, "%s", key);
  hdr.meta = chunk->meta;
  hdr.nbytes = chunk->nbytes;
  snprintf(hdr.codec, sizeof hdr.codec, "raw");
  tsr_chunk_header_pack(wb, &hdr);
}

/* Decodes the error reply of a peer into err; returns its code. */
static int reply_error(const msgpack_object *map, const char *key, tsr_errbuf *err)
{
  int64_t code = TSR_EPROTO;
  const char *text = "";
  size_t text_len = 0;
  tsr_wire_opt_int(map, "code", TSR_EPROTO, &code, NULL);
  tsr_wire_str(map, "message", TSR_MAX_TEXT_LEN, &text, &text_len, NULL);
  if (code >= 0 || code < -1000) code = TSR_EPROTO;
  return tsr_fail(err, (int)code, "fetch of '%s': %.*s", key, (int)text_len, text);
}

int tsr_xfer_decode_reply(const void *data, size_t len, const char *key, tsr_chunk_header *hdr, tsr_errbuf *err)
{
  tsr_reader rd;
  const msgpack_object *map;
  char op[TSR_MAX_NAME_LEN + 1];
  int rc = tsr_reader_init(&rd, data, len, err);
  if (rc == 0) rc = tsr_reader_next(&rd, &map, op, err);
  if (rc == 1) {
    if (strcmp(op, "error") == 0) rc = reply_error(map, key, err);
    else if (strcmp(op, "chunk") != 0) rc = tsr_fail(err, TSR_EPROTO, "fetch of '%s': unexpected reply '%s'", key, op);
    else rc = tsr_chunk_header_decode(map, hdr, err);
  } else if (rc == 0) {
    rc = tsr_fail(err, TSR_EPROTO, "fetch of '%s': empty reply", key);
  }
  tsr_reader_done(&rd);
  if (rc == 0 && strcmp(hdr->key, key) != 0) rc = tsr_fail(err, TSR_EPROTO, "asked for '%s', got '%s'", key, hdr->key);
  return rc;
}

/* ---------- addresses ---------- */

/* The alternative of address (a comma-separated list) with the scheme,
 * into out; false when there is none. */
static bool find_alt(const char *address, const char *scheme, char *out, size_t cap)
{
  size_t slen = strlen(scheme);
  for (const char *p = address; *p != '\0';) {
    size_t len = strcspn(p, ",");
    if (len > slen && strncmp(p, scheme, slen) == 0 && len < cap) {
      memcpy(out, p, len);
      out[len] = '\0';
      return true;
    }
    p += len;
    if (*p == ',') p++;
  }
  return false;
}

int tsr_xfer_pick(const char *address, tsr_transport prefer, bool ucx_ok, char *endpoint, size_t cap, bool *ucx_p,
                  tsr_errbuf *err)
{
  bool has_ucx = ucx_ok && find_alt(address, TSR_UCX_SCHEME, endpoint, cap);
  char zmq_ep[TSR_MAX_ADDR_LEN];
  /* any scheme but ucx:// is ZeroMQ's (tcp://, ipc://, inproc://) */
  bool has_zmq = false;
  for (const char *p = address; *p != '\0' && !has_zmq;) {
    size_t len = strcspn(p, ",");
    if (len > 0 && len < sizeof zmq_ep && strncmp(p, TSR_UCX_SCHEME, strlen(TSR_UCX_SCHEME)) != 0) {
      memcpy(zmq_ep, p, len);
      zmq_ep[len] = '\0';
      has_zmq = true;
    }
    p += len;
    if (*p == ',') p++;
  }
  bool use_ucx = has_ucx && (prefer != TSR_TRANSPORT_ZMQ || !has_zmq);
  if (!use_ucx && !has_zmq) {
    if (strstr(address, TSR_UCX_SCHEME) != NULL)
      return tsr_fail(err, TSR_ECONN, "the worker at %s serves chunks only over UCX, which this process cannot use%s",
                      address, tsr_ucx_built() ? "" : " (built without UCX)");
    return tsr_fail(err, TSR_ECONN, "no usable data address in '%s'", address);
  }
  if (!use_ucx && snprintf(endpoint, cap, "%s", zmq_ep) >= (int)cap)
    return tsr_fail(err, TSR_ECONN, "data address '%s' is too long", zmq_ep);
  *ucx_p = use_ucx;
  return 0;
}
