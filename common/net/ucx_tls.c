/* The UCX_TLS of the two contexts (ucx.h): built with or without UCX, so
 * the unit test reads them in every build. */
#include <stdio.h>
#include <string.h>

#include "ucx.h"

static bool is_named(const char *item, size_t len, const char *const *names)
{
  for (; *names != NULL; names++)
    if (strlen(*names) == len && strncmp(item, *names, len) == 0) return true;
  return false;
}

/* tls without the transports named (an exclusion list, "^...", gets the
 * first name added instead). False when nothing is left. */
static bool without(const char *tls, const char *const *names, char *out, size_t cap)
{
  if (tls == NULL || tls[0] == '\0' || strcmp(tls, "all") == 0) return snprintf(out, cap, "^%s", names[0]) < (int)cap;
  if (tls[0] == '^') return snprintf(out, cap, "%s,%s", tls, names[0]) < (int)cap;
  size_t used = 0;
  out[0] = '\0';
  for (const char *item = tls; *item != '\0';) {
    size_t len = strcspn(item, ",");
    if (!is_named(item, len, names) && len > 0) {
      if (used + len + 2 > cap) return false;
      used += (size_t)snprintf(out + used, cap - used, "%s%.*s", used ? "," : "", (int)len, item);
    }
    item += len + (item[len] == ',');
  }
  return used > 0;
}

static const char *const shared_memory[] = {"sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", NULL};

bool tsr_ucx_tls_has_shared_memory(const char *tls)
{
  static const char *const am_capable[] = {"sm", "shm", "posix", "sysv", NULL};
  bool exclusion = tls != NULL && tls[0] == '^';
  if (tls == NULL || tls[0] == '\0' || strcmp(tls, "all") == 0) return true;
  bool named = false;
  for (const char *item = tls + exclusion; *item != '\0';) {
    size_t len = strcspn(item, ",");
    named = named || is_named(item, len, am_capable);
    item += len + (item[len] == ',');
  }
  return exclusion ? !named : named;
}

bool tsr_ucx_local_tls(const char *tls, char *out, size_t cap)
{
  static const char *const tcp[] = {"tcp", NULL};
  return tsr_ucx_tls_has_shared_memory(tls) && without(tls, tcp, out, cap);
}

bool tsr_ucx_listener_tls(const char *tls, char *out, size_t cap)
{
  return without(tls, shared_memory, out, cap);
}
