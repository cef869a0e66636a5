/* The device conformance suite's reference: every GPT kernel of device_v1.h written again from
 * its definition, in double precision, as plain loops. It shares no code with the CPU device
 * (core/device/), so the CPU device checked against it proves something; at the suite's sizes
 * float64 is exact enough (its error, ~sqrt(n) 2^-53, is 2^-29 times the fp32 bounds) that the
 * whole difference measured is the device's fp32 rounding. Inputs are the fp32 values the
 * device got; outputs are double. */
#include "device_reference.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

void ref_encoder_forward(double *out, const int32_t *inp, const float *wte, const float *wpe,
                         int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      size_t bt = (size_t)b * T + t;
      for (int c = 0; c < C; c++)
        out[bt * C + c] = (double)wte[(size_t)inp[bt] * C + c] + (double)wpe[(size_t)t * C + c];
    }
}

void ref_encoder_backward(double *dwte, double *dwpe, const float *dout, const int32_t *inp,
                          int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      size_t bt = (size_t)b * T + t;
      for (int c = 0; c < C; c++) {
        dwte[(size_t)inp[bt] * C + c] += dout[bt * C + c];
        dwpe[(size_t)t * C + c] += dout[bt * C + c];
      }
    }
}

void ref_layernorm_stats(double *mean, double *rstd, const float *inp, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    for (int c = 0; c < C; c++) v += ((double)x[c] - m) * ((double)x[c] - m);
    v /= C;
    mean[n] = m;
    rstd[n] = 1.0 / sqrt(v + 1e-5);
  }
}

void ref_layernorm_forward(double *out, const float *inp, const float *weight, const float *bias,
                           int N, int C) {
  for (int n = 0; n < N; n++) {
    double m, r;
    ref_layernorm_stats(&m, &r, inp + (size_t)n * C, 1, C);
    for (int c = 0; c < C; c++)
      out[(size_t)n * C + c] =
          ((double)inp[(size_t)n * C + c] - m) * r * weight[c] + (double)bias[c];
  }
}

void ref_layernorm_backward(double *dinp, double *dweight, double *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    double m = mean[n], r = rstd[n], dn_mean = 0, dn_norm_mean = 0;
    for (int c = 0; c < C; c++) {
      double norm = ((double)x[c] - m) * r, dn = (double)weight[c] * dy[c];
      dn_mean += dn;
      dn_norm_mean += dn * norm;
    }
    dn_mean /= C;
    dn_norm_mean /= C;
    for (int c = 0; c < C; c++) {
      double norm = ((double)x[c] - m) * r, dn = (double)weight[c] * dy[c];
      dbias[c] += dy[c];
      dweight[c] += norm * dy[c];
      dinp[(size_t)n * C + c] += (dn - dn_mean - norm * dn_norm_mean) * r;
    }
  }
}

void ref_matmul_forward(double *out, const float *inp, const float *weight, const float *bias,
                        int N, int C, int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = bias ? (double)bias[o] : 0.0;
      const float *x = inp + (size_t)n * C, *w = weight + (size_t)o * C;
      for (int c = 0; c < C; c++) s += (double)x[c] * w[c];
      out[(size_t)n * OC + o] = s;
    }
}

void ref_matmul_backward(double *dinp, double *dweight, double *dbias, const float *dout,
                         const float *inp, const float *weight, int N, int C, int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double d = dout[(size_t)n * OC + o];
      if (dbias) dbias[o] += d;
      for (int c = 0; c < C; c++) {
        if (dinp) dinp[(size_t)n * C + c] += d * weight[(size_t)o * C + c];
        dweight[(size_t)o * C + c] += d * inp[(size_t)n * C + c];
      }
    }
}

/* q, k, v of head h at (b, t): channel i of each third of the qkv row */
#define QKV(b, t, part, h, i) \
  ((double)qkv[((size_t)(b) * T + (t)) * 3 * C + (size_t)(part) * C + (size_t)(h) * HS + (i)])

void ref_attention_forward(double *out, double *att, const float *qkv, int B, int T, int NH,
                           int HS) {
  const int C = NH * HS;
  const double scale = 1.0 / sqrt((double)HS);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        double *a = att + (((size_t)b * NH + h) * T + t) * T, mx = -INFINITY, sum = 0;
        for (int t2 = 0; t2 < T; t2++) {
          if (t2 > t) {
            a[t2] = 0;
            continue;
          }
          double s = 0;
          for (int i = 0; i < HS; i++) s += QKV(b, t, 0, h, i) * QKV(b, t2, 1, h, i);
          a[t2] = s * scale;
          if (a[t2] > mx) mx = a[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) sum += (a[t2] = exp(a[t2] - mx));
        for (int t2 = 0; t2 <= t; t2++) a[t2] /= sum;
        for (int i = 0; i < HS; i++) {
          double o = 0;
          for (int t2 = 0; t2 <= t; t2++) o += a[t2] * QKV(b, t2, 2, h, i);
          out[((size_t)b * T + t) * C + (size_t)h * HS + i] = o;
        }
      }
}

void ref_attention_backward(double *dqkv, const float *dout, const float *qkv, const float *att,
                            int B, int T, int NH, int HS) {
  const int C = NH * HS;
  const double scale = 1.0 / sqrt((double)HS);
  double datt[T > 0 ? T : 1], dpre[T > 0 ? T : 1];
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float *a = att + (((size_t)b * NH + h) * T + t) * T;
        const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * HS;
        for (int t2 = 0; t2 <= t; t2++) {
          double s = 0;
          for (int i = 0; i < HS; i++) {
            s += (double)dy[i] * QKV(b, t2, 2, h, i);
            dqkv[((size_t)b * T + t2) * 3 * C + 2 * (size_t)C + (size_t)h * HS + i] +=
                (double)a[t2] * dy[i];
          }
          datt[t2] = s;
        }
        double dot = 0;
        for (int t2 = 0; t2 <= t; t2++) dot += (double)a[t2] * datt[t2];
        for (int t2 = 0; t2 <= t; t2++) dpre[t2] = (double)a[t2] * (datt[t2] - dot);
        for (int t2 = 0; t2 <= t; t2++)
          for (int i = 0; i < HS; i++) {
            dqkv[((size_t)b * T + t) * 3 * C + (size_t)h * HS + i] +=
                dpre[t2] * QKV(b, t2, 1, h, i) * scale;
            dqkv[((size_t)b * T + t2) * 3 * C + (size_t)C + (size_t)h * HS + i] +=
                dpre[t2] * QKV(b, t, 0, h, i) * scale;
          }
      }
}

void ref_attention_lse(double *lse, const float *qkv, int B, int T, int NH, int HS) {
  const int C = NH * HS;
  const double scale = 1.0 / sqrt((double)HS);
  double sc[T > 0 ? T : 1];
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        double mx = -INFINITY, sum = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          double s = 0;
          for (int i = 0; i < HS; i++) s += QKV(b, t, 0, h, i) * QKV(b, t2, 1, h, i);
          sc[t2] = s * scale;
          if (sc[t2] > mx) mx = sc[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) sum += exp(sc[t2] - mx);
        lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
      }
}

void ref_attention_backward_lse(double *dqkv, const float *dout, const float *qkv,
                                const float *out, int B, int T, int NH, int HS) {
  const int C = NH * HS;
  const double scale = 1.0 / sqrt((double)HS);
  double p[T > 0 ? T : 1];
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const size_t o = ((size_t)b * T + t) * C + (size_t)h * HS;
        double mx = -INFINITY, sum = 0, D = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          double s = 0;
          for (int i = 0; i < HS; i++) s += QKV(b, t, 0, h, i) * QKV(b, t2, 1, h, i);
          p[t2] = s * scale;
          if (p[t2] > mx) mx = p[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) sum += (p[t2] = exp(p[t2] - mx));
        for (int i = 0; i < HS; i++) D += (double)dout[o + i] * out[o + i];
        for (int t2 = 0; t2 <= t; t2++) {
          const double pt = p[t2] / sum;
          double dp = 0;
          for (int i = 0; i < HS; i++) {
            dp += (double)dout[o + i] * QKV(b, t2, 2, h, i);
            dqkv[((size_t)b * T + t2) * 3 * C + 2 * (size_t)C + (size_t)h * HS + i] +=
                pt * dout[o + i];
          }
          const double ds = pt * (dp - D) * scale;
          for (int i = 0; i < HS; i++) {
            dqkv[((size_t)b * T + t) * 3 * C + (size_t)h * HS + i] += ds * QKV(b, t2, 1, h, i);
            dqkv[((size_t)b * T + t2) * 3 * C + (size_t)C + (size_t)h * HS + i] +=
                ds * QKV(b, t, 0, h, i);
          }
        }
      }
}
#undef QKV

#define GELU_S 0.7978845608028654 /* sqrt(2/pi) */
void ref_gelu_forward(double *out, const float *inp, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double x = inp[i];
    out[i] = 0.5 * x * (1.0 + tanh(GELU_S * (x + 0.044715 * x * x * x)));
  }
}

void ref_gelu_backward(double *dinp, const float *inp, const float *dout, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double x = inp[i], u = GELU_S * (x + 0.044715 * x * x * x), th = tanh(u);
    double local = 0.5 * (1.0 + th) +
                   0.5 * x * (1.0 - th * th) * GELU_S * (1.0 + 3.0 * 0.044715 * x * x);
    dinp[i] += local * dout[i];
  }
}

void ref_crossentropy_forward(double *losses, double *probs, const float *logits,
                              const int32_t *targets, int N, int V) {
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * V;
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    for (int v = 0; v < V; v++) sum += exp((double)l[v] - mx);
    for (int v = 0; v < V; v++) probs[(size_t)n * V + v] = exp((double)l[v] - mx) / sum;
    losses[n] = targets[n] < 0 ? 0.0 : log(sum) - ((double)l[targets[n]] - mx);
  }
}

void ref_crossentropy_backward(double *dlogits, const float *probs, const int32_t *targets,
                               float dloss, int N, int V) {
  for (int n = 0; n < N; n++)
    for (int v = 0; v < V; v++)
      dlogits[(size_t)n * V + v] =
          targets[n] < 0 ? 0.0
                         : ((double)probs[(size_t)n * V + v] - (v == targets[n])) * dloss;
}

void ref_adamw(double *param, double *m, double *v, const float *grad, size_t n, float lr,
               float beta1, float beta2, float eps, float wd, float grad_scale, int t) {
  double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
  for (size_t i = 0; i < n; i++) {
    double g = (double)grad[i] * grad_scale;
    m[i] = beta1 * m[i] + (1.0 - beta1) * g;
    v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
    param[i] -= lr * ((m[i] / bc1) / (sqrt(v[i] / bc2) + eps) + wd * param[i]);
  }
}

/* Round x to `bits` significant bits, nearest, ties to even (rint in the default rounding
 * mode), with the format's smallest quantum `min_exp` (its subnormal step). */
static double round_bits(double x, int bits, int min_exp) {
  if (x == 0 || !isfinite(x)) return x;
  int e;
  frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  int q = e - bits < min_exp ? min_exp : e - bits;
  return ldexp(rint(ldexp(x, -q)), q);
}

float ref_round(float x, loom_dtype dt) {
  if (isnan(x)) return x;
  if (dt == LOOM_BF16) return (float)round_bits(x, 8, -133); /* overflow: inf via the cast */
  if (dt == LOOM_F16) {
    double r = round_bits(x, 11, -24);
    return fabs(r) > 65504.0 ? (float)copysign(INFINITY, r) : (float)r;
  }
  return x;
}
