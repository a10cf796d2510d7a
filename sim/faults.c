/* faults.c: the fault schedule's parser and counters (see faults.h). */
#include "faults.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/util.h"

/* Every NVML function of the library that reads or changes the node, in the library's spelling.
 * nvmlInit*, nvmlShutdown, nvmlErrorString, nvmlEventSetFree and nvmlGpmSampleAlloc/Free are not in it. test_simfaults
 * checks that the library exports each of them. */
static const char *const functions[] = {
    "nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion", "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetIndex",
    "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetMinorNumber", "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetComputeMode",
    "nvmlDeviceSetComputeMode", "nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMigMode", "nvmlDeviceSetMigMode",
    "nvmlDeviceGetGpuInstanceProfileInfo", "nvmlDeviceGetGpuInstanceProfileInfoV",
    "nvmlDeviceGetGpuInstanceProfileInfoByIdV", "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
    "nvmlDeviceGetGpuInstanceRemainingCapacity", "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlDeviceCreateGpuInstance", "nvmlDeviceGetGpuInstances", "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo", "nvmlGpuInstanceDestroy", "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    "nvmlGpuInstanceCreateComputeInstance", "nvmlGpuInstanceGetComputeInstances",
    "nvmlGpuInstanceGetComputeInstanceById", "nvmlComputeInstanceGetInfo_v2", "nvmlComputeInstanceDestroy",
    "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetAttributes_v2", "nvmlEventSetCreate", "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2", "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
    "nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkVersion",
    "nvmlDeviceGetNvLinkRemoteDeviceType", "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    /* monitoring: power.c, ecc.c, board.c, affinity.c, samples.c, device.c, mig_ci.c */
    "nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetApplicationsClock",
    "nvmlDeviceGetDefaultApplicationsClock", "nvmlDeviceGetClock", "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetPowerManagementDefaultLimit", "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPowerManagementLimitConstraints", "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetNumFans",
    "nvmlDeviceGetFanSpeed", "nvmlDeviceGetPerformanceState", "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetEccMode",
    "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetMemoryErrorCounter", "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetBAR1MemoryInfo",
    "nvmlDeviceGetSerial", "nvmlDeviceGetVbiosVersion", "nvmlDeviceGetBoardId", "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetAccountingMode", "nvmlDeviceGetGpuFabricInfo", "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetCpuAffinity", "nvmlSystemGetTopologyGpuSet",
    "nvmlDeviceGetTopologyNearestGpus", "nvmlDeviceGetP2PStatus", "nvmlSystemGetProcessName", "nvmlDeviceGetSamples",
    "nvmlDeviceGetFieldValues", "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlGpuInstanceGetComputeInstanceRemainingCapacity",
    "nvmlDeviceGetDisplayActive", "nvmlDeviceGetDisplayMode", "nvmlDeviceGetDriverModel_v2",
    "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleGet", "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet",
};

/* Older names whose calls run the newer function: one function, one counter. */
static const struct {
    const char *alias, *name;
} aliases[] = {
    { "nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2" },
    { "nvmlDeviceGetCount", "nvmlDeviceGetCount_v2" },
    { "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2" },
    { "nvmlComputeInstanceGetInfo", "nvmlComputeInstanceGetInfo_v2" },
    { "nvmlEventSetWait", "nvmlEventSetWait_v2" },
    { "nvmlDeviceGetNvLinkRemotePciInfo", "nvmlDeviceGetNvLinkRemotePciInfo_v2" },
    { "nvmlDeviceGetDriverModel", "nvmlDeviceGetDriverModel_v2" },
};

#define E(x) { x, #x }
static const struct {
    nvmlReturn_t code;
    const char *name;
} errors[] = {
    E(NVML_ERROR_UNINITIALIZED), E(NVML_ERROR_INVALID_ARGUMENT), E(NVML_ERROR_NOT_SUPPORTED),
    E(NVML_ERROR_NO_PERMISSION), E(NVML_ERROR_ALREADY_INITIALIZED), E(NVML_ERROR_NOT_FOUND),
    E(NVML_ERROR_INSUFFICIENT_SIZE), E(NVML_ERROR_DRIVER_NOT_LOADED), E(NVML_ERROR_TIMEOUT),
    E(NVML_ERROR_LIBRARY_NOT_FOUND), E(NVML_ERROR_FUNCTION_NOT_FOUND), E(NVML_ERROR_GPU_IS_LOST),
    E(NVML_ERROR_RESET_REQUIRED), E(NVML_ERROR_IN_USE), E(NVML_ERROR_MEMORY), E(NVML_ERROR_NO_DATA),
    E(NVML_ERROR_INSUFFICIENT_RESOURCES), E(NVML_ERROR_ARGUMENT_VERSION_MISMATCH), E(NVML_ERROR_UNKNOWN),
};
#undef E

const char *sim_faults_function(size_t i) { return i < GS_ARRAY_SIZE(functions) ? functions[i] : NULL; }

const char *sim_faults_error_name(nvmlReturn_t r) {
    for (size_t i = 0; i < GS_ARRAY_SIZE(errors); i++)
        if (errors[i].code == r)
            return errors[i].name;
    return NULL;
}

/* The library's spelling of a function name (len bytes at s), or NULL. */
static const char *lookup_function(const char *s, size_t len) {
    for (size_t i = 0; i < GS_ARRAY_SIZE(functions); i++)
        if (strlen(functions[i]) == len && memcmp(functions[i], s, len) == 0)
            return functions[i];
    for (size_t i = 0; i < GS_ARRAY_SIZE(aliases); i++)
        if (strlen(aliases[i].alias) == len && memcmp(aliases[i].alias, s, len) == 0)
            return aliases[i].name;
    return NULL;
}

static bool lookup_error(const char *s, size_t len, nvmlReturn_t *out) {
    for (size_t i = 0; i < GS_ARRAY_SIZE(errors); i++) {
        if (strlen(errors[i].name) == len && memcmp(errors[i].name, s, len) == 0) {
            *out = errors[i].code;
            return true;
        }
    }
    return false;
}

/* One entry: FUNCTION ':' N ['+'] ':' ERROR, len bytes at s (no NUL inside). */
static int parse_entry(const char *s, size_t len, struct sim_fault *f, const char **field, char *why, size_t whylen) {
    const char *c1 = memchr(s, ':', len);
    const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - s)) : NULL;
    if (!c2) {
        *field = "entry";
        snprintf(why, whylen, "expected FUNCTION:N:ERROR or FUNCTION:N+:ERROR");
        return -EINVAL;
    }
    *field = "function";
    f->func = lookup_function(s, (size_t)(c1 - s));
    if (!f->func) {
        static const char *const excluded[] = { "nvmlInit", "nvmlInit_v2", "nvmlShutdown", "nvmlErrorString",
                                                "nvmlEventSetFree" };
        bool ex = false;
        for (size_t i = 0; i < GS_ARRAY_SIZE(excluded); i++)
            ex |= strlen(excluded[i]) == (size_t)(c1 - s) && memcmp(excluded[i], s, (size_t)(c1 - s)) == 0;
        snprintf(why, whylen, "%s", ex ? "this function cannot be scheduled to fail"
                                       : "not an NVML function of the simulated library");
        return -EINVAL;
    }
    *field = "call";
    const char *n = c1 + 1;
    size_t nlen = (size_t)(c2 - n);
    f->and_later = nlen > 0 && n[nlen - 1] == '+';
    if (f->and_later)
        nlen--;
    char num[24];
    unsigned long long v;
    bool digits = nlen > 0 && nlen < sizeof(num);
    for (size_t i = 0; digits && i < nlen; i++)
        digits = n[i] >= '0' && n[i] <= '9';
    if (digits) {
        memcpy(num, n, nlen);
        num[nlen] = '\0';
    }
    if (!digits || gs_parse_uint(num, 1, 1000000000ULL, &v) < 0) {
        snprintf(why, whylen, "expected a call number from 1 to 1000000000, optionally followed by '+'");
        return -EINVAL;
    }
    f->nth = v;
    *field = "error";
    if (!lookup_error(c2 + 1, len - (size_t)(c2 + 1 - s), &f->ret)) {
        snprintf(why, whylen, "expected an NVML error name such as NVML_ERROR_GPU_IS_LOST (NVML_SUCCESS is no fault)");
        return -EINVAL;
    }
    return 0;
}

int sim_faults_parse(const char *what, const char *spec, struct sim_faults *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (!spec || !*spec)
        return 0;
    const char *s = spec;
    for (unsigned k = 1;; k++) {
        size_t len = strcspn(s, ",");
        const char *field = "entry";
        char why[160];
        int r = -EINVAL;
        if (len == 0)
            snprintf(why, sizeof(why), "empty (entries are separated by single commas)");
        else if (out->n == SIM_FAULTS_MAX)
            snprintf(why, sizeof(why), "more than %d entries", SIM_FAULTS_MAX);
        else
            r = parse_entry(s, len, &out->entries[out->n], &field, why, sizeof(why));
        if (r < 0) {
            snprintf(err, errlen, "%s: entry %u '%.*s': %s: %s", what, k, (int)(len > 120 ? 120 : len), s, field,
                     why);
            memset(out, 0, sizeof(*out));
            return r;
        }
        struct sim_fault *f = &out->entries[out->n];
        f->counter = out->n;
        for (unsigned i = 0; i < out->n; i++) {
            if (out->entries[i].func == f->func) {
                f->counter = out->entries[i].counter;
                break;
            }
        }
        out->n++;
        if (s[len] == '\0')
            return 0;
        s += len + 1;
    }
}

nvmlReturn_t sim_faults_next(struct sim_faults *f, const char *func, const struct sim_fault **hit) {
    if (hit)
        *hit = NULL;
    unsigned long long n = 0;
    bool counted = false;
    for (unsigned i = 0; i < f->n; i++) {
        const struct sim_fault *e = &f->entries[i];
        if (strcmp(e->func, func) != 0)
            continue;
        if (!counted) {
            n = ++f->calls[e->counter];
            counted = true;
        }
        if (n == e->nth || (e->and_later && n > e->nth)) {
            if (hit)
                *hit = e;
            return e->ret;
        }
    }
    return NVML_SUCCESS;
}
