/* test_ldcache.c: the linker cache reader (src/cdi/ldcache.h) against this machine's real
 * /etc/ld.so.cache (compared with `ldconfig -p`), synthetic caches in both layouts, and damage. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cdi/ldcache.h"

struct collect {
    unsigned n;
    char first_libc[256];
    unsigned libc_flags;
};

static int collect(const char *soname, const char *path, uint32_t flags, void *ctx) {
    struct collect *c = ctx;
    c->n++;
    if (!strcmp(soname, "libc.so.6") && !c->first_libc[0]) {
        snprintf(c->first_libc, sizeof(c->first_libc), "%s", path);
        c->libc_flags = flags;
    }
    return 0;
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *buf = malloc(64 << 20);
    if (!buf) {
        fclose(f);
        return NULL;
    }
    *len = fread(buf, 1, 64 << 20, f);
    fclose(f);
    return buf;
}

static void test_real_cache(void **state) {
    (void)state;
    size_t len = 0;
    unsigned char *data = slurp("/etc/ld.so.cache", &len);
    if (!data)
        skip();
    struct collect c = { 0 };
    char err[256];
    assert_int_equal(gs_ldcache_walk("/etc/ld.so.cache", data, len, collect, &c, err, sizeof(err)), 0);
    /* `ldconfig -p` prints "N libs found in cache `/etc/ld.so.cache'" and one line per entry. */
    FILE *p = popen("ldconfig -p 2>/dev/null || /sbin/ldconfig -p", "r");
    assert_non_null(p);
    char line[512];
    unsigned want = 0;
    char libc_line[512] = "";
    while (fgets(line, sizeof(line), p)) {
        if (sscanf(line, "%u libs found", &want) == 1)
            continue;
        if (!libc_line[0] && strstr(line, "\tlibc.so.6 "))
            snprintf(libc_line, sizeof(libc_line), "%s", line);
    }
    pclose(p);
    assert_int_equal(c.n, want);
    assert_true(c.first_libc[0] == '/');
    assert_non_null(strstr(libc_line, c.first_libc));
#if defined(__x86_64__) || defined(__aarch64__)
    assert_int_equal(c.libc_flags, gs_ldcache_native_flags());
#endif
    free(data);
}

/* A new-format cache with the given entries ("soname", "path" pairs), optionally after an old table. */
static size_t build(unsigned char *buf, size_t cap, bool with_old, const char *const *pairs, unsigned n) {
    memset(buf, 0, cap);
    size_t off = 0;
    if (with_old) {
        memcpy(buf, "ld.so-1.7.0", 11);
        uint32_t n_old = 2;
        memcpy(buf + 12, &n_old, 4);
        off = (16 + 2 * 12 + 7) & ~(size_t)7;
    }
    unsigned char *h = buf + off;
    memcpy(h, "glibc-ld.so.cache1.1", 20);
    memcpy(h + 20, &n, 4);
    size_t str = 48 + (size_t)n * 24;
    for (unsigned i = 0; i < n; i++) {
        unsigned char *e = h + 48 + i * 24;
        int32_t flags = 0x0303;
        uint32_t key = (uint32_t)str, value;
        memcpy(h + str, pairs[2 * i], strlen(pairs[2 * i]) + 1);
        str += strlen(pairs[2 * i]) + 1;
        value = (uint32_t)str;
        memcpy(h + str, pairs[2 * i + 1], strlen(pairs[2 * i + 1]) + 1);
        str += strlen(pairs[2 * i + 1]) + 1;
        memcpy(e, &flags, 4);
        memcpy(e + 4, &key, 4);
        memcpy(e + 8, &value, 4);
    }
    return off + str;
}

static void test_synthetic(void **state) {
    (void)state;
    static const char *const pairs[] = { "libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "libc.so.6",
                                         "/lib/x86_64-linux-gnu/libc.so.6" };
    unsigned char buf[1024];
    char err[256];
    for (int old = 0; old < 2; old++) {
        size_t len = build(buf, sizeof(buf), old, pairs, 2);
        struct collect c = { 0 };
        assert_int_equal(gs_ldcache_walk("c", buf, len, collect, &c, err, sizeof(err)), 0);
        assert_int_equal(c.n, 2);
        assert_string_equal(c.first_libc, "/lib/x86_64-linux-gnu/libc.so.6");
    }
}

static void test_damage(void **state) {
    (void)state;
    static const char *const pairs[] = { "libcuda.so.1", "/usr/lib/libcuda.so.1" };
    unsigned char buf[512];
    char err[256];
    struct collect c = { 0 };
    size_t len = build(buf, sizeof(buf), false, pairs, 1);
    assert_int_equal(gs_ldcache_walk("c", buf, 30, collect, &c, err, sizeof(err)), -EINVAL); /* truncated header */
    assert_string_equal(err, "c: not a glibc ld.so.cache (no 'glibc-ld.so.cache1.1' table)");
    assert_int_equal(gs_ldcache_walk("c", buf, len - 3, collect, &c, err, sizeof(err)), -EINVAL); /* string cut */
    assert_string_equal(err, "c: entry 0 points outside the file");
    uint32_t many = 1000;
    memcpy(buf + 20, &many, 4);
    assert_int_equal(gs_ldcache_walk("c", buf, len, collect, &c, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "c: 1000 entries do not fit in 107 bytes");
    assert_int_equal(gs_ldcache_walk("c", (const unsigned char *)"ld.so-1.7.0", 11, collect, &c, err, sizeof(err)),
                     -EINVAL);
    assert_int_equal(gs_ldcache_walk("c", (const unsigned char *)"", 0, collect, &c, err, sizeof(err)), -EINVAL);
    /* An old table whose entries fill the file exactly: the new table would start past its end
     * (found by fuzz_ldcache: the reader compared bytes beyond the buffer). */
    unsigned char old[28] = "ld.so-1.7.0";
    uint32_t one = 1;
    memcpy(old + 12, &one, 4);
    assert_int_equal(gs_ldcache_walk("c", old, sizeof(old), collect, &c, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "c: not a glibc ld.so.cache (no 'glibc-ld.so.cache1.1' table)");
    assert_int_equal(c.n, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_cache),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_damage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
