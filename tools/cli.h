/* tools/cli.h — the pieces of the `tessera` command line: one function per
 * subcommand, and the child-process helpers `tessera local` uses.
 *
 * Exit codes: 0 success, 1 a runtime failure (with a message on stderr),
 * 2 a usage error (bad or missing flag). */
#ifndef TSR_TOOLS_CLI_H
#define TSR_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

int cli_status(int argc, char **argv);
int cli_local(int argc, char **argv);
int cli_health(int argc, char **argv);
int cli_keygen(int argc, char **argv);
int cli_report(int argc, char **argv);   /* report.c: render a saved efficiency report */

/* The scheduler address a subcommand uses without --scheduler:
 * $TESSERA_SCHEDULER, else $TESSERA_SCHEDULER_ADDRESS (the workers' name
 * for it), else fallback (may be NULL). */
const char *cli_default_scheduler(const char *fallback);

/* Writes info as one JSON object (status_json.c; docs/deploy.md). */
struct tsr_cluster_info;
void cli_status_json(FILE *out, const char *address, const struct tsr_cluster_info *info);

/* Prints "tessera: " + message to stderr and returns code. */
int cli_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------- child processes (proc.c) ---------- */
typedef struct cli_child {
  pid_t pid;          /* 0 once reaped */
  int status;         /* waitpid status once reaped */
  char name[64];      /* for messages: "tessera-scheduler", "local-worker-0" */
} cli_child;

/* Starts argv[0] (a path) with argv in its own process group, so a
 * terminal's Ctrl-C reaches only us and we stop it in order. 0 or -1. */
int cli_spawn(cli_child *child, const char *name, char *const argv[]);
/* Reaps the child if it has exited; returns true when it is gone. */
bool cli_child_exited(cli_child *child);
/* Describes a waitpid status: "exited with status 3", "killed by signal 9". */
const char *cli_describe_status(int status, char *buf, size_t cap);
/* SIGTERM to every live child, SIGKILL to those still alive after
 * grace_ms, then reaps them all. */
void cli_stop_children(cli_child *children, size_t n, int grace_ms);
/* Runs argv[0] (a path) to completion with its stdout captured into out
 * (NUL-terminated, truncated to cap) and its stderr passed through.
 * Returns its exit status (128+signal when killed), or -1 when it could
 * not be run. */
int cli_capture(char *const argv[], char *out, size_t cap);
/* Directory of the running executable (from /proc/self/exe). 0 or -1. */
int cli_self_dir(char *buf, size_t cap);
/* Sleeps ms milliseconds (returns early on a signal). */
void cli_sleep_ms(int ms);

#endif
