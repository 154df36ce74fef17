/* Settings from flags, environment and a config file (config.h has the
 * contract). One slot per key of the spec, plus the built-in `config`;
 * each source writes a slot only when it outranks what the slot holds, so
 * the order of reading does not matter for the result. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CONFIG_KEY "config"
#define CONFIG_ENV "TESSERA_CONFIG"

typedef struct slot {
  char *value;               /* owned; NULL when unset */
  tsr_config_source source;
  bool from_alias;           /* FROM_ENV through the key's env_alias */
  int line;                  /* FROM_FILE: its line */
  int file_line;             /* the line the file set it on (even when outranked), 0 if none */
} slot;

struct tsr_config {
  const tsr_config_spec *spec;
  tsr_config_key builtin;    /* `config` */
  slot *slots;               /* spec->n_keys + 1, the built-in last */
  char *file;                /* the file read, for origins */
};

static const char *const SECTIONS[] = {"scheduler", "worker"};

static size_t n_slots(const tsr_config *cfg) { return cfg->spec->n_keys + 1; }

static const tsr_config_key *key_at(const tsr_config *cfg, size_t i)
{
  return i < cfg->spec->n_keys ? &cfg->spec->keys[i] : &cfg->builtin;
}

/* Index of the key named name (length len), or -1. */
static long find_key(const tsr_config *cfg, const char *name, size_t len)
{
  for (size_t i = 0; i < n_slots(cfg); i++) {
    const char *k = key_at(cfg, i)->name;
    if (strlen(k) == len && strncmp(k, name, len) == 0) return (long)i;
  }
  return -1;
}

int tsr_config_new(const tsr_config_spec *spec, tsr_config **cfg_p)
{
  tsr_config *cfg = calloc(1, sizeof *cfg);
  if (cfg == NULL) return TSR_ENOMEM;
  cfg->spec = spec;
  cfg->builtin = (tsr_config_key){CONFIG_KEY, CONFIG_ENV, NULL, TSR_CONFIG_NO_FILE};
  cfg->slots = calloc(spec->n_keys + 1, sizeof *cfg->slots);
  if (cfg->slots == NULL) {
    free(cfg);
    return TSR_ENOMEM;
  }
  *cfg_p = cfg;
  return 0;
}

void tsr_config_destroy(tsr_config **cfg_p)
{
  if (cfg_p == NULL || *cfg_p == NULL) return;
  tsr_config *cfg = *cfg_p;
  for (size_t i = 0; i < n_slots(cfg); i++) free(cfg->slots[i].value);
  free(cfg->slots);
  free(cfg->file);
  free(cfg);
  *cfg_p = NULL;
}

/* Stores value in slot i from source when it outranks what is there (a
 * later flag replaces an earlier one: the last on the line wins). */
static int set_slot(tsr_config *cfg, size_t i, const char *value, tsr_config_source source)
{
  slot *s = &cfg->slots[i];
  if (s->source > source) return 0;
  char *copy = strdup(value);
  if (copy == NULL) return TSR_ENOMEM;
  free(s->value);
  s->value = copy;
  s->source = source;
  s->from_alias = false;
  return 0;
}

int tsr_config_parse_bool(const char *text)
{
  static const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0", "no", "off"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(text, yes[i]) == 0) return 1;
    if (strcasecmp(text, no[i]) == 0) return 0;
  }
  return -1;
}

/* ---------- the command line ---------- */

static int parse_one_arg(tsr_config *cfg, int argc, char **argv, int *i, tsr_errbuf *err)
{
  const char *arg = argv[*i];
  if (strcmp(arg, "-h") == 0 && find_key(cfg, "help", 4) >= 0) arg = "--help";
  if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') return tsr_fail(err, TSR_EINVAL, "unexpected argument '%s'", arg);
  const char *name = arg + 2, *eq = strchr(name, '=');
  size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
  long k = find_key(cfg, name, len);
  if (k < 0) return tsr_fail(err, TSR_EINVAL, "unknown option '--%.*s'", (int)len, name);
  const tsr_config_key *key = key_at(cfg, (size_t)k);
  const char *value;
  if (key->flags & TSR_CONFIG_SWITCH) {
    int b = eq != NULL ? tsr_config_parse_bool(eq + 1) : 1;
    if (b < 0) return tsr_fail(err, TSR_EINVAL, "--%s: \"%s\" is not true or false", key->name, eq + 1);
    value = b ? "true" : "false";
  } else if (eq != NULL) {
    value = eq + 1;
  } else {
    if (*i + 1 >= argc) return tsr_fail(err, TSR_EINVAL, "option '--%s' needs a value", key->name);
    value = argv[++*i];
  }
  return set_slot(cfg, (size_t)k, value, TSR_CONFIG_FROM_FLAG);
}

int tsr_config_parse_args(tsr_config *cfg, int argc, char **argv, tsr_errbuf *err)
{
  for (int i = 1; i < argc; i++) {
    int rc = parse_one_arg(cfg, argc, argv, &i, err);
    if (rc != 0) return rc;
  }
  return 0;
}

/* ---------- the environment ---------- */

static int load_env_key(tsr_config *cfg, size_t i, tsr_errbuf *err)
{
  const tsr_config_key *key = key_at(cfg, i);
  if ((key->flags & TSR_CONFIG_NO_ENV) || key->env == NULL) return 0;
  const char *name = key->env, *value = getenv(name);
  if ((value == NULL || value[0] == '\0') && key->env_alias != NULL) value = getenv(name = key->env_alias);
  if (value == NULL || value[0] == '\0') return 0;
  if (key->flags & TSR_CONFIG_SWITCH) {
    int b = tsr_config_parse_bool(value);
    if (b < 0) return tsr_fail(err, TSR_EINVAL, "%s (environment): \"%s\" is not true or false", name, value);
    value = b ? "true" : "false";
  }
  int rc = set_slot(cfg, i, value, TSR_CONFIG_FROM_ENV);
  if (rc == 0 && cfg->slots[i].source == TSR_CONFIG_FROM_ENV) cfg->slots[i].from_alias = name != key->env;
  return rc;
}

/* ---------- the file ---------- */

typedef struct file_ctx {
  tsr_config *cfg;
  FILE *f;
  int line;         /* the line inih read last: the one its handler sees */
  int rc;           /* first failure */
  int err_line;
  tsr_errbuf *err;
} file_ctx;

static char *read_line(char *str, int num, void *stream)
{
  file_ctx *ctx = stream;
  char *got = fgets(str, num, ctx->f);
  if (got != NULL) ctx->line++;
  return got;
}

/* Records the file's first failure "FILE:LINE: MESSAGE"; returns 0, which
 * tells inih the line was bad (it goes on, and we keep the first). */
static int file_fail(file_ctx *ctx, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int file_fail(file_ctx *ctx, int rc, const char *fmt, ...)
{
  if (ctx->rc == 0) {
    char msg[TSR_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tsr_fail(ctx->err, rc, "%s:%d: %s", ctx->cfg->file, ctx->line, msg);
    ctx->rc = rc;
    ctx->err_line = ctx->line;
  }
  return 0;
}

/* true: the section is this daemon's (or none); false: another daemon's.
 * -1 for a section nobody reads. */
static int section_kind(const tsr_config *cfg, const char *section)
{
  if (section[0] == '\0' || strcmp(section, cfg->spec->section) == 0) return 1;
  for (size_t i = 0; i < sizeof SECTIONS / sizeof SECTIONS[0]; i++)
    if (strcmp(section, SECTIONS[i]) == 0) return 0;
  return -1;
}

/* `"value"` -> `value` (in place). */
static char *unquote(char *v)
{
  size_t len = strlen(v);
  if (len >= 2 && v[0] == '"' && v[len - 1] == '"') {
    v[len - 1] = '\0';
    return v + 1;
  }
  return v;
}

static int on_pair(void *user, const char *section, const char *name, const char *raw)
{
  file_ctx *ctx = user;
  tsr_config *cfg = ctx->cfg;
  int kind = section_kind(cfg, section);
  if (kind < 0) return file_fail(ctx, TSR_EINVAL, "unknown section [%s] (sections: [scheduler], [worker])", section);
  if (kind == 0) return 1;
  long k = find_key(cfg, name, strlen(name));
  if (k < 0 || (key_at(cfg, (size_t)k)->flags & TSR_CONFIG_NO_FILE))
    return file_fail(ctx, TSR_EINVAL, "unknown key '%s'%s", name,
                     k >= 0 ? " (not a config file setting)" : "");
  slot *s = &cfg->slots[k];
  if (s->file_line != 0) return file_fail(ctx, TSR_EINVAL, "%s set again (first on line %d)", name, s->file_line);
  s->file_line = ctx->line;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", raw ? raw : "");
  const char *value = unquote(buf);
  if (value[0] == '\0') return file_fail(ctx, TSR_EINVAL, "%s has no value", name);
  if (key_at(cfg, (size_t)k)->flags & TSR_CONFIG_SWITCH) {
    int b = tsr_config_parse_bool(value);
    if (b < 0) return file_fail(ctx, TSR_EINVAL, "%s: \"%s\" is not true or false", name, value);
    value = b ? "true" : "false";
  }
  if (s->source <= TSR_CONFIG_FROM_FILE) {
    if (set_slot(cfg, (size_t)k, value, TSR_CONFIG_FROM_FILE) != 0) return file_fail(ctx, TSR_ENOMEM, "out of memory");
    s->line = ctx->line;
  }
  return 1;
}

static int load_file(tsr_config *cfg, const char *path, tsr_errbuf *err)
{
  char origin[256];
  tsr_config_origin(cfg, CONFIG_KEY, origin, sizeof origin);
  cfg->file = strdup(path);
  if (cfg->file == NULL) return TSR_ENOMEM;
  FILE *f = fopen(path, "r");
  if (f == NULL) return tsr_fail(err, TSR_EIO, "%s: cannot read config file \"%s\": %s", origin, path, strerror(errno));
  file_ctx ctx = {cfg, f, 0, 0, 0, err};
  /* A line that starts with a blank is its own `key = value`, not the
   * continuation of the previous value (a duplicate key to our eyes). */
  ini_allow_multiline = false;
  int first_bad = ini_parse_stream(read_line, &ctx, on_pair, &ctx);
  fclose(f);
  if (ctx.rc != 0 && (first_bad <= 0 || ctx.err_line <= first_bad)) return ctx.rc;
  if (first_bad > 0)
    return tsr_fail(err, TSR_EINVAL, "%s:%d: not a 'key = value' line, a [section] or a comment", path, first_bad);
  if (first_bad < 0) return tsr_fail(err, TSR_ENOMEM, "%s: out of memory parsing it", path);
  return 0;
}

int tsr_config_load(tsr_config *cfg, tsr_errbuf *err)
{
  for (size_t i = 0; i < n_slots(cfg); i++) {
    int rc = load_env_key(cfg, i, err);
    if (rc != 0) return rc;
  }
  const char *path = cfg->slots[n_slots(cfg) - 1].value;
  return path != NULL ? load_file(cfg, path, err) : 0;
}

/* ---------- reading the result ---------- */

const char *tsr_config_get(const tsr_config *cfg, const char *name)
{
  long k = find_key(cfg, name, strlen(name));
  return k >= 0 ? cfg->slots[k].value : NULL;
}

tsr_config_source tsr_config_source_of(const tsr_config *cfg, const char *name)
{
  long k = find_key(cfg, name, strlen(name));
  return k >= 0 ? cfg->slots[k].source : TSR_CONFIG_UNSET;
}

const char *tsr_config_origin(const tsr_config *cfg, const char *name, char *buf, size_t cap)
{
  long k = find_key(cfg, name, strlen(name));
  const tsr_config_key *key = k >= 0 ? key_at(cfg, (size_t)k) : NULL;
  const slot *s = k >= 0 ? &cfg->slots[k] : NULL;
  if (s == NULL || s->source == TSR_CONFIG_UNSET) snprintf(buf, cap, "--%s (default)", name);
  else if (s->source == TSR_CONFIG_FROM_FLAG) snprintf(buf, cap, "--%s", name);
  else if (s->source == TSR_CONFIG_FROM_ENV)
    snprintf(buf, cap, "%s (environment)", s->from_alias ? key->env_alias : key->env);
  else snprintf(buf, cap, "%s:%d: %s", cfg->file, s->line, name);
  return buf;
}

int tsr_config_apply(const tsr_config *cfg, tsr_config_apply_fn apply, void *ctx, tsr_errbuf *err)
{
  for (size_t i = 0; i < cfg->spec->n_keys; i++) {
    const slot *s = &cfg->slots[i];
    if (s->value == NULL) continue;
    tsr_errbuf why = {{0}};
    int rc = apply(ctx, cfg->spec->keys[i].name, s->value, &why);
    if (rc != 0) {
      char origin[512];
      return tsr_fail(err, rc, "%s: %s", tsr_config_origin(cfg, cfg->spec->keys[i].name, origin, sizeof origin),
                      why.text);
    }
  }
  return 0;
}

void tsr_config_print(const tsr_config *cfg, FILE *out)
{
  for (size_t i = 0; i < n_slots(cfg); i++) {
    const tsr_config_key *key = key_at(cfg, i);
    const slot *s = &cfg->slots[i];
    if (s->value == NULL || (key->flags & TSR_CONFIG_ACTION) == TSR_CONFIG_ACTION) continue;
    char origin[512];
    fprintf(out, "%s = %s  # %s\n", key->name, s->value, tsr_config_origin(cfg, key->name, origin, sizeof origin));
  }
}
