/* yamlutil.c: libyaml document helpers with positioned, single-line errors and limits against
 * hostile input; see yamlutil.h for the contract. */
#include "yamlutil.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

/* Appends to buf[*n..size), keeping it NUL-terminated; truncation is silent because these are
 * messages. */
__attribute__((format(printf, 4, 0))) static void vappendf(char *buf, size_t size, size_t *n, const char *fmt,
                                                          va_list ap) {
    if (*n + 1 >= size)
        return;
    int k = vsnprintf(buf + *n, size - *n, fmt, ap);
    if (k < 0)
        return;
    *n += (size_t)k < size - *n ? (size_t)k : size - *n - 1;
}

__attribute__((format(printf, 4, 5))) static void appendf(char *buf, size_t size, size_t *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vappendf(buf, size, n, fmt, ap);
    va_end(ap);
}

__attribute__((format(printf, 5, 0))) static int verror_at(struct gs_yaml *y, int r, yaml_mark_t mark,
                                                           const char *path, const char *fmt, va_list ap) {
    if (!y->err || y->errlen == 0)
        return r;
    size_t n = 0;
    y->err[0] = '\0';
    appendf(y->err, y->errlen, &n, "%s:%zu:%zu: ", y->name ? y->name : "<input>", mark.line + 1, mark.column + 1);
    if (path && *path)
        appendf(y->err, y->errlen, &n, "%s: ", path);
    vappendf(y->err, y->errlen, &n, fmt, ap);
    /* Messages quote user text (keys, values, file names), and callers rely on one line. */
    for (char *p = y->err; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return r;
}

__attribute__((format(printf, 5, 6))) static int error_at(struct gs_yaml *y, int r, yaml_mark_t mark,
                                                          const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verror_at(y, r, mark, path, fmt, ap);
    va_end(ap);
    return r;
}

int gs_yaml_error(struct gs_yaml *y, const yaml_node_t *node, const char *path, const char *fmt, ...) {
    yaml_mark_t mark = { 0 };
    if (node)
        mark = node->start_mark;
    va_list ap;
    va_start(ap, fmt);
    verror_at(y, -EINVAL, mark, path, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* Reader errors (bad UTF-8, control characters) carry only a byte offset; work out the
 * position ourselves, counting characters like libyaml does. */
static yaml_mark_t mark_at_offset(const char *text, size_t len, size_t offset) {
    yaml_mark_t m = { 0 };
    if (offset > len)
        offset = len;
    for (size_t i = 0; i < offset; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n' || (c == '\r' && (i + 1 >= len || text[i + 1] != '\n'))) {
            m.line++;
            m.column = 0;
        } else if ((c & 0xC0) != 0x80) {
            m.column++;
        }
    }
    m.index = offset;
    return m;
}

static int parser_error(struct gs_yaml *y, const yaml_parser_t *p, const char *text, size_t len) {
    yaml_mark_t zero = { 0 };
    const char *problem = p->problem ? p->problem : "invalid YAML";

    switch (p->error) {
    case YAML_MEMORY_ERROR:
        return error_at(y, -ENOMEM, zero, NULL, "out of memory");
    case YAML_READER_ERROR:
        if (p->problem_value != -1)
            return error_at(y, -EINVAL, mark_at_offset(text, len, p->problem_offset), NULL,
                            "syntax error: %s (#%X)", problem, (unsigned)p->problem_value);
        return error_at(y, -EINVAL, mark_at_offset(text, len, p->problem_offset), NULL, "syntax error: %s",
                        problem);
    default:
        if (p->context)
            return error_at(y, -EINVAL, p->problem_mark, NULL, "syntax error: %s (%s at line %zu, column %zu)",
                            problem, p->context, p->context_mark.line + 1, p->context_mark.column + 1);
        return error_at(y, -EINVAL, p->problem_mark, NULL, "syntax error: %s", problem);
    }
}

/* Checks one event against the limits. Anchors and aliases go because aliases let a small file
 * expand into a huge tree ("billion laughs") and nothing in our configs needs them; tags go
 * because we would otherwise silently ignore them. */
static int check_event(struct gs_yaml *y, const yaml_event_t *ev, unsigned *depth, unsigned *docs) {
    const yaml_char_t *anchor = NULL, *tag = NULL;

    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (++*docs > 1)
            return error_at(y, -EINVAL, ev->start_mark, NULL, "more than one document in the stream");
        return 0;
    case YAML_ALIAS_EVENT:
        return error_at(y, -EINVAL, ev->start_mark, NULL, "anchors and aliases are not supported");
    case YAML_SCALAR_EVENT:
        anchor = ev->data.scalar.anchor;
        tag = ev->data.scalar.tag;
        break;
    case YAML_SEQUENCE_START_EVENT:
        anchor = ev->data.sequence_start.anchor;
        tag = ev->data.sequence_start.tag;
        ++*depth;
        break;
    case YAML_MAPPING_START_EVENT:
        anchor = ev->data.mapping_start.anchor;
        tag = ev->data.mapping_start.tag;
        ++*depth;
        break;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        --*depth;
        return 0;
    default:
        return 0;
    }
    if (anchor)
        return error_at(y, -EINVAL, ev->start_mark, NULL, "anchors and aliases are not supported");
    if (tag)
        return error_at(y, -EINVAL, ev->start_mark, NULL, "tags are not supported");
    if (*depth > GS_YAML_MAX_DEPTH)
        return error_at(y, -EINVAL, ev->start_mark, NULL, "nesting deeper than %d levels is not supported",
                        GS_YAML_MAX_DEPTH);
    return 0;
}

/* Walks the event stream once before building the document, so that a hostile input is
 * rejected before libyaml allocates a node for it. This pass also finds every syntax error. */
static int prescan(struct gs_yaml *y, const char *text, size_t len) {
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return error_at(y, -ENOMEM, (yaml_mark_t){ 0 }, NULL, "out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);

    unsigned depth = 0, docs = 0;
    int r = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            r = parser_error(y, &p, text, len);
            break;
        }
        r = check_event(y, &ev, &depth, &docs);
        bool end = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
        if (r < 0 || end)
            break;
    }
    yaml_parser_delete(&p);
    return r;
}

int gs_yaml_load(struct gs_yaml *y, const char *name, const char *text, size_t len, char *err, size_t errlen) {
    *y = (struct gs_yaml){ .name = name, .err = err, .errlen = errlen };
    if (err && errlen > 0)
        err[0] = '\0';
    if (!text) /* libyaml would do arithmetic on it */
        text = "";
    if (len > GS_YAML_MAX_SIZE)
        return error_at(y, -EINVAL, (yaml_mark_t){ 0 }, NULL, "document is larger than %d MiB",
                        GS_YAML_MAX_SIZE / (1024 * 1024));

    int r = prescan(y, text, len);
    if (r < 0)
        return r;

    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return error_at(y, -ENOMEM, (yaml_mark_t){ 0 }, NULL, "out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, &y->doc))
        r = parser_error(y, &p, text, len);
    else
        y->loaded = true;
    yaml_parser_delete(&p);
    return r;
}

int gs_yaml_read_file(const char *path, char **text, size_t *len, char *err, size_t errlen) {
    /* gs_read_file_ex: a FIFO, socket or device at the path is refused, never waited on, and
     * said as such ("PATH: a FIFO, not a regular file"). */
    int r = gs_read_file_ex(path, GS_YAML_MAX_SIZE, 0, text, len, err, errlen);
    if (r < 0 && r != -EINVAL && err && errlen > 0) { /* -EINVAL: not a regular file, said by it */
        char buf[128];
        snprintf(err, errlen, "%s: %s", path, r == -EFBIG ? "file is larger than 1 MiB" : strerror_r(-r, buf, sizeof(buf)));
    }
    return r;
}

void gs_yaml_free(struct gs_yaml *y) {
    if (y->loaded)
        yaml_document_delete(&y->doc);
    y->loaded = false;
}

yaml_node_t *gs_yaml_root(struct gs_yaml *y) { return y->loaded ? yaml_document_get_root_node(&y->doc) : NULL; }

bool gs_yaml_is_null(const yaml_node_t *node) {
    if (!node)
        return true;
    if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };
    for (size_t i = 0; i < GS_ARRAY_SIZE(nulls); i++)
        if (node->data.scalar.length == strlen(nulls[i]) &&
            memcmp(node->data.scalar.value, nulls[i], node->data.scalar.length) == 0)
            return true;
    return false;
}

char *gs_yaml_path_key(char buf[static GS_YAML_PATH_MAX], const char *parent, const char *key) {
    if (!parent || !*parent)
        snprintf(buf, GS_YAML_PATH_MAX, "%s", key);
    else
        snprintf(buf, GS_YAML_PATH_MAX, "%s.%s", parent, key);
    return buf;
}

char *gs_yaml_path_index(char buf[static GS_YAML_PATH_MAX], const char *parent, size_t index) {
    snprintf(buf, GS_YAML_PATH_MAX, "%s[%zu]", parent ? parent : "", index);
    return buf;
}

static const char *describe(const yaml_node_t *node) {
    if (gs_yaml_is_null(node))
        return "an empty value";
    switch (node->type) {
    case YAML_SCALAR_NODE:
        return "a scalar";
    case YAML_SEQUENCE_NODE:
        return "a sequence";
    case YAML_MAPPING_NODE:
        return "a mapping";
    default:
        return "nothing";
    }
}

int gs_yaml_expect(struct gs_yaml *y, const yaml_node_t *node, const char *path, yaml_node_type_t type) {
    /* A null scalar is never what a caller expects, even when it asks for a scalar. */
    if (node && node->type == type && !gs_yaml_is_null(node))
        return 0;
    const char *want = type == YAML_MAPPING_NODE ? "a mapping" : type == YAML_SEQUENCE_NODE ? "a sequence" : "a scalar";
    return gs_yaml_error(y, node, path, "expected %s, got %s", want, describe(node));
}

size_t gs_yaml_seq_len(const yaml_node_t *seq) {
    if (!seq || seq->type != YAML_SEQUENCE_NODE)
        return 0;
    return (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
}

yaml_node_t *gs_yaml_seq_at(struct gs_yaml *y, const yaml_node_t *seq, size_t i) {
    if (i >= gs_yaml_seq_len(seq))
        return NULL;
    return yaml_document_get_node(&y->doc, seq->data.sequence.items.start[i]);
}

size_t gs_yaml_map_len(const yaml_node_t *map) {
    if (!map || map->type != YAML_MAPPING_NODE)
        return 0;
    return (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
}

/* The key's text if it is a usable key (a scalar without NUL bytes), else NULL. */
static const char *key_text(const yaml_node_t *k) {
    if (!k || k->type != YAML_SCALAR_NODE)
        return NULL;
    const char *s = (const char *)k->data.scalar.value;
    if (strlen(s) != k->data.scalar.length)
        return NULL;
    return s;
}

int gs_yaml_map_at(struct gs_yaml *y, const yaml_node_t *map, size_t i, const char **key, yaml_node_t **value) {
    if (i >= gs_yaml_map_len(map))
        return -ERANGE;
    const yaml_node_pair_t *pair = &map->data.mapping.pairs.start[i];
    yaml_node_t *k = yaml_document_get_node(&y->doc, pair->key);
    const char *s = key_text(k);
    if (!s)
        return gs_yaml_error(y, k, NULL, "mapping keys must be strings");
    *key = s;
    *value = yaml_document_get_node(&y->doc, pair->value);
    return 0;
}

static void join(char *buf, size_t size, const char *const *list) {
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; list[i]; i++)
        appendf(buf, size, &n, "%s%s", i ? ", " : "", list[i]);
}

struct key_ref {
    const char *s;
    size_t i;
    const yaml_node_t *node;
};

static int key_ref_cmp(const void *a, const void *b) {
    const struct key_ref *x = a, *y = b;
    int c = strcmp(x->s, y->s);
    if (c)
        return c;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int duplicate_error(struct gs_yaml *y, const yaml_node_t *dup, const yaml_node_t *first, const char *path,
                           const char *key) {
    char p[GS_YAML_PATH_MAX];
    return gs_yaml_error(y, dup, gs_yaml_path_key(p, path, key),
                         "duplicate key '%.64s' (first at line %zu, column %zu)", key, first->start_mark.line + 1,
                         first->start_mark.column + 1);
}

/* Free-form maps: sort the keys so that a hostile map with many keys stays O(n log n); report the
 * duplicate that comes first in the document. */
static int check_unique(struct gs_yaml *y, const yaml_node_t *map, const char *path) {
    size_t n = gs_yaml_map_len(map);
    if (n < 2)
        return 0;
    _cleanup_free_ struct key_ref *refs = calloc(n, sizeof(*refs));
    if (!refs)
        return error_at(y, -ENOMEM, map->start_mark, path, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *k = yaml_document_get_node(&y->doc, map->data.mapping.pairs.start[i].key);
        refs[i] = (struct key_ref){ key_text(k), i, k }; /* every key was checked by the caller */
    }
    qsort(refs, n, sizeof(*refs), key_ref_cmp);
    const struct key_ref *dup = NULL, *first = NULL;
    for (size_t i = 1; i < n; i++) {
        if (strcmp(refs[i].s, refs[i - 1].s) != 0 || (dup && dup->i < refs[i].i))
            continue;
        dup = &refs[i];
        size_t j = i - 1;
        while (j > 0 && strcmp(refs[j - 1].s, refs[i].s) == 0)
            j--;
        first = &refs[j];
    }
    if (dup)
        return duplicate_error(y, dup->node, first->node, path, dup->s);
    return 0;
}

int gs_yaml_check_keys(struct gs_yaml *y, const yaml_node_t *map, const char *path, const char *const *allowed) {
    int r = gs_yaml_expect(y, map, path, YAML_MAPPING_NODE);
    if (r < 0)
        return r;
    size_t nallowed = 0;
    while (allowed && allowed[nallowed])
        nallowed++;
    if (nallowed > GS_YAML_MAX_KEYS)
        return gs_yaml_error(y, map, path, "internal error: more than %d allowed keys", GS_YAML_MAX_KEYS);

    const yaml_node_t *seen[GS_YAML_MAX_KEYS] = { 0 };
    size_t n = gs_yaml_map_len(map);
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *k = yaml_document_get_node(&y->doc, map->data.mapping.pairs.start[i].key);
        const char *s = key_text(k);
        if (!s)
            return gs_yaml_error(y, k, path, "mapping keys must be strings, got %s", describe(k));
        if (!allowed)
            continue;
        size_t j = 0;
        while (j < nallowed && strcmp(allowed[j], s) != 0)
            j++;
        if (j == nallowed) {
            char p[GS_YAML_PATH_MAX], list[512];
            join(list, sizeof(list), allowed);
            return gs_yaml_error(y, k, gs_yaml_path_key(p, path, s), "unknown key '%.64s'; allowed keys: %s", s,
                                 list);
        }
        if (seen[j])
            return duplicate_error(y, k, seen[j], path, s);
        seen[j] = k;
    }
    return allowed ? 0 : check_unique(y, map, path);
}

yaml_node_t *gs_yaml_map_get(struct gs_yaml *y, const yaml_node_t *map, const char *key) {
    size_t n = gs_yaml_map_len(map);
    for (size_t i = 0; i < n; i++) {
        const yaml_node_pair_t *pair = &map->data.mapping.pairs.start[i];
        const char *s = key_text(yaml_document_get_node(&y->doc, pair->key));
        if (s && strcmp(s, key) == 0)
            return yaml_document_get_node(&y->doc, pair->value);
    }
    return NULL;
}

int gs_yaml_scalar(struct gs_yaml *y, const yaml_node_t *node, const char *path, const char **out) {
    if (node && gs_yaml_is_null(node))
        return gs_yaml_error(y, node, path, "missing value");
    if (!node || node->type != YAML_SCALAR_NODE)
        return gs_yaml_expect(y, node, path, YAML_SCALAR_NODE);
    const char *s = (const char *)node->data.scalar.value;
    if (strlen(s) != node->data.scalar.length)
        return gs_yaml_error(y, node, path, "value contains a NUL character");
    *out = s;
    return 0;
}

int gs_yaml_uint(struct gs_yaml *y, const yaml_node_t *node, const char *path, unsigned long long min,
                 unsigned long long max, unsigned long long *out) {
    const char *s;
    int r = gs_yaml_scalar(y, node, path, &s);
    if (r < 0)
        return r;
    unsigned long long v;
    /* A leading zero is octal to YAML 1.1 readers and decimal to us: refuse the ambiguity. */
    if (s[0] == '0' && s[1])
        return gs_yaml_error(y, node, path, "expected an integer in %llu..%llu without leading zeros, got '%.64s'",
                             min, max, s);
    r = gs_parse_uint(s, min, max, &v);
    if (r == -ERANGE)
        return gs_yaml_error(y, node, path, "%.64s is out of range %llu..%llu", s, min, max);
    if (r < 0)
        return gs_yaml_error(y, node, path, "expected an integer in %llu..%llu, got '%.64s'", min, max, s);
    *out = v;
    return 0;
}

int gs_yaml_enum(struct gs_yaml *y, const yaml_node_t *node, const char *path, const char *const *allowed,
                 unsigned *out) {
    const char *s;
    int r = gs_yaml_scalar(y, node, path, &s);
    if (r < 0)
        return r;
    for (unsigned i = 0; allowed[i]; i++) {
        if (strcmp(allowed[i], s) == 0) {
            *out = i;
            return 0;
        }
    }
    char list[512];
    join(list, sizeof(list), allowed);
    return gs_yaml_error(y, node, path, "invalid value '%.64s'; expected one of: %s", s, list);
}

int gs_yaml_bool(struct gs_yaml *y, const yaml_node_t *node, const char *path, bool *out) {
    const char *s;
    int r = gs_yaml_scalar(y, node, path, &s);
    if (r < 0)
        return r;
    if (strcasecmp(s, "true") == 0 || strcasecmp(s, "yes") == 0)
        *out = true;
    else if (strcasecmp(s, "false") == 0 || strcasecmp(s, "no") == 0)
        *out = false;
    else
        return gs_yaml_error(y, node, path, "invalid value '%.64s'; expected true or false (or yes/no)", s);
    return 0;
}
