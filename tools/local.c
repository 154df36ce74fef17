/* `tessera local`: a scheduler and N workers on this machine, a program run
 * against them, and everything stopped afterwards.
 *
 * Order of events: find tessera-scheduler and tessera-worker next to our
 * own executable (with --gpus all, ask `tessera-worker --list-gpus` how
 * many GPUs there are: this binary does not link CUDA); start the scheduler on tcp://127.0.0.1:0 writing its
 * address into a fresh temp dir; start the workers; wait (through
 * libtessera) until all are connected; run PROGRAM with TESSERA_SCHEDULER
 * set; then SIGTERM workers and scheduler (SIGKILL after 5 s), reap them,
 * remove the temp dir, exit with PROGRAM's status (128+signal if killed).
 *
 * Signals: the daemons run in their own process groups, so a terminal's
 * Ctrl-C reaches only us and the program (which shares our group); a
 * SIGINT/SIGTERM sent to us by kill() is forwarded to the program. Any
 * signal during startup aborts it and cleans up. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "tessera/tessera.h"
#include "util/util.h"

#define LOCAL_STARTUP_MS 30000
#define LOCAL_GRACE_MS 5000
#define LOCAL_MAX_WORKERS 1024
#define LOCAL_MAX_EXTRA 64

typedef struct local_opts {
  long workers;              /* CPU workers */
  bool workers_given;
  long threads;              /* 0: CPUs / workers */
  const char *memory_limit;  /* as given, validated */
  const char *gpus;          /* --gpus as given: "all" or "0,1"; NULL: none */
  const char *device_memory_limit;
  int gpu_ids[LOCAL_MAX_WORKERS];
  long n_gpus;
  char *sched_args[LOCAL_MAX_EXTRA];
  size_t n_sched_args;
  char *worker_args[LOCAL_MAX_EXTRA];
  size_t n_worker_args;
  char **program;            /* NULL-terminated, or NULL */
} local_opts;

typedef struct local_run {
  char bin_dir[4096];
  char tmp_dir[4096];
  char address[512];
  cli_child sched;
  cli_child *workers;
  size_t n_workers;
} local_run;

static volatile sig_atomic_t got_signal;
static volatile pid_t program_pid;

static void on_signal(int sig, siginfo_t *info, void *ctx)
{
  (void)ctx;
  got_signal = sig;
  pid_t p = program_pid;
  /* A terminal's signal (si_code SI_KERNEL > 0) already reached the
   * program, which is in our process group; forward only kill()ed ones. */
  if (p > 0 && (info == NULL || info->si_code <= 0)) kill(p, sig);
}

static void install_handlers(void)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO;   /* no SA_RESTART: waits wake up */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tessera local [FLAGS] [--] [PROGRAM ARGS...]\n"
          "  --cpu-workers N           CPU workers to start (default 1; 0 with --gpus)\n"
          "  --gpus all|I,J,...        also one GPU worker per GPU (tessera-worker --gpu I)\n"
          "  --device-memory-limit B   per-GPU-worker device memory limit (default 90%% of the GPU)\n"
          "  --threads-per-worker T    executor threads per CPU worker (default: CPUs / N)\n"
          "  --memory-limit BYTES      per-worker memory limit, e.g. 4GiB (default none)\n"
          "  --dashboard HOST:PORT     the scheduler's dashboard and /metrics (default 127.0.0.1:8787, docs/dashboard.md)\n"
          "  --no-dashboard            no dashboard\n"
          "  --scheduler-arg ARG       extra flag for tessera-scheduler (repeatable)\n"
          "  --worker-arg ARG          extra flag for each tessera-worker (repeatable)\n"
          "Runs PROGRAM with TESSERA_SCHEDULER set and exits with its status. Without\n"
          "PROGRAM, prints the scheduler address and waits for Ctrl-C.\n");
}

static int parse_count(const char *flag, const char *text, long min, long max, long *out)
{
  int64_t v;
  if (tsr_parse_i64(text, &v) != 0 || v < min || v > max)
    return cli_error(CLI_EXIT_USAGE, "local: %s wants a number from %ld to %ld, not '%s'", flag, min, max, text);
  *out = (long)v;
  return -1;
}

/* "0,1,3": GPU indices, each once. Returns -1 to go on or an exit code. */
static int parse_gpu_list(local_opts *o, const char *text)
{
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", text);
  o->n_gpus = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    int64_t v;
    if (tsr_parse_i64(tok, &v) != 0 || v < 0 || v > 1023)
      return cli_error(CLI_EXIT_USAGE, "local: --gpus wants all or GPU indices like 0,1, not '%s'", text);
    for (long i = 0; i < o->n_gpus; i++)
      if (o->gpu_ids[i] == v) return cli_error(CLI_EXIT_USAGE, "local: --gpus names GPU %lld twice", (long long)v);
    if (o->n_gpus == LOCAL_MAX_WORKERS) return cli_error(CLI_EXIT_USAGE, "local: too many GPUs in --gpus");
    o->gpu_ids[o->n_gpus++] = (int)v;
  }
  if (o->n_gpus == 0) return cli_error(CLI_EXIT_USAGE, "local: --gpus wants all or GPU indices like 0,1");
  return -1;
}

static int add_extra(char **list, size_t *n, const char *flag, char *arg)
{
  if (*n == LOCAL_MAX_EXTRA) return cli_error(CLI_EXIT_USAGE, "local: more than %d %s flags", LOCAL_MAX_EXTRA, flag);
  list[(*n)++] = arg;
  return -1;
}

/* Returns -1 to go on, or an exit code. */
static int parse(int argc, char **argv, local_opts *o)
{
  static const struct option longs[] = {
    {"cpu-workers", required_argument, NULL, 'n'},
    {"gpus", required_argument, NULL, 'g'},
    {"device-memory-limit", required_argument, NULL, 'd'},
    {"threads-per-worker", required_argument, NULL, 't'},
    {"memory-limit", required_argument, NULL, 'm'},
    {"scheduler-arg", required_argument, NULL, 's'},
    {"worker-arg", required_argument, NULL, 'w'},
    {"dashboard", required_argument, NULL, 'D'},
    {"no-dashboard", no_argument, NULL, 'N'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
  };
  uint64_t bytes;
  int opt, code = -1;
  optind = 1;
  opterr = 0;
  /* "+": stop at PROGRAM, so its own flags are left alone. */
  while (code < 0 && (opt = getopt_long(argc, argv, "+", longs, NULL)) != -1) {
    switch (opt) {
    case 'n':
      code = parse_count("--cpu-workers", optarg, 0, LOCAL_MAX_WORKERS, &o->workers);
      o->workers_given = true;
      break;
    case 'g':
      o->gpus = optarg;
      if (strcmp(optarg, "all") != 0) code = parse_gpu_list(o, optarg);
      break;
    case 'd':
      if (tsr_parse_bytes(optarg, &bytes) != 0 || bytes == 0)
        code = cli_error(CLI_EXIT_USAGE, "local: --device-memory-limit '%s' is not a size (e.g. 60GiB)", optarg);
      o->device_memory_limit = optarg;
      break;
    case 't': code = parse_count("--threads-per-worker", optarg, 1, 4096, &o->threads); break;
    case 'm':
      if (tsr_parse_bytes(optarg, &bytes) != 0)
        code = cli_error(CLI_EXIT_USAGE, "local: --memory-limit '%s' is not a size (e.g. 4GiB)", optarg);
      o->memory_limit = optarg;
      break;
    case 's': code = add_extra(o->sched_args, &o->n_sched_args, "--scheduler-arg", optarg); break;
    case 'w': code = add_extra(o->worker_args, &o->n_worker_args, "--worker-arg", optarg); break;
    /* passed through: the scheduler checks the address and reports a taken port */
    case 'D':
      code = add_extra(o->sched_args, &o->n_sched_args, "--dashboard", (char *)"--dashboard");
      if (code < 0) code = add_extra(o->sched_args, &o->n_sched_args, "--dashboard", optarg);
      break;
    case 'N': code = add_extra(o->sched_args, &o->n_sched_args, "--no-dashboard", (char *)"--no-dashboard"); break;
    case 'h': usage(stdout); code = 0; break;
    default:
      cli_error(CLI_EXIT_USAGE, "local: bad flag '%s'", argv[optind - 1]);
      usage(stderr);
      code = CLI_EXIT_USAGE;
    }
  }
  if (code < 0 && optind < argc) o->program = &argv[optind];
  if (code < 0 && o->gpus != NULL && !o->workers_given) o->workers = 0;
  if (code < 0 && o->device_memory_limit != NULL && o->gpus == NULL)
    code = cli_error(CLI_EXIT_USAGE, "local: --device-memory-limit needs --gpus");
  if (code < 0 && o->gpus == NULL && o->workers == 0)
    code = cli_error(CLI_EXIT_USAGE, "local: no workers: --cpu-workers 0 needs --gpus");
  return code;
}

/* --gpus all: as many as `tessera-worker --list-gpus` prints (the tools do
 * not link CUDA; the worker does). */
static int count_gpus(const local_run *r, local_opts *o)
{
  char path[4200], out[8192];
  snprintf(path, sizeof path, "%s/tessera-worker", r->bin_dir);
  char *argv[] = {path, "--list-gpus", NULL};
  int status = cli_capture(argv, out, sizeof out);
  if (status != 0)
    return cli_error(CLI_EXIT_FAIL, "local: --gpus all: no GPU to use (tessera-worker --list-gpus %s)",
                     status < 0 ? "could not run" : "found none; see its message above");
  o->n_gpus = 0;
  for (char *save = NULL, *line = strtok_r(out, "\n", &save); line != NULL && o->n_gpus < LOCAL_MAX_WORKERS;
       line = strtok_r(NULL, "\n", &save)) {
    int64_t v;
    char *tab = strchr(line, '\t');
    if (tab != NULL) *tab = '\0';
    if (tsr_parse_i64(line, &v) == 0 && v >= 0) o->gpu_ids[o->n_gpus++] = (int)v;
  }
  if (o->n_gpus == 0) return cli_error(CLI_EXIT_FAIL, "local: --gpus all: tessera-worker --list-gpus listed no GPU");
  return -1;
}

static int start_scheduler(local_run *r, const local_opts *o)
{
  char path[4200], addr_file[4200];
  snprintf(path, sizeof path, "%s/tessera-scheduler", r->bin_dir);
  snprintf(addr_file, sizeof addr_file, "%s/address", r->tmp_dir);
  char *argv[8 + LOCAL_MAX_EXTRA] = {path, "--listen", "tcp://127.0.0.1:0", "--address-file", addr_file,
                                     "--log-level", "warn"};
  size_t n = 7;
  for (size_t i = 0; i < o->n_sched_args; i++) argv[n++] = o->sched_args[i];
  argv[n] = NULL;
  if (cli_spawn(&r->sched, "tessera-scheduler", argv) != 0)
    return cli_error(CLI_EXIT_FAIL, "local: cannot start %s: %s", path, strerror(errno));
  return -1;
}

static int died_during_startup(cli_child *child)
{
  char how[128];
  return cli_error(CLI_EXIT_FAIL, "local: %s %s during startup", child->name,
                   cli_describe_status(child->status, how, sizeof how));
}

/* Reads the address the scheduler wrote (it renames the file into place,
 * so a file that exists is complete). Returns -1 to go on or an exit code. */
static int await_address(local_run *r, uint64_t deadline)
{
  char path[4200];
  snprintf(path, sizeof path, "%s/address", r->tmp_dir);
  while (tsr_now_ms() < deadline) {
    if (got_signal) return 128 + got_signal;
    if (cli_child_exited(&r->sched)) return died_during_startup(&r->sched);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
      bool ok = fgets(r->address, sizeof r->address, f) != NULL;
      fclose(f);
      r->address[strcspn(r->address, "\r\n")] = '\0';
      if (ok && r->address[0] != '\0') return -1;
    }
    cli_sleep_ms(20);
  }
  return cli_error(CLI_EXIT_FAIL, "local: tessera-scheduler did not write its address within %d s",
                   LOCAL_STARTUP_MS / 1000);
}

/* One worker: a CPU worker with `threads`, or GPU worker `gpu` (>= 0). */
static int start_worker(local_run *r, const local_opts *o, const char *name, const char *threads, int gpu)
{
  char path[4200], gpu_arg[16];
  snprintf(path, sizeof path, "%s/tessera-worker", r->bin_dir);
  snprintf(gpu_arg, sizeof gpu_arg, "%d", gpu);
  char *argv[20 + LOCAL_MAX_EXTRA] = {path, "--scheduler", r->address, "--name", (char *)name, "--log-level", "warn"};
  size_t n = 7;
  if (gpu < 0) argv[n++] = "--threads", argv[n++] = (char *)threads;
  if (gpu >= 0) argv[n++] = "--gpu", argv[n++] = gpu_arg;
  if (gpu >= 0 && o->device_memory_limit != NULL)
    argv[n++] = "--device-memory-limit", argv[n++] = (char *)o->device_memory_limit;
  if (o->memory_limit != NULL) argv[n++] = "--memory-limit", argv[n++] = (char *)o->memory_limit;
  for (size_t k = 0; k < o->n_worker_args; k++) argv[n++] = o->worker_args[k];
  argv[n] = NULL;
  if (cli_spawn(&r->workers[r->n_workers], name, argv) != 0)
    return cli_error(CLI_EXIT_FAIL, "local: cannot start %s: %s", path, strerror(errno));
  r->n_workers++;
  return -1;
}

static int start_workers(local_run *r, const local_opts *o)
{
  char threads[32], name[64];
  long t = o->threads;
  if (t == 0 && o->workers > 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    t = cpus > o->workers ? cpus / o->workers : 1;
  }
  snprintf(threads, sizeof threads, "%ld", t);
  int code = -1;
  for (long i = 0; code < 0 && i < o->n_gpus; i++) {
    snprintf(name, sizeof name, "local-gpu-%d", o->gpu_ids[i]);
    code = start_worker(r, o, name, threads, o->gpu_ids[i]);
  }
  for (long i = 0; code < 0 && i < o->workers; i++) {
    snprintf(name, sizeof name, "local-worker-%ld", i);
    code = start_worker(r, o, name, threads, -1);
  }
  return code;
}

/* Waits until every worker is connected, watching for dead daemons. */
static int await_workers(local_run *r, uint64_t deadline)
{
  tsr_client_opts opts = TSR_CLIENT_OPTS_DEFAULT;
  opts.name = "tessera-local";
  opts.connect_timeout_ms = (int)(deadline > tsr_now_ms() ? deadline - tsr_now_ms() : 1);
  tsr_client *client = NULL;
  int code = -1;
  if (tsr_client_open(&client, r->address, &opts) != 0)
    code = cli_error(CLI_EXIT_FAIL, "local: cannot reach the scheduler at %s: %s", r->address, tsr_errmsg());
  while (code < 0) {
    int rc = tsr_wait_for_workers(client, r->n_workers, 250);
    if (rc == 0) break;
    if (got_signal) code = 128 + got_signal;
    else if (rc != TSR_ETIMEDOUT) code = cli_error(CLI_EXIT_FAIL, "local: lost the scheduler: %s", tsr_errmsg());
    else if (cli_child_exited(&r->sched)) code = died_during_startup(&r->sched);
    for (size_t i = 0; code < 0 && i < r->n_workers; i++)
      if (cli_child_exited(&r->workers[i])) code = died_during_startup(&r->workers[i]);
    if (code < 0 && tsr_now_ms() >= deadline)
      code = cli_error(CLI_EXIT_FAIL, "local: the %zu workers did not all connect within %d s", r->n_workers,
                       LOCAL_STARTUP_MS / 1000);
  }
  tsr_client_close(client);
  return code;
}

static int run_program(local_run *r, char **program)
{
  pid_t pid = fork();
  if (pid < 0) return cli_error(CLI_EXIT_FAIL, "local: fork: %s", strerror(errno));
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    setenv("TESSERA_SCHEDULER", r->address, 1);
    execvp(program[0], program);
    fprintf(stderr, "tessera: local: cannot run '%s': %s\n", program[0], strerror(errno));
    _exit(127);
  }
  program_pid = pid;
  if (got_signal) kill(pid, got_signal);   /* it came between fork and here */
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return cli_error(CLI_EXIT_FAIL, "local: waitpid: %s", strerror(errno));
  program_pid = 0;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return CLI_EXIT_FAIL;
}

/* No PROGRAM: print the address for others and wait for a signal. */
static int serve(local_run *r)
{
  printf("%s\n", r->address);
  fflush(stdout);
  while (!got_signal) {
    if (cli_child_exited(&r->sched)) {
      char how[128];
      return cli_error(CLI_EXIT_FAIL, "local: tessera-scheduler %s",
                       cli_describe_status(r->sched.status, how, sizeof how));
    }
    cli_sleep_ms(200);
  }
  return 0;
}

static void cleanup(local_run *r)
{
  /* Workers first, so their goodbye still finds the scheduler. */
  if (r->workers != NULL) cli_stop_children(r->workers, r->n_workers, LOCAL_GRACE_MS);
  cli_stop_children(&r->sched, 1, LOCAL_GRACE_MS);
  char path[4200];
  snprintf(path, sizeof path, "%s/address", r->tmp_dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/address.tmp", r->tmp_dir);
  unlink(path);
  if (r->tmp_dir[0] != '\0' && rmdir(r->tmp_dir) != 0)
    cli_error(CLI_EXIT_FAIL, "local: could not remove %s: %s", r->tmp_dir, strerror(errno));
  free(r->workers);
}

static int prepare(local_run *r, local_opts *o)
{
  if (cli_self_dir(r->bin_dir, sizeof r->bin_dir) != 0)
    return cli_error(CLI_EXIT_FAIL, "local: cannot find my own executable (/proc/self/exe)");
  const char *need[] = {"tessera-scheduler", "tessera-worker"};
  for (size_t i = 0; i < 2; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", r->bin_dir, need[i]);
    if (access(path, X_OK) != 0)
      return cli_error(CLI_EXIT_FAIL, "local: %s not found next to tessera (%s)", need[i], path);
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(r->tmp_dir, sizeof r->tmp_dir, "%s/tessera-local-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (mkdtemp(r->tmp_dir) == NULL) {
    int code = cli_error(CLI_EXIT_FAIL, "local: mkdtemp %s: %s", r->tmp_dir, strerror(errno));
    r->tmp_dir[0] = '\0';
    return code;
  }
  if (o->gpus != NULL && strcmp(o->gpus, "all") == 0) {
    int code = count_gpus(r, o);
    if (code >= 0) return code;
  }
  r->workers = calloc((size_t)(o->workers + o->n_gpus), sizeof *r->workers);
  if (r->workers == NULL) return cli_error(CLI_EXIT_FAIL, "local: out of memory");
  return -1;
}

int cli_local(int argc, char **argv)
{
  local_opts o = {.workers = 1};
  int code = parse(argc, argv, &o);
  if (code >= 0) return code;
  install_handlers();
  local_run r;
  memset(&r, 0, sizeof r);
  uint64_t deadline = tsr_now_ms() + LOCAL_STARTUP_MS;
  code = prepare(&r, &o);
  if (code < 0) code = start_scheduler(&r, &o);
  if (code < 0) code = await_address(&r, deadline);
  if (code < 0) code = start_workers(&r, &o);
  if (code < 0) code = await_workers(&r, deadline);
  if (code < 0) {
    fprintf(stderr, "tessera local: scheduler at %s, %zu worker%s (%ld GPU)\n", r.address, r.n_workers,
            r.n_workers == 1 ? "" : "s", o.n_gpus);
    code = o.program != NULL ? run_program(&r, o.program) : serve(&r);
  }
  cleanup(&r);
  return code;
}
