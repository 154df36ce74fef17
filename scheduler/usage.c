/* scheduler/usage.c — the heartbeat usage fields a worker reports and
 * status_reply relays (contract in usage.h). */
#include "usage.h"

/* Wire names, by field. gpu_memory_used also arrives as gpu_mem_used (the
 * name first agreed for it, docs/protocol.md). */
static const char *const field_names[SCHED_USAGE_NFIELDS] = {
  "cpu_us", "memory_peak", "disk_peak", "device_memory_peak", "fetch_bytes", "fetch_us", "gpu_memory_used", "gpu_power_mw",
};

int sched_usage_decode(const msgpack_object *map, sched_usage *u, tsr_errbuf *err)
{
  sched_usage next = *u;
  for (int f = 0; f < SCHED_USAGE_NFIELDS; f++) {
    const char *name = field_names[f];
    if (f == SCHED_USAGE_GPU_MEMORY_USED && tsr_wire_field(map, name) == NULL) name = "gpu_mem_used";
    if (tsr_wire_field(map, name) == NULL) continue;
    int rc = tsr_wire_uint(map, name, &next.value[f], err);
    if (rc != 0) return rc;
    next.present |= 1u << f;
  }
  *u = next;
  return 0;
}

uint32_t sched_usage_nfields(const sched_usage *u) { return (uint32_t)__builtin_popcount(u->present); }

void sched_usage_pack(msgpack_packer *pk, const sched_usage *u)
{
  for (int f = 0; f < SCHED_USAGE_NFIELDS; f++)
    if (u->present & (1u << f)) tsr_pack_kv_uint(pk, field_names[f], u->value[f]);
}
