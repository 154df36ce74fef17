/* common/zmtp internals: one connection's state machine (conn.c), the
 * wire's pieces (codec.c), CurveZMQ (curve.c) and the sockets that own
 * connections (socket.c). Everything here runs under the socket's mutex. */
#ifndef TSR_COMMON_ZMTP_INT_H
#define TSR_COMMON_ZMTP_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "util/util.h"
#include "zmtp.h"

/* ---------- the wire (codec.c) ---------- */

#define ZMTP_GREETING_LEN 64
#define ZMTP_FLAG_MORE 0x01
#define ZMTP_FLAG_LONG 0x02
#define ZMTP_FLAG_COMMAND 0x04
#define ZMTP_MAX_HEADER 9

typedef enum { MECH_NULL, MECH_CURVE } zmtp_mech;

/* Our greeting: version 3.0, the mechanism, as-server. */
void zmtp_greeting(uint8_t out[ZMTP_GREETING_LEN], zmtp_mech mech, bool as_server);
/* Checks a peer's greeting: 0 with its mechanism, or -1 with why. */
int zmtp_greeting_parse(const uint8_t in[ZMTP_GREETING_LEN], zmtp_mech *mech_p, const char **why_p);
/* A frame header for len bytes: writes it and returns its length (2 or 9). */
size_t zmtp_header(uint8_t out[ZMTP_MAX_HEADER], uint8_t flags, size_t len);
/* Parses a frame header from n bytes: 1 with flags, body length and header
 * length; 0 when more bytes are needed. */
int zmtp_header_parse(const uint8_t *in, size_t n, uint8_t *flags_p, uint64_t *len_p, size_t *header_len_p);

/* The metadata our READY / INITIATE carry: Socket-Type, Identity (empty). */
size_t zmtp_metadata(uint8_t *out, size_t cap, bool router);
/* Reads a peer's metadata: 0 with its socket type checked against ours and
 * its announced identity (borrowed; may be empty), or -1 with why. */
int zmtp_metadata_parse(const uint8_t *in, size_t n, bool router, const uint8_t **id_p, size_t *id_len_p,
                        const char **why_p);
/* A command's name: 1 when the frame body is the command `name`. */
bool zmtp_is_command(const uint8_t *body, size_t len, const char *name);

/* Endpoints (endpoint.c): ZeroMQ's spelling to a socket address, and back. */
int zmtp_endpoint_parse(const char *endpoint, bool for_bind, struct sockaddr_storage *addr, socklen_t *len_p,
                        tsr_errbuf *err);
/* The endpoint's syntax only (no name lookup): 0 or TSR_EINVAL. */
int zmtp_endpoint_check(const char *endpoint, tsr_errbuf *err);
void zmtp_endpoint_format(const struct sockaddr_storage *addr, socklen_t len, char *out, size_t cap);

/* ---------- CurveZMQ (curve.c) ---------- */

typedef struct zmtp_keys {
  bool on;
  uint8_t secret[32], public_[32];   /* ours, long-term */
  uint8_t server[32];                /* a dealer's view of the router's public key */
} zmtp_keys;

typedef struct zmtp_curve {
  uint8_t cn_public[32], cn_secret[32];   /* ours, short-term */
  uint8_t peer_cn[32];                    /* the peer's short-term key */
  uint8_t precom[32];                     /* crypto_box_beforenm(peer_cn, cn_secret) */
  uint8_t cookie_key[32];                 /* router: this connection's cookie key */
  uint8_t cookie[96];                     /* dealer: the router's cookie */
  uint64_t nonce, peer_nonce;             /* ours (next to use), the peer's last */
  uint8_t client_key[32];                 /* router: the client's long-term key */
} zmtp_curve;

/* Our keys from Z85 text (NULL or "" secret: off). 0 or TSR_EINVAL. */
int zmtp_keys_load(zmtp_keys *keys, const char *secret, const char *server, bool dealer, tsr_errbuf *err);
void zmtp_curve_start(zmtp_curve *cv);
/* The handshake's commands: each writes a command body into out (cap
 * >= 256 + metadata) and returns its length, or 0 on failure. The
 * processing steps return 0, or -1 with why. */
size_t zmtp_curve_hello(zmtp_curve *cv, const zmtp_keys *keys, uint8_t *out);
int zmtp_curve_on_hello(zmtp_curve *cv, const zmtp_keys *keys, const uint8_t *in, size_t n, const char **why_p);
size_t zmtp_curve_welcome(zmtp_curve *cv, const zmtp_keys *keys, uint8_t *out);
int zmtp_curve_on_welcome(zmtp_curve *cv, const zmtp_keys *keys, const uint8_t *in, size_t n, const char **why_p);
size_t zmtp_curve_initiate(zmtp_curve *cv, const zmtp_keys *keys, const uint8_t *meta, size_t meta_len,
                           uint8_t *out, size_t cap);
/* Opens an INITIATE in place: its metadata (inside in) and the client's key
 * (cv->client_key). */
int zmtp_curve_on_initiate(zmtp_curve *cv, uint8_t *in, size_t n, const uint8_t **meta_p, size_t *meta_len_p,
                           const char **why_p);
size_t zmtp_curve_ready(zmtp_curve *cv, const uint8_t *meta, size_t meta_len, uint8_t *out, size_t cap);
int zmtp_curve_on_ready(zmtp_curve *cv, uint8_t *in, size_t n, const uint8_t **meta_p, size_t *meta_len_p,
                        const char **why_p);
/* A MESSAGE box's size for a payload of len bytes. */
#define ZMTP_CURVE_BOX_EXTRA (8 + 8 + 16 + 1)
/* Seals flags and payload into out (ZMTP_CURVE_BOX_EXTRA + len bytes). */
void zmtp_curve_seal(zmtp_curve *cv, bool router, uint8_t flags, const void *payload, size_t len, uint8_t *out);
/* Opens a MESSAGE box in place: 0 with the inner flags and the payload
 * (inside in), or -1 with why. */
int zmtp_curve_open(zmtp_curve *cv, bool router, uint8_t *in, size_t n, uint8_t *flags_p, uint8_t **payload_p,
                    size_t *len_p, const char **why_p);

/* ---------- connections (conn.c) ---------- */

typedef enum {
  CONN_CONNECTING,   /* dealer: a non-blocking connect() in progress */
  CONN_GREETING,     /* waiting for the peer's greeting */
  CONN_HANDSHAKE,    /* mechanism commands */
  CONN_READY,        /* messages */
  CONN_DEAD,         /* closed; freed after the current round */
} conn_state;

typedef enum {   /* where a CURVE handshake stands */
  CV_EXPECT_HELLO, CV_EXPECT_INITIATE,       /* router */
  CV_EXPECT_WELCOME, CV_EXPECT_READY,        /* dealer */
} curve_step;

typedef struct out_buf {
  struct out_buf *next;
  uint8_t *data;      /* owned */
  size_t len, off;
} out_buf;

typedef struct zmtp_conn {
  int fd;
  conn_state state;
  curve_step step;
  uint64_t deadline_ms;          /* handshake deadline */
  char peer_address[80];
  /* input: bytes read and not parsed yet */
  uint8_t *in;
  size_t in_len, in_off, in_cap;
  /* a large frame read straight into its own buffer */
  uint8_t *big;
  size_t big_len, big_got;
  uint8_t big_flags;
  /* the message being assembled */
  tsr_zmtp_msg cur;
  bool cur_open;
  /* output */
  out_buf *out_head, *out_tail;
  bool want_out;                 /* EPOLLOUT registered */
  /* identity */
  uint8_t id[TSR_ZMTP_ID_MAX];
  size_t id_len;
  char key[TSR_ZMTP_KEY_LEN + 1];
  zmtp_curve *curve;             /* NULL with the NULL mechanism */
  uint32_t slot;                 /* router: index in the socket's connection table */
  struct zmtp_conn *next_dead;   /* the socket's list of connections closed this round */
} zmtp_conn;

typedef struct msg_node {
  struct msg_node *next;
  tsr_zmtp_msg msg;
} msg_node;

typedef struct pending_frame {   /* dealer: sent before the handshake was done */
  struct pending_frame *next;
  void *data;
  size_t len;
} pending_frame;

struct tsr_zmtp {
  pthread_mutex_t mu;
  bool router;
  char what[64];
  size_t max_frame;
  unsigned max_peers, handshake_ms, reconnect_ms, reconnect_max_ms, backoff_ms;
  zmtp_keys keys;
  tsr_zmtp_admit_fn admit;
  void *admit_arg;
  void (*log)(void *arg, int level, const char *line);
  void *log_arg;
  int efd;                       /* epoll over everything below */
  int lfd;                       /* router: the listener, else -1 */
  int tfd;                       /* timerfd: retries and handshake deadlines */
  int evfd;                      /* eventfd: readable while the inbox holds messages */
  bool ev_set;
  char ipc_path[108];            /* router on a filesystem ipc path: unlinked at close */
  /* connections: the router's table (slots reused), the dealer's one */
  zmtp_conn **conns;
  uint32_t nconns, conns_cap;
  tsr_strmap *by_id;             /* router: routing id -> slot */
  size_t ready_peers;
  uint32_t next_id;
  size_t handshaking;
  zmtp_conn *dead;               /* closed in this round, freed at its end (next_dead) */
  /* dealer */
  char endpoint[256];
  uint64_t retry_at_ms;          /* 0: none */
  pending_frame *pending_head, *pending_tail;
  /* received, not taken */
  msg_node *inbox_head, *inbox_tail;
  unsigned long refusals;
};

/* Connection life (conn.c). conn_new takes fd (non-blocking). */
zmtp_conn *zmtp_conn_new(tsr_zmtp *s, int fd, conn_state state, const char *peer_address);
/* After a connect completed or an accept: our greeting out. */
void zmtp_conn_start(tsr_zmtp *s, zmtp_conn *c);
/* Reads what the fd holds (up to a fair share) and handles it. */
void zmtp_conn_on_readable(tsr_zmtp *s, zmtp_conn *c);
/* Writes queued output. */
void zmtp_conn_on_writable(tsr_zmtp *s, zmtp_conn *c);
/* Queues one frame of a message for the peer (encoded for the mechanism:
 * a CURVE box, or header and body); takes data when owned. -1 ENOMEM. */
int zmtp_conn_send(tsr_zmtp *s, zmtp_conn *c, const void *data, size_t len, bool owned);
/* Closes the fd and marks it dead (freed by zmtp_conn_free). */
void zmtp_conn_kill(tsr_zmtp *s, zmtp_conn *c, const char *why);
void zmtp_conn_free(zmtp_conn *c);
/* Counts a refused handshake and logs why. */
void zmtp_refuse(tsr_zmtp *s, zmtp_conn *c, const char *why);

/* A line for the socket's log (opts.log, or the process's logger). */
void zmtp_log(tsr_zmtp *s, tsr_log_level level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* What the socket does with a connection (socket.c). */
void zmtp_sock_on_ready(tsr_zmtp *s, zmtp_conn *c, const uint8_t *announced_id, size_t id_len);
void zmtp_sock_deliver(tsr_zmtp *s, zmtp_conn *c, tsr_zmtp_msg *msg);
void zmtp_sock_on_dead(tsr_zmtp *s, zmtp_conn *c);
bool zmtp_sock_admit(tsr_zmtp *s, zmtp_conn *c);
void zmtp_epoll_set(tsr_zmtp *s, zmtp_conn *c, bool want_out);

#endif
