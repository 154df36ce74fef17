/* The UCX data plane, fetching side, plus what both sides share: the
 * process's UCP context, workers with a wakeup fd, addresses.
 *
 * A conn is one ucp_worker and one client-server endpoint to a worker's
 * listener. A get sends the request as an active message and waits for
 * the reply AM, polling the worker's wakeup fd in slices of
 * TSR_XFER_ABORT_SLICE_MS so that abort() is asked as on the ZeroMQ path.
 * An eager reply's bytes are copied once out of UCX's buffer (they are
 * small); a rendezvous reply is received straight into a buffer of the
 * receive pool (xfer_ucx_pool.c: faulted in and registered once, reused)
 * that becomes the caller's (out->pooled) until tsr_xfer_data_release.
 *
 * Invariant: anything UCX may still write into or read from (the request
 * bytes, a rendezvous buffer whose receive did not complete) stays owned
 * by the conn until tsr_ucx_conn_close has closed the endpoint and
 * destroyed the worker. */
#define _GNU_SOURCE
#include "ucx_int.h"

#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "xfer_int.h"

/* ---------- the process's contexts ---------- */

/* Two contexts, each made on first use and shared by every worker:
 * [TSR_UCX_ALL] the transports UCX_TLS allows but shared memory
 * (listeners, their endpoints, other hosts), [TSR_UCX_LOCAL] UCX_TLS
 * without tcp, for the direct endpoints between processes of one host.
 * Why a second: a worker polls every interface its endpoints use, and
 * tcp's poll is an epoll_wait system call per progress; with the
 * listener's endpoint open beside the direct one, a third of a 1 KiB
 * round trip's CPU went there (perf, both ends). When UCX_TLS leaves no
 * shared memory there is no LOCAL context and ALL keeps UCX_TLS whole. */
typedef struct ucx_context {
  ucp_context_h handle;
  unsigned users;
} ucx_context;

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static ucx_context contexts[2];
/* The ALL context was made without shared memory (scope_tls): its
 * workers cannot reach a server's LOCAL worker. */
static _Atomic bool all_without_shm;

bool tsr_ucx_built(void) { return true; }

/* Shared-memory transports (posix, sysv) grow their receive buffers 512
 * at a time: 4 MiB per transport and ucp_worker, and a fetcher has a
 * worker per peer connection (4.4 MiB a connection, measured; 0.3 MiB
 * with tcp only). 64 at a time (MM_: the table both share) keeps a
 * connection near 1.4 MiB; they still grow on demand. A UCX_*
 * variable for it in the environment wins. */
static void shrink_defaults(ucp_config_t *config, const char *tls)
{
  /* Not when the context's TLS leaves shared memory out ("^sm": the ALL
   * context's): UCX warns at every worker ("invalid configuration") about
   * a setting no transport read. */
  if (tsr_ucx_tls_has_shared_memory(tls) && getenv("UCX_MM_RX_BUFS_GROW") == NULL &&
      getenv("UCX_POSIX_RX_BUFS_GROW") == NULL && getenv("UCX_SYSV_RX_BUFS_GROW") == NULL)
    ucp_config_modify(config, "MM_RX_BUFS_GROW", "64");
}

/* False when TESSERA_UCX_LOCAL=0 (asked at every take: the unit test
 * turns it off with the contexts made). */
static bool local_allowed(void)
{
  const char *off = getenv("TESSERA_UCX_LOCAL");
  return off == NULL || strcmp(off, "0") != 0;
}

/* The context's UCX_TLS into tls: LOCAL's without tcp; ALL's without
 * shared memory while a LOCAL context can be made (ucx.h), else the
 * user's (*tls = '\0'). False when LOCAL has no transport. */
static bool scope_tls(tsr_ucx_scope scope, char *tls, size_t cap)
{
  const char *user = getenv("UCX_TLS");
  tls[0] = '\0';
  if (scope == TSR_UCX_LOCAL) return tsr_ucx_local_tls(user, tls, cap);
  char local[256];
  if (local_allowed() && tsr_ucx_local_tls(user, local, sizeof local) && !tsr_ucx_listener_tls(user, tls, cap))
    tls[0] = '\0';
  return true;
}

static int context_create(tsr_ucx_scope scope, ucp_context_h *ctx_p, tsr_errbuf *err)
{
  char tls[256];
  if (!scope_tls(scope, tls, sizeof tls)) return tsr_fail(err, TSR_ENOTFOUND, "UCX_TLS leaves no transport but tcp");
  ucp_config_t *config = NULL;
  ucs_status_t st = ucp_config_read(NULL, NULL, &config);
  if (st != UCS_OK) return tsr_fail(err, TSR_ECONN, "UCX configuration: %s", ucs_status_string(st));
  shrink_defaults(config, tls[0] != '\0' ? tls : getenv("UCX_TLS"));
  if (tls[0] != '\0') ucp_config_modify(config, "TLS", tls);
  if (scope == TSR_UCX_ALL) atomic_store(&all_without_shm, tls[0] != '\0');
  ucp_params_t params = {
    .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
    .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
    /* executor threads create and use their own workers concurrently */
    .mt_workers_shared = 1,
  };
  st = ucp_init(&params, config, ctx_p);
  ucp_config_release(config);
  if (st != UCS_OK) return tsr_fail(err, TSR_ECONN, "UCX initialization (ucp_init): %s", ucs_status_string(st));
  return 0;
}

/* Asked once: the answer is the loaded transports', fixed for the process. */
static _Atomic int cuda_capable = -1;

bool tsr_ucx_cuda_capable(void)
{
  int known = atomic_load(&cuda_capable);
  if (known >= 0) return known == 1;
  ucp_context_h ctx;
  tsr_errbuf err = {{0}};
  if (tsr_ucx_context_take(TSR_UCX_ALL, &ctx, &err) != 0) return false;
  ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
  bool cuda = ucp_context_query(ctx, &attr) == UCS_OK && (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  tsr_ucx_context_drop(TSR_UCX_ALL);
  atomic_store(&cuda_capable, cuda ? 1 : 0);
  return cuda;
}

int tsr_ucx_context_take(tsr_ucx_scope scope, ucp_context_h *ctx_p, tsr_errbuf *err)
{
  if (scope == TSR_UCX_LOCAL && !local_allowed()) return tsr_fail(err, TSR_ENOTFOUND, "TESSERA_UCX_LOCAL=0");
  int rc = 0;
  ucx_context *c = &contexts[scope];
  pthread_mutex_lock(&ctx_lock);
  if (c->users == 0) rc = context_create(scope, &c->handle, err);
  if (rc == 0) {
    c->users++;
    *ctx_p = c->handle;
  }
  pthread_mutex_unlock(&ctx_lock);
  return rc;
}

void tsr_ucx_context_drop(tsr_ucx_scope scope)
{
  ucx_context *c = &contexts[scope];
  pthread_mutex_lock(&ctx_lock);
  if (c->users > 0 && --c->users == 0) {
    ucp_cleanup(c->handle);
    c->handle = NULL;
  }
  pthread_mutex_unlock(&ctx_lock);
}

int tsr_ucx_worker_new(ucp_context_h ctx, ucs_thread_mode_t mode, ucp_worker_h *worker_p, int *efd_p,
                       tsr_errbuf *err)
{
  ucp_worker_params_t params = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = mode};
  ucs_status_t st = ucp_worker_create(ctx, &params, worker_p);
  if (st != UCS_OK) return tsr_fail(err, TSR_ECONN, "UCX worker: %s", ucs_status_string(st));
  st = ucp_worker_get_efd(*worker_p, efd_p);
  if (st != UCS_OK) {
    ucp_worker_destroy(*worker_p);
    return tsr_fail(err, TSR_ECONN, "UCX worker event fd: %s", ucs_status_string(st));
  }
  return 0;
}

int tsr_ucx_split_hostport(const char *text, char *host, size_t cap, int *port_p, tsr_errbuf *err)
{
  const char *colon = strrchr(text, ':');
  char *end = NULL;
  long port = colon != NULL ? strtol(colon + 1, &end, 10) : -1;
  if (colon == NULL || end == colon + 1 || *end != '\0' || port < 0 || port > 65535)
    return tsr_fail(err, TSR_EINVAL, "'%s' is not HOST:PORT", text);
  const char *start = text;
  size_t len = (size_t)(colon - text);
  if (len >= 2 && text[0] == '[' && colon[-1] == ']') {
    start++;
    len -= 2;
  }
  if (len == 0 || len >= cap) return tsr_fail(err, TSR_EINVAL, "'%s': bad host", text);
  memcpy(host, start, len);
  host[len] = '\0';
  *port_p = (int)port;
  return 0;
}

int tsr_ucx_sockaddr(const char *host, int port, struct sockaddr_storage *sa, socklen_t *len_p, tsr_errbuf *err)
{
  /* IPv4 only: UCX 1.13's tcp connection manager overflows a buffer when
   * it prints an IPv6 peer (inet_ntop in ucp_ep_cm_server_create_connected,
   * found with ASan), and "localhost" must not resolve to ::1 for a
   * listener bound to 127.0.0.1. */
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  bool any = strcmp(host, "*") == 0;
  if (any) hints.ai_flags |= AI_PASSIVE;
  int gai = getaddrinfo(any ? NULL : host, service, &hints, &res);
  if (gai != 0 || res == NULL)
    return tsr_fail(err, TSR_EINVAL, "cannot resolve host '%s': %s", host, gai != 0 ? gai_strerror(gai) : "no address");
  memcpy(sa, res->ai_addr, res->ai_addrlen);
  *len_p = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

#define HELLO_TAG "tsr-host:"

static char host_identity[160];
static pthread_once_t host_identity_once = PTHREAD_ONCE_INIT;

static unsigned long ns_inode(const char *ns)
{
  char path[64];
  struct stat st;
  snprintf(path, sizeof path, "/proc/self/ns/%s", ns);
  return stat(path, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

static void make_host_identity(void)
{
  char boot[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f != NULL) {
    if (fgets(boot, sizeof boot, f) == NULL) boot[0] = '\0';
    fclose(f);
  }
  boot[strcspn(boot, "\n")] = '\0';
  snprintf(host_identity, sizeof host_identity, HELLO_TAG "%s:%lu:%lu:%lu:%lu", boot, ns_inode("net"),
           ns_inode("ipc"), ns_inode("mnt"), ns_inode("pid"));
}

const char *tsr_ucx_host_identity(void)
{
  pthread_once(&host_identity_once, make_host_identity);
  return host_identity;
}

void tsr_ucx_ep_close(ucp_worker_h worker, ucp_ep_h ep)
{
  ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
  if (req == NULL || UCS_PTR_IS_ERR(req)) return;
  uint64_t until = tsr_now_ms() + 1000;
  while (ucp_request_check_status(req) == UCS_INPROGRESS && tsr_now_ms() < until) ucp_worker_progress(worker);
  ucp_request_free(req);
}

/* ---------- fetching ---------- */

struct tsr_ucx_conn {
  ucp_worker_h worker;      /* of the ALL context: the listener's endpoint */
  ucp_ep_h ep;              /* through the server's listener */
  ucp_ep_h direct;          /* from the server's worker address (same host), or NULL */
  ucp_worker_h local;       /* of the LOCAL context: direct's, when it could be made */
  ucp_worker_h reply_worker; /* the one the last reply came on (its descriptors) */
  bool said_hello;          /* the direct endpoint was tried */
  bool hello_pending;       /* the reply awaited is the hello's */
  int efd, local_efd;
  ucs_status_t ep_status;   /* UCS_OK until the endpoint failed */
  char *request;            /* the last get's bytes: UCX may still read them */
  /* the reply of the get in flight */
  bool awaiting, replied;
  char *reply_hdr;          /* malloc'd copy of the reply's header */
  size_t reply_hdr_len;
  void *rndv_desc;          /* a rendezvous reply's data descriptor, not yet received */
  void *eager;              /* an eager reply's bytes, copied (aligned) */
  size_t data_len;
  /* a rendezvous receive in flight */
  void *recv_req;
  ucp_worker_h recv_worker; /* recv_req's */
  tsr_ucx_buf *recv_buf;    /* owned here until the receive completed */
  void *recv_dev;           /* or a device buffer of recv_sink's, the same */
  const tsr_xfer_device_sink *recv_sink;
  size_t recv_dev_len;
  bool recv_done;
  ucs_status_t recv_status;
};

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
  (void)ep;
  tsr_ucx_conn *conn = arg;
  conn->ep_status = status;
}

/* Keeps the reply for tsr_ucx_get; a reply nobody awaits is dropped. */
static ucs_status_t keep_reply(tsr_ucx_conn *conn, ucp_worker_h worker, const void *header, size_t header_len,
                               void *data, size_t len, const ucp_am_recv_param_t *param)
{
  if (!conn->awaiting || conn->replied || header_len > TSR_UCX_MAX_HEADER || len > TSR_MAX_FRAME_BYTES) return UCS_OK;
  /* a hello's answer that came after its wait is not a get's reply */
  bool hello = header_len >= strlen(HELLO_TAG) && memcmp(header, HELLO_TAG, strlen(HELLO_TAG)) == 0;
  if (hello != conn->hello_pending) return UCS_OK;
  conn->reply_hdr = malloc(header_len ? header_len : 1);
  if (conn->reply_hdr == NULL) return UCS_OK;
  memcpy(conn->reply_hdr, header, header_len);
  conn->reply_hdr_len = header_len;
  conn->data_len = len;
  conn->replied = true;
  conn->reply_worker = worker;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    conn->rndv_desc = data;
    return UCS_INPROGRESS;   /* the descriptor lives until ucp_am_recv_data_nbx */
  }
  if (len > 0 && posix_memalign(&conn->eager, 64, len) == 0) memcpy(conn->eager, data, len);
  return UCS_OK;
}

static ucs_status_t on_reply(void *arg, const void *header, size_t header_len, void *data, size_t len,
                             const ucp_am_recv_param_t *param)
{
  tsr_ucx_conn *conn = arg;
  return keep_reply(conn, conn->worker, header, header_len, data, len, param);
}

static ucs_status_t on_local_reply(void *arg, const void *header, size_t header_len, void *data, size_t len,
                                   const ucp_am_recv_param_t *param)
{
  tsr_ucx_conn *conn = arg;
  return keep_reply(conn, conn->local, header, header_len, data, len, param);
}

int tsr_ucx_set_am_handler(ucp_worker_h worker, unsigned id, ucp_am_recv_callback_t cb, void *arg, tsr_errbuf *err)
{
  ucp_am_handler_param_t p = {
    .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                  UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
    .id = id,
    .flags = UCP_AM_FLAG_WHOLE_MSG,
    .cb = cb,
    .arg = arg,
  };
  ucs_status_t st = ucp_worker_set_am_recv_handler(worker, &p);
  return st == UCS_OK ? 0 : tsr_fail(err, TSR_ECONN, "UCX AM handler: %s", ucs_status_string(st));
}

static int connect_ep(tsr_ucx_conn *conn, const char *endpoint, tsr_errbuf *err)
{
  char host[TSR_MAX_ADDR_LEN];
  int port;
  struct sockaddr_storage sa;
  socklen_t sa_len;
  int rc = tsr_ucx_split_hostport(endpoint + strlen(TSR_UCX_SCHEME), host, sizeof host, &port, err);
  if (rc == 0) rc = tsr_ucx_sockaddr(host, port, &sa, &sa_len, err);
  if (rc != 0) return rc;
  ucp_ep_params_t p = {
    .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER,
    .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
    .sockaddr = {.addr = (const struct sockaddr *)&sa, .addrlen = sa_len},
    .err_mode = UCP_ERR_HANDLING_MODE_PEER,
    .err_handler = {.cb = on_ep_error, .arg = conn},
  };
  ucs_status_t st = ucp_ep_create(conn->worker, &p, &conn->ep);
  return st == UCS_OK ? 0 : tsr_fail(err, TSR_ECONN, "UCX connect to %s: %s", endpoint, ucs_status_string(st));
}

int tsr_ucx_conn_open(const char *endpoint, tsr_ucx_conn **conn_p, tsr_errbuf *err)
{
  if (strncmp(endpoint, TSR_UCX_SCHEME, strlen(TSR_UCX_SCHEME)) != 0)
    return tsr_fail(err, TSR_EINVAL, "'%s' is not a ucx:// address", endpoint);
  tsr_ucx_conn *conn = calloc(1, sizeof *conn);
  if (conn == NULL) return TSR_ENOMEM;
  conn->efd = conn->local_efd = -1;
  ucp_context_h ctx;
  int rc = tsr_ucx_context_take(TSR_UCX_ALL, &ctx, err);
  if (rc != 0) {
    free(conn);
    return rc;
  }
  /* one thread at a time, not always the same one (the client's cache) */
  rc = tsr_ucx_worker_new(ctx, UCS_THREAD_MODE_SERIALIZED, &conn->worker, &conn->efd, err);
  if (rc == 0) rc = tsr_ucx_set_am_handler(conn->worker, TSR_UCX_AM_REPLY, on_reply, conn, err);
  if (rc == 0) rc = connect_ep(conn, endpoint, err);
  if (rc != 0) {
    tsr_ucx_conn_close(&conn);
    return rc;
  }
  *conn_p = conn;
  return 0;
}

/* The worker the direct endpoint lives on (and the gets' replies come on). */
static ucp_worker_h direct_worker(const tsr_ucx_conn *conn)
{
  return conn->direct != NULL && conn->local != NULL ? conn->local : conn->worker;
}

static void close_local_worker(tsr_ucx_conn *conn)
{
  ucp_worker_destroy(conn->local);
  conn->local = NULL;
  conn->local_efd = -1;
  tsr_ucx_context_drop(TSR_UCX_LOCAL);
}

/* Gives the receive buffer back, host or device. */
static void drop_recv(tsr_ucx_conn *conn)
{
  tsr_ucx_buf_put(conn->recv_buf);
  conn->recv_buf = NULL;
  if (conn->recv_dev != NULL) conn->recv_sink->free(conn->recv_sink->arg, conn->recv_dev, conn->recv_dev_len);
  conn->recv_dev = NULL;
}

static void forget_reply(tsr_ucx_conn *conn)
{
  if (conn->rndv_desc != NULL) ucp_am_data_release(conn->reply_worker, conn->rndv_desc);
  free(conn->reply_hdr);
  free(conn->eager);
  conn->rndv_desc = conn->reply_hdr = conn->eager = NULL;
  conn->replied = conn->awaiting = false;
  conn->reply_hdr_len = conn->data_len = 0;
}

void tsr_ucx_conn_close(tsr_ucx_conn **conn_p)
{
  if (conn_p == NULL || *conn_p == NULL) return;
  tsr_ucx_conn *conn = *conn_p;
  if (conn->worker != NULL) {
    forget_reply(conn);
    if (conn->recv_req != NULL) ucp_request_cancel(conn->recv_worker, conn->recv_req);
    if (conn->direct != NULL) tsr_ucx_ep_close(direct_worker(conn), conn->direct);
    if (conn->ep != NULL) tsr_ucx_ep_close(conn->worker, conn->ep);
    if (conn->recv_req != NULL) ucp_request_free(conn->recv_req);
    if (conn->local != NULL) close_local_worker(conn);
    ucp_worker_destroy(conn->worker);
    tsr_ucx_context_drop(TSR_UCX_ALL);
  }
  drop_recv(conn);   /* the worker is gone: UCX writes no more */
  free(conn->request);
  free(conn);
  *conn_p = NULL;
}

typedef struct wait_ctx {
  uint64_t deadline;
  tsr_xfer_abort_fn abort;
  void *abort_ctx;
  const char *address;
  uint64_t next_abort_check;
  uint64_t spin_ns;         /* busy progress before sleeping on the wakeup fd */
} wait_ctx;

/* How long a wait polls UCX busily before it sleeps on the wakeup fd: a
 * small chunk's reply comes back within tens of microseconds, and
 * arming + poll + wakeup costs about as much again. */
#define SPIN_NS 200000u
/* A device receive spins longer: cuda_ipc signals its wakeup fd from a
 * CUDA host callback, which comes about a millisecond after the copy ends
 * (measured: 1.0 ms median for 64 MiB that cuda_ipc moves in 40 us). The
 * fetching executor thread has nothing else to do meanwhile. */
#define DEVICE_SPIN_NS 20000000u

/* Progresses the conn's workers until neither has more to do. */
static void progress_all(tsr_ucx_conn *conn)
{
  while (ucp_worker_progress(conn->worker) != 0) {
  }
  if (conn->local != NULL)
    while (ucp_worker_progress(conn->local) != 0) {
    }
}

/* Arms both workers' wakeup fds and sleeps on them for up to slice ms;
 * returns at once when either had events (UCS_ERR_BUSY). */
static void sleep_on_workers(tsr_ucx_conn *conn, int slice)
{
  if (ucp_worker_arm(conn->worker) == UCS_ERR_BUSY) return;
  if (conn->local != NULL && ucp_worker_arm(conn->local) == UCS_ERR_BUSY) return;
  struct pollfd pfd[2] = {{.fd = conn->efd, .events = POLLIN}, {.fd = conn->local_efd, .events = POLLIN}};
  poll(pfd, conn->local != NULL ? 2 : 1, slice);
}

/* Progresses until *flag, the endpoint fails, the deadline or abort:
 * 1 done, 0 timed out, -1 abandoned, -2 endpoint failed. */
static int wait_for(tsr_ucx_conn *conn, const bool *flag, wait_ctx *w)
{
  uint64_t spin_until = tsr_now_ns() + w->spin_ns;
  ucp_worker_h fast = direct_worker(conn);
  for (unsigned round = 1; !*flag && conn->ep_status == UCS_OK && tsr_now_ns() < spin_until; round++) {
    ucp_worker_progress(fast);
    if (fast != conn->worker && round % TSR_UCX_LISTENER_PROGRESS_EVERY == 0) ucp_worker_progress(conn->worker);
  }
  if (*flag) return 1;   /* not one more tcp poll on the way out */
  for (;;) {
    progress_all(conn);
    if (*flag) return 1;
    if (conn->ep_status != UCS_OK) return -2;
    uint64_t now = tsr_now_ms();
    if (now >= w->deadline) return 0;
    if (w->abort != NULL && now >= w->next_abort_check) {
      if (w->abort(w->abort_ctx, w->address)) return -1;
      w->next_abort_check = now + TSR_XFER_ABORT_SLICE_MS;
    }
    uint64_t left = w->deadline - now;
    int slice = left > TSR_XFER_ABORT_SLICE_MS ? TSR_XFER_ABORT_SLICE_MS : (int)left;
    sleep_on_workers(conn, slice);
  }
}

static int wait_fail(tsr_ucx_conn *conn, int waited, const char *what, const char *key, const char *address,
                     tsr_errbuf *err)
{
  if (waited == 0) return tsr_fail(err, TSR_ETIMEDOUT, "fetch of '%s' from %s timed out (%s)", key, address, what);
  if (waited == -1)
    return tsr_fail(err, TSR_ECONN, "fetch of '%s' from %s abandoned: the scheduler declared that worker dead", key,
                    address);
  return tsr_fail(err, TSR_ECONN, "fetch of '%s' from %s: connection lost (%s) %s", key, address,
                  ucs_status_string(conn->ep_status), what);
}

static void on_flushed(void *request, ucs_status_t status, void *user_data)
{
  (void)request;
  tsr_ucx_conn *conn = user_data;
  conn->recv_status = status;
  conn->recv_done = true;
}

static void say_hello(tsr_ucx_conn *conn, const wait_ctx *w);

bool tsr_ucx_conn_direct(const tsr_ucx_conn *conn) { return conn->direct != NULL; }
bool tsr_ucx_conn_direct_local(const tsr_ucx_conn *conn) { return conn->direct != NULL && conn->local != NULL; }

int tsr_ucx_conn_ready(tsr_ucx_conn *conn, const char *address, int timeout_ms, tsr_errbuf *err)
{
  /* A flush completes once the endpoint's lanes are connected (the
   * client-server handshake and UCX's wireup) and nothing is pending. */
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                           .cb.send = on_flushed,
                           .user_data = conn};
  conn->recv_done = false;
  conn->recv_status = UCS_OK;
  ucs_status_ptr_t req = ucp_ep_flush_nbx(conn->ep, &p);
  if (UCS_PTR_IS_ERR(req))
    return tsr_fail(err, TSR_ECONN, "connecting to %s: %s", address, ucs_status_string(UCS_PTR_STATUS(req)));
  if (req == NULL) return 0;
  wait_ctx w = {tsr_now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms), NULL, NULL, address, 0, SPIN_NS};
  int waited = wait_for(conn, &conn->recv_done, &w);
  ucp_request_free(req);   /* still in flight after a timeout: closing the conn ends it */
  if (waited != 1) return wait_fail(conn, waited, "connecting", "(none)", address, err);
  if (conn->recv_status != UCS_OK)
    return tsr_fail(err, TSR_ECONN, "connecting to %s: %s", address, ucs_status_string(conn->recv_status));
  if (!conn->said_hello) say_hello(conn, &w);   /* the direct endpoint, ahead too */
  return 0;
}

static int send_get(tsr_ucx_conn *conn, const char *key, const char *address, tsr_errbuf *err)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_xfer_pack_get(&wb, key);
  free(conn->request);
  conn->request = malloc(wb.sbuf.size);
  size_t len = wb.sbuf.size;
  if (conn->request != NULL) memcpy(conn->request, wb.sbuf.data, len);
  tsr_wbuf_free(&wb);
  if (conn->request == NULL) return TSR_ENOMEM;
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_AM_SEND_FLAG_REPLY};
  ucp_ep_h ep = conn->direct != NULL ? conn->direct : conn->ep;
  ucs_status_ptr_t req = ucp_am_send_nbx(ep, TSR_UCX_AM_GET, conn->request, len, NULL, 0, &p);
  if (UCS_PTR_IS_ERR(req))
    return tsr_fail(err, TSR_ECONN, "send to %s: %s", address, ucs_status_string(UCS_PTR_STATUS(req)));
  if (req != NULL) ucp_request_free(req);   /* completes on its own; conn->request outlives it */
  return 0;
}

static void on_recv_data(void *request, ucs_status_t status, size_t length, void *user_data)
{
  (void)request;
  (void)length;
  tsr_ucx_conn *conn = user_data;
  conn->recv_status = status;
  conn->recv_done = true;
}

/* The rendezvous data's destination: the sink's device buffer when there
 * is a sink and UCX moves CUDA memory (cuda_ipc from a device sender: no
 * host memory on either side), else a pool buffer, registered once. */
static void *recv_target(tsr_ucx_conn *conn, const tsr_xfer_device_sink *sink, ucp_request_param_t *p)
{
  size_t len = conn->data_len;
  if (sink != NULL && tsr_ucx_cuda_capable()) conn->recv_dev = sink->alloc(sink->arg, len);
  if (conn->recv_dev != NULL) {
    conn->recv_sink = sink;
    conn->recv_dev_len = len;
    p->memory_type = UCS_MEMORY_TYPE_CUDA;
    return conn->recv_dev;
  }
  conn->recv_buf = tsr_ucx_buf_take(len);
  if (conn->recv_buf == NULL) return NULL;
  /* registered with the ALL context: no use to the LOCAL one's worker */
  void *memh = conn->reply_worker == conn->worker ? tsr_ucx_buf_memh(conn->recv_buf) : NULL;
  if (memh != NULL) {
    p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p->memh = memh;
  }
  return tsr_ucx_buf_data(conn->recv_buf);
}

/* Receives the rendezvous data (into recv_target's buffer). */
static int receive_rndv(tsr_ucx_conn *conn, wait_ctx *w, const char *key, const tsr_xfer_device_sink *sink,
                        tsr_errbuf *err)
{
  size_t len = conn->data_len;
  ucp_request_param_t p = {
    .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE,
    .cb.recv_am = on_recv_data,
    .user_data = conn,
    .memory_type = UCS_MEMORY_TYPE_HOST,
  };
  void *target = recv_target(conn, sink, &p);
  if (target == NULL) return tsr_fail(err, TSR_ENOMEM, "cannot allocate %zu bytes for chunk '%s'", len, key);
  conn->recv_done = false;
  void *desc = conn->rndv_desc;
  conn->rndv_desc = NULL;   /* UCX owns it from here */
  ucs_status_ptr_t req = ucp_am_recv_data_nbx(conn->reply_worker, desc, target, len, &p);
  if (UCS_PTR_IS_ERR(req)) {
    drop_recv(conn);   /* refused at once: UCX never took it */
    return tsr_fail(err, TSR_ECONN, "receive of '%s' from %s: %s", key, w->address,
                    ucs_status_string(UCS_PTR_STATUS(req)));
  }
  if (req == NULL) return 0;
  conn->recv_req = req;
  conn->recv_worker = conn->reply_worker;
  if (conn->recv_dev != NULL) w->spin_ns = DEVICE_SPIN_NS;
  int waited = wait_for(conn, &conn->recv_done, w);
  if (waited != 1) return wait_fail(conn, waited, "receiving the chunk", key, w->address, err);
  ucp_request_free(req);
  conn->recv_req = NULL;
  if (conn->recv_status != UCS_OK) {
    drop_recv(conn);   /* the receive ended: UCX is done with it */
    return tsr_fail(err, TSR_ECONN, "receive of '%s' from %s: %s", key, w->address,
                    ucs_status_string(conn->recv_status));
  }
  return 0;
}

/* Moves the reply's bytes into out. */
static int take_data(tsr_ucx_conn *conn, wait_ctx *w, const char *key, tsr_xfer_data *out, tsr_errbuf *err)
{
  if (conn->rndv_desc != NULL) {
    int rc = receive_rndv(conn, w, key, out->sink, err);
    if (rc != 0) return rc;
    out->on_device = conn->recv_dev != NULL;
    out->pooled = conn->recv_buf;
    out->data = out->on_device ? conn->recv_dev : tsr_ucx_buf_data(conn->recv_buf);
    out->copy = NULL;
    conn->recv_buf = NULL;
    conn->recv_dev = NULL;
  } else if (conn->data_len > 0) {
    if (conn->eager == NULL) return tsr_fail(err, TSR_ENOMEM, "no memory for chunk '%s' (%zu bytes)", key, conn->data_len);
    out->data = out->copy = conn->eager;
    conn->eager = NULL;
  } else if (posix_memalign(&out->copy, 64, 1) != 0) {
    return TSR_ENOMEM;
  } else {
    out->data = out->copy;
  }
  out->nbytes = conn->data_len;
  out->owner = NULL;
  return 0;
}

/* How long a hello waits for its answer before the listener's endpoint
 * is kept: the answer is one small message; a server that never answers
 * (an older Tessera) costs a first fetch this much once. */
#define HELLO_MS 2000

/* A worker of the LOCAL context for the direct endpoint: false (the
 * ALL context's worker serves) when UCX_TLS allows only tcp or UCX
 * refuses. */
static bool open_local_worker(tsr_ucx_conn *conn)
{
  ucp_context_h ctx;
  tsr_errbuf err = {{0}};
  if (tsr_ucx_context_take(TSR_UCX_LOCAL, &ctx, &err) != 0) return false;
  if (tsr_ucx_worker_new(ctx, UCS_THREAD_MODE_SERIALIZED, &conn->local, &conn->local_efd, &err) != 0) {
    conn->local = NULL;
    tsr_ucx_context_drop(TSR_UCX_LOCAL);
  } else if (tsr_ucx_set_am_handler(conn->local, TSR_UCX_AM_REPLY, on_local_reply, conn, &err) != 0) {
    close_local_worker(conn);
  } else {
    return true;
  }
  TSR_DEBUG("ucx: no worker without tcp (%s): the direct endpoint shares the listener's", err.text);
  return false;
}

/* Opens the direct endpoint from the hello's answer when the server is on
 * this host (ucx.h), on a worker of the LOCAL context when one can be
 * made (no tcp poll beside shared memory's). Without peer error handling:
 * UCX 1.13 gives an endpoint that asks for it no shared-memory lane
 * (posix, sysv, cma cannot detect a dead peer), and shared memory is the
 * point (1 KiB: 4.7 us against 24 us over tcp here). A dead server is
 * still seen at once: the listener's endpoint stays open with peer error
 * handling, its tcp connection fails when the process dies, and every
 * wait checks it. */
static void open_direct(tsr_ucx_conn *conn)
{
  const char *mine = tsr_ucx_host_identity();
  if (conn->reply_hdr_len != strlen(mine) || memcmp(conn->reply_hdr, mine, conn->reply_hdr_len) != 0 ||
      conn->eager == NULL)
    return;
  ucp_ep_params_t p = {
    .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER,
    .address = conn->eager,   /* unpacked by ucp_ep_create */
    .err_mode = UCP_ERR_HANDLING_MODE_NONE,
    .err_handler = {.cb = on_ep_error, .arg = conn},
  };
  if (open_local_worker(conn) && ucp_ep_create(conn->local, &p, &conn->direct) != UCS_OK) {
    conn->direct = NULL;   /* no transport in common: try the listener's worker */
    close_local_worker(conn);
  }
  /* the listener's worker has no shared memory when the LOCAL context
   * was meant to carry it: then the listener's endpoint it is */
  if (conn->direct == NULL && !atomic_load(&all_without_shm) && ucp_ep_create(conn->worker, &p, &conn->direct) != UCS_OK)
    conn->direct = NULL;
  if (conn->direct != NULL)
    TSR_DEBUG("ucx: the peer is on this host: fetching from its worker address directly%s",
              conn->local != NULL ? " (on a worker without tcp)" : "");
}

/* Says hello once and opens the direct endpoint when the answer allows;
 * any failure keeps the listener's endpoint (a lost connection shows in
 * ep_status, for the get to report). */
static void say_hello(tsr_ucx_conn *conn, const wait_ctx *w)
{
  conn->said_hello = true;
  const char *env = getenv("TESSERA_UCX_DIRECT");
  if (env != NULL && strcmp(env, "0") == 0) return;
  forget_reply(conn);
  conn->awaiting = conn->hello_pending = true;
  static const char hello[] = "h";
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_AM_SEND_FLAG_REPLY};
  ucs_status_ptr_t req = ucp_am_send_nbx(conn->ep, TSR_UCX_AM_HELLO, hello, 1, NULL, 0, &p);
  if (UCS_PTR_IS_ERR(req)) {
    conn->hello_pending = false;
    return;
  }
  if (req != NULL) ucp_request_free(req);
  wait_ctx hw = *w;
  uint64_t until = tsr_now_ms() + HELLO_MS;
  if (until < hw.deadline) hw.deadline = until;
  if (wait_for(conn, &conn->replied, &hw) == 1) open_direct(conn);
  forget_reply(conn);
  conn->hello_pending = false;
}

int tsr_ucx_get(tsr_ucx_conn *conn, const char *address, const char *key, int timeout_ms, tsr_xfer_abort_fn abort,
                void *ctx, tsr_chunk_header *hdr, tsr_xfer_data *out, tsr_errbuf *err)
{
  if (conn->ep_status != UCS_OK)
    return tsr_fail(err, TSR_ECONN, "fetch of '%s': connection to %s lost (%s)", key, address,
                    ucs_status_string(conn->ep_status));
  wait_ctx w = {timeout_ms < 0 ? UINT64_MAX : tsr_now_ms() + (uint64_t)timeout_ms, abort, ctx, address, 0, SPIN_NS};
  if (!conn->said_hello) say_hello(conn, &w);
  forget_reply(conn);
  conn->awaiting = true;
  uint64_t t_start = tsr_now_us();
  int rc = send_get(conn, key, address, err);
  uint64_t t_sent = tsr_now_us();
  int waited = rc == 0 ? wait_for(conn, &conn->replied, &w) : 1;
  uint64_t t_replied = tsr_now_us();
  if (rc == 0 && waited != 1) rc = wait_fail(conn, waited, "awaiting the reply", key, address, err);
  if (rc == 0) rc = tsr_xfer_decode_reply(conn->reply_hdr, conn->reply_hdr_len, key, hdr, err);
  if (rc == 0 && hdr->nbytes != conn->data_len)
    rc = tsr_fail(err, TSR_EPROTO, "chunk '%s' from %s: payload does not match its header", key, address);
  if (rc == 0) rc = take_data(conn, &w, key, out, err);
  /* where a slow fetch's time went: the reply's round trip (the first
   * includes connecting) or the bytes (a fresh buffer's faults included) */
  if (rc == 0)
    TSR_DEBUG("ucx: '%s' from %s: sent in %.3f ms, reply after %.3f ms, %zu bytes in %.3f ms (%s buffer)", key,
              address, (double)(t_sent - t_start) / 1e3, (double)(t_replied - t_sent) / 1e3, out->nbytes,
              (double)(tsr_now_us() - t_replied) / 1e3,
              out->on_device ? "device" : out->pooled != NULL ? "pool" : "plain");
  /* a failed rendezvous receive keeps its buffer in the conn until close */
  if (rc == 0 || conn->recv_req == NULL) forget_reply(conn);
  return rc;
}
