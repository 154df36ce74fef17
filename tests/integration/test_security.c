/* CURVE (docs/security.md) with real daemons: clients and workers without
 * keys, with a wrong scheduler key, or with a key not on the allow-list are
 * refused and the scheduler logs each refusal; SIGHUP reloads the
 * allow-list; a worker's data socket serves an introduced client and gives
 * nothing to a peer the scheduler did not introduce (logged by the worker). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* True once the file holds needle (waits up to 5 s: logs are written as
 * the daemon gets to it). */
static bool log_has(const char *dir, const char *file, const char *needle)
{
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  static char text[1 << 20];
  for (int i = 0; i < 100; i++) {
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f != NULL) fclose(f);
    text[n] = '\0';
    if (strstr(text, needle) != NULL) return true;
    sleep_ms(50);
  }
  return false;
}

/* How many times needle occurs in the file now. */
static int log_count(const char *dir, const char *file, const char *needle)
{
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  static char text[1 << 20];
  FILE *f = fopen(path, "r");
  size_t n = f != NULL ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f != NULL) fclose(f);
  text[n] = '\0';
  int count = 0;
  for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle)) count++;
  return count;
}

/* A handshake that fails before ZAP (no keys: a mechanism mismatch, or the
 * client hanging up first; a wrong server key) is logged with this text. */
#define HANDSHAKE_REFUSED "refused a connection without a valid CURVE handshake"

/* Opens a client with these key files (NULL, NULL: none, the environment
 * cleared for the call). Returns tsr_client_open's code; closes on success. */
static int try_client(const char *address, const char *secret, const char *server_key)
{
  char *env_secret = getenv("TESSERA_CURVE_SECRET") ? strdup(getenv("TESSERA_CURVE_SECRET")) : NULL;
  char *env_server = getenv("TESSERA_SCHEDULER_KEY") ? strdup(getenv("TESSERA_SCHEDULER_KEY")) : NULL;
  unsetenv("TESSERA_CURVE_SECRET");
  unsetenv("TESSERA_SCHEDULER_KEY");
  tsr_client_opts opts = TSR_CLIENT_OPTS_DEFAULT;
  opts.connect_timeout_ms = 1500;
  opts.curve_secret = secret;
  opts.scheduler_key = server_key;
  tsr_client *client = NULL;
  int rc = tsr_client_open(&client, address, &opts);
  tsr_client_close(client);
  if (env_secret) setenv("TESSERA_CURVE_SECRET", env_secret, 1);
  if (env_server) setenv("TESSERA_SCHEDULER_KEY", env_server, 1);
  free(env_secret);
  free(env_server);
  return rc;
}

static void path_of(char *out, size_t cap, const char *dir, const char *file)
{
  snprintf(out, cap, "%s/%s", dir, file);
}

TEST(clients_without_keys_with_a_wrong_key_or_an_unlisted_key_are_refused_and_logged)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, 1, NULL, NULL));
  char other_pub[512], stranger_key[512], late_key[512], late_pub[512], stranger[41], late[41], cmd[1400];
  bool ok = cluster_keygen(c.dir, "other", NULL) == 0 && cluster_keygen(c.dir, "stranger", stranger) == 0 &&
            cluster_keygen(c.dir, "late", late) == 0;
  path_of(other_pub, sizeof other_pub, c.dir, "other.pub");
  path_of(stranger_key, sizeof stranger_key, c.dir, "stranger.key");
  path_of(late_key, sizeof late_key, c.dir, "late.key");
  path_of(late_pub, sizeof late_pub, c.dir, "late.pub");
  int refusals = log_count(c.dir, "scheduler.log", HANDSHAKE_REFUSED);
  int plain = try_client(c.address, NULL, NULL);
  sleep_ms(200);
  bool plain_logged = log_count(c.dir, "scheduler.log", HANDSHAKE_REFUSED) > refusals;
  refusals = log_count(c.dir, "scheduler.log", HANDSHAKE_REFUSED);
  int wrong = try_client(c.address, c.client_secret, other_pub);
  bool wrong_logged = log_has(c.dir, "scheduler.log", "the peer used a wrong server key") &&
                      log_count(c.dir, "scheduler.log", HANDSHAKE_REFUSED) > refusals;
  int unlisted = try_client(c.address, stranger_key, c.sched_public);
  char needle[128];
  snprintf(needle, sizeof needle, "refused CURVE key %s", stranger);
  bool unlisted_logged = log_has(c.dir, "scheduler.log", needle);
  int allowed = try_client(c.address, c.client_secret, c.sched_public);
  /* Rotation: a key added to the allow-list directory counts after SIGHUP. */
  int before = try_client(c.address, late_key, c.sched_public);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", late_pub, c.allow_dir);
  ok = ok && system(cmd) == 0 && kill(c.scheduler, SIGHUP) == 0;
  bool reloaded = log_has(c.dir, "scheduler.log", "reloaded the allow-list");
  int after = try_client(c.address, late_key, c.sched_public);
  bool fail = !ok || plain == 0 || wrong == 0 || unlisted == 0 || allowed != 0 || before == 0 || after != 0;
  cluster_stop(&c, fail || !plain_logged || !wrong_logged || !unlisted_logged || !reloaded);
  ASSERT_TRUE(ok);
  ASSERT_NE(plain, 0);
  ASSERT_TRUE(plain_logged);
  ASSERT_NE(wrong, 0);
  ASSERT_TRUE(wrong_logged);
  ASSERT_NE(unlisted, 0);
  ASSERT_TRUE(unlisted_logged);
  ASSERT_OK(allowed);
  ASSERT_NE(before, 0);
  ASSERT_TRUE(reloaded);
  ASSERT_OK(after);
}

TEST(workers_without_keys_or_with_an_unlisted_key_are_refused_and_logged)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, 1, NULL, NULL));
  char stranger_key[512], stranger[41], needle[128];
  bool ok = cluster_keygen(c.dir, "stranger", stranger) == 0;
  path_of(stranger_key, sizeof stranger_key, c.dir, "stranger.key");
  /* The harness adds its keys only while c.curve is set. */
  c.curve = false;
  const char *unlisted_args[] = {"--curve-secret", stranger_key, "--scheduler-key", c.sched_public, NULL};
  ok = ok && cluster_add_worker(&c, 1, unlisted_args) == 1;
  char *secret = strdup(getenv("TESSERA_CURVE_SECRET")), *server = strdup(getenv("TESSERA_SCHEDULER_KEY"));
  unsetenv("TESSERA_CURVE_SECRET");   /* the plaintext worker would read them */
  unsetenv("TESSERA_SCHEDULER_KEY");
  ok = ok && cluster_add_worker(&c, 1, NULL) == 2;
  setenv("TESSERA_CURVE_SECRET", secret, 1);
  setenv("TESSERA_SCHEDULER_KEY", server, 1);
  free(secret);
  free(server);
  snprintf(needle, sizeof needle, "refused CURVE key %s", stranger);
  bool unlisted_logged = log_has(c.dir, "scheduler.log", needle);
  bool plain_logged = log_has(c.dir, "scheduler.log", HANDSHAKE_REFUSED);
  tsr_client *client = NULL;
  int rc = tsr_client_open(&client, c.address, NULL);
  int more = rc == 0 ? tsr_wait_for_workers(client, 2, 2000) : rc;
  tsr_client_close(client);
  cluster_stop(&c, rc != 0 || more == 0 || !unlisted_logged || !plain_logged);
  ASSERT_TRUE(ok);
  ASSERT_OK(rc);
  ASSERT_EQ(more, TSR_ETIMEDOUT);   /* only the harness's own worker got in */
  ASSERT_TRUE(unlisted_logged);
  ASSERT_TRUE(plain_logged);
}

/* Sends {op: get, key: "x"} on a DEALER to endpoint (CURVE with the given
 * keys when server_key is non-NULL); true when any reply came within 2 s. */
static bool raw_get_answered(const char *endpoint, const char *server_key, const char *pub, const char *secret)
{
  void *ctx = zmq_ctx_new();
  void *sock = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
  if (server_key != NULL) {
    zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_key, 40);
    zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 40);
    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret, 40);
  }
  static const unsigned char get_x[] = {0x82, 0xa2, 'o', 'p', 0xa3, 'g', 'e', 't', 0xa3, 'k', 'e', 'y', 0xa1, 'x'};
  zmq_connect(sock, endpoint);
  zmq_send(sock, get_x, sizeof get_x, 0);
  zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
  bool answered = zmq_poll(&item, 1, 2000) > 0;
  zmq_close(sock);
  zmq_ctx_term(ctx);
  return answered;
}

TEST(a_peer_not_introduced_gets_nothing_from_a_worker)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, 1, NULL, NULL));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  tsr_cluster_info *info = NULL;
  double value = 0;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = add_full(g, "full", 4, 7.0);
  const char *in = "full";
  if (rc == 0) rc = add_plain(g, "x", "sum", &in, 1);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0) rc = tsr_future_wait(f, 30000);
  if (rc == 0) rc = gather_f64(client, "x", &value);   /* introduced: served */
  if (rc == 0) rc = tsr_cluster_info_get(client, 5000, &info);
  char endpoint[256] = "", worker_key[41] = "", pub[41], secret[41], needle[128];
  const char *tag = rc == 0 && info->n_workers == 1 ? strstr(info->workers[0].address, "#curve=") : NULL;
  if (tag != NULL && strlen(tag) == 7 + 40) {
    snprintf(endpoint, sizeof endpoint, "%.*s", (int)(tag - info->workers[0].address), info->workers[0].address);
    memcpy(worker_key, tag + 7, 41);
  }
  zmq_curve_keypair(pub, secret);
  bool stranger_answered = endpoint[0] && raw_get_answered(endpoint, worker_key, pub, secret);
  snprintf(needle, sizeof needle, "data socket: refused CURVE key %s", pub);
  bool stranger_logged = log_has(c.dir, "worker-0.log", needle);
  bool plain_answered = endpoint[0] && raw_get_answered(endpoint, NULL, NULL, NULL);
  bool plain_logged = log_has(c.dir, "worker-0.log", "data socket: " HANDSHAKE_REFUSED);
  tsr_cluster_info_destroy(&info);
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  bool fail = rc != 0 || endpoint[0] == '\0' || stranger_answered || plain_answered;
  cluster_stop(&c, fail || !stranger_logged || !plain_logged);
  ASSERT_OK(rc);
  ASSERT_TRUE(value == 28.0);
  ASSERT_TRUE(endpoint[0] != '\0');   /* the advertised address carries the worker's key */
  ASSERT_TRUE(!stranger_answered);
  ASSERT_TRUE(stranger_logged);
  ASSERT_TRUE(!plain_answered);
  ASSERT_TRUE(plain_logged);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  setenv("TSR_TEST_CURVE", "1", 1);   /* every cluster of this test has keys */
  RUN(clients_without_keys_with_a_wrong_key_or_an_unlisted_key_are_refused_and_logged);
  RUN(workers_without_keys_or_with_an_unlisted_key_are_refused_and_logged);
  RUN(a_peer_not_introduced_gets_nothing_from_a_worker);
  return kit_summary();
}
