/* worker/nvml — GPU utilization through NVML, loaded at run time with
 * dlopen("libnvidia-ml.so.1"), so neither the build nor a machine without
 * the NVIDIA driver needs NVML. Absent NVML is not an error: the worker
 * then leaves `gpu_util` out of its heartbeats.
 *
 * Threading: one tsr_nvml belongs to one thread at a time (the worker's
 * main thread, which reads it once per heartbeat). */
#ifndef TSR_WORKER_NVML_H
#define TSR_WORKER_NVML_H

#include <stdint.h>

typedef struct tsr_nvml tsr_nvml;

/* Opens NVML for the GPU at pci_bus_id ("0000:17:00.0", as CUDA's
 * cudaDeviceGetPCIBusId writes it; NVML's device order may differ from
 * CUDA's, the bus id does not). NULL when the library, a symbol or the
 * device is missing (logged once at info, with the reason). */
tsr_nvml *tsr_nvml_open(const char *pci_bus_id);
/* Percent of the last sample period in which a kernel ran, or -1. */
int tsr_nvml_util(tsr_nvml *nvml);

/* One sample of the device (the dashboard's ~1 Hz GPU row, docs/metrics.md);
 * each field -1 when NVML (or that query) is not available. */
typedef struct tsr_nvml_stats {
  int util;                  /* percent */
  int64_t mem_used, mem_total;  /* bytes, every process on the device */
  int64_t power_mw;          /* milliwatts */
} tsr_nvml_stats;

/* Fills *out (all -1 for a NULL nvml). */
void tsr_nvml_sample(tsr_nvml *nvml, tsr_nvml_stats *out);
/* NULL and *NULL are no-ops. */
void tsr_nvml_close(tsr_nvml **nvml_p);

#endif
