/* scheduler/journal.h — the write-ahead journal (`--journal DIR`) and the
 * recovery that replays it after a restart (docs/journal.md).
 *
 * The journal is one append-only file, DIR/journal.tsj: a magic line, then
 * records, each a 4-byte little-endian length, a 4-byte checksum (the low
 * half of FNV-1a 64 of the payload) and the payload, one msgpack map with
 * an `op` naming the record:
 *
 *   client      {token, name}               a client said hello (its client_id)
 *   gone        {token}                      it said goodbye or timed out
 *   submit      {token, graph, parts: [bin]} an admitted graph, the submit
 *                                            messages as received
 *   release     {token, keys: [str]}         keys it no longer wants
 *   done        {key, where, nbytes}         a result and where it is
 *   worker      {address}                    a worker registered
 *   worker_gone {address}                    it left
 *
 * Write-ahead: records are written (write(2)) when the event happens and
 * made durable (fdatasync, `--journal-fsync always`, the default) once per
 * loop iteration before any reply leaves, so a `submitted` a client saw is
 * never lost. `never` leaves durability to the OS: a killed process loses
 * nothing, a crashed machine may lose the last seconds.
 *
 * Replay (at start): clients become "detached" client slots (alive, peer
 * SCHED_NONE) that hold their wants until the client says hello again with
 * the same client_id (then the slot is attached to it: `welcome.resumed`),
 * or until `--journal-grace` passes. Graphs are admitted again as they
 * were submitted; releases and departures applied in order. Results are
 * not trusted from the journal: workers report what they hold in their
 * hello (`chunks`), and the scheduler adopts those (sched_recover_chunks).
 * Placement waits until every worker the journal knew is back or one
 * heartbeat timeout passed, so a held result is not recomputed needlessly.
 *
 * Compaction: when the file grows past twice its size after the last
 * compaction (and past 64 MiB), the live records (graphs still alive,
 * clients still known, results still in memory) are copied to a new file
 * that replaces the old one atomically (rename).
 *
 * All of it runs on the loop's thread. Every hook is a no-op when
 * st->journal is NULL. */
#ifndef TSR_SCHED_JOURNAL_H
#define TSR_SCHED_JOURNAL_H

#include "sched.h"

typedef struct sched_journal_opts {
  const char *dir;            /* NULL: no journal */
  bool fsync;                 /* --journal-fsync always (true) | never */
  uint64_t grace_ms;          /* how long a detached client's graphs wait for it */
  uint64_t compact_bytes;     /* compaction threshold (0: 64 MiB) */
} sched_journal_opts;

/* Opens (creating DIR and the file when absent) and replays the journal
 * into st, then attaches it (st->journal). 0, or TSR_EIO / TSR_ENOMEM with
 * err naming the file and the problem. A torn last record (a crash during
 * a write) is cut off with a warning; a bad record before the end is an
 * error (the file is not ours or is corrupted). */
int sched_journal_open(sched_state *st, const sched_journal_opts *opts, uint64_t now_ms, tsr_errbuf *err);
void sched_journal_close(sched_state *st);

/* ---------- hooks: record an event (no-ops without a journal) ---------- */
void sched_journal_client(sched_state *st, uint32_t c);
void sched_journal_client_gone(sched_state *st, uint32_t c);
/* The graph's submit messages: the kept parts (pd may be NULL) and the last. */
void sched_journal_submit(sched_state *st, uint32_t c, uint64_t graph, const sched_pending *pd, const void *last,
                          size_t last_len);
void sched_journal_release(sched_state *st, uint32_t c, const msgpack_object *keys, size_t n);
void sched_journal_done(sched_state *st, uint32_t id);
void sched_journal_worker(sched_state *st, uint32_t w, bool joined);

/* Makes what was written durable (per the fsync policy) and compacts when
 * due. Called once per loop iteration before replies are sent. */
void sched_journal_sync(sched_state *st);

/* ---------- recovery ---------- */
/* The client slot that holds token (hello's client_id), attached now to
 * peer p, or SCHED_NONE: a detached slot replayed from the journal, or a
 * connected client that reconnected on a new socket before the scheduler
 * noticed it was gone (the old connection is dropped). Works without a
 * journal too. */
uint32_t sched_client_attach(sched_state *st, uint64_t token, uint32_t p);
/* True while placement should wait for workers the journal knew. */
bool sched_journal_holding(sched_state *st, uint64_t now_ms);
/* Drops detached clients whose grace has passed (their wants released). */
void sched_journal_expire(sched_state *st, uint64_t now_ms);
/* A worker's hello `chunks` ([[key, nbytes, dtype, shape]]): results the
 * scheduler still needs and has not placed elsewhere become MEMORY on
 * worker w; the others are freed on the worker. Works with or without a
 * journal (a worker the scheduler timed out comes back with its chunks).
 * Returns the number adopted. */
uint32_t sched_recover_chunks(sched_state *st, uint16_t w, const msgpack_object *items, size_t n);

#endif
