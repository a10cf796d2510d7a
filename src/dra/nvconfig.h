/* nvconfig.h: opaque configs beyond gpuslice's own (used by share.c and prepare.c). Pure.
 *
 * NVIDIA's DRA driver's configs, apiVersion resource.nvidia.com/v1beta1, read strictly (an unknown
 * field is refused, named) and translated into gpuslice's struct dra_gpu_config:
 *   kind GpuConfig, sharing.strategy TimeSlicing   time-slicing; timeSlicingConfig.interval Default
 *        (or none) only: gpuslice leaves the GPU's hardware time slice as it is, so Short, Medium
 *        and Long are refused
 *   kind GpuConfig, sharing.strategy MPS           MPS; mpsConfig.defaultActiveThreadPercentage
 *        (1..100), defaultPinnedDeviceMemoryLimit and defaultPerDevicePinnedMemoryLimit (the
 *        device's index in the claim, "0", or its UUID) become the client's
 *        CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, the tighter of
 *        them and the claim's consumedCapacity
 *   kind MigDeviceConfig, TimeSlicing              nothing to do (a MIG device is the claim's whole)
 *   kind MigDeviceConfig, MPS                      refused: gpuslice runs no MPS daemon on a MIG device
 *   other kinds (VfioDeviceConfig, ComputeDomain*) refused: gpuslice has neither
 * And an opaque config of another driver for requests only this driver serves: refused, since no
 * driver would honour it. */
#ifndef GS_DRA_NVCONFIG_H
#define GS_DRA_NVCONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "dra/share.h"

#define DRA_NV_API_VERSION "resource.nvidia.com/v1beta1"

struct json_t;

/* The rules every opaque config follows, NVIDIA's and gpuslice's own (share.c):
 * config's fields are among the names in `known` (space separated), else -EINVAL naming the first
 * other one ("PATHFIELD: unknown field (PATH has KNOWN)"; path "" is the config itself); */
int dra_config_fields_known(const struct json_t *config, const char *path, const char *known, char *err,
                            size_t errlen);
/* and a config's request name names a result's request when it is that request or its parent
 * ("req" names "req/sub"). */
bool dra_config_names_request(const char *name, const char *request);

/* NVIDIA's config (params: opaque.parameters' JSON text) into out: -EINVAL with "FIELD: why". */
int dra_nv_config_parse(const char *params, struct dra_gpu_config *out, char *err, size_t errlen);

/* An opaque config as dra_config_for reads it: NVIDIA's (its apiVersion) parsed into out (0);
 * 1 for gpuslice's apiVersion, or none, which dra_gpu_config_parse reads; -EINVAL for another
 * apiVersion, both named. label gets "APIVERSION KIND" as the config says (for the caller's
 * error). */
int dra_opaque_config_parse(const char *params, struct dra_gpu_config *out, char *label, size_t labellen, char *err,
                            size_t errlen);

/* What cfg asks of result r on device d beyond the strategy share.c checks, applied to *share
 * (dra_share_of's answer, its capacities read): a MigDeviceConfig on a GPU, or NVIDIA's GpuConfig
 * on a MIG device, refused; on an MPS device, the config's thread percentage and pinned memory
 * limit, the tighter of them and the claim's. -EINVAL naming the request, the device and the
 * field. cfg NULL: 0. */
int dra_config_apply(const struct dra_gpu_config *cfg, const struct dra_result *r, const struct dra_device *d,
                     struct dra_share *share, char *err, size_t errlen);

/* An opaque config (status.allocation.devices.config[index], `config`) whose opaque.driver is not
 * `driver`: -EINVAL naming it when a request it names (none named: every request) has results of
 * `driver` and none of them has a result of the config's driver (no driver would honour it);
 * else 0. results: the claim's status.allocation.devices.results. */
int dra_config_foreign(const struct json_t *config, const struct json_t *results, const char *driver, size_t index,
                       char *err, size_t errlen);

#endif
