/* scheduler/sched.h — the internal interfaces between the scheduler's files:
 *
 *   state.c        containers (state.h)
 *   heap.c         per-op queues of runnable tasks
 *   transitions.c  the task state machine: every state change
 *   policy_order.c priorities from graph order
 *   policy_place.c which worker runs a ready task; the placement pass
 *   policy_release.c when a task's result or record may go
 *   policy_evict.c recompute or spill; tier and recompute accounting (policy_evict.h)
 *   fuse.c         task fusion at admission (chains and narrow fan-ins)
 *   submit.c       graph validation and admission
 *   outbound.c     messages the scheduler originates (compute, key_*)
 *   handlers.c     decoding and dispatch of inbound messages
 *   peers.c        hello, departures, heartbeats and timeouts
 *   loop.c         the ZeroMQ event loop
 *   security.c     CURVE on the socket, the ZAP handler, introductions
 *
 * Everything runs on the event loop's thread. Functions that change task
 * states leave follow-up work on st->work; callers finish an event with
 * sched_settle() so the state is consistent before the next message. */
#ifndef TSR_SCHED_SCHED_H
#define TSR_SCHED_SCHED_H

#include <signal.h>


#include "net/curve.h"
#include "state.h"

/* ---------- heap.c ---------- */
int sched_queue_push(sched_state *st, uint32_t id);       /* 0 or TSR_ENOMEM */
void sched_queue_remove(sched_state *st, uint32_t id);    /* no-op when not queued */
uint32_t sched_queue_peek(const sched_state *st, uint32_t op); /* SCHED_NONE when empty */

/* ---------- policy_release.c ---------- */
/* True while a client wants the task or an active dependent needs it. */
bool sched_needed(const sched_task *t);
/* True when a task record may be forgotten: nobody wants it, no dependent
 * record refers to it, and it is not running. */
bool sched_forgettable(const sched_task *t);
/* True when a result in memory may be freed on its worker. */
bool sched_releasable(const sched_task *t);

/* ---------- transitions.c ---------- */
/* Queues a task for re-examination by sched_settle(). */
void sched_recheck(sched_state *st, uint32_t id);
/* Runs the re-examinations queued by transitions until none are left:
 * results nobody needs are freed, unneeded records forgotten, waiting
 * tasks whose inputs are all in memory become READY. Iterative. */
void sched_settle(sched_state *st);
/* NEW -> WAITING (or ERRED when an input already failed). Submit only. */
void sched_tr_admit(sched_state *st, uint32_t id);
/* NEW -> forgotten: a rejected submit's tasks. */
void sched_tr_discard_new(sched_state *st, uint32_t id);
/* Before a READY/QUEUED task is sent: when an input is not where the books
 * say — a dropped root still placed on its holder (SCHED_EV_GONE), or a
 * result lost meanwhile — the root is made again now and the task goes
 * back to WAITING (true): what the worker's missing_input would have said
 * one round trip later. False: every input is in memory; send it. */
bool sched_tr_inputs_gone(sched_state *st, uint32_t id);
/* READY/QUEUED -> PROCESSING on worker w; emits the `compute`. */
void sched_tr_dispatch(sched_state *st, uint32_t id, uint16_t w);
/* READY -> QUEUED for every task still READY after a placement pass. */
void sched_tr_mark_queued(sched_state *st);
/* PROCESSING -> MEMORY (task_done from w, already verified). */
void sched_tr_done(sched_state *st, uint32_t id, uint16_t w, uint64_t nbytes, const tsr_meta *meta);
/* WAITING/READY/QUEUED -> MEMORY on worker w without running it: a worker
 * that came back (after a scheduler restart or a timeout) still holds the
 * result (journal.h, sched_recover_chunks). */
void sched_tr_adopt(sched_state *st, uint32_t id, uint16_t w, uint64_t nbytes, const tsr_meta *meta);
/* PROCESSING -> ERRED (task_erred), and every dependent with it. */
void sched_tr_erred(sched_state *st, uint32_t id, const char *message, size_t len);
/* PROCESSING -> WAITING because input `input` could not be fetched from
 * `from`; the input is marked lost there and recomputed. */
void sched_tr_missing_input(sched_state *st, uint32_t id, uint32_t input, const char *from, size_t from_len);
/* MEMORY -> its holder dropped it (chunks_moved; the caller checked the
 * holder). Needed (wanted by a client, or by dependents): RELEASED and
 * deferred, recomputed when a dependent is otherwise ready, with its
 * priority, or when a client asks for it (sched_tr_key_missing, a new
 * want); see transitions.c. Else RELEASED. */
void sched_tr_dropped(sched_state *st, uint32_t id);
/* A client could not fetch the key from the worker at `from` (key_missing):
 * a deferred drop is recomputed now (key_lost, then key_done); a result
 * the scheduler still places at `from` is lost there and recomputed (the
 * drop's report has not arrived yet). Anything else is stale: ignored. */
void sched_tr_key_missing(sched_state *st, uint32_t id, const char *from, size_t from_len);
/* Everything worker w was running or holding, after it died. The worker
 * must already be marked dead. Returns counts for the log line. */
void sched_tr_worker_lost(sched_state *st, uint16_t w, uint32_t *rescheduled_p, uint32_t *lost_p);
/* A client starts / stops wanting a task. */
void sched_tr_want(sched_state *st, uint32_t client, uint32_t id);
void sched_tr_unwant(sched_state *st, uint32_t client, uint32_t id);

/* ---------- policy_order.c ---------- */
/* Gives the n NEW tasks `ids` (in submission order) priorities base,
 * base+1, ... in a depth-first post-order from the graph's sinks, visiting
 * inputs in listed order: one branch finishes before the next starts. Only
 * NEW tasks are numbered; their `dependents` must be set. Writes the tasks
 * in priority order to order_out (n entries; a topological order). 0 or
 * TSR_ENOMEM. Iterative: safe for chains of any depth. */
int sched_policy_order(sched_state *st, const uint32_t *ids, uint32_t n, int64_t base, uint32_t *order_out);

/* ---------- policy_place.c ---------- */
/* Free slots of worker w: threads x SCHED_SLOTS_PER_THREAD minus in flight. */
uint32_t sched_worker_free_slots(const sched_worker *w);
/* Chooses a worker for task id among live workers that advertise its op
 * and have a free slot: most input bytes held, then least occupancy
 * (in flight / threads), then lowest index. SCHED_NO_WORKER when none.
 * Writes only the scratch arrays of st. */
uint16_t sched_policy_place(sched_state *st, uint32_t id);
/* The by_load index of live workers (policy_place.c). joined: after its
 * hello set its kind, threads and limits (0 or TSR_ENOMEM: then it gets no
 * task); left: when it dies; changed: after anything its free slots or
 * occupancy read changed (tasks in flight, averages, paused). */
int sched_place_worker_joined(sched_state *st, uint32_t w);
void sched_place_worker_left(sched_state *st, uint32_t w);
void sched_place_worker_changed(sched_state *st, uint32_t w);
/* The placement pass, once per loop iteration: sends queued frees, then
 * dispatches runnable tasks by priority while workers have free slots;
 * what remains is QUEUED. Returns the number dispatched. */
uint32_t sched_place_pass(sched_state *st);

/* ---------- submit.c ---------- */
typedef struct sched_strref {
  const char *s;
  uint32_t len;
} sched_strref;

typedef struct sched_task_spec {
  sched_strref key;
  sched_strref op;
  const void *params;        /* msgpack map bytes, NULL/0 for none */
  uint32_t params_len;
  const sched_strref *inputs;
  uint32_t ninputs;
} sched_task_spec;

/* Validates a whole graph and admits it for client (slot) under graph_id;
 * on success queues `submitted` to the client before any key_done.
 * wants == NULL means "every task of the graph without dependents".
 * Returns the number of new tasks, or a negative TSR_E* with err naming
 * the key(s) (EUNKNOWNOP, ECYCLE, EMISSING, EEXIST, ENOTFOUND, EPROTO,
 * ELIMIT, ENOMEM); on error nothing of the graph is kept. */
int sched_graph_add(sched_state *st, uint32_t client, uint64_t graph_id, const sched_task_spec *specs, uint32_t n,
                    const sched_strref *wants, uint32_t nwants, tsr_errbuf *err);
/* Decodes the `tasks` arrays of the given submit message maps into specs
 * and calls sched_graph_add. Same returns. */
/* ---------- limits.c: the --max-* limits on what peers send (docs/limits.md) ---------- */
/* A hello of role (not NUL-terminated) from peer p over max-workers or
 * max-clients: answers the peer with an `error` naming the limit, logs
 * it and returns true; false when the peer may register. */
bool sched_limits_refuse_hello(sched_state *st, uint32_t p, const char *role, size_t role_len);
/* A graph of ntasks more for client: 0, or TSR_ELIMIT (max-graph-tasks,
 * or max-client-tasks counting the client's unfinished tasks). */
int sched_limits_check_graph(const sched_state *st, uint32_t client, uint64_t graph_id, uint64_t ntasks,
                             tsr_errbuf *err);
/* One more part of len bytes kept for client c (a `submit` with `more`),
 * counting every graph it has not finished sending: 0 or TSR_ELIMIT
 * (max-pending-bytes). */
int sched_limits_check_pending(const sched_state *st, const sched_client *c, size_t len, tsr_errbuf *err);
/* One task's key and encoded params: 0 or TSR_ELIMIT naming the limit. */
int sched_limits_check_task(const sched_state *st, size_t key_len, size_t params_len, tsr_errbuf *err);

int sched_submit_maps(sched_state *st, uint32_t client, uint64_t graph_id, const msgpack_object *const *maps,
                      uint32_t nmaps, tsr_errbuf *err);
/* Appends the tasks and wants of one `submit` map to d (strings borrow the
 * map's bytes, which must outlive d). 0, or EPROTO / ELIMIT / ENOMEM
 * naming the task (its index in the whole graph). */
int sched_decode_part(sched_state *st, sched_decoded *d, const msgpack_object *map, tsr_errbuf *err);
/* Decodes about budget more tasks of pd's kept parts that are not decoded
 * yet (pd->ndecoded < pd->nparts), checking the graph's size limits for
 * client after each part. 0 (done when ndecoded == nparts), or the error
 * of a malformed task or a limit, naming it. */
int sched_pending_decode(sched_state *st, sched_pending *pd, uint32_t client, uint32_t budget, tsr_errbuf *err);
/* The last part is in: turns the specs' offsets into pointers. */
void sched_decoded_resolve(sched_decoded *d);
void sched_decoded_free(sched_decoded *d);
/* Marks pd failed with rc and text (its last part is answered so), freeing
 * what it kept. */
void sched_pending_fail(sched_pending *pd, int rc, const char *text);
/* Frees a pending graph's kept parts, decoded tasks and error. */
void sched_pending_free(sched_pending *pd);

/* ---------- submit.c: admission in slices ---------- */
/* Admits the graph of client's pending pd, whose last part (of last_tasks
 * tasks) was just kept as its last part. A small graph whose other parts
 * are decoded is decoded and admitted at once when it can be (no task in
 * common with a graph still being admitted): returns its count of new
 * tasks or its error, as sched_graph_add. Else it takes pd's contents (pd
 * is left empty), sets *queued_p, and returns 0: the rest of the decoding
 * and the admission happen a slice per loop iteration (sched_admit_run),
 * which replies `submitted` / `submit_error` and journals it. */
#define SCHED_ADMIT_NOW 20000u
int sched_admit_start(sched_state *st, uint32_t client, sched_pending *pd, uint32_t last_tasks, bool *queued_p,
                      tsr_errbuf *err);
/* Writes pd (all its parts, the last one last) to the journal as client's
 * accepted graph. */
void sched_journal_pending(sched_state *st, uint32_t client, const sched_pending *pd);
/* What the longest admission step of the last sched_admit_run did
 * ("idle" when it did nothing). */
const char *sched_admit_phase(const sched_state *st);
/* The admission after a in the queue, or NULL (st->adm_first is the first). */
const struct sched_admission *sched_admission_next(const struct sched_admission *a);
/* Decodes kept parts of graphs still arriving, then works on the
 * admissions in progress, for about budget_us; returns true while some
 * work is left (the loop then polls without waiting). */
bool sched_admit_run(sched_state *st, uint64_t budget_us);
/* The client left: its admissions in progress are abandoned (their tasks
 * discarded a slice at a time, or, once accepted, admitted for nobody). */
void sched_admit_client_gone(sched_state *st, uint32_t client);
/* Frees every admission (state teardown). */
void sched_admit_destroy_all(sched_state *st);
/* Whether a record may be forgotten now; false while an admission runs
 * (it may hold the id), then the id is kept and re-examined at its end. */
bool sched_admit_may_forget(sched_state *st, uint32_t id);

/* ---------- fuse.c ---------- */
/* Fuses linear chains and narrow fan-ins among the n NEW tasks fresh[] of
 * graph g (validated, linked, acyclic; want_ids are the ids the client
 * will want), as docs/scheduler.md "Fusion" says: each group becomes its
 * output task with a fused op, params {parts} and the group's external
 * inputs as dependencies; the other parts are discarded and fresh[] is
 * compacted. Returns the number of tasks left in fresh[]. Never fails: a
 * group that cannot be built stays unfused. No-op when cfg.fuse_width is 0. */
int sched_fuse_graph(sched_state *st, uint32_t g, uint32_t *fresh, uint32_t n, const uint32_t *want_ids, uint32_t nwant);
/* The same pass in steps, for admission in slices (submit.c): start (a
 * NULL *fusion_p when nothing can be fused: the graph stays as it is),
 * step until it returns true (each step does about budget tasks' work),
 * then end, which returns the number of surviving ids left at the front
 * of fresh and frees the pass. */
typedef struct sched_fusion sched_fusion;
int sched_fusion_start(sched_state *st, uint32_t g, uint32_t *fresh, uint32_t n, const uint32_t *want_ids, uint32_t nwant,
                       sched_fusion **fusion_p);
bool sched_fusion_step(sched_fusion *fusion, uint32_t budget);
uint32_t sched_fusion_end(sched_fusion **fusion_p);
/* Gives worker w the fused ops it can run (after its advertised ops are
 * set). 0 or TSR_ENOMEM. */
int sched_fuse_worker_ops(sched_state *st, uint32_t w);
/* For a fused task: NULL when spec defines the same task as the group's
 * last part (op, params bytes, input keys), else what differs. */
const char *sched_fused_differs(const sched_state *st, uint32_t id, const sched_task_spec *s);

/* ---------- outbound.c ---------- */
void sched_emit_compute(sched_state *st, uint32_t id, uint16_t w);
void sched_notify_done(sched_state *st, uint32_t id, uint32_t only_client);   /* SCHED_NONE: all */
void sched_notify_erred(sched_state *st, uint32_t id, uint32_t only_client);
void sched_notify_lost(sched_state *st, uint32_t id);
/* The text a client sees for an erred task. */
void sched_error_text(const sched_state *st, uint32_t id, char *buf, size_t cap);
void sched_emit_status(sched_state *st, uint32_t peer, uint64_t req);
void sched_emit_heartbeats(sched_state *st);

/* ---------- handlers.c / peers.c ---------- */
/* Handles one inbound control frame from the ROUTER identity. */
void sched_handle_frame(sched_state *st, const void *identity, size_t id_len, const void *data, size_t len,
                        uint64_t now_ms);
/* Answers a ROUTER message that is not exactly identity + one frame. */
void sched_handle_bad_frame(sched_state *st, const void *identity, size_t id_len, int nframes, uint64_t now_ms);
/* hello from peer p (role NONE or a re-hello). */
void sched_peer_hello(sched_state *st, uint32_t p, const msgpack_object *map);
/* Removes a worker or client and everything that follows from it. */
void sched_peer_drop(sched_state *st, uint32_t p, const char *why);
/* Drops peers silent for longer than the timeout. */
void sched_check_timeouts(sched_state *st, uint64_t now_ms);

/* ---------- loop.c ---------- */
typedef struct sched_loop_opts {
  const char *listen;
  const char *address_file;    /* NULL: none */
  const char *curve_secret;    /* --curve-secret: NULL for plaintext */
  const char *allow_keys;      /* --allow-keys DIR|FILE (with curve_secret) */
  volatile sig_atomic_t *reload;  /* set by SIGHUP: reload allow_keys; may be NULL */
  sched_config cfg;
  const char *journal_dir;     /* --journal DIR; NULL: none (journal.h) */
  bool journal_fsync;          /* --journal-fsync always (true) | never */
  uint64_t journal_grace_ms;   /* --journal-grace */
  const char *dashboard;       /* --dashboard HOST:PORT; NULL: off (dashboard.h) */
  bool no_dashboard;           /* --no-dashboard (wins over --dashboard) */
} sched_loop_opts;

/* ---------- security.c ---------- */
/* CURVE on the scheduler's socket: our keys and the allow-list, which the
 * socket asks about each connecting key (in the loop's thread). */
typedef struct sched_security {
  bool on;
  tsr_curve curve;
  tsr_keyset allow;
  const char *allow_path;
  volatile sig_atomic_t *reload;
} sched_security;
struct tsr_zmtp_opts;
/* With opts->curve_secret: loads the keys and the allow-list into sec and
 * makes zo a CURVE router's options that admit only listed keys. Without:
 * 0 and nothing set. 0 or a TSR_E* (logged). */
int sched_security_open(const sched_loop_opts *opts, sched_security *sec, struct tsr_zmtp_opts *zo);
/* Reloads the allow-list when SIGHUP asked for it (each loop iteration). */
void sched_security_tick(sched_security *sec);
void sched_security_close(sched_security *sec);
/* Warns when listening on a non-loopback address without keys. */
void sched_security_warn(const sched_loop_opts *opts);
/* Records the CURVE key of the frame about to be handled ("" or Z85). */
void sched_security_note_frame(sched_state *st, const char *key);
/* After peer p registered (hello): records its key, introduces it to the
 * workers (and, for a worker, every registered key to it). */
void sched_security_hello(sched_state *st, uint32_t p);
/* Before peer p unregisters: withdraws its key from the workers when no
 * other registered peer holds it. */
void sched_security_gone(sched_state *st, uint32_t p);

/* Runs the daemon until *stop becomes nonzero. 0 on a clean stop, or a
 * negative TSR_E* (bind failure) after logging it. */
int sched_run(const sched_loop_opts *opts, volatile sig_atomic_t *stop);

#endif
