/* client/internal.h — the private structures of libtessera.
 *
 * Threading model (docs/client.md tells the whole story):
 * - The socket to the scheduler is a common/zmtp dealer: frames leave on
 *   the thread that sends them, under `mu` (so in the order they were
 *   made), and arrive on the thread that reads them. API calls write their
 *   frames themselves; the I/O thread reads, keeps time (heartbeats,
 *   session loss) and replaces the socket on a reconnect, under `mu`. The
 *   outbox holds frames only while there is no socket; `wake_fd` (an
 *   eventfd the I/O thread polls beside the socket) tells it of them and
 *   of a stop.
 * - Everything the I/O thread learns (welcome, submit replies, key states,
 *   status replies, session loss) is written under `mu`, followed by a
 *   broadcast on `cv`. API calls wait on `cv` with a monotonic deadline.
 * - Key entries are shared by futures (refcount `refs`); an entry stays in
 *   `keys` while some live future wants it.
 * - The client struct itself is refcounted (`handles`): tsr_client_close()
 *   stops the thread and drops one reference, each live future holds one, so
 *   a future released after the close still finds valid memory.
 *
 * Nothing here logs through common/util's process-wide logger: a library
 * must not print, so every line goes to the caller's callback (client_log). */
#ifndef TSR_CLIENT_INTERNAL_H
#define TSR_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/tessera.h"

#include "net/curve.h"
#include "net/net.h"
#include "util/util.h"
#include "wire/wire.h"

/* Marks a definition as part of the exported API (the library is compiled
 * with -fvisibility=hidden; client/tessera.map is the second fence). */
#define TSR_API __attribute__((visibility("default")))

/* Tasks per submit message: big graphs travel as several parts. */
#define CLIENT_SUBMIT_PART_TASKS 50000
#define CLIENT_SUBMIT_PART_WEIGHT 250000
/* Keys per release message. */
#define CLIENT_RELEASE_PART_KEYS 50000
/* Addresses kept per key_done. */
#define CLIENT_MAX_WHERE 64
/* How long futures wait for a lost scheduler to come back (reconnect.c);
 * TESSERA_RECONNECT_TIMEOUT overrides. */
#define CLIENT_RECONNECT_DEFAULT_MS 30000
/* Idle data-plane connections kept for reuse. */
#define CLIENT_XFER_CACHE 32

/* ---------- CURVE (curve.c) ---------- */
/* Loads the keys named by opts or the environment into c->curve. 0 or
 * TSR_EINVAL / TSR_EIO with the message set. */
int client_curve_setup(tsr_client *c, const tsr_client_opts *opts);
/* The CURVE keys of the scheduler connection (both NULL without CURVE). */
void client_curve_keys(const tsr_client *c, const char **secret_p, const char **server_p);

/* ---------- thread-local error text (errmsg.c) ---------- */
/* Sets this thread's message from err (or tsr_strerror(rc) when err is
 * empty) and returns rc. */
int client_fail_err(int rc, const tsr_errbuf *err);
/* Formats this thread's message and returns rc. */
int client_fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------- reconnect.c ---------- */
uint64_t client_random_id(void);
/* Reads TESSERA_RECONNECT_TIMEOUT (default CLIENT_RECONNECT_DEFAULT_MS). */
int client_env_reconnect(int64_t *ms_p);
/* The scheduler went quiet or forgot us: requests fail, futures wait for
 * the next welcome (client_welcomed_again_locked) or the window's end
 * (client_reconnect_tick_locked). Caller holds mu. */
void client_session_suspend_locked(tsr_client *c, const char *why);
void client_reconnect_tick_locked(tsr_client *c, uint64_t now_ms);
/* A welcome: resumed keeps the futures (keys back to PENDING, the
 * scheduler re-sends their states), else they fail with why. */
void client_welcomed_again_locked(tsr_client *c, bool resumed, uint64_t incarnation, bool journal);

/* ---------- keys ---------- */
typedef enum { KEY_PENDING = 0, KEY_DONE, KEY_ERRED } key_state;

typedef struct key_entry {
  char *key;
  key_state state;
  uint64_t epoch;       /* session in which it was (re)submitted */
  uint64_t gen;         /* bumped on each key_done / key_lost / key_erred */
  tsr_meta meta;
  uint64_t nbytes;
  char **where;         /* data addresses holding it (when DONE) */
  size_t n_where;
  char *error;          /* message of key_erred */
  size_t refs;          /* live futures wanting it */
} key_entry;

/* ---------- outgoing frames ---------- */
typedef struct out_frame {
  struct out_frame *next;
  char *data;           /* malloc'd, ownership passes to the I/O thread */
  size_t len;
} out_frame;

typedef struct pending_submit {
  struct pending_submit *next;
  uint64_t graph;
  bool done;
  bool interrupted;   /* parts lost with a suspended session (reconnect.c) */
  bool resend;        /* the session resumed: send every part again */
  int rc;
  uint64_t tasks;
  char message[TSR_ERRMSG_LEN];
} pending_submit;

typedef struct pending_status {
  struct pending_status *next;
  uint64_t req;
  bool done;
  int rc;
  tsr_cluster_info *info;
  char message[TSR_ERRMSG_LEN];
} pending_status;

/* ---------- progress (progress.c) ---------- */
/* One submitted graph's progress, kept while its future lives. Written by
 * the I/O thread under mu; `fut_pending` / `cli_pending` mark a call due. */
typedef struct client_pgraph {
  struct client_pgraph *next;
  tsr_progress p;               /* monotone counts; p.groups = groups */
  tsr_progress_group *groups;   /* op names malloc'd, never renamed */
  size_t cap_groups;
  struct tsr_future *future;    /* its future */
  tsr_progress_fn fut_fn;       /* the future's callback, or NULL */
  void *fut_user;
  bool fut_pending, cli_pending;
  bool fut_final, cli_final;    /* the final call went out */
} client_pgraph;

typedef enum { CONN_CONNECTING = 0, CONN_UP, CONN_LOST, CONN_CLOSED } conn_state;

struct tsr_client {
  char address[TSR_MAX_ADDR_LEN];
  char name[TSR_MAX_NAME_LEN + 1];
  tsr_log_fn log;
  void *log_arg;
  int opt_heartbeat_ms;
  int64_t env_timeout_ms;   /* TESSERA_HEARTBEAT_TIMEOUT, or -1 */

  tsr_curve curve;          /* CURVE keys (curve.c); .on false: plaintext */
  void *zctx;
  struct tsr_zmtp *sock;    /* to the scheduler: sends under mu; the I/O thread reads and replaces it */
  int wake_fd;
  pthread_t io;
  bool io_started;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* --- under mu --- */
  conn_state state;
  int open_rc;              /* why CONNECTING ended without a welcome */
  char open_msg[TSR_ERRMSG_LEN];
  uint64_t epoch;           /* bumped when a session is lost */
  char lost_msg[TSR_ERRMSG_LEN];  /* why the last session ended */
  uint64_t resets;          /* bumped when a DONE/ERRED key goes back to PENDING */
  uint64_t errors;          /* bumped on every key_erred */
  uint64_t peer_id;
  uint32_t hb_ms;
  uint32_t hb_timeout_ms;
  bool stop;
  bool rehello;             /* the scheduler forgot us: say hello again now */
  int close_linger_ms;      /* how long a queued goodbye may take to leave */
  uint64_t sent_ms;         /* when a frame last left (heartbeats fill silences) */
  uint64_t heard_ms;        /* when a frame last arrived (silence ends the session) */
  /* Reading while waiting (client_wait_spin): API threads spinning on the
   * socket now; whether the I/O thread's current poll includes it. */
  unsigned spinners;
  bool io_polls_sock;
  uint64_t frames_handled;  /* by anyone: a spinner's sign that something changed */
  uint32_t spin_us;         /* how long a wait reads the socket itself (TESSERA_CLIENT_SPIN_US) */
  size_t handles;           /* 1 for the open client + 1 per live future */
  out_frame *out_head, *out_tail;
  tsr_strmap *keys;         /* key -> (key_entry *) */
  pending_submit *submits;
  pending_status *statuses;
  uint64_t next_graph;
  uint64_t next_req;
  /* reconnect.c: a session suspended by a lost scheduler */
  uint64_t client_id;       /* hello's client_id, random, for the client's life */
  uint64_t incarnation;     /* the scheduler's, from its last welcome */
  bool suspended;           /* lost the scheduler; futures still wait */
  uint64_t suspended_ms;
  int64_t reconnect_ms;     /* TESSERA_RECONNECT_TIMEOUT */

  /* progress.c (under mu) */
  bool progress_on;         /* subscribed: hello says progress: true */
  client_pgraph *pgraphs;
  tsr_progress_fn cli_fn;   /* tsr_client_on_progress */
  void *cli_user;
  bool cb_client;           /* the I/O thread is in cli_fn now */
  struct tsr_future *cb_future;  /* the future whose callback runs now */
  size_t npending;          /* calls due (a hint: 0 skips the scan) */
  /* I/O thread only: the copy a callback reads */
  tsr_progress_group *cb_groups;
  size_t cap_cb_groups;

  pthread_mutex_t xmu;      /* the idle data-plane connections */
  tsr_xfer_conn *xcache[CLIENT_XFER_CACHE];
  size_t n_xcache;
};

struct tsr_future {
  tsr_client *client;
  uint64_t epoch;           /* session of the submission */
  size_t n;
  key_entry **entries;
  char *error;              /* first failure seen, owned */
  /* Incremental completion scan: entries[0..cursor) were DONE when
   * client->resets was seen_resets; see tsr_future_wait. */
  size_t cursor;
  uint64_t seen_resets;
  uint64_t seen_errors;
  /* tsr_future_next_done: which entries it returned, and the first index
   * it has not (everything before it was returned). */
  unsigned char *returned;
  size_t next_unreturned;
  client_pgraph *pg;        /* its graph's progress (progress.c), NULL on ENOMEM */
  tsr_progress_group *poll_groups;  /* tsr_future_progress_get's copy */
  size_t cap_poll_groups;
};

/* ---------- client.c ---------- */
void client_log(tsr_client *c, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Sends frames (a NULL-terminated chain, ownership passes) on the socket,
 * or, while there is none, queues them and wakes the I/O thread. Caller
 * holds mu. */
void client_enqueue_locked(tsr_client *c, out_frame *chain);
/* Hands a chain to the socket (ownership passes) and notes the time in
 * sent_ms; frames it cannot take are logged and dropped. Caller holds mu;
 * c->sock is not NULL. */
void client_send_chain_locked(tsr_client *c, out_frame *chain);
void client_free_chain(out_frame *chain);
/* Builds one frame from a wbuf (emptying it). NULL on ENOMEM. */
out_frame *client_frame_from(tsr_wbuf *wb);
/* Waits on cv until deadline_ns (0: forever). Returns false on timeout. */
bool client_wait_until(tsr_client *c, uint64_t deadline_ns);
/* The same, but until spin_until_ns (client_spin_until) the waiting thread
 * reads the socket itself instead of sleeping until the I/O thread has:
 * a reply that comes within the spin costs no thread wake-up on this side
 * (two of a round trip's, ~10-40 us each on a small VM). Returns as soon
 * as any thread handled a frame, or the spin is over (the caller checks
 * its condition and calls again; past spin_until_ns this is
 * client_wait_until); false once deadline_ns passed. Caller holds mu. */
bool client_wait_spin(tsr_client *c, uint64_t deadline_ns, uint64_t spin_until_ns);
/* When a wait that starts now stops spinning (0: no spin). */
uint64_t client_spin_until(const tsr_client *c);
/* Wakes the I/O thread. Caller holds mu. */
void client_wake_io_locked(tsr_client *c);
/* Deadline for a timeout in ms (-1 forever → 0). */
uint64_t client_deadline(int timeout_ms);
/* Drops one handle. Caller holds mu; when it returns true the handle was
 * the last: the caller unlocks mu and calls client_free(). */
bool client_unref_locked(tsr_client *c);
void client_free(tsr_client *c);
/* Session errors for API calls: 0 when UP, else TSR_ECONN/TSR_ECLOSED
 * with this thread's message set. Caller holds mu. */
int client_check_up_locked(tsr_client *c);

/* The `hello` that opens every session; NULL on ENOMEM. */
out_frame *client_hello_frame(tsr_client *c);
/* Creates c->sock (a dealer connecting to c->address in the background);
 * 0 or TSR_EINVAL with this thread's message set. Caller holds mu (or no
 * other thread runs yet). */
int client_socket_open(tsr_client *c);

/* ---------- io.c ---------- */
/* Takes and handles every frame waiting on the socket (non-blocking);
 * broadcasts cv when it handled any. Returns how many. Caller holds mu. */
int client_read_locked(tsr_client *c, bool io_thread);
void *client_io_main(void *arg);
/* Marks the session lost: fails pending submits/statuses, bumps epoch. Caller holds mu. */
void client_session_lost_locked(tsr_client *c, int rc, const char *why);

/* ---------- keys.c ---------- */
key_entry *keys_acquire_locked(tsr_client *c, const char *key);
/* Drops one reference; when it was the last, removes the entry from the
 * table and frees it, or, when wire is non-NULL, appends it to *wire (a
 * release list, which keys_send_release_locked sends and frees). */
void keys_release_locked(tsr_client *c, key_entry *e, key_entry ***wire, size_t *n_wire, size_t *cap_wire);
void keys_free_entry(key_entry *e);
/* Queues release messages for the entries' keys (the array and the
 * entries are freed). */
void keys_send_release_locked(tsr_client *c, key_entry **entries, size_t n);
/* Tells the scheduler that the worker at `from` does not hold `key` (it
 * dropped it under memory pressure): key_missing, answered by a
 * recomputation (key_lost, then key_done). */
void keys_send_missing_locked(tsr_client *c, const char *key, const char *from);
/* Applies key_done / key_erred / key_lost from the scheduler. */
int keys_on_done_locked(tsr_client *c, const msgpack_object *map, tsr_errbuf *err);
int keys_on_erred_locked(tsr_client *c, const msgpack_object *map, tsr_errbuf *err);
int keys_on_lost_locked(tsr_client *c, const msgpack_object *map, tsr_errbuf *err);

/* ---------- graph.c ---------- */
/* A graph travels as submit parts of at most CLIENT_SUBMIT_PART_TASKS
 * tasks and CLIENT_SUBMIT_PART_WEIGHT tasks + input keys (the scheduler
 * unpacks a part in one go: a part of fan-ins of 100,000 inputs each held
 * its loop for a second, issue 13). graph_part_tasks: how many tasks the
 * part that starts at task `first` holds (at least one while first is
 * below the graph's size; 0 for an empty graph). graph_encode_part: that
 * part as one frame for graph id (the last part, first + count == the
 * graph's size, carries the wanted keys); NULL on ENOMEM. resend: the same
 * graph again after a resumed session (its parts may have been lost with
 * the old connection); the scheduler answers a graph it already holds with
 * `submitted` instead of an error. */
size_t graph_part_tasks(const tsr_graph *graph, size_t first);
out_frame *graph_encode_part(const tsr_graph *graph, uint64_t graph_id, size_t first, size_t count, const char **wants,
                             size_t n_wants, bool resend);
/* The wanted keys: the marked ones, or every task with no dependents. The
 * array is malloc'd; its strings are borrowed from the graph. */
int graph_wanted(const tsr_graph *graph, const char ***keys_p, size_t *n_p);

/* ---------- cluster.c ---------- */
int cluster_on_status_reply_locked(tsr_client *c, const msgpack_object *map, tsr_errbuf *err);

/* ---------- progress.c ---------- */
/* A new graph's record for future f (total from `submitted`). Caller holds mu. */
void progress_graph_new_locked(tsr_client *c, tsr_future *f, uint64_t graph, uint64_t tasks);
/* Before f is freed: unlinks its record and waits out a callback of f in
 * flight on the I/O thread (unless this is that thread). Caller holds mu. */
void progress_graph_drop_locked(tsr_client *c, tsr_future *f);
/* `progress` from the scheduler: merges the counts, marks calls due. */
int progress_on_message_locked(tsr_client *c, const msgpack_object *map, tsr_errbuf *err);
/* I/O thread: makes the calls due, each without mu held. Takes mu itself. */
void progress_run_callbacks(tsr_client *c);
/* Frees what the client holds for progress (at client_free). */
void progress_client_free(tsr_client *c);

/* ---------- gather.c ---------- */
void gather_cache_close_all(tsr_client *c);

#endif
