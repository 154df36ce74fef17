/* The worker's main thread: setup, the event loop, teardown.
 *
 * One zmq_poll over four things: the stop pipe (signals), the executor's
 * completion PULL, the data-plane server's ROUTER and the scheduler link
 * (common/zmtp's fd, when connected), with the next link deadline (heartbeat, silence check,
 * reconnect) as the timeout. Everything the iteration has to say to the
 * scheduler is batched in w->out and sent as one frame at its end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "share.h"
#include "util/rttrace.h"
#include "zmtp/zmtp.h"
#include "wmetrics.h"
#include "worker_int.h"

#define ROUTE_LOG_EVERY_MS 10000

/* The local address that routes to the scheduler, into ip. Waits while the
 * scheduler's host does not resolve (a container started before its
 * scheduler's: the name appears in DNS with that container), logging every
 * ROUTE_LOG_EVERY_MS. 0, or TSR_ECLOSED when asked to stop meanwhile. */
static int await_route(const tsr_worker *w, int stop_fd, char *ip, size_t cap)
{
  uint64_t start = tsr_now_ms(), next_log = start;
  while (tsr_net_local_ip_for(w->opts.scheduler, ip, cap) != 0) {
    uint64_t now = tsr_now_ms();
    if (now >= next_log) {
      TSR_WARN("scheduler %s: its host does not resolve (yet?); waiting %llu s so far, retrying every second",
               w->opts.scheduler, (unsigned long long)(now - start) / 1000);
      next_log = now + ROUTE_LOG_EVERY_MS;
    }
    zmq_pollitem_t stop = {NULL, stop_fd, ZMQ_POLLIN, 0};
    if (zmq_poll(&stop, 1, 1000) > 0) return TSR_ECLOSED;
  }
  return 0;
}

/* Where the data socket binds, and the host a wildcard bind advertises. */
static int data_endpoint(const tsr_worker *w, int stop_fd, char *endpoint, size_t cap, char *host, size_t host_cap)
{
  host[0] = '\0';
  if (w->opts.listen_data[0] != '\0') {
    snprintf(endpoint, cap, "%s", w->opts.listen_data);
    if (tsr_net_local_ip_for(w->opts.scheduler, host, host_cap) != 0 && gethostname(host, host_cap) != 0)
      snprintf(host, host_cap, "127.0.0.1");
    return 0;
  }
  if (strncmp(w->opts.scheduler, "ipc://", 6) == 0) {
    snprintf(endpoint, cap, "tcp://127.0.0.1:0");
    return 0;
  }
  int rc = await_route(w, stop_fd, host, host_cap);
  if (rc == 0) snprintf(endpoint, cap, "tcp://%s:0", host);
  return rc;
}

/* Each alternative of bound ("ucx://H:P,tcp://H:P") with its host
 * replaced by host, its scheme and port kept. */
static void rehost(const char *bound, const char *host, char *out, size_t cap)
{
  size_t used = 0;
  out[0] = '\0';
  for (const char *p = bound; *p != '\0' && used < cap;) {
    size_t len = strcspn(p, ",");
    const char *sep = strstr(p, "://");
    const char *port = p + len;
    while (port > p && *port != ':') port--;
    if (sep != NULL && sep < p + len && port > sep)
      used += (size_t)snprintf(out + used, cap - used, "%s%.*s%s%.*s", used ? "," : "", (int)(sep + 3 - p), p, host,
                               (int)(p + len - port), port);
    p += len;
    if (*p == ',') p++;
  }
  if (used >= cap) TSR_WARN("advertised data address for %s is too long; truncated", host);
}

/* The address peers are told: the bound one, or --contact-address (with
 * the bound ports when it names none). A contact with a port names one
 * forwarded port: the ZeroMQ socket's (the UCX listener's with
 * --transport ucx), so only that transport is advertised. */
static void advertised_address(tsr_worker *w)
{
  const char *bound = tsr_xfer_server_address(w->server), *contact = w->opts.contact_address;
  if (contact[0] == '\0') {
    snprintf(w->data_address, sizeof w->data_address, "%s", bound);
    return;
  }
  const char *host = strstr(contact, "://");
  host = host != NULL ? host + 3 : contact;
  if (strchr(host, ':') == NULL) {
    rehost(bound, host, w->data_address, sizeof w->data_address);
    return;
  }
  bool ucx_only = tsr_xfer_server_socket(w->server) == NULL;
  int n = ucx_only ? snprintf(w->data_address, sizeof w->data_address, "ucx://%s", host)
                   : snprintf(w->data_address, sizeof w->data_address, "%s", contact);
  if (n >= (int)sizeof w->data_address) TSR_WARN("--contact-address %s is too long; advertised truncated", contact);
  if (!ucx_only && tsr_xfer_server_has_ucx(w->server))
    TSR_INFO("--contact-address %s names a port: advertising ZeroMQ only (peers cannot reach the UCX listener)",
             contact);
}

static int open_data_plane(tsr_worker *w, int stop_fd)
{
  /* what this worker's fetches prefer, as it serves */
  tsr_xfer_set_fetch_transport(w->opts.transport);
  char endpoint[TSR_MAX_ADDR_LEN], host[TSR_MAX_NAME_LEN];
  tsr_errbuf err = {{0}};
  if (data_endpoint(w, stop_fd, endpoint, sizeof endpoint, host, sizeof host) != 0) return TSR_ECLOSED;
  if (tsr_wsec_open_data(w, endpoint, host, &err) != 0) {
    TSR_ERROR("data socket: %s", err.text);
    return TSR_ECONN;
  }
  advertised_address(w);
  tsr_wsec_tag_address(w);
  if (strcmp(w->data_address, tsr_xfer_server_address(w->server)) != 0)
    TSR_INFO("serving chunks on %s, advertised as %s", tsr_xfer_server_address(w->server), w->data_address);
  else
    TSR_INFO("serving chunks on %s", w->data_address);
  return 0;
}

static int open_completions(tsr_worker *w)
{
  snprintf(w->done_endpoint, sizeof w->done_endpoint, "inproc://tsr-worker-done-%p", (void *)w);
  w->pull = zmq_socket(w->zctx, ZMQ_PULL);
  if (w->pull == NULL) return TSR_EINTERNAL;
  tsr_net_socket_defaults(w->pull);
  if (zmq_bind(w->pull, w->done_endpoint) != 0) {
    TSR_ERROR("cannot bind %s: %s", w->done_endpoint, zmq_strerror(zmq_errno()));
    return TSR_EINTERNAL;
  }
  return 0;
}

/* Serving a device chunk: copy it down on the main thread's own stream. */
static int serve_copy(void *slot, void *dst, const void *src, size_t nbytes, tsr_errbuf *err)
{
  return tsr_wgpu_download(slot, dst, src, nbytes, err);
}

/* The device tier's view of the GPU: its own slot copies chunks down. */
static uint64_t tier_used(void *slot) { return tsr_wgpu_used(tsr_wgpu_slot_gpu(slot)); }

static int tier_copy_down(void *slot, void *dst, const void *src, size_t nbytes, tsr_errbuf *err)
{
  return tsr_wgpu_download(slot, dst, src, nbytes, err);
}

static void tier_wake(void *slot) { tsr_wgpu_wake(tsr_wgpu_slot_gpu(slot)); }
static void *tier_pinned(void *gpu, size_t nbytes) { return tsr_wgpu_pinned_alloc(gpu, nbytes); }

/* The pinned host tier's size: as asked, or by default as much as the
 * device limit, at most an eighth of the machine's memory and a quarter of
 * --memory-limit (pinned slabs stay in the RSS, which the host tiers'
 * spill threshold watches). */
static uint64_t pinned_limit(const tsr_worker *w)
{
  if (w->opts.pinned_memory_limit != TSR_PINNED_DEFAULT) return w->opts.pinned_memory_limit;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t limit = tsr_wgpu_limit(w->gpu);
  uint64_t eighth = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 8 : 0;
  if (eighth < limit) limit = eighth;
  if (w->opts.memory_limit != 0 && w->opts.memory_limit / 4 < limit) limit = w->opts.memory_limit / 4;
  return limit;
}

/* Device chunks move down to host memory instead of failing allocations:
 * the tier balances after every task (through the store) and the GPU asks
 * it for memory when an allocation would pass the limit. */
static int open_devtier(tsr_worker *w, tsr_errbuf *err)
{
  int rc = tsr_wgpu_slot_new(w->gpu, &w->tier_slot, err);
  if (rc == 0) rc = tsr_wgpu_set_pinned(w->gpu, pinned_limit(w), err);
  if (rc != 0) return rc;
  tsr_devtier_dev dev = {w->tier_slot, tsr_wgpu_limit(w->gpu), tier_used, tier_copy_down, tier_wake,
                         tier_pinned, tsr_wgpu_pinned_free, w->gpu};
  rc = tsr_devtier_new(&w->opts.devtier, &dev, w->store, &w->devtier, err);
  if (rc != 0) return rc;
  tsr_wstore_set_devtier(w->store, w->devtier);
  tsr_wgpu_set_reclaim(w->gpu, tsr_devtier_reclaim, w->devtier);
  return 0;
}

static int open_gpu(tsr_worker *w)
{
  if (w->opts.gpu < 0) return 0;
  tsr_errbuf err = {{0}};
  int rc = tsr_wgpu_open(w->opts.gpu, w->opts.device_memory_limit, w->opts.threads, &w->gpu, &err);
  if (rc == 0) rc = tsr_wgpu_slot_new(w->gpu, &w->serve_slot, &err);
  if (rc == 0) rc = open_devtier(w, &err);
  if (rc != 0) {
    TSR_ERROR("%s", err.text);
    return rc;
  }
  tsr_wstore_set_device_copy(w->store, serve_copy, w->serve_slot);
  char limit[32], pinned[32];
  TSR_INFO("gpu:%d: %s, device memory limit %s (target %.2f, spill %.2f: idle chunks move to host memory, up to %s "
           "of it pinned), %d streams",
           w->opts.gpu, tsr_wgpu_name(w->gpu), tsr_format_bytes(tsr_wgpu_limit(w->gpu), limit, sizeof limit),
           w->opts.devtier.target, w->opts.devtier.spill, tsr_format_bytes(pinned_limit(w), pinned, sizeof pinned),
           w->opts.threads);
  return 0;
}

/* A GPU worker serving over a CUDA-aware UCX moves device chunks device
 * to device (share.h); without one, through host copies. */
static void open_share(tsr_worker *w)
{
  if (w->gpu == NULL || !tsr_xfer_server_has_ucx(w->server)) return;
  w->share = tsr_wshare_new(w->gpu, w->serve_slot);
  if (w->share == NULL) return;
  tsr_wstore_set_device_serve(w->store, tsr_wshare_serve, w->share);
  TSR_INFO("gpu:%d: device chunks move device to device over UCX (cuda_ipc, cuda_copy), %s", w->opts.gpu,
           tsr_wgpu_has_arena(w->gpu) ? "in place: device memory comes from the arena"
                                      : "through shared buffers: no arena");
}

/* An executor thread's finished task when nothing else is queued: reported
 * from that thread and sent at once, unless the main thread is busy (it
 * then gets the task as any other). Saves the hand-off to the main thread
 * and its wake-up on a lone task's round trip; a backlog's completions
 * still travel in the main thread's batches. */
static bool complete_here(void *arg, tsr_wtask *task)
{
  tsr_worker *w = arg;
  if (pthread_mutex_trylock(&w->mu) != 0) return false;
  tsr_rt_stamp("w.complete");
  tsr_worker_complete(w, task);
  tsr_link_flush(w);
  pthread_mutex_unlock(&w->mu);
  return true;
}

static int start_executor(tsr_worker *w)
{
  tsr_wexec_opts eo = {
    .threads = w->opts.threads,
    .zctx = w->zctx,
    .done_endpoint = w->done_endpoint,
    .worker_name = w->opts.name,
    .fetch_timeout_ms = w->opts.fetch_timeout_ms,
    .data_address = w->data_address,
    .curve = w->opts.curve.on ? &w->opts.curve : NULL,
    .gpu = w->gpu,
    .share = w->share,
    .fetch_ahead = w->opts.fetch_ahead,
    .complete = complete_here,
    .complete_arg = w,
  };
  tsr_errbuf err = {{0}};
  if (tsr_wexec_start(&eo, w->store, &w->exec, &err) != 0) {
    TSR_ERROR("executor: %s", err.text);
    return TSR_EINTERNAL;
  }
  return 0;
}

/* The UCX fetcher's receive pool (net.h): a worker makes spares (its
 * teardown waits for one in the making; a client that exits right after
 * a gather would not). Idle buffers count in RSS like chunks: with a
 * memory limit keep at most a sixteenth of it idle (with
 * integration.memory's 20 MB, an eighth kept one 2 MiB chunk's buffer and
 * spilled chunks the test expects dropped); the tiers trim them first
 * under pressure. */
static void setup_receive_pool(const tsr_worker *w)
{
  uint64_t idle = TSR_XFER_POOL_IDLE_DEFAULT;
  if (w->opts.memory_limit != 0 && w->opts.memory_limit / 16 < idle) idle = w->opts.memory_limit / 16;
  tsr_xfer_pool_configure((size_t)idle, TSR_XFER_POOL_MAX_CLASS, true);
}

/* --recv-pool-warm: the first receive buffers, mapped, faulted in and
 * registered now, before this worker says hello, so before any graph: a
 * fresh worker's first fetches then receive into buffers that already
 * have their pages (made inside the fetch, they cost 20-300 ms of a
 * 25 ms transfer on the bench's link). Only a worker that fetches over
 * UCX by preference (--transport ucx or auto); within the idle limit. */
static void warm_receive_pool(const tsr_worker *w)
{
  if (w->opts.transport == TSR_TRANSPORT_ZMQ || w->opts.recv_pool_warm_count == 0 || !tsr_xfer_ucx_built()) return;
  uint64_t t0 = tsr_now_us();
  unsigned made = tsr_xfer_pool_fill((size_t)w->opts.recv_pool_warm_bytes, w->opts.recv_pool_warm_count);
  char size[32];
  TSR_INFO("receive pool: %u of %u buffers of %s warmed at start in %.1f ms", made, w->opts.recv_pool_warm_count,
           tsr_format_bytes(w->opts.recv_pool_warm_bytes, size, sizeof size), (double)(tsr_now_us() - t0) / 1e3);
}

/* The host and disk tiers, only with a memory limit: without one nothing
 * is ever evicted, so no spill directory is made. */
static int open_tiers(tsr_worker *w)
{
  if (w->opts.memory_limit == 0) return 0;
  tsr_tiers_opts o = w->opts.tiers;
  o.memory_limit = w->opts.memory_limit;
  tsr_tiers *tiers;
  tsr_errbuf err = {{0}};
  if (tsr_tiers_new(&o, &tiers, &err) != 0) {
    TSR_ERROR("%s", err.text);
    return TSR_EIO;
  }
  tsr_wstore_set_tiers(w->store, tiers);
  char limit[32];
  TSR_INFO("memory limit %s (target %.2f, spill %.2f); spilling to %s with %s level %d",
           tsr_format_bytes(o.memory_limit, limit, sizeof limit), o.target, o.spill, tsr_tiers_dir(tiers), o.codec,
           o.level);
  return 0;
}

/* --metrics: a port that cannot be bound is a warning, not a failed start
 * (as the scheduler's dashboard): the worker's work matters more. */
static void open_metrics(tsr_worker *w)
{
  tsr_errbuf err = {{0}};
  if (tsr_wmetrics_open(w->opts.metrics, &w->metrics, &err) != 0) TSR_WARN("no /metrics: %s", err.text);
}

static int worker_setup(tsr_worker *w, const tsr_worker_opts *opts, int stop_fd)
{
  w->opts = *opts;
  pthread_mutex_init(&w->mu, NULL);
  tsr_wbuf_init(&w->out);
  w->zctx = zmq_ctx_new();
  w->store = tsr_wstore_new(opts->memory_limit);
  w->pending = tsr_strmap_new(1024);
  w->needs = tsr_strmap_new(1024);
  if (!w->zctx || !w->store || !w->pending || !w->needs) {
    TSR_ERROR("out of memory starting the worker");
    return TSR_ENOMEM;
  }
  setup_receive_pool(w);
  warm_receive_pool(w);
  if (open_tiers(w) != 0) return TSR_EIO;
  int rc = open_gpu(w);
  if (rc == 0) rc = open_data_plane(w, stop_fd);
  if (rc == 0) open_share(w);
  if (rc == 0) rc = open_completions(w);
  if (rc == 0) rc = start_executor(w);
  w->beat_ms = opts->heartbeat_interval_ms;
  tsr_wgpu_nvml(NULL, &w->nvml);   /* "unknown" until the first heartbeat samples it */
  if (rc == 0 && opts->metrics[0] != '\0') open_metrics(w);
  return rc;
}

/* Takes every finished task the executor threads have pushed. */
static void drain_completions(tsr_worker *w)
{
  tsr_wtask *task;
  for (;;) {
    int n = zmq_recv(w->pull, &task, sizeof task, ZMQ_DONTWAIT);
    if (n < 0) return;
    if (n == (int)sizeof task) {
      tsr_rt_stamp("w.complete");
      if (w->exec != NULL) tsr_wexec_taken(w->exec, 1);
      tsr_worker_complete(w, task);
    }
  }
}

static void drain_pipe(int fd)
{
  char buf[64];
  while (read(fd, buf, sizeof buf) > 0) {
  }
}

/* One iteration: wait for the next event or deadline, handle what is
 * ready, run the link's timers, and send the iteration's batch once. */
static void loop_once(tsr_worker *w, int stop_fd)
{
  pthread_mutex_lock(&w->mu);
  uint64_t now = tsr_now_ms();
  uint64_t deadline = tsr_link_next_deadline(w);
  long timeout = deadline > now ? (long)(deadline - now) : 0;
  /* stop, completions, the scheduler (slot 2, unused while down), then
   * the data plane's one or two items (ROUTER, UCX wakeup fd) */
  zmq_pollitem_t items[5] = {
    {NULL, stop_fd, ZMQ_POLLIN, 0},
    {w->pull, 0, ZMQ_POLLIN, 0},
    {NULL, w->sched != NULL ? tsr_zmtp_fd(w->sched) : -1, ZMQ_POLLIN, 0},
  };
  int first_data = w->sched != NULL ? 3 : 2;
  int n_items = first_data + tsr_xfer_server_pollitems(w->server, items + first_data, 2);
  pthread_mutex_unlock(&w->mu);
  int ready = zmq_poll(items, n_items, timeout);
  tsr_rt_stamp("w.wake");
  if (ready < 0 && zmq_errno() != EINTR) TSR_WARN("zmq_poll: %s", zmq_strerror(zmq_errno()));
  if (ready > 0) {
    if (items[0].revents & ZMQ_POLLIN) {
      drain_pipe(stop_fd);
      TSR_INFO("stopping on signal");
      w->stopping = true;
    }
    bool data_ready = false;
    for (int i = first_data; i < n_items; i++) data_ready |= (items[i].revents & ZMQ_POLLIN) != 0;
    if (data_ready) tsr_xfer_server_serve(w->server, tsr_wstore_xfer_lookup, w->store);
  }
  pthread_mutex_lock(&w->mu);
  if (ready > 0 && (items[1].revents & ZMQ_POLLIN)) drain_completions(w);
  if (ready > 0 && first_data == 3 && (items[2].revents & ZMQ_POLLIN)) tsr_link_recv(w);
  tsr_link_tick(w, tsr_now_ms());
  tsr_wmetrics_tick(w, tsr_now_ms());
  tsr_link_flush(w);
  pthread_mutex_unlock(&w->mu);
}

/* How device chunks moved between workers (info, once at exit; gpu.workers
 * reads this line). */
static void log_share_stats(tsr_worker *w)
{
  tsr_wshare_stats s = {0};
  if (w->share != NULL) tsr_wshare_stats_get(w->share, &s);
  tsr_wgpu_stats g = {0};
  tsr_wgpu_stats_get(w->gpu, &g);
  char sent[32], got[32], bufs[32], copied[32], arena[32];
  TSR_INFO("gpu:%d: served %llu device chunks from device memory (%s), %llu through host copies; received %llu "
           "inputs into device memory (%s); %llu shared buffers made (%s); %llu device copies for transfers (%s); "
           "arena %s",
           w->opts.gpu, (unsigned long long)s.served, tsr_format_bytes(s.served_bytes, sent, sizeof sent),
           (unsigned long long)tsr_wstore_host_copies(w->store), (unsigned long long)s.received,
           tsr_format_bytes(s.received_bytes, got, sizeof got), (unsigned long long)s.buffers,
           tsr_format_bytes(s.buffer_bytes, bufs, sizeof bufs), (unsigned long long)s.copies,
           tsr_format_bytes(s.copy_bytes, copied, sizeof copied),
           tsr_wgpu_has_arena(w->gpu) ? tsr_format_bytes(g.arena_bytes, arena, sizeof arena) : "off");
}

/* What the GPU and its device tier did, for tuning (info, once at exit). */
static void log_gpu_stats(tsr_worker *w)
{
  if (w->gpu == NULL) return;
  tsr_wgpu_stats g;
  tsr_devtier_stats d = {0};
  tsr_wgpu_stats_get(w->gpu, &g);
  if (w->devtier != NULL) tsr_devtier_stats_get(w->devtier, &d);
  char up[32], down[32], moved[32], pinned[32], slabs[32], dropped[32];
  TSR_INFO("gpu:%d: copied up %s in %.3f s, down %s in %.3f s (thread time); allocations waited %.3f s in %llu rounds; "
           "device tier moved %s in %.3f s (%s into pinned memory; %s pinned in %.3f s), dropped %s, %llu reclaims in "
           "%.3f s",
           w->opts.gpu, tsr_format_bytes(g.upload_bytes, up, sizeof up), (double)g.upload_us / 1e6,
           tsr_format_bytes(g.download_bytes, down, sizeof down), (double)g.download_us / 1e6, (double)g.wait_us / 1e6,
           (unsigned long long)g.waits, tsr_format_bytes(d.bytes_moved, moved, sizeof moved), (double)d.move_us / 1e6,
           tsr_format_bytes(d.bytes_pinned, pinned, sizeof pinned), tsr_format_bytes(g.pinned_bytes, slabs, sizeof slabs),
           (double)g.pin_us / 1e6, tsr_format_bytes(d.bytes_dropped, dropped, sizeof dropped), (unsigned long long)d.reclaims,
           (double)d.reclaim_us / 1e6);
  log_share_stats(w);
}

/* Frees everything. Returns false when an executor thread would not stop:
 * then the store and the context must stay (that thread still uses them). */
static bool worker_teardown(tsr_worker *w)
{
  /* executor threads may still report: the goodbye and the socket's close
   * under the lock; from then on they find no link and hand tasks over */
  pthread_mutex_lock(&w->mu);
  tsr_wmetrics_close(&w->metrics);
  tsr_link_goodbye(w);   /* waits (up to 2 s) for the goodbye to leave */
  pthread_mutex_unlock(&w->mu);
  if (w->exec != NULL && tsr_wexec_stop(&w->exec, 5000) != 0) return false;
  if (w->pull) {
    drain_completions(w);
    zmq_close(w->pull);
  }
  tsr_zap_stop(&w->zap);
  tsr_xfer_server_close(&w->server);
  /* Terminating the context runs the free callbacks of bytes still queued
   * for sending, which drop their chunk references: before the store goes. */
  if (w->zctx) zmq_ctx_term(w->zctx);
  tsr_tiers *tiers = w->store != NULL ? tsr_wstore_tiers(w->store) : NULL;
  log_gpu_stats(w);
  if (w->gpu != NULL) tsr_wgpu_set_reclaim(w->gpu, NULL, NULL);
  tsr_wstore_destroy(&w->store);
  /* every received chunk is released: unmap the idle receive buffers */
  tsr_xfer_pool_trim();
  tsr_tiers_destroy(&tiers);
  tsr_devtier_destroy(&w->devtier);
  /* After the store: its device chunks free into the GPU's pool. */
  tsr_wgpu_slot_destroy(&w->tier_slot);
  tsr_wshare_free(&w->share);   /* the server and executor are gone: every shared buffer is back */
  tsr_wgpu_slot_destroy(&w->serve_slot);
  tsr_wgpu_close(&w->gpu);
  tsr_strmap_destroy(&w->pending);
  tsr_strmap_destroy(&w->needs);
  tsr_wbuf_free(&w->out);
  return true;
}

int tsr_worker_run(const tsr_worker_opts *opts, int stop_fd)
{
  tsr_worker *w = calloc(1, sizeof *w);
  if (w == NULL) return 1;
  int code = 0;
  int rc = worker_setup(w, opts, stop_fd);
  if (rc != 0) {
    code = rc == TSR_ECLOSED ? 0 : 1;  /* stopped while waiting for the scheduler's host: a clean stop */
    w->stopping = true;
  }
  while (!w->stopping) loop_once(w, stop_fd);
  if (w->exit_code != 0) code = w->exit_code;
  if (!worker_teardown(w)) _exit(code);
  free(w);
  TSR_INFO("stopped");
  return code;
}

/* The kernel's THP mode is "madvise": the bracketed word of its setting. */
static bool thp_madvise_mode(void)
{
  char mode[128] = "";
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f == NULL) return false;
  bool ok = fgets(mode, sizeof mode, f) != NULL;
  fclose(f);
  return ok && strstr(mode, "[madvise]") != NULL;
}

/* GLIBC_TUNABLES with glibc.malloc.hugetlb=1 added into value (false: no
 * change wanted, or it does not fit). */
static bool hugetlb_tunables(char *value, size_t size)
{
  const char *tunables = getenv("GLIBC_TUNABLES");
  if (tunables != NULL && strstr(tunables, "glibc.malloc.hugetlb") != NULL) return false;
  if (!thp_madvise_mode()) return false;
  int n = snprintf(value, size, "%s%sglibc.malloc.hugetlb=1", tunables ? tunables : "", tunables && tunables[0] ? ":" : "");
  return n >= 0 && (size_t)n < size;
}

void tsr_worker_start_env(char **argv)
{
  char value[1024];
  bool changed = false;
  /* Set before exec, and kept if exec fails: the checks then stop any
   * second attempt. */
  if (hugetlb_tunables(value, sizeof value) && setenv("GLIBC_TUNABLES", value, 1) == 0) changed = true;
  if (getenv("OPENBLAS_NUM_THREADS") == NULL && setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0) changed = true;
  if (changed) execv("/proc/self/exe", argv);
}
