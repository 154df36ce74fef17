/* CURVE for a client (docs/security.md): the keys come from
 * tsr_client_opts (curve_secret, scheduler_key) or, when those are NULL,
 * from TESSERA_CURVE_SECRET and TESSERA_SCHEDULER_KEY. With keys, the
 * scheduler connection and every gather connection to a worker are CURVE;
 * without, plaintext. */
#include <stdlib.h>

#include "internal.h"

static const char *pick(const char *given, const char *env_name)
{
  if (given != NULL && given[0] != '\0') return given;
  const char *env = getenv(env_name);
  return env != NULL && env[0] != '\0' ? env : NULL;
}

int client_curve_setup(tsr_client *c, const tsr_client_opts *opts)
{
  const char *secret = pick(opts->curve_secret, "TESSERA_CURVE_SECRET");
  const char *server = pick(opts->scheduler_key, "TESSERA_SCHEDULER_KEY");
  if (secret == NULL && server == NULL) return 0;
  if (secret == NULL || server == NULL)
    return client_fail(TSR_EINVAL, "CURVE needs both a secret key (curve_secret / TESSERA_CURVE_SECRET) and the "
                                   "scheduler's public key (scheduler_key / TESSERA_SCHEDULER_KEY); only %s is set",
                       secret != NULL ? "the secret key" : "the scheduler's key");
  tsr_errbuf err = {{0}};
  int rc = tsr_curve_load(&c->curve, secret, server, &err);
  return rc != 0 ? client_fail_err(rc, &err) : 0;
}

void client_curve_keys(const tsr_client *c, const char **secret_p, const char **server_p)
{
  *secret_p = c->curve.on ? c->curve.secret_key : NULL;
  *server_p = c->curve.on ? c->curve.server_key : NULL;
}
