/* test_guard_limits.c: the guard's limits file (guard/guard_limits.h): valid files with every
 * setting, the bounds of each number and string, the formatter's round trip, and hostile input
 * (truncated lines, huge numbers, missing fields, settings listed twice, NUL and other control
 * bytes, overlong lines and files), each refused with its exact "NAME:LINE: message". */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bad_cases.h"

#include "../../guard/guard_limits.h"

#define MAGIC "gpuslice-guard 1\n"

static struct gs_guard_limits parse_ok_len(const char *text, size_t len) {
    struct gs_guard_limits l;
    char err[512] = "";
    int r = gs_guard_limits_parse("t", text, len, &l, err, sizeof(err));
    if (r != 0)
        fail_msg("parse failed (%d): %s", r, err);
    return l;
}

static struct gs_guard_limits parse_ok(const char *text) {
    return parse_ok_len(text, strlen(text));
}

/* The parse fails with -EINVAL and exactly this one-line message, and leaves its output alone. */
static void expect_error_len(const char *text, size_t len, const char *message) {
    struct gs_guard_limits l;
    memset(&l, 0xa5, sizeof(l));
    char err[512] = "";
    int r = gs_guard_limits_parse("t", text, len, &l, err, sizeof(err));
    if (r != -EINVAL)
        fail_msg("expected -EINVAL and '%s', got %d ('%s')", message, r, err);
    assert_string_equal(err, message);
    assert_null(strchr(err, '\n'));
    for (size_t i = 0; i < sizeof(l); i++)
        assert_int_equal(((const unsigned char *)&l)[i], 0xa5);
}

static void test_minimal(void **state) {
    (void)state;
    struct gs_guard_limits l = parse_ok(MAGIC "region /r\n");
    assert_true(l.fail_closed);               /* on-error defaults to closed */
    assert_string_equal(l.region, "/r");
    assert_int_equal(l.context_overhead, 0);
    assert_int_equal(l.n_devices, 0);
}

/* Every setting, with comments, blank lines, tabs and runs of blanks, as a person might write it. */
static void test_every_field(void **state) {
    (void)state;
    struct gs_guard_limits l = parse_ok("# written by hand\n"
                                        "\n"
                                        "gpuslice-guard 1   # magic\n"
                                        "  on-error\topen\n"
                                        "region /run/gpuslice/guard/pod-1/region\n"
                                        "context-overhead 314572800\n"
                                        "   \t \n"
                                        "device 0 GPU-8f6c3a1e-0000-0000-0000-000000000000 8589934592 30\n"
                                        "device\t3\t-\t0\t0 # no limit on ordinal 3\n"
                                        "device 1 MIG-11111111-2222-3333-4444-555555555555 1 100\n");
    assert_false(l.fail_closed);
    assert_string_equal(l.region, "/run/gpuslice/guard/pod-1/region");
    assert_int_equal(l.context_overhead, 314572800);
    assert_int_equal(l.n_devices, 3);
    assert_int_equal(l.dev[0].ordinal, 0);
    assert_string_equal(l.dev[0].uuid, "GPU-8f6c3a1e-0000-0000-0000-000000000000");
    assert_int_equal(l.dev[0].vram, 8589934592ULL);
    assert_int_equal(l.dev[0].compute_pct, 30);
    assert_int_equal(l.dev[1].ordinal, 3);
    assert_string_equal(l.dev[1].uuid, "");    /* "-": no UUID */
    assert_int_equal(l.dev[1].vram, 0);
    assert_int_equal(l.dev[1].compute_pct, 0);
    assert_int_equal(l.dev[2].ordinal, 1);
    assert_string_equal(l.dev[2].uuid, "MIG-11111111-2222-3333-4444-555555555555");
    assert_int_equal(l.dev[2].vram, 1);
    assert_int_equal(l.dev[2].compute_pct, 100);
    assert_true(parse_ok(MAGIC "on-error closed\nregion /r\n").fail_closed);
}

/* The largest value of each bound is accepted: 1 TiB overhead, 1 PiB VRAM, 100 %, ordinal 15 and
 * all 16 ordinals, a 255-byte region, a 95-byte UUID, a 511-byte line, leading zeros. */
static void test_bounds_accepted(void **state) {
    (void)state;
    char text[8192];
    size_t n = (size_t)snprintf(text, sizeof(text), MAGIC "context-overhead 1099511627776\nregion /");
    memset(text + n, 'r', 254);
    n += 254;
    n += (size_t)snprintf(text + n, sizeof(text) - n, "\n");
    for (int i = 15; i >= 0; i--)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "device %d - %llu %u\n", i,
                              i == 15 ? 1125899906842624ULL : (unsigned long long)i, i == 15 ? 100u : 0u);
    assert_true(n < sizeof(text) - 600);
    struct gs_guard_limits l = parse_ok_len(text, n);
    assert_int_equal(l.context_overhead, 1ULL << 40);
    assert_int_equal(strlen(l.region), 255);
    assert_int_equal(l.n_devices, 16);
    assert_int_equal(l.dev[0].ordinal, 15);
    assert_int_equal(l.dev[0].vram, 1ULL << 50);
    assert_int_equal(l.dev[0].compute_pct, 100);
    assert_int_equal(l.dev[15].ordinal, 0);

    /* Every ordinal is taken: a second file for the longest UUID and line. */
    char uuid[96] = "GPU-";
    memset(uuid + 4, 'a', 91);
    uuid[95] = '\0';
    n = (size_t)snprintf(text, sizeof(text), MAGIC "region /r\ndevice 007 %s 0001 050\n#", uuid);
    size_t line_start = n - 1;
    memset(text + n, 'x', 510);
    n += 510;
    text[n++] = '\n';
    assert_int_equal(n - line_start, 512);    /* 511 bytes and the newline */
    l = parse_ok_len(text, n);
    assert_int_equal(l.dev[0].ordinal, 7);
    assert_string_equal(l.dev[0].uuid, uuid);
    assert_int_equal(l.dev[0].vram, 1);
    assert_int_equal(l.dev[0].compute_pct, 50);
}

/* The text is read by its length, without a terminating NUL. */
static void test_length_not_nul(void **state) {
    (void)state;
    const char text[] = MAGIC "region /r\ndevice 0 - 5 0\nthis is past the length";
    struct gs_guard_limits l = parse_ok_len(text, strlen(MAGIC "region /r\ndevice 0 - 5 0\n"));
    assert_int_equal(l.n_devices, 1);
    char *exact = malloc(strlen(MAGIC "region /r\n"));   /* no room for a NUL: ASan sees any over-read */
    assert_non_null(exact);
    memcpy(exact, MAGIC "region /r\n", strlen(MAGIC "region /r\n"));
    assert_string_equal(parse_ok_len(exact, strlen(MAGIC "region /r\n")).region, "/r");
    free(exact);
}

static void test_nul_bytes(void **state) {
    (void)state;
    /* A NUL would have hidden the rest of the file from a NUL-terminated reader. */
    const char inside[] = MAGIC "region /r\0/evil\n";
    expect_error_len(inside, sizeof(inside) - 1, "t:2: NUL byte");
    const char after[] = MAGIC "region /r\n\0device 0 - 1 0\n";
    expect_error_len(after, sizeof(after) - 1, "t:3: NUL byte");
    const char first[] = "\0";
    expect_error_len(first, 1, "t:1: NUL byte");
}

static void test_file_size(void **state) {
    (void)state;
    char *text = malloc(GS_GUARD_LIMITS_MAX + 1);
    assert_non_null(text);
    size_t n = (size_t)snprintf(text, GS_GUARD_LIMITS_MAX, MAGIC "region /r\n");
    while (n < GS_GUARD_LIMITS_MAX) {          /* comment lines up to exactly the limit */
        size_t line = GS_GUARD_LIMITS_MAX - n < 100 ? GS_GUARD_LIMITS_MAX - n : 100;
        memset(text + n, '#', line - 1);
        text[n + line - 1] = '\n';
        n += line;
    }
    assert_int_equal(n, GS_GUARD_LIMITS_MAX);
    assert_string_equal(parse_ok_len(text, n).region, "/r");
    text[n] = '\n';
    expect_error_len(text, n + 1, "t: larger than 65536 bytes");
    free(text);
}

static void test_error_buffer(void **state) {
    (void)state;
    struct gs_guard_limits l;
    char err[8];
    assert_int_equal(gs_guard_limits_parse("t", "x\n", 2, &l, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "t:1: ex");       /* cut, NUL-terminated */
    assert_int_equal(gs_guard_limits_parse("t", "x\n", 2, &l, NULL, 0), -EINVAL);
}

/* ---- the formatter ---------------------------------------------------------------------------- */

static struct gs_guard_limits sample(void) {
    struct gs_guard_limits l = { .fail_closed = false, .context_overhead = 1ULL << 40, .n_devices = 3 };
    snprintf(l.region, sizeof(l.region), "/run/gpuslice/guard/region");
    l.dev[0] = (struct gs_guard_device_limit){ 2, "GPU-aaaa", 1ULL << 50, 100 };
    l.dev[1] = (struct gs_guard_device_limit){ 0, "", 0, 0 };
    l.dev[2] = (struct gs_guard_device_limit){ 15, "MIG-bbbb", 4ULL << 30, 25 };
    return l;
}

static void test_format_round_trip(void **state) {
    (void)state;
    struct gs_guard_limits l = sample();
    char buf[1024];
    int n = gs_guard_limits_format(&l, buf, sizeof(buf));
    assert_true(n > 0);
    assert_int_equal((size_t)n, strlen(buf));
    assert_string_equal(buf, "gpuslice-guard 1\non-error open\nregion /run/gpuslice/guard/region\n"
                             "context-overhead 1099511627776\n"
                             "device 2 GPU-aaaa 1125899906842624 100\ndevice 0 - 0 0\ndevice 15 MIG-bbbb 4294967296 25\n");
    struct gs_guard_limits back = parse_ok_len(buf, (size_t)n);
    assert_int_equal(back.fail_closed, l.fail_closed);
    assert_string_equal(back.region, l.region);
    assert_int_equal(back.context_overhead, l.context_overhead);
    assert_int_equal(back.n_devices, 3);
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(back.dev[i].ordinal, l.dev[i].ordinal);
        assert_string_equal(back.dev[i].uuid, l.dev[i].uuid);
        assert_int_equal(back.dev[i].vram, l.dev[i].vram);
        assert_int_equal(back.dev[i].compute_pct, l.dev[i].compute_pct);
    }
    /* Exactly the room for the text and its NUL is enough; one byte less is not. */
    assert_int_equal(gs_guard_limits_format(&l, buf, (size_t)n + 1), n);
    assert_int_equal(gs_guard_limits_format(&l, buf, (size_t)n), -ENOSPC);
    assert_int_equal(gs_guard_limits_format(&l, buf, 10), -ENOSPC);
}

/* What the guard would read differently is refused rather than written. */
static void test_format_refuses_unreadable(void **state) {
    (void)state;
    char buf[1024];
    static const char *const bad_regions[] = { "", "relative/region", "/with space", "/with#hash", "/tab\there",
                                               "/new\nline" };
    for (size_t i = 0; i < sizeof(bad_regions) / sizeof(bad_regions[0]); i++) {
        struct gs_guard_limits l = sample();
        snprintf(l.region, sizeof(l.region), "%s", bad_regions[i]);
        if (gs_guard_limits_format(&l, buf, sizeof(buf)) != -EINVAL)
            fail_msg("region '%s' was formatted", bad_regions[i]);
    }
    static const char *const bad_uuids[] = { "gpu-lower", "GPU-a b", "GPU-#", "-" };
    for (size_t i = 0; i < sizeof(bad_uuids) / sizeof(bad_uuids[0]); i++) {
        struct gs_guard_limits l = sample();
        snprintf(l.dev[0].uuid, sizeof(l.dev[0].uuid), "%s", bad_uuids[i]);
        if (gs_guard_limits_format(&l, buf, sizeof(buf)) != -EINVAL)
            fail_msg("UUID '%s' was formatted", bad_uuids[i]);
    }
    struct gs_guard_limits l = sample();
    l.dev[0].vram = (1ULL << 50) + 1;
    assert_int_equal(gs_guard_limits_format(&l, buf, sizeof(buf)), -EINVAL);
    l = sample();
    l.dev[0].compute_pct = 101;
    assert_int_equal(gs_guard_limits_format(&l, buf, sizeof(buf)), -EINVAL);
    l = sample();
    l.dev[0].ordinal = 16;
    assert_int_equal(gs_guard_limits_format(&l, buf, sizeof(buf)), -EINVAL);
    l = sample();
    l.dev[0].ordinal = -1;
    assert_int_equal(gs_guard_limits_format(&l, buf, sizeof(buf)), -EINVAL);
    l = sample();
    l.dev[1].ordinal = 2;                      /* listed twice */
    assert_int_equal(gs_guard_limits_format(&l, buf, sizeof(buf)), -EINVAL);
    l = sample();
    l.context_overhead = (1ULL << 40) + 1;
    assert_int_equal(gs_guard_limits_format(&l, buf, sizeof(buf)), -EINVAL);
    l = sample();
    l.n_devices = GS_GUARD_MAX_DEVICES + 1;
    assert_int_equal(gs_guard_limits_format(&l, buf, sizeof(buf)), -EINVAL);
    l = sample();
    memset(l.region, 'r', sizeof(l.region));   /* not terminated */
    l.region[0] = '/';
    assert_int_equal(gs_guard_limits_format(&l, buf, sizeof(buf)), -EINVAL);
    l = sample();
    memset(l.dev[2].uuid, 'a', sizeof(l.dev[2].uuid));
    assert_int_equal(gs_guard_limits_format(&l, buf, sizeof(buf)), -EINVAL);
}

/* ---- hostile input: one row per case, the whole message checked ------------------------------- */

#define LONG40 "0123456789012345678901234567890123456789"
#define LONG200 LONG40 LONG40 LONG40 LONG40 LONG40

static const struct bad_case bad_cases[] = {
    { "empty", "", "t:1: empty: expected 'gpuslice-guard 1'", { NULL } },
    { "only_comments", "# nothing\n\n", "t:2: empty: expected 'gpuslice-guard 1'", { NULL } },
    { "no_magic", "region /r\n", "t:1: expected 'gpuslice-guard 1' as the first line", { NULL } },
    { "magic_alone", "gpuslice-guard\n", "t:1: expected 'gpuslice-guard 1' as the first line", { NULL } },
    { "magic_extra_field", "gpuslice-guard 1 2\n", "t:1: expected 'gpuslice-guard 1' as the first line", { NULL } },
    { "magic_version_2", "gpuslice-guard 2\nregion /r\n",
      "t:1: unsupported format version (this guard reads version 1)", { NULL } },
    { "magic_twice", MAGIC MAGIC "region /r\n",
      "t:2: unknown setting (expected on-error, region, context-overhead, device)", { NULL } },
    { "no_region", MAGIC "on-error open\ndevice 0 - 1 0\n", "t:3: no 'region PATH' line", { NULL } },
    /* truncated: the last line has no newline, whatever it says */
    { "truncated_magic", "gpuslice-gu", "t:1: no newline at the end of the line (truncated file?)", { NULL } },
    { "truncated_device", MAGIC "region /r\ndevice 0 - 85899",
      "t:3: no newline at the end of the line (truncated file?)", { NULL } },
    { "truncated_overhead", MAGIC "region /r\ncontext-overhead 3145",
      "t:3: no newline at the end of the line (truncated file?)", { NULL } },
    { "truncated_blank", MAGIC "region /r\n  ", "t:3: no newline at the end of the line (truncated file?)", { NULL } },
    { "line_too_long", MAGIC "#" LONG200 LONG200 LONG40 LONG40 LONG40 "0123456789\n",
      "t:2: line too long (at most 511 bytes)", { NULL } },
    { "carriage_return", "gpuslice-guard 1\r\nregion /r\r\n", "t:1: control character 0x0d", { NULL } },
    { "escape", MAGIC "region /r\x1b[2J\n", "t:2: control character 0x1b", { NULL } },
    { "delete", MAGIC "region /r\x7f\n", "t:2: control character 0x7f", { NULL } },
    { "too_many_fields", MAGIC "region /r\ndevice 0 - 1 0 extra\n", "t:3: too many fields", { NULL } },
    { "unknown_setting", MAGIC "region /r\nquota 5\n",
      "t:3: unknown setting (expected on-error, region, context-overhead, device)", { NULL } },
    { "on_error_value", MAGIC "on-error maybe\n", "t:2: on-error: expected 'closed' or 'open'", { NULL } },
    { "on_error_missing", MAGIC "on-error\n", "t:2: on-error: expected 'closed' or 'open'", { NULL } },
    { "on_error_case", MAGIC "on-error Open\n", "t:2: on-error: expected 'closed' or 'open'", { NULL } },
    { "on_error_twice", MAGIC "on-error open\nregion /r\non-error closed\n", "t:4: on-error: listed twice", { NULL } },
    { "region_relative", MAGIC "region run/region\n", "t:2: region: expected an absolute path", { NULL } },
    { "region_missing", MAGIC "region\n", "t:2: region: expected an absolute path", { NULL } },
    { "region_two_paths", MAGIC "region /a /b\n", "t:2: region: expected an absolute path", { NULL } },
    { "region_too_long", MAGIC "region /" LONG200 "0123456789012345678901234567890123456789012345678901234\n",
      "t:2: region: path too long (at most 255 bytes)", { NULL } },
    { "region_twice", MAGIC "region /a\nregion /b\n", "t:3: region: listed twice", { NULL } },
    { "overhead_over_1tib", MAGIC "context-overhead 1099511627777\n",
      "t:2: context-overhead: expected bytes (at most 1 TiB)", { NULL } },
    { "overhead_u64_overflow", MAGIC "context-overhead 18446744073709551616\n",
      "t:2: context-overhead: expected bytes (at most 1 TiB)", { NULL } },
    { "overhead_huge", MAGIC "context-overhead 99999999999999999999999999999999999999999\n",
      "t:2: context-overhead: expected bytes (at most 1 TiB)", { NULL } },
    { "overhead_negative", MAGIC "context-overhead -1\n", "t:2: context-overhead: expected bytes (at most 1 TiB)", { NULL } },
    { "overhead_plus", MAGIC "context-overhead +1\n", "t:2: context-overhead: expected bytes (at most 1 TiB)", { NULL } },
    { "overhead_hex", MAGIC "context-overhead 0x10\n", "t:2: context-overhead: expected bytes (at most 1 TiB)", { NULL } },
    { "overhead_unit", MAGIC "context-overhead 300MiB\n", "t:2: context-overhead: expected bytes (at most 1 TiB)", { NULL } },
    { "overhead_missing", MAGIC "context-overhead\n", "t:2: context-overhead: expected bytes (at most 1 TiB)", { NULL } },
    { "overhead_twice", MAGIC "region /r\ncontext-overhead 1\ncontext-overhead 2\n",
      "t:4: context-overhead: listed twice", { NULL } },
    { "device_no_fields", MAGIC "region /r\ndevice\n",
      "t:3: device: expected 'device ORDINAL UUID|- BYTES PERCENT'", { NULL } },
    { "device_missing_percent", MAGIC "region /r\ndevice 0 - 1024\n",
      "t:3: device: expected 'device ORDINAL UUID|- BYTES PERCENT'", { NULL } },
    { "device_ordinal_16", MAGIC "region /r\ndevice 16 - 1 0\n", "t:3: device: ordinal must be 0..15", { NULL } },
    { "device_ordinal_negative", MAGIC "region /r\ndevice -1 - 1 0\n", "t:3: device: ordinal must be 0..15", { NULL } },
    { "device_ordinal_huge", MAGIC "region /r\ndevice 99999999999999999999999 - 1 0\n",
      "t:3: device: ordinal must be 0..15", { NULL } },
    { "device_ordinal_word", MAGIC "region /r\ndevice zero - 1 0\n", "t:3: device: ordinal must be 0..15", { NULL } },
    { "device_uuid_prefix", MAGIC "region /r\ndevice 0 gpu-1 1 0\n",
      "t:3: device: UUID must start with GPU- or MIG- (or be -)", { NULL } },
    { "device_uuid_too_long", MAGIC "region /r\ndevice 0 GPU-" LONG40 LONG40 "0123456789012345 1 0\n",
      "t:3: device: UUID too long", { NULL } },
    { "device_vram_over_1pib", MAGIC "region /r\ndevice 0 - 1125899906842625 0\n",
      "t:3: device: VRAM must be a number of bytes (at most 1 PiB)", { NULL } },
    { "device_vram_u64_overflow", MAGIC "region /r\ndevice 0 - 18446744073709551617 0\n",
      "t:3: device: VRAM must be a number of bytes (at most 1 PiB)", { NULL } },
    { "device_vram_unit", MAGIC "region /r\ndevice 0 - 8GiB 0\n",
      "t:3: device: VRAM must be a number of bytes (at most 1 PiB)", { NULL } },
    { "device_percent_101", MAGIC "region /r\ndevice 0 - 1 101\n",
      "t:3: device: compute must be a percentage 0..100", { NULL } },
    { "device_percent_huge", MAGIC "region /r\ndevice 0 - 1 4294967396\n",
      "t:3: device: compute must be a percentage 0..100", { NULL } },
    { "device_percent_sign", MAGIC "region /r\ndevice 0 - 1 50%\n",
      "t:3: device: compute must be a percentage 0..100", { NULL } },
    { "device_twice", MAGIC "region /r\ndevice 1 - 1 0\ndevice 01 - 2 0\n", "t:4: device: ordinal listed twice", { NULL } },
};

/* The default context overhead: per architecture, the largest for unknown ones, and a value the
 * limits file accepts. */
static void test_context_overhead_default(void **state) {
    (void)state;
    assert_int_equal(gs_guard_context_overhead_default("hopper"), 500ULL << 20);
    assert_int_equal(gs_guard_context_overhead_default("ampere"), 400ULL << 20);
    assert_int_equal(gs_guard_context_overhead_default("turing"), 300ULL << 20);
    assert_int_equal(gs_guard_context_overhead_default("no-such-arch"), GS_GUARD_CONTEXT_OVERHEAD_UNKNOWN);
    assert_int_equal(gs_guard_context_overhead_default(NULL), GS_GUARD_CONTEXT_OVERHEAD_UNKNOWN);
    static const char *const archs[] = { "volta", "turing", "ampere", "ada", "hopper", "blackwell" };
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
        assert_true(gs_guard_context_overhead_default(archs[i]) <= GS_GUARD_CONTEXT_OVERHEAD_UNKNOWN);
    struct gs_guard_limits l = { .fail_closed = true, .region = "/r", .n_devices = 1 };
    l.context_overhead = gs_guard_context_overhead_default("hopper");
    l.dev[0] = (struct gs_guard_device_limit){ 0, "", 8ULL << 30, 0 };
    char buf[512];
    assert_true(gs_guard_limits_format(&l, buf, sizeof(buf)) > 0);
    assert_non_null(strstr(buf, "context-overhead 524288000\n"));
}

/* The case's text (bad_case.yaml) fails with exactly its message (bad_case.prefix). */
static void test_bad(void **state) {
    const struct bad_case *c = *state;
    expect_error_len(c->yaml, strlen(c->yaml), c->prefix);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minimal),
        cmocka_unit_test(test_every_field),
        cmocka_unit_test(test_bounds_accepted),
        cmocka_unit_test(test_length_not_nul),
        cmocka_unit_test(test_nul_bytes),
        cmocka_unit_test(test_file_size),
        cmocka_unit_test(test_error_buffer),
        cmocka_unit_test(test_format_round_trip),
        cmocka_unit_test(test_format_refuses_unreadable),
        cmocka_unit_test(test_context_overhead_default),
    };
    return run_with_bad_cases("guard_limits", tests, sizeof(tests) / sizeof(tests[0]), bad_cases,
                              sizeof(bad_cases) / sizeof(bad_cases[0]), test_bad);
}
