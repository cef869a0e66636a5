#!/usr/bin/python3
"""PyTorch reference test for loom's GPT-2 forward and backward.

Runs dump_gpt (or reads a file it wrote), rebuilds the same GPT-2 in float64 torch from the
exact weights -- its own small code: LayerNorm (eps 1e-5), causal attention, GELU (tanh
approximation), tied head, mean cross-entropy -- runs forward and backward with autograd, and
compares logits, loss and every parameter gradient:

    max|loom - ref| / max|ref| <= TOL   per tensor

TOL = lambda sqrt(n) u (u = 2^-24, lambda = 6): the probabilistic rounding-error bound of an
fp32 computation whose reductions along the forward and backward path add up to n terms,
against float64 (which is exact at this scale); see tests/unit/fp_tolerance.h and
docs/tolerances.md. For dump_gpt's model n = 1955 and TOL = 1.58e-5.

Prints a table of per-tensor relative errors and the worst. Exit status: 0 pass, 1 fail, 77 when
this interpreter cannot import torch (ctest SKIP_RETURN_CODE).

Usage: /usr/bin/python3 check_torch.py (--exe DUMP_GPT [--workdir DIR] | --file DUMP.bin)
File layout: see tests/reference/dump_gpt.c.
"""
import argparse
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
except Exception as exc:  # noqa: BLE001 -- any import failure means "no torch here"
    print(f"SKIP: {sys.executable} cannot import torch ({exc})")
    sys.exit(77)

MAGIC = 0x4C4D5246
VERSION = 1
FP32_U = 2.0 ** -24
LAMBDA = 6.0


def path_reductions(cfg):
    """Reduction length along the forward and backward path of loom's GPT (the same count as
    tests/unit/gpt_path.h): layernorms 2C, GEMMs C / 4C / 3C, attention HS and T, head V, and
    the sum over the B*T rows that makes a weight gradient."""
    C, HS, T, V, L = cfg["C"], cfg["C"] / cfg["NH"], cfg["T"], cfg["V"], cfg["L"]
    fwd = L * (2 * C + C + HS + 2 * T + C + 2 * C + C + 4 * C) + 2 * C + C + V
    bwd = L * (2 * C + 4 * C + C + C + 3 * C + T + HS + 2 * C) + V + 2 * C + cfg["B"] * T
    return fwd + bwd


def tolerance(cfg):
    """fp32 against float64 (c = 1): lambda sqrt(n) u."""
    return LAMBDA * math.sqrt(path_reductions(cfg)) * FP32_U


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def i32(self, n=1):
        vals = struct.unpack_from(f"<{n}i", self.data, self.pos)
        self.pos += 4 * n
        return vals if n > 1 else vals[0]

    def f32(self, n):
        t = torch.frombuffer(bytearray(self.data[self.pos:self.pos + 4 * n]), dtype=torch.float32)
        self.pos += 4 * n
        return t.to(torch.float64)

    def raw(self, n):
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b


def load(path):
    with open(path, "rb") as f:
        r = Reader(f.read())
    magic, version, V, maxT, L, NH, C, B, T, n_params = r.i32(10)
    if magic != MAGIC or version != VERSION:
        raise SystemExit(f"{path}: not a dump_gpt file (magic {magic:#x}, version {version})")
    cfg = dict(V=V, maxT=maxT, L=L, NH=NH, C=C, B=B, T=T)
    params = {}
    for _ in range(n_params):
        name = r.raw(r.i32()).decode()
        ndim, s0, s1 = r.i32(3)
        shape = (s0, s1) if ndim == 2 else (s0,)
        params[name] = r.f32(math.prod(shape)).reshape(shape)
    inputs = torch.tensor(r.i32(B * T), dtype=torch.long).reshape(B, T)
    targets = torch.tensor(r.i32(B * T), dtype=torch.long).reshape(B, T)
    logits = r.f32(B * T * V).reshape(B, T, V)
    loss = r.f32(1)[0]
    grads = {name: r.f32(p.numel()).reshape(p.shape) for name, p in params.items()}
    if r.pos != len(r.data):
        raise SystemExit(f"{path}: {len(r.data) - r.pos} trailing bytes")
    return cfg, params, inputs, targets, logits, loss, grads


def layernorm(x, w, b, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased, as GPT-2
    return (x - mean) / torch.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt_forward(cfg, P, idx, targets):
    """Reference GPT-2: returns (logits (B,T,V), mean cross-entropy)."""
    B, T = idx.shape
    C, NH, L = cfg["C"], cfg["NH"], cfg["L"]
    HS = C // NH
    x = P["wte"][idx] + P["wpe"][:T]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = lambda s: P[f"h.{l}.{s}"]  # noqa: E731
        h = layernorm(x, p("ln_1.weight"), p("ln_1.bias"))
        qkv = h @ p("attn.qkv.weight").T + p("attn.qkv.bias")
        q, k, v = (t.reshape(B, T, NH, HS).transpose(1, 2) for t in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn.proj.weight").T + p("attn.proj.bias")
        h = layernorm(x, p("ln_2.weight"), p("ln_2.bias"))
        h = gelu_tanh(h @ p("mlp.fc.weight").T + p("mlp.fc.bias"))
        x = x + h @ p("mlp.proj.weight").T + p("mlp.proj.bias")
    x = layernorm(x, P["ln_f.weight"], P["ln_f.bias"])
    logits = x @ P["wte"].T  # tied head
    logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    loss = -logp.gather(-1, targets.unsqueeze(-1)).mean()
    return logits, loss


def rel_err(got, ref):
    denom = ref.abs().max().item()
    diff = (got - ref).abs().max().item()
    return 0.0 if diff == 0.0 else diff / (denom if denom > 0 else 1e-300)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--exe", help="dump_gpt executable to run")
    src.add_argument("--file", help="an existing dump_gpt output")
    ap.add_argument("--flash", action="store_true",
                    help="loom runs flash attention (dump_gpt ... flash)")
    ap.add_argument("--workdir", help="where --exe writes its file (default: a temp dir)")
    args = ap.parse_args()

    torch.set_default_dtype(torch.float64)
    if args.exe:
        workdir = args.workdir or tempfile.mkdtemp(prefix="loom_ref_")
        path = os.path.join(workdir, "gpt_reference.bin")
        proc = subprocess.run([args.exe, path] + ["flash"] * args.flash, check=False)
        if proc.returncode != 0:
            print(f"FAIL: {args.exe} exited with {proc.returncode}")
            return 1
    else:
        path = args.file

    cfg, params, inputs, targets, logits, loss, grads = load(path)
    P = {n: p.clone().requires_grad_(True) for n, p in params.items()}
    ref_logits, ref_loss = gpt_forward(cfg, P, inputs, targets)
    ref_loss.backward()

    rows = [("logits", rel_err(logits, ref_logits.detach())),
            ("loss", rel_err(loss.reshape(1), ref_loss.detach().reshape(1)))]
    rows += [(f"grad {n}", rel_err(grads[n], P[n].grad)) for n in params]
    print(f"config: {cfg}; loss loom {loss.item():.8f} torch(float64) {ref_loss.item():.8f}")
    TOL = tolerance(cfg)
    print(f"tolerance: 6 sqrt(n) u = {TOL:.3g} for n = {path_reductions(cfg):.0f} reductions "
          "along the forward and backward path")
    print(f"{'tensor':<34} {'max|loom-ref|/max|ref|':>22}")
    failed = 0
    for name, err in rows:
        flag = "" if err <= TOL else "   FAIL"
        failed += err > TOL
        print(f"{name:<34} {err:>22.3e}{flag}")
    worst = max(rows, key=lambda r: r[1])
    print(f"worst: {worst[0]} {worst[1]:.3e} (tolerance {TOL:.3g}, margin {TOL / max(worst[1], 1e-300):.0f}x); "
          f"{len(rows)} tensors compared, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
