/* prepare.h: the pure part of the DRA driver's kubelet side (used by server.c and the claim
 * sources): a ResourceClaim's JSON to its allocation results for this driver, a claim's results to
 * the prepared devices and the claim's transient CDI spec, and the checkpoint of prepared claims
 * (its text both ways; hostile input refused with the field named). No I/O. */
#ifndef GS_DRA_PREPARE_H
#define GS_DRA_PREPARE_H

#include <stdbool.h>
#include <stddef.h>

#include "dra/dra.h"

#define DRA_CDI_IDS 2 /* per device: the node spec's device, the claim's */

struct dra_prepared_device {
    char request[128];
    char pool[254];
    char device[64];
    char share_id[40];
    char cdi[DRA_CDI_IDS][GS_UUID_LEN + 64]; /* fully qualified: "gpuslice.io/gpu=GPU-..." */
};

struct dra_prepared {
    char uid[40], ns[64], name[254];
    unsigned n_devices;
    struct dra_prepared_device devices[DRA_MAX_RESULTS];
};

struct dra_checkpoint {
    size_t n, cap;
    struct dra_prepared *claims;
};

/* A claim UID as the kubelet sends it: 1..36 of [0-9a-z-] (it names files). */
bool dra_uid_valid(const char *uid);

/* The claim's JSON (a ResourceClaim, as the API server or `kubectl get -o json` gives it) for the
 * kubelet's ns/name/uid: the results and opaque configs of `driver`. -ESTALE (another UID),
 * -ENOENT (another name or namespace), -ENODATA (not allocated, or nothing for this driver),
 * -EINVAL (not JSON, or a field of the wrong type or too long: named in err), -ENOMEM. */
int dra_claim_parse(const char *json, size_t len, const char *driver, const char *ns, const char *name,
                    const char *uid, struct dra_claim *out, char *err, size_t errlen);

/* The claim's prepared devices and its transient spec's JSON text (*spec, malloc'ed; its one
 * device is dra_claim_cdi_name). Every result must name a device of devs (-ENODEV otherwise, the
 * device named in err). kind: the node spec's ("gpuslice.io/gpu"). */
int dra_prepare_claim(const struct dra_claim *c, const struct dra_device *devs, size_t n_devs, const char *kind,
                      struct dra_prepared *out, char **spec, char *err, size_t errlen);

/* "claim-<uid>": the claim's device in its transient spec, and the spec file's base name
 * "<vendor>-<class>_claim-<uid>.json" (kind's '/' as '-'). */
void dra_claim_cdi_name(const char *uid, char *buf, size_t len);
void dra_claim_spec_file(const char *kind, const char *uid, char *buf, size_t len);

/* The checkpoint's text (malloc'ed JSON; NULL when out of memory) and back. Parse: -EINVAL with
 * "checkpoint: claims[I].FIELD: why" in err for anything but what render writes (bounded: at most
 * DRA_CHECKPOINT_MAX claims, fields within their sizes, valid UIDs, none twice). */
#define DRA_CHECKPOINT_MAX 4096
char *dra_checkpoint_render(const struct dra_checkpoint *cp);
int dra_checkpoint_parse(const char *text, size_t len, struct dra_checkpoint *out, char *err, size_t errlen);

const struct dra_prepared *dra_checkpoint_find(const struct dra_checkpoint *cp, const char *uid);
int dra_checkpoint_put(struct dra_checkpoint *cp, const struct dra_prepared *p); /* replaces same UID */
bool dra_checkpoint_remove(struct dra_checkpoint *cp, const char *uid);          /* false: not there */
void dra_checkpoint_free(struct dra_checkpoint *cp);

#endif
