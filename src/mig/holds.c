/* holds.c: devices pods hold, as a MIG layout change sees them (see holds.h). */
#include "mig/holds.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* The length of the device a device ID names: all of it, or what comes before "::<n>". */
static size_t device_part(const char *id) {
    const char *sep = strstr(id, "::");
    if (!sep || !sep[2])
        return strlen(id);
    for (const char *c = sep + 2; *c; c++)
        if (*c < '0' || *c > '9')
            return strlen(id);
    return (size_t)(sep - id);
}

static bool names(const char *id, size_t len, const char *uuid) {
    return uuid[0] && strlen(uuid) == len && !strncmp(id, uuid, len);
}

/* The UUID in inv that the device ID names, or NULL. */
static const char *device_of(const struct gs_inventory *inv, const char *id) {
    size_t len = device_part(id);
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_gpu *g = &inv->gpus[i];
        if (names(id, len, g->uuid))
            return g->uuid;
        for (unsigned k = 0; k < g->n_mig; k++)
            if (names(id, len, g->mig[k].uuid))
                return g->mig[k].uuid;
    }
    return NULL;
}

int gs_mig_holds_find(const struct gs_inventory *inv, const struct pr_list *l, struct gs_mig_holds *out) {
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < l->n; i++) {
        const struct pr_assignment *a = &l->items[i];
        const char *uuid = device_of(inv, a->device_id);
        if (!uuid)
            continue;
        if (!out->items && !(out->items = calloc(l->n, sizeof(*out->items))))
            return -ENOMEM;
        struct gs_mig_hold *h = &out->items[out->n++];
        gs_strlcpy(h->uuid, uuid, sizeof(h->uuid));
        gs_strlcpy(h->device_id, a->device_id, sizeof(h->device_id));
        snprintf(h->who, sizeof(h->who), "%s/%s, container %s", a->ns, a->pod, a->container);
    }
    return 0;
}

void gs_mig_holds_free(struct gs_mig_holds *h) {
    free(h->items);
    memset(h, 0, sizeof(*h));
}

static bool destroys(const struct gs_mig_plan *p, const struct gs_mig_device *m) {
    for (unsigned k = 0; k < p->n_steps; k++) {
        const struct gs_mig_step *s = &p->steps[k];
        if ((s->kind == GS_STEP_DESTROY_GI && s->gi_id == m->gi_id) ||
            (s->kind == GS_STEP_DESTROY_CI && s->gi_id == m->gi_id && s->ci_id == m->ci_id))
            return true;
    }
    return false;
}

static bool enables_mig(const struct gs_gpu *g, const struct gs_mig_plan *p) {
    for (unsigned k = 0; k < p->n_steps; k++)
        if (p->steps[k].kind == GS_STEP_SET_MODE && p->steps[k].enable && !g->mig_current)
            return true;
    return false;
}

/* Appends to msg as snprintf would, keeping it terminated once full. */
static void append(char *msg, size_t msglen, size_t *used, const char *text) {
    if (*used + 1 >= msglen)
        return;
    int n = snprintf(msg + *used, msglen - *used, "%s", text);
    *used += n < 0 ? 0 : (size_t)n < msglen - *used ? (size_t)n : msglen - *used - 1;
}

size_t gs_mig_plan_held(const struct gs_gpu *g, const struct gs_mig_plan *p, const struct gs_mig_holds *h, char *msg,
                        size_t msglen) {
    size_t held = 0, used = 0;
    if (msglen)
        msg[0] = '\0';
    for (size_t i = 0; h && i < h->n; i++) {
        const struct gs_mig_hold *x = &h->items[i];
        char what[GS_PROFILE_NAME_LEN + 48] = "";
        if (!strcmp(x->uuid, g->uuid)) {
            if (!enables_mig(g, p))
                continue;
            snprintf(what, sizeof(what), "the whole GPU");
        } else {
            const struct gs_mig_device *m = NULL;
            for (unsigned k = 0; k < g->n_mig && !m; k++)
                if (!strcmp(x->uuid, g->mig[k].uuid))
                    m = &g->mig[k];
            if (!m || !destroys(p, m))
                continue;
            snprintf(what, sizeof(what), "GI %u, %s", m->gi_id, m->profile);
        }
        char line[sizeof(x->device_id) + sizeof(what) + sizeof(x->who) + 16];
        snprintf(line, sizeof(line), "%s%s (%s) to %s", held ? "; " : "", x->device_id, what, x->who);
        append(msg, msglen, &used, line);
        held++;
    }
    return held;
}
