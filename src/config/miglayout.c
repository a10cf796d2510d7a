/* miglayout.c: parses and validates MIG layout files in NVIDIA mig-parted's v1 format (format and
 * rules in miglayout.h), so that a file written for mig-parted works here unchanged and a file
 * accepted here would also be accepted by mig-parted.
 *
 * mig-parted decodes the YAML through JSON (sigs.k8s.io/yaml), so a few things follow from that
 * and are checked here the same way: `mig-enabled: "true"`, `devices: ["0"]` and
 * `"1g.10gb": "2"` are strings, not booleans or numbers, and are refused; `devices` is exactly
 * "all" (case-sensitive) or a list of integers.
 *
 * Where this parser is stricter than mig-parted, it is to catch mistakes mig-parted would let
 * through silently:
 *   - `devices: []` is refused (mig-parted accepts it and the item then matches no GPU);
 *   - GPU indices must be in 0..63 and listed once;
 *   - device-filter entries must be well formed (mig-parted ignores a parse error and the entry
 *     then never matches);
 *   - counts are at most 7 (no GPU has more than 7 GPU instances);
 *   - two spellings of one profile ("1g.10gb" and "1c.1g.10gb") in one map are refused
 *     (mig-parted would silently merge or overwrite them);
 *   - config names are limited to letters, digits, '.', '_' and '-'.
 *
 * Profile names: [<c>c.]<g>g.<n>gb with an optional suffix "+attr[,attr...]" or "-attr", attr
 * being [a-z]+(.[a-z]+)*. The dotted form is needed for real names such as "1g.24gb+me.all"
 * (RTX PRO 6000 Blackwell, which also has "1g.24gb-me" and "1g.24gb+gfx"). Slice counts c and g
 * are 1, 2, 3, 4, 6, 7 or 8 (the NVML profile sizes, as mig-parted checks) with c <= g.
 *
 * device-filter: mig-parted also accepts "0x<dev><vendor>:0x<subdev><subvendor>" to match one
 * board only. gs_layout_item has no room for the subsystem ID, so the second part is checked for
 * form and dropped: such a filter matches every board with that device ID, which is broader than
 * mig-parted. */
#include "miglayout.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "config/yamlutil.h"
#include "util/util.h"

#define MAX_GPU_INDEX 63
#define MAX_COUNT 7
/* More digits than any real memory size has (the largest today is 288gb). */
#define MAX_GB_DIGITS 4

static const char *const root_keys[] = { "version", "mig-configs", NULL };
static const char *const item_keys[] = { "device-filter", "devices", "mig-enabled", "mig-devices", NULL };

#define PROFILE_FORMS "such as 1g.10gb, 1c.3g.40gb, 1g.10gb+me or 1g.24gb-me"

/* ---- small readers ---- */

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
static bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static unsigned hex_value(char c) {
    if (is_digit(c))
        return (unsigned)(c - '0');
    return (unsigned)((c | 0x20) - 'a' + 10);
}

/* The key node of pair i; the caller has run gs_yaml_check_keys() on map. */
static const yaml_node_t *key_node(struct gs_yaml *y, const yaml_node_t *map, size_t i) {
    return yaml_document_get_node(&y->doc, map->data.mapping.pairs.start[i].key);
}

/* mig-parted reads values through JSON, where a quoted scalar is a string: refuse one where it
 * wants a boolean or an integer, so that a file accepted here is accepted there too. */
static int expect_plain(struct gs_yaml *y, const yaml_node_t *node, const char *path, const char *what) {
    if (node && node->type == YAML_SCALAR_NODE && node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return gs_yaml_error(y, node, path, "expected %s, got a quoted string (remove the quotes)", what);
    return 0;
}

static int plain_uint(struct gs_yaml *y, const yaml_node_t *node, const char *path, unsigned long long max,
                      unsigned long long *out) {
    int r = expect_plain(y, node, path, "an integer");
    return r < 0 ? r : gs_yaml_uint(y, node, path, 0, max, out);
}

/* ---- profile names ---- */

/* A slice count followed by unit: one digit from the NVML profile sizes. On success returns the
 * position after the unit. */
static const char *read_slices(const char *p, char unit, unsigned *out) {
    if (!is_digit(p[0]) || p[1] != unit)
        return NULL;
    unsigned v = (unsigned)(p[0] - '0');
    if (v == 0 || v == 5 || v == 9)
        return NULL;
    *out = v;
    return p + 2;
}

/* "<n>gb": a positive number without leading zeros. */
static const char *read_gb(const char *p) {
    size_t n = 0;
    while (is_digit(p[n]))
        n++;
    if (n == 0 || n > MAX_GB_DIGITS || p[0] == '0' || p[n] != 'g' || p[n + 1] != 'b')
        return NULL;
    return p + n + 2;
}

/* attr: [a-z]+(.[a-z]+)*; returns its end or NULL. */
static const char *read_attr(const char *p) {
    for (;;) {
        if (!is_lower(*p))
            return NULL;
        while (is_lower(*p))
            p++;
        if (p[0] != '.')
            return p;
        p++;
    }
}

static bool profile_valid(const char *s, const char **base_start);

bool gs_miglayout_profile_valid(const char *name) {
    const char *base;
    return profile_valid(name, &base);
}

/* Checks the grammar in the file comment. *base_start is set to where "<g>g." starts, so that
 * "1c.1g.10gb" and "1g.10gb" (the same profile) compare equal from there. */
static bool profile_valid(const char *s, const char **base_start) {
    unsigned c = 0, g = 0;
    const char *p = s;
    *base_start = s;
    if (is_digit(p[0]) && p[1] == 'c') {
        if (!(p = read_slices(p, 'c', &c)) || *p++ != '.')
            return false;
    }
    const char *gstart = p;
    if (!(p = read_slices(p, 'g', &g)) || *p++ != '.')
        return false;
    if (c > g)
        return false;
    if (c == 0 || c == g)
        *base_start = gstart;
    if (!(p = read_gb(p)))
        return false;
    if (*p == '\0')
        return true;
    if (*p == '-') {
        p = read_attr(p + 1);
        return p && *p == '\0';
    }
    if (*p != '+')
        return false;
    /* "+a,b": distinct attributes, as mig-parted requires. */
    const char *attrs[GS_LAYOUT_PROFILE_MAX];
    size_t lens[GS_LAYOUT_PROFILE_MAX], n = 0;
    for (p++;; p++) {
        const char *a = p;
        if (!(p = read_attr(p)))
            return false;
        size_t len = (size_t)(p - a);
        for (size_t i = 0; i < n; i++)
            if (lens[i] == len && memcmp(attrs[i], a, len) == 0)
                return false;
        if (n < GS_ARRAY_SIZE(attrs)) {
            attrs[n] = a;
            lens[n++] = len;
        }
        if (*p == '\0')
            return true;
        if (*p != ',')
            return false;
    }
}

/* ---- device filters ---- */

/* "0x" and exactly 8 hex digits, either case; returns the end or NULL. */
static const char *read_pci_id(const char *p, unsigned *out) {
    if (p[0] != '0' || (p[1] != 'x' && p[1] != 'X'))
        return NULL;
    p += 2;
    unsigned v = 0;
    for (int i = 0; i < 8; i++, p++) {
        if (!is_hex(*p))
            return NULL;
        v = v << 4 | hex_value(*p);
    }
    *out = v;
    return p;
}

static int parse_filter(struct gs_yaml *y, const yaml_node_t *node, const char *path, struct gs_layout_item *it) {
    const char *s;
    int r = gs_yaml_scalar(y, node, path, &s);
    if (r < 0)
        return r;
    unsigned id, sub;
    const char *p = read_pci_id(s, &id);
    if (p && *p == ':')
        p = read_pci_id(p + 1, &sub); /* checked and dropped; see the file comment */
    if (!p || *p != '\0')
        return gs_yaml_error(y, node, path,
                             "invalid PCI device ID '%.64s'; expected 0x and 8 hex digits (device, then vendor) "
                             "such as \"0x233010DE\", optionally followed by :0x and the 8-digit subsystem ID",
                             s);
    /* The same device ID twice (or with two subsystem IDs) is one filter. */
    for (unsigned i = 0; i < it->n_filters; i++)
        if (it->filters[i] == id)
            return 0;
    if (it->n_filters >= GS_LAYOUT_MAX_FILTERS)
        return gs_yaml_error(y, node, path, "more than %d device IDs in one device-filter", GS_LAYOUT_MAX_FILTERS);
    it->filters[it->n_filters++] = id;
    return 0;
}

/* A string or a list of strings. Like mig-parted, an empty value, "" or an empty list means no
 * filter (but "" inside a list is an entry that could never match, so it is refused). */
static int parse_filters(struct gs_yaml *y, const yaml_node_t *node, const char *path, struct gs_layout_item *it) {
    if (gs_yaml_is_null(node) || (node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0))
        return 0;
    if (node->type == YAML_SCALAR_NODE)
        return parse_filter(y, node, path, it);
    if (node->type != YAML_SEQUENCE_NODE)
        return gs_yaml_error(y, node, path, "expected a PCI device ID or a list of them, got a mapping");
    size_t n = gs_yaml_seq_len(node);
    for (size_t i = 0; i < n; i++) {
        char p[GS_YAML_PATH_MAX];
        const yaml_node_t *e = gs_yaml_seq_at(y, node, i);
        gs_yaml_path_index(p, path, i);
        if (!e || e->type != YAML_SCALAR_NODE || gs_yaml_is_null(e))
            return gs_yaml_expect(y, e, p, YAML_SCALAR_NODE);
        int r = parse_filter(y, e, p, it);
        if (r < 0)
            return r;
    }
    return 0;
}

/* ---- devices ---- */

static int parse_devices(struct gs_yaml *y, const yaml_node_t *node, const char *path, struct gs_layout_item *it) {
    if (node->type == YAML_SCALAR_NODE && !gs_yaml_is_null(node)) {
        const char *s;
        int r = gs_yaml_scalar(y, node, path, &s);
        if (r < 0)
            return r;
        if (strcmp(s, "all") != 0)
            return gs_yaml_error(y, node, path, "expected \"all\" or a list of GPU indices such as [0, 1], got '%.64s'",
                                 s);
        it->all_devices = true;
        return 0;
    }
    if (node->type != YAML_SEQUENCE_NODE)
        return gs_yaml_error(y, node, path, "expected \"all\" or a list of GPU indices such as [0, 1], got %s",
                             gs_yaml_is_null(node) ? "an empty value" : "a mapping");
    size_t n = gs_yaml_seq_len(node);
    /* mig-parted takes [] and then matches no GPU, which is never what was meant. */
    if (n == 0)
        return gs_yaml_error(y, node, path, "empty list of GPU indices; list at least one, or write \"all\"");
    for (size_t i = 0; i < n; i++) {
        char p[GS_YAML_PATH_MAX];
        const yaml_node_t *e = gs_yaml_seq_at(y, node, i);
        unsigned long long v;
        int r = plain_uint(y, e, gs_yaml_path_index(p, path, i), MAX_GPU_INDEX, &v);
        if (r < 0)
            return r;
        if (it->device_mask & (1ULL << v))
            return gs_yaml_error(y, e, p, "GPU index %llu is listed twice", v);
        it->device_mask |= 1ULL << v;
        if (i == 0 || v > it->top_index) {
            it->top_index = (unsigned)v;
            it->top_at = (unsigned)i;
            it->top_line = (unsigned)e->start_mark.line + 1;
            it->top_column = (unsigned)e->start_mark.column + 1;
        }
    }
    return 0;
}

/* ---- mig-devices ---- */

static int parse_counts(struct gs_yaml *y, const yaml_node_t *map, const char *path, struct gs_layout_item *it) {
    int r = gs_yaml_check_keys(y, map, path, NULL);
    if (r < 0)
        return r;
    size_t n = gs_yaml_map_len(map);
    if (n > GS_LAYOUT_MAX_PROFILES)
        return gs_yaml_error(y, map, path, "lists %zu profiles; at most %d are supported", n, GS_LAYOUT_MAX_PROFILES);
    const char *bases[GS_LAYOUT_MAX_PROFILES];
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        const char *name;
        yaml_node_t *value;
        if ((r = gs_yaml_map_at(y, map, i, &name, &value)) < 0)
            return r;
        const yaml_node_t *key = key_node(y, map, i);
        char p[GS_YAML_PATH_MAX];
        gs_yaml_path_key(p, path, name);
        if (strlen(name) >= GS_LAYOUT_PROFILE_MAX || !profile_valid(name, &bases[i]))
            return gs_yaml_error(y, key, p, "invalid MIG profile name '%.64s'; expected [<c>c.]<g>g.<n>gb "
                                            "with an optional +attr or -attr suffix, " PROFILE_FORMS,
                                 name);
        for (size_t j = 0; j < i; j++)
            if (strcmp(bases[j], bases[i]) == 0)
                return gs_yaml_error(y, key, p, "'%s' is the same profile as '%s' (line %u)", name,
                                     it->counts[j].profile, it->counts[j].line);
        unsigned long long v;
        if ((r = plain_uint(y, value, p, MAX_COUNT, &v)) < 0)
            return r;
        struct gs_layout_count *c = &it->counts[i];
        gs_strlcpy(c->profile, name, sizeof(c->profile));
        bases[i] = c->profile + (bases[i] - name); /* name belongs to the document; keep our copy */
        c->count = (unsigned)v;
        c->line = (unsigned)key->start_mark.line + 1;
        c->column = (unsigned)key->start_mark.column + 1;
        any |= v > 0;
        it->n_counts = (unsigned)i + 1;
    }
    if (n > 0 && !any)
        return gs_yaml_error(y, map, path, "all counts are 0; write mig-devices: {} for MIG mode without devices");
    return 0;
}

/* ---- items, configs, file ---- */

static int parse_item(struct gs_yaml *y, const yaml_node_t *node, const char *path, struct gs_layout_item *it) {
    int r = gs_yaml_check_keys(y, node, path, item_keys);
    if (r < 0)
        return r;
    *it = (struct gs_layout_item){ .line = (unsigned)node->start_mark.line + 1 };

    /* Required keys first, as mig-parted checks them. */
    const yaml_node_t *devices = gs_yaml_map_get(y, node, "devices");
    if (!devices)
        return gs_yaml_error(y, node, path, "missing required key 'devices' (\"all\" or a list of GPU indices)");
    const yaml_node_t *enabled = gs_yaml_map_get(y, node, "mig-enabled");
    if (!enabled)
        return gs_yaml_error(y, node, path, "missing required key 'mig-enabled' (true or false)");

    char p[GS_YAML_PATH_MAX];
    const yaml_node_t *filter = gs_yaml_map_get(y, node, "device-filter");
    if (filter && (r = parse_filters(y, filter, gs_yaml_path_key(p, path, "device-filter"), it)) < 0)
        return r;
    if ((r = parse_devices(y, devices, gs_yaml_path_key(p, path, "devices"), it)) < 0)
        return r;
    gs_yaml_path_key(p, path, "mig-enabled");
    if ((r = expect_plain(y, enabled, p, "true or false")) < 0 ||
        (r = gs_yaml_bool(y, enabled, p, &it->mig_enabled)) < 0)
        return r;

    /* mig-parted: a null mig-devices is a missing one. */
    const yaml_node_t *md = gs_yaml_map_get(y, node, "mig-devices");
    if (gs_yaml_is_null(md))
        md = NULL;
    gs_yaml_path_key(p, path, "mig-devices");
    if (it->mig_enabled) {
        if (!md)
            return gs_yaml_error(y, node, path, "missing required key 'mig-devices' when mig-enabled is true "
                                                "(write mig-devices: {} for MIG mode without devices)");
        return parse_counts(y, md, p, it);
    }
    if (md && (md->type != YAML_MAPPING_NODE || gs_yaml_map_len(md) > 0))
        return gs_yaml_error(y, md, p, "must be absent or empty when mig-enabled is false");
    return 0;
}

/* Letters, digits, '.', '_', '-': every name in mig-parted's own files, and safe in node labels. */
static bool config_name_valid(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= GS_LAYOUT_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_digit(s[i]) && !is_lower(s[i]) && !(s[i] >= 'A' && s[i] <= 'Z') && !strchr("._-", s[i]))
            return false;
    return true;
}

static int parse_config(struct gs_yaml *y, const yaml_node_t *key, const char *name, const yaml_node_t *list,
                        struct gs_layout_config *c) {
    char path[GS_YAML_PATH_MAX];
    gs_yaml_path_key(path, "mig-configs", name);
    if (!config_name_valid(name))
        return gs_yaml_error(y, key, path,
                             "invalid config name '%.64s'; use 1 to %d letters, digits, '.', '_' or '-'", name,
                             GS_LAYOUT_NAME_MAX - 1);
    gs_strlcpy(c->name, name, sizeof(c->name));
    c->line = (unsigned)key->start_mark.line + 1;

    int r = gs_yaml_expect(y, list, path, YAML_SEQUENCE_NODE);
    if (r < 0)
        return r;
    size_t n = gs_yaml_seq_len(list);
    if (n == 0)
        return gs_yaml_error(y, list, path, "empty config; list at least one item (devices, mig-enabled, ...)");
    if (n > GS_LAYOUT_MAX_ITEMS)
        return gs_yaml_error(y, list, path, "lists %zu items; at most %d are supported", n, GS_LAYOUT_MAX_ITEMS);
    for (size_t i = 0; i < n; i++) {
        char ip[GS_YAML_PATH_MAX];
        if ((r = parse_item(y, gs_yaml_seq_at(y, list, i), gs_yaml_path_index(ip, path, i), &c->items[i])) < 0)
            return r;
        c->n_items = (unsigned)i + 1;
    }
    return 0;
}

static int parse_root(struct gs_yaml *y, struct gs_layout_file *f) {
    const yaml_node_t *root = gs_yaml_root(y);
    if (gs_yaml_is_null(root))
        return gs_yaml_error(y, root, NULL, "document is empty; expected 'version: v1' and 'mig-configs'");
    if (root->type != YAML_MAPPING_NODE)
        return gs_yaml_error(y, root, NULL, "expected a mapping with 'version' and 'mig-configs' at the top level");
    int r = gs_yaml_check_keys(y, root, NULL, root_keys);
    if (r < 0)
        return r;

    const yaml_node_t *node = gs_yaml_map_get(y, root, "version");
    if (!node)
        return gs_yaml_error(y, root, NULL, "missing required key 'version' (version: v1)");
    const char *s;
    if ((r = gs_yaml_scalar(y, node, "version", &s)) < 0)
        return r;
    if (strcmp(s, "v1") != 0)
        return gs_yaml_error(y, node, "version", "unsupported version '%.64s'; expected v1", s);

    const yaml_node_t *configs = gs_yaml_map_get(y, root, "mig-configs");
    if (!configs)
        return gs_yaml_error(y, root, NULL, "missing required key 'mig-configs'");
    /* Config names are the user's: any key, but each once. */
    if ((r = gs_yaml_check_keys(y, configs, "mig-configs", NULL)) < 0)
        return r;
    size_t n = gs_yaml_map_len(configs);
    if (n == 0)
        return gs_yaml_error(y, configs, "mig-configs", "must contain at least one config");
    if (n > GS_LAYOUT_MAX_CONFIGS)
        return gs_yaml_error(y, configs, "mig-configs", "has %zu configs; at most %d are supported", n,
                             GS_LAYOUT_MAX_CONFIGS);
    for (size_t i = 0; i < n; i++) {
        const char *name;
        yaml_node_t *list;
        if ((r = gs_yaml_map_at(y, configs, i, &name, &list)) < 0)
            return r;
        if ((r = parse_config(y, key_node(y, configs, i), name, list, &f->configs[i])) < 0)
            return r;
        f->n_configs = (unsigned)i + 1;
    }
    return 0;
}

int gs_miglayout_parse(const char *name, const char *text, size_t len, struct gs_layout_file *out, char *err,
                       size_t errlen) {
    _cleanup_yaml_ struct gs_yaml y = { 0 };
    int r = gs_yaml_load(&y, name, text, len, err, errlen);
    if (r < 0)
        return r;

    /* Built on the side so that *out is untouched on error; on the heap because the struct is
     * about 800 KiB. */
    _cleanup_free_ struct gs_layout_file *f = calloc(1, sizeof(*f));
    if (!f) {
        gs_yaml_error(&y, NULL, NULL, "out of memory");
        return -ENOMEM;
    }
    gs_strlcpy(f->name, name ? name : "", sizeof(f->name));
    r = parse_root(&y, f);
    if (r < 0)
        return r;
    memcpy(out, f, sizeof(*f));
    return 0;
}

int gs_miglayout_load(const char *path, struct gs_layout_file *out, char *err, size_t errlen) {
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = gs_yaml_read_file(path, &text, &len, err, errlen);
    if (r < 0)
        return r;
    return gs_miglayout_parse(path, text, len, out, err, errlen);
}

const struct gs_layout_config *gs_miglayout_find(const struct gs_layout_file *f, const char *config) {
    if (!f || !config)
        return NULL;
    for (unsigned i = 0; i < f->n_configs && i < GS_LAYOUT_MAX_CONFIGS; i++)
        if (strcmp(f->configs[i].name, config) == 0)
            return &f->configs[i];
    return NULL;
}

static bool item_matches(const struct gs_layout_item *it, unsigned index, unsigned pci) {
    if (!it->all_devices && (index > MAX_GPU_INDEX || !(it->device_mask & (1ULL << index))))
        return false;
    if (it->n_filters == 0)
        return true;
    for (unsigned i = 0; i < it->n_filters && i < GS_LAYOUT_MAX_FILTERS; i++)
        if (it->filters[i] == pci)
            return true;
    return false;
}

const struct gs_layout_item *gs_layout_item_for(const struct gs_layout_config *c, unsigned index, unsigned pci) {
    if (!c)
        return NULL;
    /* mig-parted applies every matching item in order, so the last one decides. */
    const struct gs_layout_item *found = NULL;
    for (unsigned i = 0; i < c->n_items && i < GS_LAYOUT_MAX_ITEMS; i++)
        if (item_matches(&c->items[i], index, pci))
            found = &c->items[i];
    return found;
}

int gs_miglayout_check_gpus(const struct gs_layout_file *f, const struct gs_layout_config *c, unsigned n_gpus,
                            char *err, size_t errlen) {
    for (unsigned i = 0; c && i < c->n_items && i < GS_LAYOUT_MAX_ITEMS; i++) {
        const struct gs_layout_item *it = &c->items[i];
        if (it->all_devices || it->top_index < n_gpus)
            continue;
        char range[32] = "none";
        if (n_gpus == 1)
            snprintf(range, sizeof(range), "0");
        else if (n_gpus)
            snprintf(range, sizeof(range), "0-%u", n_gpus - 1);
        snprintf(err, errlen, "%s:%u:%u: mig-configs.%s[%u].devices[%u]: GPU %u is not on this node (it has %u GPU%s: %s)",
                 f->name, it->top_line, it->top_column, c->name, i, it->top_at, it->top_index, n_gpus,
                 n_gpus == 1 ? "" : "s", range);
        return -ENODEV;
    }
    return 0;
}

/* Edit distance (insertions, deletions, substitutions), for "did you mean"; names are short. */
static unsigned edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > GS_LAYOUT_NAME_MAX || lb > GS_LAYOUT_NAME_MAX)
        return UINT_MAX;
    unsigned row[GS_LAYOUT_NAME_MAX + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= lb; j++) {
            unsigned up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

int gs_miglayout_unknown_config(const struct gs_layout_file *f, const char *config, char *err, size_t errlen) {
    static const char *const builtin[] = { "all-disabled", "all-enabled", "all-balanced" };
    const char *closest = NULL;
    unsigned best = UINT_MAX, n = f ? f->n_configs : 0;
    for (unsigned i = 0; i < n + GS_ARRAY_SIZE(builtin); i++) {
        const char *name = i < n ? f->configs[i].name : builtin[i - n];
        unsigned d = edit_distance(config, name);
        if (d < best) {
            best = d;
            closest = name;
        }
    }
    size_t len = (size_t)snprintf(err, errlen, "no MIG config '%.64s'", config);
    if (f && len < errlen) {
        len += (size_t)snprintf(err + len, errlen - len, " in %s (its configs:", f->name);
        for (unsigned i = 0; i < n && len < errlen; i++)
            len += (size_t)snprintf(err + len, errlen - len, "%s %s", i ? "," : "", f->configs[i].name);
        if (len < errlen)
            len += (size_t)snprintf(err + len, errlen - len, ";");
    } else if (len < errlen) {
        len += (size_t)snprintf(err + len, errlen - len, " (no layout file given, -f FILE;");
    }
    if (len < errlen)
        len += (size_t)snprintf(err + len, errlen - len, " built-in: all-disabled, all-enabled, all-balanced, "
                                                          "all-<profile>)");
    /* A suggestion only when it is close: at most a third of the name differs. */
    if (closest && best * 3 <= strlen(config) && len < errlen)
        snprintf(err + len, errlen - len, "; did you mean '%s'?", closest);
    return -ENOENT;
}
