/* Deterministic random numbers: xoshiro256** seeded by splitmix64 (Blackman & Vigna 2018).
 * The state is a plain struct so checkpoints save and restore it exactly. */
#ifndef LOOM_CORE_RNG_H
#define LOOM_CORE_RNG_H

#include <stdint.h>

typedef struct loom_rng { uint64_t s[4]; } loom_rng;

/* Seed from a 64-bit value (any value, 0 included). */
void loom__rng_seed(loom_rng *rng, uint64_t seed);
/* 1 if `rng` can be a xoshiro256** state, 0 if not: the all-zero state is the generator's one
 * fixed point (it yields zeros forever) and no seed produces it, so a restored all-zero state
 * means corrupt input. */
int loom__rng_valid(const loom_rng *rng);
/* Next 64 random bits. */
uint64_t loom__rng_u64(loom_rng *rng);
/* Uniform in [0, 1) with 24 bits of precision. */
float loom__rng_uniform(loom_rng *rng);
/* Standard normal N(0,1) by Box-Muller (one draw per call; deterministic). */
float loom__rng_normal(loom_rng *rng);

#endif
