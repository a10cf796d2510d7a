/* podclaims.c: a Pod's ResourceClaims (podclaims.h). Pure. */
#include "extender/podclaims.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* key's string of obj into dst (len): 1 copied, 0 absent or null, -EINVAL not a string or too long */
static int copy_name(const json_t *obj, const char *key, char *dst, size_t len) {
    const json_t *v = json_object_get(obj, key);
    dst[0] = '\0';
    if (!v || json_is_null(v))
        return 0;
    const char *s = json_string_value(v);
    if (!s || strlen(s) >= len)
        return -EINVAL;
    memcpy(dst, s, strlen(s) + 1);
    return 1;
}

int ex_pod_claims_from_json(const json_t *pod, struct ex_pod_claims *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    const json_t *rc = json_object_get(json_object_get(pod, "spec"), "resourceClaims");
    if (!rc || json_is_null(rc))
        return 0;
    if (!json_is_array(rc)) {
        snprintf(err, errlen, "Pod.spec.resourceClaims: not an array");
        return -EINVAL;
    }
    size_t i;
    const json_t *e;
    json_array_foreach(rc, i, e) {
        if (out->n == EX_CLAIMS_MAX)
            break; /* the rest are not judged */
        struct ex_claim_ref *r = &out->r[out->n];
        const char *bad = NULL;
        if (!json_is_object(e))
            bad = "not an object";
        else if (copy_name(e, "name", r->entry, sizeof(r->entry)) != 1)
            bad = "name: expected a name of at most 63 characters";
        else if (copy_name(e, "resourceClaimName", r->claim, sizeof(r->claim)) < 0 ||
                 copy_name(e, "resourceClaimTemplateName", r->tmpl, sizeof(r->tmpl)) < 0)
            bad = "a claim or template name: not a string of at most 253 characters";
        else if (!r->claim[0] == !r->tmpl[0])
            bad = "exactly one of resourceClaimName and resourceClaimTemplateName";
        if (bad) {
            snprintf(err, errlen, "Pod.spec.resourceClaims[%zu]: %s", i, bad);
            return -EINVAL;
        }
        out->n++;
    }
    /* the claims made from templates: status.resourceClaimStatuses[] {name, resourceClaimName} */
    const json_t *st = json_object_get(json_object_get(pod, "status"), "resourceClaimStatuses");
    if (st && !json_is_null(st) && !json_is_array(st)) {
        snprintf(err, errlen, "Pod.status.resourceClaimStatuses: not an array");
        return -EINVAL;
    }
    json_array_foreach(st, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *claim = json_string_value(json_object_get(e, "resourceClaimName"));
        if (!name || !claim || strlen(claim) >= EX_NAME_MAX)
            continue; /* not made yet */
        for (int k = 0; k < out->n; k++)
            if (out->r[k].tmpl[0] && strcmp(out->r[k].entry, name) == 0)
                memcpy(out->r[k].claim, claim, strlen(claim) + 1);
    }
    return 0;
}
