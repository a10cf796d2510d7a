/* extender.c (cli): `gpuslice extender`: the kube-scheduler extender (src/extender): filter with
 * per-GPU fit and prioritize with a placement policy's score, over HTTP, until SIGTERM or SIGINT. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "extender/apisource.h"
#include "extender/server.h"
#include "extender/snapshot.h"
#include "httpd/httpd.h"
#include "place/replay.h"
#include "util/log.h"
#include "util/quantity.h"
#include "util/util.h"

#define MAX_CLIENT_NAMES 8

static void usage(FILE *f) {
    fprintf(f, "Usage: gpuslice extender --snapshot FILE | --kubeconfig FILE | --api [--listen 127.0.0.1:8888]\n"
               "                         --tls-cert-file FILE --tls-key-file FILE --client-ca-file FILE\n"
               "                         [--allowed-client-name NAME]... | --insecure-loopback-http\n"
               "                         [--policy fgd|gpuslice] [--workload PODS.csv] [--max-body BYTES]\n\n"
               "The kube-scheduler extender (docs/extender.md): POST .../filter fails the nodes where no GPU\n"
               "(or set of GPUs) holds the pod, whatever the node's sum; POST .../prioritize scores the nodes\n"
               "with the placement policy, 0..10; POST .../bind picks the GPU, records it and, with the API server,\n"
               "binds the pod with the gpuslice.io/gpu-index annotation; GET /healthz, /metrics.\n\n"
               "  --listen HOST:PORT  where to serve (default 127.0.0.1:8888; port 0: any free port)\n"
               "  --tls-cert-file FILE   HTTPS with this certificate (PEM, with its chain)...\n"
               "  --tls-key-file FILE    ...and its key...\n"
               "  --client-ca-file FILE  ...and client certificates verified against these CAs: every request but\n"
               "                      GET /healthz needs one (401 without; one that does not verify ends the TLS\n"
               "                      handshake)\n"
               "  --allowed-client-name NAME  only a client certificate naming NAME (a DNS subjectAltName, else its\n"
               "                      CN); repeatable, up to 8 (default: any the client CA verifies)\n"
               "  --insecure-loopback-http  plain HTTP, every request trusted: only on a 127.x.x.x --listen\n"
               "  --snapshot FILE     the nodes: a trace node list (.csv) or a JSON snapshot\n"
               "  --kubeconfig FILE   the nodes and bound pods from the API server (watched), and bind there\n"
               "  --api               the same with $KUBECONFIG, in-cluster, else ~/.kube/config\n"
               "  --policy NAME       fgd or gpuslice (default gpuslice); any scoring policy of replay\n"
               "  --workload PODS.csv FGD's target workload from a pod list (the trace's format, as replay's\n"
               "                      --pods; e.g. the pods of the platform's history), not from the pods seen\n"
               "  --max-body BYTES    the longest request accepted (default 6.7 MiB: the most node names, 15,000,\n"
               "                      and the largest Pod; more for Nodes without nodeCacheCapable)\n");
}

int cmd_extender(const struct cli *cli, int argc, char **argv) {
    (void)cli;
    const char *listen = "127.0.0.1:8888", *snapshot = NULL, *policy = "gpuslice", *kubeconfig = NULL,
               *workload = NULL;
    bool api = false, plain = false;
    unsigned long long max_body = EX_ARGS_BODY_MAX;
    struct httpd_tls tls = { 0 };
    const char *client_names[MAX_CLIENT_NAMES + 1] = { 0 };
    size_t n_client_names = 0;
    enum {
        OPT_LISTEN = 1,
        OPT_SNAPSHOT,
        OPT_POLICY,
        OPT_MAX_BODY,
        OPT_KUBECONFIG,
        OPT_API,
        OPT_WORKLOAD,
        OPT_TLS_CERT,
        OPT_TLS_KEY,
        OPT_CLIENT_CA,
        OPT_CLIENT_NAME,
        OPT_PLAIN
    };
    static const struct option opts[] = {
        { "listen", required_argument, NULL, OPT_LISTEN },
        { "snapshot", required_argument, NULL, OPT_SNAPSHOT },
        { "policy", required_argument, NULL, OPT_POLICY },
        { "max-body", required_argument, NULL, OPT_MAX_BODY },
        { "kubeconfig", required_argument, NULL, OPT_KUBECONFIG },
        { "api", no_argument, NULL, OPT_API },
        { "workload", required_argument, NULL, OPT_WORKLOAD },
        { "tls-cert-file", required_argument, NULL, OPT_TLS_CERT },
        { "tls-key-file", required_argument, NULL, OPT_TLS_KEY },
        { "client-ca-file", required_argument, NULL, OPT_CLIENT_CA },
        { "allowed-client-name", required_argument, NULL, OPT_CLIENT_NAME },
        { "insecure-loopback-http", no_argument, NULL, OPT_PLAIN },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_LISTEN: listen = optarg; break;
        case OPT_SNAPSHOT: snapshot = optarg; break;
        case OPT_POLICY: policy = optarg; break;
        case OPT_MAX_BODY:
            if (gs_quantity_bytes(optarg, 1024, 1ull << 30, &max_body) < 0)
                return cli_usage_error("extender", "--max-body '%s': expected a size from 1Ki to 1Gi bytes", optarg);
            break;
        case OPT_KUBECONFIG: kubeconfig = optarg, api = true; break;
        case OPT_API: api = true; break;
        case OPT_WORKLOAD: workload = optarg; break;
        case OPT_TLS_CERT: tls.cert_file = optarg; break;
        case OPT_TLS_KEY: tls.key_file = optarg; break;
        case OPT_CLIENT_CA: tls.client_ca_file = optarg; break;
        case OPT_CLIENT_NAME:
            if (n_client_names == MAX_CLIENT_NAMES || !optarg[0])
                return cli_usage_error("extender", "--allowed-client-name '%s': a name, at most %d of them", optarg,
                                       MAX_CLIENT_NAMES);
            client_names[n_client_names++] = optarg;
            break;
        case OPT_PLAIN: plain = true; break;
        case 'h': usage(stdout); return GS_EXIT_OK;
        default: usage(stderr); return GS_EXIT_USAGE;
        }
    }
    int r = cli_no_more_args("extender", argc, argv, optind);
    if (r)
        return r;
    enum pl_policy pol;
    if (pl_policy_from_name(policy, &pol) < 0 || pol == PL_RANDOM)
        return cli_usage_error("extender",
                               "--policy '%s': expected fgd, gpuslice, bestfit, dotprod, gpupacking or "
                               "gpuclustering",
                               policy);
    if (!snapshot && !api)
        return cli_usage_error("extender", "--snapshot FILE is required, or --kubeconfig FILE or --api for the "
                                           "API server");
    if (snapshot && api)
        return cli_usage_error("extender", "--snapshot and the API server (--kubeconfig, --api): one or the other");
    bool any_tls = tls.cert_file || tls.key_file || tls.client_ca_file;
    if (plain && any_tls)
        return cli_usage_error("extender", "--insecure-loopback-http and TLS (--tls-cert-file, --tls-key-file, "
                                           "--client-ca-file): one or the other");
    if (any_tls && !(tls.cert_file && tls.key_file && tls.client_ca_file))
        return cli_usage_error("extender", "TLS needs all of --tls-cert-file, --tls-key-file and --client-ca-file "
                                           "(missing: %s%s%s)",
                               tls.cert_file ? "" : "--tls-cert-file ", tls.key_file ? "" : "--tls-key-file ",
                               tls.client_ca_file ? "" : "--client-ca-file");
    if (!plain && !any_tls)
        return cli_usage_error("extender", "no TLS: serve HTTPS with --tls-cert-file, --tls-key-file and "
                                           "--client-ca-file (the scheduler's client certificate), or plain HTTP on "
                                           "loopback with --insecure-loopback-http");
    if (plain && !httpd_addr_is_loopback(listen))
        return cli_usage_error("extender", "--listen %s without TLS: plain HTTP is served only on a loopback address "
                                           "(127.x.x.x:PORT); anyone who can reach it could bind pods",
                               listen);
    if (n_client_names && !any_tls)
        return cli_usage_error("extender", "--allowed-client-name: a TLS client's name; give TLS too");
    tls.client_names = n_client_names ? client_names : NULL;
    if (workload && pol != PL_FGD)
        return cli_usage_error("extender", "--workload: FGD's target workload; --policy %s takes none", policy);
    char err[1024];
    struct ex_node_spec *nodes = NULL;
    size_t n = 0;
    if (snapshot && (r = ex_snapshot_load(snapshot, &nodes, &n, err, sizeof(err))) < 0) {
        fprintf(stderr, "gpuslice extender: %s\n", err);
        return GS_EXIT_FAILURE;
    }
    struct ex_model model;
    r = ex_model_init(&model, pol, nodes, n, err, sizeof(err)); /* the API server's nodes come at its first list */
    free(nodes);
    if (r < 0) {
        fprintf(stderr, "gpuslice extender: %s: %s\n", snapshot ? snapshot : "the model", err);
        return GS_EXIT_FAILURE;
    }
    if (workload) { /* replay's parser: the same validation, errors with the file, line and field */
        struct rp_trace t = { 0 };
        r = rp_load_pods(&t, workload, err, sizeof(err));
        if (r == 0 && (r = ex_model_set_workload(&model, t.pods, (const char *const *)t.pod_specs, t.n_pods, err,
                                                 sizeof(err))) < 0)
            fprintf(stderr, "gpuslice extender: --workload %s: %s\n", workload, err);
        else if (r < 0)
            fprintf(stderr, "gpuslice extender: --workload: %s\n", err);
        else
            log_info("Extender: FGD's target workload from %s (%zu pods, %zu targets)", workload, t.n_pods,
                     model.c.n_targets);
        rp_trace_free(&t);
        if (r < 0) {
            ex_model_free(&model);
            return GS_EXIT_FAILURE;
        }
    }
    struct kube_client *kc = NULL;
    /* bounded: 3 s to connect, 10 s a request (a Binding: the scheduler's httpTimeout is 5 s by the
     * configuration of docs/extender.md, and a late answer is a bind the scheduler retries) */
    const struct kube_limits lim = { 3000, 10000, (size_t)256 << 20, (size_t)16 << 20 };
    if (api && kube_client_open(kubeconfig, NULL, &lim, &kc, err, sizeof(err)) < 0) {
        fprintf(stderr, "gpuslice extender: %s\n", err);
        ex_model_free(&model);
        return GS_EXIT_FAILURE;
    }
    /* the signals are taken by sigwait below, on this thread; the server's thread inherits the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    struct ex_api *src = NULL;
    struct ex_api_config ac = { .client = kc, .model = &model, .lock = &lock };
    if (kc && ex_api_start(&ac, &src, err, sizeof(err)) < 0) {
        fprintf(stderr, "gpuslice extender: %s\n", err);
        kube_client_free(kc);
        ex_model_free(&model);
        return GS_EXIT_FAILURE;
    }
    struct ex_server_config cfg = { .addr = listen,
                                    .tls = any_tls ? &tls : NULL,
                                    .plain_trusted = plain,
                                    .max_body = (size_t)max_body,
                                    .model = &model,
                                    .lock = &lock,
                                    .bind = src ? ex_api_bind : NULL,
                                    .check = src ? ex_api_check : NULL,
                                    .bind_ctx = src };
    struct ex_server *s = ex_server_start(&cfg, err, sizeof(err));
    if (!s) {
        fprintf(stderr, "gpuslice extender: %s\n", err);
        ex_api_stop(src);
        kube_client_free(kc);
        ex_model_free(&model);
        return GS_EXIT_FAILURE;
    }
    const char *how = any_tls ? "HTTPS, client certificates of " : "plain HTTP, every request trusted";
    const char *ca = any_tls ? tls.client_ca_file : "";
    if (snapshot)
        log_info("Extender serving on %s (port %u) over %s%s: %zu nodes from %s, policy %s", listen, ex_server_port(s),
                 how, ca, n, snapshot, pl_policy_name(pol));
    else
        log_info("Extender serving on %s (port %u) over %s%s: nodes and pods from the API server, policy %s", listen,
                 ex_server_port(s), how, ca, pl_policy_name(pol));
    int sig = 0;
    sigwait(&set, &sig);
    log_info("Extender: signal %d, stopping", sig);
    ex_server_stop(s);
    ex_api_stop(src);
    kube_client_free(kc);
    ex_model_free(&model);
    return GS_EXIT_OK;
}
