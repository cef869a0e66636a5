/* Sampling from the model: temperature and top-k (Fan et al. 2018) over the last position's
 * logits, one token at a time with a sliding window of the training sequence length. Every rank
 * runs it in lockstep with the same RNG (so plugins that communicate in forward keep working);
 * rank 0 prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/device_open.h"
#include "trainer.h"
#include "../data/text_sink.h"

/* Draw a token from logits (V) with temperature and top-k (0 = all). probs is scratch (V). */
static int sample_token(float *logits, float *probs, int V, double temperature, int top_k,
                        loom_rng *rng) {
  float cutoff = -INFINITY;
  if (top_k > 0 && top_k < V) {
    /* the k-th largest logit: partial selection by copying and nth-element scanning */
    memcpy(probs, logits, (size_t)V * sizeof(float));
    for (int i = 0; i < top_k; i++) {
      int best = i;
      for (int j = i + 1; j < V; j++)
        if (probs[j] > probs[best]) best = j;
      float t = probs[i];
      probs[i] = probs[best];
      probs[best] = t;
    }
    cutoff = probs[top_k - 1];
  }
  float maxv = -INFINITY;
  for (int i = 0; i < V; i++)
    if (logits[i] > maxv) maxv = logits[i];
  double sum = 0.0;
  for (int i = 0; i < V; i++) {
    double p = logits[i] >= cutoff ? exp((logits[i] - maxv) / temperature) : 0.0;
    probs[i] = (float)p;
    sum += p;
  }
  double r = loom__rng_uniform(rng) * sum, acc = 0.0;
  for (int i = 0; i < V; i++) {
    acc += probs[i];
    if (r < acc) return i;
  }
  for (int i = V - 1; i >= 0; i--)
    if (probs[i] > 0) return i;
  return 0;
}

/* Show one token: its bytes join the text so far (a character split between two BPE tokens
 * prints once complete); an id without bytes (a padded vocabulary's extra rows) shows as "?". */
static void put_token(loom_text_sink *sink, const loom_tokenizer *tok, int32_t id) {
  size_t n;
  const unsigned char *b = loom_tokenizer_token_bytes(tok, id, &n);
  if (b) loom_text_sink_put(sink, b, n);
  else loom_text_sink_put(sink, (const unsigned char *)"?", 1);
}

int loom_trainer_sample(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  const loom_config *c = &tr->cfg;
  int T = tr->T, V = c->model.vocab_size, n = c->sample.tokens;
  if (n <= 0) return 0;
  int cap = (int)strlen(c->sample.prompt) + n + 1;
  int32_t *toks = calloc((size_t)cap, sizeof *toks);
  int32_t *window = calloc((size_t)T, sizeof *window);
  float *logits = malloc((size_t)V * sizeof *logits), *probs = malloc((size_t)V * sizeof *probs);
  if (!toks || !window || !logits || !probs) {
    free(toks); free(window); free(logits); free(probs);
    snprintf(tr->err, sizeof tr->err, "out of host memory (sampling)");
    return -1;
  }
  size_t plen = loom_tokenizer_encode(&tr->tok, c->sample.prompt, strlen(c->sample.prompt),
                                      toks, (size_t)cap);
  if (plen > (size_t)cap) { /* only when out of memory: a prompt never needs more than a byte */
    free(toks); free(window); free(logits); free(probs);
    snprintf(tr->err, sizeof tr->err, "out of host memory (encoding the sample prompt)");
    return -1;
  }
  int len = (int)plen;
  if (len <= 0) { /* empty prompt: start from <|endoftext|> (GPT-2), else a newline */
    toks[0] = tr->tok.eot_token >= 0 ? tr->tok.eot_token : '\n' < V ? '\n' : 0;
    len = 1;
  }
  int rank0 = rt->mesh.world_rank == 0;
  loom_text_sink sink;
  loom_text_sink_init(&sink, stdout);
  if (rank0) {
    printf("loom: sample (%d tokens, temperature %.2f, top-k %d):\n", n, c->sample.temperature,
           c->sample.top_k);
    for (int i = 0; i < len; i++) put_token(&sink, &tr->tok, toks[i]);
  }
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    int start = len > T ? len - T : 0, w = len - start;
    memset(window, 0, (size_t)T * sizeof *window);
    memcpy(window, toks + start, (size_t)w * sizeof *window);
    /* causal: position w-1 sees only the w real tokens, the zero padding after it is ignored */
    if (loom__model_forward(tr, window, NULL, 1, T, NULL) != 0) {
      rc = -1;
      break;
    }
    /* the logits live on the last pipeline stage: every rank samples from the same row */
    if (rt->tp_vocab && rt->mesh.tp > 1) { /* each tp rank holds a slice: gather the row */
      gpt_hooks hooks = loom__forward_hooks(tr);
      if (gpt_logits_row_gather(&rt->model, w - 1, logits, &hooks) != LOOM_OK) {
        rc = -1;
        break;
      }
    } else if (rt->mesh.pp_rank == rt->mesh.pp - 1) {
      gpt_logits_row(&rt->model, w - 1, logits);
    }
    if (rt->mesh.pp > 1 &&
        loom__ctl_broadcast(rt, rt->mesh.axis[LOOM_AXIS_PP], logits,
                                         (size_t)V, LOOM_F32, rt->mesh.pp - 1) != LOOM_OK) {
      rc = -1;
      break;
    }
    int next = sample_token(logits, probs, V, c->sample.temperature, c->sample.top_k,
                            &tr->sample_rng);
    toks[len++] = next;
    loom_watchdog_beat(&tr->watchdog, tr->step);
    if (rank0) {
      put_token(&sink, &tr->tok, next);
      fflush(stdout);
    }
  }
  if (rank0) {
    loom_text_sink_flush(&sink);
    printf("\n");
  }
  free(toks); free(window); free(logits); free(probs);
  if (rc != LOOM_OK && !tr->err[0]) snprintf(tr->err, sizeof tr->err, "sampling forward failed (%d)", rc);
  return rc == LOOM_OK ? 0 : -1;
}
