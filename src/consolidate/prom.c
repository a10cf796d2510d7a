/* prom.c: a Prometheus query_range answer fed to the series builder (prom.h), pure. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consolidate/prom.h"

int cs_parse_duration(const char *s, double *seconds) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v <= 0)
        return -EINVAL;
    double mul = 1;
    if (*end == 'd')
        mul = 86400, end++;
    else if (*end == 'h')
        mul = 3600, end++;
    else if (*end == 'm')
        mul = 60, end++;
    else if (*end == 's')
        end++;
    if (*end || v * mul > 366.0 * 86400)
        return -EINVAL;
    *seconds = v * mul;
    return 0;
}

int cs_prom_feed(struct cs_builder *b, enum cs_metric m, const char *what, const char *body, size_t len, char *err,
                 size_t errlen) {
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return cs_errf(err, errlen, "%s: the answer is not JSON (%s at line %d)", what, je.text, je.line);
    int rc = 0;
    const char *status = json_string_value(json_object_get(root, "status"));
    json_t *data = json_object_get(root, "data");
    const char *type = json_string_value(json_object_get(data, "resultType"));
    json_t *result = json_object_get(data, "result");
    if (!status || strcmp(status, "success") != 0) {
        const char *e = json_string_value(json_object_get(root, "error"));
        rc = cs_errf(err, errlen, "%s: status %s: %s", what, status ? status : "missing", e ? e : "no error text");
    } else if (!type || strcmp(type, "matrix") != 0 || !json_is_array(result)) {
        rc = cs_errf(err, errlen, "%s: the answer is not a matrix of series", what);
    }
    size_t i;
    json_t *series;
    json_array_foreach(rc ? NULL : result, i, series) {
        json_t *labels = json_object_get(series, "metric");
        const char *ns = json_string_value(json_object_get(labels, "namespace"));
        const char *pod = json_string_value(json_object_get(labels, "pod"));
        json_t *values = json_object_get(series, "values");
        if (!ns || !pod || !*ns || !*pod) {
            rc = cs_errf(err, errlen, "%s: series %zu has no namespace and pod labels", what, i);
            break;
        }
        if (!json_is_array(values)) {
            rc = cs_errf(err, errlen, "%s: series %s/%s has no values", what, ns, pod);
            break;
        }
        char key[CS_MAX_KEY + 2];
        int kl = snprintf(key, sizeof key, "%s/%s", ns, pod);
        if (kl < 0 || (size_t)kl >= sizeof key) {
            rc = cs_errf(err, errlen, "%s: series %zu: pod key longer than %d", what, i, CS_MAX_KEY);
            break;
        }
        size_t k;
        json_t *pt;
        json_array_foreach(values, k, pt) {
            json_t *jt = json_array_get(pt, 0);
            const char *vs = json_string_value(json_array_get(pt, 1));
            char where[CS_MAX_KEY + 96];
            snprintf(where, sizeof where, "%s: %s, point %zu", what, key, k);
            if (json_array_size(pt) != 2 || !json_is_number(jt) || !vs) {
                rc = cs_errf(err, errlen, "%s: not a [time, \"value\"] pair", where);
                break;
            }
            char *end;
            double v = strtod(vs, &end);
            if (end == vs || *end) {
                rc = cs_errf(err, errlen, "%s: value '%.40s' is not a number", where, vs);
                break;
            }
            rc = cs_builder_add(b, m, key, (size_t)kl, json_number_value(jt), v, where, err, errlen);
            if (rc < 0)
                break;
        }
        if (rc < 0)
            break;
    }
    json_decref(root);
    return rc;
}
