/* scheduler/usage.h — what a worker's heartbeats say about its use of
 * resources since it started, relayed as is in `status_reply` for the
 * clients' efficiency reports (docs/report.md, docs/protocol.md).
 *
 * The scheduler does not act on these numbers; it keeps the last value of
 * each field a heartbeat carried, and relays only the fields some
 * heartbeat carried (an older worker sends none: none are relayed). */
#ifndef TSR_SCHED_USAGE_H
#define TSR_SCHED_USAGE_H

#include <stdint.h>

#include "wire/wire.h"

enum {
  SCHED_USAGE_CPU_US,             /* CPU time of the worker process, user + system */
  SCHED_USAGE_MEMORY_PEAK,        /* most host chunk bytes held at once */
  SCHED_USAGE_DISK_PEAK,          /* most spill-file bytes seen */
  SCHED_USAGE_DEVICE_MEMORY_PEAK, /* most device chunk bytes held at once */
  SCHED_USAGE_FETCH_BYTES,        /* input bytes fetched from peers */
  SCHED_USAGE_FETCH_US,           /* time those fetches took, summed over threads */
  SCHED_USAGE_GPU_MEMORY_USED,    /* NVML: device memory used by every process, bytes */
  SCHED_USAGE_GPU_POWER_MW,       /* NVML: board power, milliwatts */
  SCHED_USAGE_NFIELDS
};

typedef struct sched_usage {
  uint64_t value[SCHED_USAGE_NFIELDS];
  uint32_t present;               /* bit f: some heartbeat carried field f */
} sched_usage;

/* Reads the usage fields of a heartbeat map into *u (absent ones keep
 * their value). 0, or TSR_EPROTO naming the field that is not a uint;
 * then *u is unchanged. */
int sched_usage_decode(const msgpack_object *map, sched_usage *u, tsr_errbuf *err);
/* How many entries sched_usage_pack writes. */
uint32_t sched_usage_nfields(const sched_usage *u);
/* Packs the present fields as key/value pairs of the enclosing map. */
void sched_usage_pack(msgpack_packer *pk, const sched_usage *u);

#endif
