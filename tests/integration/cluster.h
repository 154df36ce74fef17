/* tests/integration/cluster.h — starts real tessera-scheduler and
 * tessera-worker processes on loopback with ephemeral ports, each logging
 * to its own file in a temp dir, and stops them. On a failed test the logs
 * are printed (cluster_stop with dump = true) so CI shows what the daemons
 * saw. Uses no internal header: only POSIX. */
#ifndef TSR_TESTS_CLUSTER_H
#define TSR_TESTS_CLUSTER_H

#include <stdbool.h>
#include <sys/types.h>

#define CLUSTER_MAX_WORKERS 16
#define CLUSTER_MAX_ARGS 16

typedef struct cluster {
  char dir[256];                       /* temp dir: logs, address file */
  char address[256];                   /* scheduler address */
  pid_t scheduler;
  pid_t workers[CLUSTER_MAX_WORKERS];  /* 0 once reaped */
  int n_workers;
  int threads;                         /* per worker */
  const char *sched_args[CLUSTER_MAX_ARGS];
  /* CURVE (TSR_TEST_CURVE=1 when the scheduler started):
   * key files in dir; the allow-list directory holds the worker's and the
   * client's key pairs (only *.pub count). */
  bool curve;
  char allow_dir[300], sched_secret[320], sched_public[320], worker_secret[320], client_secret[320];
  const char *worker_args[CLUSTER_MAX_ARGS];
} cluster;

/* Path of a binary in the build's bin dir ("tessera-worker"), or in
 * $TESSERA_TEST_BIN_DIR when set, in one of 8 rotating static buffers.
 * A GPU worker is a worker with extra args {"--gpu", "N", NULL}. */
const char *cluster_bin(const char *name);
/* Writes a CURVE key pair dir/name.key (mode 0600) and dir/name.pub as
 * `tessera keygen` does; pub_out (41 bytes) may be NULL. 0 or -1. */
int cluster_keygen(const char *dir, const char *name, char *pub_out);
/* True when TSR_TEST_CURVE=1: the test's daemons and clients use CURVE. */
bool cluster_curve_wanted(void);

/* Starts a scheduler with extra args (NULL-terminated list, may be NULL)
 * and waits for its address file. 0 or -1 (message on stderr). With
 * CURVE (TSR_TEST_CURVE=1) it generates the keys, gives the
 * scheduler and later workers theirs, and sets TESSERA_CURVE_SECRET and
 * TESSERA_SCHEDULER_KEY in this process for its clients. */
int cluster_start_scheduler(cluster *c, const char *const *sched_args);
/* Starts one more worker (extra args NULL-terminated, may be NULL); returns
 * its index or -1. Sets TESSERA_TEST_OPS=1. */
/* SIGKILLs the scheduler and reaps it. */
void cluster_kill_scheduler(cluster *c);
/* Starts the scheduler again on the address it had (same port), with
 * sched_args, its log appended to the same file. 0 or -1. */
int cluster_restart_scheduler(cluster *c, const char *const *sched_args);
int cluster_add_worker(cluster *c, int threads, const char *const *worker_args);
/* Scheduler plus n workers, then waits until all n are connected. */
int cluster_start(cluster *c, int n_workers, int threads, const char *const *sched_args,
                  const char *const *worker_args);
/* Sends sig to worker i (SIGKILL reaps it). */
void cluster_signal_worker(cluster *c, int i, int sig);
/* True when the process is still running (reaps it if it exited). */
bool cluster_alive(pid_t pid);
/* Stops everything (SIGTERM, then SIGKILL after 5 s); dump prints every
 * log file to stderr. Removes the temp dir. */
void cluster_stop(cluster *c, bool dump);
/* Runs argv to completion with stdout and stderr captured into out (NUL-terminated,
 * truncated to cap). extra_env: NULL or one "NAME=value". Returns the exit
 * status (128+sig when signalled) or -1. */
int run_capture(const char *const *argv, const char *extra_env, char *out, size_t cap, int timeout_s);

#endif
