/* test_consolidate.c: src/consolidate on hand-made inputs: the grid (median step, nearest step,
 * merged samples, gap fill), the packing's bounds, first-fit decreasing against the search, and the
 * GPU names. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "consolidate/pack.h"
#include "consolidate/plan.h"
#include "consolidate/series.h"

static void build(const char *mem, const char *duty, enum cs_fill fill, struct cs_series *out) {
    struct cs_builder *b;
    char err[256] = "";
    assert_int_equal(cs_builder_new(&b), 0);
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(cs_csv_feed(b, CS_MEMORY, "m.csv", mem, strlen(mem), err, sizeof err), 0);
        assert_int_equal(cs_csv_feed(b, CS_DUTY, "d.csv", duty, strlen(duty), err, sizeof err), 0);
        if (pass == 0)
            assert_int_equal(cs_builder_grid(b, err, sizeof err), 0);
    }
    assert_int_equal(cs_builder_finish(b, fill, CS_MISSING_ERROR, out, err, sizeof err), 0);
    cs_builder_free(b);
}

static void test_grid(void **state) {
    (void)state;
    /* distinct timestamps 0, 60, 65, 120, 180, 300: differences 60, 5, 55, 60, 120, median 60;
     * 65 s is step 1, 300 s step 5 */
    const char *mem = "container_ip,value,timestamp_anon\na,10,0\nb,20,0\na,30,60\n";
    const char *duty = "value,timestamp_anon,container_ip\n"
                       "10,0,a\n40,60,a\n30,65,a\n50,120,b\n20,180,a\n5,300,b\n";
    struct cs_series s;
    build(mem, duty, CS_FILL_LAST, &s);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.keys[0], "a");
    assert_true(s.step_s == 60.0);
    assert_int_equal(s.steps, 6);
    assert_int_equal(s.mem_peak[0], 30);
    assert_int_equal(s.mem_peak[1], 20);
    /* a: 40 and 30 share step 1 (the larger kept); steps 2, 4, 5 without a sample: its last value */
    const uint16_t a[] = { 1000, 4000, 4000, 2000, 2000, 2000 };
    assert_memory_equal(s.duty, a, sizeof a);
    /* b: first sample at step 2: steps 0-1 take its first value */
    const uint16_t b[] = { 5000, 5000, 5000, 5000, 5000, 500 };
    assert_memory_equal(s.duty + 6, b, sizeof b);
    assert_int_equal(s.merged, 1);
    assert_int_equal(s.filled[0], 3);
    assert_int_equal(s.filled[1], 4);
    assert_int_equal(s.duty_peak[1], 5000);
    cs_series_free(&s);
    build(mem, duty, CS_FILL_PEAK, &s);
    const uint16_t ap[] = { 1000, 4000, 4000, 2000, 4000, 4000 };
    assert_memory_equal(s.duty, ap, sizeof ap);
    assert_memory_equal(s.duty + 6, b, sizeof b);
    cs_series_free(&s);
}

static void test_csv_errors(void **state) {
    (void)state;
    static const struct {
        const char *text, *error;
    } cases[] = {
        { "", "m.csv: empty file (no header)" },
        { "value,container_ip\n", "m.csv:1: the header has no column timestamp_anon" },
        { "value,timestamp_anon,container_ip\n1,2\n", "m.csv:2: 2 fields, the header has 3" },
        { "value,timestamp_anon,container_ip\n1,1e400,a\n", "m.csv:2: timestamp inf is not a time" },
        { "value,timestamp_anon,container_ip\n0x10,1,a\n", "m.csv:2: value '0x10' is not a number" },
        { "value,timestamp_anon,container_ip\n\"1\",1,a\n", "m.csv:2: quoted fields are not supported" },
        { "value,timestamp_anon,container_ip\n1,1,a\n\n2,2,a\n", "m.csv:3: an empty line" },
        { "value,timestamp_anon,container_ip\n-0.5,1,a\n", "m.csv:2: pod a: memory value -0.5 is negative" },
        { "value,value,timestamp_anon,container_ip\n", "m.csv:1: column value appears twice" },
        { "\xEF\xBB\xBFvalue,timestamp_anon,container_ip\n1,1,a\n1,1,a\n",
          "m.csv:3: pod a: duplicate memory sample at timestamp 1" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cs_builder *b;
        char err[256] = "";
        assert_int_equal(cs_builder_new(&b), 0);
        assert_int_equal(cs_csv_feed(b, CS_MEMORY, "m.csv", cases[i].text, strlen(cases[i].text), err, sizeof err),
                         -EINVAL);
        if (!strstr(err, cases[i].error))
            fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].error);
        cs_builder_free(b);
    }
}

/* Six pods of memory 50 on GPUs of 100: three GPUs at least. Pod p is at 60 % at steps p % 3 and
 * 3 + p % 3, else 10 %: pods p and p + 3 collide (120 %), any other two do not (70 %). */
static void test_pack_and_bounds(void **state) {
    (void)state;
    enum { N = 6, T = 6 };
    uint64_t mem[N];
    uint16_t duty[N * T];
    for (int p = 0; p < N; p++) {
        mem[p] = 50;
        for (int t = 0; t < T; t++)
            duty[p * T + t] = (t == p % 3 || t == 3 + p % 3) ? 6000 : 1000;
    }
    struct cs_problem pb = { .n = N, .steps = T, .mem = mem, .duty = duty, .capacity = 100, .budget = 10000 };
    struct cs_bounds bd;
    assert_int_equal(cs_bounds(&pb, &bd), 0);
    assert_int_equal(bd.memory, 3);
    /* step 0: pods 0 and 3 at 60 %, four at 10 %: 160 %: 2 GPUs */
    assert_int_equal(bd.duty, 2);
    assert_int_equal(bd.bound, 3);
    uint32_t g[N];
    struct cs_pack_stats st;
    struct cs_pack_opts o = { .search = true };
    long n = cs_pack(&pb, &o, g, &st, NULL);
    assert_int_equal(n, 3);
    assert_true(st.ffd_gpus >= 3);
    /* no GPU holds two pods that burst at the same step */
    for (int p = 0; p < N; p++)
        for (int q = p + 1; q < N; q++)
            if (g[p] == g[q])
                assert_int_not_equal(p % 3, q % 3);
    /* two steps of six tolerated: pods that collide may share, 3 GPUs by memory still */
    pb.tolerated = 2;
    assert_int_equal(cs_pack(&pb, &o, g, &st, NULL), 3);
    /* a pod over the budget on its own fits nowhere */
    duty[0] = 10000;
    pb.budget = 5000;
    pb.tolerated = 0;
    assert_false(cs_pod_fits_alone(&pb, 0));
}

static void test_resolve(void **state) {
    (void)state;
    char err[512];
    assert_string_equal(cs_resolve_gpu("h200", err, sizeof err)->key, "H200-SXM-141GB");
    assert_string_equal(cs_resolve_gpu("H100-80GB", err, sizeof err)->key, "H100-SXM5-80GB");
    assert_string_equal(cs_resolve_gpu("H100", err, sizeof err)->key, "H100-SXM5-80GB");
    assert_string_equal(cs_resolve_gpu("A100-80GB", err, sizeof err)->key, "A100-SXM4-80GB");
    assert_string_equal(cs_resolve_gpu("H100-NVL", err, sizeof err)->key, "H100-NVL");
    assert_null(cs_resolve_gpu("A100", err, sizeof err));
    assert_non_null(strstr(err, "names several GPU models: A100-SXM4-40GB, A100-SXM4-80GB"));
    assert_null(cs_resolve_gpu("H100--80GB", err, sizeof err));
    assert_null(cs_resolve_gpu("V100", err, sizeof err));
    assert_non_null(strstr(err, "'V100' is not in the catalogue"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_csv_errors),
        cmocka_unit_test(test_pack_and_bounds),
        cmocka_unit_test(test_resolve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
