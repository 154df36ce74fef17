/* NVML through dlopen. The few types and entry points used are declared
 * here with NVML's documented ABI (nvml.h: nvmlReturn_t is an int enum,
 * NVML_SUCCESS = 0; a device handle is an opaque pointer;
 * nvmlUtilization_t is two unsigned ints), so no NVML header is needed. */
#include "nvml.h"

#include <dlfcn.h>
#include <stdlib.h>

#include "util/util.h"

typedef int nvml_return;
typedef void *nvml_device;
typedef struct {
  unsigned int gpu;
  unsigned int memory;
} nvml_utilization;
typedef struct {
  unsigned long long total, free, used;   /* nvmlMemory_t */
} nvml_memory;

struct tsr_nvml {
  void *lib;
  nvml_return (*shutdown)(void);
  nvml_return (*get_util)(nvml_device, nvml_utilization *);
  /* optional: NULL when this NVML lacks them (the sample says -1) */
  nvml_return (*get_memory)(nvml_device, nvml_memory *);
  nvml_return (*get_power)(nvml_device, unsigned int *);
  nvml_device device;
};

/* Loads every symbol; false (and the reason in *why) when one is missing. */
static bool load(tsr_nvml *n, nvml_return (**init)(void),
                 nvml_return (**by_bus)(const char *, nvml_device *), const char **why)
{
  *(void **)init = dlsym(n->lib, "nvmlInit_v2");
  *(void **)&n->shutdown = dlsym(n->lib, "nvmlShutdown");
  *(void **)&n->get_util = dlsym(n->lib, "nvmlDeviceGetUtilizationRates");
  *(void **)by_bus = dlsym(n->lib, "nvmlDeviceGetHandleByPciBusId_v2");
  *(void **)&n->get_memory = dlsym(n->lib, "nvmlDeviceGetMemoryInfo");
  *(void **)&n->get_power = dlsym(n->lib, "nvmlDeviceGetPowerUsage");
  if (*init && n->shutdown && n->get_util && *by_bus) return true;
  *why = "a symbol is missing";
  return false;
}

tsr_nvml *tsr_nvml_open(const char *pci_bus_id)
{
  tsr_nvml *n = calloc(1, sizeof *n);
  if (n == NULL) return NULL;
  const char *why = NULL;
  nvml_return (*init)(void) = NULL;
  nvml_return (*by_bus)(const char *, nvml_device *) = NULL;
  n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (n->lib == NULL) why = "libnvidia-ml.so.1 not found";
  else if (!load(n, &init, &by_bus, &why)) {
  } else if (init() != 0) why = "nvmlInit failed";
  else if (by_bus(pci_bus_id, &n->device) != 0) {
    why = "no NVML device with that PCI bus id";
    n->shutdown();
  }
  if (why == NULL) return n;
  TSR_INFO("GPU utilization not reported: %s", why);
  if (n->lib) dlclose(n->lib);
  free(n);
  return NULL;
}

int tsr_nvml_util(tsr_nvml *nvml)
{
  nvml_utilization u;
  if (nvml == NULL || nvml->get_util(nvml->device, &u) != 0) return -1;
  return u.gpu > 100 ? 100 : (int)u.gpu;
}

void tsr_nvml_sample(tsr_nvml *nvml, tsr_nvml_stats *out)
{
  *out = (tsr_nvml_stats){-1, -1, -1, -1};
  if (nvml == NULL) return;
  out->util = tsr_nvml_util(nvml);
  nvml_memory mem;
  if (nvml->get_memory != NULL && nvml->get_memory(nvml->device, &mem) == 0) {
    out->mem_used = (int64_t)mem.used;
    out->mem_total = (int64_t)mem.total;
  }
  unsigned int mw;
  if (nvml->get_power != NULL && nvml->get_power(nvml->device, &mw) == 0) out->power_mw = mw;
}

void tsr_nvml_close(tsr_nvml **nvml_p)
{
  if (nvml_p == NULL || *nvml_p == NULL) return;
  tsr_nvml *n = *nvml_p;
  n->shutdown();
  dlclose(n->lib);
  free(n);
  *nvml_p = NULL;
}
