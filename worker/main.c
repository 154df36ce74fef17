/* tessera-worker: command line, signals, then tsr_worker_run().
 * Flags are those of docs/development.md; a bad flag exits 2. */
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"
#include "kernels.h"
#include "worker.h"

#define DEFAULT_FETCH_TIMEOUT_MS 30000
/* A GPU worker's executor threads are streams: a few keep the device busy
 * while others wait on their transfers or the scheduler. */
#define DEFAULT_GPU_THREADS 4

static bool threads_given;
static const char *device_tier_flag;  /* --device-memory-target or -spill, when given */

static int stop_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
  (void)sig;
  char byte = 1;
  ssize_t ignored = write(stop_pipe[1], &byte, 1);
  (void)ignored;
}

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tessera-worker --scheduler ADDR [options]\n"
          "\n"
          "Runs tasks the scheduler sends and serves their chunks to peers.\n"
          "\n"
          "  --scheduler ADDR           scheduler address, tcp://HOST:PORT (or env TESSERA_SCHEDULER)\n"
          "  --threads N                executor threads (default: number of CPUs)\n"
          "  --memory-limit BYTES       memory limit, e.g. 4GiB (default 0 = none); chunks spill to disk above it\n"
          "  --memory-target F          evict chunks when they hold more than F of the limit (default 0.6)\n"
          "  --memory-spill F           evict chunks when the process RSS exceeds F of the limit (default 0.7)\n"
          "  --memory-pause F           take no new tasks while chunks in memory exceed F of the limit (default 0.8)\n"
          "  --spill-dir DIR            where spill files go (default $TMPDIR or /tmp; a private subdirectory)\n"
          "  --disk-limit BYTES         most bytes of spill files (default 0 = none)\n"
          "  --spill-codec C            blosclz|lz4|zstd|zlib (default lz4)\n"
          "  --spill-level N            compression level 0-9 (default 5)\n"
          "  --spill-bandwidth BYTES    disk throughput per second assumed by the scheduler's recompute-or-spill\n"
          "                             costs (default: measured at start-up, then over real spills)\n"
          "  --name NAME                worker name (default HOSTNAME-PID)\n"
          "  --listen-data ADDR         data socket (default tcp://IP:0, IP the route to the scheduler)\n"
          "  --log-level LEVEL          debug|info|warn|error (default info)\n"
          "  --heartbeat-interval DUR   heartbeat period (default 1s)\n"
          "  --heartbeat-timeout DUR    reconnect after this much scheduler silence (default 10s)\n"
          "  --fetch-timeout DUR        give up fetching one input after this (default 30s)\n"
          "  --gpu N                    own GPU N: ops with a CUDA variant run there (default: CPU worker)\n"
          "  --device-memory-limit BYTES  hard limit on the GPU's memory (default 90%% of it)\n"
          "  --device-memory-target F   move idle device chunks to host memory above F of it (default 0.8)\n"
          "  --device-memory-spill F    ... and while all device bytes in use exceed F of it (default 0.9)\n"
          "  --pinned-memory-limit BYTES  pinned host memory for chunks moved off the GPU (default: the device\n"
          "                             limit, at most 1/8 of RAM and 1/4 of --memory-limit; 0 = none)\n"
          "  --list-gpus                print the GPUs this build can use, one per line, and exit\n"
          "  --help, --version\n"
          "\n"
          "With --gpu, --threads is the number of CUDA streams (default %d).\n"
          "Env TESSERA_TEST_OPS=1 registers the test-only ops (crash, fail, sleep).\n",
          DEFAULT_GPU_THREADS);
}

static int bad(const char *flag, const char *value, const char *why)
{
  fprintf(stderr, "tessera-worker: invalid %s '%s': %s (see --help)\n", flag, value ? value : "", why);
  return 2;
}

static int copy_str(char *dst, size_t cap, const char *flag, const char *value)
{
  if (value[0] == '\0' || strlen(value) >= cap) return bad(flag, value, "empty or too long");
  snprintf(dst, cap, "%s", value);
  return 0;
}

static int parse_duration(const char *flag, const char *value, uint64_t *ms_p)
{
  if (tsr_parse_duration_ms(value, ms_p) != 0 || *ms_p == 0) return bad(flag, value, "expected a duration like 500ms or 2s");
  return 0;
}

/* Applies one flag with its value. 0, 1 for "--help/--version done", 2 bad. */
static int apply_flag(tsr_worker_opts *o, const char *flag, const char *v)
{
  int64_t n;
  uint64_t ms;
  if (strcmp(flag, "--scheduler") == 0) return copy_str(o->scheduler, sizeof o->scheduler, flag, v);
  if (strcmp(flag, "--name") == 0) return copy_str(o->name, sizeof o->name, flag, v);
  if (strcmp(flag, "--listen-data") == 0) return copy_str(o->listen_data, sizeof o->listen_data, flag, v);
  if (strcmp(flag, "--threads") == 0) {
    if (tsr_parse_i64(v, &n) != 0 || n < 1 || n > 4096) return bad(flag, v, "expected an integer from 1 to 4096");
    o->threads = (int)n;
    threads_given = true;
    return 0;
  }
  if (strcmp(flag, "--gpu") == 0) {
    if (tsr_parse_i64(v, &n) != 0 || n < 0 || n > 1023) return bad(flag, v, "expected a GPU index (0, 1, ...)");
    o->gpu = (int)n;
    return 0;
  }
  if (strcmp(flag, "--device-memory-limit") == 0)
    return tsr_parse_bytes(v, &o->device_memory_limit) == 0 ? 0 : bad(flag, v, "expected a size like 60GiB");
  if (strcmp(flag, "--pinned-memory-limit") == 0) {
    device_tier_flag = "--pinned-memory-limit";
    return tsr_parse_bytes(v, &o->pinned_memory_limit) == 0 ? 0 : bad(flag, v, "expected a size like 8GiB");
  }
  if (strcmp(flag, "--memory-limit") == 0)
    return tsr_parse_bytes(v, &o->memory_limit) == 0 ? 0 : bad(flag, v, "expected a size like 4GiB");
  if (strcmp(flag, "--log-level") == 0) {
    int level = tsr_log_level_parse(v);
    if (level < 0) return bad(flag, v, "expected debug, info, warn or error");
    tsr_log_set_level((tsr_log_level)level);
    return 0;
  }
  if (strcmp(flag, "--heartbeat-interval") == 0) return parse_duration(flag, v, &o->heartbeat_interval_ms);
  if (strcmp(flag, "--heartbeat-timeout") == 0) return parse_duration(flag, v, &o->heartbeat_timeout_ms);
  if (strcmp(flag, "--fetch-timeout") == 0) {
    if (parse_duration(flag, v, &ms) != 0) return 2;
    o->fetch_timeout_ms = ms > 3600000 ? 3600000 : (int)ms;
    return 0;
  }
  tsr_errbuf terr = {{0}};
  int trc = tsr_tiers_opt(&o->tiers, flag, v, &terr);
  if (trc != TSR_ENOTFOUND) return trc == 0 ? 0 : bad(flag, v, terr.text);
  trc = tsr_devtier_opt(&o->devtier, flag, v, &terr);
  if (trc != TSR_ENOTFOUND) device_tier_flag = strstr(flag, "target") ? "--device-memory-target" : "--device-memory-spill";
  if (trc != TSR_ENOTFOUND) return trc == 0 ? 0 : bad(flag, v, terr.text);
  fprintf(stderr, "tessera-worker: unknown option '%s' (see --help)\n", flag);
  return 2;
}

/* Returns 0 to run, 1 to exit 0 (help/version/GPU list printed), 2 on a
 * bad flag, 3 when --list-gpus found none (exit 1). */
static int parse_args(int argc, char **argv, tsr_worker_opts *o)
{
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      usage(stdout);
      return 1;
    }
    if (strcmp(arg, "--version") == 0) {
      printf("tessera-worker %s\n", TSR_VERSION_STRING);
      return 1;
    }
    if (strcmp(arg, "--list-gpus") == 0) {
      tsr_errbuf err = {{0}};
      if (tsr_wgpu_list(stdout, &err) > 0) return 1;
      fprintf(stderr, "tessera-worker: %s\n", err.text);
      return 3;
    }
    if (strncmp(arg, "--", 2) != 0) {
      fprintf(stderr, "tessera-worker: unexpected argument '%s' (see --help)\n", arg);
      return 2;
    }
    char flag[64];
    const char *eq = strchr(arg, '=');
    const char *value;
    if (eq != NULL) {
      snprintf(flag, sizeof flag, "%.*s", (int)(eq - arg), arg);
      value = eq + 1;
    } else {
      snprintf(flag, sizeof flag, "%s", arg);
      if (i + 1 >= argc) {
        fprintf(stderr, "tessera-worker: option '%s' needs a value (see --help)\n", arg);
        return 2;
      }
      value = argv[++i];
    }
    int rc = apply_flag(o, flag, value);
    if (rc != 0) return rc;
  }
  return 0;
}

/* "tcp://HOST:PORT" (or ipc://PATH). Only the syntax: a host that does not
 * resolve yet is retried at run time, like one that does not answer. */
static bool valid_endpoint(const char *addr)
{
  if (strncmp(addr, "ipc://", 6) == 0) return addr[6] != '\0';
  if (strncmp(addr, "tcp://", 6) != 0) return false;
  const char *colon = strrchr(addr + 6, ':');
  if (colon == NULL || colon == addr + 6 || colon[1] == '\0') return false;
  if (strcmp(colon + 1, "*") == 0) return true;
  int64_t port;
  return tsr_parse_i64(colon + 1, &port) == 0 && port >= 0 && port <= 65535;
}

static void default_opts(tsr_worker_opts *o)
{
  memset(o, 0, sizeof *o);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  o->threads = cpus > 0 ? (int)cpus : 1;
  o->heartbeat_interval_ms = 1000;
  o->heartbeat_timeout_ms = 10000;
  o->fetch_timeout_ms = DEFAULT_FETCH_TIMEOUT_MS;
  o->gpu = -1;
  o->pinned_memory_limit = TSR_PINNED_DEFAULT;
  const char *env = getenv("TESSERA_SCHEDULER");
  if (env != NULL && env[0] != '\0' && strlen(env) < sizeof o->scheduler) snprintf(o->scheduler, sizeof o->scheduler, "%s", env);
}

static int install_signals(void)
{
  if (pipe(stop_pipe) != 0) return -1;
  for (int i = 0; i < 2; i++) fcntl(stop_pipe[i], F_SETFL, fcntl(stop_pipe[i], F_GETFL) | O_NONBLOCK);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

int main(int argc, char **argv)
{
  tsr_log_set_component("worker");
  tsr_worker_opts opts;
  default_opts(&opts);
  opts.tiers = (tsr_tiers_opts)TSR_TIERS_OPTS_DEFAULT;
  opts.devtier = (tsr_devtier_opts)TSR_DEVTIER_OPTS_DEFAULT;
  int rc = parse_args(argc, argv, &opts);
  if (rc != 0) return rc == 1 ? 0 : rc == 3 ? 1 : 2;
  if (opts.gpu >= 0 && !tsr_wgpu_built()) {
    tsr_errbuf err = {{0}};
    tsr_wgpu_list(stdout, &err);
    fprintf(stderr, "tessera-worker: --gpu %d: %s\n", opts.gpu, err.text);
    return 1;
  }
  if (opts.gpu >= 0 && !threads_given) opts.threads = DEFAULT_GPU_THREADS;
  if ((opts.device_memory_limit != 0 || device_tier_flag != NULL) && opts.gpu < 0) {
    fprintf(stderr, "tessera-worker: %s needs --gpu N (see --help)\n",
            opts.device_memory_limit != 0 ? "--device-memory-limit" : device_tier_flag);
    return 2;
  }
  if (opts.scheduler[0] == '\0') {
    fprintf(stderr, "tessera-worker: --scheduler ADDR (or env TESSERA_SCHEDULER) is required (see --help)\n");
    return 2;
  }
  if (!valid_endpoint(opts.scheduler)) return bad("--scheduler", opts.scheduler, "expected tcp://HOST:PORT");
  if (opts.listen_data[0] != '\0' && !valid_endpoint(opts.listen_data))
    return bad("--listen-data", opts.listen_data, "expected tcp://IP:PORT (port 0 picks a free one)");
  if (opts.name[0] == '\0') {
    char host[128] = "worker";
    gethostname(host, sizeof host - 1);
    snprintf(opts.name, sizeof opts.name, "%s-%d", host, (int)getpid());
  }
  tsr_worker_prefer_huge_pages(argv);   /* may re-execute this process */
  const char *test_ops = getenv("TESSERA_TEST_OPS");
  tsr_ops_init(test_ops != NULL && strcmp(test_ops, "1") == 0);
  if (install_signals() != 0) {
    fprintf(stderr, "tessera-worker: cannot create the signal pipe\n");
    return 1;
  }
  rc = tsr_worker_run(&opts, stop_pipe[0]);
  close(stop_pipe[0]);
  close(stop_pipe[1]);
  return rc;
}
