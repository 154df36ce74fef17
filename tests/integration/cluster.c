/* Starting and stopping real daemons for integration tests. */
#define _GNU_SOURCE
#include "cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "tessera/tessera.h"

const char *cluster_bin(const char *name)
{
  /* A ring of buffers: one argv may name several binaries. */
  static char paths[8][1024];
  static int next;
  char *path = paths[next++ % 8];
  /* TESSERA_TEST_BIN_DIR: binaries moved to another machine (scripts/device-tests.sh) */
  const char *dir = getenv("TESSERA_TEST_BIN_DIR");
  snprintf(path, 1024, "%s/%s", dir && dir[0] ? dir : TSR_BIN_DIR, name);
  return path;
}

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* fork+exec argv with stdout/stderr to log_path; returns pid or -1. */
static pid_t spawn(const char *const *argv, const char *log_path, const char *extra_env)
{
  pid_t pid = fork();
  if (pid != 0) return pid;
  int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  if (extra_env != NULL) putenv((char *)extra_env);
  execv(argv[0], (char *const *)argv);
  fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

static int append_args(const char **argv, int n, int cap, const char *const *extra)
{
  for (int i = 0; extra != NULL && extra[i] != NULL && n < cap - 1; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  return n;
}

static int write_file(const char *path, const char *line, mode_t mode)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (fd < 0) return -1;
  size_t len = strlen(line);
  int rc = write(fd, line, len) == (ssize_t)len && write(fd, "\n", 1) == 1 ? 0 : -1;
  close(fd);
  return rc;
}

int cluster_keygen(const char *dir, const char *name, char *pub_out)
{
  char pub[41], secret[41], path[600];
  if (zmq_curve_keypair(pub, secret) != 0) return -1;
  snprintf(path, sizeof path, "%s/%s.key", dir, name);
  if (write_file(path, secret, 0600) != 0) return -1;
  snprintf(path, sizeof path, "%s/%s.pub", dir, name);
  if (write_file(path, pub, 0644) != 0) return -1;
  if (pub_out != NULL) memcpy(pub_out, pub, 41);
  return 0;
}

/* TSR_TEST_TRANSPORT=ucx|zmq|auto: every worker gets --transport T and
 * this process's clients TESSERA_TRANSPORT=T (the suites re-run over UCX). */
static const char *test_transport(void)
{
  const char *v = getenv("TSR_TEST_TRANSPORT");
  if (v == NULL || v[0] == '\0') return NULL;
  setenv("TESSERA_TRANSPORT", v, 1);
  return v;
}

bool cluster_curve_wanted(void)
{
  const char *v = getenv("TSR_TEST_CURVE");
  return v != NULL && strcmp(v, "1") == 0;
}

/* Keys for the scheduler, the workers and this process's clients. */
static int curve_setup(cluster *c)
{
  snprintf(c->allow_dir, sizeof c->allow_dir, "%s/allow", c->dir);
  snprintf(c->sched_secret, sizeof c->sched_secret, "%s/scheduler.key", c->dir);
  snprintf(c->sched_public, sizeof c->sched_public, "%s/scheduler.pub", c->dir);
  snprintf(c->worker_secret, sizeof c->worker_secret, "%s/worker.key", c->allow_dir);
  snprintf(c->client_secret, sizeof c->client_secret, "%s/client.key", c->allow_dir);
  if (mkdir(c->allow_dir, 0700) != 0 || cluster_keygen(c->dir, "scheduler", NULL) != 0 ||
      cluster_keygen(c->allow_dir, "worker", NULL) != 0 || cluster_keygen(c->allow_dir, "client", NULL) != 0) {
    fprintf(stderr, "cluster: cannot write CURVE keys in %s\n", c->dir);
    return -1;
  }
  setenv("TESSERA_CURVE_SECRET", c->client_secret, 1);
  setenv("TESSERA_SCHEDULER_KEY", c->sched_public, 1);
  return 0;
}

int cluster_start_scheduler(cluster *c, const char *const *sched_args)
{
  char path[512], log_path[512];
  snprintf(c->dir, sizeof c->dir, "/tmp/tsr-test-XXXXXX");
  if (mkdtemp(c->dir) == NULL) return -1;
  c->curve = cluster_curve_wanted();
  if (c->curve && curve_setup(c) != 0) return -1;
  snprintf(path, sizeof path, "%s/address", c->dir);
  snprintf(log_path, sizeof log_path, "%s/scheduler.log", c->dir);
  const char *argv[32] = {cluster_bin("tessera-scheduler"), "--listen", "tcp://127.0.0.1:0", "--address-file",
                          path, "--log-level", "debug"};
  const char *curve_args[] = {"--curve-secret", c->sched_secret, "--allow-keys", c->allow_dir, NULL};
  int n = append_args(argv, 7, 32, c->curve ? curve_args : NULL);
  append_args(argv, n, 32, sched_args);
  c->scheduler = spawn(argv, log_path, NULL);
  for (int i = 0; i < 1000; i++) {
    FILE *f = fopen(path, "r");
    if (f != NULL) {
      char *ok = fgets(c->address, sizeof c->address, f);
      fclose(f);
      if (ok != NULL) {
        c->address[strcspn(c->address, "\r\n")] = '\0';
        return 0;
      }
    }
    if (!cluster_alive(c->scheduler)) break;
    sleep_ms(10);
  }
  fprintf(stderr, "cluster: scheduler did not write its address\n");
  return -1;
}

void cluster_kill_scheduler(cluster *c)
{
  if (c->scheduler <= 0) return;
  kill(c->scheduler, SIGKILL);
  waitpid(c->scheduler, NULL, 0);
  c->scheduler = 0;
}

/* The same address as the first start (its port was picked then), so
 * workers and clients that reconnect on their own find the new one. */
int cluster_restart_scheduler(cluster *c, const char *const *sched_args)
{
  char log_path[512];
  snprintf(log_path, sizeof log_path, "%s/scheduler.log", c->dir);
  const char *argv[32] = {cluster_bin("tessera-scheduler"), "--listen", c->address, "--log-level", "debug"};
  append_args(argv, 5, 32, sched_args);
  for (int attempt = 0; attempt < 50; attempt++) {
    c->scheduler = spawn(argv, log_path, NULL);
    sleep_ms(100);
    if (cluster_alive(c->scheduler)) return 0;   /* bound (a failed bind exits at once) */
    sleep_ms(100);
  }
  fprintf(stderr, "cluster: scheduler did not start again on %s\n", c->address);
  return -1;
}

int cluster_add_worker(cluster *c, int threads, const char *const *worker_args)
{
  if (c->n_workers >= CLUSTER_MAX_WORKERS) return -1;
  int i = c->n_workers;
  char log_path[512], name[64], nthreads[16];
  snprintf(log_path, sizeof log_path, "%s/worker-%d.log", c->dir, i);
  snprintf(name, sizeof name, "test-worker-%d", i);
  snprintf(nthreads, sizeof nthreads, "%d", threads);
  const char *argv[40] = {cluster_bin("tessera-worker"), "--scheduler", c->address, "--threads", nthreads,
                          "--name", name, "--log-level", "debug"};
  const char *curve_args[] = {"--curve-secret", c->worker_secret, "--scheduler-key", c->sched_public, NULL};
  int n = append_args(argv, 9, 40, c->curve ? curve_args : NULL);
  const char *transport = test_transport();
  const char *transport_args[] = {"--transport", transport, NULL};
  n = append_args(argv, n, 40, transport != NULL ? transport_args : NULL);
  append_args(argv, n, 40, worker_args);
  c->workers[i] = spawn(argv, log_path, "TESSERA_TEST_OPS=1");
  if (c->workers[i] < 0) return -1;
  c->n_workers++;
  return i;
}

int cluster_start(cluster *c, int n_workers, int threads, const char *const *sched_args,
                  const char *const *worker_args)
{
  memset(c, 0, sizeof *c);
  c->threads = threads;
  if (cluster_start_scheduler(c, sched_args) != 0) return -1;
  for (int i = 0; i < n_workers; i++)
    if (cluster_add_worker(c, threads, worker_args) < 0) return -1;
  tsr_client *client = NULL;
  int rc = tsr_client_open(&client, c->address, NULL);
  if (rc == 0) rc = tsr_wait_for_workers(client, (size_t)n_workers, 30000);
  if (rc != 0) fprintf(stderr, "cluster: workers did not connect: %s %s\n", tsr_err_name(rc), tsr_errmsg());
  tsr_client_close(client);
  return rc == 0 ? 0 : -1;
}

bool cluster_alive(pid_t pid)
{
  if (pid <= 0) return false;
  int status;
  return waitpid(pid, &status, WNOHANG) == 0;
}

void cluster_signal_worker(cluster *c, int i, int sig)
{
  if (i < 0 || i >= c->n_workers || c->workers[i] <= 0) return;
  kill(c->workers[i], sig);
  if (sig == SIGKILL) {
    waitpid(c->workers[i], NULL, 0);
    c->workers[i] = 0;
  }
}

/* SIGTERM, wait up to 5 s, then SIGKILL. */
static void stop_pid(pid_t pid)
{
  if (pid <= 0) return;
  kill(pid, SIGCONT);
  kill(pid, SIGTERM);
  for (int i = 0; i < 500; i++) {
    if (waitpid(pid, NULL, WNOHANG) != 0) return;
    sleep_ms(10);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

static void dump_file(const char *path)
{
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  fprintf(stderr, "----- %s -----\n", path);
  char line[4096];
  while (fgets(line, sizeof line, f) != NULL) fputs(line, stderr);
  fclose(f);
}

/* TESSERA_TEST_KEEP_LOGS=DIR keeps every cluster's logs, passed or not,
 * as DIR/<n>-<name>.log (a diagnosis run; scripts/device-tests.sh one). */
static void keep_file(const char *path, const char *name)
{
  static int clusters_kept = 0;
  const char *dir = getenv("TESSERA_TEST_KEEP_LOGS");
  if (dir == NULL || dir[0] == '\0') return;
  if (strcmp(name, "scheduler") == 0) clusters_kept++;
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s/%d-%s.log'", path, dir, clusters_kept, name);
  if (system(cmd) != 0) fprintf(stderr, "cluster: could not keep %s in %s\n", path, dir);
}

void cluster_stop(cluster *c, bool dump)
{
  for (int i = 0; i < c->n_workers; i++) stop_pid(c->workers[i]);
  stop_pid(c->scheduler);
  char path[600];
  snprintf(path, sizeof path, "%s/scheduler.log", c->dir);
  if (dump) dump_file(path);
  keep_file(path, "scheduler");
  unlink(path);
  for (int i = 0; i < c->n_workers; i++) {
    char name[32];
    snprintf(name, sizeof name, "worker-%d", i);
    snprintf(path, sizeof path, "%s/%s.log", c->dir, name);
    if (dump) dump_file(path);
    keep_file(path, name);
    unlink(path);
  }
  snprintf(path, sizeof path, "%s/address", c->dir);
  unlink(path);
  /* Workers may have left spill files under the dir: remove it whole. */
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
  if (strncmp(c->dir, "/tmp/tsr-test-", 14) == 0 && system(cmd) != 0) fprintf(stderr, "cluster: could not remove %s\n", c->dir);
}

int run_capture(const char *const *argv, const char *extra_env, char *out, size_t cap, int timeout_s)
{
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);  /* error messages are part of what tests check */
    close(pipefd[0]);
    close(pipefd[1]);
    if (extra_env != NULL) putenv((char *)extra_env);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(pipefd[1]);
  size_t used = 0;
  time_t deadline = time(NULL) + timeout_s;
  fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
  int status = 0;
  bool done = false;
  while (!done) {
    ssize_t n = read(pipefd[0], out + used, used + 1 < cap ? cap - used - 1 : 0);
    if (n > 0) used += (size_t)n;
    if (waitpid(pid, &status, WNOHANG) == pid) done = true;
    else if (time(NULL) > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      done = true;
    } else if (n <= 0) sleep_ms(5);
  }
  ssize_t n;
  while (used + 1 < cap && (n = read(pipefd[0], out + used, cap - used - 1)) > 0) used += (size_t)n;
  out[used] = '\0';
  close(pipefd[0]);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}
