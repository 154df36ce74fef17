/* Unit tests of libtessera that need no server: tsr_args encoding, graph
 * building errors, connection failures and the error-text contract.
 * Links the shared library, so it also checks that the public API is
 * exported (and uses msgpack-c only to decode what tsr_args produced). */
#include <arpa/inet.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kit.h"
#include "tessera/tessera.h"

static const msgpack_object *map_get(const msgpack_object *map, const char *key)
{
  for (uint32_t i = 0; i < map->via.map.size; i++) {
    const msgpack_object *k = &map->via.map.ptr[i].key;
    if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(key) &&
        memcmp(k->via.str.ptr, key, k->via.str.size) == 0)
      return &map->via.map.ptr[i].val;
  }
  return NULL;
}

TEST(args_round_trip)
{
  tsr_args *a = NULL;
  ASSERT_OK(tsr_args_new(&a));
  int64_t shape[2] = {3, -4};
  double fs[3] = {0.5, -1.25, 1e300};
  ASSERT_OK(tsr_args_int(a, "seed", -42));
  ASSERT_OK(tsr_args_float(a, "factor", 2.5));
  ASSERT_OK(tsr_args_bool(a, "trans_a", true));
  ASSERT_OK(tsr_args_str(a, "dtype", "f64"));
  ASSERT_OK(tsr_args_ints(a, "shape", shape, 2));
  ASSERT_OK(tsr_args_floats(a, "w", fs, 3));
  ASSERT_OK(tsr_args_ints(a, "empty", NULL, 0));
  ASSERT_EQ(tsr_args_int(a, "seed", 1), TSR_EEXIST);
  ASSERT_CONTAINS(tsr_errmsg(), "seed");
  ASSERT_EQ(tsr_args_int(a, "", 1), TSR_EINVAL);
  ASSERT_EQ(tsr_args_str(a, "s", NULL), TSR_EINVAL);
  size_t len = 0;
  const void *data = tsr_args_data(a, &len);
  ASSERT_TRUE(data != NULL && len > 0);

  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  ASSERT_EQ(msgpack_unpack_next(&u, data, len, &off), MSGPACK_UNPACK_SUCCESS);
  ASSERT_EQ(off, len);
  const msgpack_object *m = &u.data;
  ASSERT_EQ(m->type, MSGPACK_OBJECT_MAP);
  ASSERT_EQ(m->via.map.size, 7);
  ASSERT_EQ(map_get(m, "seed")->via.i64, -42);
  ASSERT_NEAR(map_get(m, "factor")->via.f64, 2.5, 0);
  ASSERT_EQ(map_get(m, "trans_a")->type, MSGPACK_OBJECT_BOOLEAN);
  ASSERT_TRUE(map_get(m, "trans_a")->via.boolean);
  ASSERT_EQ(map_get(m, "dtype")->via.str.size, 3);
  ASSERT_TRUE(memcmp(map_get(m, "dtype")->via.str.ptr, "f64", 3) == 0);
  const msgpack_object *s = map_get(m, "shape");
  ASSERT_EQ(s->via.array.size, 2);
  ASSERT_EQ(s->via.array.ptr[0].via.u64, 3);
  ASSERT_EQ(s->via.array.ptr[1].via.i64, -4);
  const msgpack_object *w = map_get(m, "w");
  ASSERT_EQ(w->via.array.size, 3);
  ASSERT_NEAR(w->via.array.ptr[2].via.f64, 1e300, 0);
  ASSERT_EQ(map_get(m, "empty")->via.array.size, 0);
  msgpack_unpacked_destroy(&u);

  /* The cached encoding follows later changes. */
  ASSERT_OK(tsr_args_int(a, "later", 7));
  size_t len2 = 0;
  tsr_args_data(a, &len2);
  ASSERT_TRUE(len2 > len);
  tsr_args_destroy(&a);
  ASSERT_TRUE(a == NULL);
  tsr_args_destroy(&a);   /* NULL is fine */
}

TEST(empty_args_is_an_empty_map)
{
  tsr_args *a = NULL;
  ASSERT_OK(tsr_args_new(&a));
  size_t len = 0;
  const unsigned char *data = tsr_args_data(a, &len);
  ASSERT_EQ(len, 1);
  ASSERT_EQ(data[0], 0x80);
  tsr_args_destroy(&a);
}

TEST(graph_building_errors)
{
  tsr_graph *g = NULL;
  ASSERT_OK(tsr_graph_new(&g));
  tsr_args *a = NULL;
  ASSERT_OK(tsr_args_new(&a));
  ASSERT_OK(tsr_args_int(a, "seed", 1));
  ASSERT_OK(tsr_graph_add_args(g, "x", "random_uniform", a, NULL, 0));
  const char *in[] = {"x"};
  ASSERT_OK(tsr_graph_add(g, "s", "sum", NULL, 0, in, 1));
  ASSERT_EQ(tsr_graph_add(g, "x", "noop", NULL, 0, NULL, 0), TSR_EEXIST);
  ASSERT_CONTAINS(tsr_errmsg(), "'x'");
  ASSERT_EQ(tsr_graph_add(g, "", "noop", NULL, 0, NULL, 0), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "empty key");
  ASSERT_EQ(tsr_graph_add(g, NULL, "noop", NULL, 0, NULL, 0), TSR_EINVAL);
  ASSERT_EQ(tsr_graph_add(g, "y", "", NULL, 0, NULL, 0), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "empty op");
  /* params must be one msgpack map */
  unsigned char not_map[] = {0x93, 1, 2, 3};            /* [1, 2, 3] */
  unsigned char two_maps[] = {0x80, 0x80};
  unsigned char truncated[] = {0x81, 0xa1, 'a'};         /* {"a": <missing>} */
  ASSERT_EQ(tsr_graph_add(g, "y", "noop", not_map, sizeof not_map, NULL, 0), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "one msgpack map");
  ASSERT_EQ(tsr_graph_add(g, "y", "noop", two_maps, sizeof two_maps, NULL, 0), TSR_EINVAL);
  ASSERT_EQ(tsr_graph_add(g, "y", "noop", truncated, sizeof truncated, NULL, 0), TSR_EINVAL);
  ASSERT_EQ(tsr_graph_add(g, "y", "noop", NULL, 5, NULL, 0), TSR_EINVAL);
  const char *bad_in[] = {""};
  ASSERT_EQ(tsr_graph_add(g, "y", "noop", NULL, 0, bad_in, 1), TSR_EINVAL);
  ASSERT_EQ(tsr_graph_add(g, "y", "noop", NULL, 0, NULL, 2), TSR_EINVAL);
  char *long_key = malloc(2000);
  memset(long_key, 'k', 1999);
  long_key[1999] = '\0';
  ASSERT_EQ(tsr_graph_add(g, long_key, "noop", NULL, 0, NULL, 0), TSR_EINVAL);
  free(long_key);
  /* Failed adds left the graph as it was. */
  ASSERT_EQ(tsr_graph_size(g), 2);
  ASSERT_OK(tsr_graph_add(g, "y", "noop", (unsigned char[]){0x80}, 1, NULL, 0));
  ASSERT_EQ(tsr_graph_size(g), 3);
  ASSERT_OK(tsr_graph_want(g, "s"));
  ASSERT_OK(tsr_graph_want(g, "s"));
  ASSERT_EQ(tsr_graph_want(g, ""), TSR_EINVAL);
  tsr_args_destroy(&a);
  tsr_graph_destroy(&g);
  ASSERT_TRUE(g == NULL);
  tsr_graph_destroy(&g);
}

/* A TCP port that nothing listens on (bound, read, closed). */
static int dead_port(void)
{
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  bind(fd, (struct sockaddr *)&a, sizeof a);
  getsockname(fd, (struct sockaddr *)&a, &len);
  close(fd);
  return ntohs(a.sin_port);
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

TEST(open_without_scheduler_times_out)
{
  char addr[64];
  snprintf(addr, sizeof addr, "tcp://127.0.0.1:%d", dead_port());
  tsr_client_opts opts = TSR_CLIENT_OPTS_DEFAULT;
  opts.connect_timeout_ms = 500;
  tsr_client *c = (tsr_client *)0x1;   /* must stay untouched on failure */
  double t0 = now_s();
  int rc = tsr_client_open(&c, addr, &opts);
  double took = now_s() - t0;
  ASSERT_TRUE(rc == TSR_ETIMEDOUT || rc == TSR_ECONN);
  ASSERT_TRUE(c == (tsr_client *)0x1);
  ASSERT_TRUE(took < 3.0);
  ASSERT_CONTAINS(tsr_errmsg(), addr);
}

TEST(open_needs_an_address)
{
  unsetenv("TESSERA_SCHEDULER");
  tsr_client *c = NULL;
  ASSERT_EQ(tsr_client_open(&c, NULL, NULL), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "TESSERA_SCHEDULER");
  ASSERT_TRUE(c == NULL);
  ASSERT_EQ(tsr_client_open(&c, "not an endpoint", NULL), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "not an endpoint");
  ASSERT_EQ(tsr_client_open(NULL, "tcp://127.0.0.1:1", NULL), TSR_EINVAL);
}

TEST(open_with_bad_heartbeat_env)
{
  setenv("TESSERA_HEARTBEAT_TIMEOUT", "soon", 1);
  tsr_client *c = NULL;
  ASSERT_EQ(tsr_client_open(&c, "tcp://127.0.0.1:1", NULL), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "TESSERA_HEARTBEAT_TIMEOUT");
  unsetenv("TESSERA_HEARTBEAT_TIMEOUT");
}

TEST(null_handles_are_harmless)
{
  tsr_client_close(NULL);
  tsr_future_release(NULL);
  tsr_future *f = NULL;
  tsr_future_release(&f);
  tsr_chunk_destroy(NULL);
  tsr_cluster_info_destroy(NULL);
  ASSERT_EQ(tsr_graph_size(NULL), 0);
  ASSERT_EQ(tsr_future_count(NULL), 0);
  ASSERT_STREQ(tsr_strerror(TSR_ETASK), "a task failed (see the future's error message)");
  ASSERT_STREQ(tsr_err_name(TSR_ECONN), "TSR_ECONN");
  ASSERT_EQ(tsr_dtype_size(TSR_F64), 8);
  ASSERT_EQ(tsr_dtype_parse("float32"), TSR_F32);
}

int main(void)
{
  RUN(args_round_trip);
  RUN(empty_args_is_an_empty_map);
  RUN(graph_building_errors);
  RUN(open_without_scheduler_times_out);
  RUN(open_needs_an_address);
  RUN(open_with_bad_heartbeat_env);
  RUN(null_handles_are_harmless);
  return kit_summary();
}
