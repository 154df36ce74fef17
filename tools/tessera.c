/* tessera — the command line: `tessera status` shows a cluster, `tessera
 * health` checks one (exit status), `tessera local` runs a program on a
 * scheduler and workers started on this machine (docs/development.md has
 * the flags). This file only dispatches. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tessera/tessera.h"

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tessera COMMAND [FLAGS]\n"
          "\n"
          "commands:\n"
          "  status --scheduler ADDR [--timeout DUR] [--json]\n"
          "        workers (memory, tasks) and graphs in flight of a running scheduler\n"
          "  health [--scheduler ADDR] [--worker NAME] [--timeout DUR]\n"
          "        exit 0 when the scheduler serves (and lists worker NAME), 1 when not:\n"
          "        a container health check\n"
          "  report [--json | --html OUT.html] FILE.json\n"
          "        render an efficiency report a CLI saved with --report FILE.json\n"
          "  keygen [--out DIR] [--force] [NAME]\n"
          "        write a CURVE key pair: NAME.key (secret, mode 0600) and NAME.pub\n"
          "  local [--cpu-workers N] [--threads-per-worker T] [--memory-limit BYTES]\n"
          "        [--scheduler-arg ARG]... [--worker-arg ARG]... [--] [PROGRAM ARGS...]\n"
          "        start a scheduler and N workers here, run PROGRAM with TESSERA_SCHEDULER\n"
          "        set, stop them, exit with PROGRAM's status; without PROGRAM print the\n"
          "        address and wait for Ctrl-C\n"
          "\n"
          "flags:\n"
          "  --help      this text (also: tessera COMMAND --help)\n"
          "  --version   print the version\n");
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("tessera %s\n", TSR_VERSION_STRING);
    return 0;
  }
  if (strcmp(cmd, "status") == 0) return cli_status(argc - 1, argv + 1);
  if (strcmp(cmd, "local") == 0) return cli_local(argc - 1, argv + 1);
  if (strcmp(cmd, "health") == 0) return cli_health(argc - 1, argv + 1);
  if (strcmp(cmd, "keygen") == 0) return cli_keygen(argc - 1, argv + 1);
  if (strcmp(cmd, "report") == 0) return cli_report(argc - 1, argv + 1);
  cli_error(CLI_EXIT_USAGE, "unknown command '%s' (try: tessera --help)", cmd);
  return CLI_EXIT_USAGE;
}
