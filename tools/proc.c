/* Child processes for `tessera local`: spawn, poll, describe, stop. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int cli_error(int code, const char *fmt, ...)
{
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "tessera: %s\n", line);
  return code;
}

const char *cli_default_scheduler(const char *fallback)
{
  const char *names[] = {"TESSERA_SCHEDULER", "TESSERA_SCHEDULER_ADDRESS"};
  for (size_t i = 0; i < 2; i++) {
    const char *v = getenv(names[i]);
    if (v != NULL && v[0] != '\0') return v;
  }
  return fallback;
}

void cli_sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int cli_spawn(cli_child *child, const char *name, char *const argv[])
{
  memset(child, 0, sizeof *child);
  snprintf(child->name, sizeof child->name, "%s", name);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    execv(argv[0], argv);
    fprintf(stderr, "tessera: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);   /* also here, so it holds before either side runs on */
  child->pid = pid;
  return 0;
}

bool cli_child_exited(cli_child *child)
{
  if (child->pid == 0) return true;
  int status;
  pid_t r = waitpid(child->pid, &status, WNOHANG);
  if (r == child->pid || (r < 0 && errno == ECHILD)) {
    child->status = r == child->pid ? status : 0;
    child->pid = 0;
    return true;
  }
  return false;
}

const char *cli_describe_status(int status, char *buf, size_t cap)
{
  if (WIFEXITED(status))
    snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    snprintf(buf, cap, "stopped (status 0x%x)", status);
  return buf;
}

static bool all_gone(cli_child *children, size_t n)
{
  bool gone = true;
  for (size_t i = 0; i < n; i++) gone &= cli_child_exited(&children[i]);
  return gone;
}

void cli_stop_children(cli_child *children, size_t n, int grace_ms)
{
  for (size_t i = 0; i < n; i++)
    if (children[i].pid > 0) kill(children[i].pid, SIGTERM);
  for (int waited = 0; waited < grace_ms && !all_gone(children, n); waited += 20) cli_sleep_ms(20);
  for (size_t i = 0; i < n; i++)
    if (children[i].pid > 0) {
      fprintf(stderr, "tessera: %s did not stop within %d ms; killing it\n", children[i].name, grace_ms);
      kill(children[i].pid, SIGKILL);
      waitpid(children[i].pid, &children[i].status, 0);
      children[i].pid = 0;
    }
}

int cli_self_dir(char *buf, size_t cap)
{
  ssize_t len = readlink("/proc/self/exe", buf, cap - 1);
  if (len <= 0) return -1;
  buf[len] = '\0';
  char *slash = strrchr(buf, '/');
  if (slash == NULL) return -1;
  *slash = '\0';
  return 0;
}

int cli_capture(char *const argv[], char *out, size_t cap)
{
  int fds[2];
  if (cap == 0 || pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], argv);
    fprintf(stderr, "tessera: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  size_t used = 0;
  ssize_t n;
  char sink[256];
  while ((n = read(fds[0], used + 1 < cap ? out + used : sink, used + 1 < cap ? cap - 1 - used : sizeof sink)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (used + 1 < cap) used += (size_t)n;
  }
  out[used] = '\0';
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status) == 127 ? -1 : WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}
