/* model.h: the scheduler extender's cluster model and its decisions, in the placement engine's terms
 * (src/place/place.h). Pure: no I/O, no JSON.
 *
 * Nodes are the engine's pl_node (CPU, memory, one GPU model, free milli-GPU per GPU) with a name,
 * their GPUs' memory and time-slicing replicas; a pod is what it asks of a GPU (whole GPUs, or a
 * share of one GPU in compute percent and/or memory) and is turned into the engine's pl_pod per
 * node, because a memory share is a different fraction of GPUs of different sizes. Pods bound are
 * committed to the engine (pl_commit) with the GPUs chosen, so the free fractions are per GPU.
 *
 * A fractional pod (gpuslice.io/gpu-memory and/or gpuslice.io/gpu-compute) fits a GPU when its
 * memory fits the GPU's free memory and its compute the GPU's free compute, each counted apart
 * (share.h): the node's guard enforces the two as separate budgets. The engine's one figure of
 * such a GPU is the smaller of its two free fractions (what a whole-GPU or milli-GPU pod may
 * take); a fractional pod is scored on the node as it sees it, each GPU that holds it in both
 * dimensions offering its free milli after the pod plus the pod's figure (the larger of its two
 * fractions), so that the engine's state after the pod is exact on the GPU it takes, and the GPUs
 * that do not hold it less than its figure. Nodes without fractional pods, every pod that is not
 * fractional, and compute alone on GPUs whose fractional pods ask compute alone (the one figure
 * exactly) are decided on the one figure as before.
 *
 *   filter      per-GPU fit: a node is failed when no set of its GPUs holds the pod, whatever the
 *               node's sum (what the scheduler's NodeResourcesFit sees); with a reason.
 *   prioritize  the policy's score of each fitting node (pl_score_node): 10 for one node, the best raw
 *               score's (exact ties: the smallest name, as the FGD paper's simulator breaks them), the
 *               others mapped linearly onto 1..9, 0 for a node that does not fit.
 *   bind        the GPU(s) the pod takes on the chosen node (the policy's choice), committed. */
#ifndef GS_EXTENDER_MODEL_H
#define GS_EXTENDER_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "extender/share.h"
#include "place/place.h"

#define EX_NAME_MAX 254 /* a Kubernetes object name: at most 253 characters */
#define EX_UID_MAX 64
#define EX_REASON_MAX 200
#define EX_SPEC_MAX 256 /* ex_pod.gpu_spec: longer lists are taken as any model */
#define EX_PRODUCT_LABEL "gpuslice.io/gpu.product"
#define EX_MAX_PRIORITY 10 /* the extender API's MaxExtenderPriority */
#define EX_OBS_MAX 20000   /* pods kept for FGD's target workload */
/* The most node names one request may name (ex_model_names_max): the nodes the model's source
 * knows plus a margin, at most this (Kubernetes is tested to 5,000 nodes, large clusters run 15,000). */
#define EX_REQ_NODES_MAX 15000
/* Pods told to the policy and not bound yet, remembered: the oldest such pod's observation is
 * withdrawn when a newer pod needs its place (a pod retried after that is observed again), so
 * pods made up and never bound weigh at most this much in the estimate. */
#define EX_PENDING_MAX 1024
/* gpuslice.io/plan-gpu: the group `gpuslice plan` put the pod in (its GPU of the plan); at most
 * EX_PLAN_MAX - 1 characters of [A-Za-z0-9._-], else the pod has no group */
#define EX_ANN_PLAN_GPU "gpuslice.io/plan-gpu"
#define EX_PLAN_MAX 64

struct ex_node_spec {
    char name[EX_NAME_MAX];
    int64_t cpu, mem;         /* allocatable milli-CPU and MiB */
    char model[PL_MODEL_LEN]; /* GPU product ("" with no GPU) */
    int n_gpu;
    int64_t gpu_mem_mib;       /* memory of one GPU (0: not known) */
    int replicas;              /* time-slicing replicas per GPU (0 or 1: whole GPUs) */
    int gpu_free[PL_MAX_GPUS]; /* free milli-GPU per GPU (1000 each when nothing is bound) */
};

/* A pod's ResourceClaims (pod.spec.resourceClaims; claims.h judges them). */
#define EX_CLAIMS_MAX 4
struct ex_claim_ref {
    char entry[64];          /* the pod's name for it */
    char claim[EX_NAME_MAX]; /* resourceClaimName, or the claim made from the template ("": not yet) */
    char tmpl[EX_NAME_MAX];  /* resourceClaimTemplateName ("": none) */
};
struct ex_pod_claims {
    int n;
    struct ex_claim_ref r[EX_CLAIMS_MAX];
};

/* What a pod asks of GPUs (requests, or limits where requests are not given). */
struct ex_pod {
    char uid[EX_UID_MAX];
    char ns[EX_NAME_MAX], name[EX_NAME_MAX];
    int64_t cpu, mem;    /* milli-CPU, MiB */
    int gpus;            /* nvidia.com/gpu: whole GPUs, or replicas of time-sliced GPUs */
    int compute_pct;     /* gpuslice.io/gpu-compute: percent of one GPU (0: none) */
    int64_t gpu_mem_mib; /* gpuslice.io/gpu-memory (0: none) */
    /* the GPU models its required node affinity (or nodeSelector) allows on gpuslice.io/gpu.product,
     * '|'-separated as the trace's gpu_spec; "": any. The scheduler enforces the affinity before the
     * extender is asked; the policy needs it too (which GPUs a pod may take, in its estimate and
     * scores) */
    char gpu_spec[EX_SPEC_MAX];
    struct ex_pod_claims claims;
    char plan_gpu[EX_PLAN_MAX]; /* its gpuslice.io/plan-gpu ("": none; see ex_prioritize) */
};

/* A pod observed (ex_observe) and not bound yet. */
struct ex_pending {
    char uid[EX_UID_MAX]; /* "": a free entry */
    uint64_t hash;        /* the uid's */
    struct pl_pod q;      /* as observed */
    size_t obs_seq;       /* FGD: its place in obs (obs_total when observed) */
    bool live;            /* its observation counts (not bound, not withdrawn) */
};

struct ex_bound {
    char uid[EX_UID_MAX];
    size_t node;
    struct pl_pod pod; /* the pod's figure on its node (a fractional pod's: its larger fraction) */
    struct pl_choice choice;
    bool frac;           /* a fractional pod: it holds req of its GPU's memory and compute */
    struct ex_share req;
    uint64_t plan;       /* its plan group's hash (namespace and gpuslice.io/plan-gpu; 0: none) */
};

struct ex_model {
    struct pl_cluster c;
    struct pl_node *base; /* each node as it was built, nothing bound (ex_release) */
    enum pl_policy policy;
    char (*names)[EX_NAME_MAX];
    int64_t *gpu_mem;
    int *replicas;
    struct ex_share (*share)[PL_MAX_GPUS]; /* per node and GPU: what its fractional pods hold */
    uint64_t (*plan)[PL_MAX_GPUS];         /* per node and GPU: the plan group of its first pod of one (0: none) */
    uint32_t *slots; /* open addressing: node index + 1 (0: empty) */
    uint64_t *name_hash; /* per node: its name's hash, compared before the name */
    size_t n_slots;
    struct ex_bound *bound;
    size_t n_bound, cap_bound;
    struct ex_pending *pend; /* EX_PENDING_MAX, a ring: the pods observed not bound yet */
    size_t next_pend;
    size_t n_known; /* nodes the source knows, with or without GPUs (ex_model_note_nodes) */
    struct pl_pod *obs; /* FGD's target workload: the pods seen (the last EX_OBS_MAX) */
    bool *obs_dead;     /* per obs entry: withdrawn */
    size_t n_obs, next_obs, obs_at_targets, obs_total;
    struct ex_dra *dra; /* the DRA driver's devices and claims (claims.h), borrowed; NULL: none */
    struct pl_pod *wl;  /* FGD's target workload given (ex_model_set_workload); then obs is not used */
    char **wl_specs;    /* their gpu_spec text, for the masks of a rebuilt model's table */
    size_t n_wl;
};

enum ex_verdict { EX_FIT, EX_FAIL, EX_UNRESOLVABLE };

/* Builds the model of n nodes under policy pol (not random). -EINVAL with the node and field in
 * err (a duplicate name, too many GPUs, a GPU model table full), -ENOMEM. */
int ex_model_init(struct ex_model *m, enum pl_policy pol, const struct ex_node_spec *nodes, size_t n, char *err,
                  size_t errlen);
void ex_model_free(struct ex_model *m);
/* The node's index, or -1. */
long ex_model_find(const struct ex_model *m, const char *name);
/* The source knows n nodes in all (the API server's Nodes, also those without GPUs, which the
 * model leaves out): what ex_model_names_max allows. */
void ex_model_note_nodes(struct ex_model *m, size_t n);
/* The most node names a request may name: the nodes known (the model's, or as noted) plus a
 * quarter and 256 (the scheduler's cache may be ahead of the source), at most EX_REQ_NODES_MAX. */
size_t ex_model_names_max(const struct ex_model *m);
/* The nodes known (the model's, or as noted). */
size_t ex_model_nodes_known(const struct ex_model *m);
/* Whether the pod asks for any GPU. */
bool ex_pod_wants_gpu(const struct ex_pod *p);

/* The pod in the engine's terms on node i: 0, or EX_UNRESOLVABLE's cause as -EINVAL with the
 * reason (more memory than the node's GPUs have, a share beside a whole-GPU count, more GPUs
 * than the node has). */
int ex_pod_on_node(const struct ex_model *m, size_t i, const struct ex_pod *p, struct pl_pod *out, char *why,
                   size_t len);

/* filter for one node by name: the verdict and, unless EX_FIT, the reason. A node the model does
 * not know fits a pod that asks for no GPU, and is unresolvable for one that does. */
enum ex_verdict ex_filter(struct ex_model *m, const struct ex_pod *p, const char *node, char *why, size_t len);
/* prioritize: scores[k] in 0..EX_MAX_PRIORITY for nodes[k] (see above). A pod of a plan group
 * (gpuslice.io/plan-gpu, the group its namespace and the value name) that fits one GPU goes first
 * to a node with a GPU that holds pods of its group and fits it, then to a node with an idle GPU
 * that fits it, the policy's score deciding within each; bind takes that GPU (the group's fullest
 * after the pod, or the idle one of the policy's choice, else the first). A pod without a group is
 * decided by the policy alone. */
void ex_prioritize(struct ex_model *m, const struct ex_pod *p, const char *const *nodes, size_t n, int64_t *scores);
/* Tells the policy about the pod, once per uid while it waits (no uid: every time): gpuslice's
 * online estimate (pl_observe), or FGD's target workload (pl_set_targets over the pods seen,
 * refreshed as they grow by 2 %; the paper's FGD takes it from the trace, a scheduler only has the
 * past). The pod is remembered as pending until it is bound (ex_bind, ex_commit); of the pending
 * pods at most EX_PENDING_MAX are remembered, the oldest one's observation withdrawn
 * (pl_unobserve, or out of FGD's window) for a newer one; a pod asked about again (the
 * scheduler's retry) is moved to the newer half, so that pods retried are not withdrawn. */
void ex_observe(struct ex_model *m, const struct ex_pod *p);

/* FGD's target workload given instead of learnt: n pods (their gpu_spec text in specs[i], "" or
 * NULL for any model; each pod's model mask is taken from its spec against the model's table),
 * e.g. the pod list of a platform's history. From then on the pods seen do not change FGD's
 * targets; kept across ex_model_rebuild. -ENOMEM, -EINVAL (no pods, a spec naming more models than
 * the table holds) with the reason in err. */
int ex_model_set_workload(struct ex_model *m, const struct pl_pod *pods, const char *const *specs, size_t n,
                          char *err, size_t errlen);

/* bind: the GPUs the pod takes on node (the policy's choice), committed to the model; *out the
 * choice. -ENOENT (node not known), -ENOSPC (it does not fit now, with why), -EALREADY (the uid
 * is bound already: *out its choice). */
int ex_bind(struct ex_model *m, const struct ex_pod *p, const char *node, struct pl_choice *out, char *why, size_t len);
/* Commits a pod bound elsewhere (a known GPU choice, e.g. from its annotation): -EALREADY when its
 * uid is bound, -ENOENT, -ENOSPC when a GPU has not enough free, -EINVAL for a bad GPU index. */
int ex_commit(struct ex_model *m, const struct ex_pod *p, const char *node, const struct pl_choice *ch);
/* Commits a pod bound elsewhere without a known GPU choice, as the node chooses (best fit: the
 * fullest GPU(s) that hold it); *out the choice. Errors as ex_commit's. */
int ex_commit_best_fit(struct ex_model *m, const struct ex_pod *p, const char *node, struct pl_choice *out);
/* Gives the share of the bound pod uid back (a pod that finished or left): its node is rebuilt from
 * its base and the node's other pods committed again in their order. -ENOENT when not bound. */
int ex_release(struct ex_model *m, const char *uid);
/* Replaces the nodes with n others (the API server's Nodes changed): the pods bound on nodes
 * still there are committed again, those on nodes gone are dropped; the policy's observations
 * (gpuslice's estimate, FGD's workload, the pods seen) are kept. On error the model is unchanged. */
int ex_model_rebuild(struct ex_model *m, const struct ex_node_spec *nodes, size_t n, char *err, size_t errlen);
/* The bound pod of uid, or NULL. */
const struct ex_bound *ex_find_bound(const struct ex_model *m, const char *uid);

#endif
