#!/usr/bin/python3
"""PyTorch reference test for loom's bf16 mixed precision: one forward and backward.

Runs `dump_gpt OUT bf16` (loom's model with bf16 weights, activations and activation gradients,
fp32 compute: core/model/gpt.h) and redoes it in torch with the same rounding points: every
weight is rounded to bf16 for use (the fp32 master gets the gradient), every activation loom
stores is rounded to bf16 (torch's float -> bfloat16 conversion, round to nearest even), and so
is the gradient of each of them; the arithmetic between two rounding points is float64 here,
fp32 in loom (the fp32 accumulate of a bf16 GEMM).

Tolerance, derived: with the same rounding points the only difference is the arithmetic between
them (fp32 vs float64, ~2^-24 relative), which moves a value across a bf16 rounding boundary with
probability ~2^-24/2^-9 = 2^-15 per element; such a flip changes that element by one bf16 unit
(2^-8 relative) and spreads from there, mostly averaged out in the gradient sums. So per tensor
max|loom - ref| / max|ref| <= 2^-10 (a quarter of a bf16 unit of the largest element), and each
tensor must be at least 4x closer to this reference than to the unrounded float64 model, which
differs by the bf16 rounding itself (~2^-9 per store): the test fails if loom rounds at other
points than these. Parameter gradients are stored in bf16 (16-bit storage: each rounded once
from its unit's fp32 accumulator; the tied wte's head and embedding parts summed first), so they
are compared to the reference's unrounded gradient beyond that final rounding's half unit
(grad_err), and every one of them must be a bf16 value. Measured (this file's config): logits
bitwise equal, worst gradient 4.0e-6 (h.0.attn.qkv.bias), against 1.6e-3 .. 1.1e-2 from the
float64 model. (Compared plainly
with the reference's gradients rounded to bf16, 28 of 30 tensors are bitwise equal and one
element of h.0.attn.qkv.weight lands one bf16 unit away: 4.8e-4 of the tensor's maximum.)

--flash: loom runs flash attention, whose backward takes D = rowsum(dout * out) from the stored
(bf16) attention output; the reference does the same (FlashAttention below), every other
rounding point unchanged.

Exit status: 0 pass, 1 fail, 77 when this interpreter cannot import torch (ctest SKIP).
Usage: /usr/bin/python3 check_torch_bf16.py --exe DUMP_GPT [--workdir DIR] [--flash]
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
except Exception as exc:  # noqa: BLE001 -- any import failure means "no torch here"
    print(f"SKIP: {sys.executable} cannot import torch ({exc})")
    sys.exit(77)
import check_torch as ref  # noqa: E402 -- the dump reader and fp64 helpers

TOL = 2.0 ** -10
SEPARATION = 4.0


def to_bf16(x):
    """The value of x after a store to bf16 (via fp32, as loom's fp32 values are)."""
    return x.to(torch.float32).to(torch.bfloat16).to(torch.float64)


class Store16(torch.autograd.Function):
    """A 16-bit store of an activation: the value rounded forward, its gradient rounded backward."""

    @staticmethod
    def forward(ctx, x):
        return to_bf16(x)

    @staticmethod
    def backward(ctx, g):
        return to_bf16(g)


def half_ulp_bf16(x):
    """Half a bf16 unit in the last place of each element (8-bit significand)."""
    e = torch.floor(torch.log2(x.abs().clamp(min=2.0 ** -126)))
    return torch.pow(2.0, e - 8)


def grad_err(got, ref_g):
    """Distance of loom's bf16-stored gradient from the reference's unrounded one, beyond the
    final rounding: max_i (|got_i - ref_i| - ulp(ref_i)/2)^+ / max|ref|. loom stores each
    parameter gradient rounded once (got = round(x), x its fp32 accumulator), so
    |got - ref| <= ulp/2 + |x - ref|: this measures |x - ref|, which the tolerance bounds, and a
    rounding that lands on the other side of a boundary (x and ref straddling it) costs
    nothing."""
    denom = ref_g.abs().max().item()
    excess = ((got - ref_g).abs() - half_ulp_bf16(ref_g)).clamp(min=0).max().item()
    return 0.0 if excess == 0.0 else excess / (denom if denom > 0 else 1e-300)


def fwd_round(x):
    """Rounded forward, gradient passed through unrounded (weights: the fp32 master's gradient;
    a matmul output that a residual add consumes before loom's next rounding of the gradient)."""
    return x + (to_bf16(x) - x).detach()


class FlashAttention(torch.autograd.Function):
    """Causal attention as loom's flash backward computes it (--flash): the same forward, and a
    backward whose D = rowsum(dout * out) reads the stored output, i.e. out rounded to bf16
    (FlashAttention-2, Alg. 2, on the value the model keeps), where autograd's softmax backward
    takes rowsum(P * dP) of the unrounded product: one rounding point more."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = att @ v
        ctx.save_for_backward(q, k, v, att, y)
        return y

    @staticmethod
    def backward(ctx, g):
        q, k, v, att, y = ctx.saved_tensors
        dv = att.transpose(-2, -1) @ g
        dp = g @ v.transpose(-2, -1)
        d = (g * to_bf16(y)).sum(-1, keepdim=True)
        ds = att * (dp - d) / math.sqrt(q.shape[-1])
        return ds @ k, ds.transpose(-2, -1) @ q, dv, None


def gpt_forward_bf16(cfg, P, idx, targets, on=True, flash=False):
    """loom's GPT-2 with loom's bf16 rounding points (on=False: none, the float64 model; flash:
    attention's backward as FlashAttention)."""
    S = Store16.apply if on else (lambda x: x)
    F = fwd_round if on else (lambda x: x)
    B, T = idx.shape
    C, NH, L = cfg["C"], cfg["NH"], cfg["L"]
    HS = C // NH
    W = {n: F(p) for n, p in P.items()}
    x = S(W["wte"][idx] + W["wpe"][:T])
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = lambda s: W[f"h.{l}.{s}"]  # noqa: E731
        h = S(ref.layernorm(x, p("ln_1.weight"), p("ln_1.bias")))
        qkv = S(h @ p("attn.qkv.weight").T + p("attn.qkv.bias"))
        q, k, v = (t.reshape(B, T, NH, HS).transpose(1, 2) for t in qkv.split(C, dim=-1))
        if on and flash:
            y = FlashAttention.apply(q, k, v, causal)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)  # the fused fp32 attention core
            att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
            y = att @ v
        y = S(y.transpose(1, 2).reshape(B, T, C))
        x = S(x + F(y @ p("attn.proj.weight").T + p("attn.proj.bias")))
        h = S(ref.layernorm(x, p("ln_2.weight"), p("ln_2.bias")))
        h = S(ref.gelu_tanh(S(h @ p("mlp.fc.weight").T + p("mlp.fc.bias"))))
        x = S(x + F(h @ p("mlp.proj.weight").T + p("mlp.proj.bias")))
    x = S(ref.layernorm(x, W["ln_f.weight"], W["ln_f.bias"]))
    logits = S(x @ W["wte"].T)
    logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)  # the loss in fp32
    loss = -logp.gather(-1, targets.unsqueeze(-1)).mean()
    return logits, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exe", required=True, help="dump_gpt executable to run")
    ap.add_argument("--flash", action="store_true",
                    help="loom runs flash attention (dump_gpt ... flash)")
    ap.add_argument("--workdir", help="where it writes its file (default: a temp dir)")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    workdir = args.workdir or tempfile.mkdtemp(prefix="loom_ref_")
    path = os.path.join(workdir, "gpt_reference_bf16.bin")
    proc = subprocess.run([args.exe, path, "bf16"] + ["flash"] * args.flash, check=False)
    if proc.returncode != 0:
        print(f"FAIL: {args.exe} exited with {proc.returncode}")
        return 1
    cfg, params, inputs, targets, logits, loss, grads = ref.load(path)

    runs = {}
    for on in (True, False):
        P = {n: p.clone().requires_grad_(True) for n, p in params.items()}
        lg, ls = gpt_forward_bf16(cfg, P, inputs, targets, on, args.flash)
        ls.backward()
        runs[on] = (lg.detach(), ls.detach(), {n: P[n].grad for n in P})

    def errs(run):
        lg, ls, g = run
        rows = [("logits", ref.rel_err(logits, lg)), ("loss", ref.rel_err(loss.reshape(1), ls.reshape(1)))]
        return rows + [(f"grad {n}", grad_err(grads[n], g[n])) for n in params]

    same, plain = errs(runs[True]), errs(runs[False])
    not16 = [n for n in params if not torch.equal(to_bf16(grads[n]), grads[n])]
    if not16:
        print(f"FAIL: gradients not stored in bf16 (16-bit gradient storage): {not16}")
        return 1
    print(f"config: {cfg}; loss loom(bf16) {loss.item():.8f} torch(bf16 points) "
          f"{runs[True][1].item():.8f} float64 {runs[False][1].item():.8f}")
    print(f"{'tensor':<34} {'vs bf16 reference':>18} {'vs float64 model':>17}")
    failed = 0
    for (name, e), (_, e64) in zip(same, plain):
        bad = e > TOL or e * SEPARATION > e64
        failed += bad
        print(f"{name:<34} {e:>18.3e} {e64:>17.3e}{'   FAIL' if bad else ''}")
    worst = max(same, key=lambda r: r[1])
    print(f"worst: {worst[0]} {worst[1]:.3e} (tolerance {TOL:.2e}; each tensor must be "
          f"{SEPARATION:g}x closer to the bf16 reference than to float64); {len(same)} tensors, "
          f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
