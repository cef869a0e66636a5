#!/usr/bin/python3
"""The PyTorch anchor of bench/gpt2_vocab.sh: the same GPT as loom (GPT-2 architecture: tied
token embedding and LM head, learned positions, pre-LayerNorm blocks, tanh GELU, causal attention,
no dropout), trained with AdamW on random tokens, fp32, --threads per rank (default 1); with
--ranks 2 the ranks run DistributedDataParallel over gloo (torch.multiprocessing, 127.0.0.1) at
the same global batch, each with global/ranks rows.

  torch_gpt.py --vocab V --ctx T --layers L --heads H --embd C --batch GLOBAL_ROWS --steps N
               --ranks R [--threads N] [--autocast bf16] --out FILE
  torch_gpt.py --probe      (what the library runs on: version, CPU capability, BLAS, oneDNN)

--autocast bf16 runs the forward and the loss under torch.autocast("cpu", dtype=torch.bfloat16)
and the backward outside it, as PyTorch's automatic mixed precision docs recommend; the weights,
gradients and AdamW state stay fp32 (autocast casts the weights to bf16 per op), so this is the
PyTorch counterpart of loom's bf16 GEMM operands with fp32 master weights. bf16 needs no loss
scaling (fp32's exponent range).

Writes one JSON line per step to FILE (rank 0): {"step", "ms_per_step", "tokens_per_s", "loss"},
the same keys loom's metrics JSONL has, so bench/gpt2_vocab_report.py reads both alike. Uses
Debian's python3-torch (/usr/bin/python3); the thread pinning (torch.set_num_threads(N),
OMP/OPENBLAS/MKL_NUM_THREADS=N) happens before torch is imported: Debian's torch runs its fp32
GEMMs on OpenBLAS (pthreads), whose thread count only the environment sets.

--probe prints `torch_version`, `torch_cpu_capability` (torch.backends.cpu.get_cpu_capability()
where it exists, 2.0 and later; else torch.__config__.show()'s "CPU capability usage" line),
`torch_onednn` (its oneDNN line), `torch_blas` (the BLAS libraries loaded into the process), then
runs one small Linear forward and backward under bf16 autocast: with ONEDNN_VERBOSE=1 in the
environment oneDNN's "exec" lines name the kernels torch's bf16 GEMMs ran (e.g.
brg:avx512_core_bf16)."""
import argparse
import json
import math
import os
import sys
import time

_pre = argparse.ArgumentParser(add_help=False)
_pre.add_argument("--threads", type=int, default=1)
THREADS = max(1, _pre.parse_known_args()[0].threads)
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(THREADS)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, C, H, T):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        # a plain attribute, not a buffer: DDP's gloo broadcast of buffers refuses bool tensors
        self.mask = torch.tril(torch.ones(T, T, dtype=torch.bool))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, H, C):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, H, T) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def run(rank, a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337 + rank)
    if a.ranks > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    model = GPT(a.vocab, a.ctx, a.layers, a.heads, a.embd)
    if a.ranks > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    rows = a.batch // a.ranks
    gen = torch.Generator().manual_seed(7 + rank)
    out = open(a.out, "w") if rank == 0 else None
    for step in range(1, a.steps + 1):
        tok = torch.randint(a.vocab, (rows, a.ctx + 1), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if a.autocast == "bf16":  # forward and loss in autocast, backward outside it
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(tok[:, :-1], tok[:, 1:])
        else:
            loss = model(tok[:, :-1], tok[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ms = (time.perf_counter() - t0) * 1000.0
        if out:
            out.write(json.dumps({"step": step, "ms_per_step": ms,
                                  "tokens_per_s": a.batch * a.ctx / ms * 1000.0,
                                  "loss": loss.item()}) + "\n")
            out.flush()
    if a.ranks > 1:
        torch.distributed.destroy_process_group()


def probe():
    cap = "unknown"
    cfg = torch.__config__.show().splitlines()
    if hasattr(torch.backends, "cpu") and hasattr(torch.backends.cpu, "get_cpu_capability"):
        cap = torch.backends.cpu.get_cpu_capability()
    else:
        cap = next((ln.split(":", 1)[1].strip() for ln in cfg if "CPU capability usage" in ln), cap)
    dnn = next((ln.strip(" -") for ln in cfg if "MKL-DNN" in ln or "oneDNN" in ln), "none")
    libs = sorted({ln.split()[-1].rsplit("/", 1)[-1] for ln in open("/proc/self/maps")
                   if "blas" in ln.rsplit("/", 1)[-1] or "mkl_" in ln})
    print(f"torch_version {torch.__version__}")
    print(f"torch_cpu_capability {cap}")
    print(f"torch_onednn {dnn}")
    print(f"torch_blas {' '.join(libs) or 'unknown'}")
    sys.stdout.flush()
    lin = nn.Linear(256, 256)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = lin(torch.randn(64, 256))
    y.float().sum().backward()
    print(f"torch_autocast_dtype {y.dtype}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k, v in (("vocab", 50257), ("ctx", 64), ("layers", 4), ("heads", 4), ("embd", 256),
                 ("batch", 4), ("steps", 20), ("ranks", 1), ("threads", 1)):
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--autocast", choices=("none", "bf16"), default="none")
    p.add_argument("--probe", action="store_true")
    p.add_argument("--out")
    a = p.parse_args()
    if a.probe:
        probe()
        return
    if not a.out:
        sys.exit("torch_gpt.py: --out FILE is required")
    if a.batch % a.ranks:
        sys.exit("torch_gpt.py: --batch must be a multiple of --ranks")
    if a.ranks == 1:
        run(0, a)
    else:
        import torch.multiprocessing as mp
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # the children inherit these
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        mp.spawn(run, args=(a,), nprocs=a.ranks)


if __name__ == "__main__":
    main()
