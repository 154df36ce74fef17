/* common/net/curve — ZeroMQ CURVE for every socket of ours (docs/security.md).
 *
 * Keys are Z85 text (40 characters for 32 bytes), one a file, as
 * `tessera keygen` writes them: NAME.key holds the secret key, NAME.pub the
 * public key. A process with keys (tsr_curve.on) makes its listening
 * sockets CURVE servers and its connecting sockets CURVE clients.
 *
 * A tsr_zap is the ZAP handler of one zmq context (inproc://zeromq.zap.01,
 * one per context): a thread that admits a CURVE client only when its
 * public key is in the handler's key set, logs every refusal with the key
 * and the peer's address, and, when a monitored socket reports a failed
 * handshake (no keys, a wrong server key), logs that too. The key set is
 * replaced or edited from any thread (a mutex); with tsr_zap_watch the
 * thread reloads it from a file when a flag (a signal handler's) is set.
 *
 * Threading: tsr_curve_* functions are pure; a tsr_zap may be edited from
 * any thread. */
#ifndef TSR_COMMON_CURVE_H
#define TSR_COMMON_CURVE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/util.h"

#define TSR_CURVE_KEY_LEN 40   /* Z85 text of a 32-byte key */

typedef struct tsr_curve {
  bool on;                                   /* false: plaintext, the fields are "" */
  char public_key[TSR_CURVE_KEY_LEN + 1];    /* ours, derived from the secret */
  char secret_key[TSR_CURVE_KEY_LEN + 1];
  char server_key[TSR_CURVE_KEY_LEN + 1];    /* the scheduler's public key; "" in the scheduler */
} tsr_curve;

/* True when s (len bytes) is a Z85 key of TSR_CURVE_KEY_LEN characters. */
bool tsr_curve_key_valid(const char *s, size_t len);

/* Reads the first key of a key file (blank lines and lines starting with
 * "# " are skipped) into out. 0, or TSR_EIO / TSR_EINVAL naming the file. */
int tsr_curve_read_key(const char *path, char out[TSR_CURVE_KEY_LEN + 1], tsr_errbuf *err);

/* Fills c from a secret-key file and, unless server_key_path is NULL (the
 * scheduler), the scheduler's public-key file. Warns when the secret file
 * is readable by others. 0 or TSR_EIO / TSR_EINVAL naming the file. */
int tsr_curve_load(tsr_curve *c, const char *secret_path, const char *server_key_path, tsr_errbuf *err);

/* Makes sock a CURVE server with c's secret (before bind); zap_domain names
 * the ZAP domain (ZAP is asked about every client). 0 or TSR_ECONN. */
int tsr_curve_server(void *sock, const tsr_curve *c, const char *zap_domain, tsr_errbuf *err);
/* Makes sock a CURVE client of the server with public key server_key
 * (before connect). 0 or TSR_ECONN. */
int tsr_curve_client(void *sock, const tsr_curve *c, const char *server_key, tsr_errbuf *err);

/* A data address carries its worker's public key when the data socket is a
 * CURVE server: "tcp://HOST:PORT#curve=KEY". Writes the plain endpoint into
 * endpoint and the key (or "") into key. */
#define TSR_CURVE_ADDR_TAG "#curve="
void tsr_curve_split_address(const char *address, char *endpoint, size_t cap, char key[TSR_CURVE_KEY_LEN + 1]);

/* ---------- key sets (allow-lists) ---------- */
typedef struct tsr_keyset {
  char (*keys)[TSR_CURVE_KEY_LEN + 1];
  size_t n, cap;
} tsr_keyset;

/* Loads an allow-list: a directory (every *.pub inside, one key each) or a
 * file (one key a line; blank lines and "# " comments skipped). Replaces
 * set's contents only on success. 0, or TSR_EIO / TSR_EINVAL naming the
 * file and line. An empty list is allowed (nobody gets in). */
int tsr_keyset_load(tsr_keyset *set, const char *path, tsr_errbuf *err);
bool tsr_keyset_has(const tsr_keyset *set, const char *key);
int tsr_keyset_add(tsr_keyset *set, const char *key);        /* 0 or TSR_ENOMEM; a present key is kept once */
void tsr_keyset_remove(tsr_keyset *set, const char *key);
void tsr_keyset_free(tsr_keyset *set);

/* ---------- the ZAP handler ---------- */
typedef struct tsr_zap tsr_zap;

/* Starts the ZAP handler of zctx; what names the guarded socket in log
 * lines ("scheduler", "data socket"), refusal says why a key is refused
 * ("not on the allow-list"). The key set starts empty. 0 or TSR_ECONN
 * (another handler is bound in zctx) / TSR_ENOMEM. */
int tsr_zap_start(void *zctx, const char *what, const char *refusal, tsr_zap **zap_p, tsr_errbuf *err);
/* Stops the thread and frees; call before zmq_ctx_term. NULL is a no-op. */
void tsr_zap_stop(tsr_zap **zap_p);
/* Replaces the key set (takes set's contents, leaving it empty). */
void tsr_zap_replace(tsr_zap *zap, tsr_keyset *set);
/* Adds / removes one key. 0 or TSR_ENOMEM. */
int tsr_zap_allow(tsr_zap *zap, const char *key, bool allow);
/* Reloads the key set from path (tsr_keyset_load) whenever *flag is
 * nonzero, then clears it; a list that fails to load is logged and the old
 * one kept. Call before any reload may be wanted. */
void tsr_zap_watch(tsr_zap *zap, const char *path, volatile sig_atomic_t *flag);
/* Logs the failed CURVE handshakes of sock (a client without keys or with
 * a wrong server key never reaches ZAP). Call from sock's thread. 0 or
 * TSR_ECONN. */
int tsr_zap_monitor(tsr_zap *zap, void *sock, tsr_errbuf *err);
/* Handshakes refused since start (ZAP and monitor), for tests and metrics. */
unsigned long tsr_zap_refusals(tsr_zap *zap);

#endif
