/* The ZeroMQ data plane. A worker binds one ROUTER ("data socket"); a peer
 * or client connects a DEALER per worker and sends {"op":"get","key":K}.
 * The reply is [chunk header][bytes] or [{"op":"error",...}]. The bytes go
 * out with zmq_msg_init_data, so the store's buffer is sent without a copy;
 * the store's reference is dropped in ZeroMQ's free callback. */
#include "net.h"

#include "curve.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tsr_xfer_conn {
  void *sock;
  char address[TSR_MAX_ADDR_LEN];
};

struct tsr_xfer_server {
  void *sock;
  char address[TSR_MAX_ADDR_LEN];
  uint64_t bytes_served;
};

int tsr_xfer_open(void *zctx, const char *address, tsr_xfer_conn **conn_p, tsr_errbuf *err)
{
  return tsr_xfer_open_curve(zctx, address, NULL, conn_p, err);
}

/* An address with a worker's key ("#curve=") is a CURVE server's: connect
 * as a CURVE client with our keys, or fail naming why. */
static int secure_conn(void *sock, const char *address, const char *server_key, const tsr_curve *curve,
                       tsr_errbuf *err)
{
  if (server_key[0] == '\0') return 0;
  if (curve == NULL || !curve->on)
    return tsr_fail(err, TSR_ECONN, "the worker at %s requires CURVE keys and this process has none", address);
  return tsr_curve_client(sock, curve, server_key, err);
}

int tsr_xfer_open_curve(void *zctx, const char *address, const tsr_curve *curve, tsr_xfer_conn **conn_p,
                        tsr_errbuf *err)
{
  char endpoint[TSR_MAX_ADDR_LEN], server_key[TSR_CURVE_KEY_LEN + 1];
  tsr_curve_split_address(address, endpoint, sizeof endpoint, server_key);
  tsr_xfer_conn *conn = calloc(1, sizeof *conn);
  if (conn == NULL) return TSR_ENOMEM;
  conn->sock = zmq_socket(zctx, ZMQ_DEALER);
  if (conn->sock == NULL) {
    free(conn);
    return tsr_fail(err, TSR_ECONN, "zmq_socket: %s", zmq_strerror(zmq_errno()));
  }
  tsr_net_socket_defaults(conn->sock);
  /* Queue requests only on a live connection: a dead peer then shows as
   * "not writable" within TSR_XFER_CONNECT_MS instead of a silent wait for
   * the whole fetch timeout. (With CURVE, a connection counts as live once
   * its handshake succeeded: a refused peer is not writable either.) */
  int immediate = 1;
  zmq_setsockopt(conn->sock, ZMQ_IMMEDIATE, &immediate, sizeof immediate);
  int rc = secure_conn(conn->sock, address, server_key, curve, err);
  if (rc == 0 && zmq_connect(conn->sock, endpoint) != 0)
    rc = tsr_fail(err, TSR_ECONN, "cannot connect to %s: %s", endpoint, zmq_strerror(zmq_errno()));
  if (rc != 0) {
    zmq_close(conn->sock);
    free(conn);
    return rc;
  }
  snprintf(conn->address, sizeof conn->address, "%s", address);
  *conn_p = conn;
  return 0;
}

void tsr_xfer_close(tsr_xfer_conn **conn_p)
{
  if (conn_p == NULL || *conn_p == NULL) return;
  zmq_close((*conn_p)->sock);
  free(*conn_p);
  *conn_p = NULL;
}

const char *tsr_xfer_address(const tsr_xfer_conn *conn) { return conn->address; }

void tsr_xfer_data_release(tsr_xfer_data *data)
{
  if (data->owner != NULL) {
    zmq_msg_close(data->owner);
    free(data->owner);
  }
  free(data->copy);
  data->owner = NULL;
  data->copy = NULL;
  data->data = NULL;
  data->nbytes = 0;
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

static int decode_reply(tsr_frames *frames, const char *key, tsr_chunk_header *hdr, tsr_errbuf *err)
{
  tsr_reader rd;
  const msgpack_object *map;
  char op[TSR_MAX_NAME_LEN + 1];
  int rc = tsr_reader_init(&rd, tsr_frame_data(frames, 0), tsr_frame_size(frames, 0), err);
  if (rc == 0) rc = tsr_reader_next(&rd, &map, op, err);
  if (rc == 1) {
    if (strcmp(op, "error") == 0) rc = reply_error(map, key, err);
    else if (strcmp(op, "chunk") != 0) rc = tsr_fail(err, TSR_EPROTO, "fetch of '%s': unexpected reply '%s'", key, op);
    else rc = tsr_chunk_header_decode(map, hdr, err);
  } else if (rc == 0) {
    rc = tsr_fail(err, TSR_EPROTO, "fetch of '%s': empty reply", key);
  }
  tsr_reader_done(&rd);
  return rc;
}

/* ZeroMQ's decoder places a small frame anywhere in its receive buffer;
 * kernels need aligned elements (an f64 load at an odd address is
 * undefined), so such a payload is copied once into an aligned buffer.
 * Large frames have buffers of their own, element-aligned: no copy. */
static int align_payload(tsr_xfer_data *out, tsr_errbuf *err)
{
  if ((uintptr_t)out->data % TSR_XFER_ALIGN == 0) return 0;
  void *copy = NULL;
  if (posix_memalign(&copy, TSR_XFER_ALIGN, out->nbytes ? out->nbytes : 1) != 0)
    return tsr_fail(err, TSR_ENOMEM, "cannot allocate %zu bytes to align a received chunk", out->nbytes);
  memcpy(copy, out->data, out->nbytes);
  zmq_msg_close(out->owner);
  free(out->owner);
  out->owner = NULL;
  out->copy = out->data = copy;
  return 0;
}

int tsr_xfer_get(tsr_xfer_conn *conn, const char *key, int timeout_ms, tsr_chunk_header *hdr, tsr_xfer_data *out,
                 tsr_errbuf *err)
{
  return tsr_xfer_get_abortable(conn, key, timeout_ms, NULL, NULL, hdr, out, err);
}

/* Waits for the reply: 1 readable, 0 timed out, -1 abandoned. */
static int await_reply(tsr_xfer_conn *conn, int timeout_ms, tsr_xfer_abort_fn abort, void *ctx)
{
  zmq_pollitem_t item = {conn->sock, 0, ZMQ_POLLIN, 0};
  if (abort == NULL) return zmq_poll(&item, 1, timeout_ms) > 0 ? 1 : 0;
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : tsr_now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    uint64_t now = tsr_now_ms();
    if (now >= deadline) return 0;
    long left = deadline - now > TSR_XFER_ABORT_SLICE_MS ? TSR_XFER_ABORT_SLICE_MS : (long)(deadline - now);
    if (zmq_poll(&item, 1, left) > 0) return 1;
    if (abort(ctx, conn->address)) return -1;
  }
}

int tsr_xfer_get_abortable(tsr_xfer_conn *conn, const char *key, int timeout_ms, tsr_xfer_abort_fn abort,
                           void *ctx, tsr_chunk_header *hdr, tsr_xfer_data *out, tsr_errbuf *err)
{
  int connect_ms = timeout_ms >= 0 && timeout_ms < TSR_XFER_CONNECT_MS ? timeout_ms : TSR_XFER_CONNECT_MS;
  zmq_pollitem_t out_item = {conn->sock, 0, ZMQ_POLLOUT, 0};
  if (zmq_poll(&out_item, 1, connect_ms) <= 0)
    return tsr_fail(err, TSR_ECONN, "fetch of '%s': cannot reach %s within %d ms", key, conn->address, connect_ms);
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "get", 2);
  tsr_pack_kv_str(&wb.pk, "key", key);
  int sent = tsr_net_send(conn->sock, NULL, 0, wb.sbuf.data, wb.sbuf.size, ZMQ_DONTWAIT);
  tsr_wbuf_free(&wb);
  if (sent != 0) return tsr_fail(err, TSR_ECONN, "send to %s: %s", conn->address, zmq_strerror(zmq_errno()));
  int ready = await_reply(conn, timeout_ms, abort, ctx);
  if (ready < 0)
    return tsr_fail(err, TSR_ECONN, "fetch of '%s' from %s abandoned: the scheduler declared that worker dead", key,
                    conn->address);
  if (ready == 0) return tsr_fail(err, TSR_ETIMEDOUT, "fetch of '%s' from %s timed out", key, conn->address);
  tsr_frames frames;
  if (tsr_frames_recv(conn->sock, &frames, 0) < 0)
    return tsr_fail(err, TSR_ECONN, "receive from %s: %s", conn->address, zmq_strerror(zmq_errno()));
  int rc = frames.count >= 1 ? decode_reply(&frames, key, hdr, err) : TSR_EPROTO;
  if (rc == 0 && strcmp(hdr->key, key) != 0)
    rc = tsr_fail(err, TSR_EPROTO, "asked %s for '%s', got '%s'", conn->address, key, hdr->key);
  if (rc == 0 && (frames.count != 2 || tsr_frame_size(&frames, 1) != hdr->nbytes))
    rc = tsr_fail(err, TSR_EPROTO, "chunk '%s' from %s: payload does not match its header", key, conn->address);
  if (rc == 0) {
    out->owner = malloc(sizeof(zmq_msg_t));
    if (out->owner == NULL) rc = TSR_ENOMEM;
  }
  if (rc == 0) {
    /* Move the payload frame into out: no copy of the chunk bytes. */
    zmq_msg_init(out->owner);
    zmq_msg_move(out->owner, &frames.part[1]);
    out->data = zmq_msg_data(out->owner);
    out->nbytes = zmq_msg_size(out->owner);
    out->copy = NULL;
    rc = align_payload(out, err);
    if (rc != 0) tsr_xfer_data_release(out);
  }
  tsr_frames_close(&frames);
  return rc;
}

int tsr_xfer_server_open(void *zctx, const char *endpoint, const char *advertise_host, tsr_xfer_server **srv_p,
                         tsr_errbuf *err)
{
  return tsr_xfer_server_open_curve(zctx, endpoint, advertise_host, NULL, srv_p, err);
}

int tsr_xfer_server_open_curve(void *zctx, const char *endpoint, const char *advertise_host, const tsr_curve *curve,
                               tsr_xfer_server **srv_p, tsr_errbuf *err)
{
  tsr_xfer_server *srv = calloc(1, sizeof *srv);
  if (srv == NULL) return TSR_ENOMEM;
  srv->sock = zmq_socket(zctx, ZMQ_ROUTER);
  if (srv->sock == NULL) {
    free(srv);
    return tsr_fail(err, TSR_ECONN, "zmq_socket: %s", zmq_strerror(zmq_errno()));
  }
  tsr_net_socket_defaults(srv->sock);
  int rc = curve != NULL && curve->on ? tsr_curve_server(srv->sock, curve, "tessera-data", err) : 0;
  if (rc == 0) rc = tsr_net_bind(srv->sock, endpoint, advertise_host, srv->address, sizeof srv->address, err);
  if (rc != 0) {
    zmq_close(srv->sock);
    free(srv);
    return rc;
  }
  *srv_p = srv;
  return 0;
}

void tsr_xfer_server_close(tsr_xfer_server **srv_p)
{
  if (srv_p == NULL || *srv_p == NULL) return;
  zmq_close((*srv_p)->sock);
  free(*srv_p);
  *srv_p = NULL;
}

const char *tsr_xfer_server_address(const tsr_xfer_server *srv) { return srv->address; }
void *tsr_xfer_server_socket(tsr_xfer_server *srv) { return srv->sock; }
uint64_t tsr_xfer_server_bytes(const tsr_xfer_server *srv) { return srv->bytes_served; }

static void send_error(tsr_xfer_server *srv, zmq_msg_t *identity, const char *key, int code, const char *message)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "error", 4);
  tsr_pack_kv_str(&wb.pk, "key", key);
  tsr_pack_kv_int(&wb.pk, "code", code);
  tsr_pack_kv_str(&wb.pk, "message", message);
  tsr_net_send(srv->sock, zmq_msg_data(identity), zmq_msg_size(identity), wb.sbuf.data, wb.sbuf.size, 0);
  tsr_wbuf_free(&wb);
}

static void send_chunk(tsr_xfer_server *srv, zmq_msg_t *identity, const char *key, tsr_xfer_chunk *chunk)
{
  tsr_chunk_header hdr = {0};
  snprintf(hdr.key, sizeof hdr.key, "%s", key);
  hdr.meta = chunk->meta;
  hdr.nbytes = chunk->nbytes;
  snprintf(hdr.codec, sizeof hdr.codec, "raw");
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_chunk_header_pack(&wb, &hdr);
  zmq_msg_t payload;
  /* ZeroMQ calls release when the bytes have left; it owns them until then. */
  zmq_msg_init_data(&payload, (void *)chunk->data, chunk->nbytes, chunk->release, chunk->hint);
  if (tsr_net_send(srv->sock, zmq_msg_data(identity), zmq_msg_size(identity), wb.sbuf.data, wb.sbuf.size,
                   ZMQ_SNDMORE) != 0 ||
      zmq_msg_send(&payload, srv->sock, 0) < 0)
    zmq_msg_close(&payload);
  else
    srv->bytes_served += chunk->nbytes;
  tsr_wbuf_free(&wb);
}

/* Handles one request message; returns 0 when served, <0 when malformed. */
static int serve_one(tsr_xfer_server *srv, tsr_frames *frames, tsr_xfer_lookup_fn lookup, void *arg)
{
  tsr_errbuf err = {{0}};
  char key[TSR_MAX_KEY_LEN + 1] = "";
  if (frames->count != 2 || frames->truncated) {
    if (frames->count >= 1) send_error(srv, &frames->part[0], "", TSR_EPROTO, "request must be one frame");
    return TSR_EPROTO;
  }
  tsr_reader rd;
  const msgpack_object *map;
  char op[TSR_MAX_NAME_LEN + 1];
  int rc = tsr_reader_init(&rd, tsr_frame_data(frames, 1), tsr_frame_size(frames, 1), &err);
  if (rc == 0) rc = tsr_reader_next(&rd, &map, op, &err);
  if (rc == 1 && strcmp(op, "get") != 0) rc = tsr_fail(&err, TSR_EPROTO, "unknown data-plane op '%s'", op);
  else if (rc == 1) rc = tsr_wire_strcpy(map, "key", key, sizeof key, &err);
  tsr_reader_done(&rd);
  if (rc != 0) {
    send_error(srv, &frames->part[0], key, TSR_EPROTO, rc == 0 ? "empty request" : err.text);
    return TSR_EPROTO;
  }
  tsr_xfer_chunk chunk;
  if (lookup(arg, key, &chunk) != 0) {
    send_error(srv, &frames->part[0], key, TSR_ENOTFOUND, "no such chunk on this worker");
    return 0;
  }
  send_chunk(srv, &frames->part[0], key, &chunk);
  return 0;
}

int tsr_xfer_server_serve(tsr_xfer_server *srv, tsr_xfer_lookup_fn lookup, void *arg)
{
  int served = 0;
  tsr_frames frames;
  while (tsr_frames_recv(srv->sock, &frames, ZMQ_DONTWAIT) >= 0) {
    serve_one(srv, &frames, lookup, arg);
    tsr_frames_close(&frames);
    served++;
  }
  return served;
}
