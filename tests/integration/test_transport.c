/* integration.transport — a cluster whose workers speak different data
 * planes (docs/transport.md): one --transport ucx (UCX only), one zmq,
 * one auto (both). Elementwise adds of 2 MiB chunks make them fetch from
 * each other across transports, and the client gathers from all three. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"
#include "tessera/tessera.h"

enum { LEAVES = 24, N = 1 << 18 };

/* True when the worker's log holds text. */
static bool log_has(const cluster *c, int worker, const char *text)
{
  char path[600], line[4096];
  snprintf(path, sizeof path, "%s/worker-%d.log", c->dir, worker);
  FILE *f = fopen(path, "r");
  bool found = false;
  while (f != NULL && !found && fgets(line, sizeof line, f) != NULL) found = strstr(line, text) != NULL;
  if (f != NULL) fclose(f);
  return found;
}

/* leaf-i = full(N, i + 1); a tree of 3-way adds; its total = N * 300. */
static int run_adds(cluster *c, double *total, double *leaves)
{
  char *keys[LEAVES], root[64], sum_key[] = "root-sum";
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  int rc = tsr_client_open(&client, c->address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  for (int i = 0; i < LEAVES; i++) {
    keys[i] = malloc(32);
    snprintf(keys[i], 32, "leaf-%d", i);
    if (rc == 0) rc = add_full(g, keys[i], N, i + 1.0);
    if (rc == 0) rc = tsr_graph_want(g, keys[i]);
  }
  if (rc == 0) rc = add_tree(g, "adds", keys, LEAVES, 3, root, sizeof root);
  const char *in = root;
  if (rc == 0) rc = add_plain(g, sum_key, "sum", &in, 1);
  if (rc == 0) rc = tsr_graph_want(g, sum_key);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0) rc = tsr_future_wait(f, 60000);
  if (rc == 0) rc = gather_f64(client, sum_key, total);
  for (int i = 0; i < LEAVES && rc == 0; i++) {
    tsr_chunk *chunk = NULL;
    rc = tsr_gather(client, keys[i], 30000, &chunk);
    if (rc == 0) leaves[i] = chunk->nbytes == N * 8.0 ? ((double *)chunk->data)[N - 1] : -1;
    tsr_chunk_destroy(&chunk);
  }
  if (rc != 0) fprintf(stderr, "  error %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  for (int i = 0; i < LEAVES; i++) free(keys[i]);
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  return rc;
}

TEST(mixed_transports_fetch_from_each_other)
{
  const char *ucx[] = {"--transport", "ucx", NULL}, *zmq[] = {"--transport", "zmq", NULL},
             *both[] = {"--transport", "auto", NULL};
  cluster c;
  memset(&c, 0, sizeof c);
  int rc = cluster_start_scheduler(&c, NULL);
  if (rc == 0 && (cluster_add_worker(&c, 2, ucx) < 0 || cluster_add_worker(&c, 2, zmq) < 0 ||
                  cluster_add_worker(&c, 2, both) < 0))
    rc = -1;
  tsr_client *client = NULL;
  if (rc == 0) rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_wait_for_workers(client, 3, 30000);
  tsr_client_close(client);
  double total = 0, leaves[LEAVES] = {0};
  if (rc == 0) rc = run_adds(&c, &total, leaves);
  bool served_ucx = log_has(&c, 0, "serving chunks on ucx://127.0.0.1:");
  bool served_zmq = log_has(&c, 1, "serving chunks on tcp://127.0.0.1:");
  bool served_both = log_has(&c, 2, "serving chunks on ucx://127.0.0.1:") && log_has(&c, 2, ",tcp://127.0.0.1:");
  /* the zmq worker reads what the UCX-only worker holds over UCX */
  bool crossed = log_has(&c, 1, "from ucx://") || log_has(&c, 2, "from ucx://");
  cluster_stop(&c, rc != 0 || !crossed);
  ASSERT_OK(rc);
  ASSERT_TRUE(served_ucx);
  ASSERT_TRUE(served_zmq);
  ASSERT_TRUE(served_both);
  ASSERT_TRUE(crossed);
  ASSERT_NEAR(total, 300.0 * N, 0);
  for (int i = 0; i < LEAVES; i++) ASSERT_NEAR(leaves[i], i + 1.0, 0);
}

int main(void)
{
  RUN(mixed_transports_fetch_from_each_other);
  return kit_summary();
}
