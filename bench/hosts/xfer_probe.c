/* tsr-xfer-probe — a probe, not a benchmark: the data plane alone
 * (common/net's tsr_xfer_*, what a worker fetching an input and a client
 * gathering a result both call), without scheduler or tasks, to see where
 * a transfer's time goes.
 *
 *   tsr-xfer-probe serve ENDPOINT MIB [TRANSPORT]
 *     serves one chunk "probe" of MIB MiB until killed, over zmq (default),
 *     ucx or auto (docs/transport.md); prints the address to fetch from
 *   tsr-xfer-probe get ADDRESS MIB REPEATS [KEY]
 *     fetches "probe" (or KEY, from a running worker's data address)
 *     REPEATS times, prints each time; with TESSERA_RECV_POOL=0 in the
 *     environment, UCX receives go into fresh buffers (the A/B of the
 *     receive pool, docs/transport.md); with TSR_PROBE_WARM=1, one
 *     receive buffer is mapped and the connection wired up before the
 *     first get, as a worker warms up (docs/transport.md, "Warming up"),
 *     so that get 0 shows what is left of a first fetch's extra cost
 *
 * bench/hosts/transfer.sh --probe runs it across the veth link beside
 * iperf3. Uses internal headers (common/net): it is not a client program. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/net.h"

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct probe_chunk {
  void *data;
  size_t nbytes;
} probe_chunk;

static void no_release(void *data, void *hint) { (void)data, (void)hint; }

static int lookup(void *arg, const char *key, tsr_xfer_chunk *out)
{
  probe_chunk *c = arg;
  if (strcmp(key, "probe") != 0) return TSR_ENOTFOUND;
  memset(out, 0, sizeof *out);
  out->meta.dtype = TSR_U8;
  out->meta.ndim = 1;
  out->meta.shape[0] = (int64_t)c->nbytes;
  out->data = c->data;
  out->nbytes = c->nbytes;
  out->release = no_release;
  return 0;
}

static int serve(const char *endpoint, size_t nbytes, const char *transport_name)
{
  tsr_transport transport;
  tsr_errbuf err = {{0}};
  if (tsr_transport_parse(transport_name, &transport, &err) != 0) {
    fprintf(stderr, "tsr-xfer-probe: %s\n", err.text);
    return 2;
  }
  probe_chunk c = {NULL, nbytes};
  if (posix_memalign(&c.data, 64, nbytes) != 0) return 1;
  memset(c.data, 7, nbytes);
  void *zctx = zmq_ctx_new();
  tsr_xfer_server *srv = NULL;
  if (tsr_xfer_server_open_transport(zctx, endpoint, NULL, NULL, transport, &srv, &err) != 0) {
    fprintf(stderr, "tsr-xfer-probe: %s\n", err.text);
    return 1;
  }
  printf("serving %zu bytes on %s\n", nbytes, tsr_xfer_server_address(srv));
  fflush(stdout);
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  while (!stop) {
    zmq_pollitem_t items[2];
    int n = tsr_xfer_server_pollitems(srv, items, 2);
    if (zmq_poll(items, n, 200) > 0) tsr_xfer_server_serve(srv, lookup, &c);
  }
  tsr_xfer_server_close(&srv);
  zmq_ctx_term(zctx);
  free(c.data);
  return 0;
}

static int get(const char *address, size_t nbytes, int repeats, const char *key)
{
  void *zctx = zmq_ctx_new();
  tsr_xfer_conn *conn = NULL;
  tsr_errbuf err = {{0}};
  if (tsr_xfer_open(zctx, address, &conn, &err) != 0) {
    fprintf(stderr, "tsr-xfer-probe: %s\n", err.text);
    return 1;
  }
  const char *warm = getenv("TSR_PROBE_WARM");
  if (warm != NULL && strcmp(warm, "1") == 0) {
    double t0 = now_s();
    unsigned made = tsr_xfer_pool_fill(nbytes, 1);
    double t1 = now_s();
    int rc = tsr_xfer_ready(conn, 10000, &err);
    printf("warm: %u buffer(s) in %.4f s, connection ready in %.4f s%s%s\n", made, t1 - t0, now_s() - t1,
           rc ? ": " : "", rc ? err.text : "");
  }
  double best = 1e30, sum = 0;
  for (int i = 0; i < repeats; i++) {
    tsr_chunk_header hdr;
    tsr_xfer_data data = {0};
    double t0 = now_s();
    int rc = tsr_xfer_get(conn, key, 30000, &hdr, &data, &err);
    double t = now_s() - t0;
    if (rc != 0 || data.nbytes != nbytes) {
      fprintf(stderr, "tsr-xfer-probe: %s\n", rc ? err.text : "wrong size");
      return 1;
    }
    tsr_xfer_data_release(&data);
    printf("get %d: %.4f s, %.2f Gbit/s\n", i, t, (double)nbytes * 8 / t / 1e9);
    if (t < best) best = t;
    sum += t;
  }
  printf("xfer probe: %zu bytes, best %.2f Gbit/s, mean %.2f Gbit/s\n", nbytes, (double)nbytes * 8 / best / 1e9,
         (double)nbytes * 8 * repeats / sum / 1e9);
  tsr_xfer_pool_stats ps;
  tsr_xfer_pool_get_stats(&ps);
  printf("receive pool: %llu taken, %llu reused, %llu unpooled\n", (unsigned long long)ps.taken,
         (unsigned long long)ps.reused, (unsigned long long)ps.unpooled);
  tsr_xfer_close(&conn);
  tsr_xfer_pool_trim();
  zmq_ctx_term(zctx);
  return 0;
}

int main(int argc, char **argv)
{
  if ((argc == 4 || argc == 5) && strcmp(argv[1], "serve") == 0)
    return serve(argv[2], (size_t)(atof(argv[3]) * 1048576.0), argc == 5 ? argv[4] : "zmq");
  if ((argc == 5 || argc == 6) && strcmp(argv[1], "get") == 0)
    return get(argv[2], (size_t)(atof(argv[3]) * 1048576.0), atoi(argv[4]), argc == 6 ? argv[5] : "probe");
  fprintf(stderr, "usage: tsr-xfer-probe serve ENDPOINT MIB [zmq|ucx|auto] | get ADDRESS MIB REPEATS [KEY]\n");
  return 2;
}
