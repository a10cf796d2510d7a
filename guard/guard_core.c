/* guard_core.c: the guard's initialisation, at its first call (guard_core.h). */
#include <pthread.h>
#include <stdatomic.h>

#include "guard_account.h"
#include "guard_base.h"
#include "guard_core.h"
#include "guard_driver.h"
#include "guard_env.h"

struct guard_core g_core = { .once = PTHREAD_ONCE_INIT };

static void init_once(void) {
    struct guard_core *c = &g_core;
    guard_driver_resolve(&g_real);
    for (unsigned i = 0; i < GS_GUARD_MAX_DEVICES; i++)
        c->dev_index[i] = UNLIMITED_DEVICE;
    const char *path;
    int st = guard_env_load_limits(&c->limits, &path);
    if (st != G_READY) {
        atomic_store(&c->state, st);
        return;
    }
    if (account_map(&g_acct, c->limits.region) < 0 || account_claim_slot(&g_acct) < 0) {
        atomic_store(&c->state, c->limits.fail_closed ? G_CLOSED : G_OPEN);
        return;
    }
    account_reclaim_dead(&g_acct);
    bool want_pacing = false;
    for (unsigned i = 0; i < c->limits.n_devices; i++) {
        c->dev_index[c->limits.dev[i].ordinal] = (int)i;
        want_pacing |= c->limits.dev[i].compute_pct != 0;
    }
    if (want_pacing) {
        if (g_real.cuEventCreate && g_real.cuEventRecord && g_real.cuEventQuery && g_real.cuEventElapsedTime &&
            g_real.cuEventDestroy)
            atomic_store(&c->pacing, true);
        else
            glog("%s: the driver has no event timing: compute limits are not enforced", path);
    }
    atomic_store(&c->state, G_READY);
}

int guard_init(void) {
    pthread_once(&g_core.once, init_once);
    return atomic_load(&g_core.state);
}
