/* bad_cases.h: table-driven error tests for the YAML parsers' unit tests (node descriptions,
 * policies, MIG layouts): one cmocka test per table row, each checking the parser's -EINVAL and
 * its message. Include after cmocka.h; the including file defines its test_bad(), which parses
 * the case's YAML and calls check_bad_message(). */
#ifndef GS_TEST_BAD_CASES_H
#define GS_TEST_BAD_CASES_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct bad_case {
    const char *name;
    const char *yaml;
    const char *prefix;   /* exact start of the message (the whole message when no words are given
                           * and the caller asks for it) */
    const char *words[3]; /* must each appear somewhere in it */
};

/* The parse must have failed with -EINVAL and a one-line message that starts with the case's
 * prefix (is it, with whole_when_no_words and no words) and holds each of its words. */
static inline void check_bad_message(const struct bad_case *c, int r, const char *err, bool whole_when_no_words) {
    if (r != -EINVAL)
        fail_msg("%s: expected -EINVAL, got %d (err '%s')", c->name, r, err);
    bool whole = whole_when_no_words && !c->words[0];
    if (whole ? strcmp(err, c->prefix) != 0 : strncmp(err, c->prefix, strlen(c->prefix)) != 0)
        fail_msg("%s: expected %s '%s', got '%s'", c->name, whole ? "the message" : "prefix", c->prefix, err);
    for (size_t i = 0; i < sizeof(c->words) / sizeof(c->words[0]) && c->words[i]; i++)
        if (!strstr(err, c->words[i]))
            fail_msg("%s: expected '%s' in '%s'", c->name, c->words[i], err);
    assert_null(strchr(err, '\n'));
}

/* Runs the fixed tests, then test_bad once per case (the case as its state). */
static inline int run_with_bad_cases(const char *group, const struct CMUnitTest *fixed, size_t n_fixed,
                                     const struct bad_case *bad, size_t n_bad, CMUnitTestFunction test_bad) {
    struct CMUnitTest *tests = calloc(n_fixed + n_bad, sizeof(*tests));
    if (!tests)
        return 1;
    memcpy(tests, fixed, n_fixed * sizeof(*fixed));
    for (size_t i = 0; i < n_bad; i++)
        tests[n_fixed + i] = (struct CMUnitTest){
            .name = bad[i].name,
            .test_func = test_bad,
            .initial_state = (void *)(uintptr_t)&bad[i],
        };
    int r = _cmocka_run_group_tests(group, tests, n_fixed + n_bad, NULL, NULL);
    free(tests);
    return r;
}

#endif
