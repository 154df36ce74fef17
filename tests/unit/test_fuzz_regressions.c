/* Regression tests for what the fuzz targets (tests/fuzz, docs/fuzzing.md)
 * found, as plain unit tests that need no clang: each named after the
 * crash, with the crashing input kept in tests/fuzz/regressions/<target>/
 * and replayed here the way the target feeds it.
 *
 * peers_realloc_use_after_free (fuzz_sched, 2026-11-24): every peer's
 * outbound packer points at its own buffer inside st->peers; when the
 * 17th peer made the array grow, earlier peers' packers still pointed at
 * the freed block, so the next message to any of them was written into
 * freed memory (and lost).
 * (The worker's regressions are in test_fuzz_regressions_worker.c: the
 * scheduler's sched.h would shadow the system's for the worker headers.) */
#define _GNU_SOURCE  /* memmem */
#include <dirent.h>
#include <string.h>

#include "kit.h"
#include "sched_fixtures.h"

/* True when the peer's outbox holds a message of op. */
static bool outbox_has(sched_state *st, const char *name, const char *want_op)
{
  uint32_t p = sched_peer_find(st, name, strlen(name));
  tsr_reader rd;
  bool found = false;
  if (p != SCHED_NONE && tsr_reader_init(&rd, st->peers[p].out.sbuf.data, st->peers[p].out.sbuf.size, NULL) == 0) {
    const msgpack_object *map;
    char op[TSR_MAX_NAME_LEN + 1];
    while (tsr_reader_next(&rd, &map, op, NULL) == 1) found = found || strcmp(op, want_op) == 0;
  }
  if (p != SCHED_NONE) tsr_reader_done(&rd);
  return found;
}

TEST(peers_realloc_use_after_free)
{
  sched_state *st = new_state();
  add_client(st, "c0");
  uint32_t p0 = sched_peer_find(st, "c0", 2);
  st->peers[p0].out.sbuf.size = 0;  /* its welcome, as if flushed */
  for (int i = 1; i <= 100; i++) {  /* the array grows several times */
    char name[16];
    snprintf(name, sizeof name, "c%d", i);
    add_client(st, name);
  }
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "status", 2);
  tsr_pack_kv_uint(&wb.pk, "req", 1);
  feed(st, "c0", &wb);
  ASSERT_TRUE(outbox_has(st, "c0", "status_reply"));
  ASSERT_TRUE(outbox_has(st, "c100", "welcome"));
  sched_state_destroy(&st);
}

/* fuzz_sched's framing (tests/fuzz/fuzz_sched.c): frames split at
 * "\n~~\n", the first byte of each the sender, after a worker "w" and a
 * client "c" said hello. */
static void replay_sched(const uint8_t *data, size_t size)
{
  sched_state *st = new_state();
  add_worker(st, "w", 2, "random_uniform add sum matmul noop sleep fail");
  add_client(st, "c");
  const uint8_t *p = data, *end = data + size;
  while (p < end) {
    const uint8_t *next = memmem(p, (size_t)(end - p), "\n~~\n", 4);
    size_t len = next ? (size_t)(next - p) : (size_t)(end - p);
    if (len > 0) sched_handle_frame(st, p, 1, p + 1, len - 1, 1000);
    p += len + (next ? 4 : 0);
  }
  sched_check_timeouts(st, 61000);
  sched_state_destroy(&st);
}

TEST(sched_regression_inputs_replay)
{
  DIR *dir = opendir(TSR_FUZZ_REGRESSIONS "/sched");
  ASSERT_TRUE(dir != NULL);
  int n = 0;
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/sched/%s", TSR_FUZZ_REGRESSIONS, e->d_name);
    FILE *f = fopen(path, "rb");
    ASSERT_TRUE(f != NULL);
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    replay_sched(buf, len);
    n++;
  }
  closedir(dir);
  ASSERT_TRUE(n >= 1);
}

int main(void)
{
  tsr_log_set_level(TSR_LOG_OFF);
  RUN(peers_realloc_use_after_free);
  RUN(sched_regression_inputs_replay);
  return kit_summary();
}
