/* Unit tests of the limits on sizes from outside (common/util/limits.c,
 * scheduler/limits.c; docs/limits.md): parsing the settings, and each
 * scheduler limit refusing with a message that names it, before the
 * state grows, while other peers go on. Frames are fed through
 * sched_handle_frame, as the daemon does (tests/unit/sched_fixtures.h). */
#include "kit.h"
#include "sched_fixtures.h"
#include "util/limits.h"

/* The last message of op in the peer's outbound buffer: its "message"
 * field into text (or "" when none). True when one was found. */
static bool last_reply(sched_state *st, const char *name, const char *want_op, char *text, size_t cap)
{
  uint32_t p = sched_peer_find(st, name, strlen(name));
  text[0] = '\0';
  if (p == SCHED_NONE) return false;
  tsr_wbuf *out = &st->peers[p].out;
  tsr_reader rd;
  bool found = false;
  if (tsr_reader_init(&rd, out->sbuf.data, out->sbuf.size, NULL) == 0) {
    const msgpack_object *map;
    char op[TSR_MAX_NAME_LEN + 1];
    while (tsr_reader_next(&rd, &map, op, NULL) == 1) {
      if (strcmp(op, want_op) != 0) continue;
      found = true;
      const char *s = "";
      size_t len = 0;
      tsr_wire_str(map, "message", TSR_MAX_TEXT_LEN, &s, &len, NULL);
      snprintf(text, cap, "%.*s", (int)len, s);
    }
  }
  tsr_reader_done(&rd);
  return found;
}

/* A submit of n independent tasks "<prefix><i>" (op x), one with a key
 * of key_len bytes and params of params_len bytes when those are > 0. */
static void submit(sched_state *st, const char *client, uint64_t graph, int n, const char *prefix, size_t key_len,
                   size_t params_len)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "submit", 3);
  tsr_pack_kv_uint(&wb.pk, "graph", graph);
  tsr_pack_str(&wb.pk, "tasks");
  msgpack_pack_array(&wb.pk, (size_t)n);
  char *big = calloc(1, (key_len > params_len ? key_len : params_len) + 1);
  for (int i = 0; i < n; i++) {
    char key[64];
    snprintf(key, sizeof key, "%s%d", prefix, i);
    msgpack_pack_map(&wb.pk, i == 0 && params_len ? 3 : 2);
    if (i == 0 && key_len) {
      memset(big, 'k', key_len);
      big[key_len] = '\0';
      tsr_pack_kv_str(&wb.pk, "key", big);
    } else {
      tsr_pack_kv_str(&wb.pk, "key", key);
    }
    tsr_pack_kv_str(&wb.pk, "op", "x");
    if (i == 0 && params_len) {
      memset(big, 'p', params_len);
      big[params_len] = '\0';
      tsr_pack_str(&wb.pk, "params");
      msgpack_pack_map(&wb.pk, 1);
      tsr_pack_kv_str(&wb.pk, "text", big);
    }
  }
  free(big);
  feed(st, client, &wb);
}

/* One part (`more`: true) of graph, of n tasks "<prefix><i>". */
static void submit_part(sched_state *st, const char *client, uint64_t graph, int n, const char *prefix)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "submit", 4);
  tsr_pack_kv_uint(&wb.pk, "graph", graph);
  tsr_pack_kv_bool(&wb.pk, "more", true);
  tsr_pack_str(&wb.pk, "tasks");
  msgpack_pack_array(&wb.pk, (size_t)n);
  for (int i = 0; i < n; i++) {
    char key[64];
    snprintf(key, sizeof key, "%s%d", prefix, i);
    msgpack_pack_map(&wb.pk, 2);
    tsr_pack_kv_str(&wb.pk, "key", key);
    tsr_pack_kv_str(&wb.pk, "op", "x");
  }
  feed(st, client, &wb);
}

static sched_state *limited(tsr_limits limits)
{
  sched_config cfg = {.recompute = SCHED_RECOMPUTE_AUTO, .limits = limits};
  return new_state_with(cfg);
}

TEST(settings_parse_and_name_themselves)
{
  tsr_limits l = TSR_LIMITS_DEFAULT;
  tsr_errbuf err;
  ASSERT_OK(tsr_limits_set(&l, "max-message-bytes", "64MiB", &err));
  ASSERT_EQ(l.message_bytes, 64ull << 20);
  ASSERT_OK(tsr_limits_set(&l, "max-client-tasks", "1000", &err));
  ASSERT_EQ(l.client_tasks, 1000);
  ASSERT_EQ(tsr_limits_set(&l, "max-workers", "lots", &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "max-workers");
  ASSERT_CONTAINS(err.text, "lots");
  ASSERT_EQ(tsr_limits_set(&l, "max-workers", "0", &err), TSR_EINVAL);
  ASSERT_EQ(tsr_limits_set(&l, "max-key-bytes", "2KiB", &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "ceiling 1024");
  ASSERT_TRUE(tsr_limits_has("max-graph-tasks"));
  ASSERT_TRUE(!tsr_limits_has("max-nothing"));
  ASSERT_EQ(tsr_limit_fail(&err, "max-graph-tasks", "tasks in graph 3", 10, 5), TSR_ELIMIT);
  ASSERT_STREQ(err.text, "tasks in graph 3: 10, over the limit of 5 (--max-graph-tasks, TESSERA_MAX_GRAPH_TASKS)");
}

TEST(graph_tasks_key_and_params_are_refused_naming_the_limit)
{
  sched_state *st = limited((tsr_limits){.graph_tasks = 10, .key_bytes = 32, .params_bytes = 100});
  add_client(st, "c");
  char text[TSR_MAX_TEXT_LEN];
  submit(st, "c", 1, 11, "a", 0, 0);
  ASSERT_TRUE(last_reply(st, "c", "submit_error", text, sizeof text));
  ASSERT_CONTAINS(text, "tasks in graph 1: 11, over the limit of 10 (--max-graph-tasks");
  ASSERT_EQ(st->nlive, 0);
  submit(st, "c", 2, 3, "b", 33, 0);
  ASSERT_TRUE(last_reply(st, "c", "submit_error", text, sizeof text));
  ASSERT_CONTAINS(text, "key bytes: 33, over the limit of 32 (--max-key-bytes, TESSERA_MAX_KEY_BYTES)");
  submit(st, "c", 3, 3, "c", 0, 200);
  ASSERT_TRUE(last_reply(st, "c", "submit_error", text, sizeof text));
  ASSERT_CONTAINS(text, "over the limit of 100 (--max-params-bytes");
  ASSERT_EQ(st->nlive, 0);
  /* at the limits: admitted */
  submit(st, "c", 4, 10, "d", 32, 90);
  ASSERT_TRUE(last_reply(st, "c", "submitted", text, sizeof text));
  ASSERT_EQ(st->nlive, 10);
  sched_state_destroy(&st);
}

TEST(a_flooding_client_is_refused_and_others_are_not)
{
  sched_state *st = limited((tsr_limits){.client_tasks = 20});
  add_worker(st, "w", 1, "x");
  add_client(st, "flood");
  add_client(st, "other");
  char text[TSR_MAX_TEXT_LEN];
  submit(st, "flood", 1, 15, "f1-", 0, 0);
  ASSERT_TRUE(!last_reply(st, "flood", "submit_error", text, sizeof text));
  submit(st, "flood", 2, 15, "f2-", 0, 0);  /* 15 unfinished + 15 > 20 */
  ASSERT_TRUE(last_reply(st, "flood", "submit_error", text, sizeof text));
  ASSERT_CONTAINS(text, "(15 before it): 30, over the limit of 20 (--max-client-tasks");
  ASSERT_EQ(st->nlive, 15);
  /* another client's graph is its own count */
  submit(st, "other", 1, 15, "o-", 0, 0);
  ASSERT_TRUE(!last_reply(st, "other", "submit_error", text, sizeof text));
  ASSERT_EQ(st->nlive, 30);
  /* once the flooder's tasks finish, it may submit again */
  for (int round = 0, left = 15; left > 0; round++) {
    ASSERT_TRUE(round < 100);
    sched_place_pass(st);  /* the loop's placement, each iteration */
    left = 0;
    for (int i = 0; i < 30; i++) {  /* the worker runs both clients' tasks */
      char key[16];
      snprintf(key, sizeof key, "%s%d", i < 15 ? "f1-" : "o-", i % 15);
      int state = state_of(st, key);
      if (state == TS_PROCESSING) done(st, key, 8);
      left += i < 15 && state >= TS_NEW && state <= TS_PROCESSING;
    }
  }
  st->peers[sched_peer_find(st, "flood", 5)].out.sbuf.size = 0;  /* forget earlier replies */
  submit(st, "flood", 3, 15, "f3-", 0, 0);
  ASSERT_TRUE(!last_reply(st, "flood", "submit_error", text, sizeof text));
  ASSERT_TRUE(last_reply(st, "flood", "submitted", text, sizeof text));
  sched_state_destroy(&st);
}

TEST(parts_kept_over_all_pending_graphs_are_bounded)
{
  sched_state *st = limited((tsr_limits){.pending_bytes = 1000});
  add_client(st, "c");
  char text[TSR_MAX_TEXT_LEN];
  /* 10 tasks a part: about 200 bytes; graphs never finished */
  for (int g = 1; g <= 4; g++) submit_part(st, "c", (uint64_t)g, 10, "p");
  ASSERT_TRUE(!last_reply(st, "c", "submit_error", text, sizeof text));
  sched_client *c = &st->clients[peer_index(st, "c")];
  ASSERT_EQ(c->npending, 4);
  for (int g = 5; g <= 8; g++) submit_part(st, "c", (uint64_t)g, 10, "p");
  ASSERT_TRUE(last_reply(st, "c", "submit_error", text, sizeof text));
  ASSERT_CONTAINS(text, "bytes of graph parts kept for this client");
  ASSERT_CONTAINS(text, "over the limit of 1000 (--max-pending-bytes, TESSERA_MAX_PENDING_BYTES)");
  ASSERT_TRUE(c->npending >= 4 && c->npending < 8);  /* some of the last four refused */
  size_t kept = 0;
  for (uint32_t i = 0; i < c->npending; i++) kept += c->pending[i].bytes;
  ASSERT_TRUE(kept <= 1000);
  sched_state_destroy(&st);
}

TEST(workers_and_clients_over_the_limit_are_refused_at_hello)
{
  sched_state *st = limited((tsr_limits){.workers = 2, .clients = 1});
  char text[TSR_MAX_TEXT_LEN];
  /* (a refused peer stays known, without a role: the fixtures' index
   * is then meaningless, so the counts and replies are checked) */
  add_worker(st, "w0", 1, "x");
  add_worker(st, "w1", 1, "x");
  ASSERT_EQ(st->nworkers_alive, 2);
  add_worker(st, "w2", 1, "x");
  ASSERT_EQ(st->nworkers_alive, 2);
  ASSERT_TRUE(!last_reply(st, "w2", "welcome", text, sizeof text));
  ASSERT_TRUE(last_reply(st, "w2", "error", text, sizeof text));
  ASSERT_STREQ(text, "workers connected: 3, over the limit of 2 (--max-workers, TESSERA_MAX_WORKERS)");
  /* a worker saying hello again keeps its place */
  add_worker(st, "w1", 1, "x");
  ASSERT_EQ(st->nworkers_alive, 2);
  ASSERT_TRUE(!last_reply(st, "w1", "error", text, sizeof text));
  add_client(st, "c0");
  add_client(st, "c1");
  ASSERT_TRUE(last_reply(st, "c0", "welcome", text, sizeof text));
  ASSERT_TRUE(!last_reply(st, "c1", "welcome", text, sizeof text));
  ASSERT_TRUE(last_reply(st, "c1", "error", text, sizeof text));
  ASSERT_CONTAINS(text, "(--max-clients, TESSERA_MAX_CLIENTS)");
  ASSERT_EQ(st->nworkers_alive, 2);
  ASSERT_EQ(st->nclients_alive, 1);
  sched_state_destroy(&st);
}

TEST(a_frame_over_the_message_limit_is_refused_unread)
{
  sched_state *st = limited((tsr_limits){.message_bytes = 200});
  add_client(st, "c");
  char text[TSR_MAX_TEXT_LEN];
  submit(st, "c", 1, 20, "a", 0, 0);  /* 20 tasks: over 200 bytes */
  ASSERT_TRUE(last_reply(st, "c", "error", text, sizeof text));
  ASSERT_CONTAINS(text, "over the limit of 200 (--max-message-bytes, TESSERA_MAX_MESSAGE_BYTES)");
  ASSERT_EQ(st->nlive, 0);
  submit(st, "c", 2, 2, "b", 0, 0);
  ASSERT_TRUE(last_reply(st, "c", "submitted", text, sizeof text));
  sched_state_destroy(&st);
}

int main(void)
{
  tsr_log_set_level(TSR_LOG_OFF);
  RUN(settings_parse_and_name_themselves);
  RUN(graph_tasks_key_and_params_are_refused_naming_the_limit);
  RUN(a_flooding_client_is_refused_and_others_are_not);
  RUN(parts_kept_over_all_pending_graphs_are_bounded);
  RUN(workers_and_clients_over_the_limit_are_refused_at_hello);
  RUN(a_frame_over_the_message_limit_is_refused_unread);
  return kit_summary();
}
