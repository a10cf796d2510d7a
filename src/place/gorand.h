/* gorand.h: Go's math/rand source and the few methods the FGD paper's simulator uses, bit for bit
 * (Go 1.19/1.20, rngSource with the 63-bit values: every method used here only reads the low 63
 * bits). The replay (replay.c) draws the paper's pod shuffle, resampling and node ranks from it,
 * and the Random policy (place.c) its picks, so that a seed gives the simulator's sequences. Pure. */
#ifndef GS_GORAND_H
#define GS_GORAND_H

#include <stdint.h>

struct pl_gorand {
    int tap, feed;
    int64_t vec[607];
};
/* rand.Seed(seed) */
void pl_gorand_seed(struct pl_gorand *r, int64_t seed);
/* rand.Int63() */
int64_t pl_gorand_int63(struct pl_gorand *r);
/* rand.Intn(n) for 0 < n < 2^31 */
int32_t pl_gorand_intn(struct pl_gorand *r, int32_t n);
/* the lower-case int31n that rand.Shuffle uses (Lemire's method) */
int32_t pl_gorand_int31n_lemire(struct pl_gorand *r, int32_t n);
/* rand.Perm(n) into out[n] */
void pl_gorand_perm(struct pl_gorand *r, int32_t n, int32_t *out);

#endif
