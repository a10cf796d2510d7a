/* api.c: the doctor's API-server findings from what src/cli/doctor.c asked (pure): access and
 * authentication, the agent's Node, NVIDIA's MIG manager's label on it, DRA's API and RBAC. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "doctor/doctor.h"

#define S(x) ((x) ? (x) : "")

#define FIX_RBAC                                                                                                       \
    "the chart's RBAC: its ClusterRole grants the agent's service account get on nodes (and, with dra.enabled, "       \
    "resourceslices); check it with kubectl auth can-i get nodes --as system:serviceaccount:NAMESPACE:RELEASE"

static void access_findings(struct gs_doc_report *r, const struct gs_doc_api *a) {
    const char *node = S(a->node);
    switch (a->node_r) {
    case 0:
    case -ENOENT: /* the server answered the request: authenticated and allowed */
        gs_doc_add(r, "api", GS_DOC_OK, NULL, "%s (%s): authenticated, GET /api/v1/nodes/%s answered", a->server,
                   S(a->source), node);
        break;
    case -EACCES:
        gs_doc_add(r, "api", GS_DOC_FAIL,
                   "the API server refuses the credentials: renew the kubeconfig's token or certificate; in the "
                   "chart the service account's token is mounted into the doctor and the agent (the api-token "
                   "volume)",
                   "%s (%s): 401 Unauthorized: %s", a->server, S(a->source), S(a->node_err));
        break;
    case -EPERM:
        gs_doc_add(r, "api", GS_DOC_FAIL, FIX_RBAC, "%s (%s): authenticated, but may not get Node %s: %s", a->server,
                   S(a->source), node, S(a->node_err));
        break;
    default:
        gs_doc_add(r, "api", GS_DOC_WARN,
                   "check the API server and the node's way to it; the agent checks in the background and never "
                   "waits on it beyond its bounds",
                   "%s (%s) did not answer: %s: the Node's checks were not made", a->server, S(a->source),
                   S(a->node_err));
        break;
    }
}

static void node_findings(struct gs_doc_report *r, const struct gs_doc_api *a) {
    const char *node = S(a->node);
    if (a->node_r == -ENOENT) {
        gs_doc_add(r, "api.node", GS_DOC_FAIL,
                   "pass --node-name with the Node's name as the kubelet registered it (kubectl get nodes); the "
                   "chart sets NODE_NAME from spec.nodeName",
                   "no Node %s (the name from %s): the agent would check a Node that does not exist", node,
                   S(a->node_from));
        return;
    }
    if (a->node_r < 0)
        return;
    gs_doc_add(r, "api.node", GS_DOC_OK, NULL, "Node %s exists (the name from %s)", node, S(a->node_from));
    bool manages = a->mig_config && a->mig_config[0];
    if (a->mig_label && manages) {
        char fix[GS_DOC_TEXT_MAX];
        snprintf(fix, sizeof(fix),
                 "turn NVIDIA's MIG manager off (GPU Operator: migManager.enabled=false) and remove the label: "
                 "kubectl label node %.200s " GS_DOC_MIG_LABEL "- (docs/operator.md)",
                 node);
        gs_doc_add(r, "api.mig-manager", a->mig_warn ? GS_DOC_WARN : GS_DOC_FAIL, fix,
                   "Node %s carries " GS_DOC_MIG_LABEL "=%s, the label NVIDIA's MIG manager acts on, and the policy "
                   "has a MIG layout (gpuslice.mig.config: %s): two MIG managers would fight over the GPUs; %s",
                   node, a->mig_label, a->mig_config,
                   a->mig_warn ? "the agent applies its layout anyway (gpuslice.coexistence.otherMigManager: warn)"
                               : "the agent applies no MIG layout while it is there "
                                 "(gpuslice.coexistence.otherMigManager: refuse)");
    } else if (a->mig_label) {
        gs_doc_add(r, "api.mig-manager", GS_DOC_OK, NULL,
                   "Node %s carries " GS_DOC_MIG_LABEL "=%s; the policy leaves MIG alone (no gpuslice.mig.config), "
                   "so NVIDIA's MIG manager may own it",
                   node, a->mig_label);
    } else {
        gs_doc_add(r, "api.mig-manager", GS_DOC_OK, NULL, "Node %s has no " GS_DOC_MIG_LABEL " label%s%s", node,
                   manages ? ": no other MIG manager is asked to change its GPUs; the policy's layout: " : "",
                   manages ? a->mig_config : "");
    }
}

static void dra_findings(struct gs_doc_report *r, const struct gs_doc_api *a) {
    if (!a->dra || (a->node_r < 0 && a->node_r != -ENOENT))
        return;
    if (a->dra_api_r == 0)
        gs_doc_add(r, "api.dra", GS_DOC_OK, NULL, "resource.k8s.io/v1 is served (the DRA driver's ResourceSlices)");
    else
        gs_doc_add(r, "api.dra", GS_DOC_FAIL,
                   a->dra_api_r == -ENOENT ? "the DRA driver needs Kubernetes 1.34 or later (resource.k8s.io/v1); "
                                             "or run the agent without --dra"
                                           : "check the API server; the DRA driver publishes through it",
                   "GET /apis/resource.k8s.io/v1: %s", S(a->dra_api_err));
    if (a->sar_r < 0)
        gs_doc_add(r, "api.dra.rbac", GS_DOC_FAIL,
                   "the API server must answer SelfSubjectAccessReviews (authorization.k8s.io/v1); every "
                   "authenticated user may create them",
                   "whether these credentials may create ResourceSlices is not known: %s", S(a->sar_err));
    else if (!a->sar_allowed)
        gs_doc_add(r, "api.dra.rbac", GS_DOC_FAIL, FIX_RBAC,
                   "these credentials may not create resource.k8s.io resourceslices (SelfSubjectAccessReview%s%s)",
                   a->sar_reason && a->sar_reason[0] ? ": " : "", S(a->sar_reason));
    else
        gs_doc_add(r, "api.dra.rbac", GS_DOC_OK, NULL,
                   "these credentials may create resource.k8s.io resourceslices (SelfSubjectAccessReview)");
}

void gs_doc_api_findings(struct gs_doc_report *r, const struct gs_doc_api *a) {
    if (!a->server) {
        if (a->bad_config)
            gs_doc_add(r, "api", GS_DOC_FAIL,
                       "correct the kubeconfig (or the service account's files), or leave --kubeconfig out",
                       "the API server's configuration cannot be used: %s", S(a->why_none));
        else
            gs_doc_add(r, "api", GS_DOC_WARN,
                       "run the doctor with --kubeconfig FILE, or in the cluster with the service account's token "
                       "(the chart mounts it)",
                       "no API access (%s): the Node's checks (its name, " GS_DOC_MIG_LABEL "%s) were not made; the "
                       "node can work without them",
                       S(a->why_none), a->dra ? ", DRA's API and RBAC" : "");
        return;
    }
    access_findings(r, a);
    node_findings(r, a);
    dra_findings(r, a);
}
