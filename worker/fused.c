/* Fused tasks: decoding their parts and running them (fused.h). */
#include "fused.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_int.h"

/* ---------- decoding ---------- */

static char *dup_n(const char *s, size_t len)
{
  char *out = malloc(len + 1);
  if (out == NULL) return NULL;
  memcpy(out, s, len);
  out[len] = '\0';
  return out;
}

static int decode_refs(const msgpack_object *part, size_t j, size_t nvalues, tsr_wpart *p, tsr_errbuf *err)
{
  const msgpack_object *items;
  size_t n;
  tsr_errbuf why;
  if (tsr_wire_opt_array(part, "inputs", TSR_MAX_INPUTS, &items, &n, &why) != 0)
    return tsr_fail(err, TSR_EPROTO, "params.parts[%zu]: %s", j, why.text);
  p->refs = calloc(n ? n : 1, sizeof *p->refs);
  if (p->refs == NULL) return TSR_ENOMEM;
  p->n_refs = n;
  for (size_t i = 0; i < n; i++) {
    uint64_t ref;
    if (tsr_obj_uint(&items[i], &ref, NULL) != 0 || ref >= nvalues)
      return tsr_fail(err, TSR_EPROTO,
                      "field 'params.parts[%zu].inputs[%zu]' must be the number of an input or an earlier part (below %zu)",
                      j, i, nvalues);
    p->refs[i] = (uint32_t)ref;
  }
  return 0;
}

static int decode_part(const msgpack_object *part, size_t j, tsr_wtask *task, tsr_errbuf *err)
{
  tsr_wpart *p = &task->parts[j];
  const char *key, *op;
  size_t key_len, op_len;
  tsr_errbuf why;
  if (part->type != MSGPACK_OBJECT_MAP) return tsr_fail(err, TSR_EPROTO, "field 'params.parts[%zu]' must be a map", j);
  if (tsr_wire_str(part, "key", TSR_MAX_KEY_LEN, &key, &key_len, &why) != 0 || key_len == 0)
    return tsr_fail(err, TSR_EPROTO, "field 'params.parts[%zu].key' must be a non-empty key string", j);
  if (tsr_wire_str(part, "op", TSR_MAX_NAME_LEN, &op, &op_len, &why) != 0 || op_len == 0)
    return tsr_fail(err, TSR_EPROTO, "field 'params.parts[%zu].op' must be a non-empty op name", j);
  if ((p->key = dup_n(key, key_len)) == NULL || (p->op_name = dup_n(op, op_len)) == NULL) return TSR_ENOMEM;
  if (strcmp(p->op_name, "fused") == 0)
    return tsr_fail(err, TSR_EPROTO, "field 'params.parts[%zu].op': a part cannot be fused itself", j);
  p->op = tsr_op_find(p->op_name);
  if (tsr_wire_params(tsr_wire_field(part, "params"), &p->params, &why) != 0)
    return tsr_fail(err, TSR_EPROTO, "field 'params.parts[%zu].params': %s", j, why.text);
  return decode_refs(part, j, task->n_inputs + j, p, err);
}

/* Where each part's output is read last, so intermediates go early. */
static void set_last_uses(tsr_wtask *task)
{
  for (size_t j = 0; j < task->n_parts; j++) task->parts[j].last_use = task->n_parts;
  for (size_t j = 0; j < task->n_parts; j++)
    for (size_t i = 0; i < task->parts[j].n_refs; i++) {
      uint32_t r = task->parts[j].refs[i];
      if (r >= task->n_inputs) task->parts[r - task->n_inputs].last_use = j;
    }
}

int tsr_wfused_decode(const msgpack_object *params, tsr_wtask *task, tsr_errbuf *err)
{
  const msgpack_object *parts;
  size_t n;
  tsr_errbuf why;
  if (params == NULL || params->type != MSGPACK_OBJECT_MAP)
    return tsr_fail(err, TSR_EPROTO, "field 'params' of a fused task must be a map with 'parts'");
  if (tsr_wire_array(params, "parts", TSR_MAX_BATCH_TASKS, &parts, &n, &why) != 0)
    return tsr_fail(err, TSR_EPROTO, "field 'params.parts': %s", why.text);
  if (n == 0) return tsr_fail(err, TSR_EPROTO, "field 'params.parts' must not be empty");
  task->parts = calloc(n, sizeof *task->parts);
  if (task->parts == NULL) return TSR_ENOMEM;
  task->n_parts = n;
  for (size_t j = 0; j < n; j++) {
    int rc = decode_part(&parts[j], j, task, err);
    if (rc != 0) return rc;
  }
  if (strcmp(task->parts[n - 1].key, task->key) != 0)
    return tsr_fail(err, TSR_EPROTO, "field 'params.parts[%zu].key': the last part must be the task's key '%s'", n - 1,
                    task->key);
  set_last_uses(task);
  return 0;
}

void tsr_wfused_free(tsr_wtask *task)
{
  for (size_t j = 0; task->parts != NULL && j < task->n_parts; j++) {
    tsr_wpart *p = &task->parts[j];
    free(p->key);
    free(p->op_name);
    free(p->refs);
    tsr_params_clear(&p->params);
  }
  free(task->parts);
  task->parts = NULL;
  task->n_parts = 0;
}

/* ---------- running ---------- */

/* Runs part p on args as a task of its own whose output comes back in
 * *out_p instead of going into the store. 0, or TSR_ETASK with the fused
 * task marked erred. */
static int run_part(tsr_wtask *task, const tsr_wpart *p, tsr_chunk **args, tsr_wstore *store, tsr_wgpu_slot *slot,
                    tsr_chunk **out_p)
{
  tsr_wtask sub;
  memset(&sub, 0, sizeof sub);
  atomic_init(&sub.cancelled, false);
  sub.id = task->id;
  sub.key = p->key;
  sub.op_name = p->op_name;
  sub.op = p->op;
  sub.params = p->params;  /* borrowed: sub is never freed */
  sub.n_inputs = p->n_refs;
  sub.epoch = task->epoch;
  sub.keep_p = out_p;
  if (slot != NULL) tsr_wexec_run_gpu(&sub, store, args, slot);
  else tsr_wexec_run_cpu(&sub, store, args);
  task->duration_us += sub.duration_us;
  if (sub.status == TSR_WTASK_DONE) return 0;
  tsr_wtask_erred(task, "part '%s' (op %s) of fused task '%s': %s", p->key, p->op_name, task->key,
                  sub.message ? sub.message : "out of memory");
  free(sub.message);
  tsr_chunk_unref(out_p);
  return TSR_ETASK;
}

/* Drops the intermediates whose last reader was part j. */
static void drop_read(tsr_wtask *task, size_t j, tsr_chunk **values)
{
  const tsr_wpart *p = &task->parts[j];
  for (size_t i = 0; i < p->n_refs; i++) {
    uint32_t r = p->refs[i];
    if (r >= task->n_inputs && task->parts[r - task->n_inputs].last_use == j) tsr_chunk_unref(&values[r]);
  }
}

static int run_parts(tsr_wtask *task, tsr_wstore *store, tsr_chunk **values, tsr_chunk **args, tsr_wgpu_slot *slot,
                     const char *worker_name)
{
  for (size_t j = 0; j < task->n_parts; j++) {
    const tsr_wpart *p = &task->parts[j];
    if (atomic_load(&task->cancelled)) return TSR_ECANCELED;
    if (p->op == NULL) {
      tsr_wtask_erred(task, "part '%s' of fused task '%s': unknown op '%s' on worker %s", p->key, task->key, p->op_name,
                      worker_name);
      return TSR_ETASK;
    }
    for (size_t i = 0; i < p->n_refs; i++) args[i] = values[p->refs[i]];
    int rc = run_part(task, p, args, store, slot, &values[task->n_inputs + j]);
    if (rc != 0) return rc;
    drop_read(task, j, values);
  }
  return 0;
}

void tsr_wfused_run(tsr_wtask *task, tsr_wstore *store, tsr_chunk **chunks, tsr_wgpu_slot *slot,
                    const char *worker_name)
{
  size_t nin = task->n_inputs, nvalues = nin + task->n_parts, most = 1;
  for (size_t j = 0; j < task->n_parts; j++)
    if (task->parts[j].n_refs > most) most = task->parts[j].n_refs;
  tsr_chunk **values = calloc(nvalues, sizeof *values);
  tsr_chunk **args = calloc(most, sizeof *args);
  if (values == NULL || args == NULL) {
    free(values);
    free(args);
    tsr_wtask_erred(task, "fused: out of memory");
    return;
  }
  for (size_t i = 0; i < nin; i++) values[i] = tsr_chunk_ref(chunks[i]);
  task->duration_us = 0;
  int rc = run_parts(task, store, values, args, slot, worker_name);
  if (rc == TSR_ECANCELED) task->status = TSR_WTASK_CANCELLED;
  if (rc == 0) tsr_wexec_store(task, store, &values[nvalues - 1]);
  for (size_t v = 0; v < nvalues; v++) tsr_chunk_unref(&values[v]);
  free(values);
  free(args);
}
