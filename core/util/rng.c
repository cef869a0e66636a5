#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void loom__rng_seed(loom_rng *rng, uint64_t seed) {
  for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

int loom__rng_valid(const loom_rng *rng) {
  return (rng->s[0] | rng->s[1] | rng->s[2] | rng->s[3]) != 0;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t loom__rng_u64(loom_rng *rng) {
  uint64_t *s = rng->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

float loom__rng_uniform(loom_rng *rng) { return (float)(loom__rng_u64(rng) >> 40) / 16777216.0f; }

float loom__rng_normal(loom_rng *rng) {
  /* u1 in (0,1] so log() is finite */
  double u1 = ((double)(loom__rng_u64(rng) >> 11) + 1.0) / 9007199254740992.0;
  double u2 = (double)(loom__rng_u64(rng) >> 11) / 9007199254740992.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}
