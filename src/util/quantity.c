/* quantity.c: Kubernetes' quantity text (see quantity.h). Pure. */
#include "util/quantity.h"

#include <errno.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *text;
    int exp; /* decimal: 10^exp; binary: 2^exp */
    bool binary;
} suffixes[] = {
    { "", 0, false },   { "n", -9, false }, { "u", -6, false }, { "m", -3, false }, { "k", 3, false },
    { "M", 6, false },  { "G", 9, false },  { "T", 12, false }, { "P", 15, false }, { "E", 18, false },
    { "Ki", 10, true }, { "Mi", 20, true }, { "Gi", 30, true }, { "Ti", 40, true }, { "Pi", 50, true },
    { "Ei", 60, true },
};

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* The suffix p[0..n) (a table entry or e/E with a signed integer): its decimal and binary
 * exponents. false for anything else. */
static bool suffix_of(const char *p, size_t n, int *dexp, int *bexp) {
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        if (strlen(suffixes[i].text) == n && !memcmp(p, suffixes[i].text, n)) {
            *dexp = suffixes[i].binary ? 0 : suffixes[i].exp;
            *bexp = suffixes[i].binary ? suffixes[i].exp : 0;
            return true;
        }
    }
    if (n < 2 || (p[0] != 'e' && p[0] != 'E'))
        return false;
    size_t i = 1;
    bool neg = false;
    if (p[i] == '+' || p[i] == '-')
        neg = p[i++] == '-';
    if (i == n)
        return false;
    long e = 0;
    for (; i < n; i++) {
        if (!is_digit(p[i]))
            return false;
        if ((e = e * 10 + (p[i] - '0')) > INT32_MAX)
            return false; /* Kubernetes refuses it or wraps it to 32 bits: no value it would agree on */
    }
    *dexp = (int)(neg ? -e : e);
    *bexp = 0;
    return true;
}

int gs_quantity_parse(const char *s, int scale, unsigned flags, int64_t *out) {
    if (!s || scale < -9 || scale > 9)
        return -EINVAL;
    size_t n = strnlen(s, GS_QUANTITY_MAX + 1);
    if (n > GS_QUANTITY_MAX)
        return -EINVAL;
    if ((flags & GS_QTY_BYTES) && n > 1 && s[n - 1] == 'B')
        n--;
    if (n == 0)
        return -EINVAL;
    const char *p = s, *end = s + n;
    bool neg = false;
    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    /* the significant digits (leading zeros dropped), most significant first */
    char dig[GS_QUANTITY_MAX];
    size_t nd = 0;
    int frac = 0;
    for (; p < end && is_digit(*p); p++)
        if (nd || *p != '0')
            dig[nd++] = *p;
    if (p < end && *p == '.') {
        for (p++; p < end && is_digit(*p); p++, frac++)
            if (nd || *p != '0')
                dig[nd++] = *p;
    }
    int dexp, bexp;
    if (!suffix_of(p, (size_t)(end - p), &dexp, &bexp))
        return -EINVAL;
    if (nd == 0) {
        *out = 0;
        return 0;
    }
    /* the digits times 2^bexp, in decimal, least significant first (64 digits times 2^60 < 10^83) */
    unsigned char m[GS_QUANTITY_MAX + 24];
    size_t nm = nd;
    for (size_t i = 0; i < nd; i++)
        m[i] = (unsigned char)(dig[nd - 1 - i] - '0');
    for (int b = 0; b < bexp; b++) {
        unsigned carry = 0;
        for (size_t i = 0; i < nm; i++) {
            unsigned d = m[i] * 2u + carry;
            m[i] = (unsigned char)(d % 10);
            carry = d / 10;
        }
        if (carry)
            m[nm++] = (unsigned char)carry;
    }
    /* value = m * 10^e units of 10^scale */
    long e = (long)dexp - frac - scale;
    size_t drop = e < 0 ? (size_t)(-e < (long)nm ? -e : (long)nm) : 0;
    bool inexact = false;
    for (size_t i = 0; i < drop; i++)
        inexact |= m[i] != 0;
    if (e < 0 && -e > (long)nm)
        inexact = true; /* every digit is below one unit, and m is not 0 */
    size_t whole = nm - drop; /* digits of the integer part */
    if (e > 0 && (long)whole + e > 19)
        return -ERANGE;
    if (whole > 19)
        return -ERANGE;
    unsigned long long u = 0;
    for (size_t i = nm; i > drop; i--)
        u = u * 10 + m[i - 1]; /* at most 19 digits: no overflow */
    for (long i = 0; i < e; i++)
        if (__builtin_mul_overflow(u, 10ULL, &u))
            return -ERANGE;
    if (inexact) {
        if (flags & GS_QTY_EXACT)
            return -EDOM;
        u++; /* away from zero */
    }
    if (u > (unsigned long long)INT64_MAX)
        return -ERANGE;
    *out = neg ? -(int64_t)u : (int64_t)u;
    return 0;
}

int gs_quantity_bytes(const char *s, unsigned long long min, unsigned long long max, unsigned long long *out) {
    int64_t v;
    int r = gs_quantity_parse(s, 0, GS_QTY_EXACT | GS_QTY_BYTES, &v);
    if (r < 0)
        return r;
    if (v < 0 || (unsigned long long)v < min || (unsigned long long)v > max)
        return -ERANGE;
    *out = (unsigned long long)v;
    return 0;
}

int gs_quantity_format(int64_t v, int scale, unsigned flags, char *buf, size_t len) {
    static const char *const bin[] = { "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei" };
    static const char *const dec[] = { "n", "u", "m", "", "k", "M", "G", "T", "P", "E" }; /* 10^-9 .. 10^18 */
    if (scale < -9 || scale > 9 || scale % 3 != 0)
        return -EINVAL;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    const char *sign = v < 0 ? "-" : "", *sfx = "";
    if (u == 0) {
        sign = "";
    } else if ((flags & GS_QTY_BINARY) && scale == 0 && u % 1024 == 0) {
        unsigned k = 0;
        while (k + 1 < sizeof(bin) / sizeof(bin[0]) && u % 1024 == 0) {
            u /= 1024;
            k++;
        }
        sfx = bin[k];
    } else {
        int tz = 0;
        for (unsigned long long x = u; x % 10 == 0; x /= 10)
            tz++;
        int e = scale + tz, s = e >= 0 ? e / 3 * 3 : -((-e + 2) / 3 * 3);
        if (s > 18)
            s = 18;
        for (int i = scale; i < s; i++)
            u /= 10;
        sfx = dec[(s + 9) / 3];
    }
    int w = snprintf(buf, len, "%s%llu%s", sign, u, sfx);
    return w < 0 || (size_t)w >= len ? -ENOSPC : w;
}
