/* The kernel-neutral parameter list: appenders and typed getters. */
#include "util.h"

#include <stdlib.h>
#include <string.h>

void tsr_params_clear(tsr_params *params)
{
  for (size_t i = 0; i < params->n; i++) {
    free(params->items[i].name);
    free(params->items[i].s);
    free(params->items[i].ints);
    free(params->items[i].floats);
  }
  free(params->items);
  params->items = NULL;
  params->n = params->cap = 0;
}

/* Appends a zeroed entry named name; NULL on ENOMEM. */
static tsr_param *append(tsr_params *params, const char *name, tsr_param_type type)
{
  if (params->n == params->cap) {
    size_t cap = params->cap ? params->cap * 2 : 8;
    tsr_param *items = realloc(params->items, cap * sizeof *items);
    if (items == NULL) return NULL;
    params->items = items;
    params->cap = cap;
  }
  char *copy = strdup(name);
  if (copy == NULL) return NULL;
  tsr_param *p = &params->items[params->n++];
  memset(p, 0, sizeof *p);
  p->name = copy;
  p->type = type;
  return p;
}

int tsr_params_add_int(tsr_params *params, const char *name, int64_t value)
{
  tsr_param *p = append(params, name, TSR_PARAM_INT);
  if (p == NULL) return TSR_ENOMEM;
  p->i = value;
  p->f = (double)value;
  return 0;
}

int tsr_params_add_float(tsr_params *params, const char *name, double value)
{
  tsr_param *p = append(params, name, TSR_PARAM_FLOAT);
  if (p == NULL) return TSR_ENOMEM;
  p->f = value;
  return 0;
}

int tsr_params_add_bool(tsr_params *params, const char *name, bool value)
{
  tsr_param *p = append(params, name, TSR_PARAM_BOOL);
  if (p == NULL) return TSR_ENOMEM;
  p->i = value ? 1 : 0;
  return 0;
}

int tsr_params_add_str(tsr_params *params, const char *name, const char *value, size_t len)
{
  char *copy = malloc(len + 1);
  if (copy == NULL) return TSR_ENOMEM;
  memcpy(copy, value, len);
  copy[len] = '\0';
  tsr_param *p = append(params, name, TSR_PARAM_STR);
  if (p == NULL) {
    free(copy);
    return TSR_ENOMEM;
  }
  p->s = copy;
  p->len = len;
  return 0;
}

int tsr_params_add_ints(tsr_params *params, const char *name, const int64_t *values, size_t n)
{
  int64_t *copy = malloc((n ? n : 1) * sizeof *copy);
  if (copy == NULL) return TSR_ENOMEM;
  if (n) memcpy(copy, values, n * sizeof *copy);
  tsr_param *p = append(params, name, TSR_PARAM_INTS);
  if (p == NULL) {
    free(copy);
    return TSR_ENOMEM;
  }
  p->ints = copy;
  p->n = n;
  return 0;
}

int tsr_params_add_floats(tsr_params *params, const char *name, const double *values, size_t n)
{
  double *copy = malloc((n ? n : 1) * sizeof *copy);
  if (copy == NULL) return TSR_ENOMEM;
  if (n) memcpy(copy, values, n * sizeof *copy);
  tsr_param *p = append(params, name, TSR_PARAM_FLOATS);
  if (p == NULL) {
    free(copy);
    return TSR_ENOMEM;
  }
  p->floats = copy;
  p->n = n;
  return 0;
}

const tsr_param *tsr_params_find(const tsr_params *params, const char *name)
{
  for (size_t i = 0; i < params->n; i++)
    if (strcmp(params->items[i].name, name) == 0) return &params->items[i];
  return NULL;
}

static int missing(const char *name, tsr_errbuf *err)
{
  return tsr_fail(err, TSR_ENOTFOUND, "missing parameter '%s'", name);
}

static int wrong(const char *name, const char *expected, tsr_errbuf *err)
{
  return tsr_fail(err, TSR_EINVAL, "parameter '%s' must be %s", name, expected);
}

int tsr_params_get_int(const tsr_params *params, const char *name, int64_t *value_p, tsr_errbuf *err)
{
  const tsr_param *p = tsr_params_find(params, name);
  if (p == NULL) return missing(name, err);
  if (p->type != TSR_PARAM_INT) return wrong(name, "an integer", err);
  *value_p = p->i;
  return 0;
}

int tsr_params_get_float(const tsr_params *params, const char *name, double *value_p, tsr_errbuf *err)
{
  const tsr_param *p = tsr_params_find(params, name);
  if (p == NULL) return missing(name, err);
  if (p->type != TSR_PARAM_FLOAT && p->type != TSR_PARAM_INT) return wrong(name, "a number", err);
  *value_p = p->type == TSR_PARAM_INT ? (double)p->i : p->f;
  return 0;
}

int tsr_params_get_bool(const tsr_params *params, const char *name, bool *value_p, tsr_errbuf *err)
{
  const tsr_param *p = tsr_params_find(params, name);
  if (p == NULL) return missing(name, err);
  if (p->type != TSR_PARAM_BOOL && p->type != TSR_PARAM_INT) return wrong(name, "a boolean", err);
  *value_p = p->i != 0;
  return 0;
}

int tsr_params_get_str(const tsr_params *params, const char *name, const char **value_p, tsr_errbuf *err)
{
  const tsr_param *p = tsr_params_find(params, name);
  if (p == NULL) return missing(name, err);
  if (p->type != TSR_PARAM_STR) return wrong(name, "a string", err);
  *value_p = p->s;
  return 0;
}

int tsr_params_get_ints(const tsr_params *params, const char *name, const int64_t **values_p, size_t *n_p,
                        tsr_errbuf *err)
{
  const tsr_param *p = tsr_params_find(params, name);
  if (p == NULL) return missing(name, err);
  if (p->type == TSR_PARAM_INT) {
    *values_p = &p->i;
    *n_p = 1;
    return 0;
  }
  if (p->type != TSR_PARAM_INTS) return wrong(name, "an array of integers", err);
  *values_p = p->ints;
  *n_p = p->n;
  return 0;
}

int tsr_params_opt_int(const tsr_params *params, const char *name, int64_t fallback, int64_t *value_p,
                       tsr_errbuf *err)
{
  if (tsr_params_find(params, name) == NULL) {
    *value_p = fallback;
    return 0;
  }
  return tsr_params_get_int(params, name, value_p, err);
}

int tsr_params_opt_float(const tsr_params *params, const char *name, double fallback, double *value_p,
                         tsr_errbuf *err)
{
  if (tsr_params_find(params, name) == NULL) {
    *value_p = fallback;
    return 0;
  }
  return tsr_params_get_float(params, name, value_p, err);
}
