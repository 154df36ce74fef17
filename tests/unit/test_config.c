/* common/config without daemons: precedence per setting, the file's
 * syntax (sections, quotes, comments, duplicates), switches, the origins
 * that messages name, and apply's error text. The daemons' own tables are
 * tested end to end by integration.config. */
#include <stdlib.h>
#include <unistd.h>

#include "config/config.h"
#include "kit.h"

static const tsr_config_key KEYS[] = {
  {"help", NULL, NULL, TSR_CONFIG_ACTION},
  {"size", "TSRT_SIZE", NULL, 0},
  {"name", "TSRT_NAME", "TSRT_OLD_NAME", 0},
  {"fast", "TSRT_FAST", NULL, TSR_CONFIG_SWITCH},
  {"only-flag", NULL, NULL, TSR_CONFIG_NO_ENV | TSR_CONFIG_NO_FILE},
};
static const tsr_config_spec SPEC = {"worker", KEYS, sizeof KEYS / sizeof KEYS[0]};
static char path[64];

static void write_file(const char *text)
{
  FILE *f = fopen(path, "w");
  if (f != NULL) {
    fputs(text, f);
    fclose(f);
  }
}

/* New config from argv (NULL-terminated, argv[0] included) and loaded. */
static int load(tsr_config **cfg, const char **argv, tsr_errbuf *err)
{
  int argc = 0;
  while (argv[argc] != NULL) argc++;
  if (tsr_config_new(&SPEC, cfg) != 0) return TSR_ENOMEM;
  int rc = tsr_config_parse_args(*cfg, argc, (char **)argv, err);
  return rc != 0 ? rc : tsr_config_load(*cfg, err);
}

TEST(flag_beats_env_beats_file_per_setting)
{
  write_file("size = 1\nname = from-file\nfast = no\n");
  setenv("TSRT_SIZE", "2", 1);
  setenv("TSRT_OLD_NAME", "old-env", 1);
  const char *argv[] = {"d", "--config", path, "--size=3", NULL};
  tsr_config *cfg = NULL;
  tsr_errbuf err = {{0}};
  int rc = load(&cfg, argv, &err);
  unsetenv("TSRT_SIZE");
  unsetenv("TSRT_OLD_NAME");
  ASSERT_OK(rc);
  ASSERT_STREQ(tsr_config_get(cfg, "size"), "3");
  ASSERT_EQ(tsr_config_source_of(cfg, "size"), TSR_CONFIG_FROM_FLAG);
  ASSERT_STREQ(tsr_config_get(cfg, "name"), "old-env");
  char origin[256];
  ASSERT_STREQ(tsr_config_origin(cfg, "name", origin, sizeof origin), "TSRT_OLD_NAME (environment)");
  ASSERT_STREQ(tsr_config_get(cfg, "fast"), "false");
  char want[128];
  snprintf(want, sizeof want, "%s:3: fast", path);
  ASSERT_STREQ(tsr_config_origin(cfg, "fast", origin, sizeof origin), want);
  ASSERT_STREQ(tsr_config_origin(cfg, "help", origin, sizeof origin), "--help (default)");
  tsr_config_destroy(&cfg);
  ASSERT_TRUE(cfg == NULL);
  tsr_config_destroy(&cfg);  /* NULL is a no-op */
}

TEST(file_syntax)
{
  write_file("# comment\n; comment\nsize = \"4 GB\" ; trailing\n[scheduler]\nsize = ignored\n[worker]\n  name = n1\n");
  const char *argv[] = {"d", "--config", path, NULL};
  tsr_config *cfg = NULL;
  tsr_errbuf err = {{0}};
  ASSERT_OK(load(&cfg, argv, &err));
  ASSERT_STREQ(tsr_config_get(cfg, "size"), "4 GB");
  ASSERT_STREQ(tsr_config_get(cfg, "name"), "n1");
  tsr_config_destroy(&cfg);

  struct { const char *text, *want; } bad[] = {
    {"size = 1\n\nsize = 2\n", ":3: size set again (first on line 1)"},
    {"[other]\nsize = 1\n", ":2: unknown section [other]"},
    {"only-flag = 1\n", ":1: unknown key 'only-flag' (not a config file setting)"},
    {"fast = perhaps\n", ":1: fast: \"perhaps\" is not true or false"},
    {"size\n", ":1: not a 'key = value' line"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_file(bad[i].text);
    ASSERT_EQ(load(&cfg, argv, &err), TSR_EINVAL);
    ASSERT_CONTAINS(err.text, path);
    ASSERT_CONTAINS(err.text, bad[i].want);
    tsr_config_destroy(&cfg);
  }
}

TEST(command_line_errors_and_switches)
{
  tsr_config *cfg = NULL;
  tsr_errbuf err = {{0}};
  const char *unknown[] = {"d", "--sise", "1", NULL};
  ASSERT_EQ(load(&cfg, unknown, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "unknown option '--sise'");
  tsr_config_destroy(&cfg);
  const char *missing[] = {"d", "--size", NULL};
  ASSERT_EQ(load(&cfg, missing, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "option '--size' needs a value");
  tsr_config_destroy(&cfg);
  const char *positional[] = {"d", "extra", NULL};
  ASSERT_EQ(load(&cfg, positional, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "unexpected argument 'extra'");
  tsr_config_destroy(&cfg);
  const char *switches[] = {"d", "-h", "--fast=off", "--fast", NULL};
  ASSERT_OK(load(&cfg, switches, &err));
  ASSERT_STREQ(tsr_config_get(cfg, "help"), "true");
  ASSERT_STREQ(tsr_config_get(cfg, "fast"), "true");  /* the last one wins */
  tsr_config_destroy(&cfg);
  setenv("TSRT_FAST", "sometimes", 1);
  const char *none[] = {"d", NULL};
  int rc = load(&cfg, none, &err);
  unsetenv("TSRT_FAST");
  ASSERT_EQ(rc, TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "TSRT_FAST (environment): \"sometimes\" is not true or false");
  tsr_config_destroy(&cfg);
}

static int apply_size(void *ctx, const char *name, const char *value, tsr_errbuf *err)
{
  (void)ctx;
  if (strcmp(name, "size") == 0 && strcmp(value, "12XB") == 0)
    return tsr_fail(err, TSR_EINVAL, "\"%s\" is not a size", value);
  return 0;
}

TEST(apply_names_the_source)
{
  setenv("TSRT_SIZE", "12XB", 1);
  setenv("TSRT_NAME", "", 1);  /* empty: unset */
  const char *argv[] = {"d", NULL};
  tsr_config *cfg = NULL;
  tsr_errbuf err = {{0}};
  int rc = load(&cfg, argv, &err);
  unsetenv("TSRT_SIZE");
  unsetenv("TSRT_NAME");
  ASSERT_OK(rc);
  ASSERT_TRUE(tsr_config_get(cfg, "name") == NULL);
  ASSERT_EQ(tsr_config_apply(cfg, apply_size, NULL, &err), TSR_EINVAL);
  ASSERT_STREQ(err.text, "TSRT_SIZE (environment): \"12XB\" is not a size");
  tsr_config_destroy(&cfg);
  write_file("\nsize = 12XB\n");
  const char *file[] = {"d", "--config", path, NULL};
  ASSERT_OK(load(&cfg, file, &err));
  ASSERT_EQ(tsr_config_apply(cfg, apply_size, NULL, &err), TSR_EINVAL);
  char want[128];
  snprintf(want, sizeof want, "%s:2: size: \"12XB\" is not a size", path);
  ASSERT_STREQ(err.text, want);
  tsr_config_destroy(&cfg);
}

int main(void)
{
  snprintf(path, sizeof path, "/tmp/tsr-config-unit-%d.conf", (int)getpid());
  RUN(flag_beats_env_beats_file_per_setting);
  RUN(file_syntax);
  RUN(command_line_errors_and_switches);
  RUN(apply_names_the_source);
  unlink(path);
  return kit_summary();
}
