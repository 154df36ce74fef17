/* `tessera health`: a health check for scripts and container engines
 * (the compose file's healthcheck). Exit 0 when the scheduler answers a
 * status request within the timeout and, with --worker NAME, lists a live
 * worker of that name; exit 1 with one line on stderr saying which part
 * failed; exit 2 for a usage error.
 *
 * A worker is checked through its scheduler rather than its own sockets:
 * a worker is healthy when the cluster can use it, which only the
 * scheduler knows (it drops a worker silent for --heartbeat-timeout).
 *
 * --metrics URL asks the worker itself instead: its /metrics (worker
 * --metrics, docs/metrics.md) must answer and say the worker is registered
 * with its scheduler (tessera_worker_connected 1). On loopback that needs
 * no name resolved, which is what a container wants: deploy.compose saw a
 * fresh container's lookups of the scheduler's name take 10 s (the
 * network's DNS answering late), failing every check by the scheduler's
 * name for 30 s while the worker itself was connected. */
#include <curl/curl.h>
#include <getopt.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "cli.h"
#include "tessera/tessera.h"
#include "util/util.h"

#define HEALTH_DEFAULT_ADDRESS "tcp://127.0.0.1:8786"

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tessera health [--scheduler ADDR] [--worker NAME | --metrics URL] [--timeout DUR]\n"
          "  --scheduler ADDR  tcp://HOST:PORT (default: $TESSERA_SCHEDULER, $TESSERA_SCHEDULER_ADDRESS,\n"
          "                    else " HEALTH_DEFAULT_ADDRESS ")\n"
          "  --worker NAME     also require a live worker of this name (tessera-worker --name)\n"
          "  --metrics URL     ask a worker's own /metrics instead (tessera-worker --metrics): healthy when it\n"
          "                    answers and the worker is registered (e.g. http://127.0.0.1:9400/metrics)\n"
          "  --timeout DUR     how long to wait for the scheduler (default 3s)\n"
          "Exits 0 when healthy, 1 (with the reason on stderr) when not.\n");
}

typedef struct health_opts {
  const char *address;
  const char *worker;
  uint64_t timeout_ms;
  const char *metrics;
} health_opts;

/* Returns -1 to go on, or an exit code. */
static int parse(int argc, char **argv, health_opts *o)
{
  static const struct option longs[] = {
    {"scheduler", required_argument, NULL, 's'},
    {"worker", required_argument, NULL, 'w'},
    {"metrics", required_argument, NULL, 'm'},
    {"timeout", required_argument, NULL, 't'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
  };
  int opt;
  optind = 1;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, "+", longs, NULL)) != -1) {
    if (opt == 's') o->address = optarg;
    else if (opt == 'w') o->worker = optarg;
    else if (opt == 'm') o->metrics = optarg;
    else if (opt == 't') {
      if (tsr_parse_duration_ms(optarg, &o->timeout_ms) != 0 || o->timeout_ms == 0 || o->timeout_ms > 3600000)
        return cli_error(CLI_EXIT_USAGE, "health: --timeout '%s' is not a duration (e.g. 500ms, 3s)", optarg);
    } else if (opt == 'h') {
      usage(stdout);
      return 0;
    } else {
      cli_error(CLI_EXIT_USAGE, "health: bad flag '%s'", argv[optind - 1]);
      usage(stderr);
      return CLI_EXIT_USAGE;
    }
  }
  if (optind < argc) return cli_error(CLI_EXIT_USAGE, "health: unexpected argument '%s'", argv[optind]);
  if (o->worker != NULL && o->worker[0] == '\0') return cli_error(CLI_EXIT_USAGE, "health: --worker needs a name");
  return -1;
}

/* 0 when info lists a worker named name, else 1 with the reason. */
static int check_worker(const health_opts *o, const tsr_cluster_info *info)
{
  for (size_t i = 0; i < info->n_workers; i++)
    if (strcmp(info->workers[i].name, o->worker) == 0) {
      printf("healthy: worker %s (%s, %s) is connected to scheduler %s\n", o->worker, info->workers[i].device,
             info->workers[i].address, o->address);
      return 0;
    }
  char names[512] = "";
  for (size_t i = 0; i < info->n_workers && strlen(names) + 70 < sizeof names; i++)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", info->workers[i].name);
  return cli_error(CLI_EXIT_FAIL, "health: worker %s is not connected to scheduler %s (connected: %s)", o->worker,
                   o->address, info->n_workers ? names : "none");
}

/* The watchdog's message, formatted before it is armed: a signal handler
 * may only write(2) and _exit(2). */
static char watchdog_message[640];

static void watchdog_fired(int sig)
{
  (void)sig;
  ssize_t n = write(STDERR_FILENO, watchdog_message, strlen(watchdog_message));
  (void)n;
  _exit(CLI_EXIT_FAIL);
}

/* A check must end within its timeout whatever the network does. Our
 * own waits are bounded, but libzmq resolves host names with a blocking
 * getaddrinfo in its I/O thread, and closing the context waits for that
 * thread: with a container's DNS server stalled, glibc falls back to the
 * next nameserver in resolv.conf (often unreachable inside a container
 * network) and the name takes 10 s or more, past the engine's own
 * timeout. So a timer ends the process shortly after --timeout. */
static void arm_watchdog(const health_opts *o)
{
  snprintf(watchdog_message, sizeof watchdog_message,
           "tessera: health: scheduler %s is not serving: no answer within %llu ms (resolving its name or "
           "connecting did not finish)\n",
           o->address, (unsigned long long)o->timeout_ms);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = watchdog_fired;
  sigaction(SIGALRM, &sa, NULL);
  uint64_t ms = o->timeout_ms + 250;
  struct itimerval when = {{0, 0}, {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000}};
  setitimer(ITIMER_REAL, &when, NULL);
}

/* The body of a GET, at most 4 MiB. */
typedef struct body {
  char *text;
  size_t len;
} body;

static size_t body_add(char *data, size_t size, size_t n, void *arg)
{
  body *b = arg;
  size_t add = size * n;
  if (b->len + add > ((size_t)4 << 20)) return 0;
  char *grown = realloc(b->text, b->len + add + 1);
  if (grown == NULL) return 0;
  memcpy(grown + b->len, data, add);
  b->text = grown, b->len += add, grown[b->len] = '\0';
  return add;
}

static int check_metrics(const health_opts *o)
{
  body b = {NULL, 0};
  long status = 0;
  CURL *curl = curl_easy_init();
  CURLcode cc = CURLE_FAILED_INIT;
  if (curl != NULL) {
    curl_easy_setopt(curl, CURLOPT_URL, o->metrics);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, body_add);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
    cc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(curl);
  }
  int code = CLI_EXIT_FAIL;
  if (cc != CURLE_OK)
    cli_error(CLI_EXIT_FAIL, "health: worker metrics %s: %s", o->metrics, curl_easy_strerror(cc));
  else if (status != 200)
    cli_error(CLI_EXIT_FAIL, "health: worker metrics %s answered HTTP %ld", o->metrics, status);
  else if (b.text == NULL || strstr(b.text, "\ntessera_worker_connected 1") == NULL)
    cli_error(CLI_EXIT_FAIL, "health: the worker at %s is not registered with its scheduler", o->metrics);
  else {
    printf("healthy: the worker at %s is serving and registered\n", o->metrics);
    code = 0;
  }
  free(b.text);
  return code;
}

int cli_health(int argc, char **argv)
{
  health_opts o = {cli_default_scheduler(HEALTH_DEFAULT_ADDRESS), NULL, 3000, NULL};
  int code = parse(argc, argv, &o);
  if (code >= 0) return code;
  if (o.metrics != NULL) return check_metrics(&o);
  arm_watchdog(&o);
  tsr_client_opts opts = TSR_CLIENT_OPTS_DEFAULT;
  opts.name = "tessera-health";
  opts.connect_timeout_ms = (int)o.timeout_ms;
  tsr_client *client = NULL;
  tsr_cluster_info *info = NULL;
  /* --timeout bounds the whole check (a container engine kills a health
   * check that outlasts its own timeout): the query gets what the
   * connection left, at least a millisecond. */
  uint64_t start = tsr_now_ms();
  int rc = tsr_client_open(&client, o.address, &opts);
  uint64_t spent = tsr_now_ms() - start;
  int left = spent < o.timeout_ms ? (int)(o.timeout_ms - spent) : 1;
  if (rc == 0) rc = tsr_cluster_info_get(client, left, &info);
  if (rc != 0) {
    cli_error(CLI_EXIT_FAIL, "health: scheduler %s is not serving: %s", o.address, tsr_errmsg());
    tsr_client_close(client);
    return CLI_EXIT_FAIL;
  }
  if (o.worker != NULL) code = check_worker(&o, info);
  else {
    printf("healthy: scheduler %s is serving, %zu worker%s\n", o.address, info->n_workers,
           info->n_workers == 1 ? "" : "s");
    code = 0;
  }
  tsr_cluster_info_destroy(&info);
  tsr_client_close(client);
  return code;
}
