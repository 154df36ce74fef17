/* `tessera report`: renders an efficiency report a CLI saved with
 * `--report FILE.json` (docs/report.md) as text, HTML or JSON. The
 * rendering lives in libtessera (tessera/report.h), so a page made here is
 * the page the CLI would have written. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tessera/report.h"

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tessera report [--json | --html OUT.html] FILE.json\n"
          "  FILE.json       a report saved by a CLI's --report FILE.json (tsr-svd, tsr-pca, tsr-cluster, tsr-tiles)\n"
          "  (no flag)       a summary as text on stdout: wall time, what bounded the job and why, time per op, workers\n"
          "  --json          the report as JSON on stdout (for scripts)\n"
          "  --html OUT      the self-contained HTML page into OUT ('-': stdout)\n");
}

int cli_report(int argc, char **argv)
{
  static const struct option longs[] = {
    {"json", no_argument, NULL, 'j'}, {"html", required_argument, NULL, 'H'}, {"help", no_argument, NULL, 'h'}, {0}};
  tsr_report_format format = TSR_REPORT_TEXT;
  const char *out = NULL;
  int opt;
  optind = 1;
  while ((opt = getopt_long(argc, argv, "+", longs, NULL)) != -1) {
    if (opt == 'h') return usage(stdout), 0;
    if (opt == 'j') format = TSR_REPORT_JSON;
    else if (opt == 'H') format = TSR_REPORT_HTML, out = optarg;
    else return cli_error(CLI_EXIT_USAGE, "report: bad flag '%s' (try: tessera report --help)", argv[optind - 1]);
  }
  if (optind + 1 != argc)
    return cli_error(CLI_EXIT_USAGE, "report: give exactly one report file (FILE.json), got %d", argc - optind);
  char err[1024] = "";
  int rc = tsr_report_render(argv[optind], format, out, err, sizeof err);
  if (rc != 0) return cli_error(CLI_EXIT_FAIL, "report: %s", err);
  if (format == TSR_REPORT_HTML && out != NULL && strcmp(out, "-") != 0) fprintf(stderr, "tessera report: wrote %s\n", out);
  return 0;
}
