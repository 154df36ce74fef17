/* common/net — sockets. Two parts:
 *
 * 1. Control-plane helpers over ZeroMQ: binding with ephemeral ports,
 *    sending a batch frame (optionally after a ROUTER identity), receiving a
 *    multipart message with a frame-count limit.
 * 2. The data-plane transfer interface (tsr_xfer_*): how one process fetches
 *    a chunk from another's data socket and how a worker serves them. It is
 *    deliberately small so that a UCX transport can replace the ZeroMQ one.
 *
 * Threading: ZeroMQ sockets belong to one thread; so does every handle here.
 * The zmq context is thread-safe and shared per process. */
#ifndef TSR_COMMON_NET_H
#define TSR_COMMON_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <zmq.h>

#include "util/util.h"
#include "wire/wire.h"

#define TSR_NET_MAX_FRAMES 4
#define TSR_MAX_ADDR_LEN 256

/* A received multipart message: up to TSR_NET_MAX_FRAMES frames. Extra
 * frames are received and dropped, and `truncated` is set. */
typedef struct tsr_frames {
  zmq_msg_t part[TSR_NET_MAX_FRAMES];
  int count;
  bool truncated;
} tsr_frames;

/* Receives one whole multipart message (flags: 0 or ZMQ_DONTWAIT).
 * Returns the frame count, or -1 with errno (EAGAIN when none). Call
 * tsr_frames_close() after a success. */
int tsr_frames_recv(void *sock, tsr_frames *frames, int flags);
void tsr_frames_close(tsr_frames *frames);
static inline void *tsr_frame_data(tsr_frames *f, int i) { return zmq_msg_data(&f->part[i]); }
static inline size_t tsr_frame_size(tsr_frames *f, int i) { return zmq_msg_size(&f->part[i]); }

/* Sends [identity?][data] (identity may be NULL). Copies data. Returns 0 or
 * -1 with errno (EHOSTUNREACH when a ROUTER peer is gone and
 * ZMQ_ROUTER_MANDATORY is set). */
int tsr_net_send(void *sock, const void *identity, size_t id_len, const void *data, size_t len, int flags);

/* Binds sock to endpoint ("tcp://127.0.0.1:0" or "...:*" picks a free port)
 * and writes the endpoint that peers should connect to into out (a bound
 * wildcard host 0.0.0.0 is reported as advertise_host when given). 0 or
 * TSR_ECONN with a message. */
int tsr_net_bind(void *sock, const char *endpoint, const char *advertise_host, char *out, size_t cap, tsr_errbuf *err);

/* The address peers connect to for a bound endpoint: a wildcard host
 * (0.0.0.0) becomes advertise_host when one is given. */
void tsr_net_advertise(const char *bound, const char *advertise_host, char *out, size_t cap);

/* Sets the options every socket of ours gets: linger, size limit, tcp
 * keepalive. */
void tsr_net_socket_defaults(void *sock);

/* Finds the local IP address this host would use to reach the host in
 * endpoint "tcp://HOST:PORT" (no packet is sent). Writes it to out. 0 or
 * TSR_ECONN. */
int tsr_net_local_ip_for(const char *endpoint, char *out, size_t cap);

/* ---------- data plane: transports ----------
 * A data address is one endpoint or a comma-separated list of a worker's
 * alternatives, "ucx://HOST:PORT,tcp://HOST:PORT" (net/xfer_int.h). */
typedef enum tsr_transport {
  TSR_TRANSPORT_AUTO = 0,   /* serve both when UCX works and CURVE is off; fetch over UCX when offered */
  TSR_TRANSPORT_ZMQ,        /* serve ZeroMQ only; fetch over ZeroMQ unless a peer offers only UCX */
  TSR_TRANSPORT_UCX,        /* serve UCX only (refused with CURVE); fetch over UCX when offered */
} tsr_transport;

/* "auto", "zmq" or "ucx". 0 or TSR_EINVAL naming the text. */
int tsr_transport_parse(const char *text, tsr_transport *transport_p, tsr_errbuf *err);
const char *tsr_transport_name(tsr_transport transport);   /* static, never NULL */
/* True when this build has UCX (TSR_UCX on). */
bool tsr_xfer_ucx_built(void);
/* The transport this process prefers when a peer offers both (default
 * auto = UCX). Process-wide: set it before fetching threads start. */
void tsr_xfer_set_fetch_transport(tsr_transport prefer);
tsr_transport tsr_xfer_fetch_transport(void);

/* ---------- data plane: fetching ---------- */
typedef struct tsr_xfer_conn tsr_xfer_conn;

/* Connects to a peer's data address, over the alternative this process
 * prefers (tsr_xfer_set_fetch_transport) when it offers several, else the
 * one it offers. Returns 0 or TSR_ECONN. */
int tsr_xfer_open(void *zctx, const char *address, tsr_xfer_conn **conn_p, tsr_errbuf *err);
/* The same with this process's CURVE keys (NULL or off: none). An address
 * that carries a worker's key (net/curve.h, "#curve=KEY") is connected with
 * CURVE, which needs keys (TSR_ECONN without); a plain one in plaintext.
 * The connection's address is the one given, tag included. */
struct tsr_curve;
int tsr_xfer_open_curve(void *zctx, const char *address, const struct tsr_curve *curve, tsr_xfer_conn **conn_p,
                        tsr_errbuf *err);
void tsr_xfer_close(tsr_xfer_conn **conn_p);            /* NULL is a no-op */
const char *tsr_xfer_address(const tsr_xfer_conn *conn);
/* Connects ahead: returns once the connection is established (UCX: the
 * endpoint is connected and wired up, so the first get pays no
 * handshake), at most timeout_ms. A ZeroMQ connection returns 0 at once
 * (ZeroMQ connects in the background). 0, TSR_ETIMEDOUT or TSR_ECONN:
 * then close it. */
int tsr_xfer_ready(tsr_xfer_conn *conn, int timeout_ms, tsr_errbuf *err);
/* True when this process would fetch from address over UCX (its
 * preference, what the address offers, whether this build has UCX). */
bool tsr_xfer_fetches_over_ucx(const char *address);
/* True when conn reaches its UCX peer directly, from the peer's worker
 * address (same host: shared memory, cma, cuda_ipc; common/net/ucx.h),
 * rather than through its listener (tcp). Known after the first fetch or
 * tsr_xfer_ready. */
bool tsr_xfer_is_direct(const tsr_xfer_conn *conn);
/* ... and that endpoint's worker polls no tcp interface (a second UCP
 * context without tcp: common/net/ucx.h; TESSERA_UCX_LOCAL=0 turns it
 * off). */
bool tsr_xfer_is_direct_local(const tsr_xfer_conn *conn);

/* Received chunk bytes, 64-byte aligned (kernels may load whole vectors).
 * `data` is valid until tsr_xfer_data_release(). */
struct tsr_xfer_device_sink;
typedef struct tsr_xfer_data {
  void *data;
  size_t nbytes;
  /* in: where a large chunk may land in device memory (below), or NULL */
  const struct tsr_xfer_device_sink *sink;
  bool on_device;   /* out: data is the sink's device buffer */
  void *owner;      /* private: the zmq message holding the bytes, or NULL */
  void *copy;       /* private: an aligned copy when ZeroMQ's buffer was not */
  void *pooled;     /* private: the receive-pool buffer holding the bytes (UCX), or NULL */
} tsr_xfer_data;

/* ---------- data plane: device memory ----------
 * Over a CUDA-aware UCX (cuda_copy, cuda_ipc: docs/transport.md "Device to
 * device") a GPU worker serves a device chunk from device memory and
 * receives a large chunk into device memory, so a chunk between two GPU
 * workers of one host never passes through host memory. Over ZeroMQ, or a
 * UCX without CUDA, bytes are host memory as before. */
typedef struct tsr_xfer_device_sink {
  /* A device buffer of nbytes UCX may write into, or NULL (the chunk then
   * lands in host memory). Called on the fetching thread. */
  void *(*alloc)(void *arg, size_t nbytes);
  /* Gives it back (tsr_xfer_data_release, or a failed fetch). */
  void (*free)(void *arg, void *ptr, size_t nbytes);
  void *arg;
} tsr_xfer_device_sink;

/* True when this process's UCX moves CUDA memory (its context lists the
 * CUDA memory type) and TESSERA_DEVICE_TRANSFER is not "0". Creates the
 * UCX context when none exists (and drops it again). */
bool tsr_xfer_device_capable(void);

/* ---------- data plane: the receive-buffer pool (UCX) ----------
 * A chunk fetched over UCX lands in a buffer of the process's pool:
 * mapped, faulted in and registered with UCX once, and put back into the
 * pool by tsr_xfer_data_release (on any thread) for the next chunk of a
 * fitting size (docs/transport.md "Receive-buffer pool"). Chunks under
 * TSR_XFER_POOL_MIN or over the largest class get plain allocations.
 * ZeroMQ allocates its own receive buffers: never pooled. */
#define TSR_XFER_POOL_MIN ((size_t)1 << 20)
#define TSR_XFER_POOL_MAX_CLASS ((size_t)1 << 30)
#define TSR_XFER_POOL_IDLE_DEFAULT ((size_t)256 << 20)

typedef struct tsr_xfer_pool_stats {
  uint64_t taken;         /* receive buffers handed out, pooled or not */
  uint64_t reused;        /* of those, idle pool buffers reused */
  uint64_t unpooled;      /* of those, plain allocations (too small or too large) */
  uint64_t spares;        /* buffers made ahead in the background (docs/transport.md) */
  uint64_t warmed;        /* buffers made ahead for a known size (tsr_xfer_pool_warm / _fill) */
  uint64_t buffers;       /* pooled buffers that exist now, idle or lent */
  uint64_t lent_buffers;  /* pool buffers holding a chunk now */
  uint64_t idle_buffers;  /* pool buffers waiting for a chunk now */
  uint64_t idle_bytes;
} tsr_xfer_pool_stats;

/* Keeps at most idle_limit bytes of idle buffers, pools chunks up to
 * max_class bytes, makes spares in the background or not (default: not;
 * a process that makes them calls tsr_xfer_pool_trim before it exits,
 * which waits for a spare in the making). Any thread; takes effect for
 * later puts and takes. */
void tsr_xfer_pool_configure(size_t idle_limit, size_t max_class, bool spares);
void tsr_xfer_pool_get_stats(tsr_xfer_pool_stats *stats);
/* Unmaps every idle buffer (shutdown; memory pressure). Buffers lent to
 * chunks are unmapped when those are released after it. */
void tsr_xfer_pool_trim(void);
/* Warming: have `count` pooled buffers that fit chunks of nbytes, idle or
 * lent, before fetches need them (within the idle limit; nothing for a
 * size the pool does not take, or with TESSERA_RECV_POOL=0).
 * _warm asks the background maker (lower CPU priority; only in a process
 * that makes spares, i.e. a worker) and returns at once; _fill maps them
 * on the calling thread (worker start) and returns how many it made.
 * Any thread. */
void tsr_xfer_pool_warm(size_t nbytes, unsigned count);
unsigned tsr_xfer_pool_fill(size_t nbytes, unsigned count);

/* Received bytes are aligned to the largest element size (8: i64, f64), so
 * every element load is aligned. Not to a cache line: ZeroMQ puts a large
 * frame 8 bytes past one (after its own header), and a copy to realign it
 * costs about as much as the transfer (a 64 MiB chunk's fresh pages are
 * faulted twice). Kernels load their inputs unaligned or pack them first;
 * a client's gather realigns to 64 for its public contract (client/gather.c). */
#define TSR_XFER_ALIGN 8

/* How long a fetch waits for a connection to the peer before it reports
 * TSR_ECONN (the peer is down or unreachable). */
#define TSR_XFER_CONNECT_MS 3000

/* Fetches key from the peer, waiting at most timeout_ms. On success fills
 * hdr and out (bytes exactly as sent; zero-copy from the receive buffer
 * when ZeroMQ placed it on a TSR_XFER_ALIGN boundary, else one copy).
 * Errors: TSR_ECONN (no connection to the peer within TSR_XFER_CONNECT_MS),
 * TSR_ETIMEDOUT (the connection is then unusable: close it),
 * TSR_ENOTFOUND (the peer does not hold key), TSR_EPROTO. */
int tsr_xfer_get(tsr_xfer_conn *conn, const char *key, int timeout_ms, tsr_chunk_header *hdr, tsr_xfer_data *out,
                 tsr_errbuf *err);
/* Asked about every TSR_XFER_ABORT_SLICE_MS while a reply is awaited: true
 * abandons the fetch. A peer that stopped (SIGSTOP, a hung host) keeps its
 * connection open, so only someone else's knowledge — the scheduler
 * declaring it dead — ends the wait before the timeout. */
typedef bool (*tsr_xfer_abort_fn)(void *ctx, const char *address);
#define TSR_XFER_ABORT_SLICE_MS 100
/* tsr_xfer_get, also ending with TSR_ECONN ("abandoned") as soon as
 * abort(ctx, address) says so; the connection is then unusable: close it.
 * abort may be NULL. */
int tsr_xfer_get_abortable(tsr_xfer_conn *conn, const char *key, int timeout_ms, tsr_xfer_abort_fn abort,
                           void *ctx, tsr_chunk_header *hdr, tsr_xfer_data *out, tsr_errbuf *err);
void tsr_xfer_data_release(tsr_xfer_data *data);        /* idempotent */

/* ---------- data plane: serving ---------- */
typedef struct tsr_xfer_server tsr_xfer_server;

/* What a lookup hands the server for one chunk: its header, its bytes and a
 * release callback invoked once ZeroMQ no longer needs the bytes. The
 * callback may run on ZeroMQ's I/O thread: it must only drop a reference. */
typedef struct tsr_xfer_chunk {
  tsr_meta meta;
  const void *data;
  size_t nbytes;
  void (*release)(void *data, void *hint);
  void *hint;
  bool device_ok;   /* in: set by the server before the lookup: data may be CUDA device memory */
  bool on_device;   /* out: data is device memory (only when device_ok) */
} tsr_xfer_chunk;

/* Returns 0 and fills chunk, or TSR_ENOTFOUND. Runs on the serving thread. */
typedef int (*tsr_xfer_lookup_fn)(void *arg, const char *key, tsr_xfer_chunk *chunk);

int tsr_xfer_server_open(void *zctx, const char *endpoint, const char *advertise_host, tsr_xfer_server **srv_p,
                         tsr_errbuf *err);
/* The same as a CURVE server with curve's secret key (NULL or off:
 * plaintext); ZAP domain "tessera-data": the context's ZAP handler decides
 * who may connect. The bound address has no key tag; the caller adds it. */
int tsr_xfer_server_open_curve(void *zctx, const char *endpoint, const char *advertise_host,
                               const struct tsr_curve *curve, tsr_xfer_server **srv_p, tsr_errbuf *err);
/* The same with a transport: ZMQ binds the ROUTER at endpoint (as above);
 * UCX listens on endpoint's host and port instead (tcp://HOST:PORT only);
 * AUTO binds the ROUTER and a UCX listener on the same host, any port,
 * unless CURVE is on (UCX has no CURVE: ZeroMQ only) or UCX cannot start
 * (logged; ZeroMQ only). The address is then "ucx://...,tcp://...".
 * UCX with CURVE keys, or UCX that cannot start: TSR_EINVAL / TSR_ECONN
 * with the reason. The lookup's release callback runs on the serving
 * thread for UCX sends, on ZeroMQ's I/O thread for ZeroMQ ones. */
int tsr_xfer_server_open_transport(void *zctx, const char *endpoint, const char *advertise_host,
                                   const struct tsr_curve *curve, tsr_transport transport, tsr_xfer_server **srv_p,
                                   tsr_errbuf *err);
void tsr_xfer_server_close(tsr_xfer_server **srv_p);
/* Every alternative, most preferred first. */
const char *tsr_xfer_server_address(const tsr_xfer_server *srv);
void *tsr_xfer_server_socket(tsr_xfer_server *srv);      /* the ROUTER, NULL when UCX only */
bool tsr_xfer_server_has_ucx(const tsr_xfer_server *srv);
/* What the serving thread polls: the ROUTER and/or the UCX wakeup fd,
 * written to items (cap >= 2). Returns how many. */
int tsr_xfer_server_pollitems(tsr_xfer_server *srv, zmq_pollitem_t *items, int cap);
/* Serves every request waiting, on either transport, without blocking.
 * Call it when any poll item fired. Returns the number served. Malformed
 * requests get an error reply and are counted. */
int tsr_xfer_server_serve(tsr_xfer_server *srv, tsr_xfer_lookup_fn lookup, void *arg);
/* Bytes and chunks served since open (for metrics). */
uint64_t tsr_xfer_server_bytes(const tsr_xfer_server *srv);

#endif
