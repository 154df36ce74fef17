/* The UCX transport of a build without UCX (TSR_UCX off): nothing opens,
 * each open says why, and a fetcher falls back to ZeroMQ where the peer
 * offers it (xfer.c asks tsr_ucx_built first). */
#include "ucx.h"

#include <string.h>

struct tsr_ucx_conn {
  int unused;
};
struct tsr_ucx_server {
  int unused;
};

bool tsr_ucx_built(void) { return false; }
bool tsr_ucx_cuda_capable(void) { return false; }
bool tsr_ucx_conn_direct(const tsr_ucx_conn *conn)
{
  (void)conn;
  return false;
}

bool tsr_ucx_conn_direct_local(const tsr_ucx_conn *conn)
{
  (void)conn;
  return false;
}

int tsr_ucx_conn_open(const char *endpoint, tsr_ucx_conn **conn_p, tsr_errbuf *err)
{
  (void)conn_p;
  return tsr_fail(err, TSR_ECONN, "cannot fetch from %s: this build has no UCX (TSR_UCX off)", endpoint);
}

void tsr_ucx_conn_close(tsr_ucx_conn **conn_p) { (void)conn_p; }

int tsr_ucx_conn_ready(tsr_ucx_conn *conn, const char *address, int timeout_ms, tsr_errbuf *err)
{
  (void)conn, (void)timeout_ms;
  return tsr_fail(err, TSR_ECONN, "connecting to %s: this build has no UCX", address);
}

int tsr_ucx_get(tsr_ucx_conn *conn, const char *address, const char *key, int timeout_ms, tsr_xfer_abort_fn abort,
                void *ctx, tsr_chunk_header *hdr, tsr_xfer_data *out, tsr_errbuf *err)
{
  (void)conn, (void)timeout_ms, (void)abort, (void)ctx, (void)hdr, (void)out;
  return tsr_fail(err, TSR_ECONN, "fetch of '%s' from %s: this build has no UCX", key, address);
}

int tsr_ucx_server_open(const char *host, int port, const char *advertise_host, tsr_ucx_server **srv_p,
                        char *address, size_t cap, tsr_errbuf *err)
{
  (void)host, (void)port, (void)advertise_host, (void)srv_p, (void)address, (void)cap;
  return tsr_fail(err, TSR_ECONN, "--transport ucx: this build has no UCX (rebuild with libucx-dev and TSR_UCX=ON)");
}

void tsr_ucx_server_close(tsr_ucx_server **srv_p) { (void)srv_p; }
int tsr_ucx_server_fd(const tsr_ucx_server *srv) { (void)srv; return -1; }

int tsr_ucx_server_serve(tsr_ucx_server *srv, tsr_xfer_lookup_fn lookup, void *arg, uint64_t *bytes)
{
  (void)srv, (void)lookup, (void)arg, (void)bytes;
  return 0;
}

/* No UCX, no pool: nothing is ever lent. */
tsr_ucx_buf *tsr_ucx_buf_take(size_t nbytes)
{
  (void)nbytes;
  return NULL;
}
void tsr_ucx_buf_put(tsr_ucx_buf *buf) { (void)buf; }
void *tsr_ucx_buf_data(const tsr_ucx_buf *buf) { (void)buf; return NULL; }
void *tsr_ucx_buf_memh(const tsr_ucx_buf *buf) { (void)buf; return NULL; }
void tsr_xfer_pool_configure(size_t idle_limit, size_t max_class, bool spares)
{
  (void)idle_limit, (void)max_class, (void)spares;
}
void tsr_xfer_pool_get_stats(tsr_xfer_pool_stats *stats) { memset(stats, 0, sizeof *stats); }
void tsr_xfer_pool_trim(void) {}
void tsr_xfer_pool_warm(size_t nbytes, unsigned count)
{
  (void)nbytes;
  (void)count;
}
unsigned tsr_xfer_pool_fill(size_t nbytes, unsigned count)
{
  (void)nbytes;
  (void)count;
  return 0;
}
