/* agent.c: the node agent's main thread (see agent.h): set-up, the loop's fd sources and jobs,
 * shut-down.
 *
 * The main thread runs the loop (loop.h) on a signalfd, an inotify fd (kubelet directory and the
 * policy file's directory), a timerfd (the inventory poll, the loop's tick), a pipe fed by the
 * NVML event thread (xidwatch.c), and the MPS supervisor's fd. Beside it: the device plugins' gRPC
 * thread answers the kubelet with the handlers of shared.h; the DRA driver's gRPC server
 * (src/kubelet/grpcsrv.c), the metrics server (src/httpd), the API informers (src/kube/informer.c)
 * and the MIG manager's reader (migmgr.c) each have a thread of their own when enabled; gRPC core
 * adds its own. The node's state machine is state.c, MPS mps_glue.c, what is written for others
 * publish.c, the clean-up of gone pods cleanup.c. */
#include "agent/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "agent/cleanup.h"
#include "agent/dra_glue.h"
#include "agent/metrics_http.h"
#include "agent/utilization.h"
#include "agent/state.h"
#include "agent/xidwatch.h"
#include "dra/dra.h"
#include "kubelet/deviceplugin.h"
#include "util/log.h"
#include "util/util.h"

/* ---- memory --------------------------------------------------------------------------------- */

/* Hands freed heap memory back to the kernel when the allocator holds more than 512 KiB free:
 * gRPC allocates per call on its own threads, the simulated NVML parses its state file, and glibc
 * keeps what was freed. Checked at the inventory polls, at most once a second, and only when no
 * Allocate or GetPreferredAllocation call started in the last second (malloc_trim takes the
 * arenas' locks, and would delay a burst of calls). */
static void trim_job(void *ctx, uint64_t now) {
    struct agent *a = ctx;
    unsigned long long last_call = atomic_load(&a->shared.last_call_ns); /* may be after now */
    if (last_call + 1000000000ULL > now || now - a->trim_last_ns < 1000000000ULL)
        return;
    a->trim_last_ns = now;
    struct mallinfo2 mi = mallinfo2();
    if (mi.fordblks > 512 * 1024)
        malloc_trim(0);
}

/* ---- fd sources ------------------------------------------------------------------------------ */

static void on_signal(void *ctx, int fd) {
    struct agent *a = ctx;
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGHUP) {
            log_info("SIGHUP: reloading the policy");
            loop_kick(&a->loop, a->policy_job);
        } else {
            log_info("Signal %u: shutting down", si.ssi_signo);
            loop_stop(&a->loop);
        }
    }
}

static void on_inotify(void *ctx, int fd) {
    struct agent *a = ctx;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *ev = (struct inotify_event *)(void *)p;
            p += sizeof(*ev) + ev->len;
            if (!ev->len)
                continue;
            if (ev->wd == a->kubelet_wd) {
                if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && strcmp(ev->name, "kubelet.sock") == 0) {
                    log_info("kubelet.sock was created: the kubelet restarted; registering again");
                    agent_replan(a, false); /* first: another plugin may serve a resource now (coexist.c) */
                    dp_manager_kubelet_restarted(a->dp);
                } else if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) {
                    dp_manager_socket_deleted(a->dp, ev->name);
                }
            }
            if (ev->wd == a->config_wd && (strcmp(ev->name, a->config_base) == 0 || strcmp(ev->name, "..data") == 0))
                loop_kick(&a->loop, a->policy_job);
        }
    }
}

/* The inventory poll: the loop's tick. */
static void on_timer(void *ctx, int fd) {
    struct agent *a = ctx;
    uint64_t ticks;
    ssize_t r = read(fd, &ticks, sizeof(ticks));
    (void)r;
    loop_tick(&a->loop);
}

static void on_xid(void *ctx, int fd) {
    struct gpu_event ev;
    while (read(fd, &ev, sizeof(ev)) == (ssize_t)sizeof(ev))
        agent_handle_xid(ctx, &ev);
}

/* ---- set-up ---------------------------------------------------------------------------------- */

static int watch_dirs(struct agent *a) {
    a->kubelet_wd = inotify_add_watch(a->inofd, a->o->kubelet_dir, IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM);
    if (a->kubelet_wd < 0) {
        int e = -errno;
        log_error("Cannot watch %s: %s", a->o->kubelet_dir, strerror(-e));
        return e;
    }
    if (a->o->config_path) {
        char tmp[PATH_MAX];
        gs_strlcpy(tmp, a->o->config_path, sizeof(tmp));
        gs_strlcpy(a->config_dir, dirname(tmp), sizeof(a->config_dir));
        gs_strlcpy(tmp, a->o->config_path, sizeof(tmp));
        gs_strlcpy(a->config_base, basename(tmp), sizeof(a->config_base));
        /* The directory, not the file: editors and ConfigMap updates replace the file. */
        a->config_wd = inotify_add_watch(a->inofd, a->config_dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_MASK_ADD);
        if (a->config_wd < 0)
            log_warn("Cannot watch %s for policy changes (%s): SIGHUP still reloads", a->config_dir, strerror(errno));
    }
    return 0;
}

static int setup_sources(struct agent *a) {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    int r = loop_init(&a->loop);
    if (r < 0)
        return r;
    a->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    a->inofd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    a->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    int p[2];
    if (a->sigfd < 0 || a->inofd < 0 || a->timerfd < 0 || pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
        return -errno;
    a->pipe_rd = p[0];
    a->pipe_wr = p[1];
    if ((r = watch_dirs(a)) < 0)
        return r;
    unsigned ms = a->o->poll_ms ? a->o->poll_ms : 2000;
    struct itimerspec its = { { ms / 1000, (long)(ms % 1000) * 1000000L }, { ms / 1000, (long)(ms % 1000) * 1000000L } };
    timerfd_settime(a->timerfd, 0, &its, NULL);
    /* The fd sources; the MPS supervisor's comes and goes with the policy (mps_glue.c). */
    const struct {
        int fd;
        loop_fd_fn *fn;
    } sources[] = {
        { a->sigfd, on_signal },
        { a->inofd, on_inotify },
        { a->timerfd, on_timer },
        { a->pipe_rd, on_xid },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(sources); i++)
        if ((r = loop_add_fd(&a->loop, sources[i].fd, sources[i].fn, a)) < 0)
            return r;
    return 0;
}

/* The periodic jobs, run in this order in a round. Those on the tick run at the inventory poll;
 * an interval of 0 is never. */
static int setup_jobs(struct agent *a) {
    const struct agent_options *o = a->o;
    bool pod_resources = o->pod_resources && o->pod_resources[0];
    const struct loop_job jobs[] = {
        { "MPS supervisor", LOOP_KICKED, 0, agent_mps_job, agent_mps_due },
        { "replan", LOOP_KICKED, 0, agent_replan_job, NULL }, /* kicked by the MPS supervisor's job */
        { "policy reload", LOOP_KICKED, 0, agent_policy_job, NULL },
        { "DRA handover", LOOP_KICKED, 0, agent_dra_handover_job, agent_dra_handover_due }, /* dra_glue.c */
        { "guard GC", LOOP_TICK_INTERVAL, o->guard_gc_ms, agent_guard_gc_job, NULL },
        { "inventory refresh", LOOP_TICK, 0, agent_inventory_job, NULL },
        { "pod attribution", LOOP_TICK_INTERVAL, pod_resources ? o->pod_attribution_ms : 0, agent_attribution_job,
          NULL },
        { "MIG re-lay", LOOP_TICK_INTERVAL, pod_resources ? o->pod_attribution_ms : 0, agent_mig_relay_job, NULL },
        { "guard reconcile", LOOP_TICK_INTERVAL, o->guard_reconcile_ms, agent_guard_reconcile_job, NULL },
        { "pod utilization", LOOP_TICK_INTERVAL, o->pod_attribution_ms, agent_pod_util_job, NULL }, /* utilization.c */
        { "health recovery", LOOP_TICK, 0, agent_recovery_job, NULL },
        { "heap trim", LOOP_TICK, 0, trim_job, NULL },
        { "plan", LOOP_TICK, 0, agent_plan_job, NULL },
        { "MIG manager", LOOP_KICKED, 0, agent_mig_job, agent_migmgr_due }, /* migmgr.c kicks it */
    };
    int ids[GS_ARRAY_SIZE(jobs)];
    for (size_t i = 0; i < GS_ARRAY_SIZE(jobs); i++)
        if ((ids[i] = loop_add_job(&a->loop, &jobs[i], a)) < 0)
            return ids[i];
    a->mps.job = ids[0];
    a->replan_job = ids[1];
    a->policy_job = ids[2];
    a->migmgr.job = ids[GS_ARRAY_SIZE(jobs) - 1];
    return 0;
}

static void start_metrics(struct agent *a) {
    char err[256];
    a->pub.metrics = metrics_http_start(a->o->metrics_address, err, sizeof(err));
    if (a->pub.metrics)
        log_info("Serving metrics on %s (port %u) at /metrics", a->o->metrics_address, metrics_http_port(a->pub.metrics));
    else
        log_error("No metrics: %s; the device plugins run without them", err);
    agent_publish_metrics(a);
}

static void start_events(struct agent *a) {
    if (xidwatch_start(a->node, a->pipe_wr, &a->xid) == 0) {
        a->pipe_wr = -1; /* the event thread's now */
    } else {
        log_warn("Xid events unavailable (%s): health comes from the inventory poll only", gpu_node_error(a->node));
    }
}

/* The DRA driver's kubelet side beside the device plugins, over the same inventory; claims from
 * --dra-claims-dir's files, else none yet (each prepare says so). */
static int start_dra(struct agent *a) {
    const struct agent_options *o = a->o;
    struct dra_options d = {
        .driver = o->dra_driver,
        .registry_dir = o->dra_registry_dir ? o->dra_registry_dir : DRA_REGISTRY_DIR_DEFAULT,
        .plugins_dir = o->dra_plugins_dir ? o->dra_plugins_dir : DRA_PLUGINS_DIR_DEFAULT,
        .cdi_root = o->cdi_root,
        .cdi_kind = o->cdi_kind,
        .guard_root = o->guard_root,
        .guard_lib = o->guard_lib,
        .nvml_lib = gpu_node_lib(a->node), /* MIG on demand: the DRA thread's own handle */
        .proc_root = o->proc_root,
    };
    if (o->dra_claims_dir)
        d.source = dra_claim_files_source(o->dra_claims_dir);
    agent_dra_api_start(a, &d); /* the API server's claims (unless files) and the slices' publisher */
    char err[1024];
    int r = dra_server_start(&d, &a->dra, err, sizeof(err));
    if (r == -ENOTSUP) { /* its checkpoint refused: the device plugins serve on */
        agent_dra_refused(a, err);
        return 0;
    }
    if (r < 0) {
        log_error("Failed to start the DRA driver: %s", err);
        return r;
    }
    agent_dra_devices(a);
    agent_dra_publish(a, NULL);
    return 0;
}

static void teardown(struct agent *a) {
    agent_migmgr_stop(a);
    agent_pub_free(&a->pub);
    agent_mps_stop(a);
    dra_server_stop(a->dra);
    agent_dra_api_stop(a);
    dp_manager_free(a->dp);
    xidwatch_stop(a->xid); /* never waits for NVML's event wait to end */
    if (a->plan_valid)
        gs_plan_free(&a->plan);
    int fds[] = { a->sigfd, a->inofd, a->timerfd, a->pipe_rd, a->pipe_wr };
    for (size_t i = 0; i < GS_ARRAY_SIZE(fds); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    loop_free(&a->loop);
    free(a->inv);
    agent_shared_destroy(&a->shared);
    free(a->policy);
}

int agent_run(struct gpu_node *node, const struct agent_options *o) {
    /* Two malloc arenas, not one per thread (up to 8 per core): the agent's ~10 threads (gRPC's,
     * the metrics server's, the NVML event thread) allocate little, and each arena keeps pages of
     * its own resident. */
    mallopt(M_ARENA_MAX, 2);
    struct agent *a = calloc(1, sizeof(*a));
    if (!a)
        return 1;
    agent_shared_init(&a->shared, o);
    a->o = o;
    a->node = node;
    a->loop.epfd = a->sigfd = a->inofd = a->timerfd = a->pipe_rd = a->pipe_wr = -1;
    a->config_wd = -1;
    int exit_code = 1, r;
    if (agent_load_policy(a, true) < 0)
        goto out;
    a->inv = calloc(1, sizeof(*a->inv));
    if (!a->inv || gpu_inventory_read_sysfs(node, o->sysfs_root, a->inv) < 0) {
        log_error("Failed to read the GPUs: %s", gpu_node_error(node));
        goto out;
    }
    log_info("gpuslice agent starting: %u GPU(s), driver %s, NVML %s, kubelet directory %s", a->inv->n_gpus,
             a->inv->driver_version, gpu_node_lib(node), o->kubelet_dir);
    if ((r = setup_sources(a)) < 0 || (r = setup_jobs(a)) < 0) {
        log_error("Failed to set up the event loop: %s", strerror(-r));
        goto out;
    }
    struct dp_handlers h = agent_shared_handlers(&a->shared);
    if (dp_manager_new(o->kubelet_dir, &h, &a->dp) < 0)
        goto out;
    agent_dra_slices_start(a); /* before the first plan: GPUs stale slices may offer are held back */
    agent_migmgr_start(a);
    agent_reconcile_mig(a); /* before serving: nothing to withdraw yet */
    if (agent_replan(a, true) < 0 || dp_manager_start(a->dp) < 0)
        goto out;
    if (o->dra && start_dra(a) < 0)
        goto out;
    if (o->metrics_address && o->metrics_address[0])
        start_metrics(a);
    start_events(a);
    exit_code = 0;
    while (loop_running(&a->loop)) {
        if ((r = loop_once(&a->loop)) < 0) {
            log_error("epoll_wait: %s", strerror(-r));
            exit_code = 1;
            break;
        }
        agent_publish_metrics(a);
    }
out:
    teardown(a);
    free(a);
    if (exit_code == 0)
        log_info("gpuslice agent stopped");
    return exit_code;
}
