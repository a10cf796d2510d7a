/* doctor.h: `gpuslice doctor`, the node's readiness for the agent. The findings (report.c) and
 * the parsers of what it reads on the node (parse.c: the container runtime's CDI settings,
 * /proc/self/status), the API server's answers as findings (api.c) and the scheduler extender's
 * (extender.c) are pure; probe.c holds the I/O (directories, loading a library, the extender's
 * requests). The device-plugins directory's socket names, checkpoint and socket probe are
 * kubelet/plugindir.h's, shared with the agent. src/cli/doctor.c runs the checks (docs/doctor.md). */
#ifndef GS_DOCTOR_H
#define GS_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* ---- findings (report.c) ----------------------------------------------------------------------- */

enum gs_doc_status { GS_DOC_OK, GS_DOC_WARN, GS_DOC_FAIL };

#define GS_DOC_MAX_FINDINGS 96
#define GS_DOC_CHECK_MAX 32
#define GS_DOC_TEXT_MAX 512

struct gs_doc_finding {
    char check[GS_DOC_CHECK_MAX];    /* "nvml", "kubelet.socket", "cdi.runtime", ... (docs/doctor.md) */
    enum gs_doc_status status;
    char message[GS_DOC_TEXT_MAX];
    char fix[GS_DOC_TEXT_MAX];       /* "" where there is nothing to fix */
};

struct gs_doc_report {
    unsigned n;
    unsigned dropped;                /* findings past GS_DOC_MAX_FINDINGS (counted, not kept) */
    struct gs_doc_finding f[GS_DOC_MAX_FINDINGS];
};

/* Adds one finding; message and fix are truncated to GS_DOC_TEXT_MAX - 1 bytes (fix may be NULL). */
void gs_doc_add(struct gs_doc_report *r, const char *check, enum gs_doc_status st, const char *fix, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));
const char *gs_doc_status_name(enum gs_doc_status st); /* "ok", "warn", "fail" */
/* The number of findings with this status. */
unsigned gs_doc_count(const struct gs_doc_report *r, enum gs_doc_status st);
/* 0 when the node is ready (no fail), 1 when not. */
int gs_doc_exit_code(const struct gs_doc_report *r);
/* One line per finding, "STATUS CHECK: MESSAGE; fix: FIX", then a summary line. */
void gs_doc_print_text(const struct gs_doc_report *r, FILE *f);
/* The report as JSON (schema gpuslice.doctor/v1, docs/cli.md): malloc'ed, NULL without memory. */
char *gs_doc_json(const struct gs_doc_report *r);
/* The failures, then the warnings, one line each, into buf (at most len - 1 bytes and a NUL, cut
 * at a line): the init container's termination message (Kubernetes keeps 4096 bytes). Returns the
 * length written. */
size_t gs_doc_summary(const struct gs_doc_report *r, char *buf, size_t len);

/* ---- the API server (api.c, pure): what the doctor's requests found, as findings -------------- */

#define GS_DOC_MIG_LABEL "nvidia.com/mig.config" /* NVIDIA's MIG manager acts on it */

/* What src/cli/doctor.c asked the API server (docs/doctor.md, the api findings). Strings may be
 * NULL where not known. */
struct gs_doc_api {
    const char *server;       /* the API server's URL; NULL: no API access */
    const char *source;       /* how: "--kubeconfig FILE", "the in-cluster service account" */
    const char *why_none;     /* server NULL: why there is no access, or the configuration's error */
    bool bad_config;          /* a configuration was given and cannot be used (a fail, not a skip) */
    const char *node;         /* the Node's name, as the agent will use it */
    const char *node_from;    /* where the name came from: "--node-name", "NODE_NAME", "the host name" */
    int node_r;               /* GET /api/v1/nodes/NAME: 0, -EACCES (401), -EPERM (403), -ENOENT, -errno */
    const char *node_err;     /* its error line */
    const char *mig_label;    /* the Node's nvidia.com/mig.config value (NULL: absent) */
    const char *mig_config;   /* the policy's gpuslice.mig.config ("" or NULL: gpuslice leaves MIG alone) */
    bool mig_warn;            /* gpuslice.coexistence.otherMigManager: warn */
    bool dra;                 /* the agent serves the DRA driver (--dra) */
    int dra_api_r;            /* GET /apis/resource.k8s.io/v1 */
    const char *dra_api_err;
    int sar_r;                /* the SelfSubjectAccessReview's POST */
    const char *sar_err;
    bool sar_allowed;         /* its status.allowed: may create resource.k8s.io resourceslices */
    const char *sar_reason;   /* its status.reason */
};

/* Adds the api findings: `api` (access and authentication), `api.node` (the Node exists),
 * `api.mig-manager` (nvidia.com/mig.config while gpuslice manages MIG), `api.dra` and
 * `api.dra.rbac` (with --dra). Without access: one `api` warning (a node can work without it). */
void gs_doc_api_findings(struct gs_doc_report *r, const struct gs_doc_api *a);

/* ---- the scheduler extender (extender.c, pure; the requests: probe.c) ------------------------- */

#define GS_DOC_EXT_PROBE_POD "gpuslice-doctor-probe" /* the name and UID of the filter's pod */

/* What `doctor --extender URL` asked the extender. Strings may be NULL where not known. */
struct gs_doc_extender {
    const char *url;          /* the urlPrefix the scheduler's configuration names */
    const char *bad_url;      /* not a usable URL: why (the other fields are unset) */
    const char *base;         /* scheme://host[:port] of url: where /healthz is */
    const char *node;         /* the node the filter is asked about */
    int health_r;             /* GET BASE/healthz: 0 (2xx), -errno */
    const char *health_err;
    int filter_r;             /* POST URL/filter: 0 (2xx, JSON), -errno */
    const char *filter_err;
    bool client_cert;         /* a client certificate was presented (--extender-cert) */
    const struct json_t *filter_answer; /* its answer (jansson), when filter_r is 0 */
    bool warn_only;           /* --extender-warn: what would fail is a warning (the node stays ready) */
};

/* base: scheme://host[:port] of an http:// or https:// URL (the extender serves /healthz there,
 * its verbs under any prefix). -EINVAL, -ENAMETOOLONG with why in err ("--extender URL: ..."). */
int gs_doc_extender_base(const char *url, char *base, size_t len, char *err, size_t errlen);
/* The ExtenderArgs of the doctor's filter: a pod that asks for no resource (GS_DOC_EXT_PROBE_POD in
 * "default"), NodeNames [node], as a scheduler with nodeCacheCapable sends it. malloc'ed JSON, NULL
 * without memory. */
char *gs_doc_extender_args(const char *node);
/* Adds `extender` (/healthz answered) and, when it did, `extender.filter` (the node passes the
 * filter: no Error, the node among NodeNames; else the extender's reason). With warn_only each
 * finding that would fail is a warning, its message ending GS_DOC_EXT_WARN_NOTE. */
void gs_doc_extender_findings(struct gs_doc_report *r, const struct gs_doc_extender *e);
#define GS_DOC_EXT_WARN_NOTE " (--extender-warn: a warning, the agent starts)"
/* probe.c: GET /healthz and POST the filter (each 3 s to connect and 5 s in all; warn_only, the
 * chart's init container, which delays the agent: each 2 s in all, at most 4 s for both), then
 * the findings. */
/* The TLS material of a check of an extender over https:// (each NULL: none): the CA its serving
 * certificate chains to (NULL: the system's CAs), and the client certificate and key presented
 * (an extender with TLS answers 401 without one its client CA verifies, e.g. the scheduler's). */
struct gs_doc_extender_tls {
    const char *ca_file, *cert_file, *key_file;
};
void gs_doc_check_extender(struct gs_doc_report *r, const char *url, const char *node, bool warn_only,
                           const struct gs_doc_extender_tls *tls);

/* ---- parsers (parse.c): hostile input, bounded ------------------------------------------------- */

#define GS_DOC_CONFIG_MAX (1u << 20)   /* bytes of a runtime config file read */
#define GS_DOC_LINE_MAX 4096           /* a longer line is an error */
#define GS_DOC_ARRAY_LINES 64          /* lines an array value may span */
#define GS_DOC_MAX_DIRS 8              /* entries of cdi_spec_dirs kept */
#define GS_DOC_DIR_MAX 256

enum gs_doc_runtime { GS_DOC_CONTAINERD, GS_DOC_CRIO };

/* What a runtime's configuration says about CDI. containerd: `version` (2: containerd 1.7 or 2.x,
 * table plugins."io.containerd.grpc.v1.cri"; 3: containerd 2.x, plugins."io.containerd.cri.v1.runtime";
 * 1 or absent: plugins.cri), enable_cdi and cdi_spec_dirs in that table. CRI-O: cdi_spec_dirs in
 * [crio.runtime] (CRI-O has no switch: CDI is always on). */
struct gs_doc_cdi_config {
    int version;                     /* containerd's version key (0: absent) */
    int enable_cdi;                  /* -1 absent, 0 false, 1 true */
    unsigned enable_line;            /* its line (0: absent) */
    bool dirs_given;                 /* cdi_spec_dirs present */
    unsigned dirs_line;
    unsigned n_dirs;                 /* kept entries (at most GS_DOC_MAX_DIRS) */
    char dirs[GS_DOC_MAX_DIRS][GS_DOC_DIR_MAX];
    bool imports;                    /* containerd's imports = [...]: drop-in files not read */
};

/* A strict line scanner over the TOML subset these files use: [table] and [[array]] headers
 * (bare, "double" or 'single' quoted parts), KEY = VALUE lines with dotted keys, values true,
 * false, integers, one-line strings and arrays of strings (spanning up to GS_DOC_ARRAY_LINES
 * lines); comments. Values of other keys are not interpreted (an inline table, a float, a date
 * pass). Errors: "NAME:LINE: why" for a line over GS_DOC_LINE_MAX, a header without its ']', a
 * malformed value of a key it reads, text over GS_DOC_CONFIG_MAX. Returns 0, -EINVAL. */
int gs_doc_cdi_config_parse(enum gs_doc_runtime rt, const char *name, const char *text, size_t len,
                            struct gs_doc_cdi_config *out, char *err, size_t errlen);
/* The CDI setting that is in force: enable_cdi as written, else the runtime's default (containerd
 * version 3: on; version 2 or older: off in containerd 1.7, on in 2.x, so -1 "unknown"; CRI-O: on). */
int gs_doc_cdi_enabled(enum gs_doc_runtime rt, const struct gs_doc_cdi_config *c);
/* The table a runtime's CDI keys belong in, for the fix text. */
const char *gs_doc_cdi_table(enum gs_doc_runtime rt, int version);

/* CapEff from /proc/self/status text: 0, -ENOENT without the line, -EINVAL when malformed. */
int gs_doc_capeff_parse(const char *text, size_t len, unsigned long long *capeff);
#define GS_DOC_CAP_SYS_ADMIN 21

/* ---- probes (probe.c): the I/O ------------------------------------------------------------------ */

/* Whether a directory is usable by the agent: exists and is writable, or can be created (its
 * nearest existing ancestor is a writable directory). Returns 0, or -errno with `why` set
 * ("/x is a file", "/x: Read-only file system"). *exists: whether it exists now. */
int gs_doc_dir_usable(const char *path, bool *exists, char *why, size_t whylen);

/* dlopen()s a library in a child process (its constructors run there, not here). Returns 0, or
 * -1 with dlerror()'s text in `why`. */
int gs_doc_lib_loadable(const char *path, char *why, size_t whylen);

/* Calls fn for each entry name of a directory (at most `max`, in readdir order), with whether it
 * is a socket. Returns the number seen, or -errno. */
typedef void (*gs_doc_entry_fn)(void *ctx, const char *dir, const char *name, bool is_socket);
int gs_doc_list_dir(const char *dir, unsigned max, gs_doc_entry_fn fn, void *ctx);

/* ---- the DRA driver's checkpoint (dracheck.c, I/O through src/dra/ckptfile.h) ------------------ */

/* `dra.checkpoint`: dir (PLUGINS/<driver>) absent: ok with dra, else nothing; its checkpoint.json
 * read as the agent reads it: ok (the claims), fail (a newer version: the driver does not start),
 * warn (damaged: set aside at the start); a warning for each damaged checkpoint set aside there,
 * with why it was (read again). */
void gs_doc_check_dra_checkpoint(struct gs_doc_report *r, const char *dir, bool dra);

#endif
