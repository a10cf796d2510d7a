/* root.c: the simulated node's root, ROOT = STATE_DIR/root, the files a real node's driver puts
 * in /proc, /dev, /sys and its driver root, for the tools that read them (`cdi generate`, the
 * agent's device specs and CDI spec, NVIDIA's device plugin):
 *
 *   proc/devices                          nvidia-frontend, nvidia-caps and nvidia-uvm majors
 *   proc/driver/nvidia-caps/mig-minors    every GPU's GI and CI capability minors, the driver's format
 *   proc/PID -> /proc/PID                 each simulated GPU process (a process of this host), so
 *                                         what reads its maps finds them (the agent's guard reconcile)
 *   sys/bus/pci/devices/BUS/numa_node     each GPU's NUMA node (topology.c)
 *   dev/nvidia0..N-1, nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset (plain files)
 *   dev/nvidia-caps/nvidia-capN           config, monitor and each existing GI and CI (kept in sync)
 *   usr/bin/nvidia-smi                    a stand-in script
 *   usr/lib/ARCH-linux-gnu/libnvidia-ml.so.1 -> libnvidia-ml.so.VERSION -> this library;
 *                                         libcuda.so.1 -> libcuda.so.VERSION (a name only, empty):
 *                                         the driver's layout, which NVIDIA's CDI generator searches
 *   etc/ld.so.cache                       the linker cache of those libraries (ldcache_write.c)
 *
 * Device nodes are plain files: creating character devices needs CAP_MKNOD, and every reader
 * takes the numbers from proc/devices and mig-minors, not from the files. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ldcache_write.h"
#include "simlib.h"
#include "util/util.h"

#define STAMP_NAME ".gpuslice-sim-root"
#define CAPS_PER_GI 9     /* the GI's access minor, then one per CI 0..7 */
#define CAPS_PER_GPU (SIM_MAX_GI * CAPS_PER_GI)
#define MAX_CAP_MINOR (3 + GS_NODE_MAX_GPUS * CAPS_PER_GPU)

#if defined(__aarch64__)
#define LIB_DIR "usr/lib/aarch64-linux-gnu"
#define CACHE_FLAGS 0x0a03u /* FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64 */
#else
#define LIB_DIR "usr/lib/x86_64-linux-gnu"
#define CACHE_FLAGS 0x0303u /* FLAG_ELF_LIBC6 | FLAG_X8664_LIB64 */
#endif

/* Set by each entry point (sim_root_create, sim_root_sync): the node's state and its directory,
 * the library's (lib.c), passed in so that root.c does not reach back into lib.c. */
static const struct sim_state *st;
static const char *state_dir;

void sim_root_dir(const char *dir, char *buf, size_t len) {
    if (snprintf(buf, len, "%s/root", dir) >= (int)len && len)
        buf[0] = '\0'; /* too long: no root (sim_init bounds the state directory) */
}

unsigned sim_cap_minor(unsigned gpu_minor, unsigned gi, int ci) {
    return 3 + gpu_minor * CAPS_PER_GPU + gi * CAPS_PER_GI + (ci < 0 ? 0 : 1 + (unsigned)ci);
}

/* ROOT/rel, its directory created. */
static int root_path(const char *rel, char path[PATH_MAX]) {
    char root[PATH_MAX];
    sim_root_dir(state_dir, root, sizeof(root));
    if (snprintf(path, PATH_MAX, "%s/%s", root, rel) >= PATH_MAX)
        return -ENAMETOOLONG;
    char dir[PATH_MAX];
    gs_strlcpy(dir, path, sizeof(dir));
    char *slash = strrchr(dir, '/');
    *slash = '\0';
    return gs_mkdir_p(dir, 0755);
}

static int put_file(const char *rel, const void *data, size_t len, mode_t mode) {
    char path[PATH_MAX];
    int r = root_path(rel, path);
    if (r < 0 || (r = gs_write_file_atomic(path, data, len, false)) < 0)
        return r;
    return chmod(path, mode) < 0 ? -errno : 0;
}

static int put_text(const char *rel, const char *text) { return put_file(rel, text, strlen(text), 0644); }

static int put_link(const char *rel, const char *target) {
    char path[PATH_MAX];
    int r = root_path(rel, path);
    if (r < 0)
        return r;
    if (unlink(path) < 0 && errno != ENOENT)
        return -errno;
    return symlink(target, path) < 0 ? -errno : 0;
}

static int write_mig_minors(void) {
    size_t cap = 64 + (size_t)st->n_gpus * CAPS_PER_GPU * 32, n = 0;
    _cleanup_free_ char *text = malloc(cap);
    if (!text)
        return -ENOMEM;
    n += (size_t)snprintf(text + n, cap - n, "config 1\nmonitor 2\n");
    for (unsigned g = 0; g < st->n_gpus; g++)
        for (unsigned gi = 0; gi < SIM_MAX_GI; gi++) {
            n += (size_t)snprintf(text + n, cap - n, "gpu%u/gi%u/access %u\n", g, gi, sim_cap_minor(g, gi, -1));
            for (int ci = 0; ci < SIM_MAX_CI; ci++)
                n += (size_t)snprintf(text + n, cap - n, "gpu%u/gi%u/ci%d/access %u\n", g, gi, ci,
                                      sim_cap_minor(g, gi, ci));
        }
    return put_file("proc/driver/nvidia-caps/mig-minors", text, n, 0444);
}

static int write_dev_and_sys(void) {
    char rel[128], text[32];
    int r = 0;
    for (unsigned g = 0; g < st->n_gpus && r >= 0; g++) {
        snprintf(rel, sizeof(rel), "dev/nvidia%u", g);
        if ((r = put_file(rel, "", 0, 0666)) < 0)
            break;
        unsigned dom, bus;
        sim_pci_location(g, &dom, &bus);
        snprintf(rel, sizeof(rel), "sys/bus/pci/devices/%04x:%02x:00.0/numa_node", dom, bus);
        snprintf(text, sizeof(text), "%d\n", sim_numa_node(g));
        r = put_text(rel, text);
    }
    static const char *const common[] = { "dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-uvm-tools",
                                          "dev/nvidia-modeset" };
    for (size_t i = 0; i < GS_ARRAY_SIZE(common) && r >= 0; i++)
        r = put_file(common[i], "", 0, 0666);
    return r;
}

static int write_driver_root(void) {
    Dl_info info;
    char self[PATH_MAX];
    if (!dladdr((void *)&sim_root_dir, &info) || !info.dli_fname || !realpath(info.dli_fname, self))
        return -ENOENT;
    static const char smi[] = "#!/bin/sh\n"
                              "# nvidia-smi stand-in of gpuslice's simulated node (docs/simulator.md#the-nodes-root)\n"
                              "echo \"nvidia-smi: this is a simulated node ($GPUSLICE_SIM_NODE); "
                              "use: gpuslice --sim NODE.yaml inspect\"\n";
    /* as the driver installs them: the SONAME a link to the file named by the driver's version
     * (NVIDIA's CDI generator, in its device plugin, locates libcuda.so.VERSION) */
    char nvml_name[64], cuda_name[64], nvml_path[128], cuda_path[128];
    snprintf(nvml_name, sizeof(nvml_name), "libnvidia-ml.so.%s", st->driver_version);
    snprintf(cuda_name, sizeof(cuda_name), "libcuda.so.%s", st->driver_version);
    snprintf(nvml_path, sizeof(nvml_path), LIB_DIR "/%s", nvml_name);
    snprintf(cuda_path, sizeof(cuda_path), LIB_DIR "/%s", cuda_name);
    int r = put_file("usr/bin/nvidia-smi", smi, sizeof(smi) - 1, 0755);
    if (r >= 0)
        r = put_link(nvml_path, self);
    if (r >= 0)
        r = put_link(LIB_DIR "/libnvidia-ml.so.1", nvml_name);
    if (r >= 0)
        r = put_file(cuda_path, "", 0, 0644);
    if (r >= 0)
        r = put_link(LIB_DIR "/libcuda.so.1", cuda_name);
    if (r < 0)
        return r;
    const struct sim_ldcache_entry entries[] = {
        { "libnvidia-ml.so.1", "/" LIB_DIR "/libnvidia-ml.so.1" },
        { "libcuda.so.1", "/" LIB_DIR "/libcuda.so.1" },
    };
    _cleanup_free_ unsigned char *cache = NULL;
    size_t len;
    if ((r = sim_ldcache_build(entries, GS_ARRAY_SIZE(entries), CACHE_FLAGS, &cache, &len)) < 0)
        return r;
    return put_file("etc/ld.so.cache", cache, len, 0644);
}

static int sync_caps(void);

/* ROOT/rel as a directory stream (created if missing), or NULL with -errno in *r. */
static DIR *open_root_dir(const char *rel, int *r) {
    char path[PATH_MAX], sub[PATH_MAX];
    snprintf(sub, sizeof(sub), "%s/.", rel);
    if ((*r = root_path(sub, path)) < 0)
        return NULL;
    DIR *d = opendir(path);
    if (!d)
        *r = -errno;
    return d;
}

/* What the root was made from: rebuilt when the node, the library's path or this layout change. */
static void stamp_text(char *buf, size_t len) {
    Dl_info info;
    const char *self = dladdr((void *)&sim_root_dir, &info) && info.dli_fname ? info.dli_fname : "?";
    snprintf(buf, len, "root v2\n%s\n%s\n", self, st->fingerprint);
}

int sim_root_create(const struct sim_state *node, const char *dir) {
    st = node;
    state_dir = dir;
    char stamp[PATH_MAX + sizeof(st->fingerprint) + 32], path[PATH_MAX];
    stamp_text(stamp, sizeof(stamp));
    int r = root_path(STAMP_NAME, path);
    if (r < 0)
        return r;
    _cleanup_free_ char *old = NULL;
    if (gs_read_file(path, sizeof(stamp), &old, NULL) < 0 || strcmp(old, stamp) != 0) {
        static const char devices[] = "Character devices:\n  1 mem\n  4 /dev/vc/0\n  5 /dev/tty\n195 nvidia-frontend\n"
                                      "235 nvidia-caps\n509 nvidia-uvm\n\nBlock devices:\n  7 loop\n259 blkext\n";
        if ((r = put_text("proc/devices", devices)) < 0 || (r = write_mig_minors()) < 0 ||
            (r = write_dev_and_sys()) < 0 || (r = write_driver_root()) < 0 || (r = put_text(STAMP_NAME, stamp)) < 0)
            return r;
    }
    return sim_root_sync(st, state_dir);
}

/* proc/PID links for the simulated processes, the others removed. */
static int sync_proc_links(void) {
    int r = 0;
    DIR *d = open_root_dir("proc", &r);
    if (!d)
        return r;
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned long long pid;
        if (gs_parse_uint(e->d_name, 1, 0xffffffffu, &pid) < 0)
            continue;
        bool keep = false;
        for (unsigned g = 0; g < st->n_gpus && !keep; g++)
            for (unsigned i = 0; i < st->gpus[g].n_procs && !keep; i++)
                keep = st->gpus[g].procs[i].pid == pid;
        if (!keep && unlinkat(dirfd(d), e->d_name, 0) < 0 && errno != ENOENT)
            r = -errno;
    }
    for (unsigned g = 0; g < st->n_gpus && r >= 0; g++)
        for (unsigned i = 0; i < st->gpus[g].n_procs && r >= 0; i++) {
            char name[16], target[32];
            snprintf(name, sizeof(name), "%u", st->gpus[g].procs[i].pid);
            snprintf(target, sizeof(target), "/proc/%u", st->gpus[g].procs[i].pid);
            if (symlinkat(target, dirfd(d), name) < 0 && errno != EEXIST)
                r = -errno;
        }
    closedir(d);
    return r;
}

int sim_root_sync(const struct sim_state *node, const char *dir) {
    st = node;
    state_dir = dir;
    int r = sync_caps();
    int r2 = sync_proc_links();
    return r < 0 ? r : r2;
}

/* dev/nvidia-caps: config (1), monitor (2), and the GI and CI minors of the instances that exist,
 * as nvidia-modprobe leaves them on a real node. */
static int sync_caps(void) {
    static bool want[MAX_CAP_MINOR];
    memset(want, 0, sizeof(want));
    want[1] = want[2] = true;
    for (unsigned g = 0; g < st->n_gpus; g++) {
        const struct sim_gpu *gpu = &st->gpus[g];
        for (unsigned gi = 0; gpu->mig_current && gi < SIM_MAX_GI; gi++) {
            if (!gpu->gis[gi].used)
                continue;
            want[sim_cap_minor(g, gi, -1)] = true;
            for (int ci = 0; ci < SIM_MAX_CI; ci++)
                if (gpu->gis[gi].cis[ci].used)
                    want[sim_cap_minor(g, gi, ci)] = true;
        }
    }
    int r = 0;
    DIR *d = open_root_dir("dev/nvidia-caps", &r);
    if (!d)
        return r;
    static bool have[MAX_CAP_MINOR];
    memset(have, 0, sizeof(have));
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned long long m;
        if (strncmp(e->d_name, "nvidia-cap", 10) || gs_parse_uint(e->d_name + 10, 0, MAX_CAP_MINOR - 1, &m) < 0)
            continue;
        if (want[m])
            have[m] = true;
        else if (unlinkat(dirfd(d), e->d_name, 0) < 0 && errno != ENOENT)
            r = -errno;
    }
    for (unsigned m = 1; m < MAX_CAP_MINOR && r >= 0; m++) {
        if (!want[m] || have[m])
            continue;
        char name[32];
        snprintf(name, sizeof(name), "nvidia-cap%u", m);
        int fd = openat(dirfd(d), name, O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
        if (fd < 0)
            r = -errno;
        else
            close(fd);
    }
    closedir(d);
    return r;
}
