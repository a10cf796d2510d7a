/* claimkube.c: claims from the API server (see apiserver.h): a GET of the ResourceClaim at
 * prepare, decoded once by dra_claim_from_json. Called on the DRA server's thread only. */
#include "dra/apiserver.h"
#include "dra/prepare.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

struct dra_claim_kube {
    struct kube_client *client;
    unsigned long long down_until_ns; /* fail fast until then: the API server did not answer */
    char down_why[256];
};

int dra_claim_kube_new(struct kube_client *c, struct dra_claim_kube **out) {
    struct dra_claim_kube *k = calloc(1, sizeof(*k));
    if (!k)
        return -ENOMEM;
    k->client = c;
    *out = k;
    return 0;
}

void dra_claim_kube_free(struct dra_claim_kube *k) {
    free(k);
}

/* The errors that say the API server cannot be reached now (not what it answered). */
static bool unreachable(int r) {
    return r == -ETIMEDOUT || r == -ECONNREFUSED || r == -EHOSTUNREACH || r == -EPIPE || r == -EPROTO || r == -EIO ||
           r == -ECANCELED;
}

static int fetch_kube(void *ctx, const char *driver, const char *ns, const char *name, const char *uid,
                      struct dra_claim *out, char *err, size_t errlen) {
    struct dra_claim_kube *k = ctx;
    unsigned long long now = gs_now_ns();
    if (now < k->down_until_ns) {
        snprintf(err, errlen, "ResourceClaim %.63s/%.200s not read: the API server did not answer %.1f s ago (%.200s)",
                 ns, name, (double)(now + DRA_API_DOWN_MS * 1000000ULL - k->down_until_ns) / 1e9, k->down_why);
        return -EAGAIN;
    }
    char path[KUBE_URL_MAX];
    if (kube_path(path, sizeof(path), "resource.k8s.io/v1", ns, "resourceclaims", name) < 0) {
        snprintf(err, errlen, "'%.63s/%.200s' is not a claim's namespace and name", ns, name);
        return -EINVAL;
    }
    json_t *obj = NULL;
    char why[512];
    int r = kube_get(k->client, path, &obj, why, sizeof(why));
    if (r < 0) {
        if (unreachable(r)) {
            k->down_until_ns = gs_now_ns() + DRA_API_DOWN_MS * 1000000ULL;
            gs_strlcpy(k->down_why, why, sizeof(k->down_why));
            snprintf(err, errlen, "ResourceClaim %.63s/%.200s not read: %.400s", ns, name, why);
            return -EAGAIN;
        }
        if (r == -ENOENT)
            snprintf(err, errlen, "ResourceClaim %.63s/%.200s not found (%.300s)", ns, name, why);
        else
            snprintf(err, errlen, "GET ResourceClaim %.63s/%.200s: %.400s", ns, name, why);
        return r;
    }
    k->down_until_ns = 0;
    r = dra_claim_from_json(obj, driver, ns, name, uid, out, why, sizeof(why)); /* decoded once */
    json_decref(obj);
    if (r < 0)
        snprintf(err, errlen, "%.500s", why);
    return r;
}

/* A pod of a claim's reservedFor (share.h: one guard a container). Fails fast while the API
 * server is down, as the claims do. */
static int pod_kube(void *ctx, const char *ns, const char *name, char **json, size_t *len, char *err, size_t errlen) {
    struct dra_claim_kube *k = ctx;
    char path[KUBE_URL_MAX];
    *json = NULL;
    if (gs_now_ns() < k->down_until_ns) {
        snprintf(err, errlen, "the API server did not answer (%.200s)", k->down_why);
        return -EAGAIN;
    }
    if (kube_path(path, sizeof(path), "v1", ns, "pods", name) < 0) {
        snprintf(err, errlen, "'%.63s/%.200s' is not a pod's namespace and name", ns, name);
        return -EINVAL;
    }
    json_t *obj = NULL;
    int r = kube_get(k->client, path, &obj, err, errlen);
    if (r < 0)
        return r;
    *json = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!*json) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    *len = strlen(*json);
    return 0;
}

/* Every ResourceClaim of the cluster (one list, every page), those allocated with results of
 * driver handed to fn. */
static int each_kube(void *ctx, const char *driver, void (*fn)(void *arg, struct dra_claim *c), void *arg, char *err,
                     size_t errlen) {
    struct dra_claim_kube *k = ctx;
    json_t *list = NULL;
    int r = kube_list_all(k->client, "/apis/resource.k8s.io/v1/resourceclaims", NULL, &list, err, errlen);
    if (r < 0)
        return r;
    struct dra_claim *c = calloc(1, sizeof(*c));
    const json_t *items = json_object_get(list, "items");
    for (size_t i = 0; c && i < json_array_size(items); i++) {
        char why[512];
        if (dra_claim_from_json(json_array_get(items, i), driver, NULL, NULL, NULL, c, why, sizeof(why)) == 0) {
            fn(arg, c);
            dra_claim_free(c);
        }
    }
    json_decref(list);
    bool ok = c != NULL;
    free(c);
    if (!ok) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    return 0;
}

struct dra_claim_source dra_claim_kube_source(struct dra_claim_kube *k) {
    return (struct dra_claim_source){ k, fetch_kube, pod_kube, each_kube };
}
