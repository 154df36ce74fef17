/* common/zmtp — the control plane's sockets: ZMTP 3.0, ZeroMQ's wire
 * protocol (rfc.zeromq.org/spec/23), over TCP and Unix sockets, with the
 * NULL or the CURVE mechanism (spec 26; libsodium does the cryptography),
 * driven from the calling thread.
 *
 * Why not libzmq, which the data plane still uses: libzmq hands every frame
 * to its I/O threads, so each message wakes the sender's I/O thread, the
 * receiver's I/O thread and the receiving thread — three thread wake-ups a
 * leg, 115-150 us of a four-leg round trip (client -> scheduler -> worker ->
 * scheduler -> client) on a 2-core VM before any work of ours
 * (bench/RESULTS.md, "The round trip hop by hop"). Here a send is a
 * sendmsg() on the sender's thread and a receive a read() on the
 * receiver's: one wake-up a leg. No maintained C library speaks ZMTP
 * without threads of its own. The wire is ZeroMQ's, byte for byte, so
 * libzmq peers (tools, the tests' raw sockets, bench/scale) still talk to
 * our daemons, and our sockets to theirs.
 *
 * Two kinds of socket:
 * - a router listens (tcp://HOST:PORT with HOST an address, a name or *,
 *   PORT a number, 0 or * for any; ipc://PATH; ipc://@NAME, Linux's
 *   abstract namespace), accepts any number of peers (DEALER, REQ or
 *   ROUTER), names each by the Identity it announced or, as libzmq, by 5
 *   bytes (0x00 and a 32-bit counter), delivers each message with its
 *   peer's id, and sends to a peer by id; a message for a peer that is gone
 *   is dropped (EHOSTUNREACH), as ZMQ_ROUTER_MANDATORY off;
 * - a dealer connects to one endpoint, in the background and again after a
 *   loss (the interval doubling up to a maximum), keeps what is sent before
 *   its handshake is done, and writes it then. Frames already handed to a
 *   connection that breaks are lost, as with libzmq.
 *
 * Limits checked before allocating: a frame larger than max_frame closes its
 * connection; a message's frames past TSR_ZMTP_MAX_FRAMES are read and
 * dropped (truncated); a router closes connections past max_peers at once;
 * a connection that has not finished its handshake within handshake_ms is
 * closed. Queues are not bounded (ZeroMQ's high-water marks are off on our
 * control sockets too): control traffic is never dropped for a slow reader.
 *
 * Threading: every call takes the socket's mutex, so one thread may send
 * while another receives (the client's API thread writes its own frames).
 * Nothing blocks but tsr_zmtp_flush: callers poll tsr_zmtp_fd() for
 * POLLIN — it is readable whenever the socket has work: a connection to
 * accept, bytes to read, output to write, a retry or deadline due, a
 * message received and not yet taken — and then call tsr_zmtp_recv() until
 * it returns 0. */
#ifndef TSR_COMMON_ZMTP_H
#define TSR_COMMON_ZMTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define TSR_ZMTP_KEY_LEN 40      /* Z85 text of a 32-byte CURVE key */
#define TSR_ZMTP_ID_MAX 255      /* a routing id's bytes */
#define TSR_ZMTP_MAX_FRAMES 4    /* frames kept of one message */

typedef struct tsr_zmtp tsr_zmtp;

/* A CURVE router's verdict on a client's long-term public key (Z85) and
 * the address it connects from. Runs inside tsr_zmtp_recv (the socket's
 * mutex held: it must not call the socket); true admits. It logs its own
 * refusals; the socket counts them. */
typedef bool (*tsr_zmtp_admit_fn)(void *arg, const char *key, const char *peer_address);

typedef struct tsr_zmtp_opts {
  const char *what;            /* names the socket in log lines ("socket" when NULL) */
  size_t max_frame;            /* a larger frame closes its connection (0: 2 GiB) */
  unsigned max_peers;          /* router: connections past it are closed at once (0: no limit) */
  const char *secret_key;      /* CURVE: our secret key (Z85); NULL or "": the NULL mechanism */
  const char *server_key;      /* dealer with CURVE: the router's public key (Z85) */
  tsr_zmtp_admit_fn admit;     /* router with CURVE: who may connect (NULL: any key) */
  void *admit_arg;
  unsigned reconnect_ms;       /* dealer: the first retry after a failed connect or a loss (0: 100) */
  unsigned reconnect_max_ms;   /* dealer: retries back off, doubling, up to this (0: reconnect_ms) */
  unsigned handshake_ms;       /* handshake deadline (0: 10000) */
  /* where the socket's lines go (refusals at warn, closes at debug); NULL:
   * the process's logger (common/util). A library passes its caller's. */
  void (*log)(void *arg, int level, const char *line);
  void *log_arg;
} tsr_zmtp_opts;

/* One received message. Its frames belong to the caller until
 * tsr_zmtp_msg_close. */
typedef struct tsr_zmtp_msg {
  int nframes;                     /* frames kept, 1..TSR_ZMTP_MAX_FRAMES */
  bool truncated;                  /* it had more; those were dropped */
  void *data[TSR_ZMTP_MAX_FRAMES];
  size_t len[TSR_ZMTP_MAX_FRAMES];
  uint8_t id[TSR_ZMTP_ID_MAX];     /* router: the sending peer's routing id */
  size_t id_len;
  char key[TSR_ZMTP_KEY_LEN + 1];  /* CURVE: the sender's public key (Z85), else "" */
} tsr_zmtp_msg;

/* A router bound to endpoint; the address peers connect to (the port
 * chosen, a wildcard host as 0.0.0.0) is written to bound. 0, or TSR_EINVAL
 * (a bad endpoint or key) / TSR_ECONN (cannot bind) with the reason. */
int tsr_zmtp_bind(const char *endpoint, const tsr_zmtp_opts *opts, tsr_zmtp **sock_p, char *bound, size_t cap,
                  tsr_errbuf *err);
/* A dealer connecting to endpoint in the background. 0, or TSR_EINVAL
 * (a bad endpoint or key) with the reason; an unreachable peer is retried. */
int tsr_zmtp_connect(const char *endpoint, const tsr_zmtp_opts *opts, tsr_zmtp **sock_p, tsr_errbuf *err);
/* Closes every connection at once (what is unsent is dropped: call
 * tsr_zmtp_flush first to give it a moment). NULL is a no-op. */
void tsr_zmtp_close(tsr_zmtp **sock_p);

/* Poll it for POLLIN, then call tsr_zmtp_recv until it returns 0. */
int tsr_zmtp_fd(tsr_zmtp *sock);
/* Does the socket's pending work (accepts, reads, writes, retries,
 * deadlines) and takes the oldest received message: 1 with *msg filled,
 * 0 when none is waiting. */
int tsr_zmtp_recv(tsr_zmtp *sock, tsr_zmtp_msg *msg);
void tsr_zmtp_msg_close(tsr_zmtp_msg *msg);

/* Sends one single-frame message: to the peer named by id on a router, to
 * the connection on a dealer (id ignored). What cannot be written at once
 * is queued: _send copies it, _send_owned takes data (malloc'd; freed by
 * the socket, also on failure). 0, or -1 with errno EHOSTUNREACH (a router
 * with no such peer: the message is dropped) or ENOMEM. */
int tsr_zmtp_send(tsr_zmtp *sock, const void *id, size_t id_len, const void *data, size_t len);
int tsr_zmtp_send_owned(tsr_zmtp *sock, const void *id, size_t id_len, void *data, size_t len);

/* Dealer: waits up to timeout_ms for everything queued to be written, then
 * returns 0, or TSR_ETIMEDOUT (also when never connected). Router: 0. */
int tsr_zmtp_flush(tsr_zmtp *sock, int timeout_ms);
/* Dealer: true while a connection has finished its handshake. */
bool tsr_zmtp_connected(tsr_zmtp *sock);
/* Router: peers connected now (handshakes done). */
size_t tsr_zmtp_peers(tsr_zmtp *sock);
/* Handshakes refused or failed since open (a wrong mechanism, a wrong key,
 * a key the admit function refused), for tests and metrics. */
unsigned long tsr_zmtp_refusals(tsr_zmtp *sock);

/* Z85 (rfc.zeromq.org/spec/32) for 32-byte keys: 0, or -1 when text is not
 * TSR_ZMTP_KEY_LEN characters of Z85. */
int tsr_zmtp_z85_decode(const char *text, uint8_t key[32]);
void tsr_zmtp_z85_encode(const uint8_t key[32], char text[TSR_ZMTP_KEY_LEN + 1]);

#endif
