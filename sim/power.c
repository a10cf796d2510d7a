/* power.c: clocks, power limits and energy, fans, performance state and persistence mode of the
 * simulated GPUs, from the catalogue's board figures (src/catalog/board.c).
 *
 * The simulator has no workload: a GPU with a simulated process runs at its maximum clocks and
 * draws 240 W, an idle one sits at its default applications clocks and 60 W (each capped by the
 * board's power limit). Energy counts that power over time, settled whenever a process comes or
 * goes (sim_energy_settle), so it only grows. Every board of the catalogue is passively cooled
 * (no fans), runs in P0 and has persistence mode on (as on nodes running nvidia-persistenced).
 * MIG device handles have none of these (INVALID_ARGUMENT), as the driver answers for them. */
#include "simlib.h"

#define SIM_CLOCK_GRAPHICS 0
#define SIM_CLOCK_SM 1
#define SIM_CLOCK_MEM 2
#define SIM_CLOCK_VIDEO 3
#define SIM_CLOCK_ID_CURRENT 0
#define SIM_CLOCK_ID_APP_TARGET 1
#define SIM_CLOCK_ID_APP_DEFAULT 2
#define SIM_CLOCK_ID_BOOST_MAX 3

unsigned sim_power_mw(const struct sim_gpu *g) {
    const struct gs_board *b = gs_model_board(g->model);
    unsigned limit = b ? b->power_default_mw : 240000;
    unsigned p = g->n_procs ? 240000 : 60000;
    if (!g->n_procs && p > limit / 2)
        p = limit / 2;
    return p < limit ? p : limit;
}

unsigned long long sim_energy_mj(const struct sim_gpu *g, unsigned long long now_ms) {
    unsigned long long ms = now_ms > g->health.energy_ms ? now_ms - g->health.energy_ms : 0;
    return g->health.energy_mj + ms * sim_power_mw(g) / 1000;
}

void sim_energy_settle(struct sim_gpu *g) {
    unsigned long long now = sim_now_ms();
    g->health.energy_mj = sim_energy_mj(g, now);
    g->health.energy_ms = now;
}

/* The board of a whole-GPU handle, and the output pointer. */
static nvmlReturn_t board_of(nvmlDevice_t d, struct dev_ref *ref, const struct gs_board **b, const void *out) {
    nvmlReturn_t r = with_out(resolve_gpu(d, ref), out);
    if (r == NVML_SUCCESS && !(*b = gs_model_board(ref->gpu->model)))
        r = NVML_ERROR_NOT_SUPPORTED;
    return r;
}

/* Clock `type` of one kind: the maximum, the default applications clock, or the current one. */
static nvmlReturn_t clock_of(const struct sim_gpu *g, const struct gs_board *b, unsigned type, unsigned id,
                             unsigned *mhz) {
    if (type > SIM_CLOCK_VIDEO || id > SIM_CLOCK_ID_BOOST_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned max = type == SIM_CLOCK_MEM ? b->max_mem_mhz : type == SIM_CLOCK_VIDEO ? b->max_video_mhz
                                                                                       : b->max_graphics_mhz;
    unsigned app = type == SIM_CLOCK_MEM ? b->app_mem_mhz : type == SIM_CLOCK_VIDEO ? b->max_video_mhz
                                                                                       : b->app_graphics_mhz;
    switch (id) {
    case SIM_CLOCK_ID_CURRENT: *mhz = g->n_procs ? max : app; break;
    case SIM_CLOCK_ID_APP_TARGET:
    case SIM_CLOCK_ID_APP_DEFAULT:
        if (type == SIM_CLOCK_SM || type == SIM_CLOCK_VIDEO)
            return NVML_ERROR_NOT_SUPPORTED; /* applications clocks are graphics and memory only */
        *mhz = app;
        break;
    default:
        if (type == SIM_CLOCK_MEM || type == SIM_CLOCK_VIDEO)
            return NVML_ERROR_NOT_SUPPORTED; /* the customer boost clock is a graphics clock */
        *mhz = max;
    }
    return NVML_SUCCESS;
}

unsigned sim_current_clock_mhz(const struct sim_gpu *g, unsigned type) {
    const struct gs_board *b = gs_model_board(g->model);
    unsigned mhz = 0;
    if (b)
        (void)clock_of(g, b, type, SIM_CLOCK_ID_CURRENT, &mhz);
    return mhz;
}

static nvmlReturn_t clock_call(const char *fn, nvmlDevice_t d, unsigned type, unsigned id, unsigned *mhz) {
    nvmlReturn_t ret_ = lock_state(false, fn);
    if (ret_ != NVML_SUCCESS)
        return ret_;
    struct dev_ref ref;
    const struct gs_board *b = NULL;
    nvmlReturn_t r = board_of(d, &ref, &b, mhz);
    if (r == NVML_SUCCESS)
        r = clock_of(ref.gpu, b, type, id, mhz);
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, unsigned int type, unsigned int *clock) {
    return clock_call(__func__, d, type, SIM_CLOCK_ID_CURRENT, clock);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, unsigned int type, unsigned int *clock) {
    nvmlReturn_t ret_ = lock_state(false, __func__);
    if (ret_ != NVML_SUCCESS)
        return ret_;
    struct dev_ref ref;
    const struct gs_board *b = NULL;
    nvmlReturn_t r = board_of(d, &ref, &b, clock);
    if (r == NVML_SUCCESS && type > SIM_CLOCK_VIDEO)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *clock = type == SIM_CLOCK_MEM ? b->max_mem_mhz : type == SIM_CLOCK_VIDEO ? b->max_video_mhz
                                                                                   : b->max_graphics_mhz;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t d, unsigned int type, unsigned int *clock) {
    return clock_call(__func__, d, type, SIM_CLOCK_ID_APP_TARGET, clock);
}

EXPORT nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t d, unsigned int type, unsigned int *clock) {
    return clock_call(__func__, d, type, SIM_CLOCK_ID_APP_DEFAULT, clock);
}

EXPORT nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t d, unsigned int type, unsigned int id, unsigned int *clock) {
    return clock_call(__func__, d, type, id, clock);
}

/* Power: the limit, the default and the enforced limit are the board's default limit (no call
 * changes it), in milliwatts as NVML counts. */
static nvmlReturn_t power_call(const char *fn, nvmlDevice_t d, unsigned *mw) {
    nvmlReturn_t ret_ = lock_state(false, fn);
    if (ret_ != NVML_SUCCESS)
        return ret_;
    struct dev_ref ref;
    const struct gs_board *b = NULL;
    nvmlReturn_t r = board_of(d, &ref, &b, mw);
    if (r == NVML_SUCCESS)
        *mw = b->power_default_mw;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *limit) {
    return power_call(__func__, d, limit);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t d, unsigned int *limit) {
    return power_call(__func__, d, limit);
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *limit) {
    return power_call(__func__, d, limit);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t d, unsigned int *min,
                                                                 unsigned int *max) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_board *b = NULL;
    nvmlReturn_t r = board_of(d, &ref, &b, min);
    if (r == NVML_SUCCESS && !max)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *min = b->power_min_mw;
        *max = b->power_max_mw;
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *energy) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), energy);
    if (r == NVML_SUCCESS)
        *energy = sim_energy_mj(ref.gpu, sim_now_ms());
    READ_END(r);
}

/* No board of the catalogue has a fan: nvidia-smi prints "Fan Speed: N/A" for them. */
EXPORT nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t d, unsigned int *n) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_board *b = NULL;
    nvmlReturn_t r = board_of(d, &ref, &b, n);
    if (r == NVML_SUCCESS)
        *n = b->fans;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned int *speed) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_board *b = NULL;
    nvmlReturn_t r = board_of(d, &ref, &b, speed);
    if (r == NVML_SUCCESS && b->fans == 0)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS)
        *speed = 30;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t d, unsigned int *pstate) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), pstate);
    if (r == NVML_SUCCESS)
        *pstate = 0; /* NVML_PSTATE_0 */
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, nvmlEnableState_t *mode) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), mode);
    if (r == NVML_SUCCESS)
        *mode = 1; /* NVML_FEATURE_ENABLED */
    READ_END(r);
}
