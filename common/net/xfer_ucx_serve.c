/* The UCX data plane, serving side: a ucp_listener on a TCP port accepts
 * fetchers' endpoints; their get AMs are queued by the AM callback (no
 * sending from inside UCX's progress) and answered by
 * tsr_ucx_server_serve on the worker's main thread, which looks the chunk
 * up and sends it as the reply AM straight from the store's buffer. The
 * store's reference is dropped in the send's completion callback (also
 * on the serving thread: UCX completes requests inside progress).
 *
 * Invariants: an endpoint is closed only in close_failed (serve) or at
 * close, and every queued request naming it is dropped with it, so no
 * request outlives its endpoint. */
#define _GNU_SOURCE
#include "ucx_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "xfer_int.h"

typedef struct ucx_peer {
  ucp_ep_h ep;
  bool failed;
} ucx_peer;

typedef struct ucx_request {
  struct ucx_request *next;
  ucp_ep_h ep;
  bool hello;             /* a hello (ucx.h), not a get */
  size_t len;
  char bytes[];
} ucx_request;

/* One reply in flight: its header bytes and the chunk's release. */
typedef struct ucx_send {
  tsr_ucx_server *srv;
  void (*release)(void *data, void *hint);
  void *data;
  void *hint;
  char header[];
} ucx_send;

#define SPIN_MIN_CORES 8
#define SPIN_DEFAULT_US 100

struct tsr_ucx_server {
  ucp_worker_h worker;        /* of the ALL context: the listener's */
  ucp_listener_h listener;
  ucp_worker_h local;         /* of the LOCAL context (no tcp): direct endpoints', or NULL */
  int efd;                    /* worker's wakeup fd, or an epoll set of both workers' */
  int worker_efd;
  ucx_peer *peers;
  size_t npeers, cap;
  ucx_request *head, *tail;
  unsigned sending;           /* replies UCX has not completed */
  bool device_ok;             /* UCX here moves CUDA memory: lookups may hand device chunks */
  ucp_address_t *address;     /* local's (else worker's), for hellos; NULL if UCX would not give it */
  size_t address_len;
};

/* The worker direct endpoints reach: the one whose address hellos give. */
static ucp_worker_h direct_worker(const tsr_ucx_server *srv) { return srv->local != NULL ? srv->local : srv->worker; }

static void on_peer_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
  (void)status;
  tsr_ucx_server *srv = arg;
  for (size_t i = 0; i < srv->npeers; i++)
    if (srv->peers[i].ep == ep) srv->peers[i].failed = true;
}

static void on_connect(ucp_conn_request_h request, void *arg)
{
  tsr_ucx_server *srv = arg;
  if (srv->npeers == srv->cap) {
    size_t cap = srv->cap ? srv->cap * 2 : 16;
    ucx_peer *grown = realloc(srv->peers, cap * sizeof *grown);
    if (grown == NULL) {
      ucp_listener_reject(srv->listener, request);
      return;
    }
    srv->peers = grown;
    srv->cap = cap;
  }
  ucp_ep_params_t p = {
    .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
    .conn_request = request,
    .err_mode = UCP_ERR_HANDLING_MODE_PEER,
    .err_handler = {.cb = on_peer_error, .arg = srv},
  };
  ucp_ep_h ep;
  if (ucp_ep_create(srv->worker, &p, &ep) != UCS_OK) return;
  srv->peers[srv->npeers++] = (ucx_peer){ep, false};
}

/* Queues a get or a hello for the serving loop. */
static ucs_status_t queue_request(tsr_ucx_server *srv, bool hello, const void *header, size_t header_len,
                                  const ucp_am_recv_param_t *param)
{
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) || header_len > TSR_UCX_MAX_HEADER) return UCS_OK;
  ucx_request *req = malloc(sizeof *req + header_len);
  if (req == NULL) return UCS_OK;   /* the fetcher times out and retries elsewhere */
  req->next = NULL;
  req->hello = hello;
  req->ep = param->reply_ep;
  req->len = header_len;
  memcpy(req->bytes, header, header_len);
  if (srv->tail != NULL) srv->tail->next = req;
  else srv->head = req;
  srv->tail = req;
  return UCS_OK;
}

static ucs_status_t on_get(void *arg, const void *header, size_t header_len, void *data, size_t len,
                           const ucp_am_recv_param_t *param)
{
  (void)data, (void)len;
  return queue_request(arg, false, header, header_len, param);
}

static ucs_status_t on_hello(void *arg, const void *header, size_t header_len, void *data, size_t len,
                             const ucp_am_recv_param_t *param)
{
  (void)data, (void)len;
  return queue_request(arg, true, header, header_len, param);
}

static int listen_on(tsr_ucx_server *srv, const char *host, int port, tsr_errbuf *err)
{
  struct sockaddr_storage sa;
  socklen_t sa_len;
  int rc = tsr_ucx_sockaddr(host, port, &sa, &sa_len, err);
  if (rc != 0) return rc;
  ucp_listener_params_t p = {
    .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
    .sockaddr = {.addr = (const struct sockaddr *)&sa, .addrlen = sa_len},
    .conn_handler = {.cb = on_connect, .arg = srv},
  };
  ucs_status_t st = ucp_listener_create(srv->worker, &p, &srv->listener);
  if (st != UCS_OK) return tsr_fail(err, TSR_ECONN, "UCX listener on %s:%d: %s", host, port, ucs_status_string(st));
  rc = tsr_ucx_set_am_handler(srv->worker, TSR_UCX_AM_GET, on_get, srv, err);
  return rc == 0 ? tsr_ucx_set_am_handler(srv->worker, TSR_UCX_AM_HELLO, on_hello, srv, err) : rc;
}

/* A worker of the LOCAL context for fetchers of this host (their direct
 * endpoints: ucx.h), its fd joined with the listener worker's in one
 * epoll set. Without it (UCX_TLS allows only tcp, or UCX refuses) they
 * reach the listener's worker, as before. */
static void open_local_worker(tsr_ucx_server *srv)
{
  ucp_context_h ctx;
  tsr_errbuf err = {{0}};
  int local_efd = -1;
  if (tsr_ucx_context_take(TSR_UCX_LOCAL, &ctx, &err) != 0) return;
  if (tsr_ucx_worker_new(ctx, UCS_THREAD_MODE_SINGLE, &srv->local, &local_efd, &err) != 0) {
    srv->local = NULL;
    tsr_ucx_context_drop(TSR_UCX_LOCAL);
    return;
  }
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event one = {.events = EPOLLIN}, other = {.events = EPOLLIN};
  if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, srv->worker_efd, &one) != 0 ||
      epoll_ctl(epfd, EPOLL_CTL_ADD, local_efd, &other) != 0 ||
      tsr_ucx_set_am_handler(srv->local, TSR_UCX_AM_GET, on_get, srv, &err) != 0) {
    if (epfd >= 0) close(epfd);
    ucp_worker_destroy(srv->local);
    srv->local = NULL;
    tsr_ucx_context_drop(TSR_UCX_LOCAL);
    return;
  }
  srv->efd = epfd;
  ucp_worker_arm(srv->local);
}

/* The port the listener got (port 0 asked for any). */
static int bound_port(tsr_ucx_server *srv, int *port_p, tsr_errbuf *err)
{
  ucp_listener_attr_t attr = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
  ucs_status_t st = ucp_listener_query(srv->listener, &attr);
  if (st != UCS_OK) return tsr_fail(err, TSR_ECONN, "UCX listener query: %s", ucs_status_string(st));
  const struct sockaddr *sa = (const struct sockaddr *)&attr.sockaddr;
  *port_p = sa->sa_family == AF_INET6 ? ntohs(((const struct sockaddr_in6 *)sa)->sin6_port)
                                      : ntohs(((const struct sockaddr_in *)sa)->sin_port);
  return 0;
}

int tsr_ucx_server_open(const char *host, int port, const char *advertise_host, tsr_ucx_server **srv_p,
                        char *address, size_t cap, tsr_errbuf *err)
{
  tsr_ucx_server *srv = calloc(1, sizeof *srv);
  if (srv == NULL) return TSR_ENOMEM;
  ucp_context_h ctx;
  int rc = tsr_ucx_context_take(TSR_UCX_ALL, &ctx, err);
  if (rc != 0) {
    free(srv);
    return rc;
  }
  rc = tsr_ucx_worker_new(ctx, UCS_THREAD_MODE_SINGLE, &srv->worker, &srv->worker_efd, err);
  if (rc != 0) {
    tsr_ucx_context_drop(TSR_UCX_ALL);
    free(srv);
    return rc;
  }
  srv->efd = srv->worker_efd;
  rc = listen_on(srv, host, port, err);
  if (rc == 0) rc = bound_port(srv, &port, err);
  bool wildcard = strcmp(host, "*") == 0 || strcmp(host, "0.0.0.0") == 0;
  const char *shown = wildcard && advertise_host != NULL && advertise_host[0] ? advertise_host : host;
  if (rc == 0 && snprintf(address, cap, "%s%s:%d", TSR_UCX_SCHEME, shown, port) >= (int)cap)
    rc = tsr_fail(err, TSR_ECONN, "UCX address of %s is too long", shown);
  if (rc != 0) {
    tsr_ucx_server_close(&srv);
    return rc;
  }
  ucp_worker_arm(srv->worker);   /* BUSY is fine: the first serve progresses */
  srv->device_ok = tsr_xfer_device_capable();
  open_local_worker(srv);
  if (ucp_worker_get_address(direct_worker(srv), &srv->address, &srv->address_len) != UCS_OK) srv->address = NULL;
  *srv_p = srv;
  return 0;
}

/* Drops the queued requests of ep (all when ep is NULL). */
static void drop_requests(tsr_ucx_server *srv, ucp_ep_h ep)
{
  ucx_request **link = &srv->head;
  srv->tail = NULL;
  while (*link != NULL) {
    ucx_request *req = *link;
    if (ep == NULL || req->ep == ep) {
      *link = req->next;
      free(req);
    } else {
      srv->tail = req;
      link = &req->next;
    }
  }
}

void tsr_ucx_server_close(tsr_ucx_server **srv_p)
{
  if (srv_p == NULL || *srv_p == NULL) return;
  tsr_ucx_server *srv = *srv_p;
  if (srv->listener != NULL) ucp_listener_destroy(srv->listener);
  srv->listener = NULL;
  /* Closing an endpoint progresses the worker, which may accept or fail
   * another: take the last one each time. */
  while (srv->npeers > 0) {
    ucp_ep_h ep = srv->peers[--srv->npeers].ep;
    tsr_ucx_ep_close(srv->worker, ep);
  }
  drop_requests(srv, NULL);
  if (srv->address != NULL) ucp_worker_release_address(direct_worker(srv), srv->address);
  if (srv->local != NULL) {
    close(srv->efd);
    ucp_worker_destroy(srv->local);
    tsr_ucx_context_drop(TSR_UCX_LOCAL);
  }
  ucp_worker_destroy(srv->worker);
  tsr_ucx_context_drop(TSR_UCX_ALL);
  free(srv->peers);
  free(srv);
  *srv_p = NULL;
}

int tsr_ucx_server_fd(const tsr_ucx_server *srv) { return srv->efd; }

static void send_finish(ucx_send *s)
{
  if (s->release != NULL) s->release(s->data, s->hint);
  free(s);
}

static void on_sent(void *request, ucs_status_t status, void *user_data)
{
  (void)status;   /* a failed send: the fetcher sees its endpoint fail */
  ucx_send *s = user_data;
  s->srv->sending--;
  send_finish(s);
  ucp_request_free(request);
}

/* Sends header + bytes as the reply AM; the release runs when UCX is done
 * with the bytes (now, on an error, or in on_sent). */
static void send_reply(tsr_ucx_server *srv, ucp_ep_h ep, const tsr_wbuf *wb, const tsr_xfer_chunk *chunk)
{
  ucx_send *s = malloc(sizeof *s + wb->sbuf.size);
  if (s == NULL) {
    if (chunk != NULL && chunk->release != NULL) chunk->release((void *)chunk->data, chunk->hint);
    return;
  }
  *s = (ucx_send){srv, chunk ? chunk->release : NULL, chunk ? (void *)chunk->data : NULL, chunk ? chunk->hint : NULL};
  memcpy(s->header, wb->sbuf.data, wb->sbuf.size);
  ucp_request_param_t p = {
    .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE,
    .cb.send = on_sent,
    .user_data = s,
    /* a device chunk goes from device memory: cuda_ipc to a GPU peer of
     * this host, UCX's own cuda_copy staging to any other */
    .memory_type = chunk != NULL && chunk->on_device ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST,
  };
  ucs_status_ptr_t req = ucp_am_send_nbx(ep, TSR_UCX_AM_REPLY, s->header, wb->sbuf.size, chunk ? chunk->data : NULL,
                                         chunk ? chunk->nbytes : 0, &p);
  if (req == NULL || UCS_PTR_IS_ERR(req)) send_finish(s);
  else srv->sending++;
}

static void answer_error(tsr_ucx_server *srv, ucp_ep_h ep, const char *key, int code, const char *message)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_xfer_pack_error(&wb, key, code, message);
  send_reply(srv, ep, &wb, NULL);
  tsr_wbuf_free(&wb);
}

static bool peer_failed(const tsr_ucx_server *srv, ucp_ep_h ep)
{
  for (size_t i = 0; i < srv->npeers; i++)
    if (srv->peers[i].ep == ep) return srv->peers[i].failed;
  return false;
}

/* Answers a hello: this host's identity, and the worker's address for a
 * fetcher on the same host to connect to directly (ucx.h). */
static void answer_hello(tsr_ucx_server *srv, ucp_ep_h ep)
{
  const char *id = tsr_ucx_host_identity();
  size_t len = strlen(id);
  ucx_send *s = srv->address != NULL ? malloc(sizeof *s + len) : NULL;
  if (s == NULL) return;   /* the fetcher keeps the listener's endpoint */
  *s = (ucx_send){srv, NULL, NULL, NULL};
  memcpy(s->header, id, len);
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                           .cb.send = on_sent,
                           .user_data = s};
  ucs_status_ptr_t req = ucp_am_send_nbx(ep, TSR_UCX_AM_REPLY, s->header, len, srv->address, srv->address_len, &p);
  if (req == NULL || UCS_PTR_IS_ERR(req)) send_finish(s);
  else srv->sending++;
}

/* Answers one request; adds the bytes handed to UCX. */
static void answer(tsr_ucx_server *srv, ucx_request *req, tsr_xfer_lookup_fn lookup, void *arg, uint64_t *bytes)
{
  tsr_errbuf err = {{0}};
  char key[TSR_MAX_KEY_LEN + 1] = "";
  if (peer_failed(srv, req->ep)) return;
  if (req->hello) {
    answer_hello(srv, req->ep);
    return;
  }
  if (tsr_xfer_decode_get(req->bytes, req->len, key, sizeof key, &err) != 0) {
    answer_error(srv, req->ep, key, TSR_EPROTO, err.text);
    return;
  }
  tsr_xfer_chunk chunk = {.device_ok = srv->device_ok};
  if (lookup(arg, key, &chunk) != 0) {
    answer_error(srv, req->ep, key, TSR_ENOTFOUND, "no such chunk on this worker");
    return;
  }
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_xfer_pack_chunk(&wb, key, &chunk);
  *bytes += chunk.nbytes;
  send_reply(srv, req->ep, &wb, &chunk);
  tsr_wbuf_free(&wb);
}

static int answer_all(tsr_ucx_server *srv, tsr_xfer_lookup_fn lookup, void *arg, uint64_t *bytes)
{
  int answered = 0;
  while (srv->head != NULL) {
    ucx_request *req = srv->head;
    srv->head = req->next;
    if (srv->head == NULL) srv->tail = NULL;
    answer(srv, req, lookup, arg, bytes);
    free(req);
    answered++;
  }
  return answered;
}

static void close_failed(tsr_ucx_server *srv)
{
  for (size_t i = 0; i < srv->npeers;) {
    if (!srv->peers[i].failed) {
      i++;
      continue;
    }
    ucp_ep_h ep = srv->peers[i].ep;
    srv->peers[i] = srv->peers[--srv->npeers];
    drop_requests(srv, ep);
    tsr_ucx_ep_close(srv->worker, ep);
    drop_requests(srv, ep);   /* any that arrived while it closed */
  }
}

/* While replies are in flight, progress busily for up to this long per
 * serve: a rendezvous reply takes several protocol steps, and a tcp send
 * moves its bytes only inside progress, so waking up through the fd for
 * each step made mid-size chunks (16 KiB .. 4 MiB) several times slower.
 * Bounded, so a fetcher that stops reading cannot hold the main loop. */
#define PUSH_NS 2000000u

/* One progress of each worker: what was done. */
static unsigned progress_once(tsr_ucx_server *srv)
{
  unsigned done = ucp_worker_progress(srv->worker);
  return srv->local != NULL ? done + ucp_worker_progress(srv->local) : done;
}

static void push_sends(tsr_ucx_server *srv)
{
  uint64_t until = tsr_now_ns() + PUSH_NS;
  while (srv->sending > 0 && srv->head == NULL && tsr_now_ns() < until) progress_once(srv);
}

/* How long the server keeps polling after an answer, for the same peer's
 * next request: a fetcher that asks for chunk after chunk (a task's
 * inputs, a gather) then finds it awake instead of paying a wake-up
 * through the fd (~20 us against UCX's ~1 us over shared memory). Only on
 * machines with cores to spare: on 2 cores the spinning server starved its
 * own fetchers (bench/RESULTS.md, "Chunk transfer"). TESSERA_SERVE_SPIN_US
 * overrides (0: never). */
static uint64_t spin_ns(void)
{
  static _Atomic int64_t cached = -1;
  int64_t ns = atomic_load(&cached);
  if (ns >= 0) return (uint64_t)ns;
  const char *env = getenv("TESSERA_SERVE_SPIN_US");
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  ns = env != NULL ? strtoll(env, NULL, 10) * 1000 : cores >= SPIN_MIN_CORES ? SPIN_DEFAULT_US * 1000 : 0;
  if (ns < 0) ns = 0;
  atomic_store(&cached, ns);
  return (uint64_t)ns;
}

/* Polls until a request arrives or the spin ends: true when one did. */
static bool spin_for_request(tsr_ucx_server *srv)
{
  uint64_t until = tsr_now_ns() + spin_ns();
  ucp_worker_h fast = direct_worker(srv);
  for (unsigned round = 1; srv->head == NULL && tsr_now_ns() < until; round++) {
    ucp_worker_progress(fast);
    if (fast != srv->worker && round % TSR_UCX_LISTENER_PROGRESS_EVERY == 0) ucp_worker_progress(srv->worker);
  }
  return srv->head != NULL;
}

/* Arms the workers' wakeup fds: false when one has events already. */
static bool arm_workers(tsr_ucx_server *srv)
{
  if (ucp_worker_arm(srv->worker) == UCS_ERR_BUSY) return false;
  return srv->local == NULL || ucp_worker_arm(srv->local) != UCS_ERR_BUSY;
}

int tsr_ucx_server_serve(tsr_ucx_server *srv, tsr_xfer_lookup_fn lookup, void *arg, uint64_t *bytes)
{
  int answered = 0;
  for (;;) {
    /* a request the spin found is answered before the next (tcp) poll */
    if (srv->head == NULL)
      while (progress_once(srv) != 0) {
      }
    int now = answer_all(srv, lookup, arg, bytes);
    answered += now;
    push_sends(srv);
    close_failed(srv);
    if (srv->head != NULL) continue;
    if (now > 0 && spin_ns() > 0 && spin_for_request(srv)) continue;
    if (arm_workers(srv)) return answered;
  }
}
