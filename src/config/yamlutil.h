/* yamlutil.h: small helpers over libyaml's document API for gpuslice's config parsers (node
 * descriptions, sharing policies, MIG layouts). They load one untrusted document with limits,
 * check mapping keys and read typed scalars, and format every error as one line:
 *
 *   NAME:LINE:COLUMN: PATH: message
 *
 * LINE and COLUMN are 1-based (libyaml's marks are 0-based) and point at the start of the
 * offending node. PATH names the node the way a user would write it ("gpus[1].count"); the
 * document root has the empty path, and then the "PATH: " part is left out, as it is for syntax
 * errors ("node.yaml:3:7: syntax error: ..."). Control characters in messages become '?', so an
 * error is always a single line.
 *
 * Limits, because config files may come from anyone: input over GS_YAML_MAX_SIZE bytes, more
 * than one document, nesting deeper than GS_YAML_MAX_DEPTH, anchors/aliases and explicit tags
 * are all rejected before the document is built.
 *
 * Scalars are taken as their raw text whatever YAML 1.1 would resolve them to (`13.0` stays
 * "13.0", `no` stays "no"), so each reader decides what it accepts. Every function returns 0 or a
 * negative errno (-EINVAL for bad input, -ENOMEM), having written the error to the buffer given
 * to gs_yaml_load(). */
#ifndef GS_YAMLUTIL_H
#define GS_YAMLUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "util/util.h"

#define GS_YAML_MAX_SIZE (1024 * 1024)
#define GS_YAML_MAX_DEPTH 32
/* Longest allowed-key or allowed-value list the checkers take. */
#define GS_YAML_MAX_KEYS 64
/* Enough for any path a parser builds; longer paths are cut, which only affects messages. */
#define GS_YAML_PATH_MAX 128

struct gs_yaml {
    yaml_document_t doc;
    bool loaded;
    const char *name; /* borrowed; must outlive the struct */
    char *err;        /* borrowed; may be NULL */
    size_t errlen;
};

/* Parses text[0..len) (need not be NUL-terminated) into y. name is used in messages and is not
 * copied. On error y needs no gs_yaml_free(), but calling it is harmless. A stream with no
 * document at all loads fine and has no root. */
int gs_yaml_load(struct gs_yaml *y, const char *name, const char *text, size_t len, char *err, size_t errlen);
void gs_yaml_free(struct gs_yaml *y);

/* Reads a configuration file (at most GS_YAML_MAX_SIZE) for one of the parsers; on error writes
 * "PATH: reason" to err. The caller frees *text. */
int gs_yaml_read_file(const char *path, char **text, size_t *len, char *err, size_t errlen);
#define _cleanup_yaml_ _cleanup_(gs_yaml_free)

/* The root node, or NULL for an empty stream. */
yaml_node_t *gs_yaml_root(struct gs_yaml *y);
/* True for a plain scalar "", "~", "null", "Null" or "NULL" (and for node == NULL). */
bool gs_yaml_is_null(const yaml_node_t *node);

/* Writes "NAME:LINE:COLUMN: PATH: message" to the error buffer and returns -EINVAL. node NULL
 * means position 1:1; path NULL or "" leaves the path out. */
int gs_yaml_error(struct gs_yaml *y, const yaml_node_t *node, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Child paths for messages: ("", "gpus") -> "gpus", ("gpus[0]", "model") -> "gpus[0].model",
 * ("gpus", 1) -> "gpus[1]". buf must hold GS_YAML_PATH_MAX bytes. Returns buf. */
char *gs_yaml_path_key(char buf[static GS_YAML_PATH_MAX], const char *parent, const char *key);
char *gs_yaml_path_index(char buf[static GS_YAML_PATH_MAX], const char *parent, size_t index);

/* Errors unless node is of the given type ("expected a mapping, got a sequence"); a missing
 * value counts as "got nothing". */
int gs_yaml_expect(struct gs_yaml *y, const yaml_node_t *node, const char *path, yaml_node_type_t type);

/* Sequences: length and item i (NULL when out of range or not a sequence). */
size_t gs_yaml_seq_len(const yaml_node_t *seq);
yaml_node_t *gs_yaml_seq_at(struct gs_yaml *y, const yaml_node_t *seq, size_t i);

/* Mappings. gs_yaml_check_keys() must pass before the others are trusted: it errors on a
 * non-scalar key, on a key not in allowed (NULL-terminated; the message lists the allowed keys)
 * and on a key given twice. With allowed == NULL any key is accepted and only those two checks
 * run (for maps keyed by user-chosen names). */
int gs_yaml_check_keys(struct gs_yaml *y, const yaml_node_t *map, const char *path, const char *const *allowed);
/* Value node for key, or NULL when absent (a present key with an empty value gives a null
 * scalar, see gs_yaml_is_null()). */
yaml_node_t *gs_yaml_map_get(struct gs_yaml *y, const yaml_node_t *map, const char *key);
size_t gs_yaml_map_len(const yaml_node_t *map);
/* Pair i in document order; *key is the key's text (valid after gs_yaml_check_keys()). */
int gs_yaml_map_at(struct gs_yaml *y, const yaml_node_t *map, size_t i, const char **key, yaml_node_t **value);

/* A scalar's text (NUL-terminated, owned by y). Errors on a non-scalar, on a null (empty)
 * value and on text containing NUL ("\0" escapes), so callers can use C string functions. A
 * quoted "" is returned as "". */
int gs_yaml_scalar(struct gs_yaml *y, const yaml_node_t *node, const char *path, const char **out);
/* A decimal integer in [min, max]: digits only, no sign, no hex, no underscores. */
int gs_yaml_uint(struct gs_yaml *y, const yaml_node_t *node, const char *path, unsigned long long min,
                 unsigned long long max, unsigned long long *out);
/* One of allowed (NULL-terminated, case-sensitive); *out is its index. The message lists the
 * allowed values. */
int gs_yaml_enum(struct gs_yaml *y, const yaml_node_t *node, const char *path, const char *const *allowed,
                 unsigned *out);
/* true/false, also yes/no, any case. Because scalars keep their raw text there is no YAML 1.1
 * surprise: the key decides that the value is a boolean, so accepting yes/no costs nothing. */
int gs_yaml_bool(struct gs_yaml *y, const yaml_node_t *node, const char *path, bool *out);

#endif
