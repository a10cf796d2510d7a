/* curlload.h: libcurl loaded when the first Kubernetes client is opened, not at program start
 * (nvtop's way with NVML): every gpuslice command links src/kube, and libcurl with the ~28
 * libraries it needs (TLS, Kerberos, LDAP, ...) cost ~5.6 MB of resident memory in an agent that
 * never talks to the API server. kube.c calls curl through this table by the usual names (the
 * macros below); include this header instead of <curl/curl.h>. */
#ifndef GS_KUBE_CURLLOAD_H
#define GS_KUBE_CURLLOAD_H

#include <stddef.h>

#define CURL_DISABLE_TYPECHECK 1 /* the typecheck macros would name the functions themselves */
#include <curl/curl.h>

struct kube_curl {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *h);
    CURLcode (*easy_setopt)(CURL *h, CURLoption opt, ...);
    CURLcode (*easy_getinfo)(CURL *h, CURLINFO info, ...);
    const char *(*easy_strerror)(CURLcode c);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_cleanup)(CURLM *m);
    CURLMcode (*multi_add_handle)(CURLM *m, CURL *h);
    CURLMcode (*multi_remove_handle)(CURLM *m, CURL *h);
    CURLMcode (*multi_perform)(CURLM *m, int *running);
    CURLMcode (*multi_poll)(CURLM *m, struct curl_waitfd *extra, unsigned n, int timeout_ms, int *numfds);
    CURLMcode (*multi_wakeup)(CURLM *m);
    CURLMsg *(*multi_info_read)(CURLM *m, int *left);
    struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
    void (*slist_free_all)(struct curl_slist *l);
};

extern struct kube_curl kube_curl;

/* Loads libcurl (GPUSLICE_LIBCURL, else libcurl.so.4) and curl_global_init's it, once per
 * process. Returns 0, or -ENOENT/-EIO with why in err. Thread-safe. */
int kube_curl_load(char *err, size_t errlen);

/* curl_easy_perform through the multi interface (the functions the loaded table has): the transfer
 * run to its end, or ended early by the calling thread's kube_cancel (kube.h) when one is bound.
 * kube.c's; any user of the table may call it. */
CURLcode kube_curl_perform(CURL *h);

#define curl_global_init (*kube_curl.global_init)
#define curl_easy_init (*kube_curl.easy_init)
#define curl_easy_cleanup (*kube_curl.easy_cleanup)
#undef curl_easy_setopt /* curl.h's three-argument check names the function itself */
#undef curl_easy_getinfo
#define curl_easy_setopt (*kube_curl.easy_setopt)
#define curl_easy_getinfo (*kube_curl.easy_getinfo)
#define curl_easy_strerror (*kube_curl.easy_strerror)
#define curl_multi_init (*kube_curl.multi_init)
#define curl_multi_cleanup (*kube_curl.multi_cleanup)
#define curl_multi_add_handle (*kube_curl.multi_add_handle)
#define curl_multi_remove_handle (*kube_curl.multi_remove_handle)
#define curl_multi_perform (*kube_curl.multi_perform)
#define curl_multi_poll (*kube_curl.multi_poll)
#define curl_multi_wakeup (*kube_curl.multi_wakeup)
#define curl_multi_info_read (*kube_curl.multi_info_read)
#define curl_slist_append (*kube_curl.slist_append)
#define curl_slist_free_all (*kube_curl.slist_free_all)

#endif
