/* exec.c: `gpuslice exec --vram 8GiB [--compute 30%] [--device N] -- CMD...`: runs any command
 * under the guard with those limits, so the VRAM quota can be tried without Kubernetes. Keeps the
 * limits in a sealed memfd at GS_GUARD_ANCHOR_FD of its own process and is the child subreaper of
 * everything the command starts, so the guard in every descendant finds them through its ancestors
 * whatever its environment and descriptors (guard/guard_anchor.h); keeps the counters region in a
 * private directory, preloads the guard, and removes the directory when the command ends. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util/quantity.h"
#include "util/util.h"
#include "../guard/guard_anchor.h"
#include "../guard/guard_layout.h"

#define VRAM_MIN (1ULL << 20) /* the smallest quota, as for the policy's memoryPerReplica */

static int parse_percent(const char *s, unsigned *out) {
    char buf[16];
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, n + 1);
    if (buf[n - 1] == '%')
        buf[n - 1] = '\0';
    unsigned long long v;
    if (gs_parse_uint(buf, 1, 100, &v) < 0)
        return -EINVAL;
    *out = (unsigned)v;
    return 0;
}

static volatile sig_atomic_t g_child;

/* SIGTERM, SIGHUP, SIGUSR1/2 sent to `gpuslice exec` (by a service manager, `timeout`, kill) go to
 * the command, which decides when to exit; exec then cleans up and exits with its status. */
static void forward_signal(int sig) {
    if (g_child > 0)
        kill((pid_t)g_child, sig);
}

/* The UUID of GPU `index`, so that NVML lookups inside (nvidia-smi) find the quota on the right GPU
 * although CUDA numbers it 0. Returns an exit code; prints the error. */
static int device_uuid(const struct cli *cli, unsigned index, char *uuid, size_t len, const char **arch) {
    struct gpu_node *node;
    struct gs_inventory *inv;
    int rc = cli_read_node(cli, &node, &inv);
    if (rc != GS_EXIT_OK)
        return rc;
    if (index >= inv->n_gpus) {
        fprintf(stderr, "gpuslice exec: --device %u: the node has %u GPU%s", index, inv->n_gpus,
                inv->n_gpus == 1 ? "" : "s");
        if (inv->n_gpus)
            fprintf(stderr, " (0-%u)", inv->n_gpus - 1);
        fputc('\n', stderr);
        rc = GS_EXIT_USAGE;
    } else {
        gs_strlcpy(uuid, inv->gpus[index].uuid, len);
        *arch = gs_arch_name(inv->gpus[index].arch);
    }
    free(inv);
    gpu_node_close(node);
    return rc;
}

/* Puts the sealed limits memfd cfd at GS_GUARD_ANCHOR_FD, close-on-exec (the command finds it
 * through /proc/PID/fd, not by inheritance). A descriptor the caller passed at that number is kept
 * at *saved for the command (-1 if none). The descriptor number may lie above the soft limit on
 * open files: the limit is raised for the dup and put back. 0 or -errno. */
static int place_anchor(int cfd, int *saved) {
    if (cfd == GS_GUARD_ANCHOR_FD) { /* memfd_create found every lower number taken */
        *saved = -1;
        return 0;
    }
    *saved = fcntl(GS_GUARD_ANCHOR_FD, F_GETFD) < 0 ? -1 : fcntl(GS_GUARD_ANCHOR_FD, F_DUPFD_CLOEXEC, 3);
    if (fcntl(GS_GUARD_ANCHOR_FD, F_GETFD) >= 0 && *saved < 0)
        return -errno;
    struct rlimit rl, raised;
    bool raise = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur <= GS_GUARD_ANCHOR_FD;
    if (raise) {
        raised = rl;
        raised.rlim_cur = GS_GUARD_ANCHOR_FD + 1;
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max <= GS_GUARD_ANCHOR_FD)
            return -EMFILE;
        if (setrlimit(RLIMIT_NOFILE, &raised) < 0)
            return -errno;
    }
    int r = dup3(cfd, GS_GUARD_ANCHOR_FD, O_CLOEXEC) < 0 ? -errno : 0;
    if (raise)
        setrlimit(RLIMIT_NOFILE, &rl);
    return r;
}

int cmd_exec(const struct cli *cli, int argc, char **argv) {
    static const struct option opts[] = {
        { "vram", required_argument, NULL, 'v' },   { "compute", required_argument, NULL, 'c' },
        { "device", required_argument, NULL, 'd' }, { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    unsigned long long vram = 0, device = ~0ULL;
    unsigned compute = 0;
    int c;
    while ((c = getopt_long(argc, argv, "+v:c:d:h", opts, NULL)) != -1) {
        switch (c) {
        case 'v':
            if (gs_quantity_bytes(optarg, 1, INT64_MAX, &vram) < 0) {
                return cli_usage_error("exec", "--vram: '%s' is not a size such as 8GiB or 512MiB", optarg);
            }
            /* A bare number would be bytes: "--vram 100" is 100 bytes, which no CUDA program fits in. */
            if (!isalpha((unsigned char)optarg[strlen(optarg) - 1])) {
                return cli_usage_error("exec", "--vram: '%s' has no unit; give one, such as %sMiB or %sGiB", optarg,
                                       optarg, optarg);
            }
            if (vram < VRAM_MIN) {
                return cli_usage_error("exec", "--vram: '%s' is less than 1MiB, the smallest quota", optarg);
            }
            break;
        case 'c':
            if (parse_percent(optarg, &compute) < 0) {
                return cli_usage_error("exec", "--compute: '%s' is not a percentage 1..100 (e.g. 30%%)", optarg);
            }
            break;
        case 'd':
            if (gs_parse_uint(optarg, 0, 63, &device) < 0) {
                return cli_usage_error("exec", "--device: '%s' is not a GPU index", optarg);
            }
            break;
        case 'h':
            printf("Usage: gpuslice exec --vram SIZE [--compute PCT%%] [--device N] -- COMMAND [ARGS...]\n\n"
                   "Runs COMMAND under the guard (libgpuslice-guard.so): its CUDA allocations, and those of\n"
                   "every process it starts, together get at most SIZE of GPU memory per GPU; beyond that\n"
                   "CUDA returns out-of-memory, and cuMemGetInfo reports SIZE as the total.\n\n"
                   "  --vram SIZE      memory quota per GPU, with a unit, at least 1MiB (8GiB, 512MiB, ...)\n"
                   "  --compute PCT    compute share: kernel launches are paced so that the command gets at\n"
                   "                   most PCT %% of each GPU's time (measured with CUDA events)\n"
                   "  --device N       run on GPU N only (CUDA_VISIBLE_DEVICES=N; its UUID is read from\n"
                   "                   NVML so that nvidia-smi inside shows the quota on that GPU)\n\n"
                   "SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 are passed on to COMMAND; the exit status is\n"
                   "COMMAND's (128+N when a signal N ended it). The limits are in a sealed memfd that this\n"
                   "process keeps (descriptor %d); the guard of every process COMMAND starts reads them\n"
                   "there, whatever its environment. The counters live in a private directory under\n"
                   "$XDG_RUNTIME_DIR (or /tmp), removed when COMMAND ends. Each CUDA context counts its\n"
                   "estimated overhead per GPU.\n",
                   GS_GUARD_ANCHOR_FD);
            return GS_EXIT_OK;
        default: return GS_EXIT_USAGE;
        }
    }
    if (!vram) {
        return cli_usage_error("exec", "--vram is required");
    }
    if (optind >= argc) {
        return cli_usage_error("exec", "no command given (gpuslice exec --vram 8GiB -- python train.py)");
    }
    /* Under another gpuslice exec, the guard would give the command that one's limits anyway. */
    pid_t outer = gs_guard_anchor_find();
    if (outer > 0) {
        fprintf(stderr,
                "gpuslice exec: already under gpuslice exec (pid %d): its limits apply to every process it starts; "
                "run the command directly, or outside it\n",
                (int)outer);
        return GS_EXIT_FAILURE;
    }
    char lib_path[PATH_MAX];
    const char *lib = cli_guard_lib_path(lib_path);
    if (!lib) {
        fprintf(stderr, "gpuslice exec: %s not found (set GPUSLICE_GUARD_LIB)\n", GS_GUARD_LIB_NAME);
        return GS_EXIT_FAILURE;
    }
    char uuid[96] = "";
    const char *arch = NULL; /* without --device: the GPUs are not read, the largest default counts */
    if (device != ~0ULL) {
        int urc = device_uuid(cli, (unsigned)device, uuid, sizeof(uuid), &arch);
        if (urc != GS_EXIT_OK)
            return urc;
    }
    const char *rt = getenv("XDG_RUNTIME_DIR");
    char dir[200];
    if (snprintf(dir, sizeof(dir), "%s/gpuslice-exec-XXXXXX", rt && *rt ? rt : "/tmp") >= (int)sizeof(dir))
        snprintf(dir, sizeof(dir), "/tmp/gpuslice-exec-XXXXXX");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "gpuslice exec: cannot create %s: %s\n", dir, strerror(errno));
        return GS_EXIT_FAILURE;
    }
    /* The quota applies to every device the command sees (with --device, just the one: CUDA
     * ordinal 0 is GPU `device`, CUDA_VISIBLE_DEVICES). */
    struct gs_guard_row rows[GS_GUARD_MAX_DEVICES];
    unsigned n = device == ~0ULL ? GS_GUARD_MAX_DEVICES : 1;
    for (unsigned i = 0; i < n; i++)
        rows[i] = (struct gs_guard_row){ (int)i, uuid, vram, compute, arch };
    struct gs_guard_limits l;
    char text[4096], conf[256], region[256];
    snprintf(region, sizeof(region), "%s/region", dir);
    int len = gs_guard_limits_build(rows, n, region, &l);
    if (len == 0)
        len = gs_guard_limits_format(&l, text, sizeof(text));
    snprintf(conf, sizeof(conf), "%s/limits", dir);
    int rc = GS_EXIT_FAILURE;
    /* The limits in a sealed memfd, at GS_GUARD_ANCHOR_FD of this process: its content cannot be
     * changed by anyone, and the guard of every process this one starts reads it there
     * (docs/guard.md, "Limits a child cannot swap"). */
    int cfd = len < 0 ? -1 : memfd_create(GS_GUARD_ANCHOR_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (cfd < 0 || write(cfd, text, (size_t)len) != len ||
        fcntl(cfd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0) {
        fprintf(stderr, "gpuslice exec: cannot write the limits: %s\n", len < 0 ? strerror(-len) : strerror(errno));
        if (cfd >= 0)
            close(cfd);
        goto out;
    }
    int saved = -1, pr = place_anchor(cfd, &saved);
    if (cfd != GS_GUARD_ANCHOR_FD)
        close(cfd);
    if (pr < 0) {
        fprintf(stderr, "gpuslice exec: cannot keep the limits at descriptor %d: %s\n", GS_GUARD_ANCHOR_FD,
                strerror(-pr));
        goto out;
    }
    /* Orphans (a daemonised worker, a launcher that exits before its workers) stay below this
     * process, so their guard still finds the limits; they are reaped below. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
        fprintf(stderr, "gpuslice exec: cannot become the command's subreaper: %s\n", strerror(errno));
        goto out;
    }
    snprintf(conf, sizeof(conf), "/proc/%d/fd/%d", (int)getpid(), GS_GUARD_ANCHOR_FD);
    /* Forwarding is set up before the fork, with the signals blocked until the pid is known. */
    sigset_t fwd, old_mask;
    sigemptyset(&fwd);
    int forwarded[] = { SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 };
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
        sigaddset(&fwd, forwarded[i]);
    sigprocmask(SIG_BLOCK, &fwd, &old_mask);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "gpuslice exec: fork: %s\n", strerror(errno));
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
        goto out;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
        if (saved >= 0) /* the caller's descriptor at that number, for the command */
            dup2(saved, GS_GUARD_ANCHOR_FD);
        const char *old = getenv("LD_PRELOAD");
        char preload[PATH_MAX * 2];
        snprintf(preload, sizeof(preload), "%s%s%s", lib, old && *old ? ":" : "", old && *old ? old : "");
        setenv("LD_PRELOAD", preload, 1);
        setenv(GS_GUARD_CONFIG_ENV, conf, 1);
        if (device != ~0ULL) {
            char d[24];
            snprintf(d, sizeof(d), "%llu", device);
            setenv("CUDA_VISIBLE_DEVICES", d, 1);
        }
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "gpuslice exec: %s: %s\n", argv[optind], strerror(errno));
        _exit(127);
    }
    /* The command owns the terminal's signals (the terminal sends them to the whole group). */
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    g_child = pid;
    struct sigaction sa = { .sa_handler = forward_signal };
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
        sigaction(forwarded[i], &sa, NULL);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    /* Until the command ends; orphaned descendants re-parented here are reaped meanwhile. */
    int status = 0;
    for (;;) {
        int st;
        pid_t w = waitpid(-1, &st, 0);
        if (w == pid) {
            status = st;
            break;
        }
        if (w < 0 && errno != EINTR)
            break;
    }
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
out:
    unlink(region);
    rmdir(dir);
    return rc;
}
