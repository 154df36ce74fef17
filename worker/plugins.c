/* worker/plugins.c — op plugins (tessera/plugin.h, docs/plugins.md):
 * `--op-plugin PATH` flags are taken out of argv before the config parser
 * sees them and kept in TESSERA_OP_PLUGINS (colon-separated, which also
 * carries them across the huge-page re-exec), then each library is opened
 * with dlopen and its ops enter the registry (tsr_ops_add) before any
 * thread runs, so the `hello` advertises them like built-in ops.
 *
 * The registry's op functions carry no closure, so each plugin op gets a
 * slot with its own trampolines (infer/cpu/cuda of slot k call the
 * plugin's functions of slot k) converting between the ABI's structs and
 * the kernels' ones. Libraries are never closed: their ops live until exit. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "plugins.h"
#include "tessera/plugin.h"

#define MAX_SLOTS 64

static const tsr_plugin_op *slot_ops[MAX_SLOTS];
static tsr_op_def slot_defs[MAX_SLOTS];
static size_t n_slots;

/* ---------- params for plugins ---------- */

static const tsr_param *param_of(const tsr_plugin_params *p, const char *name, tsr_param_type type)
{
  const tsr_param *q = tsr_params_find((const tsr_params *)p, name);
  return q != NULL && q->type == type ? q : NULL;
}

static int host_int(const tsr_plugin_params *p, const char *name, int64_t *v)
{
  const tsr_param *q = param_of(p, name, TSR_PARAM_INT);
  return q ? (*v = q->i, 0) : -1;
}

static int host_float(const tsr_plugin_params *p, const char *name, double *v)
{
  const tsr_param *q = param_of(p, name, TSR_PARAM_FLOAT);
  if (q != NULL) return *v = q->f, 0;
  q = param_of(p, name, TSR_PARAM_INT);
  return q ? (*v = (double)q->i, 0) : -1;
}

static int host_str(const tsr_plugin_params *p, const char *name, const char **v)
{
  const tsr_param *q = param_of(p, name, TSR_PARAM_STR);
  return q ? (*v = q->s, 0) : -1;
}

static int host_ints(const tsr_plugin_params *p, const char *name, const int64_t **v, size_t *n)
{
  const tsr_param *q = param_of(p, name, TSR_PARAM_INTS);
  return q ? (*v = q->ints, *n = q->n, 0) : -1;
}

static const tsr_plugin_host host = {TSR_PLUGIN_ABI_VERSION, host_int, host_float, host_str, host_ints};

/* ---------- trampolines ---------- */

static void to_array(const tsr_meta *m, void *data, size_t nbytes, tsr_plugin_array *a)
{
  memset(a, 0, sizeof *a);
  a->dtype = m->dtype, a->ndim = m->ndim, a->data = data, a->nbytes = nbytes;
  memcpy(a->shape, m->shape, sizeof a->shape);
}

static int slot_infer(size_t k, const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  tsr_plugin_array ins[64], o;
  if (n > 64) return tsr_fail(err, TSR_ELIMIT, "%s: more than 64 inputs", slot_ops[k]->name);
  for (int i = 0; i < n; i++) to_array(&in[i], NULL, 0, &ins[i]);
  memset(&o, 0, sizeof o);
  char msg[400] = "";
  if (slot_ops[k]->infer(&host, (const tsr_plugin_params *)p, ins, n, &o, msg, sizeof msg) != 0)
    return tsr_fail(err, TSR_EINVAL, "%s: %s", slot_ops[k]->name, msg[0] ? msg : "infer failed");
  if (o.ndim < 0 || o.ndim > TSR_MAX_NDIM || tsr_dtype_size(o.dtype) == 0)
    return tsr_fail(err, TSR_EINVAL, "%s: infer gave ndim %d or dtype %d out of range", slot_ops[k]->name, o.ndim,
                    (int)o.dtype);
  memset(out, 0, sizeof *out);
  out->dtype = o.dtype, out->ndim = o.ndim;
  memcpy(out->shape, o.shape, sizeof out->shape);
  return tsr_meta_check(out, err);
}

static int slot_run(size_t k, const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, void *stream,
                    tsr_errbuf *err)
{
  tsr_plugin_array ins[64], o;
  if (n > 64) return tsr_fail(err, TSR_ELIMIT, "%s: more than 64 inputs", slot_ops[k]->name);
  for (int i = 0; i < n; i++) to_array(&in[i].meta, in[i].data, in[i].nbytes, &ins[i]);
  to_array(&out->meta, out->data, out->nbytes, &o);
  char msg[400] = "";
  const tsr_plugin_params *pp = (const tsr_plugin_params *)p;
  int rc = stream != NULL ? slot_ops[k]->cuda(&host, pp, ins, n, &o, stream, msg, sizeof msg)
                          : slot_ops[k]->cpu(&host, pp, ins, n, &o, msg, sizeof msg);
  return rc == 0 ? 0 : tsr_fail(err, TSR_EINVAL, "%s: %s", slot_ops[k]->name, msg[0] ? msg : "failed");
}

#define SLOT(g, i)                                                                                           \
  static int infer_##g##_##i(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err) \
  {                                                                                                          \
    return slot_infer(g * 8 + i, p, in, n, out, err);                                                        \
  }                                                                                                          \
  static int cpu_##g##_##i(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)    \
  {                                                                                                          \
    return slot_run(g * 8 + i, p, in, n, out, NULL, err);                                                    \
  }                                                                                                          \
  static int cuda_##g##_##i(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out,                     \
                            const tsr_gpu_ctx *gpu, tsr_errbuf *err)                                         \
  {                                                                                                          \
    return slot_run(g * 8 + i, p, in, n, out, gpu->stream, err);                                             \
  }
#define SLOT8(g) SLOT(g, 0) SLOT(g, 1) SLOT(g, 2) SLOT(g, 3) SLOT(g, 4) SLOT(g, 5) SLOT(g, 6) SLOT(g, 7)
SLOT8(0) SLOT8(1) SLOT8(2) SLOT8(3) SLOT8(4) SLOT8(5) SLOT8(6) SLOT8(7)
#define ENTRY(g, i) {infer_##g##_##i, cpu_##g##_##i, cuda_##g##_##i}
#define ENTRY8(g) ENTRY(g, 0), ENTRY(g, 1), ENTRY(g, 2), ENTRY(g, 3), ENTRY(g, 4), ENTRY(g, 5), ENTRY(g, 6), ENTRY(g, 7)

/* Slot k's functions (k = 8g + i). */
static const struct {
  int (*infer)(const tsr_params *, const tsr_meta *, int, tsr_meta *, tsr_errbuf *);
  int (*cpu)(const tsr_params *, const tsr_buf *, int, tsr_buf *, tsr_errbuf *);
  tsr_cuda_fn cuda;
} trampolines[MAX_SLOTS] = {ENTRY8(0), ENTRY8(1), ENTRY8(2), ENTRY8(3), ENTRY8(4), ENTRY8(5), ENTRY8(6), ENTRY8(7)};

/* ---------- loading ---------- */

static int add_op(const char *path, const tsr_plugin_op *op, tsr_errbuf *err)
{
  if (op->name == NULL || op->infer == NULL || op->cpu == NULL)
    return tsr_fail(err, TSR_EINVAL, "plugin %s: an op has no name, infer or cpu function", path);
  if (n_slots == MAX_SLOTS) return tsr_fail(err, TSR_ELIMIT, "plugin %s: more than %d plugin ops", path, MAX_SLOTS);
  size_t k = n_slots;
  slot_ops[k] = op;
  slot_defs[k] = (tsr_op_def){op->name, op->min_inputs, op->max_inputs, trampolines[k].infer, trampolines[k].cpu,
                              false, op->cuda != NULL ? trampolines[k].cuda : NULL};
  tsr_errbuf why;
  if (tsr_ops_add(&slot_defs[k], &why) != 0) return tsr_fail(err, TSR_EEXIST, "plugin %s: %s", path, why.text);
  n_slots++;
  return 0;
}

int tsr_plugin_load(const char *path, tsr_errbuf *err)
{
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return tsr_fail(err, TSR_EIO, "plugin %s cannot be loaded: %s", path, dlerror());
  int (*abi)(void) = (int (*)(void))dlsym(lib, "tsr_plugin_abi_version");
  const tsr_plugin_op *(*ops)(size_t *) = (const tsr_plugin_op *(*)(size_t *))dlsym(lib, "tsr_plugin_ops");
  int rc = 0;
  if (abi == NULL || ops == NULL)
    rc = tsr_fail(err, TSR_EINVAL, "plugin %s: missing symbol %s (docs/plugins.md)", path,
                  abi == NULL ? "tsr_plugin_abi_version" : "tsr_plugin_ops");
  else if (abi() != TSR_PLUGIN_ABI_VERSION)
    rc = tsr_fail(err, TSR_EVERSION, "plugin %s: ABI version %d, this worker runs version %d: rebuild it against "
                  "this tessera/plugin.h", path, abi(), TSR_PLUGIN_ABI_VERSION);
  size_t n = 0;
  const tsr_plugin_op *list = rc == 0 ? ops(&n) : NULL;
  if (rc == 0 && (list == NULL || n == 0)) rc = tsr_fail(err, TSR_EINVAL, "plugin %s offers no ops", path);
  for (size_t i = 0; rc == 0 && i < n; i++) rc = add_op(path, &list[i], err);
  if (rc != 0) dlclose(lib);  /* only on failure: the worker exits then */
  return rc;
}

int tsr_plugins_take_flags(int *argc, char **argv, tsr_errbuf *err)
{
  const char *env = getenv("TESSERA_OP_PLUGINS");
  size_t cap = (env ? strlen(env) : 0) + 2;
  for (int i = 1; i < *argc; i++) cap += strlen(argv[i]) + 1;
  char *list = calloc(1, cap);
  if (list == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory");
  if (env != NULL) strcat(list, env);
  int out = 1;
  for (int i = 1; i < *argc; i++) {
    if (strcmp(argv[i], "--op-plugin") != 0) {
      argv[out++] = argv[i];
      continue;
    }
    if (i + 1 >= *argc) return free(list), tsr_fail(err, TSR_EINVAL, "--op-plugin needs a path");
    if (list[0] != '\0') strcat(list, ":");
    strcat(list, argv[++i]);
  }
  argv[out] = NULL;
  *argc = out;
  int rc = list[0] ? setenv("TESSERA_OP_PLUGINS", list, 1) : 0;
  free(list);
  return rc == 0 ? 0 : tsr_fail(err, TSR_ENOMEM, "cannot set TESSERA_OP_PLUGINS");
}

int tsr_plugins_load_env(tsr_errbuf *err)
{
  const char *env = getenv("TESSERA_OP_PLUGINS");
  if (env == NULL || env[0] == '\0') return 0;
  char *copy = strdup(env);
  int rc = copy ? 0 : tsr_fail(err, TSR_ENOMEM, "out of memory");
  for (char *save = NULL, *p = copy ? strtok_r(copy, ":", &save) : NULL; rc == 0 && p != NULL;
       p = strtok_r(NULL, ":", &save))
    rc = tsr_plugin_load(p, err);
  free(copy);
  return rc;
}
