/* test_doctor.c: the doctor's pure parts: the runtime config scanner (containerd 1.7/2.x config
 * versions 2 and 3, CRI-O), the kubelet's checkpoint, socket names, CapEff, the report, the API
 * server's answers as findings. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "doctor/doctor.h"
#include "kubelet/plugindir.h"

static int parse(enum gs_doc_runtime rt, const char *text, struct gs_doc_cdi_config *c, char *err) {
    return gs_doc_cdi_config_parse(rt, "config.toml", text, strlen(text), c, err, 256);
}

static void test_containerd_v2(void **state) {
    (void)state;
    struct gs_doc_cdi_config c;
    char err[256];
    const char *on = "version = 2\n"
                     "# enable_cdi = false (a comment)\n"
                     "[plugins]\n"
                     "  [plugins.\"io.containerd.grpc.v1.cri\"]\n"
                     "    sandbox_image = \"registry.k8s.io/pause:3.9\"   # trailing comment\n"
                     "    enable_cdi = true\n"
                     "    cdi_spec_dirs = [\"/etc/cdi\",\n"
                     "                     \"/var/run/cdi\", # second\n"
                     "                     '/opt/cdi']\n"
                     "  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n"
                     "    SystemdCgroup = true\n"
                     "    enable_cdi = false\n";
    assert_int_equal(parse(GS_DOC_CONTAINERD, on, &c, err), 0);
    assert_int_equal(c.version, 2);
    assert_int_equal(c.enable_cdi, 1); /* the runc options table's key is not the CRI plugin's */
    assert_int_equal(c.enable_line, 6);
    assert_true(c.dirs_given);
    assert_int_equal(c.n_dirs, 3);
    assert_string_equal(c.dirs[0], "/etc/cdi");
    assert_string_equal(c.dirs[2], "/opt/cdi");
    assert_int_equal(gs_doc_cdi_enabled(GS_DOC_CONTAINERD, &c), 1);

    assert_int_equal(parse(GS_DOC_CONTAINERD, "version = 2\n[plugins.'io.containerd.grpc.v1.cri']\nenable_cdi = false\n",
                           &c, err), 0);
    assert_int_equal(gs_doc_cdi_enabled(GS_DOC_CONTAINERD, &c), 0);
    assert_int_equal(c.enable_line, 3);
    /* absent: containerd 1.7 off, 2.x on: unknown */
    assert_int_equal(parse(GS_DOC_CONTAINERD, "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n", &c, err), 0);
    assert_int_equal(gs_doc_cdi_enabled(GS_DOC_CONTAINERD, &c), -1);
    assert_false(c.dirs_given);
    /* a dotted key at the top level */
    assert_int_equal(parse(GS_DOC_CONTAINERD, "plugins.\"io.containerd.grpc.v1.cri\".enable_cdi = true\n", &c, err), 0);
    assert_int_equal(c.enable_cdi, 1);
    assert_string_equal(gs_doc_cdi_table(GS_DOC_CONTAINERD, 2), "[plugins.\"io.containerd.grpc.v1.cri\"]");
}

static void test_containerd_v3(void **state) {
    (void)state;
    struct gs_doc_cdi_config c;
    char err[256];
    assert_int_equal(parse(GS_DOC_CONTAINERD, "version = 3\nimports = ['/etc/containerd/conf.d/*.toml']\n"
                                              "[plugins.'io.containerd.cri.v1.runtime']\n"
                                              "  description = \"\"\"several\nlines = [\n\"\"\"\n"
                                              "  cdi_spec_dirs = ['/etc/cdi']\n", &c, err), 0);
    assert_int_equal(c.version, 3);
    assert_true(c.imports);
    assert_int_equal(c.enable_cdi, -1);
    assert_int_equal(gs_doc_cdi_enabled(GS_DOC_CONTAINERD, &c), 1); /* version 3: containerd 2.x, on */
    assert_int_equal(c.n_dirs, 1);
    assert_int_equal(c.dirs_line, 7);
    assert_string_equal(gs_doc_cdi_table(GS_DOC_CONTAINERD, 3), "[plugins.\"io.containerd.cri.v1.runtime\"]");
    assert_int_equal(parse(GS_DOC_CONTAINERD, "version = 3\n[plugins.'io.containerd.cri.v1.runtime']\nenable_cdi = false\n",
                           &c, err), 0);
    assert_int_equal(gs_doc_cdi_enabled(GS_DOC_CONTAINERD, &c), 0);
}

static void test_crio(void **state) {
    (void)state;
    struct gs_doc_cdi_config c;
    char err[256];
    assert_int_equal(parse(GS_DOC_CRIO, "[crio]\n[crio.runtime]\ndefault_runtime = \"crun\"\ncdi_spec_dirs = [\n"
                                        "  \"/etc/cdi\",\n  \"/var/run/cdi\",\n]\n", &c, err), 0);
    assert_int_equal(c.n_dirs, 2);
    assert_string_equal(c.dirs[1], "/var/run/cdi");
    assert_int_equal(gs_doc_cdi_enabled(GS_DOC_CRIO, &c), 1);
    assert_int_equal(parse(GS_DOC_CRIO, "[crio.runtime]\n", &c, err), 0);
    assert_false(c.dirs_given);
}

static void test_config_errors(void **state) {
    (void)state;
    struct gs_doc_cdi_config c;
    char err[256];
    assert_int_equal(parse(GS_DOC_CONTAINERD, "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"\n", &c, err), -EINVAL);
    assert_string_equal(err, "config.toml:2: a table header without its ']' or with a malformed name");
    assert_int_equal(parse(GS_DOC_CONTAINERD, "[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = yes\n", &c, err),
                     -EINVAL);
    assert_non_null(strstr(err, "config.toml:2: "));
    assert_non_null(strstr(err, "enable_cdi: 'yes' is not true or false"));
    assert_int_equal(parse(GS_DOC_CONTAINERD, "[plugins.cri]\ncdi_spec_dirs = [\"/etc/cdi\"\n", &c, err), -EINVAL);
    assert_non_null(strstr(err, "an array without its ']'"));
    assert_int_equal(parse(GS_DOC_CONTAINERD, "[plugins.cri]\ncdi_spec_dirs = [1, 2]\n", &c, err), -EINVAL);
    assert_int_equal(parse(GS_DOC_CONTAINERD, "just words\n", &c, err), -EINVAL);
    assert_string_equal(err, "config.toml:1: not a KEY = VALUE line or a [table] header");
    assert_int_equal(parse(GS_DOC_CONTAINERD, "version = 2\nx = '''never closed\n", &c, err), -EINVAL);
    char *long_line = malloc(GS_DOC_LINE_MAX + 16);
    memset(long_line, 'a', GS_DOC_LINE_MAX + 8);
    memcpy(long_line, "k = \"", 5);
    long_line[GS_DOC_LINE_MAX + 8] = '\0';
    assert_int_equal(parse(GS_DOC_CONTAINERD, long_line, &c, err), -EINVAL);
    assert_non_null(strstr(err, "a line over"));
    free(long_line);
    /* keys the scanner does not read may hold any value */
    assert_int_equal(parse(GS_DOC_CONTAINERD, "a = 1.5\nb = { c = 1 }\nd = 1979-05-27\n", &c, err), 0);
}

static void test_checkpoint(void **state) {
    (void)state;
    char names[4][GS_KL_RESOURCE_MAX], err[256];
    unsigned n, devs;
    const char *cp = "{\"Data\":{\"PodDeviceEntries\":null,\"RegisteredDevices\":{\"nvidia.com/gpu\":[\"GPU-a\",\"GPU-b\"],"
                     "\"gpuslice.io/gpu\":[\"x\"]}},\"Checksum\":1234}";
    assert_int_equal(gs_kl_checkpoint_parse(cp, strlen(cp), names, 4, &n, &devs, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_int_equal(devs, 3);
    assert_string_equal(names[0], "nvidia.com/gpu");
    assert_int_equal(gs_kl_checkpoint_parse(cp, strlen(cp), names, 1, &n, &devs, err, sizeof(err)), 0);
    assert_int_equal(n, 1);
    const char *empty = "{\"Data\":{\"RegisteredDevices\":null},\"Checksum\":0}";
    assert_int_equal(gs_kl_checkpoint_parse(empty, strlen(empty), names, 4, &n, &devs, err, sizeof(err)), 0);
    assert_int_equal(n, 0);
    const char *bad[] = { "", "[]", "{\"Data\":1}", "{\"Data\":{\"RegisteredDevices\":{\"a\":1}}}", "{\"Data\":{\"RegisteredDevices\":{\"a\":[],\"a\":[]}}}" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(gs_kl_checkpoint_parse(bad[i], strlen(bad[i]), names, 4, &n, &devs, err, sizeof(err)), -EINVAL);
}

/* The agent's coexistence check: IDs another plugin registered, the resource of NVIDIA's sockets. */
static void test_checkpoint_foreign_nvidia_resource(void **state) {
    (void)state;
    char err[256], first[64] = "";
    const char *cp = "{\"Data\":{\"RegisteredDevices\":{\"nvidia.com/gpu\":[\"GPU-a\",\"GPU-b\",\"GPU-c\"]}},\"Checksum\":1}";
    const char *ours[] = { "GPU-a", "GPU-c" };
    assert_int_equal(gs_kl_checkpoint_foreign(cp, strlen(cp), "nvidia.com/gpu", ours, 2, first, sizeof(first), err,
                                              sizeof(err)), 1);
    assert_string_equal(first, "GPU-b");
    assert_int_equal(gs_kl_checkpoint_foreign(cp, strlen(cp), "nvidia.com/gpu", ours, 0, NULL, 0, err, sizeof(err)), 3);
    assert_int_equal(gs_kl_checkpoint_foreign(cp, strlen(cp), "nvidia.com/mig-1g.10gb", ours, 0, NULL, 0, err,
                                              sizeof(err)), 0);
    assert_int_equal(gs_kl_checkpoint_foreign("[]", 2, "nvidia.com/gpu", ours, 2, NULL, 0, err, sizeof(err)), -EINVAL);
    char r[64];
    assert_int_equal(gs_kl_nvidia_resource("nvidia-gpu.sock", r, sizeof(r)), 0);
    assert_string_equal(r, "nvidia.com/gpu");
    assert_int_equal(gs_kl_nvidia_resource("nvidia-mig-1g.10gb.sock", r, sizeof(r)), 0);
    assert_string_equal(r, "nvidia.com/mig-1g.10gb");
    assert_int_equal(gs_kl_nvidia_resource("nvidia.sock", r, sizeof(r)), 0);
    assert_string_equal(r, "nvidia.com/gpu");
    assert_int_equal(gs_kl_nvidia_resource("nvidia-.sock", r, sizeof(r)), -EINVAL);
    assert_int_equal(gs_kl_nvidia_resource("amd.com_gpu.sock", r, sizeof(r)), -EINVAL);
    assert_int_equal(gs_kl_nvidia_resource("nvidia-gpu.sock", r, 8), -EINVAL);
}

struct seen { char text[256]; };

static void collect(const char *resource, const char *id, void *ctx) {
    struct seen *s = ctx;
    size_t n = strlen(s->text);
    snprintf(s->text + n, sizeof(s->text) - n, "%s=%s;", resource, id);
}

/* coexistence under share: every registered device ID. */
static void test_checkpoint_each(void **state) {
    (void)state;
    char err[256];
    struct seen s = { "" };
    const char *cp = "{\"Data\":{\"RegisteredDevices\":{\"a/x\":[\"GPU-a\",7,\"GPU-b::1\"],\"b/y\":null,"
                     "\"c/z\":[\"MIG-m\"]}},\"Checksum\":1}";
    assert_int_equal(gs_kl_checkpoint_each(cp, strlen(cp), collect, &s, err, sizeof(err)), 0);
    assert_string_equal(s.text, "a/x=GPU-a;a/x=GPU-b::1;c/z=MIG-m;");
    assert_int_equal(gs_kl_checkpoint_each("{}", 2, collect, &s, err, sizeof(err)), -EINVAL);

}

static void test_socket_kind_capeff(void **state) {
    (void)state;
    assert_int_equal(gs_kl_socket_kind("kubelet.sock"), GS_KL_SOCK_KUBELET);
    assert_int_equal(gs_kl_socket_kind("gpuslice-nvidia.com_gpu.sock"), GS_KL_SOCK_OURS);
    assert_int_equal(gs_kl_socket_kind("nvidia-gpu.sock"), GS_KL_SOCK_NVIDIA);
    assert_int_equal(gs_kl_socket_kind("nvidia-mig-1g.10gb.sock"), GS_KL_SOCK_NVIDIA);
    assert_int_equal(gs_kl_socket_kind("amd.com_gpu.sock"), GS_KL_SOCK_OTHER);
    assert_int_equal(gs_kl_socket_kind("kubelet_internal_checkpoint"), GS_KL_SOCK_NONE);
    unsigned long long cap;
    const char *st = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\nCapBnd:\t0\n";
    assert_int_equal(gs_doc_capeff_parse(st, strlen(st), &cap), 0);
    assert_true(cap >> GS_DOC_CAP_SYS_ADMIN & 1);
    assert_int_equal(gs_doc_capeff_parse("CapEff:\t0000000000000000\n", 25, &cap), 0);
    assert_int_equal(cap, 0);
    assert_int_equal(gs_doc_capeff_parse("Name: x\n", 8, &cap), -ENOENT);
    assert_int_equal(gs_doc_capeff_parse("CapEff:\tzz\n", 11, &cap), -EINVAL);
    assert_int_equal(gs_doc_capeff_parse("CapEff:\t00000000000000000\n", 26, &cap), -EINVAL);
}

static void test_report(void **state) {
    (void)state;
    static struct gs_doc_report r;
    memset(&r, 0, sizeof(r));
    gs_doc_add(&r, "nvml", GS_DOC_OK, NULL, "driver %s", "580");
    assert_int_equal(gs_doc_exit_code(&r), 0);
    gs_doc_add(&r, "cdi.runtime", GS_DOC_WARN, "set it", "no enable_cdi");
    assert_int_equal(gs_doc_exit_code(&r), 0);
    gs_doc_add(&r, "kubelet.socket", GS_DOC_FAIL, "restart the kubelet", "stale");
    assert_int_equal(gs_doc_exit_code(&r), 1);
    assert_int_equal(gs_doc_count(&r, GS_DOC_WARN), 1);
    char buf[4096];
    size_t n = gs_doc_summary(&r, buf, sizeof(buf));
    assert_string_equal(buf, "fail kubelet.socket: stale; fix: restart the kubelet\n"
                             "warn cdi.runtime: no enable_cdi; fix: set it\n");
    assert_int_equal(n, strlen(buf));
    assert_int_equal(gs_doc_summary(&r, buf, 60), strlen("fail kubelet.socket: stale; fix: restart the kubelet\n"));
    char *j = gs_doc_json(&r);
    assert_non_null(j);
    assert_non_null(strstr(j, "\"schema\": \"gpuslice.doctor/v1\""));
    assert_non_null(strstr(j, "\"ready\": false"));
    assert_non_null(strstr(j, "\"status\": \"fail\""));
    free(j);
    for (unsigned i = 0; i < GS_DOC_MAX_FINDINGS + 3; i++)
        gs_doc_add(&r, "x", GS_DOC_OK, NULL, "%u", i);
    assert_int_equal(r.n, GS_DOC_MAX_FINDINGS);
    assert_int_equal(r.dropped, 6);
}

/* The api findings of one set of answers: {check, status, a piece of the message, of the fix}. */
struct want {
    const char *check;
    enum gs_doc_status st;
    const char *msg, *fix;
};

static void api_case(const struct gs_doc_api *a, const struct want *w, size_t n) {
    static struct gs_doc_report r;
    memset(&r, 0, sizeof(r));
    gs_doc_api_findings(&r, a);
    assert_int_equal(r.n, n);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(r.f[i].check, w[i].check);
        if (r.f[i].status != w[i].st || !strstr(r.f[i].message, w[i].msg) || !strstr(r.f[i].fix, w[i].fix))
            fail_msg("finding %zu: %s %s: %s; fix: %s (want %s ... %s)", i, gs_doc_status_name(r.f[i].status),
                     r.f[i].check, r.f[i].message, r.f[i].fix, w[i].msg, w[i].fix);
        if (r.f[i].status != GS_DOC_OK)
            assert_true(r.f[i].fix[0]); /* every problem comes with its fix */
    }
}

static void test_api_findings(void **state) {
    (void)state;
    struct gs_doc_api none = { .why_none = "not in a cluster" };
    api_case(&none, (struct want[]){ { "api", GS_DOC_WARN, "no API access (not in a cluster)", "--kubeconfig" } }, 1);
    none.dra = true;
    api_case(&none, (struct want[]){ { "api", GS_DOC_WARN, "nvidia.com/mig.config, DRA's API and RBAC", "" } }, 1);
    struct gs_doc_api bad = { .why_none = "k.yaml:3:1: users[0].user.exec: not supported", .bad_config = true };
    api_case(&bad, (struct want[]){ { "api", GS_DOC_FAIL, "users[0].user.exec", "correct the kubeconfig" } }, 1);

    struct gs_doc_api a = { .server = "https://10.0.0.1:443", .source = "the in-cluster service account",
                            .node = "gpu-1", .node_from = "NODE_NAME", .mig_config = "all-1g.10gb" };
    api_case(&a, (struct want[]){ { "api", GS_DOC_OK, "authenticated, GET /api/v1/nodes/gpu-1", "" },
                                  { "api.node", GS_DOC_OK, "Node gpu-1 exists (the name from NODE_NAME)", "" },
                                  { "api.mig-manager", GS_DOC_OK, "no nvidia.com/mig.config label", "" } },
             3);
    a.mig_label = "all-balanced";
    const struct want refuse[] = {
        { "api", GS_DOC_OK, "", "" },
        { "api.node", GS_DOC_OK, "", "" },
        { "api.mig-manager", GS_DOC_FAIL, "nvidia.com/mig.config=all-balanced",
          "migManager.enabled=false) and remove the label: kubectl label node gpu-1 nvidia.com/mig.config-" },
    };
    api_case(&a, refuse, 3);
    a.mig_warn = true;
    api_case(&a, (struct want[]){ refuse[0], refuse[1],
                                  { "api.mig-manager", GS_DOC_WARN, "applies its layout anyway", "migManager" } },
             3);
    a.mig_config = ""; /* gpuslice leaves MIG alone: the label is NVIDIA's business */
    api_case(&a, (struct want[]){ refuse[0], refuse[1], { "api.mig-manager", GS_DOC_OK, "leaves MIG alone", "" } }, 3);

    a.node_r = -EACCES;
    a.node_err = "GET /api/v1/nodes/gpu-1: 401 Unauthorized: Unauthorized";
    api_case(&a, (struct want[]){ { "api", GS_DOC_FAIL, "401 Unauthorized", "api-token" } }, 1);
    a.node_r = -EPERM;
    a.node_err = "nodes \"gpu-1\" is forbidden";
    api_case(&a, (struct want[]){ { "api", GS_DOC_FAIL, "may not get Node gpu-1: nodes", "ClusterRole" } }, 1);
    a.node_r = -ETIMEDOUT;
    a.node_err = "Timeout was reached";
    api_case(&a, (struct want[]){ { "api", GS_DOC_WARN, "did not answer: Timeout was reached", "background" } }, 1);
    a.node_r = -ENOENT;
    a.dra = true;
    a.dra_api_r = -ENOENT;
    a.dra_api_err = "404 Not Found";
    a.sar_allowed = false;
    a.sar_reason = "";
    api_case(&a, (struct want[]){ { "api", GS_DOC_OK, "", "" },
                                  { "api.node", GS_DOC_FAIL, "no Node gpu-1 (the name from NODE_NAME)", "--node-name" },
                                  { "api.dra", GS_DOC_FAIL, "404 Not Found", "1.34" },
                                  { "api.dra.rbac", GS_DOC_FAIL, "may not create resource.k8s.io resourceslices",
                                    "resourceslices" } },
             4);
    a.node_r = 0;
    a.dra_api_r = 0;
    a.sar_allowed = true;
    api_case(&a, (struct want[]){ refuse[0], refuse[1], { "api.mig-manager", GS_DOC_OK, "", "" },
                                  { "api.dra", GS_DOC_OK, "resource.k8s.io/v1 is served", "" },
                                  { "api.dra.rbac", GS_DOC_OK, "may create", "" } },
             5);
    a.sar_r = -EIO;
    a.sar_err = "500";
    api_case(&a, (struct want[]){ refuse[0], refuse[1], { "api.mig-manager", GS_DOC_OK, "", "" },
                                  { "api.dra", GS_DOC_OK, "", "" }, { "api.dra.rbac", GS_DOC_FAIL, "not known: 500", "" } },
             5);
}

/* The extender's URL and the findings of what it answered (the requests: test_doctor_extender.py). */
static void test_extender(void **state) {
    (void)state;
    char base[64], err[256];
    assert_int_equal(gs_doc_extender_base("http://10.0.0.9:8888/gpuslice", base, sizeof(base), err, sizeof(err)), 0);
    assert_string_equal(base, "http://10.0.0.9:8888");
    assert_int_equal(gs_doc_extender_base("https://ext.svc", base, sizeof(base), err, sizeof(err)), 0);
    assert_string_equal(base, "https://ext.svc");
    assert_int_equal(gs_doc_extender_base("ext:8888", base, sizeof(base), err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "--extender ext:8888: not an http:// or https:// URL");
    assert_int_equal(gs_doc_extender_base("http://a b/x", base, sizeof(base), err, sizeof(err)), -EINVAL);
    assert_int_equal(gs_doc_extender_base("http://#x", base, sizeof(base), err, sizeof(err)), -EINVAL);
    assert_int_equal(gs_doc_extender_base("http://a-very-long-host-name-that-is-longer-than-the-buffer.example:1",
                                          base, 16, err, sizeof(err)), -ENAMETOOLONG);

    char *args = gs_doc_extender_args("gpu-1");
    json_t *a = json_loads(args, 0, NULL);
    assert_non_null(a);
    assert_string_equal(json_string_value(json_array_get(json_object_get(a, "NodeNames"), 0)), "gpu-1");
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(a, "Pod"), "metadata"),
                                                          "uid")), GS_DOC_EXT_PROBE_POD);
    json_decref(a);
    free(args);

    static struct gs_doc_report r;
    struct gs_doc_extender e = { .url = "http://e:1/p", .base = "http://e:1", .node = "gpu-1" };
    json_t *ok = json_loads("{\"NodeNames\": [\"x\", \"gpu-1\"], \"FailedNodes\": {}, \"Error\": \"\"}", 0, NULL);
    e.filter_answer = ok;
    memset(&r, 0, sizeof(r));
    gs_doc_extender_findings(&r, &e);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.f[0].status, GS_DOC_OK);
    assert_int_equal(r.f[1].status, GS_DOC_OK);
    assert_string_equal(r.f[1].check, "extender.filter");
    json_t *unresolvable = json_loads("{\"NodeNames\": null, \"FailedAndUnresolvableNodes\": {\"gpu-1\": \"why\"}}",
                                      0, NULL);
    e.filter_answer = unresolvable;
    memset(&r, 0, sizeof(r));
    gs_doc_extender_findings(&r, &e);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.f[1].status, GS_DOC_FAIL);
    assert_non_null(strstr(r.f[1].message, "refused gpu-1 for a pod that asks for no GPU: why"));
    assert_true(r.f[1].fix[0]);
    e.health_r = -ECONNREFUSED;
    e.health_err = "GET /healthz: Connection refused";
    memset(&r, 0, sizeof(r));
    gs_doc_extender_findings(&r, &e);
    assert_int_equal(r.n, 1); /* the filter is not asked of an extender that does not answer */
    assert_int_equal(r.f[0].status, GS_DOC_FAIL);
    assert_string_equal(r.f[0].message, "http://e:1: GET /healthz: Connection refused");
    json_decref(ok);
    json_decref(unresolvable);
}

/* --extender-warn: what would fail is a warning saying so (the node stays ready); ok stays ok, and
 * a message with no room left keeps its text and is still a warning. */
static void test_extender_warn_only(void **state) {
    (void)state;
    static struct gs_doc_report r;
    json_t *refused = json_loads("{\"NodeNames\": [], \"FailedNodes\": {\"gpu-1\": \"no\"}}", 0, NULL);
    struct gs_doc_extender e = { .url = "http://e:1/p", .base = "http://e:1", .node = "gpu-1",
                                 .filter_answer = refused, .warn_only = true };
    memset(&r, 0, sizeof(r));
    gs_doc_extender_findings(&r, &e);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.f[0].status, GS_DOC_OK);
    assert_null(strstr(r.f[0].message, "--extender-warn"));
    assert_int_equal(r.f[1].status, GS_DOC_WARN);
    assert_string_equal(r.f[1].message, "http://e:1/p/filter refused gpu-1 for a pod that asks for no GPU: no"
                                        GS_DOC_EXT_WARN_NOTE);
    assert_true(r.f[1].fix[0]);
    assert_int_equal(gs_doc_exit_code(&r), 0);
    e.warn_only = false;
    memset(&r, 0, sizeof(r));
    gs_doc_extender_findings(&r, &e);
    assert_int_equal(r.f[1].status, GS_DOC_FAIL);
    assert_int_equal(gs_doc_exit_code(&r), 1);
    /* an error that fills the message, a bad URL: warnings too */
    char long_err[GS_DOC_TEXT_MAX + 8];
    memset(long_err, 'x', sizeof(long_err) - 1);
    long_err[sizeof(long_err) - 1] = '\0';
    e = (struct gs_doc_extender){ .url = "http://e:1/p", .base = "http://e:1", .health_r = -ETIMEDOUT,
                                  .health_err = long_err, .warn_only = true };
    memset(&r, 0, sizeof(r));
    gs_doc_extender_findings(&r, &e);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.f[0].status, GS_DOC_WARN);
    assert_int_equal(strlen(r.f[0].message), GS_DOC_TEXT_MAX - 1);
    assert_true(!strncmp(r.f[0].message, "http://e:1: xxx", 15));
    e = (struct gs_doc_extender){ .bad_url = "--extender e:1: not an http:// or https:// URL", .warn_only = true };
    memset(&r, 0, sizeof(r));
    gs_doc_extender_findings(&r, &e);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.f[0].status, GS_DOC_WARN);
    assert_string_equal(r.f[0].message, "--extender e:1: not an http:// or https:// URL" GS_DOC_EXT_WARN_NOTE);
    assert_int_equal(gs_doc_exit_code(&r), 0);
    json_decref(refused);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_containerd_v2), cmocka_unit_test(test_containerd_v3), cmocka_unit_test(test_crio),
        cmocka_unit_test(test_config_errors), cmocka_unit_test(test_checkpoint), cmocka_unit_test(test_checkpoint_foreign_nvidia_resource),
        cmocka_unit_test(test_checkpoint_each),
        cmocka_unit_test(test_socket_kind_capeff), cmocka_unit_test(test_report), cmocka_unit_test(test_api_findings),
        cmocka_unit_test(test_extender), cmocka_unit_test(test_extender_warn_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
