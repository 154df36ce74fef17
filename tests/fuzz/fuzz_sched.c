/* tests/fuzz/fuzz_sched.c — libFuzzer target: the scheduler's inbound
 * decoders (scheduler/handlers.c, peers.c, submit_decode.c) fed the way
 * the daemon feeds them: sched_handle_frame() with a peer identity and
 * the frame's bytes, on a fresh state per input (no sockets; replies pile
 * up in the peers' output buffers and are freed with the state).
 *
 * Input: frames separated by the 4 bytes "\n~~\n". A frame's first byte
 * picks the sender: 'w' a registered CPU worker, 'c' a registered client,
 * anything else a peer that has not said hello yet (its identity is that
 * byte). The rest of the frame is what that peer sent. Before the input a
 * worker "w" and a client "c" say hello, so submits, task_done and the
 * like reach the code behind the hello check. After each input the state
 * is checked for timeouts (a drop of every peer: the departure paths). */
#include <stdint.h>
#include <string.h>

#include "sched.h"

#define SEP "\n~~\n"
#define SEP_LEN 4
#define NOW_MS 1000

static void hello(sched_state *st, const char *name, const char *role)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  bool worker = strcmp(role, "worker") == 0;
  tsr_wbuf_begin(&wb, "hello", worker ? 7 : 4);
  tsr_pack_kv_uint(&wb.pk, "proto", TSR_PROTOCOL_VERSION);
  tsr_pack_kv_str(&wb.pk, "role", role);
  tsr_pack_kv_str(&wb.pk, "name", name);
  if (worker) {
    static const char *const ops[] = {"random_uniform", "add", "sum", "matmul", "noop", "sleep", "fail"};
    tsr_pack_kv_uint(&wb.pk, "threads", 2);
    tsr_pack_kv_str(&wb.pk, "data_address", "tcp://w:1");
    tsr_pack_str(&wb.pk, "ops");
    msgpack_pack_array(&wb.pk, 7);
    for (int i = 0; i < 7; i++) tsr_pack_str(&wb.pk, ops[i]);
  }
  sched_handle_frame(st, name, 1, wb.sbuf.data, wb.sbuf.size, NOW_MS);
  tsr_wbuf_free(&wb);
}

static void feed_one(sched_state *st, const uint8_t *frame, size_t len)
{
  if (len == 0) return;
  char who = (char)frame[0];
  sched_handle_frame(st, &who, 1, frame + 1, len - 1, NOW_MS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  sched_config cfg = {.heartbeat_ms = 1000, .timeout_ms = 10000, .recompute = SCHED_RECOMPUTE_AUTO,
                      .fuse_width = (size > 0 && data[0] == 'f') ? 4 : 1};
  sched_state *st = sched_state_new(&cfg);
  if (st == NULL) return 0;
  hello(st, "w", "worker");
  hello(st, "c", "client");
  const uint8_t *p = data, *end = data + size;
  while (p < end) {
    const uint8_t *next = memmem(p, (size_t)(end - p), SEP, SEP_LEN);
    size_t len = next ? (size_t)(next - p) : (size_t)(end - p);
    feed_one(st, p, len);
    p += len + (next ? SEP_LEN : 0);
  }
  sched_check_timeouts(st, NOW_MS + 60000);
  sched_state_destroy(&st);
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  tsr_log_set_level(TSR_LOG_OFF);
  return 0;
}
