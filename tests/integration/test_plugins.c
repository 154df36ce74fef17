/* Op plugins (tessera/plugin.h, docs/plugins.md) through real daemons:
 * a worker refuses to start on a plugin that is missing, lacks a symbol or
 * has another ABI version, naming the file; plugin ops run only on the
 * workers that load them (a mixed cluster computes every tile's embedding,
 * twice to the same bytes); a plugin's failure fails its task with its
 * message; a plugin op that kills its worker is erred after three workers
 * and the rest keep serving. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"
#include "tessera/tiles.h"

static const char *fast_sched[] = {"--heartbeat-timeout", "2s", "--heartbeat-interval", "250ms", NULL};

static const char *plugin(const char *name)
{
  static char buf[4][600];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, 600, "%s/%s", TSR_PLUGIN_DIR, name);
  return p;
}

TEST(bad_plugins_stop_the_worker_at_start_naming_the_file)
{
  const char *cases[][2] = {
    {"libtsr_test_plugin_old.so", "ABI version 999, this worker runs version 1"},
    {"libtsr_test_plugin_noops.so", "missing symbol tsr_plugin_ops"},
    {"no_such_plugin.so", "cannot be loaded"},
  };
  for (int i = 0; i < 3; i++) {
    const char *path = plugin(cases[i][0]);
    const char *argv[] = {cluster_bin("tessera-worker"), "--scheduler", "tcp://127.0.0.1:9", "--op-plugin", path, NULL};
    char out[4096];
    ASSERT_EQ(run_capture(argv, NULL, out, sizeof out, 30), 1);
    ASSERT_CONTAINS(out, path);
    ASSERT_CONTAINS(out, cases[i][1]);
  }
}

TEST(plugin_ops_run_only_where_offered_and_are_deterministic)
{
  cluster c;
  char plugins_arg[1300];
  snprintf(plugins_arg, sizeof plugins_arg, "%s", plugin("libtsr_tile_embed.so"));
  const char *with[] = {"--op-plugin", plugins_arg, "--op-plugin", plugin("libtsr_test_plugin.so"), NULL};
  ASSERT_OK(cluster_start(&c, 2, 1, NULL, NULL));
  int w = cluster_add_worker(&c, 1, with);
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  int rc = w < 0 ? -1 : tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_wait_for_workers(client, 3, 30000);
  if (rc == 0) rc = tsr_array_ctx_new(client, &ctx);
  tsr_array *img = NULL, *emb = NULL;
  tsr_args *args = NULL;
  tsr_args_new(&args);
  tsr_args_int(args, "seed", 7);
  tsr_tile_opts o = {256, false};
  if (rc == 0) rc = tsr_from_tiff(ctx, TSR_WSI_DATA "/CMU-1-Small-Region.svs", 0, 256, &img);
  if (rc == 0) rc = tsr_tile_map(ctx, img, &o, "tile_embed", args, TSR_F32, 16, &emb);
  static float e1[9 * 12 * 16], e2[9 * 12 * 16];
  int rc1 = rc == 0 ? tsr_compute(ctx, emb, e1, sizeof e1, 120000) : rc;
  int rc2 = rc == 0 ? tsr_compute(ctx, emb, e2, sizeof e2, 120000) : rc;
  char msg1[512] = "";
  snprintf(msg1, sizeof msg1, "%s", tsr_errmsg());
  /* a plugin's own failure */
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  tsr_args *why = NULL;
  tsr_args_new(&why);
  tsr_args_str(why, "why", "because");
  int rc3 = tsr_graph_new(&g);
  if (rc3 == 0) rc3 = tsr_graph_add_args(g, "pf", "plugin_fail", why, NULL, 0);
  if (rc3 == 0) rc3 = tsr_graph_want(g, "pf");
  if (rc3 == 0) rc3 = tsr_submit(client, &g, &f);
  int waited = rc3 == 0 ? tsr_future_wait(f, 30000) : rc3;
  char msg3[512] = "";
  if (f && tsr_future_error(f)) snprintf(msg3, sizeof msg3, "%s", tsr_future_error(f));
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_args_destroy(&args), tsr_args_destroy(&why);
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  cluster_stop(&c, rc1 != 0 || rc2 != 0);
  ASSERT_OK(rc);
  if (rc1 != 0) fprintf(stderr, "  %s\n", msg1);
  ASSERT_OK(rc1);
  ASSERT_OK(rc2);
  ASSERT_EQ(memcmp(e1, e2, sizeof e1), 0);
  double norm = 0;
  for (size_t i = 0; i < sizeof e1 / sizeof e1[0]; i++) norm += (double)e1[i] * e1[i];
  ASSERT_TRUE(norm > 0);
  ASSERT_EQ(waited, TSR_ETASK);
  ASSERT_CONTAINS(msg3, "plugin_fail: failed on purpose: because");
}

TEST(a_plugin_op_that_kills_three_workers_is_erred)
{
  cluster c;
  const char *with[] = {"--heartbeat-interval", "250ms", "--op-plugin", plugin("libtsr_test_plugin.so"), NULL};
  const char *plain[] = {"--heartbeat-interval", "250ms", NULL};
  ASSERT_OK(cluster_start(&c, 1, 1, fast_sched, plain));
  for (int i = 0; i < 4; i++) ASSERT_TRUE(cluster_add_worker(&c, 1, with) >= 0);
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_wait_for_workers(client, 5, 30000);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = add_plain(g, "poison", "plugin_crash", NULL, 0);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  int waited = rc == 0 ? tsr_future_wait(f, 60000) : rc;
  char message[512] = "";
  if (f != NULL && tsr_future_error(f) != NULL) snprintf(message, sizeof message, "%s", tsr_future_error(f));
  tsr_future_release(&f);
  tsr_client_close(client);
  int alive = 0;
  for (int i = 0; i < c.n_workers; i++) alive += cluster_alive(c.workers[i]);
  cluster_stop(&c, waited != TSR_ETASK);
  ASSERT_OK(rc);
  ASSERT_EQ(waited, TSR_ETASK);
  ASSERT_CONTAINS(message, "poison");
  ASSERT_CONTAINS(message, "3 workers");
  ASSERT_EQ(alive, 2); /* the plain worker and one plugin worker */
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  RUN(bad_plugins_stop_the_worker_at_start_naming_the_file);
  RUN(plugin_ops_run_only_where_offered_and_are_deterministic);
  RUN(a_plugin_op_that_kills_three_workers_is_erred);
  return kit_summary();
}
