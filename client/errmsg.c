/* The thread-local message behind tsr_errmsg(). Each failing public call
 * writes it exactly once, at the point where the cause is understood; it is
 * never cleared by a success, so it always describes the last failure. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static _Thread_local char errmsg_buf[TSR_ERRMSG_LEN];

TSR_API const char *tsr_errmsg(void) { return errmsg_buf; }

int client_fail_err(int rc, const tsr_errbuf *err)
{
  if (err != NULL && err->text[0] != '\0')
    snprintf(errmsg_buf, sizeof errmsg_buf, "%s", err->text);
  else
    snprintf(errmsg_buf, sizeof errmsg_buf, "%s", tsr_strerror(rc));
  return rc;
}

int client_fail(int rc, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errmsg_buf, sizeof errmsg_buf, fmt, ap);
  va_end(ap);
  return rc;
}
