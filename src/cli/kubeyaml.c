/* kubeyaml.c (cli): a Kubernetes object's YAML as JSON (see kubeyaml.h), on config/yamlutil.h's
 * document reader. */
#include "cli/kubeyaml.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "config/yamlutil.h"

/* kubectl's YAML reader (YAML 1.1) takes these plain scalars as booleans. */
static const char *const trues[] = { "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y", NULL };
static const char *const falses[] = { "false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N",
                                      NULL };

static bool among(const char *s, const char *const *words) {
    for (; *words; words++)
        if (!strcmp(s, *words))
            return true;
    return false;
}

static bool all_of(const char *s, const char *set) {
    return *s && strspn(s, set) == strlen(s);
}

/* A plain decimal integer: digits, no leading zero (but "0"), an optional sign. */
static bool is_decimal(const char *s) {
    const char *d = s + (*s == '-' || *s == '+');
    return all_of(d, "0123456789") && (d[0] != '0' || !d[1]);
}

/* A decimal with a point or an exponent: [-+]?(.D+|D+(.D*)?)([eE][-+]?D+)?, not an integer. */
static bool is_real(const char *s) {
    const char *p = s + (*s == '-' || *s == '+');
    size_t before = strspn(p, "0123456789"), after = 0;
    p += before;
    bool point = *p == '.', exp = false;
    if (point) {
        after = strspn(++p, "0123456789");
        p += after;
    }
    if (!before && !after)
        return false;
    if (*p == 'e' || *p == 'E') {
        exp = true;
        p += 1 + (p[1] == '-' || p[1] == '+');
        size_t n = strspn(p, "0123456789");
        if (!n)
            return false;
        p += n;
    }
    return !*p && (point || exp);
}

/* What YAML 1.1 reads as a number but is no plain decimal here: octal, hex, binary, underscores,
 * infinities, not-a-number. */
static bool is_other_number(const char *s) {
    const char *p = s + (*s == '-' || *s == '+');
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        return all_of(p + 2, "0123456789abcdefABCDEF_");
    if (p[0] == '0' && (p[1] == 'o' || p[1] == 'O'))
        return all_of(p + 2, "01234567_");
    if (p[0] == '0' && (p[1] == 'b' || p[1] == 'B'))
        return all_of(p + 2, "01_");
    if (all_of(p, "0123456789_") && strpbrk(p, "0123456789"))
        return true; /* 0755 (octal), 1_000 */
    static const char *const special[] = { ".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN", NULL };
    return among(p, special);
}

static int scalar(struct gs_yaml *y, yaml_node_t *node, const char *path, json_t **out) {
    bool plain = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (plain && gs_yaml_is_null(node)) {
        *out = json_null();
        return 0;
    }
    const char *s;
    int r = gs_yaml_scalar(y, node, path, &s);
    if (r < 0)
        return r;
    if (!plain)
        *out = json_string(s);
    else if (among(s, trues) || among(s, falses))
        *out = json_boolean(among(s, trues));
    else if (is_decimal(s)) {
        errno = 0;
        long long v = strtoll(s, NULL, 10);
        if (errno == ERANGE)
            return gs_yaml_error(y, node, path, "%s is out of range of a 64-bit integer", s);
        *out = json_integer(v);
    } else if (is_real(s)) {
        double v = strtod(s, NULL);
        if (!isfinite(v)) /* 1e999: JSON has no infinity (jansson's json_real refuses one) */
            return gs_yaml_error(y, node, path, "%s is out of range of a double", s);
        *out = json_real(v);
    } else if (is_other_number(s))
        return gs_yaml_error(y, node, path,
                             "'%s' is a number to kubectl's YAML (1.1) but not a plain decimal: quote it for a "
                             "string, or write the number in decimal", s);
    else
        *out = json_string(s);
    if (!*out)
        return gs_yaml_error(y, node, path, "not valid UTF-8");
    return 0;
}

static int convert(struct gs_yaml *y, yaml_node_t *node, const char *path, json_t **out) {
    char sub[GS_YAML_PATH_MAX];
    int r = 0;
    *out = NULL;
    switch (node->type) {
    case YAML_SCALAR_NODE:
        return scalar(y, node, path, out);
    case YAML_SEQUENCE_NODE:
        if (!(*out = json_array()))
            return -ENOMEM;
        for (size_t i = 0; r == 0 && i < gs_yaml_seq_len(node); i++) {
            json_t *v;
            if ((r = convert(y, gs_yaml_seq_at(y, node, i), gs_yaml_path_index(sub, path, i), &v)) == 0 &&
                json_array_append_new(*out, v) < 0)
                r = -ENOMEM;
        }
        break;
    case YAML_MAPPING_NODE:
        if ((r = gs_yaml_check_keys(y, node, path, NULL)) < 0)
            return r;
        if (!(*out = json_object()))
            return -ENOMEM;
        for (size_t i = 0; r == 0 && i < gs_yaml_map_len(node); i++) {
            const char *key;
            yaml_node_t *value;
            json_t *v;
            if ((r = gs_yaml_map_at(y, node, i, &key, &value)) == 0 &&
                (r = convert(y, value, gs_yaml_path_key(sub, path, key), &v)) == 0 &&
                json_object_set_new(*out, key, v) < 0)
                r = gs_yaml_error(y, value, sub, "key '%s' is not valid UTF-8", key);
        }
        break;
    default:
        return gs_yaml_error(y, node, path, "not a scalar, sequence or mapping");
    }
    if (r < 0) {
        json_decref(*out);
        *out = NULL;
    }
    return r;
}

int cli_kube_yaml_object(const char *name, const char *text, size_t len, json_t **out, char *err, size_t errlen) {
    _cleanup_yaml_ struct gs_yaml y = { 0 };
    *out = NULL;
    int r = gs_yaml_load(&y, name, text, len, err, errlen);
    if (r < 0)
        return r;
    yaml_node_t *root = gs_yaml_root(&y);
    if (!root)
        return gs_yaml_error(&y, NULL, NULL, "no object (the document is empty)");
    if ((r = gs_yaml_expect(&y, root, "", YAML_MAPPING_NODE)) < 0)
        return r;
    return convert(&y, root, "", out);
}
