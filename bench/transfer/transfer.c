/* bench/transfer: chunk fetch latency and throughput through tsr_xfer_*
 * (the worker's own data plane), from 1 KiB to 256 MiB, over UCX or
 * ZeroMQ. The serving side is a child process (a worker's data plane in
 * miniature: one thread polling tsr_xfer_server_pollitems and serving from
 * one buffer); the parent fetches as a peer worker does. bench/transfer.sh
 * runs it beside ucx_perftest on the same path and prints the ratios.
 *
 *   tsr-bench-transfer ucx|zmq [MAX_BYTES]
 * prints one line per size: bytes, iterations, median latency (us),
 * throughput (MB/s = 1e6 bytes/s). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/net.h"

#define MAX_DEFAULT (256ull << 20)

static unsigned char *buffer;
static size_t buffer_bytes;

static int lookup(void *arg, const char *key, tsr_xfer_chunk *chunk)
{
  (void)arg;
  unsigned long long n = strtoull(key, NULL, 10);
  if (n == 0 || n > buffer_bytes) return TSR_ENOTFOUND;
  memset(chunk, 0, sizeof *chunk);
  chunk->meta.dtype = TSR_U8;
  chunk->meta.ndim = 1;
  chunk->meta.shape[0] = (int64_t)n;
  chunk->data = buffer;
  chunk->nbytes = n;
  return 0;
}

static void serve(tsr_transport transport, int fd)
{
  void *zctx = zmq_ctx_new();
  tsr_xfer_server *srv = NULL;
  tsr_errbuf err = {{0}};
  if (tsr_xfer_server_open_transport(zctx, "tcp://127.0.0.1:0", NULL, NULL, transport, &srv, &err) != 0) {
    fprintf(stderr, "server: %s\n", err.text);
    _exit(1);
  }
  const char *address = tsr_xfer_server_address(srv);
  if (write(fd, address, strlen(address) + 1) < 0) _exit(1);
  close(fd);
  for (;;) {
    zmq_pollitem_t items[2];
    int n = tsr_xfer_server_pollitems(srv, items, 2);
    zmq_poll(items, n, 100);
    tsr_xfer_server_serve(srv, lookup, NULL);
  }
}

static int cmp_u64(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Fetches size bytes iters times; prints the line. */
static int measure(tsr_xfer_conn *conn, size_t size, int iters)
{
  char key[32];
  snprintf(key, sizeof key, "%zu", size);
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  tsr_errbuf err = {{0}};
  uint64_t start = tsr_now_ns();
  for (int i = -2; i < iters; i++) {   /* two warm-ups */
    tsr_chunk_header hdr;
    tsr_xfer_data out = {0};
    uint64_t t0 = tsr_now_ns();
    int rc = tsr_xfer_get(conn, key, 60000, &hdr, &out, &err);
    if (rc != 0 || out.nbytes != size) {
      fprintf(stderr, "fetch of %zu bytes: %s\n", size, err.text);
      return -1;
    }
    tsr_xfer_data_release(&out);
    if (i >= 0) ns[i] = tsr_now_ns() - t0;
    if (i == -1) start = tsr_now_ns();
  }
  double secs = (double)(tsr_now_ns() - start) / 1e9;
  qsort(ns, (size_t)iters, sizeof *ns, cmp_u64);
  printf("%12zu %7d %12.1f %12.1f\n", size, iters, (double)ns[iters / 2] / 1e3, (double)size * iters / secs / 1e6);
  fflush(stdout);
  free(ns);
  return 0;
}

int main(int argc, char **argv)
{
  tsr_transport transport;
  tsr_errbuf err = {{0}};
  if (argc < 2 || tsr_transport_parse(argv[1], &transport, &err) != 0 || transport == TSR_TRANSPORT_AUTO) {
    fprintf(stderr, "usage: tsr-bench-transfer ucx|zmq [MAX_BYTES]\n");
    return 2;
  }
  buffer_bytes = argc > 2 ? strtoull(argv[2], NULL, 10) : MAX_DEFAULT;
  buffer = malloc(buffer_bytes);
  memset(buffer, 1, buffer_bytes);
  int pipefd[2];
  if (pipe(pipefd) != 0) return 1;
  pid_t pid = fork();   /* before this process touches UCX */
  if (pid == 0) serve(transport, pipefd[1]);
  close(pipefd[1]);
  char address[TSR_MAX_ADDR_LEN] = "";
  if (read(pipefd[0], address, sizeof address - 1) <= 0) return 1;
  tsr_xfer_set_fetch_transport(transport);
  void *zctx = zmq_ctx_new();
  tsr_xfer_conn *conn = NULL;
  int rc = tsr_xfer_open(zctx, address, &conn, &err);
  printf("# tessera over %s from %s\n#       bytes   iters  median_us     MB_per_s\n", argv[1], address);
  for (size_t size = 1024; rc == 0 && size <= buffer_bytes; size *= 4) {
    int iters = size <= (1u << 20) ? 2000 : (int)((4ull << 30) / size);
    if (iters > 200 && size > (1u << 16)) iters = 200;
    if (iters < 8) iters = 8;
    rc = measure(conn, size, iters);
  }
  if (rc != 0) fprintf(stderr, "%s\n", err.text);
  tsr_xfer_close(&conn);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  zmq_ctx_term(zctx);
  return rc == 0 ? 0 : 1;
}
