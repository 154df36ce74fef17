/* tessera-scheduler: command line, signals, then the event loop (loop.c).
 * Flags are those of docs/development.md; a bad flag exits 2. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_evict.h"
#include "sched.h"

static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int sig)
{
  (void)sig;
  stop_requested = 1;
}

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tessera-scheduler [options]\n"
          "  --listen ADDR              ROUTER endpoint (default tcp://0.0.0.0:8786; tcp://127.0.0.1:0 picks a port)\n"
          "  --log-level LEVEL          debug|info|warn|error (default info)\n"
          "  --heartbeat-interval DUR   heartbeat to every peer this often (default 1s)\n"
          "  --heartbeat-timeout DUR    drop a peer silent this long (default 10s)\n"
          "  --address-file PATH        write the address peers connect to, once bound\n"
          "  --recompute MODE           auto|never|always: what workers may drop rather than spill (default auto)\n"
          "  --fuse-width N             fuse chains and fan-ins of at most N branches into one task (default 1: chains)\n"
          "  --no-fuse                  never fuse tasks (same as --fuse-width 0)\n"
          "  --help, --version\n");
}

static int bad_flag(const char *fmt, const char *arg)
{
  fprintf(stderr, "tessera-scheduler: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (see --help)\n");
  return 2;
}

/* Accepts "--flag VALUE" and "--flag=VALUE". Returns the value or NULL. */
static const char *flag_value(int argc, char **argv, int *i, const char *flag)
{
  size_t n = strlen(flag);
  if (strncmp(argv[*i], flag, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] != '\0' || *i + 1 >= argc) return NULL;
  return argv[++*i];
}

static int parse_args(int argc, char **argv, sched_loop_opts *opts, int *exit_p)
{
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    uint64_t ms;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      *exit_p = 0;
      return 1;
    }
    if (strcmp(a, "--version") == 0) {
      printf("tessera-scheduler %s\n", TSR_VERSION_STRING);
      *exit_p = 0;
      return 1;
    }
    if ((v = flag_value(argc, argv, &i, "--listen")) != NULL) opts->listen = v;
    else if ((v = flag_value(argc, argv, &i, "--address-file")) != NULL) opts->address_file = v;
    else if ((v = flag_value(argc, argv, &i, "--log-level")) != NULL) {
      int level = tsr_log_level_parse(v);
      if (level < 0) return *exit_p = bad_flag("bad --log-level '%s' (debug|info|warn|error)", v), 1;
      tsr_log_set_level((tsr_log_level)level);
    } else if ((v = flag_value(argc, argv, &i, "--heartbeat-interval")) != NULL) {
      if (tsr_parse_duration_ms(v, &ms) != 0 || ms == 0) return *exit_p = bad_flag("bad --heartbeat-interval '%s'", v), 1;
      opts->cfg.heartbeat_ms = ms;
    } else if ((v = flag_value(argc, argv, &i, "--recompute")) != NULL) {
      int mode = sched_recompute_mode_parse(v);
      if (mode < 0) return *exit_p = bad_flag("bad --recompute '%s' (auto|never|always)", v), 1;
      opts->cfg.recompute = (sched_recompute_mode)mode;
    } else if ((v = flag_value(argc, argv, &i, "--heartbeat-timeout")) != NULL) {
      if (tsr_parse_duration_ms(v, &ms) != 0 || ms == 0) return *exit_p = bad_flag("bad --heartbeat-timeout '%s'", v), 1;
      opts->cfg.timeout_ms = ms;
    } else if ((v = flag_value(argc, argv, &i, "--fuse-width")) != NULL) {
      char *end;
      unsigned long n = strtoul(v, &end, 10);
      if (*v < '0' || *v > '9' || *end != '\0' || n > 1000000) return *exit_p = bad_flag("bad --fuse-width '%s' (0 to 1000000)", v), 1;
      opts->cfg.fuse_width = (uint32_t)n;
    } else if (strcmp(a, "--no-fuse") == 0) {
      opts->cfg.fuse_width = 0;
    } else {
      return *exit_p = bad_flag("unknown or incomplete option '%s'", a), 1;
    }
  }
  return 0;
}

int main(int argc, char **argv)
{
  sched_loop_opts opts = {.listen = "tcp://0.0.0.0:8786", .cfg = {.heartbeat_ms = 1000, .timeout_ms = 10000, .fuse_width = 1}};
  tsr_log_set_component("scheduler");
  int code = 0;
  if (parse_args(argc, argv, &opts, &code) != 0) return code;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;  /* no SA_RESTART: zmq_poll returns EINTR */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  int rc = sched_run(&opts, &stop_requested);
  if (rc != 0) return 1;
  return 0;
}
