#!/usr/bin/python3
"""The PyTorch anchor of bench/gpt2_vocab.sh: the same GPT as loom (GPT-2 architecture: tied
token embedding and LM head, learned positions, pre-LayerNorm blocks, tanh GELU, causal attention,
no dropout), trained with AdamW on random tokens, fp32, one thread per rank; with --ranks 2 the
ranks run DistributedDataParallel over gloo (torch.multiprocessing, 127.0.0.1) at the same global
batch, each with global/ranks rows.

  torch_gpt.py --vocab V --ctx T --layers L --heads H --embd C --batch GLOBAL_ROWS --steps N
               --ranks R --out FILE

Writes one JSON line per step to FILE (rank 0): {"step", "ms_per_step", "tokens_per_s", "loss"},
the same keys loom's metrics JSONL has, so bench/gpt2_vocab_report.py reads both alike. Uses
Debian's python3-torch (/usr/bin/python3); the thread pinning (torch.set_num_threads(1),
OMP/OPENBLAS/MKL_NUM_THREADS=1) happens before torch is imported."""
import argparse
import json
import math
import os
import sys
import time

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

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
    torch.set_num_threads(1)
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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k, v in (("vocab", 50257), ("ctx", 64), ("layers", 4), ("heads", 4), ("embd", 256),
                 ("batch", 4), ("steps", 20), ("ranks", 1)):
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--out", required=True)
    a = p.parse_args()
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
