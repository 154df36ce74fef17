/* kernels/cpu/test_ops.c — crash, fail and sleep: ops the integration tests
 * use to kill a worker, fail a task and hold a thread (sleep with `copy`
 * also passes its first input through: a slow step with a large output). Registered only with
 * tsr_ops_init(true) (TESSERA_TEST_OPS=1). They break the registry's
 * determinism rule on purpose, except fail, which fails every time. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "ops.h"

static int empty_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p, (void)in, (void)n, (void)err;
  int64_t zero = 0;
  tsr_k_meta_set(out, TSR_U8, 1, &zero);
  return 0;
}

static int crash_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)in, (void)n, (void)out;
  raise(SIGKILL);
  return tsr_fail(err, TSR_EINTERNAL, "crash: SIGKILL did not kill the process");
}

static int fail_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  const char *message;
  if (tsr_params_find(p, "message") != NULL) {
    int rc = tsr_params_get_str(p, "message", &message, err);
    if (rc != 0) return tsr_k_param_fail("fail", rc, err);
  }
  return empty_infer(p, in, n, out, err);
}

static int fail_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n, (void)out;
  const char *message = "fail: failed on purpose";
  if (tsr_params_find(p, "message") != NULL && tsr_params_get_str(p, "message", &message, err) != 0)
    return tsr_k_param_fail("fail", TSR_EINVAL, err);
  return tsr_fail(err, TSR_EINVAL, "%s", message);
}

static int sleep_ms_param(const tsr_params *p, int64_t *ms_p, tsr_errbuf *err)
{
  int rc = tsr_params_get_int(p, "ms", ms_p, err);
  if (rc != 0) return tsr_k_param_fail("sleep", rc, err);
  if (*ms_p < 0 || *ms_p > 86400000)
    return tsr_fail(err, TSR_EINVAL, "sleep: ms (%lld) must be in 0..86400000", (long long)*ms_p);
  return 0;
}

/* copy: true asks for input 0 as the output (absent: false). */
static int sleep_copy_param(const tsr_params *p, int n, bool *copy_p, tsr_errbuf *err)
{
  *copy_p = false;
  if (tsr_params_find(p, "copy") == NULL) return 0;
  int rc = tsr_params_get_bool(p, "copy", copy_p, err);
  if (rc != 0) return tsr_k_param_fail("sleep", rc, err);
  if (*copy_p && n < 1) return tsr_fail(err, TSR_EINVAL, "sleep: copy needs an input");
  return 0;
}

static int sleep_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t ms;
  bool copy;
  int rc = sleep_ms_param(p, &ms, err);
  if (rc == 0) rc = sleep_copy_param(p, n, &copy, err);
  if (rc == 0 && copy) *out = in[0];
  else if (rc == 0) tsr_k_meta_set(out, TSR_I64, 0, NULL);
  return rc;
}

static int sleep_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  int64_t ms;
  bool copy;
  int rc = sleep_ms_param(p, &ms, err);
  if (rc == 0) rc = sleep_copy_param(p, n, &copy, err);
  if (rc != 0) return rc;
  struct timespec left = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
  if (copy) memcpy(out->data, in[0].data, in[0].nbytes);
  else *(int64_t *)out->data = ms;
  return 0;
}

const tsr_op_def tsr_op_crash = {"crash", 0, -1, empty_infer, crash_cpu, true, NULL};
const tsr_op_def tsr_op_fail = {"fail", 0, -1, fail_infer, fail_cpu, true, NULL};
const tsr_op_def tsr_op_sleep = {"sleep", 0, -1, sleep_infer, sleep_cpu, true, NULL};
