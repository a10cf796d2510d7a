/* alloc.c: Allocate answers and preferred allocations (pure; see alloc.h). */
#include "core/alloc.h"
#include "place/frag.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- mig-minors ----------------------------------------------------------------------------- */

/* Reads a decimal number in 0..max at *p and advances past it. */
static bool take_number(const char **p, unsigned max, unsigned *out) {
    unsigned long v = 0;
    const char *s = *p;
    if (*s < '0' || *s > '9')
        return false;
    for (; *s >= '0' && *s <= '9'; s++) {
        v = v * 10 + (unsigned long)(*s - '0');
        if (v > max)
            return false;
    }
    *out = (unsigned)v;
    *p = s;
    return true;
}

/* "gpu<N>/gi<N>/access" or "gpu<N>/gi<N>/ci<N>/access" (GPU minor < 256, GI < 15, CI < 8 in the
 * driver; the bounds here only keep the numbers sane). */
static bool parse_cap_path(const char *s, struct gs_mig_minor *e) {
    unsigned ci;
    if (strncmp(s, "gpu", 3) != 0)
        return false;
    s += 3;
    if (!take_number(&s, 4096, &e->gpu) || strncmp(s, "/gi", 3) != 0)
        return false;
    s += 3;
    if (!take_number(&s, 4096, &e->gi))
        return false;
    if (strcmp(s, "/access") == 0) {
        e->ci = -1;
        return true;
    }
    if (strncmp(s, "/ci", 3) != 0)
        return false;
    s += 3;
    if (!take_number(&s, 4096, &ci) || strcmp(s, "/access") != 0)
        return false;
    e->ci = (int)ci;
    return true;
}

int gs_mig_minors_parse(const char *name, const char *text, struct gs_mig_minors *out, char *err, size_t errlen) {
    struct gs_mig_minors mm = { 0 };
    size_t cap = 0;
    unsigned lineno = 0;
    const char *p = text;
    while (*p) {
        lineno++;
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[256];
        if (len >= sizeof(line)) {
            snprintf(err, errlen, "%s:%u: line too long", name, lineno);
            goto bad;
        }
        memcpy(line, p, len);
        line[len] = '\0';
        p = eol ? eol + 1 : p + len;
        if (!line[0])
            continue;
        char path[200], num[32], extra[2];
        if (sscanf(line, "%199s %31s %1s", path, num, extra) != 2) {
            snprintf(err, errlen, "%s:%u: expected '<path> <minor>'", name, lineno);
            goto bad;
        }
        unsigned long long minor;
        if (gs_parse_uint(num, 0, 1u << 20, &minor) < 0) {
            snprintf(err, errlen, "%s:%u: minor '%s' is not a number in 0..%u", name, lineno, num, 1u << 20);
            goto bad;
        }
        struct gs_mig_minor e = { 0, 0, -1, (unsigned)minor };
        if (!parse_cap_path(path, &e))
            continue; /* config, monitor, and paths of future drivers */
        if (mm.n == cap) {
            cap = cap ? cap * 2 : 64;
            struct gs_mig_minor *ne = realloc(mm.entries, cap * sizeof(*ne));
            if (!ne) {
                snprintf(err, errlen, "%s: out of memory", name);
                free(mm.entries);
                return -ENOMEM;
            }
            mm.entries = ne;
        }
        mm.entries[mm.n++] = e;
    }
    *out = mm;
    return 0;
bad:
    free(mm.entries);
    return -EINVAL;
}

void gs_mig_minors_free(struct gs_mig_minors *mm) {
    free(mm->entries);
    mm->entries = NULL;
    mm->n = 0;
}

int gs_mig_minor_lookup(const struct gs_mig_minors *mm, unsigned gpu, unsigned gi, int ci) {
    for (size_t i = 0; mm && i < mm->n; i++)
        if (mm->entries[i].gpu == gpu && mm->entries[i].gi == gi && mm->entries[i].ci == ci)
            return (int)mm->entries[i].minor;
    return -1;
}

/* ---- Allocate ------------------------------------------------------------------------------- */

/* Adds dev_root + path. Optional nodes (nvidia-uvm, ...) are skipped when absent; a missing GPU
 * or MIG capability node is an error: the container would start without its device. */
static int add_devspec(struct gs_alloc_response *out, const struct gs_policy *pol, const char *path, bool optional,
                       gs_exists_fn exists, void *ctx, char *err, size_t errlen) {
    for (unsigned i = 0; i < out->n_devspecs; i++)
        if (strcmp(out->devspecs[i].container_path, path) == 0)
            return 0;
    if (out->n_devspecs == GS_ALLOC_MAX_DEVSPECS) {
        snprintf(err, errlen, "too many device nodes in one allocation");
        return -E2BIG;
    }
    struct gs_devspec *d = &out->devspecs[out->n_devspecs];
    const char *root = pol->dev_root[0] ? pol->dev_root : "/";
    size_t rl = strlen(root);
    snprintf(d->host_path, sizeof(d->host_path), "%.*s%s", (int)(rl && root[rl - 1] == '/' ? rl - 1 : rl), root, path);
    if (exists && !exists(d->host_path, ctx)) {
        if (optional)
            return 0;
        snprintf(err, errlen, "device node %s does not exist", d->host_path);
        return -ENODEV;
    }
    gs_strlcpy(d->container_path, path, sizeof(d->container_path));
    gs_strlcpy(d->permissions, "rw", sizeof(d->permissions));
    out->n_devspecs++;
    return 0;
}

/* Position of `item` in a comma-separated list. */
static unsigned list_index(const char *list, const char *item) {
    size_t il = strlen(item);
    unsigned i = 0;
    for (const char *p = list; p && *p; i++) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        if (l == il && strncmp(p, item, il) == 0)
            return i;
        if (!comma)
            break;
        p = comma + 1;
    }
    return i;
}

/* Appends `item` to a comma-separated list unless it is already there. */
static int list_add_unique(char **list, size_t *len, const char *item) {
    size_t il = strlen(item);
    for (const char *p = *list; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        if (l == il && strncmp(p, item, il) == 0)
            return 0;
        p = comma ? comma + 1 : p + l;
    }
    char *n = realloc(*list, *len + il + 2);
    if (!n)
        return -ENOMEM;
    if (*len)
        n[(*len)++] = ',';
    memcpy(n + *len, item, il + 1);
    *len += il;
    *list = n;
    return 0;
}

int gs_alloc_add_env(struct gs_alloc_response *out, const char *key, const char *value) {
    if (strlen(key) >= sizeof(out->envs[0].key) || strlen(value) >= sizeof(out->envs[0].value))
        return -E2BIG;
    if (out->n_envs == GS_ALLOC_MAX_ENVS)
        return -ENOSPC;
    gs_strlcpy(out->envs[out->n_envs].key, key, sizeof(out->envs[0].key));
    gs_strlcpy(out->envs[out->n_envs].value, value, sizeof(out->envs[0].value));
    out->n_envs++;
    return 0;
}

int gs_alloc_add_mount(struct gs_alloc_response *out, const char *container_path, const char *host_path, bool read_only) {
    if (strlen(container_path) >= sizeof(out->extra_mounts[0].container_path) ||
        strlen(host_path) >= sizeof(out->extra_mounts[0].host_path))
        return -E2BIG;
    if (out->n_extra_mounts == GS_ALLOC_MAX_EXTRA_MOUNTS)
        return -ENOSPC;
    struct gs_mount *m = &out->extra_mounts[out->n_extra_mounts++];
    gs_strlcpy(m->container_path, container_path, sizeof(m->container_path));
    gs_strlcpy(m->host_path, host_path, sizeof(m->host_path));
    m->read_only = read_only;
    return 0;
}

/* The MPS part of an answer: one daemon (GPU or MIG instance), the replicas' limits summed. */
static int add_mps(const struct gs_resource *r, const char *const *ids, size_t n, const struct gs_policy *pol,
                   struct gs_alloc_response *out, char *err, size_t errlen) {
    unsigned percent = 0;
    unsigned long long pinned = 0;
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        const struct gs_device *d = gs_resource_device(r, ids[i]);
        if (d->kind != GS_DEV_MPS)
            continue;
        if (any && strcmp(out->mps_uuid, d->uuid) != 0) {
            snprintf(err, errlen, "MPS replicas of one container must share one GPU: %s and %s have different MPS "
                     "daemons", out->mps_uuid, d->uuid);
            return -EXDEV;
        }
        any = true;
        gs_strlcpy(out->mps_uuid, d->uuid, sizeof(out->mps_uuid));
        percent += d->mps_percent;
        pinned += d->mps_pinned;
    }
    if (!any)
        return 0;
    char host[256], value[64];
    if (snprintf(host, sizeof(host), "%s/%s/pipe", pol->mps_root, out->mps_uuid) >= (int)sizeof(host) ||
        gs_alloc_add_mount(out, GS_MPS_PIPE_IN_CONTAINER, host, false) < 0 ||
        snprintf(host, sizeof(host), "%s/shm", pol->mps_root) >= (int)sizeof(host) ||
        gs_alloc_add_mount(out, "/dev/shm", host, false) < 0 ||
        gs_alloc_add_env(out, "CUDA_MPS_PIPE_DIRECTORY", GS_MPS_PIPE_IN_CONTAINER) < 0)
        goto full;
    snprintf(value, sizeof(value), "%u", percent > 100 ? 100 : percent);
    if (gs_alloc_add_env(out, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", value) < 0)
        goto full;
    if (pinned) {
        /* The client sees one device (its container's), which MPS numbers 0. */
        unsigned long long mib = pinned >> 20;
        snprintf(value, sizeof(value), "0=%lluM", mib ? mib : 1);
        if (gs_alloc_add_env(out, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", value) < 0)
            goto full;
    }
    return 0;
full:
    snprintf(err, errlen, "the MPS root %s is too long for the Allocate answer", pol->mps_root);
    return -ENAMETOOLONG;
}

int gs_allocate(const struct gs_resource *r, const char *const *ids, size_t n, const struct gs_policy *pol,
                const struct gs_mig_minors *mm, gs_exists_fn exists, void *ctx, struct gs_alloc_response *out,
                char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (n == 0) {
        snprintf(err, errlen, "empty allocation request for %s", r->name);
        return -EINVAL;
    }
    if (r->replicated && r->fail_gt_one && n > 1) {
        snprintf(err, errlen, "maximum request size for shared resources is 1; found %zu", n);
        return -E2BIG;
    }
    /* Validate everything before building anything: an unknown ID fails the whole request. */
    for (size_t i = 0; i < n; i++) {
        if (!gs_resource_device(r, ids[i])) {
            snprintf(err, errlen, "unknown device ID '%.100s' for %s", ids[i], r->name);
            return -ENOENT;
        }
        for (size_t k = 0; k < i; k++) {
            if (strcmp(ids[k], ids[i]) == 0) {
                snprintf(err, errlen, "device ID '%.100s' requested twice", ids[i]);
                return -EINVAL;
            }
        }
    }
    size_t len = 0;
    int rc = 0;
    out->visible_env = (pol->list_strategy & (GS_LIST_ENVVAR | GS_LIST_VOLUME_MOUNTS)) != 0;
    if (pol->list_strategy & GS_LIST_VOLUME_MOUNTS) {
        out->mounts = calloc(n, sizeof(*out->mounts));
        if (!out->mounts) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    if (pol->pass_device_specs) {
        static const char *const ctl[] = { "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                           "/dev/nvidia-modeset" };
        for (size_t i = 0; i < GS_ARRAY_SIZE(ctl); i++)
            if ((rc = add_devspec(out, pol, ctl[i], true, exists, ctx, err, errlen)) < 0)
                goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        const struct gs_device *d = gs_resource_device(r, ids[i]);
        char item[GS_DEVICE_ID_MAX];
        if (pol->id_strategy == GS_ID_INDEX) {
            if (gs_device_is_mig(d))
                snprintf(item, sizeof(item), "%u:%u", d->gpu, d->gi_id);
            else
                snprintf(item, sizeof(item), "%u", d->gpu);
        } else {
            gs_strlcpy(item, d->uuid, sizeof(item)); /* replica suffix stripped: the physical UUID */
        }
        if ((rc = list_add_unique(&out->visible_devices, &len, item)) < 0)
            goto fail;
        if (pol->list_strategy & (GS_LIST_CDI_ANNOTATIONS | GS_LIST_CDI_CRI)) {
            unsigned k = 0;
            while (k < out->n_cdi && strcmp(out->cdi[k], d->uuid) != 0)
                k++;
            if (k == out->n_cdi) {
                if (k == GS_ALLOC_MAX_CDI) {
                    snprintf(err, errlen, "more than %d CDI devices in one allocation", GS_ALLOC_MAX_CDI);
                    rc = -E2BIG;
                    goto fail;
                }
                gs_strlcpy(out->cdi[out->n_cdi++], d->uuid, sizeof(out->cdi[0]));
            }
        }
        if (d->quota) {
            /* The container's CUDA ordinal of this GPU is its position in the list. */
            unsigned ordinal = list_index(out->visible_devices, item);
            unsigned k = 0;
            while (k < out->n_guarded && strcmp(out->guarded[k].uuid, d->uuid) != 0)
                k++;
            if (k == out->n_guarded) {
                if (k == GS_ALLOC_MAX_GUARDED) {
                    snprintf(err, errlen, "more than %d GPUs with a VRAM quota in one allocation", GS_ALLOC_MAX_GUARDED);
                    rc = -E2BIG;
                    goto fail;
                }
                out->n_guarded++;
                gs_strlcpy(out->guarded[k].uuid, d->uuid, sizeof(out->guarded[k].uuid));
                out->guarded[k].ordinal = ordinal;
                out->guarded[k].arch = d->arch;
            }
            out->guarded[k].bytes += d->quota; /* two replicas of one GPU: twice the quota */
        }
        if (out->mounts) {
            bool seen = false;
            for (unsigned k = 0; k < out->n_mounts; k++)
                seen |= strcmp(strrchr(out->mounts[k].container_path, '/') + 1, item) == 0;
            if (!seen) {
                struct gs_mount *m = &out->mounts[out->n_mounts++];
                snprintf(m->container_path, sizeof(m->container_path), "/var/run/nvidia-container-devices/%s", item);
                gs_strlcpy(m->host_path, "/dev/null", sizeof(m->host_path));
            }
        }
        if (pol->pass_device_specs) {
            char path[64];
            snprintf(path, sizeof(path), "/dev/nvidia%u", d->minor);
            if ((rc = add_devspec(out, pol, path, false, exists, ctx, err, errlen)) < 0)
                goto fail;
            if (gs_device_is_mig(d)) {
                int gi_minor = gs_mig_minor_lookup(mm, d->minor, d->gi_id, -1);
                int ci_minor = gs_mig_minor_lookup(mm, d->minor, d->gi_id, (int)d->ci_id);
                if (gi_minor < 0 || ci_minor < 0) {
                    snprintf(err, errlen, "MIG device %s (gpu%u/gi%u/ci%u): no capability minors in mig-minors",
                             d->id, d->minor, d->gi_id, d->ci_id);
                    rc = -ENODEV;
                    goto fail;
                }
                snprintf(path, sizeof(path), "/dev/nvidia-caps/nvidia-cap%d", gi_minor);
                if ((rc = add_devspec(out, pol, path, false, exists, ctx, err, errlen)) < 0)
                    goto fail;
                snprintf(path, sizeof(path), "/dev/nvidia-caps/nvidia-cap%d", ci_minor);
                if ((rc = add_devspec(out, pol, path, false, exists, ctx, err, errlen)) < 0)
                    goto fail;
            }
        }
    }
    if ((rc = add_mps(r, ids, n, pol, out, err, errlen)) < 0)
        goto fail;
    out->cdi_cri = (pol->list_strategy & GS_LIST_CDI_CRI) != 0;
    if (pol->list_strategy & GS_LIST_CDI_ANNOTATIONS) {
        /* PREFIX + "gpuslice_" + the first device ID: one key per container and resource, as the
         * CDI annotation format asks (the name part: letters, digits, '-', '_', '.'). */
        int k = snprintf(out->cdi_annotation, sizeof(out->cdi_annotation), "%sgpuslice_", pol->cdi_annotation_prefix);
        int end = (int)strlen(pol->cdi_annotation_prefix) + 63;
        for (const char *c = ids[0]; *c && k + 1 < (int)sizeof(out->cdi_annotation) && k < end; c++)
            out->cdi_annotation[k++] = (isalnum((unsigned char)*c) || *c == '-' || *c == '.') ? *c : '_';
        while (!isalnum((unsigned char)out->cdi_annotation[k - 1])) /* the name ends with a letter or digit */
            k--;
        out->cdi_annotation[k] = '\0';
    }
    return 0;
fail:
    if (rc == -ENOMEM)
        snprintf(err, errlen, "out of memory");
    gs_alloc_response_free(out);
    return rc;
}

void gs_alloc_response_free(struct gs_alloc_response *resp) {
    free(resp->visible_devices);
    free(resp->mounts);
    memset(resp, 0, sizeof(*resp));
}

/* ---- GetPreferredAllocation ------------------------------------------------------------------- */

struct cand {
    const char *id;            /* points into avail */
    const struct gs_device *dev;
    bool taken;
};

static bool chosen_already(const char **out, size_t n, const char *id) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(out[i], id) == 0)
            return true;
    return false;
}

/* FGD fragmentation (milli-GPU) of one GPU of `replicas` replicas with `free` of them free, under
 * requests of k replicas with the weights of hist: the placement engine's measure (place/frag.h)
 * on a one-GPU node (a request of k replicas asks k/replicas of the GPU). */
static double gpu_frag(unsigned replicas, unsigned free, const unsigned *hist) {
    struct pl_target t[GS_ALLOC_SIZE_HIST];
    size_t nt = 0;
    double total = 0;
    for (unsigned k = 1; hist && k < GS_ALLOC_SIZE_HIST; k++)
        total += hist[k];
    for (unsigned k = 1; k < GS_ALLOC_SIZE_HIST && k <= replicas; k++) {
        double w = total > 0 ? hist[k] / total : (k == 1);
        if (w > 0)
            t[nt++] = (struct pl_target){ .milli = (int)(1000 * k / replicas), .num = 1, .p = w };
    }
    /* CPU and memory never short; any model */
    int gpu_free = (int)(1000 * free / replicas);
    return pl_frag(t, nt, NULL, INT64_MAX / 2, INT64_MAX / 2, &gpu_free, 1, -1);
}

size_t gs_preferred(const struct gs_resource *r, const char *const *avail, size_t n_avail, const char *const *must,
                    size_t n_must, size_t size, enum gs_alloc_policy policy, const unsigned *hist, const char **out) {
    size_t n = 0;
    for (size_t i = 0; i < n_must && n < size; i++)
        if (gs_resource_device(r, must[i]) && !chosen_already(out, n, must[i]))
            out[n++] = must[i];
    if (n >= size || n_avail == 0)
        return n;
    struct cand *c = calloc(n_avail, sizeof(*c));
    if (!c)
        return n;
    size_t nc = 0;
    unsigned load[GS_MAX_GPUS] = { 0 };  /* devices of the GPU in use (not available) + chosen now */
    unsigned total[GS_MAX_GPUS] = { 0 };
    unsigned avail_on[GS_MAX_GPUS] = { 0 };
    for (unsigned i = 0; i < r->n_devices; i++)
        if (r->devices[i].gpu < GS_MAX_GPUS)
            total[r->devices[i].gpu]++;
    for (size_t i = 0; i < n_avail; i++) {
        const struct gs_device *d = gs_resource_device(r, avail[i]);
        if (!d || d->gpu >= GS_MAX_GPUS || chosen_already(out, n, avail[i]))
            continue;
        c[nc++] = (struct cand){ avail[i], d, false };
        avail_on[d->gpu]++;
    }
    for (unsigned g = 0; g < GS_MAX_GPUS; g++)
        load[g] = total[g] - (avail_on[g] < total[g] ? avail_on[g] : total[g]);
    /* Must-include devices are being allocated now: they load their GPU. The kubelet lists them
     * among the available ones too, so they were not counted as in use above. */
    for (size_t i = 0; i < n; i++) {
        const struct gs_device *d = gs_resource_device(r, out[i]);
        if (d && d->gpu < GS_MAX_GPUS && chosen_already((const char **)avail, n_avail, out[i]))
            load[d->gpu]++;
    }
    bool whole = r->n_devices && r->devices[0].kind == GS_DEV_WHOLE && !r->replicated;
    /* Whole GPUs stay on one NUMA node: the must-include one's, else the node whose free GPUs fit
     * the request most tightly (keeping larger groups whole for larger requests). */
    int numa = -2;
    if (whole && n > 0) {
        const struct gs_device *d = gs_resource_device(r, out[0]);
        numa = d ? d->numa_node : -2;
    } else if (whole) {
        unsigned best_count = 0;
        for (size_t i = 0; i < nc; i++) {
            int node = c[i].dev->numa_node;
            unsigned count = 0;
            for (size_t k = 0; k < nc; k++)
                count += c[k].dev->numa_node == node;
            bool fits = count >= size - n, best_fits = best_count >= size - n;
            if (numa == -2 || (fits && (!best_fits || count < best_count)) || (!fits && !best_fits && count > best_count)) {
                numa = node;
                best_count = count;
            }
        }
    }
    /* packed: a GPU that can hold the whole rest of the request gets all of it, the most loaded
     * such GPU first, so a multi-replica request lands on one GPU whenever one has room. */
    if (policy == GS_ALLOC_PACKED && !whole) {
        unsigned need = (unsigned)(size - n), free_on[GS_MAX_GPUS] = { 0 };
        for (size_t i = 0; i < nc; i++)
            free_on[c[i].dev->gpu]++;
        int pick = -1;
        for (unsigned g = 0; g < GS_MAX_GPUS; g++)
            if (free_on[g] >= need && (pick < 0 || load[g] > load[pick]))
                pick = (int)g;
        for (size_t i = 0; pick >= 0 && i < nc && n < size; i++) {
            if (c[i].dev->gpu == (unsigned)pick) {
                c[i].taken = true;
                out[n++] = c[i].id;
            }
        }
    }
    while (n < size) {
        /* fragmentation: the growth of each GPU's fragmentation if one more replica of it is
         * taken, computed once per pick (not per comparison: up to 8 x 64 candidates) */
        double grow[GS_MAX_GPUS];
        for (unsigned g = 0; policy == GS_ALLOC_FRAGMENTATION && g < GS_MAX_GPUS; g++)
            grow[g] = avail_on[g] && load[g] < total[g]
                          ? gpu_frag(total[g], total[g] - load[g] - 1, hist) - gpu_frag(total[g], total[g] - load[g], hist)
                          : 0;
        struct cand *best = NULL;
        for (size_t i = 0; i < nc; i++) {
            struct cand *x = &c[i];
            if (x->taken)
                continue;
            if (!best) {
                best = x;
                continue;
            }
            if (whole) {
                /* Same NUMA node as what is already chosen first, then GPU index order. */
                bool xs = numa != -2 && x->dev->numa_node == numa, bs = numa != -2 && best->dev->numa_node == numa;
                if (xs != bs) {
                    if (xs)
                        best = x;
                    continue;
                }
                if (x->dev->gpu < best->dev->gpu)
                    best = x;
                continue;
            }
            unsigned lx = load[x->dev->gpu], lb = load[best->dev->gpu];
            bool better = policy == GS_ALLOC_DISTRIBUTED ? lx < lb : lx > lb;
            if (policy == GS_ALLOC_FRAGMENTATION && x->dev->gpu != best->dev->gpu) {
                double dx = grow[x->dev->gpu], db = grow[best->dev->gpu];
                if (dx != db) {
                    if (dx < db)
                        best = x;
                    continue;
                }
            }
            if (better || (lx == lb && (x->dev->gpu < best->dev->gpu ||
                                        (x->dev->gpu == best->dev->gpu && x->dev->replica < best->dev->replica))))
                best = x;
        }
        if (!best)
            break;
        best->taken = true;
        out[n++] = best->id;
        load[best->dev->gpu]++;
    }
    free(c);
    return n;
}
