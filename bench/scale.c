/* bench/scale: the scheduler at scale. For each worker count it starts a
 * real tessera-scheduler, N simulated workers that speak the real worker
 * protocol over their own DEALER sockets (hello, heartbeats every
 * heartbeat_ms from the welcome, a task_done for every compute: no-op
 * execution, no data plane), and submits one graph through the public
 * client API: `--tasks` leaves reduced by ceil(tasks / 100,000) tasks of
 * up to 100,000 inputs (the protocol's limit) into one wanted root. It
 * prints, per worker count: ingest (tsr_submit until the scheduler
 * accepted the graph), the time from submit to the last task, scheduling
 * decisions (computes received by the workers) per second, and the
 * scheduler's memory per task (VmHWM minus its RSS before the submit, from
 * /proc/PID/status). Output lines are --label (default "tessera") and
 * `key=value` fields. bench/scale.sh runs it, with a baseline scheduler
 * (BASELINE=) at each point too when given.
 *
 * The simulated workers share a few threads (--threads-sim), each polling
 * its share of the sockets, so a thousand of them fit on a 2-core machine
 * beside the scheduler; each advertises --worker-threads executor threads
 * (the scheduler keeps 2 tasks per thread in flight on it). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tessera/tessera.h"
#include "wire/wire.h"
#include <zmq.h>

#define FAN_IN 100000

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static pid_t sched_pid;   /* the running point's scheduler: stopped on the way out */

static void die(const char *what, int rc)
{
  fprintf(stderr, "scale: %s: %s (%s)\n", what, tsr_strerror(rc), tsr_errmsg());
  if (sched_pid > 0) kill(sched_pid, SIGTERM);
  exit(1);
}

/* ---------- simulated workers ---------- */

typedef struct sim_worker {
  void *sock;
  bool welcomed;
  uint64_t hb_ms, next_beat_ms, done;
  tsr_wbuf out;
} sim_worker;

typedef struct sim_group {
  pthread_t thread;
  void *ctx;
  const char *address;
  sim_worker *w;
  int n, first, worker_threads;
} sim_group;

static atomic_bool sim_stop;
static atomic_long sim_welcomed, sim_computes;
static _Atomic double sim_last_done;

/* nfields of tsr_wbuf_begin counts "op" too. */
static void sim_hello(sim_worker *w, int index, int threads)
{
  char name[64];
  snprintf(name, sizeof name, "sim-%d", index);
  tsr_wbuf_begin(&w->out, "hello", 11);
  tsr_pack_kv_uint(&w->out.pk, "proto", TSR_PROTOCOL_VERSION);
  tsr_pack_kv_str(&w->out.pk, "role", "worker");
  tsr_pack_kv_str(&w->out.pk, "name", name);
  tsr_pack_kv_uint(&w->out.pk, "pid", (uint64_t)getpid());
  tsr_pack_kv_uint(&w->out.pk, "threads", (uint64_t)threads);
  tsr_pack_kv_uint(&w->out.pk, "memory_limit", 0);
  tsr_pack_kv_str(&w->out.pk, "data_address", "tcp://127.0.0.1:9");
  tsr_pack_kv_str(&w->out.pk, "device", "cpu");
  tsr_pack_str(&w->out.pk, "ops");
  msgpack_pack_array(&w->out.pk, 1);
  tsr_pack_str(&w->out.pk, "noop");
  tsr_pack_kv_uint(&w->out.pk, "spill_write_bps", 0);
}

static void sim_heartbeat(sim_worker *w)
{
  tsr_wbuf_begin(&w->out, "heartbeat", 6);
  tsr_pack_kv_uint(&w->out.pk, "memory_used", 0);
  tsr_pack_kv_uint(&w->out.pk, "tasks_running", 0);
  tsr_pack_kv_uint(&w->out.pk, "tasks_done", w->done);
  tsr_pack_kv_uint(&w->out.pk, "chunks", 0);
  tsr_pack_kv_bool(&w->out.pk, "paused", false);
}

/* A compute is done at once: task_done with an 8-byte f64[1] result. */
static void sim_compute(sim_worker *w, const msgpack_object *map)
{
  uint64_t id;
  const char *key;
  size_t len;
  if (tsr_wire_uint(map, "id", &id, NULL) != 0 || tsr_wire_str(map, "key", TSR_MAX_KEY_LEN, &key, &len, NULL) != 0) {
    fprintf(stderr, "scale: malformed compute\n");
    return;
  }
  tsr_wbuf_begin(&w->out, "task_done", 7);
  tsr_pack_kv_uint(&w->out.pk, "id", id);
  tsr_pack_kv_strn(&w->out.pk, "key", key, len);
  tsr_pack_kv_uint(&w->out.pk, "nbytes", 8);
  tsr_pack_kv_uint(&w->out.pk, "dtype", TSR_F64);
  tsr_pack_str(&w->out.pk, "shape");
  msgpack_pack_array(&w->out.pk, 1);
  msgpack_pack_int64(&w->out.pk, 1);
  tsr_pack_kv_uint(&w->out.pk, "duration_us", 0);
  w->done++;
}

static void sim_frame(sim_worker *w, const void *data, size_t len)
{
  tsr_reader rd;
  tsr_errbuf err = {{0}};
  const msgpack_object *map;
  char op[TSR_MAX_NAME_LEN + 1];
  long computes = 0;
  if (tsr_reader_init(&rd, data, len, &err) == 0) {
    while (tsr_reader_next(&rd, &map, op, &err) == 1) {
      if (strcmp(op, "compute") == 0) {
        sim_compute(w, map);
        computes++;
      } else if (strcmp(op, "welcome") == 0) {
        tsr_wire_opt_uint(map, "heartbeat_ms", 1000, &w->hb_ms, NULL);
        w->welcomed = true;
        atomic_fetch_add(&sim_welcomed, 1);
      } else if (strcmp(op, "error") == 0) {
        fprintf(stderr, "scale: the scheduler refused a simulated worker's message\n");
      }
    }
  }
  tsr_reader_done(&rd);
  if (computes > 0) {
    atomic_fetch_add(&sim_computes, computes);
    sim_last_done = now_s();
  }
}

static void sim_flush(sim_worker *w)
{
  if (w->out.nmsgs == 0) return;
  if (zmq_send(w->sock, w->out.sbuf.data, w->out.sbuf.size, 0) < 0)
    fprintf(stderr, "scale: send failed: %s\n", zmq_strerror(zmq_errno()));
  tsr_wbuf_reset(&w->out);
}

static void sim_drain(sim_worker *w)
{
  for (;;) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, w->sock, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      return;
    }
    sim_frame(w, zmq_msg_data(&msg), zmq_msg_size(&msg));
    zmq_msg_close(&msg);
  }
}

static void *sim_main(void *arg)
{
  sim_group *g = arg;
  zmq_pollitem_t *items = calloc((size_t)g->n, sizeof *items);
  for (int i = 0; i < g->n; i++) {
    sim_worker *w = &g->w[i];
    w->sock = zmq_socket(g->ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(w->sock, ZMQ_LINGER, &linger, sizeof linger);
    if (w->sock == NULL || zmq_connect(w->sock, g->address) != 0) {
      fprintf(stderr, "scale: cannot connect a simulated worker: %s\n", zmq_strerror(zmq_errno()));
      exit(1);
    }
    tsr_wbuf_init(&w->out);
    sim_hello(w, g->first + i, g->worker_threads);
    sim_flush(w);
    items[i] = (zmq_pollitem_t){w->sock, 0, ZMQ_POLLIN, 0};
  }
  while (!atomic_load(&sim_stop)) {
    if (zmq_poll(items, g->n, 20) < 0 && zmq_errno() != EINTR) break;
    uint64_t now_ms = (uint64_t)(now_s() * 1000);
    for (int i = 0; i < g->n; i++) {
      sim_worker *w = &g->w[i];
      if (items[i].revents & ZMQ_POLLIN) sim_drain(w);
      if (w->welcomed && now_ms >= w->next_beat_ms) {
        sim_heartbeat(w);
        w->next_beat_ms = now_ms + w->hb_ms;
      }
      sim_flush(w);
    }
  }
  for (int i = 0; i < g->n; i++) {
    tsr_wbuf_begin(&g->w[i].out, "goodbye", 1);
    sim_flush(&g->w[i]);
    zmq_close(g->w[i].sock);
    tsr_wbuf_free(&g->w[i].out);
  }
  free(items);
  return NULL;
}

/* ---------- the scheduler process ---------- */

/* The scheduler logs at info into log_file: its "admitted in" and "slow
 * loop iteration" lines are how long its loop was held (read_stalls). */
static pid_t start_scheduler(const char *binary, const char *address_file, const char *log_file)
{
  unlink(address_file);
  pid_t pid = fork();
  if (pid == 0) {
    FILE *log = freopen(log_file, "w", stderr);
    (void)log;
    execl(binary, binary, "--listen", "tcp://127.0.0.1:0", "--address-file", address_file, "--log-level", "info",
          "--no-dashboard", (char *)NULL);
    perror(binary);
    _exit(127);
  }
  return pid;
}

static bool read_address(const char *path, char *out, size_t cap)
{
  FILE *f = fopen(path, "r");
  if (f == NULL) return false;
  bool ok = fgets(out, (int)cap, f) != NULL;
  fclose(f);
  if (ok) out[strcspn(out, "\n")] = '\0';
  return ok && out[0] != '\0';
}

/* VmHWM / VmRSS of pid in KiB, -1 when unreadable. */
static long proc_kib(pid_t pid, const char *field)
{
  char path[64], line[256];
  long kib = -1;
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, field, strlen(field)) == 0) kib = atol(line + strlen(field));
  if (f != NULL) fclose(f);
  return kib;
}

/* From the scheduler's log: the longest "slow loop iteration" (logged
 * over 100 ms; 0 when none) and the graph's "admitted in" seconds (one
 * handler before issue 13: the loop was held that long). */
static void read_stalls(const char *log_file, double *longest_s, double *admitted_s)
{
  FILE *f = fopen(log_file, "r");
  char line[1024];
  *longest_s = 0;
  *admitted_s = -1;
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    const char *p = strstr(line, "slow loop iteration: ");
    if (p != NULL && atof(p + 21) >= 500) fprintf(stderr, "# scheduler: %s", p);  /* where the time went */
    if (p != NULL && atof(p + 21) / 1e3 > *longest_s) *longest_s = atof(p + 21) / 1e3;
    if ((p = strstr(line, "admitted in ")) != NULL) *admitted_s = atof(p + 12);
  }
  if (f != NULL) fclose(f);
}

/* ---------- the graph ---------- */

static tsr_graph *build_tree(long leaves)
{
  tsr_graph *g = NULL;
  int rc = tsr_graph_new(&g);
  char key[64];
  if (rc != 0) die("graph", rc);
  for (long i = 0; i < leaves && rc == 0; i++) {
    snprintf(key, sizeof key, "leaf-%ld", i);
    rc = tsr_graph_add(g, key, "noop", NULL, 0, NULL, 0);
  }
  long nmid = (leaves + FAN_IN - 1) / FAN_IN;
  const char **ins = malloc(sizeof *ins * FAN_IN);
  char (*names)[32] = malloc(sizeof *names * FAN_IN);
  const char **mids = malloc(sizeof *mids * (size_t)nmid);
  char (*mid_names)[32] = malloc(sizeof *mid_names * (size_t)nmid);
  for (long m = 0; m < nmid && rc == 0; m++) {
    long first = m * FAN_IN, count = leaves - first < FAN_IN ? leaves - first : FAN_IN;
    for (long j = 0; j < count; j++) {
      snprintf(names[j], sizeof names[j], "leaf-%ld", first + j);
      ins[j] = names[j];
    }
    snprintf(mid_names[m], sizeof mid_names[m], "mid-%ld", m);
    mids[m] = mid_names[m];
    rc = tsr_graph_add(g, mid_names[m], "noop", NULL, 0, ins, (size_t)count);
  }
  if (rc == 0) rc = tsr_graph_add(g, "root", "noop", NULL, 0, mids, (size_t)nmid);
  if (rc == 0) rc = tsr_graph_want(g, "root");
  if (rc != 0) die("build", rc);
  free(ins), free(names), free(mids), free(mid_names);
  return g;
}

/* ---------- one point of the curve ---------- */

typedef struct point_opts {
  const char *scheduler;
  const char *label;          /* first word of each output line */
  long tasks;
  int workers, sim_threads, worker_threads;
} point_opts;

static void run_point(const point_opts *o)
{
  char address_file[64], address[256];
  char log_file[64];
  snprintf(address_file, sizeof address_file, "/tmp/tsr-bench-scale-%d.addr", (int)getpid());
  snprintf(log_file, sizeof log_file, "/tmp/tsr-bench-scale-%d.log", (int)getpid());
  pid_t sched = start_scheduler(o->scheduler, address_file, log_file);
  sched_pid = sched;
  for (int i = 0; i < 500 && !read_address(address_file, address, sizeof address); i++) usleep(10000);
  unlink(address_file);
  void *ctx = zmq_ctx_new();
  zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, o->workers + 64);
  zmq_ctx_set(ctx, ZMQ_IO_THREADS, 2);
  atomic_store(&sim_stop, false);
  atomic_store(&sim_welcomed, 0);
  atomic_store(&sim_computes, 0);
  sim_worker *all = calloc((size_t)o->workers, sizeof *all);
  sim_group *groups = calloc((size_t)o->sim_threads, sizeof *groups);
  for (int t = 0, first = 0; t < o->sim_threads; t++) {
    int n = o->workers / o->sim_threads + (t < o->workers % o->sim_threads);
    groups[t] = (sim_group){.ctx = ctx, .address = address, .w = all + first, .n = n, .first = first,
                            .worker_threads = o->worker_threads};
    pthread_create(&groups[t].thread, NULL, sim_main, &groups[t]);
    first += n;
  }
  for (int i = 0; i < 3000 && atomic_load(&sim_welcomed) < o->workers; i++) usleep(10000);
  if (atomic_load(&sim_welcomed) < o->workers) {
    fprintf(stderr, "scale: only %ld of %d workers welcomed\n", atomic_load(&sim_welcomed), o->workers);
    kill(sched, SIGTERM);
    exit(1);
  }
  tsr_client *client = NULL;
  int rc = tsr_client_open(&client, address, NULL);
  if (rc != 0) die("connect", rc);
  tsr_graph *g = build_tree(o->tasks);
  size_t ntasks = tsr_graph_size(g);
  long base_kib = proc_kib(sched, "VmRSS:");
  tsr_future *f = NULL;
  double t0 = now_s();
  rc = tsr_submit(client, &g, &f);
  double t1 = now_s();
  if (rc != 0) die("submit", rc);
  rc = tsr_future_wait(f, -1);
  double t2 = now_s();
  if (rc != 0) die("wait", rc);
  long peak_kib = proc_kib(sched, "VmHWM:");
  long computes = atomic_load(&sim_computes);
  double longest_s, admitted_s;
  read_stalls(log_file, &longest_s, &admitted_s);
  printf("%s workers=%d tasks=%zu ingest_s=%.3f submit_to_last_s=%.3f decisions=%ld decisions_per_s=%.0f "
         "sched_base_kib=%ld sched_peak_kib=%ld bytes_per_task=%.0f admitted_in_s=%.3f longest_logged_iteration_s=%.3f\n",
         o->label, o->workers, ntasks, t1 - t0, sim_last_done - t0, computes, (double)computes / (t2 - t1), base_kib, peak_kib,
         (double)(peak_kib - base_kib) * 1024.0 / (double)ntasks, admitted_s, longest_s);
  fflush(stdout);
  tsr_future_release(&f);
  tsr_client_close(client);
  atomic_store(&sim_stop, true);
  for (int t = 0; t < o->sim_threads; t++) pthread_join(groups[t].thread, NULL);
  zmq_ctx_term(ctx);
  free(groups);
  free(all);
  kill(sched, SIGTERM);
  waitpid(sched, NULL, 0);
  sched_pid = 0;
  unlink(log_file);
}

static void raise_fd_limit(void)
{
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int main(int argc, char **argv)
{
  static char default_sched[4096];
  const char *workers = "10,30,100,300,1000";
  point_opts o = {.tasks = 1000000, .sim_threads = 2, .worker_threads = 1, .label = "tessera"};
  snprintf(default_sched, sizeof default_sched, "%s", argv[0]);
  char *slash = strrchr(default_sched, '/');
  snprintf(slash ? slash + 1 : default_sched, sizeof default_sched - (size_t)(slash ? slash + 1 - default_sched : 0),
           "tessera-scheduler");
  o.scheduler = default_sched;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--tasks") == 0 && i + 1 < argc) o.tasks = atol(argv[++i]);
    else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc) workers = argv[++i];
    else if (strcmp(argv[i], "--threads-sim") == 0 && i + 1 < argc) o.sim_threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--worker-threads") == 0 && i + 1 < argc) o.worker_threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--scheduler") == 0 && i + 1 < argc) o.scheduler = argv[++i];
    else if (strcmp(argv[i], "--label") == 0 && i + 1 < argc) o.label = argv[++i];
    else {
      printf("usage: tsr-bench-scale [--tasks N] [--workers N,N,...] [--threads-sim T] [--worker-threads T]\n"
             "                       [--scheduler PATH] [--label WORD]   (defaults: 1000000, 10,30,100,300,1000,\n"
             "                       2, 1, tessera-scheduler beside this program, tessera); see bench/scale.sh\n");
      return strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (o.tasks < 1 || o.sim_threads < 1 || o.worker_threads < 1) return 2;
  raise_fd_limit();
  signal(SIGPIPE, SIG_IGN);
  char list[256];
  snprintf(list, sizeof list, "%s", workers);
  for (char *w = strtok(list, ","); w != NULL; w = strtok(NULL, ",")) {
    o.workers = atoi(w);
    if (o.workers < 1) continue;
    if (o.sim_threads > o.workers) o.sim_threads = o.workers;
    run_point(&o);
  }
  return 0;
}
