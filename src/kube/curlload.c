/* curlload.c: libcurl by dlopen, on first use (curlload.h). */
#include "curlload.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct kube_curl kube_curl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_err[512];

#define SYM(field, name)                                                                                              \
    do {                                                                                                              \
        void *p_ = dlsym(h, name);                                                                                    \
        if (!p_) {                                                                                                    \
            snprintf(load_err, sizeof(load_err), "%s: no symbol %s (libcurl 7.68 or newer is needed)", lib, name);   \
            load_rc = -ENOENT;                                                                                        \
            return;                                                                                                   \
        }                                                                                                             \
        *(void **)&kube_curl.field = p_;                                                                              \
    } while (0)

static void load(void) {
    const char *lib = getenv("GPUSLICE_LIBCURL");
    if (!lib || !*lib)
        lib = "libcurl.so.4";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_err, sizeof(load_err), "cannot load %s (%s): install libcurl4 for the Kubernetes API client",
                 lib, dlerror());
        load_rc = -ENOENT;
        return;
    }
    SYM(global_init, "curl_global_init");
    SYM(easy_init, "curl_easy_init");
    SYM(easy_cleanup, "curl_easy_cleanup");
    SYM(easy_setopt, "curl_easy_setopt");
    SYM(easy_getinfo, "curl_easy_getinfo");
    SYM(easy_strerror, "curl_easy_strerror");
    SYM(multi_init, "curl_multi_init");
    SYM(multi_cleanup, "curl_multi_cleanup");
    SYM(multi_add_handle, "curl_multi_add_handle");
    SYM(multi_remove_handle, "curl_multi_remove_handle");
    SYM(multi_perform, "curl_multi_perform");
    SYM(multi_poll, "curl_multi_poll");
    SYM(multi_wakeup, "curl_multi_wakeup");
    SYM(multi_info_read, "curl_multi_info_read");
    SYM(slist_append, "curl_slist_append");
    SYM(slist_free_all, "curl_slist_free_all");
    CURLcode rc = kube_curl.global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) {
        snprintf(load_err, sizeof(load_err), "curl_global_init: %s", kube_curl.easy_strerror(rc));
        load_rc = -EIO;
    }
    /* h stays open for the life of the process */
}

int kube_curl_load(char *err, size_t errlen) {
    pthread_once(&once, load);
    if (load_rc < 0 && err && errlen)
        snprintf(err, errlen, "%s", load_err);
    return load_rc;
}
