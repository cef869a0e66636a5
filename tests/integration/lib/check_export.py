#!/usr/bin/python3
"""Independent checks of the model files `loom export` writes (docs/checkpoints.md).

  check_export.py verify ST LLMC [ST LLMC ...] --file-loss EXE --tokens SHARD --workdir DIR
      ST parsed with struct/json and read with torch.frombuffer (no safetensors library): the
      header's names, dtypes, shapes and packed offsets must be Hugging Face GPT-2's; LLMC's
      256-int header must be llm.c's (20240326, version 3, maxT, V, L, NH, C, Vp = V rounded
      up to 128) and its tensors, in llm.c's order, equal ST's bitwise (Conv1D weights
      transposed back), the padded wte rows zero. Then one forward of GPT-2 written here in
      torch (float64) on ST's tensors in HF's layout -- x @ W + b with W (in, out) -- over the
      first B*T+1 tokens of SHARD (an llm.c token shard) must give the loss loom computes on the
      same tokens with the same file (EXE = tests/reference/file_loss) within 1e-5. When
      `transformers` imports, GPT2LMHeadModel loads ST as well and must agree. Each ST LLMC
      pair is checked so, in one process: torch's import (~2 s of CPU) is paid once.
  check_export.py same A B        two safetensors files: the same tensors, bitwise (metadata
                                  may differ)
  check_export.py close A B RTOL  the same tensor names and shapes and
                                  max|a - b| <= RTOL * max|b| over all tensors
Exit status 0 pass, 1 fail, 77 when verify cannot import torch. `same` and `close` read the
files with struct and array only: importing torch costs ~2 s of CPU per call, and the export
test calls them ten times."""
import array
import json
import math
import os
import struct
import subprocess
import sys

torch = None  # imported by verify only (import_torch)


def import_torch():
    global torch
    try:
        import torch as t
    except Exception as exc:  # noqa: BLE001 -- any import failure means "no torch here"
        print(f"SKIP: {sys.executable} cannot import torch ({exc})")
        sys.exit(77)
    torch = t

LOSS_TOL = 1e-5


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def read_safetensors_raw(path):
    """(metadata, {name: (shape, little-endian float32 bytes)}) read with struct and json."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    if (8 + n) % 8:
        fail(f"{path}: data does not start 8-byte aligned (header length {n})")
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    pos = 0
    for b, e, k in spans:  # packed, no gaps or overlaps, covering the data exactly
        if b != pos:
            fail(f"{path}: tensor {k} starts at {b}, expected {pos}")
        pos = e
    if pos != len(body):
        fail(f"{path}: tensors cover {pos} bytes of {len(body)}")
    tensors = {}
    for k, v in header.items():
        if v["dtype"] != "F32":
            fail(f"{path}: {k} has dtype {v['dtype']}, expected F32")
        b, e = v["data_offsets"]
        if e - b != 4 * math.prod(v["shape"]):
            fail(f"{path}: {k} holds {e - b} bytes, its shape {v['shape']} needs "
                 f"{4 * math.prod(v['shape'])}")
        tensors[k] = (v["shape"], body[b:e])
    return meta, tensors


def read_safetensors(path):
    """(metadata, {name: float32 tensor}): read_safetensors_raw's bytes through torch.frombuffer."""
    meta, raw = read_safetensors_raw(path)
    return meta, {k: torch.frombuffer(bytearray(b), dtype=torch.float32).reshape(shape)
                  for k, (shape, b) in raw.items()}


def dims_of(t):
    V, C = t["wte.weight"].shape
    maxT = t["wpe.weight"].shape[0]
    L = 1 + max(int(k.split(".")[1]) for k in t if k.startswith("h."))
    return V, maxT, L, C


def expected_shapes(V, maxT, L, C):
    s = {"wte.weight": [V, C], "wpe.weight": [maxT, C], "ln_f.weight": [C], "ln_f.bias": [C]}
    for l in range(L):
        h = f"h.{l}."
        s.update({h + "ln_1.weight": [C], h + "ln_1.bias": [C],
                  h + "attn.c_attn.weight": [C, 3 * C], h + "attn.c_attn.bias": [3 * C],
                  h + "attn.c_proj.weight": [C, C], h + "attn.c_proj.bias": [C],
                  h + "ln_2.weight": [C], h + "ln_2.bias": [C],
                  h + "mlp.c_fc.weight": [C, 4 * C], h + "mlp.c_fc.bias": [4 * C],
                  h + "mlp.c_proj.weight": [4 * C, C], h + "mlp.c_proj.bias": [C]})
    return s


LLMC_ORDER = [  # llm.c's ParameterTensors, with the HF name and whether HF transposes it
    ("wte", "wte.weight", False), ("wpe", "wpe.weight", False),
    ("ln1w", "ln_1.weight", False), ("ln1b", "ln_1.bias", False),
    ("qkvw", "attn.c_attn.weight", True), ("qkvb", "attn.c_attn.bias", False),
    ("attprojw", "attn.c_proj.weight", True), ("attprojb", "attn.c_proj.bias", False),
    ("ln2w", "ln_2.weight", False), ("ln2b", "ln_2.bias", False),
    ("fcw", "mlp.c_fc.weight", True), ("fcb", "mlp.c_fc.bias", False),
    ("fcprojw", "mlp.c_proj.weight", True), ("fcprojb", "mlp.c_proj.bias", False),
    ("lnfw", "ln_f.weight", False), ("lnfb", "ln_f.bias", False)]


def check_llmc(path, t, NH):
    data = open(path, "rb").read()
    hdr = struct.unpack("<256i", data[:1024])
    V, maxT, L, C = dims_of(t)
    Vp = (V + 127) // 128 * 128
    want = [20240326, 3, maxT, V, L, NH, C, Vp]
    if list(hdr[:8]) != want or any(hdr[8:]):
        fail(f"{path}: header {list(hdr[:8])}, expected {want} and zeros")
    params = torch.frombuffer(bytearray(data[1024:]), dtype=torch.float32)
    pos = 0
    for name, hf, tr in LLMC_ORDER:
        layers = [""] if not name.startswith(("ln1", "qkv", "attproj", "ln2", "fc")) else \
            [f"h.{l}." for l in range(L)]
        for pre in layers:
            x = t[pre + hf if pre else hf]
            x = x.t().contiguous() if tr else x
            n = x.numel()
            got = params[pos:pos + n].reshape(x.shape)
            if not torch.equal(got, x):
                fail(f"{path}: {name} {pre} differs from the safetensors file's {pre}{hf}")
            pos += n
            if name == "wte":
                pad = params[pos:pos + (Vp - V) * C]
                if torch.count_nonzero(pad):
                    fail(f"{path}: padded wte rows {V}..{Vp - 1} are not zero")
                pos += (Vp - V) * C
    if pos != params.numel():
        fail(f"{path}: {params.numel()} floats after the header, llm.c's layout has {pos}")
    print(f"llm.c file: header {want}; {pos} floats in llm.c's order equal the safetensors "
          f"tensors bitwise; padded rows zero")


def gpt2_loss(t, NH, tokens, B, T):
    """GPT-2 forward in float64 on HF-layout tensors: Conv1D is x @ W + b with W (in, out)."""
    w = {k: v.double() for k, v in t.items()}
    V, maxT, L, C = dims_of(t)
    x_in = tokens[:B * T].reshape(B, T)
    y = tokens[1:B * T + 1].reshape(B, T)
    x = w["wte.weight"][x_in] + w["wpe.weight"][:T]
    ln = lambda z, p: torch.nn.functional.layer_norm(z, (C,), w[p + ".weight"], w[p + ".bias"], 1e-5)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    hs = C // NH
    for l in range(L):
        h = f"h.{l}."
        a = ln(x, h + "ln_1") @ w[h + "attn.c_attn.weight"] + w[h + "attn.c_attn.bias"]
        q, k, v = (z.reshape(B, T, NH, hs).transpose(1, 2) for z in a.split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + o @ w[h + "attn.c_proj.weight"] + w[h + "attn.c_proj.bias"]
        m = ln(x, h + "ln_2") @ w[h + "mlp.c_fc.weight"] + w[h + "mlp.c_fc.bias"]
        m = torch.nn.functional.gelu(m, approximate="tanh")
        x = x + m @ w[h + "mlp.c_proj.weight"] + w[h + "mlp.c_proj.bias"]
    logits = ln(x, "ln_f") @ w["wte.weight"].t()
    return torch.nn.functional.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T)).item()


def try_transformers(st_path, t, NH, tokens, B, T, loss_ref, workdir):
    try:
        import transformers  # noqa: F401
    except Exception:  # noqa: BLE001
        print("transformers: not importable under this interpreter; HF loader check skipped")
        return
    from transformers import GPT2Config, GPT2LMHeadModel
    V, maxT, L, C = dims_of(t)
    d = os.path.join(workdir, "hf_model")
    os.makedirs(d, exist_ok=True)
    GPT2Config(vocab_size=V, n_positions=maxT, n_embd=C, n_layer=L, n_head=NH,
               activation_function="gelu_new", layer_norm_epsilon=1e-5).save_pretrained(d)
    dst = os.path.join(d, "model.safetensors")
    if os.path.lexists(dst):
        os.remove(dst)
    os.symlink(os.path.abspath(st_path), dst)
    model = GPT2LMHeadModel.from_pretrained(d).double().eval()
    x = tokens[:B * T].reshape(B, T)
    y = tokens[1:B * T + 1].reshape(B, T)
    with torch.no_grad():
        logits = model(x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T)).item()
    print(f"transformers GPT2LMHeadModel: loss {loss:.9f} (torch reference {loss_ref:.9f})")
    if abs(loss - loss_ref) > 1e-9:
        fail("transformers' GPT-2 disagrees with the reference forward")


def verify(args):
    k = next((i for i, a in enumerate(args) if a.startswith("--")), len(args))
    files, opts = args[:k], dict(zip(args[k::2], args[k + 1::2]))
    if not files or len(files) % 2:
        fail(f"verify: expected ST LLMC pairs before the options, got {files}")
    for st, llmc in zip(files[0::2], files[1::2]):
        verify_pair(st, llmc, opts)


def verify_pair(st, llmc, opts):
    meta, t = read_safetensors(st)
    V, maxT, L, C = dims_of(t)
    want = expected_shapes(V, maxT, L, C)
    if set(t) != set(want):
        fail(f"{st}: names {sorted(set(t) ^ set(want))} differ from Hugging Face GPT-2's")
    for k, s in want.items():
        if list(t[k].shape) != s:
            fail(f"{st}: {k} has shape {list(t[k].shape)}, HF GPT-2 has {s}")
    if meta.get("format") != "pt":
        fail(f"{st}: __metadata__.format is {meta.get('format')!r}, transformers expects 'pt'")
    NH = json.loads(meta["loom.model"])["n_head"]
    print(f"safetensors: {len(t)} tensors, HF GPT-2 names and shapes (V {V}, maxT {maxT}, "
          f"L {L}, C {C}, NH {NH}); offsets packed; metadata keys {sorted(meta)}")
    check_llmc(llmc, t, NH)
    shard = open(opts["--tokens"], "rb").read()
    B, T = 4, maxT
    toks = struct.unpack(f"<{B * T + 1}H", shard[1024:1024 + 2 * (B * T + 1)])
    tokens = torch.tensor(toks, dtype=torch.long)
    tok_path = os.path.join(opts["--workdir"], "tokens.i32")
    with open(tok_path, "wb") as f:
        f.write(struct.pack(f"<{B * T + 1}i", *toks))
    ref = gpt2_loss(t, NH, tokens, B, T)
    out = {}
    for fmt, path in (("safetensors", st), ("llmc", llmc)):
        r = subprocess.run([opts["--file-loss"], path, fmt, str(V), str(maxT), str(L), str(NH),
                            str(C), tok_path, str(B), str(T)], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"file_loss {fmt}: {r.stderr.strip()}")
        out[fmt] = float(r.stdout.split()[1])
    diff = abs(out["safetensors"] - ref)
    print(f"loss on {B}x{T} tokens: loom {out['safetensors']:.9f} (from the llm.c file "
          f"{out['llmc']:.9f}), torch HF-layout forward {ref:.9f}: |diff| {diff:.3g} "
          f"(tolerance {LOSS_TOL:g})")
    if out["safetensors"] != out["llmc"]:
        fail("loom's loss differs between the safetensors and the llm.c file")
    if not diff <= LOSS_TOL:
        fail("loom's loss and the torch forward differ")
    try_transformers(st, t, NH, tokens, B, T, ref, opts["--workdir"])


def same(a, b):
    _, ta = read_safetensors_raw(a)
    _, tb = read_safetensors_raw(b)
    if set(ta) != set(tb):
        fail(f"{a} and {b} hold different tensors")
    for k in ta:
        if ta[k] != tb[k]:  # the shapes and the bytes: bitwise, -0.0 and NaN payloads included
            fail(f"{k} differs between {a} and {b}")
    print(f"{a} == {b}: {len(ta)} tensors, bitwise")


def floats(raw):
    x = array.array("f", raw)
    if sys.byteorder != "little":
        x.byteswap()
    return x


def close(a, b, rtol):
    _, ta = read_safetensors_raw(a)
    _, tb = read_safetensors_raw(b)
    if set(ta) != set(tb) or any(ta[k][0] != tb[k][0] for k in ta):
        fail(f"{a} and {b} hold different tensors or shapes")
    # in float64 (Python floats), like torch's float32 difference up to its rounding, which is
    # far below any tolerance given here (>= 1e-6)
    worst = max(max((abs(x - y) for x, y in zip(floats(ta[k][1]), floats(tb[k][1]))), default=0.0)
                for k in ta)
    scale = max(max((abs(y) for y in floats(tb[k][1])), default=0.0) for k in tb)
    print(f"{a} vs {b}: max|a-b| {worst:.3g} = {worst / scale:.3g} x max|b| "
          f"(tolerance {rtol:g})")
    if worst > rtol * scale:
        fail("exports differ beyond the tolerance")


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "verify":
        import_torch()
        verify(rest)
    elif cmd == "same":
        same(*rest)
    elif cmd == "close":
        close(rest[0], rest[1], float(rest[2]))
    else:
        fail(f"unknown command {cmd}")
