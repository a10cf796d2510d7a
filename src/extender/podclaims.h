/* podclaims.h: a Pod's ResourceClaims (pod.spec.resourceClaims, and the names of the claims made
 * from templates in pod.status.resourceClaimStatuses), for the extender's Pod mapping (wire.c)
 * and claims.h's judging. Pure (jansson). */
#ifndef GS_EXTENDER_PODCLAIMS_H
#define GS_EXTENDER_PODCLAIMS_H

#include <jansson.h>
#include <stddef.h>

#include "extender/model.h"

/* The first EX_CLAIMS_MAX claims into *out (the rest are not judged). -EINVAL with the field in
 * err ("Pod.spec.resourceClaims[1]: exactly one of resourceClaimName and ..."). */
int ex_pod_claims_from_json(const json_t *pod, struct ex_pod_claims *out, char *err, size_t errlen);

#endif
