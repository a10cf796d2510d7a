/* kubeyaml.h (cli): a Kubernetes object written in YAML, as the JSON object the API server takes
 * (`gpuslice kube create|replace|apply -f FILE`; docs/cli.md). Pure.
 *
 * One document, one mapping (the object). Mappings become objects (a key given twice is refused),
 * sequences arrays, quoted scalars strings. A plain scalar is null for "", ~ and null (Null, NULL),
 * a boolean for true/false, yes/no, on/off, y/n (any of their case forms kubectl's YAML reader
 * takes: YAML 1.1), an integer for plain decimal digits, a number for a decimal with a point or an
 * exponent, and a string otherwise. Plain scalars YAML 1.1 reads as numbers of another form
 * (0755, 0x1F, 0b1, 0o7, 1_000), .inf and .nan are refused, so that a value never means something
 * else here than under kubectl: quote them for strings. Anchors, aliases and tags are refused
 * (config/yamlutil.h's limits). Errors are one line, "NAME:LINE:COLUMN: PATH: message", with the
 * field's path as a user writes it (metadata.labels.app, spec.containers[0].ports[1]). */
#ifndef GS_CLI_KUBEYAML_H
#define GS_CLI_KUBEYAML_H

#include <jansson.h>
#include <stddef.h>

/* Converts text[0..len) (name: for messages) into *out (a JSON object; json_decref it). Returns
 * 0, or -EINVAL (err: why) or -ENOMEM. */
int cli_kube_yaml_object(const char *name, const char *text, size_t len, json_t **out, char *err, size_t errlen);

#endif
