/* tests/unit/sched_fixtures.h — the fixtures the scheduler's unit tests
 * (test_scheduler, test_scheduler_mem, test_scheduler_evict, test_fuse)
 * share: synthetic states built through the entry points the daemon uses
 * (hello frames, sched_graph_add, sched_tr_done), without sockets. One
 * copy, so a change in the wire format or the state API is made once.
 *
 * Contract:
 *   new_state()          a state with a 1 s heartbeat and a 10 s timeout,
 *                        no fusion, recompute "auto".
 *   new_state_with(cfg)  the same timings; cfg's other fields (fuse_width,
 *                        recompute) as given.
 *   peer_index(st, name) the peer's worker or client index; SCHED_NONE when
 *                        no peer has that name.
 *   feed(st, id, wb)     hands the frame in wb to the scheduler as if peer
 *                        `id` had sent it (at a fixed clock), then frees wb.
 *   add_worker(st, name, threads, ops)
 *                        a CPU worker says hello: ops space-separated, data
 *                        address tcp://<name>:1. Returns its worker index
 *                        (SCHED_NO_WORKER when refused).
 *   add_worker_limited(..., memory_limit)
 *                        the same with a memory limit (0: none, not sent).
 *   add_gpu_worker(st, name, threads, ops, native, device_memory_limit)
 *                        a GPU worker (gpu:0, tcp://gpu:1): ops and native
 *                        (the ops with a CUDA variant) space-separated.
 *   add_client(st, name) a client says hello; returns its client index.
 *   add_graph(st, client, gid, tasks, wants, err)
 *                        submits tasks written "key:op:in1,in2" (a NULL-
 *                        terminated list, 8 inputs a task at most) wanting
 *                        wants (NULL-terminated, or NULL: none). Returns
 *                        sched_graph_add's result; err gets its error, or
 *                        with err NULL the error is printed on stderr.
 *   id_of(st, key)       the task's id, SCHED_NONE when unknown.
 *   task_of(st, key)     the task's record (the key must be known).
 *   state_of(st, key)    the task's state, -1 when unknown.
 *   done_id(st, id, nbytes), done(st, key, nbytes)
 *                        the task finishes on the worker processing it with
 *                        an f64 vector of nbytes, then the state settles.
 *
 * Test files add their own frames (heartbeats, task_done, chunks_moved)
 * through feed. */
#ifndef TSR_TESTS_SCHED_FIXTURES_H
#define TSR_TESTS_SCHED_FIXTURES_H

#include <stdint.h>

#include "sched.h"

sched_state *new_state(void);
sched_state *new_state_with(sched_config cfg);

uint32_t peer_index(sched_state *st, const char *name);
void feed(sched_state *st, const char *identity, tsr_wbuf *wb);
/* a worker's heartbeat: 1 byte used, paused or not */
void heartbeat(sched_state *st, const char *name, bool paused);

uint16_t add_worker(sched_state *st, const char *name, int threads, const char *ops);
uint16_t add_worker_limited(sched_state *st, const char *name, int threads, const char *ops, uint64_t memory_limit);
uint16_t add_gpu_worker(sched_state *st, const char *name, int threads, const char *ops, const char *native,
                        uint64_t device_memory_limit);
uint32_t add_client(sched_state *st, const char *name);

int add_graph(sched_state *st, uint32_t client, uint64_t gid, const char *const *tasks, const char *const *wants,
              tsr_errbuf *err);

uint32_t id_of(sched_state *st, const char *key);
sched_task *task_of(sched_state *st, const char *key);
int state_of(sched_state *st, const char *key);

void done_id(sched_state *st, uint32_t id, uint64_t nbytes);
void done(sched_state *st, const char *key, uint64_t nbytes);

#endif
