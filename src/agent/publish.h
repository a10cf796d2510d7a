/* publish.h: what the agent publishes for other components, each rendered from the main thread's
 * state and written (atomically) only when it changed: the node labels (Node Feature Discovery's
 * features file), the MIG layout status, the node's CDI spec, and the metrics text handed to the
 * HTTP thread (metrics_http.h). */
#ifndef GS_AGENT_PUBLISH_H
#define GS_AGENT_PUBLISH_H

#include <stdbool.h>
#include <stddef.h>

struct agent;
struct metrics_http;

struct agent_pub {
    char *labels;                  /* the features file as last written */
    char mig_state[16];            /* state of the policy's MIG layout, "" before the first try */
    bool cdi_written;              /* the CDI spec was written once */
    char cdi_error[256];           /* why it could not be written, as last logged ("": it was) */
    struct metrics_http *metrics;  /* NULL: no metrics */
    char *metrics_text;            /* agent_publish_metrics' buffer, metrics_cap bytes */
    size_t metrics_cap;
    int metrics_err;               /* its last error (logged once per cause) */
};

/* Rewrites the features file when the labels changed (with a plan; --features-file given). */
void agent_publish_labels(struct agent *a);

/* The MIG layout's state ("pending", "applied", "failed") in the labels and the status file. */
void agent_publish_mig_status(struct agent *a, const char *state, const char *reason);

/* Writes CDI_ROOT/gpuslice.json when it changed, and tells Allocate what it names (or why it
 * could not be written). */
void agent_publish_cdi_spec(struct agent *a);

/* Renders the metrics and hands them to the HTTP thread: a scrape sees the state of the last loop
 * round. */
void agent_publish_metrics(struct agent *a);

/* Stops the metrics server, frees what was published. */
void agent_pub_free(struct agent_pub *p);

#endif
