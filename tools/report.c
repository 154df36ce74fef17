/* `tessera report`: renders an efficiency report a CLI saved with
 * `--report FILE.json` (docs/report.md) as text, HTML or JSON; or, with
 * --scheduler and --graph, records a live graph of any client until it
 * completes and reports on it. The recording and rendering live in
 * libtessera (tessera/report.h), so a page made here is the page a CLI
 * would have written. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "tessera/report.h"
#include "util/util.h"

typedef struct report_opts {
  tsr_report_format format;
  const char *out;         /* --html OUT */
  const char *scheduler;   /* live mode */
  int64_t graph;
  const char *client;
  uint64_t timeout_ms;     /* live mode: give up waiting after this (0: never) */
} report_opts;

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tessera report [--json | --html OUT.html] FILE.json\n"
          "       tessera report --scheduler ADDR --graph ID [--client NAME] [--timeout DUR] [--json | --html OUT]\n"
          "  FILE.json       a report saved by a CLI's --report FILE.json (tsr-svd, tsr-pca, tsr-cluster, tsr-tiles)\n"
          "  (no flag)       a summary as text on stdout: wall time, what bounded the job and why, time per op, workers\n"
          "  --json          the report as JSON on stdout (for scripts)\n"
          "  --html OUT      the self-contained HTML page into OUT ('-': stdout)\n"
          "  --scheduler ADDR --graph ID\n"
          "                  follow graph ID of a running scheduler (any client; --client NAME picks one) from now\n"
          "                  until it completes or is released, sampling its per-op counts and the workers each\n"
          "                  second; then report as above. --timeout DUR stops waiting (exit 1).\n");
}

static int parse(int argc, char **argv, report_opts *o)
{
  static const struct option longs[] = {{"json", no_argument, NULL, 'j'},         {"html", required_argument, NULL, 'H'},
                                        {"scheduler", required_argument, NULL, 's'}, {"graph", required_argument, NULL, 'g'},
                                        {"client", required_argument, NULL, 'c'},  {"timeout", required_argument, NULL, 't'},
                                        {"help", no_argument, NULL, 'h'},          {0}};
  int opt;
  char *end;
  optind = 1;
  while ((opt = getopt_long(argc, argv, "+", longs, NULL)) != -1) {
    if (opt == 'h') return usage(stdout), 0;
    if (opt == 'j') o->format = TSR_REPORT_JSON;
    else if (opt == 'H') o->format = TSR_REPORT_HTML, o->out = optarg;
    else if (opt == 's') o->scheduler = optarg;
    else if (opt == 'c') o->client = optarg;
    else if (opt == 'g' && ((o->graph = strtoll(optarg, &end, 10)) < 0 || *end != '\0' || end == optarg))
      return cli_error(CLI_EXIT_USAGE, "report: --graph '%s' is not a graph number", optarg);
    else if (opt == 't' && tsr_parse_duration_ms(optarg, &o->timeout_ms) != 0)
      return cli_error(CLI_EXIT_USAGE, "report: --timeout '%s' is not a duration (e.g. 30s, 5min)", optarg);
    else if (opt == '?' || opt == ':')
      return cli_error(CLI_EXIT_USAGE, "report: bad flag '%s' (try: tessera report --help)", argv[optind - 1]);
  }
  if ((o->scheduler != NULL) != (o->graph >= 0))
    return cli_error(CLI_EXIT_USAGE, "report: --scheduler and --graph go together");
  if (o->scheduler == NULL && optind + 1 != argc)
    return cli_error(CLI_EXIT_USAGE, "report: give exactly one report file (FILE.json), got %d", argc - optind);
  if (o->scheduler != NULL && optind != argc)
    return cli_error(CLI_EXIT_USAGE, "report: unexpected argument '%s' with --scheduler", argv[optind]);
  return -1;
}

/* Records graph o->graph until it is done (or the timeout), into json_path. 0 or CLI_EXIT_FAIL. */
static int record_live(const report_opts *o, const char *json_path, int argc, char **argv)
{
  tsr_client_opts copts = TSR_CLIENT_OPTS_DEFAULT;
  copts.name = "tessera-report";
  tsr_client *client = NULL;
  tsr_report *rec = NULL;
  tsr_report_opts ro = TSR_REPORT_OPTS_DEFAULT;
  char program[64], command[1024] = "tessera";
  snprintf(program, sizeof program, "graph %lld", (long long)o->graph);
  for (int i = 1; i < argc; i++) snprintf(command + strlen(command), sizeof command - strlen(command), " %s", argv[i]);
  ro.program = program, ro.command = command, ro.graph = o->graph, ro.graph_client = o->client;
  /* a released graph leaves the scheduler at once: sample often to see its last counts */
  ro.interval_ms = 100;
  int rc = tsr_client_open(&client, o->scheduler, &copts);
  if (rc == 0) rc = tsr_report_start(client, &ro, &rec);
  uint64_t start = tsr_now_ms();
  while (rc == 0 && !tsr_report_graph_done(rec)) {
    if (o->timeout_ms > 0 && tsr_now_ms() - start >= o->timeout_ms) rc = TSR_ETIMEDOUT;
    else usleep(100 * 1000);
  }
  char err[512] = "";
  if (rec != NULL) tsr_report_finish(rec, rc == 0 ? 0 : 1);
  if (rc != 0) cli_error(CLI_EXIT_FAIL, "report: graph %lld on %s: %s", (long long)o->graph, o->scheduler,
                         rc == TSR_ETIMEDOUT ? "not done before --timeout" : tsr_strerror(rc));
  else if ((rc = tsr_report_save(rec, json_path, err, sizeof err)) != 0) cli_error(CLI_EXIT_FAIL, "report: %s", err);
  tsr_report_destroy(&rec);
  tsr_client_close(client);
  return rc == 0 ? 0 : CLI_EXIT_FAIL;
}

int cli_report(int argc, char **argv)
{
  report_opts o = {.format = TSR_REPORT_TEXT, .graph = -1};
  int code = parse(argc, argv, &o);
  if (code >= 0) return code;
  char live[64] = "";
  const char *json_path = argv[optind];
  if (o.scheduler != NULL) {
    snprintf(live, sizeof live, "/tmp/tessera-report-%d.json", (int)getpid());
    if (record_live(&o, live, argc, argv) != 0) return CLI_EXIT_FAIL;
    json_path = live;
  }
  char err[1024] = "";
  int rc = tsr_report_render(json_path, o.format, o.out, err, sizeof err);
  if (live[0]) unlink(live);
  if (rc != 0) return cli_error(CLI_EXIT_FAIL, "report: %s", err);
  if (o.format == TSR_REPORT_HTML && o.out != NULL && strcmp(o.out, "-") != 0) fprintf(stderr, "tessera report: wrote %s\n", o.out);
  return 0;
}
