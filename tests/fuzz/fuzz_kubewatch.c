/* fuzz_kubewatch.c: libFuzzer target for the watch stream's framing and event parser
 * (src/kube/kubeapi.c), and the Status error reader. The input is fed as one chunk and again in
 * chunks cut where its first bytes say: the lines delivered must be the same whatever the cuts,
 * never longer than the limit, never hold a '\n'; each parsed event has a type and an object. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kubeapi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LINE 256

struct seen {
    uint64_t hash; /* of every line delivered, in order */
    size_t n;
};

static int on_line(void *ctx, const char *line, size_t len) {
    struct seen *s = ctx;
    if (len == 0 || len > MAX_LINE || memchr(line, '\n', len))
        __builtin_trap();
    for (size_t i = 0; i < len; i++)
        s->hash = (s->hash ^ (unsigned char)line[i]) * 1099511628211ull;
    s->hash = (s->hash ^ 0x100) * 1099511628211ull;
    s->n++;
    enum kube_event_type t;
    json_t *obj;
    char err[256];
    if (kube_event_parse(line, len, &t, &obj, err, sizeof err) == 0) {
        if (!json_is_object(obj) || (unsigned)t > KUBE_ERROR)
            __builtin_trap();
        (void)kube_meta(obj, "resourceVersion");
        json_decref(obj);
    } else if (obj || !err[0]) {
        __builtin_trap();
    }
    return 0;
}

static int feed(const char *buf, size_t size, size_t step, struct seen *s) {
    struct kube_lines l;
    kube_lines_init(&l, MAX_LINE);
    int r = 0;
    for (size_t off = 0; off < size && r == 0; off += step)
        r = kube_lines_feed(&l, buf + off, size - off < step ? size - off : step, on_line, s);
    kube_lines_free(&l);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    size_t step = (size_t)data[0] % 17 + 1;
    const char *buf = (const char *)data + 1;
    size--;
    struct seen whole = { 0 }, cut = { 0 };
    int a = feed(buf, size, size ? size : 1, &whole);
    int b = feed(buf, size, step, &cut);
    if (a != b || (a != 0 && a != -E2BIG))
        __builtin_trap();
    if (a == 0 && (whole.hash != cut.hash || whole.n != cut.n))
        __builtin_trap();
    char msg[128];
    int e = kube_status_error(400 + (long)(data[0] % 200), buf, size, msg, sizeof msg);
    if (e >= 0 || strlen(msg) >= sizeof msg || strchr(msg, '\n'))
        __builtin_trap();
    return 0;
}
