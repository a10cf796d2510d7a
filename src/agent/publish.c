/* publish.c: labels, MIG status, CDI spec and metrics, written when they change (see publish.h). */
#include "agent/publish.h"

#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/metrics_http.h"
#include "agent/state.h"
#include "cdi/cdi.h"
#include "cdi/nodespec.h"
#include "core/labels.h"
#include "util/log.h"
#include "util/util.h"

/* Writes a file other components read (atomically, creating its directory); logs a failure. */
static int write_state_file(const char *path, const char *text, size_t len, const char *what) {
    char dir[PATH_MAX];
    gs_strlcpy(dir, path, sizeof(dir));
    gs_mkdir_p(dirname(dir), 0755);
    int r = gs_write_file_atomic(path, text, len, false);
    if (r < 0)
        log_warn("Cannot write %s to %s: %s", what, path, strerror(-r));
    return r;
}

void agent_publish_labels(struct agent *a) {
    if (!a->o->features_file || !a->o->features_file[0] || !a->plan_valid)
        return;
    size_t cap = 1 << 16;
    char *text = malloc(cap);
    int n = text ? gs_labels_format(a->inv, a->policy, &a->plan, a->pub.mig_state[0] ? a->pub.mig_state : NULL, text, cap)
                 : -ENOMEM;
    if (n < 0) {
        log_warn("Cannot build the node labels: %s", strerror(-n));
        free(text);
        return;
    }
    if (a->pub.labels && !strcmp(a->pub.labels, text)) {
        free(text);
        return;
    }
    if (write_state_file(a->o->features_file, text, (size_t)n, "the node labels") < 0) {
        free(text);
        return;
    }
    log_info("Node labels written to %s", a->o->features_file);
    free(a->pub.labels);
    a->pub.labels = text;
}

void agent_publish_mig_status(struct agent *a, const char *state, const char *reason) {
    gs_strlcpy(a->pub.mig_state, state, sizeof(a->pub.mig_state));
    agent_publish_labels(a);
    if (!a->o->mig_status_path)
        return;
    json_t *j = json_pack("{s:s,s:s,s:s,s:I}", "state", state, "config", a->policy->mig_config, "reason",
                          reason ? reason : "", "updated", (json_int_t)time(NULL));
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!text)
        return;
    write_state_file(a->o->mig_status_path, text, strlen(text), "the MIG status");
    free(text);
}

static void set_cdi_error(struct agent *a, const char *err) {
    gs_strlcpy(a->pub.cdi_error, err, sizeof(a->pub.cdi_error));
    agent_shared_set_cdi(&a->shared, NULL, err); /* Allocate says why a device is not in the spec */
}

static void warn_cdi_conflict(void *ctx, const char *msg) {
    (void)ctx;
    log_warn("CDI: %s: the runtime refuses devices two specs define; set another --cdi-kind", msg);
}

/* The node's CDI spec (CDI_ROOT/gpuslice.json) names every GPU and MIG device of the inventory, so
 * it is written before the plan that advertises them is served. It stays when the agent stops:
 * running containers were created from it. */
void agent_publish_cdi_spec(struct agent *a) {
    if (!a->o->cdi_root || !a->o->cdi_root[0])
        return;
    char *text = NULL, err[512];
    unsigned n_files = 0;
    const char *read_root = a->o->container_driver_root && a->o->container_driver_root[0] ? a->o->container_driver_root
                            : a->policy->container_driver_root[0]                         ? a->policy->container_driver_root
                                                                                          : a->policy->driver_root;
    int r = gs_cdi_node_spec(a->inv, a->o->proc_root, a->policy->driver_root, read_root,
                             a->o->cdi_kind ? a->o->cdi_kind : GS_CDI_KIND, a->o->cdi_hook, &text, &n_files, err,
                             sizeof(err));
    if (r < 0) {
        if (strcmp(err, a->pub.cdi_error) != 0)
            log_warn("CDI spec not written: %s", err);
        set_cdi_error(a, err);
        return;
    }
    bool was_failing = a->pub.cdi_error[0] != '\0';
    set_cdi_error(a, "");
    if (agent_shared_cdi_is(&a->shared, text)) {
        free(text);
        return;
    }
    if (was_failing)
        log_info("CDI spec can be written again");
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/gpuslice.json", a->o->cdi_root);
    if ((r = gs_mkdir_p(a->o->cdi_root, 0755)) < 0 || (r = gs_write_file_atomic(path, text, strlen(text), false)) < 0) {
        snprintf(err, sizeof(err), "cannot write %.300s: %s", path, strerror(-r));
        log_error("CDI spec not written: %s", err);
        set_cdi_error(a, err);
        free(text);
        return;
    }
    if (!a->pub.cdi_written) {
        log_info("CDI spec written to %s (%u driver files from %s, read at %s)", path, n_files, a->policy->driver_root,
                 read_root);
        const char *dirs[] = { "/etc/cdi", "/var/run/cdi", a->o->cdi_root };
        gs_cdi_scan_dirs(a->o->cdi_kind ? a->o->cdi_kind : GS_CDI_KIND, text, dirs, 3, "gpuslice", warn_cdi_conflict,
                         NULL);
    }
    a->pub.cdi_written = true;
    agent_shared_set_cdi(&a->shared, text, ""); /* read by Allocate */
}

/* Renders the metrics from the state the main loop holds now and hands them to the HTTP thread:
 * a scrape sees the state of the last loop iteration (at most one poll interval old). */
void agent_publish_metrics(struct agent *a) {
    if (!a->pub.metrics || !a->plan_valid)
        return;
    /* One buffer kept across iterations, grown when the text outgrows it (up to 16 MiB) and
     * shrunk when the text falls under a quarter of it: rendering every 200 ms into a fresh
     * buffer would churn the allocator, and a buffer that only grows would keep a peak resident. */
    enum { MIN_CAP = 64 * 1024, MAX_CAP = 16 << 20 };
    int n;
    for (;;) {
        if (!a->pub.metrics_text) {
            size_t cap = a->pub.metrics_cap ? a->pub.metrics_cap : MIN_CAP;
            a->pub.metrics_text = malloc(cap);
            if (!a->pub.metrics_text)
                return;
            a->pub.metrics_cap = cap;
        }
        n = agent_shared_metrics(&a->shared, a->inv, &a->plan, &a->health, a->pub.metrics_text, a->pub.metrics_cap);
        if (n != -ENOSPC || a->pub.metrics_cap >= MAX_CAP)
            break;
        free(a->pub.metrics_text);
        a->pub.metrics_text = NULL;
        a->pub.metrics_cap *= 2;
    }
    if (n >= 0) {
        metrics_http_publish(a->pub.metrics, a->pub.metrics_text, (size_t)n);
        if (a->pub.metrics_cap > MIN_CAP && (size_t)n < a->pub.metrics_cap / 4) {
            free(a->pub.metrics_text); /* the next render allocates half */
            a->pub.metrics_text = NULL;
            a->pub.metrics_cap /= 2;
        }
    } else if (n != a->pub.metrics_err) {
        log_warn("Cannot render the metrics: %s%s", strerror(-n),
                 n == -ENOSPC ? " (the text is over 16 MiB)" : ""); /* once per cause */
    }
    a->pub.metrics_err = n < 0 ? n : 0;
}

void agent_pub_free(struct agent_pub *p) {
    metrics_http_stop(p->metrics);
    p->metrics = NULL;
    free(p->metrics_text);
    p->metrics_text = NULL;
    free(p->labels);
    p->labels = NULL;
}
