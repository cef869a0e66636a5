#!/usr/bin/env python3
"""Walk docs/config.md's table of DeepSpeed keys against `loom check`.

Each row of the table (between the "deepspeed-keys" markers) is a DeepSpeed key, an example
value, an optional loom config override, the fate (mapped, accepted, refused) and what loom does.
For every row this writes a DeepSpeed file holding that key (with the context the key needs:
fp16.enabled for the scaler keys, a ZeRO stage for the zero_optimization keys, an offload
device for its sub-keys, a scheduler type for its params, a batch size), runs
`loom check CONFIG --deepspeed FILE`, and checks:
  - the key's report line has the row's fate;
  - a mapped row's loom path is the one the line maps to;
  - a refused row makes check fail, with the error naming the key's JSON path;
and that every key of core/config/deepspeed_keys.c's table has a row (and no row a key the
table lacks, but for the rows showing the unknown-key refusal).

usage: check_table.py LOOM SRC_DIR MODEL_CONFIG WORK_DIR [--set K=V]...
       check_table.py ... --generate     print the table's rows with the fates loom reports
"""
import json
import os
import re
import subprocess
import sys

BEGIN = "<!-- deepspeed-keys: tests/integration/deepspeed/check_table.py walks this table -->"
END = "<!-- /deepspeed-keys -->"
FATES = ("mapped", "accepted", "refused")


def cell(s):
    s = s.strip()
    return s[1:-1] if s.startswith("`") and s.endswith("`") else s


def parse_doc(path):
    text = open(path, encoding="utf-8").read()
    if BEGIN not in text or END not in text:
        sys.exit(f"{path}: no table between {BEGIN!r} and {END!r}")
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = []
    for line in body.splitlines():
        if not line.startswith("|") or line.startswith("|---") or "DeepSpeed key" in line:
            continue
        parts = [p for p in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(parts) != 5:
            sys.exit(f"{path}: a row without 5 cells: {line}")
        key, value, with_, fate, what = (cell(p).replace("\\|", "|") for p in parts)
        rows.append({"key": key, "value": value, "with": with_, "fate": fate, "what": what})
    return rows


def nest(d, path, value):
    parts = path.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = value


def ds_for(key, value):
    """The DeepSpeed file for one row: the key plus the context its fate depends on."""
    ds = {}
    if key not in ("train_batch_size", "train_micro_batch_size_per_gpu"):
        ds["train_micro_batch_size_per_gpu"] = 1
    if key.startswith("fp16.") and key != "fp16.enabled":
        nest(ds, "fp16.enabled", True)
    if key.startswith("zero_optimization.") and key != "zero_optimization.stage":
        z3 = any(w in key for w in ("stage3", "offload_param", "mics"))
        nest(ds, "zero_optimization.stage", 3 if z3 else 2)
    if key.startswith("zero_optimization.offload_optimizer.") and not key.endswith(".device"):
        nest(ds, "zero_optimization.offload_optimizer.device", "cpu")
    if key.startswith("scheduler.params."):
        name = key.rsplit(".", 1)[1]
        kind = ("WarmupCosineLR" if name in ("warmup_min_ratio", "cos_min_ratio") else
                "WarmupDecayLR" if name == "total_num_steps" else "WarmupLR")
        nest(ds, "scheduler.type", kind)
        if kind == "WarmupCosineLR":
            nest(ds, "scheduler.params.total_num_steps", 10000)
    v = json.loads(value)
    if key == "scheduler.type" and v in ("WarmupDecayLR", "WarmupCosineLR"):
        nest(ds, "scheduler.params.total_num_steps", 10000)
    nest(ds, key, v)
    return ds


def check(loom, model, ds, extra, work, overrides):
    f = os.path.join(work, "ds_row.json")
    with open(f, "w") as fh:
        json.dump(ds, fh)
    cmd = [loom, "check", model, "--deepspeed", f] + [a for o in overrides for a in ("--set", o)]
    if extra:
        cmd += ["--set", extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr, f


def line_of(out, f, key):
    pre = f"loom: deepspeed: {f}: {key}"
    for line in out.splitlines():
        if line.startswith(pre + " = ") or line.startswith(pre + ": "):
            return line
    return None


def fate_of(line):
    m = re.search(r": (mapped|accepted|refused)\b", line.split(" = ", 1)[-1]
                  if " = " in line else line)
    return m.group(1) if m else None


def table_keys(src):
    text = open(os.path.join(src, "core/config/deepspeed_keys.c"), encoding="utf-8").read()
    # a section (h_section) has no line of its own: its keys have theirs
    return set(re.findall(r'^\s*\{"([a-z0-9_.]+)", T_[A-Z]+, h_(?!section)', text, re.M))


def main():
    args = sys.argv[1:]
    generate = "--generate" in args
    args = [a for a in args if a != "--generate"]
    if len(args) < 4:
        sys.exit(__doc__)
    loom, src, model, work = args[:4]
    overrides = [args[i + 1] for i in range(4, len(args) - 1) if args[i] == "--set"]
    rows = parse_doc(os.path.join(src, "docs/config.md"))
    bad = []
    for r in rows:
        rc, out, err, f = check(loom, model, ds_for(r["key"], r["value"]), r["with"], work,
                                overrides)
        line = line_of(out, f, r["key"])
        if line is None:
            bad.append(f"{r['key']} = {r['value']}: no report line for the key in:\n{out}{err}")
            continue
        fate = fate_of(line)
        what = line.split(f": {fate}", 1)[1].lstrip(": ").strip() if fate else ""
        if generate:
            what = what.replace("|", "\\|")
            w = f"`{r['with']}`" if r["with"] else ""
            print(f"| `{r['key']}` | `{r['value']}` | {w} | {fate} | {what} |")
            continue
        if fate != r["fate"]:
            bad.append(f"{r['key']} = {r['value']}: the table says {r['fate']}, loom check "
                       f"says: {line}")
        elif fate == "mapped":
            m = re.search(r"-> (\S+)", r["what"])
            if m and f"-> {m.group(1)}" not in line:
                bad.append(f"{r['key']}: the table maps it to {m.group(1)}, loom check: {line}")
        elif fate == "refused":
            if rc == 0 or r["key"] not in err:
                bad.append(f"{r['key']} = {r['value']}: refused in the report, but check "
                           f"exited {rc} with: {err.strip()}")
        elif rc != 0:
            bad.append(f"{r['key']} = {r['value']}: {fate}, but check failed: {err.strip()}")
    if generate:
        return 0
    known = table_keys(src)
    documented = {r["key"] for r in rows}
    for k in sorted(known - documented):
        bad.append(f"{k}: in core/config/deepspeed_keys.c's table, not in docs/config.md's")
    for r in rows:
        if r["key"] not in known and r["fate"] != "refused":
            bad.append(f"{r['key']}: a row for a key loom's table lacks, not refused")
    for b in bad:
        print("FAIL:", b)
    print(f"check_table: {len(rows)} rows, {len(documented)} keys ({len(known)} in loom's "
          f"table), {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
