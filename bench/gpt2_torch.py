#!/usr/bin/env python3
"""PyTorch's side of bench/gpu_check.sh: GPT-2 124M trained the way a user would write it
(nanoGPT's model: scaled_dot_product_attention, tied embeddings, torch.compile, the fused
AdamW), and the bf16 GEMM rate of cuBLAS through torch.matmul, measured in the same process.

  gpt2_torch.py gemm                      -> {"bf16_gemm_tflops": ...}
  gpt2_torch.py train --dtype fp32|bf16 --batch B --seq T --steps S
                                          -> {"tokens_per_s": ..., "params": ..., ...}
One JSON object on the last line of stdout. Timing: CUDA events around each step after the
warm-up steps (compilation included there), the median step.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def gemm(args):
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    reps = 20
    for _ in range(reps):
        a @ b
    end.record()
    torch.cuda.synchronize()
    s = start.elapsed_time(end) / 1e3 / reps
    return {"bf16_gemm_tflops": 2 * n**3 / s / 1e12, "n": n}


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.NH = NH

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V=50257, maxT=1024, L=12, NH=12, C=768):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2 and loom
        for p in self.parameters():
            nn.init.normal_(p, 0.0, 0.02) if p.dim() > 1 else None

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def train(args):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as loom's default
    torch.backends.cudnn.allow_tf32 = False
    model = GPT().cuda()
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    cmodel = torch.compile(model)
    B, T = args.batch, args.seq
    x = torch.randint(0, 50257, (B, T), device="cuda")
    y = torch.roll(x, -1, 1)
    ctx = (torch.autocast("cuda", dtype=torch.bfloat16) if args.dtype == "bf16"
           else torch.autocast("cuda", enabled=False))
    times = []
    t_compile = time.time()
    for step in range(args.warmup + args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with ctx:
            loss = cmodel(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        if step == args.warmup - 1:
            t_compile = time.time() - t_compile
        if step >= args.warmup:
            times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    s = times[len(times) // 2]
    return {"dtype": args.dtype, "tokens_per_s": B * T / s, "ms_per_step": s * 1e3,
            "params": n_params, "loss": float(loss), "warmup_s": t_compile,
            "peak_mem_bytes": torch.cuda.max_memory_allocated()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["gemm", "train"])
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    print(json.dumps(gemm(args) if args.what == "gemm" else train(args)), flush=True)


if __name__ == "__main__":
    main()
