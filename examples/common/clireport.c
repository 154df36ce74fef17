/* examples/common/clireport.c — the CLIs' --report (contract in clireport.h). */
#include "clireport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* argv joined by spaces, for the report's header; NULL on ENOMEM. */
static char *join_args(int argc, char **argv)
{
  size_t len = 1;
  for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 1;
  char *s = calloc(1, len);
  for (int i = 0; s != NULL && i < argc; i++) {
    if (i > 0) strcat(s, " ");
    strcat(s, argv[i]);
  }
  return s;
}

static bool ends_with(const char *s, const char *suffix)
{
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

int clireport_check_path(const char *program, const char *path)
{
  if (path != NULL && (ends_with(path, ".html") || ends_with(path, ".htm") || ends_with(path, ".json"))) return 0;
  fprintf(stderr, "%s: --report '%s': the file must end in .html (a page) or .json (for scripts)\n", program,
          path ? path : "");
  return -1;
}

int clireport_begin(clireport *cr, tsr_client *client, const char *program, int argc, char **argv, const char *path,
                    bool progress)
{
  memset(cr, 0, sizeof *cr);
  cr->path = path;
  cr->program = program;
  cr->client = client;
  if (path != NULL) {
    char *command = join_args(argc, argv);
    tsr_report_opts opts = TSR_REPORT_OPTS_DEFAULT;
    opts.program = program;
    opts.command = command;
    int rc = tsr_report_start(client, &opts, &cr->rec);
    free(command);
    if (rc != 0) {
      fprintf(stderr, "%s: --report %s: cannot start the recorder: %s\n", program, path, tsr_strerror(rc));
      return rc;
    }
  }
  cr->bar = progressbar_start_tee(client, program, progress, cr->rec ? tsr_report_progress_fn : NULL, cr->rec);
  return 0;
}

void clireport_stop_bar(clireport *cr)
{
  progressbar_stop(&cr->bar);
  /* the recorder goes on through a bar that draws nothing: graphs submitted later still count */
  if (cr->rec != NULL) cr->bar = progressbar_start_tee(cr->client, cr->program, false, tsr_report_progress_fn, cr->rec);
}

int clireport_end(clireport *cr, int exit_code)
{
  if (cr->rec != NULL) tsr_report_finish(cr->rec, exit_code);   /* progress still flows in while it settles */
  progressbar_stop(&cr->bar);
  if (cr->rec == NULL) return exit_code;
  char err[512] = "";
  int rc = tsr_report_save(cr->rec, cr->path, err, sizeof err);
  tsr_report_destroy(&cr->rec);
  if (rc != 0) {
    fprintf(stderr, "%s: --report: %s\n", cr->program, err);
    return exit_code == 0 ? 1 : exit_code;
  }
  fprintf(stderr, "%s: report written to %s\n", cr->program, cr->path);
  return exit_code;
}
