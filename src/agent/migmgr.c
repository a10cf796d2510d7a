/* migmgr.c: NVIDIA's MIG manager's label on the agent's Node (see migmgr.h): a thread reads the
 * Node at the inventory poll's pace and hands each answer to the loop through an eventfd. */
#include "agent/migmgr.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "agent/state.h"
#include "kube/kube.h"
#include "util/log.h"
#include "util/util.h"

enum agent_migmgr_verdict agent_migmgr_decide(const struct gs_policy *p, const char *label) {
    if (!label || !p->mig_config[0])
        return AGENT_MIGMGR_CLEAR;
    return p->other_mig_manager == GS_OTHER_MIG_WARN ? AGENT_MIGMGR_WARN : AGENT_MIGMGR_REFUSE;
}

void agent_migmgr_text(enum agent_migmgr_verdict v, const char *node, const char *label, const char *mig_config,
                       char *buf, size_t len) {
    snprintf(buf, len,
             "Node %s carries " AGENT_MIGMGR_LABEL "=%s, the label NVIDIA's MIG manager acts on, and the policy has "
             "a MIG layout (gpuslice.mig.config: %s): two MIG managers would fight over the GPUs; %s; turn NVIDIA's "
             "MIG manager off (GPU Operator: migManager.enabled=false) and remove the label (docs/operator.md)",
             node, label ? label : "", mig_config,
             v == AGENT_MIGMGR_WARN ? "gpuslice applies its layout anyway (gpuslice.coexistence.otherMigManager: warn)"
                                    : "gpuslice applies no MIG layout while the label is there "
                                      "(gpuslice.coexistence.otherMigManager: refuse)");
}

/* The reader's thread: GET the Node, hand the answer over, sleep a poll interval. */
struct agent_migmgr_thread {
    struct kube_client *client;
    struct kube_cancel *cancel;
    pthread_t thread;
    int efd;
    unsigned interval_ms;
    char node[256], path[KUBE_URL_MAX];
    pthread_mutex_t lock;
    struct { /* the last answer, under lock */
        int r;
        bool present;
        char value[AGENT_MIGMGR_VALUE_MAX], err[512];
    } ans;
};

static void *read_node(void *arg) {
    struct agent_migmgr_thread *t = arg;
    kube_cancel_bind(t->cancel);
    do {
        json_t *node = NULL;
        char err[512] = "";
        int r = kube_get(t->client, t->path, &node, err, sizeof(err));
        if (r == -ECANCELED)
            break;
        const char *v = json_string_value(
            json_object_get(json_object_get(json_object_get(node, "metadata"), "labels"), AGENT_MIGMGR_LABEL));
        pthread_mutex_lock(&t->lock);
        t->ans.r = r;
        t->ans.present = v != NULL;
        gs_strlcpy(t->ans.value, v ? v : "", sizeof(t->ans.value));
        gs_strlcpy(t->ans.err, err, sizeof(t->ans.err));
        pthread_mutex_unlock(&t->lock);
        json_decref(node);
        uint64_t one = 1;
        ssize_t w = write(t->efd, &one, sizeof(one));
        (void)w; /* a full counter already wakes the loop */
    } while (kube_cancel_sleep(t->cancel, t->interval_ms) == 0);
    kube_cancel_bind(NULL);
    return NULL;
}

/* Logs the label's news once: appeared, changed, gone, or the policy's view of it changed. */
static void say(struct agent *a) {
    struct agent_migmgr *m = &a->migmgr;
    const char *node = m->t->node;
    enum agent_migmgr_verdict v = agent_migmgr_decide(a->policy, m->present ? m->value : NULL);
    char now[sizeof(m->said)], text[1024];
    snprintf(now, sizeof(now), "%d|%d|%.63s|%.60s", m->present, (int)v, m->value, a->policy->mig_config);
    if (!strcmp(now, m->said))
        return;
    bool was = m->said[0] == '1';
    gs_strlcpy(m->said, now, sizeof(m->said));
    if (v != AGENT_MIGMGR_CLEAR) {
        agent_migmgr_text(v, node, m->value, a->policy->mig_config, text, sizeof(text));
        log_warn("%s", text);
    } else if (m->present) {
        log_info("Node %s carries " AGENT_MIGMGR_LABEL "=%s; the policy leaves MIG alone (no gpuslice.mig.config)",
                 node, m->value);
    } else if (was) {
        log_info("Node %s no longer carries " AGENT_MIGMGR_LABEL "%s", node,
                 a->policy->mig_config[0] ? ": gpuslice applies its MIG layout" : "");
    }
}

/* The label under refuse: the status says so (once; the layout applied before stays). */
static bool refuse(struct agent *a) {
    struct agent_migmgr *m = &a->migmgr;
    if (agent_migmgr_decide(a->policy, m->present ? m->value : NULL) != AGENT_MIGMGR_REFUSE)
        return false;
    if (strcmp(a->pub.mig_state, "refused")) {
        char reason[512];
        snprintf(reason, sizeof(reason),
                 "Node %s carries " AGENT_MIGMGR_LABEL "=%s (NVIDIA's MIG manager): no MIG layout is applied while "
                 "it is there (gpuslice.coexistence.otherMigManager: refuse)",
                 m->t->node, m->value);
        agent_publish_mig_status(a, "refused", reason);
    }
    return true;
}

static void on_answer(void *ctx, int fd) {
    struct agent *a = ctx;
    struct agent_migmgr *m = &a->migmgr;
    uint64_t n;
    while (read(fd, &n, sizeof(n)) > 0)
        ;
    pthread_mutex_lock(&m->t->lock);
    int r = m->t->ans.r;
    bool present = m->t->ans.present;
    char value[AGENT_MIGMGR_VALUE_MAX], err[sizeof(m->said_err)];
    gs_strlcpy(value, m->t->ans.value, sizeof(value));
    gs_strlcpy(err, m->t->ans.err, sizeof(err));
    pthread_mutex_unlock(&m->t->lock);
    if (r < 0 && r != -ENOENT) { /* the last answer stands; the wait at start ends at its deadline */
        if (strcmp(err, m->said_err))
            log_warn("Cannot read Node %s from the API server: %s%s; the " AGENT_MIGMGR_LABEL " check asks again at "
                     "the inventory poll's pace", m->t->node, err,
                     r == -EACCES || r == -EPERM ? " (the chart's RBAC grants get on nodes to the agent's service "
                                                   "account and mounts its token)" : "");
        gs_strlcpy(m->said_err, err, sizeof(m->said_err));
        return;
    }
    if (strcmp(err, m->said_err) && r == -ENOENT)
        log_warn("%s: Node %s does not exist, so it carries no " AGENT_MIGMGR_LABEL "; pass the Node's name with "
                 "--node-name (the chart sets NODE_NAME from spec.nodeName)", err, m->t->node);
    else if (m->said_err[0] && r == 0)
        log_info("Node %s read from the API server again", m->t->node);
    gs_strlcpy(m->said_err, r == 0 ? "" : err, sizeof(m->said_err));
    bool was = m->known && m->present;
    m->known = true;
    m->present = r == 0 && present;
    gs_strlcpy(m->value, m->present ? value : "", sizeof(m->value));
    say(a);
    if (a->policy->mig_config[0] && m->present && !m->deferred)
        refuse(a);
    if (m->deferred || (was && !m->present && !strcmp(a->pub.mig_state, "refused")))
        loop_kick(&a->loop, m->job);
}

bool agent_migmgr_blocks(struct agent *a) {
    struct agent_migmgr *m = &a->migmgr;
    if (!m->t || a->policy->other_mig_manager == GS_OTHER_MIG_WARN) {
        if (m->t && m->known)
            say(a);
        m->deferred = false;
        return false;
    }
    if (!m->known) {
        unsigned long long now = gs_now_ns();
        if (!m->deadline_ns)
            m->deadline_ns = now + AGENT_MIGMGR_WAIT_MS * 1000000ull;
        if (now < m->deadline_ns) {
            if (!m->deferred)
                log_info("MIG layout %s waits for the API server's answer on Node %s's " AGENT_MIGMGR_LABEL
                         " (up to %u s)", a->policy->mig_config, m->t->node, AGENT_MIGMGR_WAIT_MS / 1000);
            m->deferred = true;
            return true;
        }
        if (m->deferred)
            log_warn("The API server did not answer within %u s: MIG layout %s is applied without knowing whether "
                     "Node %s carries " AGENT_MIGMGR_LABEL " (NVIDIA's MIG manager); the check goes on",
                     AGENT_MIGMGR_WAIT_MS / 1000, a->policy->mig_config, m->t->node);
        m->deferred = false;
        return false;
    }
    m->deferred = false;
    say(a);
    return refuse(a);
}

uint64_t agent_migmgr_due(void *ctx) {
    const struct agent *a = ctx;
    return a->migmgr.deferred ? a->migmgr.deadline_ns : UINT64_MAX;
}

/* The API server's configuration: --kubeconfig, else in-cluster; 0, or -errno with why. */
static int open_client(const struct agent_options *o, struct kube_client **c, char *why, size_t len) {
    struct kube_config cfg = { 0 };
    int r = o->kubeconfig ? kube_config_load(o->kubeconfig, NULL, &cfg, why, len)
                          : kube_config_in_cluster(NULL, &cfg, why, len);
    if (r == -ENOENT && !o->kubeconfig && !getenv("KUBERNETES_SERVICE_HOST"))
        snprintf(why, len, "no --kubeconfig, and not in a cluster (no KUBERNETES_SERVICE_HOST)");
    struct kube_limits lim = KUBE_DEFAULT_LIMITS;
    lim.connect_timeout_ms = 5000;
    lim.timeout_ms = 10000;
    lim.max_response = (size_t)4 << 20;
    if (r == 0)
        r = kube_client_new(&cfg, &lim, c, why, len);
    kube_config_free(&cfg);
    return r;
}

static void free_thread(struct agent_migmgr_thread *t) {
    if (t->efd >= 0)
        close(t->efd);
    kube_cancel_free(t->cancel);
    kube_client_free(t->client);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

void agent_migmgr_start(struct agent *a) {
    const struct agent_options *o = a->o;
    if (a->migmgr.t || !a->policy->mig_config[0])
        return; /* started, or no MIG layout to guard: no API client (nor libcurl) for it */
    struct agent_migmgr_thread *t = calloc(1, sizeof(*t));
    char why[1024] = "out of memory";
    if (!t)
        goto off;
    t->efd = -1;
    pthread_mutex_init(&t->lock, NULL);
    int r = gs_node_name(o->node_name, t->node, sizeof(t->node), NULL, why, sizeof(why));
    if (r == 0)
        r = open_client(o, &t->client, why, sizeof(why));
    if (r == 0 && (r = kube_path(t->path, sizeof(t->path), "v1", NULL, "nodes", t->node)) < 0)
        snprintf(why, sizeof(why), "'%s' is not a Node name (--node-name, NODE_NAME)", t->node);
    if (r == 0 && (r = kube_cancel_new(&t->cancel)) == 0 && (t->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        r = -errno;
    t->interval_ms = o->poll_ms ? o->poll_ms : 2000;
    if (r == 0 && (r = loop_add_fd(&a->loop, t->efd, on_answer, a)) == 0 &&
        (r = -pthread_create(&t->thread, NULL, read_node, t)) < 0)
        loop_del_fd(&a->loop, t->efd);
    if (r < 0) {
        if (!strcmp(why, "out of memory"))
            snprintf(why, sizeof(why), "%s", strerror(-r));
        goto off;
    }
    a->migmgr.t = t;
    log_info("Reading Node %s from the API server (%s) at the inventory poll's pace, for NVIDIA's MIG manager's "
             AGENT_MIGMGR_LABEL " label", t->node, o->kubeconfig ? o->kubeconfig : "in-cluster");
    return;
off:
    if (t)
        free_thread(t);
    log_info("NVIDIA's MIG manager check is off: %s; the agent does not see the Node's " AGENT_MIGMGR_LABEL " label "
             "(gpuslice doctor names it)", why);
}

void agent_migmgr_stop(struct agent *a) {
    struct agent_migmgr_thread *t = a->migmgr.t;
    if (!t)
        return;
    kube_cancel_fire(t->cancel);
    pthread_join(t->thread, NULL);
    loop_del_fd(&a->loop, t->efd);
    free_thread(t);
    a->migmgr.t = NULL;
}
