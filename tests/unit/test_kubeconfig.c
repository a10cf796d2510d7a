/* test_kubeconfig.c: kubeconfig parsing (src/kube/kubeconfig.c): the fields real kubeconfigs use,
 * relative file names, contexts, each bad field with its message, base64, and the in-cluster
 * service account from the environment and a directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bad_cases.h"
#include "kube/kubeconfig.h"
#include "util/util.h"

/* "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n" in base64 */
#define CA_B64 "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
#define CA_PEM "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

static int parse(const char *text, const char *context, struct kube_config *c, char *err, size_t errlen) {
    return kube_config_parse("kc", text, strlen(text), "/etc/kc", context, c, err, errlen);
}

static void test_certificates_relative_files(void **state) {
    (void)state;
    const char *text = "apiVersion: v1\n"
                       "kind: Config\n"
                       "clusters:\n"
                       "- name: c1\n"
                       "  cluster:\n"
                       "    server: https://127.0.0.1:6443/\n"
                       "    certificate-authority: pki/ca.crt\n"
                       "    extensions: []\n"
                       "users:\n"
                       "- name: admin\n"
                       "  user:\n"
                       "    client-certificate: /abs/admin.crt\n"
                       "    client-key: admin.key\n"
                       "contexts:\n"
                       "- name: ctx\n"
                       "  context: {cluster: c1, user: admin, namespace: gs}\n"
                       "current-context: ctx\n"
                       "preferences: {}\n";
    struct kube_config c;
    char err[256] = "";
    assert_int_equal(parse(text, NULL, &c, err, sizeof err), 0);
    assert_string_equal(c.server, "https://127.0.0.1:6443"); /* the trailing '/' dropped */
    assert_string_equal(c.ca_file, "/etc/kc/pki/ca.crt");
    assert_string_equal(c.cert_file, "/abs/admin.crt");
    assert_string_equal(c.key_file, "/etc/kc/admin.key");
    assert_string_equal(c.namespace, "gs");
    assert_null(c.token);
    assert_null(c.ca_pem);
    assert_false(c.insecure);
    kube_config_free(&c);
}

static void test_data_token_and_context(void **state) {
    (void)state;
    const char *text = "clusters:\n"
                       "- name: a\n"
                       "  cluster: {server: 'https://a:1'}\n"
                       "- name: b\n"
                       "  cluster:\n"
                       "    server: https://[::1]:6443\n"
                       "    certificate-authority-data: " CA_B64 "\n"
                       "    insecure-skip-tls-verify: false\n"
                       "users:\n"
                       "- name: sa\n"
                       "  user: {token: abc.def}\n"
                       "- name: filetok\n"
                       "  user: {tokenFile: tok}\n"
                       "contexts:\n"
                       "- {name: one, context: {cluster: a, user: filetok}}\n"
                       "- {name: two, context: {cluster: b, user: sa}}\n"
                       "current-context: one\n";
    struct kube_config c;
    char err[256] = "";
    assert_int_equal(parse(text, NULL, &c, err, sizeof err), 0);
    assert_string_equal(c.server, "https://a:1");
    assert_string_equal(c.token_file, "/etc/kc/tok");
    assert_null(c.token);
    assert_string_equal(c.namespace, "default");
    kube_config_free(&c);
    /* an explicit context wins over current-context */
    assert_int_equal(parse(text, "two", &c, err, sizeof err), 0);
    assert_string_equal(c.server, "https://[::1]:6443");
    assert_string_equal(c.token, "abc.def");
    assert_non_null(c.ca_pem);
    assert_int_equal(c.ca_pem_len, strlen(CA_PEM));
    assert_memory_equal(c.ca_pem, CA_PEM, c.ca_pem_len);
    kube_config_free(&c);
}

static void test_base64(void **state) {
    (void)state;
    char *out;
    size_t len;
    assert_int_equal(kube_base64_decode("aGk=", 4, &out, &len), 0);
    assert_int_equal(len, 2);
    assert_string_equal(out, "hi");
    free(out);
    assert_int_equal(kube_base64_decode("aGVsbG8h", 8, &out, &len), 0);
    assert_string_equal(out, "hello!");
    free(out);
    assert_int_equal(kube_base64_decode("", 0, &out, &len), 0);
    assert_int_equal(len, 0);
    free(out);
    assert_int_equal(kube_base64_decode("aGk", 3, &out, &len), -EINVAL);      /* not padded */
    assert_int_equal(kube_base64_decode("a=Gk", 4, &out, &len), -EINVAL);     /* '=' inside */
    assert_int_equal(kube_base64_decode("aG!=", 4, &out, &len), -EINVAL);     /* not the alphabet */
    assert_int_equal(kube_base64_decode("aGk=aGk=", 8, &out, &len), -EINVAL); /* padding then more */
    assert_int_equal(kube_base64_decode("a===", 4, &out, &len), -EINVAL);
    assert_null(out);
}

/* ---- in-cluster ---- */

static void write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_in_cluster(void **state) {
    (void)state;
    char dir[] = "/tmp/test_kubeconfig.XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct kube_config c;
    char err[512] = "";
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_int_equal(kube_config_in_cluster(dir, &c, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST"));
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    assert_int_equal(kube_config_in_cluster(dir, &c, err, sizeof err), -ENOENT); /* no token file */
    assert_non_null(strstr(err, "/token"));
    assert_non_null(strstr(err, "service account's token"));
    write_file(dir, "token", "eyJ.x.y\n");
    assert_int_equal(kube_config_in_cluster(dir, &c, err, sizeof err), -ENOENT); /* no CA */
    assert_non_null(strstr(err, "ca.crt"));
    write_file(dir, "ca.crt", CA_PEM);
    assert_int_equal(kube_config_in_cluster(dir, &c, err, sizeof err), 0);
    assert_string_equal(c.server, "https://10.96.0.1:443");
    assert_non_null(strstr(c.token_file, "/token"));
    assert_non_null(strstr(c.ca_file, "/ca.crt"));
    assert_string_equal(c.namespace, "default"); /* no namespace file */
    kube_config_free(&c);
    write_file(dir, "namespace", "gpuslice-system\n");
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    assert_int_equal(kube_config_in_cluster(dir, &c, err, sizeof err), 0);
    assert_string_equal(c.server, "https://[fd00::1]:443");
    assert_string_equal(c.namespace, "gpuslice-system");
    kube_config_free(&c);
    setenv("KUBERNETES_SERVICE_PORT", "https", 1);
    assert_int_equal(kube_config_in_cluster(dir, &c, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_PORT=\"https\": not a port number"));
    unsetenv("KUBERNETES_SERVICE_PORT");
    assert_int_equal(kube_config_in_cluster(dir, &c, err, sizeof err), -EINVAL);
    unsetenv("KUBERNETES_SERVICE_HOST");
    char path[600];
    const char *names[] = { "token", "ca.crt", "namespace" };
    for (size_t i = 0; i < GS_ARRAY_SIZE(names); i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void test_load_names_the_file(void **state) {
    (void)state;
    struct kube_config c;
    char err[512] = "";
    assert_true(kube_config_load("/nonexistent/kubeconfig", NULL, &c, err, sizeof err) < 0);
    assert_non_null(strstr(err, "/nonexistent/kubeconfig"));
}

/* ---- bad input: one case per field ---- */

#define GOOD_USERS "users:\n- name: u\n  user: {token: t}\n"
#define GOOD_CTX "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
#define CLUSTER(body) "clusters:\n- name: c\n  cluster: " body "\n" GOOD_USERS GOOD_CTX
#define USER(body)                                                                                                     \
    "clusters:\n- name: c\n  cluster: {server: 'https://h:1'}\nusers:\n- name: u\n  user: " body "\n" GOOD_CTX

static const struct bad_case bad_cases[] = {
    { "empty", "", "kc:1:1: empty kubeconfig", { 0 } },
    { "not_a_map", "- a\n", "kc:1:1: expected a mapping", { 0 } },
    { "syntax", "a: [\n", "kc:", { "syntax error" } },
    { "kind", "kind: Pod\n", "kc:1:7: kind: \"Pod\", not Config", { 0 } },
    { "no_current_context", "clusters: []\n", "kc:1:1: current-context: missing", { 0 } },
    { "unknown_context",
      "current-context: nope\ncontexts: []\n",
      "kc:1:18: current-context: \"nope\" is not in contexts",
      { 0 } },
    { "no_contexts",
      "current-context: x\n",
      "kc:1:18: current-context: \"x\" is not in contexts (the file has no contexts)",
      { 0 } },
    { "context_no_name",
      "current-context: x\ncontexts:\n- context: {}\n",
      "kc:3:3: contexts[0]: missing \"name\"",
      { 0 } },
    { "context_unknown_key",
      "current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, users: u}\n",
      "kc:4:25: contexts[0].context.users: unknown key 'users'",
      { "allowed keys: cluster, user, namespace" } },
    { "context_no_cluster",
      "current-context: x\ncontexts:\n- name: x\n  context: {user: u}\n",
      "kc:4:12: contexts[0].context: missing \"cluster\"",
      { 0 } },
    { "context_not_map",
      "current-context: x\ncontexts:\n- name: x\n  context: c\n",
      "kc:4:12: contexts[0].context: expected a mapping",
      { 0 } },
    { "unknown_cluster",
      "current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\nclusters: []\n",
      "kc:4:22: contexts[0].context.cluster: \"c\" is not in clusters",
      { 0 } },
    { "no_server", CLUSTER("{certificate-authority: ca}"), "kc:3:12: clusters[0].cluster: missing \"server\"", { 0 } },
    { "server_scheme",
      CLUSTER("{server: 'ftp://h'}"),
      "kc:3:21: clusters[0].cluster.server: \"ftp://h\" is not an https:// (or http://) URL",
      { 0 } },
    { "server_no_host",
      CLUSTER("{server: 'https://'}"),
      "kc:3:21: clusters[0].cluster.server: \"https://\" has no host",
      { 0 } },
    { "server_query", CLUSTER("{server: 'https://h/?x'}"), "kc:3:21: clusters[0].cluster.server:", { "no query" } },
    { "ca_both",
      CLUSTER("{server: 'https://h', certificate-authority: a, certificate-authority-data: " CA_B64 "}"),
      "kc:3:",
      { "clusters[0].cluster.certificate-authority-data: both" } },
    { "ca_not_base64",
      CLUSTER("{server: 'https://h', certificate-authority-data: 'abc!'}"),
      "kc:3:",
      { "clusters[0].cluster.certificate-authority-data: not base64" } },
    { "ca_not_pem",
      CLUSTER("{server: 'https://h', certificate-authority-data: aGVsbG8h}"),
      "kc:3:",
      { "certificate-authority-data: not PEM once decoded" } },
    { "ca_empty_file",
      CLUSTER("{server: 'https://h', certificate-authority: ''}"),
      "kc:3:",
      { "clusters[0].cluster.certificate-authority: empty file name" } },
    { "insecure_not_bool",
      CLUSTER("{server: 'https://h', insecure-skip-tls-verify: maybe}"),
      "kc:3:",
      { "clusters[0].cluster.insecure-skip-tls-verify" } },
    { "proxy_url",
      CLUSTER("{server: 'https://h', proxy-url: 'http://p'}"),
      "kc:3:",
      { "clusters[0].cluster.proxy-url: not supported" } },
    { "tls_server_name",
      CLUSTER("{server: 'https://h', tls-server-name: x}"),
      "kc:3:",
      { "clusters[0].cluster.tls-server-name: not supported" } },
    { "cluster_dup_key", CLUSTER("{server: 'https://h', server: 'https://i'}"), "kc:3:", { "server" } },
    { "server_not_scalar", CLUSTER("{server: [a]}"), "kc:3:", { "clusters[0].cluster.server" } },
    { "unknown_user",
      "clusters:\n- name: c\n  cluster: {server: 'https://h'}\n" GOOD_CTX,
      "kc:",
      { "contexts[0].context.user: \"u\" is not in users" } },
    { "user_exec", USER("{exec: {command: aws}}"), "kc:", { "users[0].user.exec: not supported" } },
    { "user_auth_provider",
      USER("{auth-provider: {name: gcp}}"),
      "kc:",
      { "users[0].user.auth-provider: not supported" } },
    { "user_basic", USER("{username: a, password: b}"), "kc:", { "users[0].user.username: not supported" } },
    { "cert_without_key",
      USER("{client-certificate: a.crt}"),
      "kc:",
      { "users[0].user: client-certificate without client-key" } },
    { "key_without_cert",
      USER("{client-key-data: " CA_B64 "}"),
      "kc:",
      { "users[0].user: client-key without client-certificate" } },
    { "cert_both",
      USER("{client-certificate: a, client-certificate-data: " CA_B64 ", client-key: k}"),
      "kc:",
      { "users[0].user.client-certificate-data: both" } },
    { "key_bad_base64",
      USER("{client-certificate: a, client-key-data: '%%%%'}"),
      "kc:",
      { "users[0].user.client-key-data: not base64" } },
    { "empty_token", USER("{token: ''}"), "kc:", { "users[0].user.token: empty token" } },
    { "token_and_file", USER("{token: a, tokenFile: f}"), "kc:", { "users[0].user.tokenFile: both" } },
    { "user_not_map", USER("tok"), "kc:", { "users[0].user: expected a mapping" } },
    { "users_not_seq",
      "clusters:\n- name: c\n  cluster: {server: 'https://h'}\nusers: {}\n" GOOD_CTX,
      "kc:",
      { "users: expected a sequence" } },
    { "entry_unknown_key",
      "clusters:\n- name: c\n  clusterr: {}\n" GOOD_USERS GOOD_CTX,
      "kc:3:3: clusters[0].clusterr: unknown key",
      { "allowed keys: name, cluster" } },
    { "anchor", "clusters: &a []\n", "kc:", { 0 } },
};

static void test_bad(void **state) {
    const struct bad_case *c = *state;
    struct kube_config kc;
    char err[512] = "";
    int r = parse(c->yaml, NULL, &kc, err, sizeof err);
    check_bad_message(c, r, err, false);
    assert_null(kc.server);
}

int main(void) {
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_certificates_relative_files),
        cmocka_unit_test(test_data_token_and_context),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_in_cluster),
        cmocka_unit_test(test_load_names_the_file),
    };
    return run_with_bad_cases("kubeconfig", fixed, GS_ARRAY_SIZE(fixed), bad_cases, GS_ARRAY_SIZE(bad_cases), test_bad);
}
