/* tessera-worker: settings (flags, environment, config file through
 * common/config), signals, then tsr_worker_run(). Flags are those of
 * docs/worker.md; a bad setting, from wherever, exits 2. */
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plugins.h"
#include "config/config.h"
#include "http.h"
#include "net/curve.h"
#include "util/limits.h"
#include "gpu.h"
#include "kernels.h"
#include "worker.h"

#define DEFAULT_FETCH_TIMEOUT_MS 30000
/* A GPU worker's executor threads are streams: a few keep the device busy
 * while others wait on their transfers or the scheduler. */
#define DEFAULT_GPU_THREADS 4

static bool threads_given;

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
          "  --scheduler ADDR           scheduler address, tcp://HOST:PORT (env TESSERA_SCHEDULER_ADDRESS or\n"
          "                             TESSERA_SCHEDULER); a scheduler not up yet is waited for\n"
          "  --threads N                executor threads (default: number of CPUs)\n"
          "  --memory-limit BYTES       memory limit, e.g. 4GiB (default 0 = none); chunks spill to disk above it\n"
          "  --max-chunk-bytes BYTES    refuse a task whose input or created output is larger (default 64GiB)\n"
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
          "  --listen-data ADDR         data socket to bind (default tcp://IP:0, IP the route to the scheduler)\n"
          "  --contact-address ADDR     data address to advertise to the scheduler and peers when it differs from\n"
          "                             the bound one (NAT, containers): tcp://HOST:PORT, or tcp://HOST for the\n"
          "                             bound port\n"
          "  --metrics HOST:PORT        serve Prometheus /metrics over HTTP (:PORT is loopback; default off;\n"
          "                             docs/metrics.md)\n"
          "  --transport ucx|zmq|auto   data plane: serve chunks over UCX, ZeroMQ (default), or both (auto:\n"
          "                             UCX when it starts and CURVE is off); fetch over UCX when a peer offers\n"
          "                             it (zmq: only from peers without ZeroMQ). UCX_TLS picks UCX's transports\n"
          "                             (docs/transport.md)\n"
          "  --recv-pool-warm NxSIZE    with --transport ucx|auto: map and fault N UCX receive buffers of SIZE at\n"
          "                             start, before any fetch (default 3x64MiB; 0 = none; at most the pool's\n"
          "                             idle limit, 1/16 of --memory-limit)\n"
          "  --fetch-ahead on|off       for a queued task's inputs, make receive buffers of their sizes and\n"
          "                             connect to their peers in the background (default on)\n"
          "  --curve-secret FILE        this worker's CURVE secret key (tessera keygen); with --scheduler-key:\n"
          "                             the scheduler link is authenticated and encrypted, and the data socket\n"
          "                             serves only peers the scheduler introduced (docs/security.md)\n"
          "  --scheduler-key FILE       the scheduler's CURVE public key (its .pub file)\n"
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
          "  --config FILE              read settings from FILE (key = value lines; also $TESSERA_CONFIG)\n"
          "  --print-config             print the settings given and where each came from, then exit\n"
          "  --list-gpus                print the GPUs this build can use, one per line, and exit\n"
          "  --help, --version\n"
          "\n"
          "With --gpu, --threads is the number of CUDA streams (default %d).\n"
          "Every setting can also come from the environment, TESSERA_ and its name in capitals with\n"
          "underscores (TESSERA_MEMORY_LIMIT=4GiB), except --scheduler: TESSERA_SCHEDULER_ADDRESS; and\n"
          "from the config file (memory-limit = 4GiB). Flags win over the environment, the environment\n"
          "over the file (docs/deploy.md).\n"
          "Env TESSERA_TEST_OPS=1 registers the test-only ops (crash, fail, sleep).\n",
          DEFAULT_GPU_THREADS);
}

/* The settings, in the order they are applied (config.h). */
static const tsr_config_key KEYS[] = {
  {"help", NULL, NULL, TSR_CONFIG_ACTION},
  {"version", NULL, NULL, TSR_CONFIG_ACTION},
  {"list-gpus", NULL, NULL, TSR_CONFIG_ACTION},
  {"print-config", NULL, NULL, TSR_CONFIG_ACTION},
  /* TESSERA_SCHEDULER is what clients read: one environment serves both */
  {"scheduler", "TESSERA_SCHEDULER_ADDRESS", "TESSERA_SCHEDULER", 0},
  {"name", "TESSERA_NAME", NULL, 0},
  {"threads", "TESSERA_THREADS", NULL, 0},
  {"memory-limit", "TESSERA_MEMORY_LIMIT", NULL, 0},
  {"max-chunk-bytes", "TESSERA_MAX_CHUNK_BYTES", NULL, 0},
  {"memory-target", "TESSERA_MEMORY_TARGET", NULL, 0},
  {"memory-spill", "TESSERA_MEMORY_SPILL", NULL, 0},
  {"memory-pause", "TESSERA_MEMORY_PAUSE", NULL, 0},
  {"spill-dir", "TESSERA_SPILL_DIR", NULL, 0},
  {"disk-limit", "TESSERA_DISK_LIMIT", NULL, 0},
  {"spill-codec", "TESSERA_SPILL_CODEC", NULL, 0},
  {"spill-level", "TESSERA_SPILL_LEVEL", NULL, 0},
  {"spill-bandwidth", "TESSERA_SPILL_BANDWIDTH", NULL, 0},
  {"listen-data", "TESSERA_LISTEN_DATA", NULL, 0},
  {"contact-address", "TESSERA_CONTACT_ADDRESS", NULL, 0},
  {"metrics", "TESSERA_METRICS", NULL, 0},
  {"transport", "TESSERA_TRANSPORT", NULL, 0},
  {"recv-pool-warm", "TESSERA_RECV_POOL_WARM", NULL, 0},
  {"fetch-ahead", "TESSERA_FETCH_AHEAD", NULL, 0},
  {"curve-secret", "TESSERA_CURVE_SECRET", NULL, 0},
  {"scheduler-key", "TESSERA_SCHEDULER_KEY", NULL, 0},
  {"log-level", "TESSERA_LOG_LEVEL", NULL, 0},
  {"heartbeat-interval", "TESSERA_HEARTBEAT_INTERVAL", NULL, 0},
  {"heartbeat-timeout", "TESSERA_HEARTBEAT_TIMEOUT", NULL, 0},
  {"fetch-timeout", "TESSERA_FETCH_TIMEOUT", NULL, 0},
  {"gpu", "TESSERA_GPU", NULL, 0},
  {"device-memory-limit", "TESSERA_DEVICE_MEMORY_LIMIT", NULL, 0},
  {"device-memory-target", "TESSERA_DEVICE_MEMORY_TARGET", NULL, 0},
  {"device-memory-spill", "TESSERA_DEVICE_MEMORY_SPILL", NULL, 0},
  {"pinned-memory-limit", "TESSERA_PINNED_MEMORY_LIMIT", NULL, 0},
};
static const tsr_config_spec SPEC = {"worker", KEYS, sizeof KEYS / sizeof KEYS[0]};

static int copy_str(char *dst, size_t cap, const char *value, tsr_errbuf *err)
{
  if (value[0] == '\0' || strlen(value) >= cap)
    return tsr_fail(err, TSR_EINVAL, "\"%s\" is empty or longer than %zu bytes", value, cap - 1);
  snprintf(dst, cap, "%s", value);
  return 0;
}

static int parse_duration(const char *value, uint64_t *ms_p, tsr_errbuf *err)
{
  if (tsr_parse_duration_ms(value, ms_p) != 0 || *ms_p == 0)
    return tsr_fail(err, TSR_EINVAL, "\"%s\" is not a duration (e.g. 500ms, 2s)", value);
  return 0;
}

static int parse_size(const char *value, uint64_t *bytes_p, tsr_errbuf *err)
{
  if (tsr_parse_bytes(value, bytes_p) != 0)
    return tsr_fail(err, TSR_EINVAL, "\"%s\" is not a size (e.g. 4GiB, 512MB)", value);
  return 0;
}

/* --recv-pool-warm: "0", or NxSIZE (3x64MiB). */
static int parse_pool_warm(const char *value, tsr_worker_opts *o, tsr_errbuf *err)
{
  char count[32];
  const char *x = strchr(value, 'x');
  int64_t n = -1;
  uint64_t bytes = 0;
  if (strcmp(value, "0") == 0) {
    o->recv_pool_warm_count = 0;
    return 0;
  }
  if (x != NULL && (size_t)(x - value) < sizeof count) {
    snprintf(count, sizeof count, "%.*s", (int)(x - value), value);
    if (tsr_parse_i64(count, &n) != 0 || tsr_parse_bytes(x + 1, &bytes) != 0) n = -1;
  }
  if (n < 0 || n > 64 || (n > 0 && bytes == 0))
    return tsr_fail(err, TSR_EINVAL, "\"%s\" is not COUNTxSIZE (e.g. 3x64MiB; count 0-64) or 0", value);
  o->recv_pool_warm_count = (unsigned)n;
  o->recv_pool_warm_bytes = bytes;
  return 0;
}

static int parse_on_off(const char *value, bool *on_p, tsr_errbuf *err)
{
  if (strcmp(value, "on") == 0 || strcmp(value, "1") == 0) *on_p = true;
  else if (strcmp(value, "off") == 0 || strcmp(value, "0") == 0) *on_p = false;
  else return tsr_fail(err, TSR_EINVAL, "\"%s\" is not on or off", value);
  return 0;
}

/* "tcp://HOST:PORT" (or ipc://PATH). Only the syntax: a host that does not
 * resolve yet is retried at run time, like one that does not answer. With
 * port_optional, "tcp://HOST" passes too. */
static bool valid_endpoint(const char *addr, bool port_optional)
{
  if (strncmp(addr, "ipc://", 6) == 0) return addr[6] != '\0';
  if (strncmp(addr, "tcp://", 6) != 0 || addr[6] == '\0' || addr[6] == ':') return false;
  const char *colon = strrchr(addr + 6, ':');
  if (colon == NULL) return port_optional && strchr(addr + 6, '/') == NULL;
  if (colon[1] == '\0') return false;
  if (strcmp(colon + 1, "*") == 0) return true;
  int64_t port;
  return tsr_parse_i64(colon + 1, &port) == 0 && port >= 0 && port <= 65535;
}

static int parse_endpoint(const char *v, char *dst, size_t cap, bool port_optional, const char *want, tsr_errbuf *err)
{
  if (!valid_endpoint(v, port_optional)) return tsr_fail(err, TSR_EINVAL, "\"%s\" is not an address (expected %s)", v, want);
  return copy_str(dst, cap, v, err);
}

/* The worker's own numbers and addresses; tiers and device tier below. */
/* --curve-secret and --scheduler-key: read by check_opts once both are known. */
static char curve_secret[4096], scheduler_key[4096];

/* --metrics: checked here, so a typo exits 2. */
static int parse_metrics(tsr_worker_opts *o, const char *v, tsr_errbuf *err)
{
  char host[64];
  unsigned port;
  if (tsr_http_parse_addr(v, host, &port, err) != 0) return TSR_EINVAL;
  return copy_str(o->metrics, sizeof o->metrics, v, err);
}

static int apply_core(tsr_worker_opts *o, const char *name, const char *v, tsr_errbuf *err)
{
  int64_t n;
  uint64_t ms;
  if (strcmp(name, "scheduler") == 0)
    return parse_endpoint(v, o->scheduler, sizeof o->scheduler, false, "tcp://HOST:PORT", err);
  if (strcmp(name, "name") == 0) return copy_str(o->name, sizeof o->name, v, err);
  if (strcmp(name, "listen-data") == 0)
    return parse_endpoint(v, o->listen_data, sizeof o->listen_data, false, "tcp://IP:PORT, port 0 picks one", err);
  if (strcmp(name, "contact-address") == 0)
    return parse_endpoint(v, o->contact_address, sizeof o->contact_address, true, "tcp://HOST:PORT or tcp://HOST", err);
  if (strcmp(name, "metrics") == 0) return parse_metrics(o, v, err);
  if (strcmp(name, "transport") == 0) return tsr_transport_parse(v, &o->transport, err);
  if (strcmp(name, "recv-pool-warm") == 0) return parse_pool_warm(v, o, err);
  if (strcmp(name, "fetch-ahead") == 0) return parse_on_off(v, &o->fetch_ahead, err);
  if (strcmp(name, "curve-secret") == 0) return copy_str(curve_secret, sizeof curve_secret, v, err);
  if (strcmp(name, "scheduler-key") == 0) return copy_str(scheduler_key, sizeof scheduler_key, v, err);
  if (strcmp(name, "threads") == 0) {
    if (tsr_parse_i64(v, &n) != 0 || n < 1 || n > 4096)
      return tsr_fail(err, TSR_EINVAL, "\"%s\" is not a thread count from 1 to 4096", v);
    o->threads = (int)n;
    threads_given = true;
    return 0;
  }
  if (strcmp(name, "gpu") == 0) {
    if (tsr_parse_i64(v, &n) != 0 || n < 0 || n > 1023) return tsr_fail(err, TSR_EINVAL, "\"%s\" is not a GPU index (0, 1, ...)", v);
    o->gpu = (int)n;
    return 0;
  }
  if (strcmp(name, "memory-limit") == 0) return parse_size(v, &o->memory_limit, err);
  if (strcmp(name, "max-chunk-bytes") == 0) {
    tsr_limits limits = TSR_LIMITS_DEFAULT;
    int rc = tsr_limits_set(&limits, name, v, err);
    if (rc == 0) o->max_chunk_bytes = limits.chunk_bytes;
    return rc;
  }
  if (strcmp(name, "device-memory-limit") == 0) return parse_size(v, &o->device_memory_limit, err);
  if (strcmp(name, "pinned-memory-limit") == 0) return parse_size(v, &o->pinned_memory_limit, err);
  if (strcmp(name, "log-level") == 0) {
    int level = tsr_log_level_parse(v);
    if (level < 0) return tsr_fail(err, TSR_EINVAL, "\"%s\" is not a log level (debug|info|warn|error)", v);
    tsr_log_set_level((tsr_log_level)level);
    return 0;
  }
  if (strcmp(name, "heartbeat-interval") == 0) return parse_duration(v, &o->heartbeat_interval_ms, err);
  if (strcmp(name, "heartbeat-timeout") == 0) return parse_duration(v, &o->heartbeat_timeout_ms, err);
  if (strcmp(name, "fetch-timeout") == 0) {
    if (parse_duration(v, &ms, err) != 0) return TSR_EINVAL;
    o->fetch_timeout_ms = ms > 3600000 ? 3600000 : (int)ms;
    return 0;
  }
  return TSR_ENOTFOUND;
}

/* One setting with its winning value (tsr_config_apply_fn). */
static int apply(void *ctx, const char *name, const char *v, tsr_errbuf *err)
{
  tsr_worker_opts *o = ctx;
  int rc = apply_core(o, name, v, err);
  if (rc != TSR_ENOTFOUND) return rc;
  char flag[64];
  snprintf(flag, sizeof flag, "--%s", name);
  tsr_errbuf why = {{0}};
  rc = tsr_tiers_opt(&o->tiers, flag, v, &why);
  if (rc == TSR_ENOTFOUND) rc = tsr_devtier_opt(&o->devtier, flag, v, &why);
  if (rc == TSR_ENOTFOUND) return 0;  /* an action (help, list-gpus, ...): main() handles those */
  return rc == 0 ? 0 : tsr_fail(err, rc, "\"%s\": %s", v, why.text);
}

static void default_opts(tsr_worker_opts *o)
{
  memset(o, 0, sizeof *o);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  o->threads = cpus > 0 ? (int)cpus : 1;
  /* ZeroMQ until the UCX path has run on every deployment we test (GPU
   * hosts, namespaces, containers): --transport auto opts in */
  o->transport = TSR_TRANSPORT_ZMQ;
  o->recv_pool_warm_count = 3;   /* one being fetched into, one held by the last chunk, one spare */
  o->recv_pool_warm_bytes = (uint64_t)64 << 20;
  o->fetch_ahead = true;
  o->heartbeat_interval_ms = 1000;
  o->heartbeat_timeout_ms = 10000;
  o->fetch_timeout_ms = DEFAULT_FETCH_TIMEOUT_MS;
  o->gpu = -1;
  o->pinned_memory_limit = TSR_PINNED_DEFAULT;
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

/* The settings that only a GPU worker takes, given without --gpu: a
 * message naming where the first came from, or NULL. */
static const char *gpu_only_setting(const tsr_config *cfg, char *buf, size_t cap)
{
  static const char *const names[] = {"device-memory-limit", "device-memory-target", "device-memory-spill",
                                      "pinned-memory-limit"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (tsr_config_get(cfg, names[i]) != NULL) return tsr_config_origin(cfg, names[i], buf, cap);
  return NULL;
}

/* CURVE keys: both files or neither. 0 or 2 (message printed). */
static int load_keys(tsr_worker_opts *o)
{
  if (curve_secret[0] == '\0' && scheduler_key[0] == '\0') return 0;
  if (curve_secret[0] == '\0' || scheduler_key[0] == '\0') {
    fprintf(stderr, "tessera-worker: --curve-secret and --scheduler-key go together (docs/security.md)\n");
    return 2;
  }
  tsr_errbuf err = {{0}};
  if (tsr_curve_load(&o->curve, curve_secret, scheduler_key, &err) != 0) {
    fprintf(stderr, "tessera-worker: %s\n", err.text);
    return 2;
  }
  return 0;
}

/* What no single setting can say alone. 0 or 2 (message printed). */
static int check_opts(const tsr_config *cfg, tsr_worker_opts *o)
{
  char origin[512];
  if (o->gpu >= 0 && !threads_given) o->threads = DEFAULT_GPU_THREADS;
  if (o->gpu < 0 && gpu_only_setting(cfg, origin, sizeof origin) != NULL) {
    fprintf(stderr, "tessera-worker: %s needs --gpu N (or TESSERA_GPU) (see --help)\n", origin);
    return 2;
  }
  if (o->scheduler[0] == '\0') {
    fprintf(stderr, "tessera-worker: --scheduler ADDR (or env TESSERA_SCHEDULER_ADDRESS) is required (see --help)\n");
    return 2;
  }
  return load_keys(o);
}

/* Flags, environment, config file. Returns -1 to run, else the exit
 * status: 0 after help, version, the GPU list or the printed settings; 1
 * when --list-gpus found none; 2 for a bad setting. */
static int configure(int argc, char **argv, tsr_config *cfg, tsr_worker_opts *o)
{
  tsr_errbuf err = {{0}};
  int rc = tsr_config_parse_args(cfg, argc, argv, &err);
  if (rc == 0 && tsr_config_get(cfg, "help") != NULL) return usage(stdout), 0;
  if (rc == 0 && tsr_config_get(cfg, "version") != NULL) return printf("tessera-worker %s\n", TSR_VERSION_STRING), 0;
  if (rc == 0 && tsr_config_get(cfg, "list-gpus") != NULL) {
    if (tsr_wgpu_list(stdout, &err) > 0) return 0;
    fprintf(stderr, "tessera-worker: %s\n", err.text);
    return 1;
  }
  if (rc == 0) rc = tsr_config_load(cfg, &err);
  if (rc == 0) rc = tsr_config_apply(cfg, apply, o, &err);
  if (rc != 0) {
    fprintf(stderr, "tessera-worker: %s (see --help)\n", err.text);
    return 2;
  }
  if (check_opts(cfg, o) != 0) return 2;
  if (tsr_config_get(cfg, "print-config") != NULL) return tsr_config_print(cfg, stdout), 0;
  return -1;
}

int main(int argc, char **argv)
{
  tsr_log_set_component("worker");
  tsr_worker_opts opts;
  default_opts(&opts);
  opts.tiers = (tsr_tiers_opts)TSR_TIERS_OPTS_DEFAULT;
  opts.devtier = (tsr_devtier_opts)TSR_DEVTIER_OPTS_DEFAULT;
  tsr_config *cfg = NULL;
  if (tsr_config_new(&SPEC, &cfg) != 0) {
    fprintf(stderr, "tessera-worker: out of memory\n");
    return 1;
  }
  tsr_errbuf perr = {{0}};
  if (tsr_plugins_take_flags(&argc, argv, &perr) != 0) {
    fprintf(stderr, "tessera-worker: %s\n", perr.text);
    tsr_config_destroy(&cfg);
    return 2;
  }
  int code = configure(argc, argv, cfg, &opts);
  tsr_config_destroy(&cfg);  /* opts hold copies of every string */
  if (code >= 0) return code;
  if (opts.gpu >= 0 && !tsr_wgpu_built()) {
    tsr_errbuf err = {{0}};
    tsr_wgpu_list(stdout, &err);
    fprintf(stderr, "tessera-worker: --gpu %d: %s\n", opts.gpu, err.text);
    return 1;
  }
  if (opts.name[0] == '\0') {
    char host[128] = "worker";
    gethostname(host, sizeof host - 1);
    snprintf(opts.name, sizeof opts.name, "%s-%d", host, (int)getpid());
  }
  tsr_worker_start_env(argv);   /* may re-execute this process */
  const char *test_ops = getenv("TESSERA_TEST_OPS");
  tsr_ops_init(test_ops != NULL && strcmp(test_ops, "1") == 0);
  if (tsr_plugins_load_env(&perr) != 0) {
    fprintf(stderr, "tessera-worker: %s\n", perr.text);
    return 1;
  }
  if (install_signals() != 0) {
    fprintf(stderr, "tessera-worker: cannot create the signal pipe\n");
    return 1;
  }
  int rc = tsr_worker_run(&opts, stop_pipe[0]);
  close(stop_pipe[0]);
  close(stop_pipe[1]);
  return rc;
}
