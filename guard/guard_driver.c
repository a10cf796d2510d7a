/* guard_driver.c: the real functions the guard calls on to: libcuda's, resolved with libc's dlsym
 * (the guard's own dlsym answers hooked names with its wrappers), and libnvidia-ml's. */
#include <dlfcn.h>

#include "guard_base.h"
#include "guard_driver.h"
#include "guard_exec.h"

struct guard_driver g_real;

void *guard_cuda_sym(const struct guard_driver *d, const char *name) {
    return d->libcuda ? real_dlsym(d->libcuda, name) : NULL;
}

void *guard_nvml_sym(struct guard_driver *d, const char *name) {
    if (!d->libnvml)
        d->libnvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    return d->libnvml ? real_dlsym(d->libnvml, name) : NULL;
}

void guard_driver_resolve(struct guard_driver *d) {
    resolve_dlsym();
    d->libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d->libcuda) {
        glog("cannot load libcuda.so.1: %s", dlerror());
        return;
    }
#define RESOLVE(name, params, args) d->name = (name##_fn)guard_cuda_sym(d, #name);
    GS_CUDA_HOOKED_FUNCTIONS(RESOLVE)
#undef RESOLVE
#define RESOLVE_AS(field, type, symbol) d->field = (type)guard_cuda_sym(d, symbol);
    GUARD_DRIVER_FUNCTIONS(RESOLVE_AS)
#undef RESOLVE_AS
}
