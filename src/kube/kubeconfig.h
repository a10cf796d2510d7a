/* kubeconfig.h: where the Kubernetes API server is and how to authenticate to it: a kubeconfig
 * file (the subset real ones use) or the in-cluster service account.
 *
 * kubeconfig: current-context (or an explicit context), contexts[].context.{cluster, user,
 * namespace}, clusters[].cluster.{server, certificate-authority, certificate-authority-data,
 * insecure-skip-tls-verify}, users[].user.{client-certificate(-data),
 * client-key(-data), token, tokenFile}. Relative file names are relative to the kubeconfig's
 * directory (as kubectl takes them). What would change the meaning of the file and is not
 * implemented (exec and auth-provider plugins, basic auth, impersonation, proxy-url,
 * tls-server-name) is refused
 * with its field, never ignored; other unknown keys (extensions, preferences) are ignored.
 * Errors are one line, "FILE:LINE:COLUMN: FIELD: message" (src/config/yamlutil.h).
 *
 * In-cluster: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the CA, token and
 * namespace files of the service account directory (/var/run/secrets/kubernetes.io/
 * serviceaccount unless told otherwise). The token is kept as a file name: the client re-reads
 * it when it changes (projected tokens rotate). */
#ifndef GS_KUBE_KUBECONFIG_H
#define GS_KUBE_KUBECONFIG_H

#include <stdbool.h>
#include <stddef.h>

#define KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct kube_config {
    char *server;  /* "https://host:port[/prefix]", no trailing '/' */
    char *ca_file; /* PEM file of the CA, or NULL */
    char *ca_pem;  /* decoded certificate-authority-data, or NULL */
    size_t ca_pem_len;
    char *cert_file, *cert_pem; /* client certificate: file or decoded data (or neither) */
    size_t cert_pem_len;
    char *key_file, *key_pem; /* its key */
    size_t key_pem_len;
    char *token;      /* a bearer token given inline, or NULL */
    char *token_file; /* a bearer token file, re-read when it changes, or NULL */
    char *namespace;  /* the context's or the service account's namespace, else "default" */
    bool insecure;    /* insecure-skip-tls-verify */
};

/* Parses kubeconfig text[0..len) named `name` (for messages). context: the context to use, NULL
 * for current-context. base_dir: what relative file names are relative to (NULL: the working
 * directory). Files named are not read here (pure). Returns 0 or -EINVAL / -ENOMEM with err. */
int kube_config_parse(const char *name, const char *text, size_t len, const char *base_dir, const char *context,
                      struct kube_config *out, char *err, size_t errlen);
/* Reads and parses the kubeconfig file at path. */
int kube_config_load(const char *path, const char *context, struct kube_config *out, char *err, size_t errlen);
/* The in-cluster configuration from the environment and sa_dir (NULL: KUBE_SA_DIR): the token
 * and CA files must exist; the namespace file is optional. -ENOENT when not in a cluster
 * (KUBERNETES_SERVICE_HOST unset). */
int kube_config_in_cluster(const char *sa_dir, struct kube_config *out, char *err, size_t errlen);
/* kubectl's order: path if given, else $KUBECONFIG (its first file), else in-cluster when
 * KUBERNETES_SERVICE_HOST is set, else ~/.kube/config. */
int kube_config_default(const char *path, const char *context, struct kube_config *out, char *err, size_t errlen);
void kube_config_free(struct kube_config *c);

/* Decodes base64 (standard alphabet, '=' padding, no whitespace) into a new NUL-terminated
 * buffer. -EINVAL for anything else. Exposed for the tests. */
int kube_base64_decode(const char *in, size_t len, char **out, size_t *outlen);

#endif
