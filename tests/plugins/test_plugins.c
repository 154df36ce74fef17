/* tests/plugins/test_plugins.c — plugins for the tests (docs/plugins.md),
 * one source built three ways: TSR_TEST_PLUGIN_GOOD offers `plugin_crash`
 * (kills its worker) and `plugin_fail` (fails with a message);
 * TSR_TEST_PLUGIN_OLD says ABI version 999; TSR_TEST_PLUGIN_NOOPS lacks
 * the tsr_plugin_ops symbol. */
#include <signal.h>
#include <stdio.h>

#include <tessera/plugin.h>

#define EXPORT __attribute__((visibility("default")))

static int scalar_infer(const tsr_plugin_host *h, const tsr_plugin_params *p, const tsr_plugin_array *in, int n,
                        tsr_plugin_array *out, char *err, size_t len)
{
  (void)h, (void)p, (void)in, (void)n, (void)err, (void)len;
  out->dtype = TSR_I64, out->ndim = 0;
  return 0;
}

static int crash_cpu(const tsr_plugin_host *h, const tsr_plugin_params *p, const tsr_plugin_array *in, int n,
                     tsr_plugin_array *out, char *err, size_t len)
{
  (void)h, (void)p, (void)in, (void)n, (void)out, (void)err, (void)len;
  raise(SIGKILL);
  return -1;
}

static int fail_cpu(const tsr_plugin_host *h, const tsr_plugin_params *p, const tsr_plugin_array *in, int n,
                    tsr_plugin_array *out, char *err, size_t len)
{
  (void)in, (void)n, (void)out;
  const char *why = "no reason";
  h->get_str(p, "why", &why);
  snprintf(err, len, "failed on purpose: %s", why);
  return -1;
}

__attribute__((unused)) static const tsr_plugin_op ops[] = {
  {"plugin_crash", 0, -1, scalar_infer, crash_cpu, NULL},
  {"plugin_fail", 0, -1, scalar_infer, fail_cpu, NULL},
};

#ifdef TSR_TEST_PLUGIN_OLD
EXPORT int tsr_plugin_abi_version(void) { return 999; }
#else
EXPORT int tsr_plugin_abi_version(void) { return TSR_PLUGIN_ABI_VERSION; }
#endif

#ifndef TSR_TEST_PLUGIN_NOOPS
EXPORT const tsr_plugin_op *tsr_plugin_ops(size_t *n_p)
{
  *n_p = sizeof ops / sizeof ops[0];
  return ops;
}
#endif
