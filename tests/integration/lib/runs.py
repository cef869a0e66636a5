"""What several of the integration tests' python checks read from a run, in one place.

A check beside its script imports it with
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    import runs
(compare_runs.py, also in lib/, is imported the same way). Standard library only.
"""
import json
import struct


def records(path):
    """Every record of a metrics.jsonl (or any JSON-lines file), in order."""
    return [json.loads(line) for line in open(path)]


def comm_per_step(path):
    """comm_bytes of every training step (the records with "skipped"), in order."""
    return [r["comm_bytes"] for r in records(path) if "skipped" in r]


def losses(path):
    """{step: loss} of the training steps (records with "loss" and "skipped")."""
    return {r["step"]: r["loss"] for r in records(path) if "loss" in r and "skipped" in r}


def rel(a, b):
    """|a - b| relative to b (b = 0 counts as 1: no division by zero)."""
    return abs(a - b) / max(b, 1)


def safetensors_header(data):
    """(n, header) of a safetensors file's bytes: the header's length and its parsed JSON."""
    (n,) = struct.unpack("<Q", data[:8])
    return n, json.loads(data[8:8 + n])
