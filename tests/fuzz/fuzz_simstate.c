/* fuzz_simstate.c: libFuzzer target for the simulated node's state file (anyone can edit it):
 * parsing must never crash, and a state it accepts must serialise and parse back identically. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../sim/sim_state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    struct sim_state *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    if (!text || !a || !b)
        goto out;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[512];
    if (sim_state_from_json("state.json", text, a, err, sizeof(err)) == 0) {
        char *again = sim_state_to_json(a);
        if (!again || sim_state_from_json("again", again, b, err, sizeof(err)) < 0)
            __builtin_trap();
        char *third = sim_state_to_json(b);
        if (!third || strcmp(again, third) != 0)
            __builtin_trap();
        free(again);
        free(third);
    }
out:
    free(text);
    free(a);
    free(b);
    return 0;
}
