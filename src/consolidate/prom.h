/* prom.h: `gpuslice plan`'s Prometheus source: range queries over a window on gpuslice's metrics,
 * the pods' memory and utilization:
 *
 *   sum by (namespace, pod) (gpuslice_guard_memory_used_bytes{pod!=""})
 *   sum by (namespace, pod) (gpuslice_pod_gpu_utilization_ratio{pod!=""})
 *
 * each pod's key "NAMESPACE/POD". The answer's parser (cs_prom_feed) is pure; cs_prom_query_range
 * does the HTTP request (libcurl, loaded as src/kube/curlload.h loads it), bounded in time and
 * size. */
#ifndef GS_CONSOLIDATE_PROM_H
#define GS_CONSOLIDATE_PROM_H

#include <stddef.h>

#include "consolidate/series.h"

#define CS_PROM_MEMORY_QUERY "sum by (namespace, pod) (gpuslice_guard_memory_used_bytes{pod!=\"\"})"
#define CS_PROM_DUTY_QUERY "sum by (namespace, pod) (gpuslice_pod_gpu_utilization_ratio{pod!=\"\"})"
#define CS_PROM_MAX_POINTS 11000 /* Prometheus refuses more points per series in one query */

struct cs_prom_query {
    const char *url;         /* the server: http://HOST:PORT (a path prefix allowed) */
    double start, end, step; /* seconds */
    long timeout_ms;         /* the whole request */
    size_t max_body;         /* bytes */
};

/* Feeds the samples of a query_range answer (JSON) to the builder's current pass. `what` names the
 * query in errors ("memory query"). Returns 0 or -EINVAL with err set (not JSON, status not
 * success, not a matrix, a series without namespace or pod labels, a value that is not a number). */
int cs_prom_feed(struct cs_builder *b, enum cs_metric m, const char *what, const char *body, size_t len, char *err,
                 size_t errlen);

/* GET URL/api/v1/query_range for the query. On success the body (NUL-terminated, caller frees).
 * Errors name the server: connection refused or timed out, an HTTP status other than 200 (with the
 * answer's error text), a body over max_body. */
int cs_prom_query_range(const struct cs_prom_query *q, const char *query, char **body, size_t *len, char *err,
                        size_t errlen);

/* Parses a duration: "7d", "24h", "90m", "3600s", "3600". Returns 0 or -EINVAL. */
int cs_parse_duration(const char *s, double *seconds);

#endif
