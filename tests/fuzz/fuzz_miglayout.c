/* fuzz_miglayout.c: libFuzzer target for the MIG layout parser. Beyond what the sanitizers catch
 * it checks the parser's promises: an error is one non-empty line starting with the input name
 * and leaves the output alone, and a success is a layout the MIG manager can apply without
 * checking it again (counts, limits, well-formed profile and config names, lookups that find
 * what was parsed). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config/miglayout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool terminated(const char *s, size_t size) { return memchr(s, '\0', size) != NULL; }

static bool only(const char *s, const char *allowed) { return s[strspn(s, allowed)] == '\0'; }

#define DIGITS "0123456789"
#define LOWER "abcdefghijklmnopqrstuvwxyz"

/* The shape of a valid profile name, checked loosely and differently from the parser: it starts
 * with a digit, has "g." and "gb", and uses only the grammar's characters. */
static bool profile_ok(const char *s, size_t size) {
    if (!terminated(s, size) || !*s || *s < '1' || *s > '8')
        return false;
    if (!strstr(s, "g.") || !strstr(s, "gb") || !only(s, DIGITS LOWER ".+-,"))
        return false;
    const char *plus = strchr(s, '+'), *minus = strchr(s, '-');
    return !(plus && minus) && (!minus || !strchr(minus, ','));
}

static void check_item(const struct gs_layout_config *c, const struct gs_layout_item *it) {
    if (it->line == 0 || it->line < c->line || it->n_filters > GS_LAYOUT_MAX_FILTERS ||
        it->n_counts > GS_LAYOUT_MAX_PROFILES)
        __builtin_trap();
    /* exactly one of all / a non-empty index list */
    if (it->all_devices == (it->device_mask != 0))
        __builtin_trap();
    for (unsigned i = 0; i < it->n_filters; i++)
        for (unsigned j = 0; j < i; j++)
            if (it->filters[i] == it->filters[j])
                __builtin_trap();
    if (!it->mig_enabled && it->n_counts != 0)
        __builtin_trap();
    bool any = false;
    for (unsigned i = 0; i < it->n_counts; i++) {
        const struct gs_layout_count *n = &it->counts[i];
        if (!profile_ok(n->profile, sizeof(n->profile)) || n->count > 7 || n->line < it->line || n->column == 0)
            __builtin_trap();
        any |= n->count > 0;
        for (unsigned j = 0; j < i; j++)
            if (strcmp(it->counts[j].profile, n->profile) == 0)
                __builtin_trap();
    }
    if (it->n_counts > 0 && !any)
        __builtin_trap();

    /* the item matches its own GPUs (unless a later item takes them: the last match wins) */
    unsigned index = it->all_devices ? 0 : (unsigned)__builtin_ctzll(it->device_mask);
    unsigned pci = it->n_filters ? it->filters[0] : 0x12345678;
    const struct gs_layout_item *got = gs_layout_item_for(c, index, pci);
    if (!got || got < it)
        __builtin_trap();
    if (!it->all_devices && index < 63 && !(it->device_mask & (1ULL << 63)) &&
        gs_layout_item_for(c, 63, pci) == it)
        __builtin_trap();
}

static void check(const struct gs_layout_file *f) {
    if (!terminated(f->name, sizeof(f->name)) || strcmp(f->name, "fuzz.yaml") != 0)
        __builtin_trap();
    if (f->n_configs == 0 || f->n_configs > GS_LAYOUT_MAX_CONFIGS)
        __builtin_trap();
    for (unsigned i = 0; i < f->n_configs; i++) {
        const struct gs_layout_config *c = &f->configs[i];
        if (!terminated(c->name, sizeof(c->name)) || !c->name[0] ||
            !only(c->name, DIGITS LOWER "ABCDEFGHIJKLMNOPQRSTUVWXYZ._-"))
            __builtin_trap();
        if (c->line == 0 || c->n_items == 0 || c->n_items > GS_LAYOUT_MAX_ITEMS)
            __builtin_trap();
        /* names are unique, so find() gives this one */
        if (gs_miglayout_find(f, c->name) != c)
            __builtin_trap();
        for (unsigned j = 0; j < c->n_items; j++)
            check_item(c, &c->items[j]);
    }
    if (gs_miglayout_find(f, "") || gs_miglayout_find(f, "not a valid name"))
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* static: the struct is about 800 KiB. f is put back to the pattern only after a success,
     * because filling 800 KiB twice on every input halves the speed. */
    static struct gs_layout_file f, before;
    static bool ready;
    if (!ready) {
        memset(&before, 0x5A, sizeof(before));
        memcpy(&f, &before, sizeof(f));
        ready = true;
    }
    char err[512];
    memset(err, 'x', sizeof(err)); /* so a missing terminator shows up */

    int r = gs_miglayout_parse("fuzz.yaml", (const char *)data, size, &f, err, sizeof(err));
    if (r < 0) {
        if (!memchr(err, '\0', sizeof(err)) || strncmp(err, "fuzz.yaml:", 10) != 0 || strchr(err, '\n'))
            __builtin_trap();
        if (memcmp(&f, &before, sizeof(f)) != 0)
            __builtin_trap();
        return 0;
    }
    check(&f);
    memcpy(&f, &before, sizeof(f));
    return 0;
}
