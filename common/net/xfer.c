/* The data plane behind tsr_xfer_*: the ZeroMQ transport, and the choice
 * of transport per peer (the UCX one is in xfer_ucx*.c; docs/transport.md).
 *
 * ZeroMQ: a worker binds one ROUTER ("data socket"); a peer or client
 * connects a DEALER per worker and sends {"op":"get","key":K}. The reply
 * is [chunk header][bytes] or [{"op":"error",...}]. The bytes go out with
 * zmq_msg_init_data, so the store's buffer is sent without a copy; the
 * store's reference is dropped in ZeroMQ's free callback.
 *
 * A conn holds either a DEALER or a UCX conn, picked from the peer's
 * address (xfer_int.h) and this process's preference; a server holds a
 * ROUTER, a UCX listener, or both (--transport auto). */
#include "net.h"

#include "curve.h"
#include "ucx.h"
#include "xfer_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tsr_xfer_conn {
  void *sock;             /* ZeroMQ DEALER, or NULL */
  tsr_ucx_conn *ucx;      /* or UCX */
  char address[TSR_MAX_ADDR_LEN];
};

struct tsr_xfer_server {
  void *sock;             /* ZeroMQ ROUTER, or NULL (--transport ucx) */
  tsr_ucx_server *ucx;    /* UCX listener, or NULL */
  char address[TSR_MAX_ADDR_LEN];
  uint64_t bytes_served;
};

/* The process's fetch preference (tsr_xfer_set_fetch_transport). */
static volatile int fetch_prefer = TSR_TRANSPORT_AUTO;

int tsr_transport_parse(const char *text, tsr_transport *transport_p, tsr_errbuf *err)
{
  static const char *const names[] = {"auto", "zmq", "ucx"};
  for (int i = 0; i < 3; i++)
    if (strcmp(text, names[i]) == 0) {
      *transport_p = (tsr_transport)i;
      return 0;
    }
  return tsr_fail(err, TSR_EINVAL, "transport '%s' is not one of ucx, zmq, auto", text);
}

const char *tsr_transport_name(tsr_transport transport)
{
  return transport == TSR_TRANSPORT_ZMQ ? "zmq" : transport == TSR_TRANSPORT_UCX ? "ucx" : "auto";
}

bool tsr_xfer_ucx_built(void) { return tsr_ucx_built(); }
void tsr_xfer_set_fetch_transport(tsr_transport prefer) { fetch_prefer = (int)prefer; }
tsr_transport tsr_xfer_fetch_transport(void) { return (tsr_transport)fetch_prefer; }

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

/* A DEALER to the ZeroMQ alternative (its CURVE tag included). */
static int open_zmq(void *zctx, const char *address, const tsr_curve *curve, tsr_xfer_conn *conn, tsr_errbuf *err)
{
  char endpoint[TSR_MAX_ADDR_LEN], server_key[TSR_CURVE_KEY_LEN + 1];
  tsr_curve_split_address(address, endpoint, sizeof endpoint, server_key);
  conn->sock = zmq_socket(zctx, ZMQ_DEALER);
  if (conn->sock == NULL) return tsr_fail(err, TSR_ECONN, "zmq_socket: %s", zmq_strerror(zmq_errno()));
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
    conn->sock = NULL;
  }
  return rc;
}

int tsr_xfer_open_curve(void *zctx, const char *address, const tsr_curve *curve, tsr_xfer_conn **conn_p,
                        tsr_errbuf *err)
{
  char endpoint[TSR_MAX_ADDR_LEN];
  bool ucx = false;
  int rc = tsr_xfer_pick(address, tsr_xfer_fetch_transport(), tsr_ucx_built(), endpoint, sizeof endpoint, &ucx, err);
  if (rc != 0) return rc;
  tsr_xfer_conn *conn = calloc(1, sizeof *conn);
  if (conn == NULL) return TSR_ENOMEM;
  rc = ucx ? tsr_ucx_conn_open(endpoint, &conn->ucx, err) : open_zmq(zctx, endpoint, curve, conn, err);
  if (rc != 0) {
    free(conn);
    return rc;
  }
  /* the whole address: callers match it against the scheduler's word */
  snprintf(conn->address, sizeof conn->address, "%s", address);
  *conn_p = conn;
  return 0;
}

void tsr_xfer_close(tsr_xfer_conn **conn_p)
{
  if (conn_p == NULL || *conn_p == NULL) return;
  if ((*conn_p)->sock != NULL) zmq_close((*conn_p)->sock);
  tsr_ucx_conn_close(&(*conn_p)->ucx);
  free(*conn_p);
  *conn_p = NULL;
}

const char *tsr_xfer_address(const tsr_xfer_conn *conn) { return conn->address; }

bool tsr_xfer_device_capable(void)
{
  const char *env = getenv("TESSERA_DEVICE_TRANSFER");
  if (env != NULL && strcmp(env, "0") == 0) return false;
  return tsr_ucx_built() && tsr_ucx_cuda_capable();
}

int tsr_xfer_ready(tsr_xfer_conn *conn, int timeout_ms, tsr_errbuf *err)
{
  return conn->ucx != NULL ? tsr_ucx_conn_ready(conn->ucx, conn->address, timeout_ms, err) : 0;
}

bool tsr_xfer_is_direct(const tsr_xfer_conn *conn) { return conn->ucx != NULL && tsr_ucx_conn_direct(conn->ucx); }
bool tsr_xfer_is_direct_local(const tsr_xfer_conn *conn)
{
  return conn->ucx != NULL && tsr_ucx_conn_direct_local(conn->ucx);
}

bool tsr_xfer_fetches_over_ucx(const char *address)
{
  char endpoint[TSR_MAX_ADDR_LEN];
  bool ucx = false;
  tsr_errbuf err = {{0}};
  return tsr_xfer_pick(address, tsr_xfer_fetch_transport(), tsr_ucx_built(), endpoint, sizeof endpoint, &ucx, &err) == 0 &&
         ucx;
}

void tsr_xfer_data_release(tsr_xfer_data *data)
{
  if (data->on_device && data->data != NULL) data->sink->free(data->sink->arg, data->data, data->nbytes);
  data->on_device = false;
  if (data->owner != NULL) {
    zmq_msg_close(data->owner);
    free(data->owner);
  }
  tsr_ucx_buf_put(data->pooled);
  free(data->copy);
  data->owner = NULL;
  data->copy = NULL;
  data->pooled = NULL;
  data->data = NULL;
  data->nbytes = 0;
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

static int get_zmq(tsr_xfer_conn *conn, const char *key, int timeout_ms, tsr_xfer_abort_fn abort, void *ctx,
                   tsr_chunk_header *hdr, tsr_xfer_data *out, tsr_errbuf *err)
{
  int connect_ms = timeout_ms >= 0 && timeout_ms < TSR_XFER_CONNECT_MS ? timeout_ms : TSR_XFER_CONNECT_MS;
  zmq_pollitem_t out_item = {conn->sock, 0, ZMQ_POLLOUT, 0};
  if (zmq_poll(&out_item, 1, connect_ms) <= 0)
    return tsr_fail(err, TSR_ECONN, "fetch of '%s': cannot reach %s within %d ms", key, conn->address, connect_ms);
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_xfer_pack_get(&wb, key);
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
  int rc = frames.count >= 1 ? tsr_xfer_decode_reply(tsr_frame_data(&frames, 0), tsr_frame_size(&frames, 0), key,
                                                     hdr, err)
                              : TSR_EPROTO;
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

int tsr_xfer_get_abortable(tsr_xfer_conn *conn, const char *key, int timeout_ms, tsr_xfer_abort_fn abort,
                           void *ctx, tsr_chunk_header *hdr, tsr_xfer_data *out, tsr_errbuf *err)
{
  if (conn->ucx != NULL)
    return tsr_ucx_get(conn->ucx, conn->address, key, timeout_ms, abort, ctx, hdr, out, err);
  return get_zmq(conn, key, timeout_ms, abort, ctx, hdr, out, err);
}

int tsr_xfer_server_open(void *zctx, const char *endpoint, const char *advertise_host, tsr_xfer_server **srv_p,
                         tsr_errbuf *err)
{
  return tsr_xfer_server_open_curve(zctx, endpoint, advertise_host, NULL, srv_p, err);
}

int tsr_xfer_server_open_curve(void *zctx, const char *endpoint, const char *advertise_host, const tsr_curve *curve,
                               tsr_xfer_server **srv_p, tsr_errbuf *err)
{
  return tsr_xfer_server_open_transport(zctx, endpoint, advertise_host, curve, TSR_TRANSPORT_ZMQ, srv_p, err);
}

/* Binds the ROUTER (a CURVE server when curve is on); its address to bound. */
static int open_router(void *zctx, const char *endpoint, const char *advertise_host, const tsr_curve *curve,
                       tsr_xfer_server *srv, char *bound, size_t cap, tsr_errbuf *err)
{
  srv->sock = zmq_socket(zctx, ZMQ_ROUTER);
  if (srv->sock == NULL) return tsr_fail(err, TSR_ECONN, "zmq_socket: %s", zmq_strerror(zmq_errno()));
  tsr_net_socket_defaults(srv->sock);
  int rc = curve != NULL && curve->on ? tsr_curve_server(srv->sock, curve, "tessera-data", err) : 0;
  if (rc == 0) rc = tsr_net_bind(srv->sock, endpoint, advertise_host, bound, cap, err);
  return rc;
}

/* The UCX listener on the endpoint's host: on its port when UCX is the
 * only transport, else on a port of its own (the ROUTER has that one). */
static int open_listener(const char *endpoint, const char *advertise_host, bool own_port, tsr_xfer_server *srv,
                         char *bound, size_t cap, tsr_errbuf *err)
{
  char host[TSR_MAX_ADDR_LEN];
  const char *start = strstr(endpoint, "://");
  start = start != NULL ? start + 3 : endpoint;
  const char *colon = strrchr(start, ':');
  size_t len = colon != NULL ? (size_t)(colon - start) : strlen(start);
  if (strncmp(endpoint, "tcp://", 6) != 0 || len == 0 || len >= sizeof host)
    return tsr_fail(err, TSR_EINVAL, "the UCX listener needs a tcp://HOST:PORT data endpoint, not '%s'", endpoint);
  if (memchr(start, '[', len) != NULL)
    return tsr_fail(err, TSR_EINVAL, "the UCX listener takes IPv4 hosts only, not '%s' (docs/transport.md)", endpoint);
  memcpy(host, start, len);
  host[len] = '\0';
  int port = own_port && colon != NULL ? atoi(colon + 1) : 0;   /* "*" is 0: any */
  return tsr_ucx_server_open(host, port, advertise_host, &srv->ucx, bound, cap, err);
}

/* Opens the UCX listener where the transport asks for one. */
static int open_ucx_part(const char *endpoint, const char *advertise_host, tsr_transport transport, bool curve_on,
                         tsr_xfer_server *srv, char *bound, size_t cap, tsr_errbuf *err)
{
  if (transport == TSR_TRANSPORT_ZMQ || curve_on) return 0;   /* auto under CURVE: ZeroMQ only */
  tsr_errbuf uerr = {{0}};
  int rc = open_listener(endpoint, advertise_host, transport == TSR_TRANSPORT_UCX, srv, bound, cap, &uerr);
  if (rc == 0) return 0;
  if (transport == TSR_TRANSPORT_UCX) return tsr_fail(err, rc, "%s", uerr.text);
  TSR_WARN("serving chunks over ZeroMQ only: no UCX listener (%s)", uerr.text);
  bound[0] = '\0';
  return 0;
}

int tsr_xfer_server_open_transport(void *zctx, const char *endpoint, const char *advertise_host,
                                   const tsr_curve *curve, tsr_transport transport, tsr_xfer_server **srv_p,
                                   tsr_errbuf *err)
{
  bool curve_on = curve != NULL && curve->on;
  if (transport == TSR_TRANSPORT_UCX && curve_on)
    return tsr_fail(err, TSR_EINVAL,
                    "--transport ucx cannot be used with CURVE keys: UCX has no CURVE, so its data plane would admit "
                    "any peer (use auto or zmq; docs/security.md)");
  tsr_xfer_server *srv = calloc(1, sizeof *srv);
  if (srv == NULL) return TSR_ENOMEM;
  char zaddr[TSR_MAX_ADDR_LEN] = "", uaddr[TSR_MAX_ADDR_LEN] = "";
  int rc = transport != TSR_TRANSPORT_UCX ? open_router(zctx, endpoint, advertise_host, curve, srv, zaddr, sizeof zaddr, err) : 0;
  if (rc == 0) rc = open_ucx_part(endpoint, advertise_host, transport, curve_on, srv, uaddr, sizeof uaddr, err);
  /* most preferred first: a fetcher that speaks UCX takes it */
  if (rc == 0 && snprintf(srv->address, sizeof srv->address, "%s%s%s", uaddr, uaddr[0] && zaddr[0] ? "," : "",
                          zaddr) >= (int)sizeof srv->address)
    rc = tsr_fail(err, TSR_ECONN, "data addresses %s and %s are too long together", uaddr, zaddr);
  if (rc != 0) {
    tsr_xfer_server_close(&srv);
    return rc;
  }
  *srv_p = srv;
  return 0;
}

void tsr_xfer_server_close(tsr_xfer_server **srv_p)
{
  if (srv_p == NULL || *srv_p == NULL) return;
  if ((*srv_p)->sock != NULL) zmq_close((*srv_p)->sock);
  tsr_ucx_server_close(&(*srv_p)->ucx);
  free(*srv_p);
  *srv_p = NULL;
}

const char *tsr_xfer_server_address(const tsr_xfer_server *srv) { return srv->address; }
void *tsr_xfer_server_socket(tsr_xfer_server *srv) { return srv->sock; }
uint64_t tsr_xfer_server_bytes(const tsr_xfer_server *srv) { return srv->bytes_served; }
bool tsr_xfer_server_has_ucx(const tsr_xfer_server *srv) { return srv->ucx != NULL; }

int tsr_xfer_server_pollitems(tsr_xfer_server *srv, zmq_pollitem_t *items, int cap)
{
  int n = 0;
  if (srv->sock != NULL && n < cap) items[n++] = (zmq_pollitem_t){srv->sock, 0, ZMQ_POLLIN, 0};
  if (srv->ucx != NULL && n < cap) items[n++] = (zmq_pollitem_t){NULL, tsr_ucx_server_fd(srv->ucx), ZMQ_POLLIN, 0};
  return n;
}

static void send_error(tsr_xfer_server *srv, zmq_msg_t *identity, const char *key, int code, const char *message)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_xfer_pack_error(&wb, key, code, message);
  tsr_net_send(srv->sock, zmq_msg_data(identity), zmq_msg_size(identity), wb.sbuf.data, wb.sbuf.size, 0);
  tsr_wbuf_free(&wb);
}

static void send_chunk(tsr_xfer_server *srv, zmq_msg_t *identity, const char *key, tsr_xfer_chunk *chunk)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_xfer_pack_chunk(&wb, key, chunk);
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
  if (tsr_xfer_decode_get(tsr_frame_data(frames, 1), tsr_frame_size(frames, 1), key, sizeof key, &err) != 0) {
    send_error(srv, &frames->part[0], key, TSR_EPROTO, err.text);
    return TSR_EPROTO;
  }
  tsr_xfer_chunk chunk = {.device_ok = false};   /* ZeroMQ sends host memory only */
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
  while (srv->sock != NULL && tsr_frames_recv(srv->sock, &frames, ZMQ_DONTWAIT) >= 0) {
    serve_one(srv, &frames, lookup, arg);
    tsr_frames_close(&frames);
    served++;
  }
  if (srv->ucx != NULL) served += tsr_ucx_server_serve(srv->ucx, lookup, arg, &srv->bytes_served);
  return served;
}
