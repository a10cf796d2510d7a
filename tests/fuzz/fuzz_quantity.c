/* fuzz_quantity.c: Kubernetes' quantity text (util/quantity.h), the one reader of every quantity
 * gpuslice takes. The input is the text. Checked, besides no undefined behaviour: only the
 * documented errors; nothing longer than GS_QUANTITY_MAX read; a value parsed, formatted and
 * parsed again is the same (decimal and binary suffixes); GS_QTY_EXACT agrees with the rounded
 * value where it is whole and refuses only what is not; the scales agree (the value in units is
 * the value in thousandths rounded away from zero, and so on down to nano); a sign negates; one
 * trailing B under GS_QTY_BYTES changes nothing. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/quantity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const int scales[] = { -9, -3, 0 };
#define N_SCALES 3

/* a / 1000, rounded away from zero */
static int64_t away_div1000(int64_t a) {
    int64_t q = a / 1000;
    return a % 1000 ? q + (a < 0 ? -1 : 1) : q;
}

static void check_roundtrip(int64_t v, int scale, unsigned fmt) {
    char buf[40];
    int n = gs_quantity_format(v, scale, fmt, buf, sizeof(buf));
    if (n < 0 || (size_t)n != strlen(buf))
        __builtin_trap();
    int64_t back;
    if (gs_quantity_parse(buf, scale, GS_QTY_EXACT, &back) != 0 || back != v)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 256)
        return 0;
    char s[260];
    memcpy(s, data, size);
    s[size] = '\0';
    size_t len = strlen(s);
    int r[N_SCALES];
    int64_t v[N_SCALES];
    for (int k = 0; k < N_SCALES; k++) {
        int64_t x = 0x5a5a, e = 0x5a5a;
        r[k] = gs_quantity_parse(s, scales[k], 0, &x);
        int re = gs_quantity_parse(s, scales[k], GS_QTY_EXACT, &e);
        if (r[k] != 0 && r[k] != -EINVAL && r[k] != -ERANGE)
            __builtin_trap();
        if (len > GS_QUANTITY_MAX && r[k] != -EINVAL)
            __builtin_trap();
        if (r[k] != 0 && x != 0x5a5a)
            __builtin_trap(); /* written on failure */
        /* exact: the same where whole, -EDOM where not, the same syntax errors */
        if (re == 0 && (r[k] != 0 || e != x))
            __builtin_trap();
        if (re == -EDOM && r[k] == -EINVAL)
            __builtin_trap();
        if (re != 0 && re != -EDOM && re != r[k])
            __builtin_trap();
        if (r[k] == 0 && re == -EINVAL)
            __builtin_trap();
        v[k] = x;
        if (r[k] == 0) {
            check_roundtrip(x, scales[k], 0);
            if (scales[k] == 0)
                check_roundtrip(x, 0, GS_QTY_BINARY);
        }
    }
    /* coarser scales: the finer value rounded away from zero; a finer value that fits, a coarser fits */
    for (int k = 0; k + 1 < N_SCALES; k++) {
        if (r[k] == 0 && r[k + 1] != 0)
            __builtin_trap();
        if (r[k] == 0 && r[k + 1] == 0) {
            int64_t want = v[k];
            for (int step = scales[k]; step < scales[k + 1]; step += 3)
                want = away_div1000(want);
            if (want != v[k + 1])
                __builtin_trap();
        }
        if (r[k] == -EINVAL && r[k + 1] != -EINVAL)
            __builtin_trap(); /* syntax does not depend on the scale */
    }
    /* a sign negates (a text without one, short enough for one more character) */
    if (len > 0 && len < GS_QUANTITY_MAX && s[0] != '-' && s[0] != '+') {
        char neg[GS_QUANTITY_MAX + 2];
        snprintf(neg, sizeof(neg), "-%s", s);
        int64_t x;
        int rn = gs_quantity_parse(neg, 0, 0, &x);
        if (rn != r[N_SCALES - 1] || (rn == 0 && x != -v[N_SCALES - 1]))
            __builtin_trap();
        snprintf(neg, sizeof(neg), "+%s", s);
        rn = gs_quantity_parse(neg, 0, 0, &x);
        if (rn != r[N_SCALES - 1] || (rn == 0 && x != v[N_SCALES - 1]))
            __builtin_trap();
    }
    /* one B after a quantity under GS_QTY_BYTES: the quantity's value */
    if (len > 0 && len < GS_QUANTITY_MAX && s[len - 1] != 'B') {
        char b[GS_QUANTITY_MAX + 2];
        snprintf(b, sizeof(b), "%sB", s);
        int64_t x, y;
        int rb = gs_quantity_parse(b, 0, GS_QTY_BYTES, &x), rp = gs_quantity_parse(s, 0, GS_QTY_BYTES, &y);
        if (rb != r[N_SCALES - 1] || rp != r[N_SCALES - 1] || (rb == 0 && (x != v[N_SCALES - 1] || y != x)))
            __builtin_trap();
    }
    return 0;
}
