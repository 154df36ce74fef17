/* common/net/ucx — the UCX transport under tsr_xfer_* (private to net/).
 *
 * xfer.c picks a transport per peer from its data address and calls these;
 * nothing outside common/net includes this header. The wire is the ZeroMQ
 * data plane's, carried in UCP active messages (docs/transport.md):
 *
 *   fetcher -> server   AM id TSR_UCX_AM_GET,   header = {"op":"get","key":K}
 *   server  -> fetcher  AM id TSR_UCX_AM_REPLY, header = chunk header map or
 *                       {"op":"error",...}, data = the chunk's bytes
 *
 * A connection is made through the server's listener (UCX's connection
 * manager: its endpoint gets tcp, and cuda_ipc, but never shared memory).
 * Before its first get a fetcher says hello:
 *
 *   fetcher -> server   AM id TSR_UCX_AM_HELLO, header = "h"
 *   server  -> fetcher  AM id TSR_UCX_AM_REPLY, header = the server's host
 *                       identity, data = its ucp worker address
 *
 * and when the identity is its own (same boot, same network, IPC, mount
 * and PID namespaces) opens a second endpoint from that address, which
 * UCX wires over every transport both share (posix/sysv shared memory,
 * cma, cuda_ipc): the gets go there. Other hosts and containers keep the
 * listener's endpoint (a worker address holds addresses a peer behind NAT
 * cannot reach). TESSERA_UCX_DIRECT=0 keeps it always.
 *
 * UCX picks eager or rendezvous by size: a large chunk is sent from the
 * store's buffer and received straight into the fetcher's buffer, no copy
 * of ours on either side (UCX's transports may copy through their own
 * bounce buffers: tcp does, cma and cuda_ipc do not).
 *
 * Built from xfer_ucx.c (fetching) and xfer_ucx_serve.c (serving) when
 * TSR_UCX is on, from xfer_ucx_none.c otherwise: then every open fails
 * with TSR_ECONN ("this build has no UCX").
 *
 * Threading: two process-wide ucp_contexts (refcounted, shared by every
 * ucp_worker, created on first use: ucx_int.h). A conn owns a ucp_worker
 * of its own (two with a direct endpoint), used by one thread at a time;
 * a server owns one (two: the listener's and the direct endpoints'),
 * used by its serving thread only. */
#ifndef TSR_COMMON_NET_UCX_H
#define TSR_COMMON_NET_UCX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net.h"

#define TSR_UCX_SCHEME "ucx://"
#define TSR_UCX_AM_GET 0x7e01
#define TSR_UCX_AM_REPLY 0x7e02
#define TSR_UCX_AM_HELLO 0x7e03

typedef struct tsr_ucx_conn tsr_ucx_conn;
typedef struct tsr_ucx_server tsr_ucx_server;

/* Same-host peers: the direct endpoints live on workers of a second UCP
 * context without tcp, on both sides, so that a progress polls shared
 * memory (and cuda_ipc) only: with tcp's epoll_wait in every progress a
 * 1 KiB fetch took 2.7-2.9 us here, without 2.5 (8.7 against 3.2 when
 * the server sleeps between requests). The listener's endpoint stays on
 * the first context's worker, progressed every 64th round of a spin, for
 * a dead peer's error. TESSERA_UCX_LOCAL=0 keeps one context. This is
 * that context's UCX_TLS from the user's (NULL: unset): "^tcp" for unset
 * or "all", an exclusion list with tcp added, a list without its tcp
 * entries; false when the user's leaves out shared memory (posix, sysv:
 * then the direct endpoint would have no transport for active messages)
 * or cap is too small. */
bool tsr_ucx_local_tls(const char *tls, char *out, size_t cap);
/* The first context's UCX_TLS while the second exists: the user's
 * without shared memory ("^sm" for unset), which UCX 1.13 puts on no
 * listener's endpoint anyway; its interfaces cost every worker 1.1 MiB
 * (a same-host connection: 2.69 MiB with them, 1.40 with tcp + shared
 * memory on one worker). */
bool tsr_ucx_listener_tls(const char *tls, char *out, size_t cap);
/* True when tls (a UCX_TLS value; NULL: unset) lets UCX use a
 * shared-memory transport that carries active messages (posix or sysv:
 * cma, knem and xpmem only move rendezvous data). */
bool tsr_ucx_tls_has_shared_memory(const char *tls);

/* True when this build has UCX (it may still fail to initialize). */
bool tsr_ucx_built(void);
/* True when the process's UCP context moves CUDA memory (a CUDA-aware UCX
 * with its cuda modules loaded). Takes and drops a context reference. */
bool tsr_ucx_cuda_capable(void);

/* Connects to "ucx://HOST:PORT" (a server's listener). The connection is
 * established in the background: a refused or dead peer shows in
 * tsr_ucx_get as TSR_ECONN. 0, TSR_EINVAL (bad address) or
 * TSR_ECONN. */
int tsr_ucx_conn_open(const char *endpoint, tsr_ucx_conn **conn_p, tsr_errbuf *err);
void tsr_ucx_conn_close(tsr_ucx_conn **conn_p);   /* NULL is a no-op */
/* Waits (at most timeout_ms) until the endpoint is connected and wired up,
 * so the first get pays no handshake. 0, TSR_ETIMEDOUT or TSR_ECONN: then
 * close the conn. */
int tsr_ucx_conn_ready(tsr_ucx_conn *conn, const char *address, int timeout_ms, tsr_errbuf *err);
bool tsr_ucx_conn_direct(const tsr_ucx_conn *conn);   /* tsr_xfer_is_direct */
/* The direct endpoint is on a worker without tcp (tsr_ucx_local_tls). */
bool tsr_ucx_conn_direct_local(const tsr_ucx_conn *conn);

/* tsr_xfer_get_abortable over UCX; `address` names the peer in messages
 * and for abort. A rendezvous reply goes to out->sink's device buffer when
 * out->sink is set and UCX moves CUDA memory (out->on_device), else to a
 * pool buffer. On success out->copy owns the bytes (64-byte aligned).
 * After TSR_ETIMEDOUT or TSR_ECONN the conn is unusable: close it. */
int tsr_ucx_get(tsr_ucx_conn *conn, const char *address, const char *key, int timeout_ms, tsr_xfer_abort_fn abort,
                void *ctx, tsr_chunk_header *hdr, tsr_xfer_data *out, tsr_errbuf *err);

/* A receive buffer of the pool (xfer_ucx_pool.c; net.h). take: a buffer
 * of at least nbytes, 64-byte aligned, or NULL when out of memory; put:
 * back to the pool (or freed), any thread, NULL is a no-op. memh is the
 * buffer's ucp_mem_h, or NULL when it is not registered. */
typedef struct tsr_ucx_buf tsr_ucx_buf;
tsr_ucx_buf *tsr_ucx_buf_take(size_t nbytes);
void tsr_ucx_buf_put(tsr_ucx_buf *buf);
void *tsr_ucx_buf_data(const tsr_ucx_buf *buf);
void *tsr_ucx_buf_memh(const tsr_ucx_buf *buf);

/* Listens on HOST:PORT (host "*" or "0.0.0.0": every interface; port 0
 * picks one) and writes "ucx://ADVERTISED:PORT" to address (a wildcard is
 * advertised as advertise_host). 0 or TSR_ECONN. */
int tsr_ucx_server_open(const char *host, int port, const char *advertise_host, tsr_ucx_server **srv_p,
                        char *address, size_t cap, tsr_errbuf *err);
/* Closes every connection (sends in flight are cancelled: their release
 * callbacks run before this returns) and the listener. NULL is a no-op. */
void tsr_ucx_server_close(tsr_ucx_server **srv_p);
/* A file descriptor that becomes readable when the server has work: put it
 * in the serving thread's poll set, then call tsr_ucx_server_serve. */
int tsr_ucx_server_fd(const tsr_ucx_server *srv);
/* Progresses UCX, answers every request received, re-arms the fd. Never
 * blocks. Returns the number of requests answered; *bytes grows by the
 * chunk bytes handed to UCX. */
int tsr_ucx_server_serve(tsr_ucx_server *srv, tsr_xfer_lookup_fn lookup, void *arg, uint64_t *bytes);

#endif
