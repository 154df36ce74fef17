/* tessera-scheduler: settings (flags, environment, config file through
 * common/config), signals, then the event loop (loop.c). Flags are those
 * of docs/scheduler.md; a bad setting, from wherever, exits 2. */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "dashboard.h"
#include "http.h"
#include "policy_evict.h"
#include "sched.h"

static volatile sig_atomic_t stop_requested = 0;
static volatile sig_atomic_t reload_requested = 0;   /* SIGHUP: reload --allow-keys */

static void on_signal(int sig)
{
  if (sig == SIGHUP) reload_requested = 1;
  else stop_requested = 1;
}

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tessera-scheduler [options]\n"
          "  --listen ADDR              ROUTER endpoint (default tcp://127.0.0.1:8786, loopback only;\n"
          "                             tcp://0.0.0.0:8786 for every interface; tcp://127.0.0.1:0 picks a port)\n"
          "  --curve-secret FILE        CURVE secret key (tessera keygen): authenticate and encrypt every peer\n"
          "  --allow-keys DIR|FILE      public keys allowed to connect: every *.pub in DIR, or one a line in FILE;\n"
          "                             SIGHUP reloads it (docs/security.md)\n"
          "  --log-level LEVEL          debug|info|warn|error (default info)\n"
          "  --heartbeat-interval DUR   heartbeat to every peer this often (default 1s)\n"
          "  --heartbeat-timeout DUR    drop a peer silent this long (default 10s)\n"
          "  --address-file PATH        write the address peers connect to, once bound\n"
          "  --recompute MODE           auto|never|always: what workers may drop rather than spill (default auto)\n"
          "  --fuse-width N             fuse chains and fan-ins of at most N branches into one task (default 1: chains)\n"
          "  --no-fuse                  never fuse tasks (same as --fuse-width 0)\n"
          "  --journal DIR              keep a write-ahead journal in DIR; a restart replays it (docs/journal.md)\n"
          "  --journal-fsync MODE       always|never: fdatasync the journal before replies (default always)\n"
          "  --journal-grace DUR        after a restart, keep a client's graphs this long for it (default 60s)\n"
          "  --max-message-bytes B      largest control frame a peer may send (default 256MiB)\n"
          "  --max-graph-tasks N        tasks in one submitted graph (default 20000000)\n"
          "  --max-pending-bytes B      parts of graphs a client is still sending, kept (default 8GiB)\n"
          "  --max-key-bytes B          bytes of one task key (default 1024, the protocol's most)\n"
          "  --max-params-bytes B       bytes of one task's encoded params (default 1MiB)\n"
          "  --max-workers N            workers connected at once (default 4096)\n"
          "  --max-clients N            clients connected at once (default 1024)\n"
          "  --max-client-tasks N       unfinished tasks one client may have submitted (default 50000000)\n"
          "  --dashboard HOST:PORT      serve the dashboard, /api/... and /metrics over HTTP (default 127.0.0.1:8787;\n"
          "                             :PORT is loopback; a taken port only warns; docs/dashboard.md)\n"
          "  --no-dashboard             no HTTP server at all\n"
          "  --config FILE              read settings from FILE (key = value lines; also $TESSERA_CONFIG)\n"
          "  --print-config             print the settings given and where each came from, then exit\n"
          "  --help, --version\n"
          "\n"
          "Every setting can also come from the environment, TESSERA_ and its name in capitals with\n"
          "underscores (TESSERA_HEARTBEAT_TIMEOUT=30s), except --listen: TESSERA_SCHEDULER_LISTEN; and\n"
          "from the config file (heartbeat-timeout = 30s). Flags win over the environment, the\n"
          "environment over the file (docs/deploy.md).\n");
}

/* The settings, in the order they are applied (config.h). */
static const tsr_config_key KEYS[] = {
  {"help", NULL, NULL, TSR_CONFIG_ACTION},
  {"version", NULL, NULL, TSR_CONFIG_ACTION},
  {"print-config", NULL, NULL, TSR_CONFIG_ACTION},
  {"listen", "TESSERA_SCHEDULER_LISTEN", NULL, 0},
  {"curve-secret", "TESSERA_CURVE_SECRET", NULL, 0},
  {"allow-keys", "TESSERA_ALLOW_KEYS", NULL, 0},
  {"log-level", "TESSERA_LOG_LEVEL", NULL, 0},
  {"heartbeat-interval", "TESSERA_HEARTBEAT_INTERVAL", NULL, 0},
  {"heartbeat-timeout", "TESSERA_HEARTBEAT_TIMEOUT", NULL, 0},
  {"address-file", "TESSERA_ADDRESS_FILE", NULL, 0},
  {"recompute", "TESSERA_RECOMPUTE", NULL, 0},
  {"fuse-width", "TESSERA_FUSE_WIDTH", NULL, 0},
  {"no-fuse", "TESSERA_NO_FUSE", NULL, TSR_CONFIG_SWITCH},
  {"journal", "TESSERA_JOURNAL", NULL, 0},
  {"journal-fsync", "TESSERA_JOURNAL_FSYNC", NULL, 0},
  {"journal-grace", "TESSERA_JOURNAL_GRACE", NULL, 0},
  {"max-message-bytes", "TESSERA_MAX_MESSAGE_BYTES", NULL, 0},
  {"max-graph-tasks", "TESSERA_MAX_GRAPH_TASKS", NULL, 0},
  {"max-pending-bytes", "TESSERA_MAX_PENDING_BYTES", NULL, 0},
  {"max-key-bytes", "TESSERA_MAX_KEY_BYTES", NULL, 0},
  {"max-params-bytes", "TESSERA_MAX_PARAMS_BYTES", NULL, 0},
  {"max-workers", "TESSERA_MAX_WORKERS", NULL, 0},
  {"max-clients", "TESSERA_MAX_CLIENTS", NULL, 0},
  {"max-client-tasks", "TESSERA_MAX_CLIENT_TASKS", NULL, 0},
  {"dashboard", "TESSERA_DASHBOARD", NULL, 0},
  {"no-dashboard", "TESSERA_NO_DASHBOARD", NULL, TSR_CONFIG_SWITCH},
};
static const tsr_config_spec SPEC = {"scheduler", KEYS, sizeof KEYS / sizeof KEYS[0]};

static int parse_duration(const char *v, uint64_t *ms_p, tsr_errbuf *err)
{
  uint64_t ms;
  if (tsr_parse_duration_ms(v, &ms) != 0 || ms == 0)
    return tsr_fail(err, TSR_EINVAL, "\"%s\" is not a duration (e.g. 500ms, 2s)", v);
  *ms_p = ms;
  return 0;
}

/* --dashboard: checked here, so a typo exits 2 instead of a warning. */
static int check_dashboard(sched_loop_opts *opts, const char *v, tsr_errbuf *err)
{
  char host[64];
  unsigned port;
  if (tsr_http_parse_addr(v, host, &port, err) != 0) return TSR_EINVAL;
  opts->dashboard = v;
  return 0;
}

/* One setting with its winning value (tsr_config_apply_fn). */
static int apply(void *ctx, const char *name, const char *v, tsr_errbuf *err)
{
  sched_loop_opts *opts = ctx;
  if (strcmp(name, "listen") == 0) opts->listen = v;
  else if (strcmp(name, "address-file") == 0) opts->address_file = v;
  else if (strcmp(name, "curve-secret") == 0) opts->curve_secret = v;
  else if (strcmp(name, "allow-keys") == 0) opts->allow_keys = v;
  else if (strcmp(name, "log-level") == 0) {
    int level = tsr_log_level_parse(v);
    if (level < 0) return tsr_fail(err, TSR_EINVAL, "\"%s\" is not a log level (debug|info|warn|error)", v);
    tsr_log_set_level((tsr_log_level)level);
  } else if (strcmp(name, "heartbeat-interval") == 0) return parse_duration(v, &opts->cfg.heartbeat_ms, err);
  else if (strcmp(name, "heartbeat-timeout") == 0) return parse_duration(v, &opts->cfg.timeout_ms, err);
  else if (strcmp(name, "recompute") == 0) {
    int mode = sched_recompute_mode_parse(v);
    if (mode < 0) return tsr_fail(err, TSR_EINVAL, "\"%s\" is not a recompute mode (auto|never|always)", v);
    opts->cfg.recompute = (sched_recompute_mode)mode;
  } else if (strcmp(name, "fuse-width") == 0) {
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    if (*v < '0' || *v > '9' || *end != '\0' || n > 1000000)
      return tsr_fail(err, TSR_EINVAL, "\"%s\" is not a width from 0 to 1000000", v);
    opts->cfg.fuse_width = (uint32_t)n;
  } else if (strcmp(name, "journal") == 0) {
    if (v[0] == '\0') return tsr_fail(err, TSR_EINVAL, "the journal directory is empty");
    opts->journal_dir = v;
  } else if (strcmp(name, "journal-fsync") == 0) {
    if (strcmp(v, "always") != 0 && strcmp(v, "never") != 0)
      return tsr_fail(err, TSR_EINVAL, "\"%s\" is not a journal fsync mode (always|never)", v);
    opts->journal_fsync = strcmp(v, "always") == 0;
  } else if (strcmp(name, "journal-grace") == 0) {
    return parse_duration(v, &opts->journal_grace_ms, err);
  } else if (strcmp(name, "no-fuse") == 0 && strcmp(v, "true") == 0) {
    opts->cfg.fuse_width = 0;
  } else if (strcmp(name, "dashboard") == 0) {
    return check_dashboard(opts, v, err);
  } else if (strcmp(name, "no-dashboard") == 0 && strcmp(v, "true") == 0) {
    opts->no_dashboard = true;
  } else if (tsr_limits_has(name)) {
    return tsr_limits_set(&opts->cfg.limits, name, v, err);
  }
  return 0;
}

/* Flags, environment, config file. Returns 0 to run, or 1 with *exit_p
 * set (help, version or printed settings: 0; a bad setting: 2). */
static int configure(int argc, char **argv, tsr_config *cfg, sched_loop_opts *opts, int *exit_p)
{
  tsr_errbuf err = {{0}};
  int rc = tsr_config_parse_args(cfg, argc, argv, &err);
  if (rc == 0 && tsr_config_get(cfg, "help") != NULL) {
    usage(stdout);
    return *exit_p = 0, 1;
  }
  if (rc == 0 && tsr_config_get(cfg, "version") != NULL) {
    printf("tessera-scheduler %s\n", TSR_VERSION_STRING);
    return *exit_p = 0, 1;
  }
  if (rc == 0) rc = tsr_config_load(cfg, &err);
  if (rc == 0) rc = tsr_config_apply(cfg, apply, opts, &err);
  if (rc != 0) {
    fprintf(stderr, "tessera-scheduler: %s (see --help)\n", err.text);
    return *exit_p = 2, 1;
  }
  if (rc == 0 && (opts->curve_secret == NULL) != (opts->allow_keys == NULL)) {
    fprintf(stderr, "tessera-scheduler: --curve-secret and --allow-keys go together: CURVE needs both the "
                    "scheduler's secret key and the public keys it admits (docs/security.md)\n");
    return *exit_p = 2, 1;
  }
  if (tsr_config_get(cfg, "print-config") != NULL) {
    tsr_config_print(cfg, stdout);
    return *exit_p = 0, 1;
  }
  return 0;
}

int main(int argc, char **argv)
{
  sched_loop_opts opts = {.listen = "tcp://127.0.0.1:8786", .reload = &reload_requested,
                         .cfg = {.heartbeat_ms = 1000, .timeout_ms = 10000, .fuse_width = 1},
                         .journal_fsync = true, .journal_grace_ms = 60000,
                         .dashboard = SCHED_DASH_DEFAULT_ADDRESS};
  tsr_log_set_component("scheduler");
  int code = 0;
  tsr_config *cfg = NULL;
  if (tsr_config_new(&SPEC, &cfg) != 0) {
    fprintf(stderr, "tessera-scheduler: out of memory\n");
    return 1;
  }
  if (configure(argc, argv, cfg, &opts, &code) != 0) {
    tsr_config_destroy(&cfg);
    return code;
  }
  /* glibc raises its mmap threshold to the size of the first large block
   * freed (up to 32 MiB): after one multi-part submit, its parts (up to
   * ~4 MiB each, in ZeroMQ's buffers and our copies) come from the heap,
   * where freeing them does not give the memory back; a hundred clients
   * killed mid-submit left the RSS ~90 MiB above its baseline (issue 13,
   * integration.exhaust). A fixed threshold keeps such blocks mmapped. */
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;  /* no SA_RESTART: zmq_poll returns EINTR */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  if (opts.no_dashboard) opts.dashboard = NULL;
  int rc = sched_run(&opts, &stop_requested);
  tsr_config_destroy(&cfg);  /* after the run: opts borrow its strings */
  return rc != 0 ? 1 : 0;
}
