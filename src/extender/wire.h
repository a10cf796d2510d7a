/* wire.h: the scheduler extender API's JSON (k8s.io/kube-scheduler/extender/v1) to and from the
 * model's terms. Pure: no I/O (jansson).
 *
 *   ExtenderArgs          {"Pod": {...}, "Nodes": {"items": [...]}, "NodeNames": ["n1", ...]}
 *   ExtenderFilterResult  {"NodeNames": [...], "FailedNodes": {"n2": "why"},
 *                          "FailedAndUnresolvableNodes": {...}, "Error": ""}
 *   HostPriorityList      [{"Host": "n1", "Score": 7}, ...]
 *   ExtenderBindingArgs   {"PodName", "PodNamespace", "PodUID", "Node"} -> {"Error": ""}
 * The API's structs carry no JSON tags, so their keys are the Go field names; they are matched
 * without regard to case, as Go's decoder does. With nodeCacheCapable the scheduler sends
 * NodeNames; without it, Nodes (only the names are used). */
#ifndef GS_EXTENDER_WIRE_H
#define GS_EXTENDER_WIRE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "extender/model.h"

/* The resources a pod asks the extender about. */
#define EX_RES_GPU "nvidia.com/gpu"
#define EX_RES_GPU_SHARED "nvidia.com/gpu.shared"
#define EX_RES_COMPUTE "gpuslice.io/gpu-compute"
#define EX_RES_MEMORY "gpuslice.io/gpu-memory"

/* The pod's identity and requests from a v1.Pod: per resource, the sum over its containers or the
 * largest init container's, whichever is larger (requests, else limits), plus spec.overhead.
 * Every conversion and sum is checked: -EINVAL with the field in err ("Pod.spec.containers[1].
 * resources.requests.cpu: '5x': not a quantity", "...: the pod's sum of nvidia.com/gpu overflows"). */
int ex_pod_from_json(const json_t *pod, struct ex_pod *out, char *err, size_t errlen);

/* The bounds of one ExtenderArgs: its Pod's text and JSON values (what jansson's tree of it costs;
 * the API server stores no object over 1.5 MiB), and the body that the most node names
 * (EX_REQ_NODES_MAX, of at most EX_NAME_MAX - 1 characters, quoted) and such a Pod take: the
 * extender's default HTTP body limit. */
#define EX_POD_BYTES_MAX (3 << 20)
#define EX_POD_VALUES_MAX 65536
#define EX_ARGS_BODY_MAX ((size_t)EX_REQ_NODES_MAX * (EX_NAME_MAX + 3) + EX_POD_BYTES_MAX + 4096)

struct ex_args {
    struct ex_pod pod;
    const char **names; /* into buf */
    size_t n_names;
    char *buf; /* the request's copy */
};
/* Parses ExtenderArgs naming at most max_names nodes (NodeNames, or the names of Nodes.items
 * without a tree of the Nodes). -EBADMSG (not JSON, no Pod, neither NodeNames nor Nodes), -E2BIG
 * (more names than max_names, a Pod over EX_POD_BYTES_MAX or EX_POD_VALUES_MAX) or -EINVAL (a bad
 * request in the pod) with the reason in err. */
int ex_args_parse(const char *body, size_t len, size_t max_names, struct ex_args *a, char *err, size_t errlen);
void ex_args_free(struct ex_args *a);

/* ExtenderFilterResult of the n nodes with their verdicts and reasons (reasons[k] for the failed
 * ones). Returns a malloc'd text and its length in *len, NULL without memory. */
char *ex_filter_render(const char *const *names, const enum ex_verdict *verdicts, char (*reasons)[EX_REASON_MAX],
                       size_t n, size_t *len);
/* A filter result with Error set and no nodes (a request that cannot be answered). */
char *ex_filter_error_render(const char *error, size_t *len);
/* HostPriorityList. */
char *ex_priorities_render(const char *const *names, const int64_t *scores, size_t n, size_t *len);

struct ex_bind_args {
    char name[EX_NAME_MAX], ns[EX_NAME_MAX], uid[EX_UID_MAX], node[EX_NAME_MAX];
};
int ex_bind_args_parse(const char *body, size_t len, struct ex_bind_args *b, char *err, size_t errlen);
/* ExtenderBindingResult ({"Error": error or ""}). */
char *ex_bind_result_render(const char *error, size_t *len);

#endif
