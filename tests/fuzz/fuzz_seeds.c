/* tests/fuzz/fuzz_seeds.c — writes the seed corpora of the wire, sched and
 * compute targets: valid frames of docs/protocol.md built with tsr_wbuf,
 * so the fuzzer starts from messages that reach every handler. Run as
 * docs/fuzzing.md says; its output is committed under corpus/.
 *
 *   fuzz_seeds DIR   writes DIR/wire/<name>, DIR/sched/<name>, DIR/compute/<name> */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "wire/wire.h"

#define SEP "\n~~\n"

static const char *out_dir;

static void put(const char *target, const char *name, const void *data, size_t len)
{
  char path[512];
  snprintf(path, sizeof path, "%s/%s", out_dir, target);
  if (mkdir(path, 0755) != 0 && errno != EEXIST) exit(1);
  snprintf(path, sizeof path, "%s/%s/%s", out_dir, target, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "fuzz_seeds: cannot write %s\n", path);
    exit(1);
  }
}

static void pack_strs(msgpack_packer *pk, const char *key, const char *const *s, int n)
{
  tsr_pack_str(pk, key);
  msgpack_pack_array(pk, (size_t)n);
  for (int i = 0; i < n; i++) tsr_pack_str(pk, s[i]);
}

static void pack_shape(msgpack_packer *pk, int64_t a, int64_t b)
{
  tsr_pack_str(pk, "shape");
  msgpack_pack_array(pk, 2);
  msgpack_pack_int64(pk, a);
  msgpack_pack_int64(pk, b);
}

/* One task map: key, op, params {seed, shape, dtype}, inputs. */
static void pack_task(msgpack_packer *pk, const char *key, const char *op, const char *const *inputs, int n)
{
  msgpack_pack_map(pk, 4);
  tsr_pack_kv_str(pk, "key", key);
  tsr_pack_kv_str(pk, "op", op);
  tsr_pack_str(pk, "params");
  msgpack_pack_map(pk, 3);
  tsr_pack_kv_int(pk, "seed", 7);
  pack_shape(pk, 4, 4);
  tsr_pack_kv_str(pk, "dtype", "f64");
  pack_strs(pk, "inputs", inputs, n);
}

static void submit(tsr_wbuf *wb, uint64_t graph)
{
  static const char *const none[1] = {NULL}, *const ab[] = {"a", "b"}, *const s[] = {"s"};
  tsr_wbuf_begin(wb, "submit", 4);
  tsr_pack_kv_uint(&wb->pk, "graph", graph);
  tsr_pack_str(&wb->pk, "tasks");
  msgpack_pack_array(&wb->pk, 4);
  pack_task(&wb->pk, "a", "random_uniform", none, 0);
  pack_task(&wb->pk, "b", "random_uniform", none, 0);
  pack_task(&wb->pk, "s", "add", ab, 2);
  pack_task(&wb->pk, "t", "sum", s, 1);
  static const char *const want[] = {"t"};
  pack_strs(&wb->pk, "wants", want, 1);
  tsr_pack_kv_bool(&wb->pk, "more", false);
}

static void task_done(tsr_wbuf *wb, uint64_t id, const char *key)
{
  tsr_wbuf_begin(wb, "task_done", 7);
  tsr_pack_kv_uint(&wb->pk, "id", id);
  tsr_pack_kv_str(&wb->pk, "key", key);
  tsr_pack_kv_uint(&wb->pk, "nbytes", 128);
  tsr_pack_kv_uint(&wb->pk, "dtype", TSR_F64);
  pack_shape(&wb->pk, 4, 4);
  tsr_pack_kv_uint(&wb->pk, "duration_us", 10);
}

static void heartbeat(tsr_wbuf *wb)
{
  tsr_wbuf_begin(wb, "heartbeat", 6);
  tsr_pack_kv_uint(&wb->pk, "memory_used", 1000);
  tsr_pack_kv_uint(&wb->pk, "tasks_running", 1);
  tsr_pack_kv_uint(&wb->pk, "tasks_done", 2);
  tsr_pack_kv_uint(&wb->pk, "chunks", 2);
  tsr_pack_kv_bool(&wb->pk, "paused", false);
}

static void chunk_header(tsr_wbuf *wb)
{
  tsr_chunk_header hdr = {.key = "x-0", .meta = {.dtype = TSR_F64, .ndim = 2, .shape = {4, 4}}, .nbytes = 128,
                          .codec = "raw"};
  tsr_chunk_header_pack(wb, &hdr);
}

static void compute(tsr_wbuf *wb)
{
  tsr_wbuf_begin(wb, "compute", 6);
  tsr_pack_kv_uint(&wb->pk, "id", 3);
  tsr_pack_kv_str(&wb->pk, "key", "s");
  tsr_pack_kv_str(&wb->pk, "task_op", "add");
  tsr_pack_str(&wb->pk, "params");
  msgpack_pack_map(&wb->pk, 4);
  tsr_pack_kv_int(&wb->pk, "seed", -3);
  tsr_pack_kv_float(&wb->pk, "factor", 0.5);
  tsr_pack_kv_bool(&wb->pk, "swap", true);
  pack_shape(&wb->pk, 2, 3);
  tsr_pack_str(&wb->pk, "inputs");
  msgpack_pack_array(&wb->pk, 1);
  msgpack_pack_map(&wb->pk, 3);
  tsr_pack_kv_str(&wb->pk, "key", "a");
  tsr_pack_kv_str(&wb->pk, "from", "tcp://127.0.0.1:5");
  tsr_pack_kv_uint(&wb->pk, "nbytes", 128);
  tsr_pack_kv_int(&wb->pk, "priority", -1);
}

static void put_wb(const char *target, const char *name, tsr_wbuf *wb)
{
  put(target, name, wb->sbuf.data, wb->sbuf.size);
  tsr_wbuf_reset(wb);
}

static void wire_seeds(tsr_wbuf *wb)
{
  submit(wb, 1);
  put_wb("wire", "submit", wb);
  task_done(wb, 0, "a");
  put_wb("wire", "task_done", wb);
  heartbeat(wb);
  put_wb("wire", "heartbeat", wb);
  chunk_header(wb);
  put_wb("wire", "chunk", wb);
  compute(wb);
  put_wb("wire", "compute", wb);
  static const char *const keys[] = {"a", "b"};
  tsr_wbuf_begin(wb, "free", 2);
  pack_strs(&wb->pk, "keys", keys, 2);
  heartbeat(wb);  /* a batch: two messages in one frame */
  put_wb("wire", "batch", wb);
}

/* A sched seed: frames "<sender><bytes>" joined by SEP. */
typedef struct seed {
  char buf[8192];
  size_t len;
} seed;

static void add_frame(seed *s, char who, tsr_wbuf *wb)
{
  if (s->len > 0) memcpy(s->buf + s->len, SEP, 4), s->len += 4;
  s->buf[s->len++] = who;
  memcpy(s->buf + s->len, wb->sbuf.data, wb->sbuf.size);
  s->len += wb->sbuf.size;
  tsr_wbuf_reset(wb);
}

static void sched_seeds(tsr_wbuf *wb)
{
  seed s = {.len = 0};
  submit(wb, 1);
  add_frame(&s, 'c', wb);
  put("sched", "submit", s.buf, s.len);
  for (uint64_t id = 0; id < 2; id++) {
    task_done(wb, id, id == 0 ? "a" : "b");
    add_frame(&s, 'w', wb);
  }
  heartbeat(wb);
  add_frame(&s, 'w', wb);
  put("sched", "submit_done", s.buf, s.len);
  tsr_wbuf_begin(wb, "task_erred", 4);
  tsr_pack_kv_uint(&wb->pk, "id", 2);
  tsr_pack_kv_str(&wb->pk, "key", "s");
  tsr_pack_kv_str(&wb->pk, "message", "boom");
  add_frame(&s, 'w', wb);
  static const char *const keys[] = {"t"};
  tsr_wbuf_begin(wb, "release", 2);
  pack_strs(&wb->pk, "keys", keys, 1);
  tsr_wbuf_begin(wb, "status", 2);
  tsr_pack_kv_uint(&wb->pk, "req", 9);
  add_frame(&s, 'c', wb);
  tsr_wbuf_begin(wb, "goodbye", 1);
  add_frame(&s, 'w', wb);
  put("sched", "erred_release", s.buf, s.len);
  s.len = 0;
  tsr_wbuf_begin(wb, "hello", 4);
  tsr_pack_kv_uint(&wb->pk, "proto", TSR_PROTOCOL_VERSION);
  tsr_pack_kv_str(&wb->pk, "role", "client");
  tsr_pack_kv_str(&wb->pk, "name", "other");
  add_frame(&s, 'x', wb);
  submit(wb, 5);
  add_frame(&s, 'x', wb);
  tsr_wbuf_begin(wb, "key_missing", 3);
  tsr_pack_kv_str(&wb->pk, "key", "t");
  tsr_pack_kv_str(&wb->pk, "from", "tcp://w:1");
  add_frame(&s, 'x', wb);
  put("sched", "second_client", s.buf, s.len);
}

/* A compute of a creation op (no inputs) with params packed by fill. */
static void put_compute(tsr_wbuf *wb, const char *name, const char *op, void (*fill)(msgpack_packer *pk))
{
  tsr_wbuf_begin(wb, "compute", 7);
  tsr_pack_kv_uint(&wb->pk, "id", 1);
  tsr_pack_kv_str(&wb->pk, "key", name);
  tsr_pack_kv_str(&wb->pk, "task_op", op);
  tsr_pack_str(&wb->pk, "params");
  fill(&wb->pk);
  tsr_pack_str(&wb->pk, "inputs");
  msgpack_pack_array(&wb->pk, 0);
  tsr_pack_kv_int(&wb->pk, "priority", 0);
  tsr_pack_kv_bool(&wb->pk, "recompute", true);
  put_wb("compute", name, wb);
}

static void p_uniform(msgpack_packer *pk)
{
  msgpack_pack_map(pk, 4);
  tsr_pack_kv_int(pk, "seed", 1);
  pack_shape(pk, 100, 50);
  tsr_pack_kv_str(pk, "dtype", "f32");
  tsr_pack_str(pk, "global_shape");
  msgpack_pack_array(pk, 2);
  msgpack_pack_int64(pk, 1000);
  msgpack_pack_int64(pk, 50);
}

static void p_randint(msgpack_packer *pk)
{
  msgpack_pack_map(pk, 5);
  tsr_pack_kv_int(pk, "seed", 3);
  pack_shape(pk, 8, 8);
  tsr_pack_kv_int(pk, "low", 0);
  tsr_pack_kv_int(pk, "high", 4);
  tsr_pack_kv_str(pk, "dtype", "u8");
}

static void p_full(msgpack_packer *pk)
{
  msgpack_pack_map(pk, 3);
  pack_shape(pk, 3, 3);
  tsr_pack_kv_str(pk, "dtype", "f64");
  tsr_pack_kv_float(pk, "value", 2.5);
}

static void p_bed(msgpack_packer *pk)
{
  msgpack_pack_map(pk, 7);
  tsr_pack_kv_str(pk, "path", "/nonexistent.bed");
  tsr_pack_kv_int(pk, "n_samples", 10);
  tsr_pack_kv_int(pk, "n_variants", 10);
  tsr_pack_kv_int(pk, "row0", 0);
  tsr_pack_kv_int(pk, "rows", 10);
  tsr_pack_kv_int(pk, "col0", 0);
  tsr_pack_kv_int(pk, "cols", 10);
}

static void p_counts(msgpack_packer *pk)
{
  msgpack_pack_map(pk, 6);
  tsr_pack_kv_int(pk, "seed", 5);
  tsr_pack_kv_int(pk, "rows", 100);
  tsr_pack_kv_int(pk, "row0", 0);
  tsr_pack_kv_int(pk, "types", 3);
  tsr_pack_kv_int(pk, "genes", 50);
  tsr_pack_kv_float(pk, "density", 0.1);
}

/* A fused task: full -> scale, the parts as the scheduler packs them. */
static void p_fused(msgpack_packer *pk)
{
  msgpack_pack_map(pk, 1);
  tsr_pack_str(pk, "parts");
  msgpack_pack_array(pk, 2);
  msgpack_pack_map(pk, 4);
  tsr_pack_kv_str(pk, "key", "f0");
  tsr_pack_kv_str(pk, "op", "full");
  tsr_pack_str(pk, "params");
  p_full(pk);
  tsr_pack_str(pk, "inputs");
  msgpack_pack_array(pk, 0);
  msgpack_pack_map(pk, 4);
  tsr_pack_kv_str(pk, "key", "fused");  /* the last part is the task itself */
  tsr_pack_kv_str(pk, "op", "scale");
  tsr_pack_str(pk, "params");
  msgpack_pack_map(pk, 1);
  tsr_pack_kv_float(pk, "factor", 2.0);
  tsr_pack_str(pk, "inputs");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint32(pk, 0);
}

static void compute_seeds(tsr_wbuf *wb)
{
  put_compute(wb, "random_uniform", "random_uniform", p_uniform);
  put_compute(wb, "randint", "randint", p_randint);
  put_compute(wb, "full", "full", p_full);
  put_compute(wb, "read_bed", "read_bed", p_bed);
  put_compute(wb, "counts_synth", "counts_synth", p_counts);
  put_compute(wb, "fused", "fused", p_fused);
  compute(wb);
  put_wb("compute", "add_with_input", wb);
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  out_dir = argv[1];
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  wire_seeds(&wb);
  sched_seeds(&wb);
  compute_seeds(&wb);
  tsr_wbuf_free(&wb);
  return 0;
}
