/* The event loop: one router socket (common/zmtp: ZeroMQ's wire, read and
 * written on this thread), one thread, no locks.
 *
 * Each iteration: wait in poll until a message arrives or the next
 * timer is due; receive without blocking until EAGAIN, at most
 * MAX_FRAMES_PER_ITERATION frames so timers stay fair under load; run the
 * timers (heartbeats to every peer, timeouts); run the placement pass
 * once; then flush every peer's outbox as one frame. The once-per-
 * iteration flush is the batching that lets a burst of task_done reports
 * turn into one `compute` frame per worker and one `key_done` frame per
 * client instead of one frame per message. */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "util/rttrace.h"
#include "net/curve.h"
#include "net/net.h"
#include "zmtp/zmtp.h"
#include "dashboard.h"
#include "journal.h"
#include "policy_evict.h"
#include "progress.h"
#include "sched.h"

#define MAX_FRAMES_PER_ITERATION 10000
#define DRAIN_BUDGET_US 50000

/* The peer's batch leaves on this thread (written at once unless the
 * kernel's buffer is full); big batches (a million key_done) are handed
 * over without a copy. */
static void send_outbox(tsr_zmtp *sock, sched_peer *peer)
{
  size_t len;
  char *data = tsr_wbuf_release(&peer->out, &len);
  if (data == NULL) return;
  if (tsr_zmtp_send_owned(sock, peer->identity, peer->id_len, data, len) != 0 && errno != EHOSTUNREACH)
    TSR_WARN("cannot send %zu bytes to a peer: %s", len, strerror(errno));
}

/* Workers first: a `compute` is on its task's critical path, while a
 * client's `submitted` only returns its caller to a wait for the result.
 * With more busy threads than cores (two here), the frame handed to the
 * I/O thread first is also the first to get a core: the round-trip stamps
 * (TESSERA_RTTRACE) showed the `submitted` branch (three client wake-ups)
 * running beside the `compute` leg (bench/RESULTS.md, 2026-11-25). */
static void flush(tsr_zmtp *sock, sched_state *st)
{
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t i = 0; i < st->ndirty; i++) {
      sched_peer *peer = &st->peers[st->dirty[i]];
      if (!peer->in_use || !peer->dirty || (pass == 0) != (peer->role == PEER_WORKER)) continue;
      peer->dirty = false;
      if (peer->out.sbuf.size > 0) {
        send_outbox(sock, peer);
        tsr_rt_stamp(peer->role == PEER_WORKER ? "s.sent_w" : "s.sent_c");
      }
    }
  }
  st->ndirty = 0;
}

/* Receives what is waiting, for at most MAX_FRAMES_PER_ITERATION frames
 * or DRAIN_BUDGET_US; returns true when it stopped at a bound (more may be
 * waiting). The time bound is for a backlog of submit parts (a client
 * sending 10^7 tasks queues 200 parts of ~3 MB, each copied here: 0.6 s
 * in one iteration without it); it is generous because a large batch is
 * what makes the throughput (one `compute` frame per worker per
 * iteration). */
static bool drain(tsr_zmtp *sock, sched_state *st)
{
  uint64_t deadline = tsr_now_us() + DRAIN_BUDGET_US;
  for (int n = 0; n < MAX_FRAMES_PER_ITERATION; n++) {
    if (n > 0 && tsr_now_us() >= deadline) return true;
    tsr_zmtp_msg m;
    if (tsr_zmtp_recv(sock, &m) == 0) return false;
    tsr_rt_stamp("s.recv");
    uint64_t now = tsr_now_ms();
    sched_security_note_frame(st, m.key);
    if (m.nframes == 1 && !m.truncated)
      sched_handle_frame(st, m.id, m.id_len, m.data[0], m.len[0], now);
    else
      sched_handle_bad_frame(st, m.id, m.id_len, m.truncated ? TSR_ZMTP_MAX_FRAMES : m.nframes, now);
    tsr_zmtp_msg_close(&m);
  }
  return true;
}

static int write_address_file(const char *path, const char *address)
{
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (f == NULL) return TSR_EIO;
  int ok = fprintf(f, "%s\n", address) > 0;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    remove(tmp);
    return TSR_EIO;
  }
  return 0;
}

static int open_socket(const sched_loop_opts *opts, sched_security *sec, tsr_zmtp **sock_p)
{
  /* --max-message-bytes before a frame is allocated: a peer sending a
   * larger one is disconnected (limits.c checks each frame again); at most
   * as many connections as workers and clients may register, and some
   * more for those on their way in or out */
  tsr_limits limits = opts->cfg.limits;
  sched_limits_defaults(&limits);
  uint64_t peers = limits.workers + limits.clients + 256;
  tsr_zmtp_opts zo = {.what = "scheduler", .max_frame = (size_t)limits.message_bytes,
                      .max_peers = peers > 1000000 ? 1000000u : (unsigned)peers};
  if (sched_security_open(opts, sec, &zo) != 0) return TSR_EINVAL;
  sched_security_warn(opts);
  char bound[TSR_MAX_ADDR_LEN], address[TSR_MAX_ADDR_LEN];
  tsr_errbuf err;
  tsr_zmtp *sock = NULL;
  if (tsr_zmtp_bind(opts->listen, &zo, &sock, bound, sizeof bound, &err) != 0) {
    TSR_ERROR("%s", err.text);
    return TSR_ECONN;
  }
  tsr_net_advertise(bound, "127.0.0.1", address, sizeof address);
  if (opts->address_file != NULL && write_address_file(opts->address_file, address) != 0) {
    TSR_ERROR("cannot write the address file %s", opts->address_file);
    tsr_zmtp_close(&sock);
    return TSR_EIO;
  }
  TSR_INFO("listening on %s (heartbeat every %llu ms, timeout %llu ms, recompute %s, fuse width %u)", address,
           (unsigned long long)opts->cfg.heartbeat_ms, (unsigned long long)opts->cfg.timeout_ms,
           sched_recompute_mode_name(opts->cfg.recompute), opts->cfg.fuse_width);
  *sock_p = sock;
  return 0;
}

/* glibc keeps freed memory in its arenas, and a free chunk in the middle
 * of the heap is never returned by free() itself: after a large graph is
 * released (or a hundred clients die holding submit parts) the scheduler's
 * RSS stayed tens of MiB above what it holds (integration.exhaust).
 * malloc_trim(0) also releases whole free pages inside the heap. It walks
 * the free lists, so it runs only after something large was freed and at
 * most once per TRIM_MIN_MS, on a quiet iteration. An idle scheduler
 * also gives back its tables (sched_state_shrink). */
#define TRIM_MIN_MS 1000

static void trim_heap(sched_state *st, uint64_t now, uint64_t *next_trim)
{
  if (!st->trim_wanted || now < *next_trim) return;
  sched_state_shrink(st);   /* when idle: the tables' high-water mark too */
  malloc_trim(0);
  st->trim_wanted = false;
  *next_trim = now + TRIM_MIN_MS;
}

/* Work on graphs being admitted per iteration (submit.c): long enough to
 * admit ~10^6 tasks a second, short enough that heartbeats, completions
 * and other clients wait at most this long behind it. */
#define ADMIT_SLICE_US 10000
#define ADMIT_SLICE_MAX_US 50000
/* An iteration longer than this is logged at info level with its parts. */
#define SLOW_ITERATION_US 100000

enum { STAGE_DRAIN, STAGE_TIMERS, STAGE_ADMIT, STAGE_PLACE, STAGE_FLUSH, NSTAGES };
static const char *const stage_names[NSTAGES] = {"messages", "timers", "admission", "placement", "journal+flush+dashboard"};

static void describe_iteration(const sched_state *st, const uint64_t *us, const char *admit_phase, char *out, size_t cap)
{
  size_t len = 0;
  out[0] = '\0';
  for (int s = 0; s < NSTAGES && len < cap; s++) {
    if (us[s] < 1000 && s != STAGE_DRAIN) continue;
    len += (size_t)snprintf(out + len, cap - len, "%s%s %.1f ms", len ? ", " : "", stage_names[s], (double)us[s] / 1e3);
    if (s == STAGE_DRAIN && st->slowest_msg_us > 0 && len < cap)
      len += (size_t)snprintf(out + len, cap - len, " (slowest '%s' %.1f ms)", st->slowest_msg_op,
                              (double)st->slowest_msg_us / 1e3);
    if (s == STAGE_ADMIT && len < cap) len += (size_t)snprintf(out + len, cap - len, " (%s)", admit_phase);
  }
}

/* Counts one iteration (the loop's own work, not its wait in poll)
 * in the histogram /metrics shows, keeps the longest with what it did,
 * and logs one over SLOW_ITERATION_US. */
static void note_iteration(sched_state *st, const uint64_t *us, const char *admit_phase)
{
  static const uint64_t bounds_us[7] = {1000, 5000, 10000, 50000, 100000, 500000, 1000000};
  uint64_t total = 0;
  for (int s = 0; s < NSTAGES; s++) total += us[s];
  int b = 0;
  while (b < 7 && total > bounds_us[b]) b++;
  st->loop_hist[b]++;
  st->loop_iterations++;
  st->loop_busy_us += total;
  if (total <= st->loop_max_us && total <= SLOW_ITERATION_US) return;
  char what[sizeof st->loop_max_what];
  describe_iteration(st, us, admit_phase, what, sizeof what);
  if (total > st->loop_max_us) {
    st->loop_max_us = total;
    snprintf(st->loop_max_what, sizeof st->loop_max_what, "%s", what);
  }
  if (total > SLOW_ITERATION_US) TSR_INFO("slow loop iteration: %.1f ms (%s)", (double)total / 1e3, what);
}

static void run_loop(tsr_zmtp *sock, sched_state *st, sched_security *sec, volatile sig_atomic_t *stop)
{
  uint64_t hb_ms = st->cfg.heartbeat_ms ? st->cfg.heartbeat_ms : 1000;
  uint64_t check_ms = (st->cfg.timeout_ms < hb_ms ? st->cfg.timeout_ms : hb_ms) / 4;
  if (check_ms < 10) check_ms = 10;
  uint64_t now = tsr_now_ms(), next_hb = now + hb_ms, next_check = now + check_ms;
  uint64_t next_progress = now + SCHED_PROGRESS_MS, next_trim = now;
  bool busy = false, admitting = false;
  uint64_t other_us = 0;     /* the last iteration's time outside admission */
  while (!*stop) {
    now = tsr_now_ms();
    uint64_t due = next_hb < next_check ? next_hb : next_check;
    if (next_progress < due) due = next_progress;
    long timeout = busy || admitting || st->place_more ? 0 : (due > now ? (long)(due - now) : 0);
    struct pollfd item = {tsr_zmtp_fd(sock), POLLIN, 0};
    int rc = poll(&item, 1, (int)timeout);
    tsr_rt_stamp("s.wake");
    if (*stop) break;
    if (rc < 0 && errno != EINTR) TSR_ERROR("poll failed: %s", strerror(errno));
    sched_security_tick(sec);
    uint64_t us[NSTAGES], mark = tsr_now_us(), t;
    st->slowest_msg_us = 0;
    busy = rc > 0 && drain(sock, st);
    tsr_rt_stamp("s.handled");
    us[STAGE_DRAIN] = (t = tsr_now_us()) - mark;
    mark = t;
    now = tsr_now_ms();
    if (now >= next_hb) {
      sched_emit_heartbeats(st);
      next_hb = now + hb_ms;
    }
    /* Only once caught up with the socket: a peer whose messages are still
     * unread in the backlog is not silent. */
    if (now >= next_check && !busy) {
      sched_check_timeouts(st, now);
      sched_journal_expire(st, now);
      trim_heap(st, now, &next_trim);
      next_check = now + check_ms;
    }
    if (now >= next_progress) {
      sched_progress_tick(st);   /* throttled: changed graphs once per period */
      next_progress = now + SCHED_PROGRESS_MS;
    }
    us[STAGE_TIMERS] = (t = tsr_now_us()) - mark;
    mark = t;
    /* a slice of the graphs being admitted: ADMIT_SLICE_US, or as long as
     * the rest of the last iteration took, up to ADMIT_SLICE_MAX_US, so a
     * graph whose first tasks already keep the loop busy still gets half
     * of it */
    uint64_t slice = other_us < ADMIT_SLICE_US ? ADMIT_SLICE_US : other_us > ADMIT_SLICE_MAX_US ? ADMIT_SLICE_MAX_US : other_us;
    admitting = sched_admit_run(st, slice);
    const char *admit_phase = sched_admit_phase(st);
    us[STAGE_ADMIT] = (t = tsr_now_us()) - mark;
    mark = t;
    /* after a restart, wait for the workers that hold results (journal.h) */
    if (sched_journal_holding(st, now)) sched_flush_frees(st);
    else sched_place_pass(st);
    tsr_rt_stamp("s.placed");
    us[STAGE_PLACE] = (t = tsr_now_us()) - mark;
    mark = t;
    sched_journal_sync(st);   /* write-ahead: durable before any reply leaves */
    flush(sock, st);
    sched_dash_tick(st, now);  /* only while someone watches (dashboard.h) */
    us[STAGE_FLUSH] = tsr_now_us() - mark;
    other_us = us[STAGE_DRAIN] + us[STAGE_TIMERS] + us[STAGE_PLACE] + us[STAGE_FLUSH];
    note_iteration(st, us, admit_phase);
  }
}

int sched_run(const sched_loop_opts *opts, volatile sig_atomic_t *stop)
{
  tsr_zmtp *sock = NULL;
  sched_security sec = {0};
  int rc = open_socket(opts, &sec, &sock);
  sched_config cfg = opts->cfg;
  cfg.curve = sec.on;
  sched_state *st = rc == 0 ? sched_state_new(&cfg) : NULL;
  if (rc == 0 && st == NULL) rc = TSR_ENOMEM;
  if (rc == 0 && opts->journal_dir != NULL) {
    sched_journal_opts jo = {opts->journal_dir, opts->journal_fsync, opts->journal_grace_ms, 0};
    tsr_errbuf err = {{0}};
    if ((rc = sched_journal_open(st, &jo, tsr_now_ms(), &err)) != 0) TSR_ERROR("%s", err.text);
  }
  if (rc == 0 && opts->dashboard != NULL) rc = sched_dash_open(st, opts->dashboard);
  if (rc == 0) {
    run_loop(sock, st, &sec, stop);
    TSR_INFO("shutting down: %u workers, %u clients, %u tasks", st->nworkers_alive, st->nclients_alive, st->nlive);
  }
  if (st != NULL) sched_dash_close(st);
  if (st != NULL) sched_journal_close(st);
  sched_state_destroy(&st);
  tsr_zmtp_close(&sock);
  sched_security_close(&sec);
  return rc;
}
