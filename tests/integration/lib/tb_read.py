#!/usr/bin/python3
"""An independent reader of TensorBoard event files: checks what loom writes without loom's code.

The Event / Summary / TensorProto messages are declared here from TensorFlow's field numbers
(tensorflow/core/util/event.proto, core/framework/summary.proto, tensor.proto) with Debian's
python3-protobuf, and every record's two checksums are verified with python3-crc32c — neither
shares anything with loom's protobuf-c / ISA-L writer.

  tb_read.py DIR --jsonl FILE [--live]
Reads every events.out.tfevents.* file in DIR. Without --live each file must end on a record
boundary; with --live (the run is still writing) a trailing incomplete record is allowed, a bad
checksum never is. Then every scalar of every step must equal the JSONL's field (float32, as
TensorBoard stores it), and every numeric field of every JSONL record up to the last step read
must be in the event files (with --live: up to the step before the last one read, which may
still lack its evaluation's scalars). Prints a summary; exits 1 with the first difference.

The files are read as TensorBoard's event accumulator reads a run directory: in name order, and
every SessionLog START after the run's first is a restart that drops what was read at steps >=
its step (EventAccumulator._CheckForRestartAndMaybePurge; brain.Event:2 files purge on nothing
else). So a scalar left twice after a resume — an interrupted process's steps past the
checkpoint, not purged — is "written twice", as TensorBoard would draw it twice. Every file must
hold a START before its first scalar.
"""
import argparse
import glob
import json
import os
import struct
import sys

import crc32c
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def build_messages():
    fd = descriptor_pb2.FileDescriptorProto(name="tb_read_event.proto", package="tbread",
                                            syntax="proto3")

    def msg(name, fields, nested=(), oneofs=()):
        m = descriptor_pb2.DescriptorProto(name=name)
        for o in oneofs:
            m.oneof_decl.add(name=o)
        for (fname, num, ftype, label, type_name, oneof) in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
            if oneof is not None:
                f.oneof_index = oneof
        for n in nested:
            m.nested_type.add().CopyFrom(n)
        return m

    OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    dim = msg("Dim", [("size", 1, F.TYPE_INT64, OPT, None, None),
                      ("name", 2, F.TYPE_STRING, OPT, None, None)])
    shape = msg("TensorShapeProto", [("dim", 2, F.TYPE_MESSAGE, REP, ".tbread.TensorShapeProto.Dim", None)],
                nested=[dim])
    tensor = msg("TensorProto", [("dtype", 1, F.TYPE_INT32, OPT, None, None),
                                 ("tensor_shape", 2, F.TYPE_MESSAGE, OPT, ".tbread.TensorShapeProto", None),
                                 ("string_val", 8, F.TYPE_BYTES, REP, None, None)])
    plugin = msg("PluginData", [("plugin_name", 1, F.TYPE_STRING, OPT, None, None),
                                ("content", 2, F.TYPE_BYTES, OPT, None, None)])
    meta = msg("SummaryMetadata", [("plugin_data", 1, F.TYPE_MESSAGE, OPT, ".tbread.SummaryMetadata.PluginData", None)],
               nested=[plugin])
    value = msg("Value", [("tag", 1, F.TYPE_STRING, OPT, None, None),
                          ("simple_value", 2, F.TYPE_FLOAT, OPT, None, 0),
                          ("tensor", 8, F.TYPE_MESSAGE, OPT, ".tbread.TensorProto", 0),
                          ("metadata", 9, F.TYPE_MESSAGE, OPT, ".tbread.SummaryMetadata", None)],
                oneofs=["value"])
    summary = msg("Summary", [("value", 1, F.TYPE_MESSAGE, REP, ".tbread.Summary.Value", None)], nested=[value])
    # SessionLog.status is an enum (START = 1); as int32 on the wire it is the same varint
    session = msg("SessionLog", [("status", 1, F.TYPE_INT32, OPT, None, None),
                                 ("checkpoint_path", 2, F.TYPE_STRING, OPT, None, None),
                                 ("msg", 3, F.TYPE_STRING, OPT, None, None)])
    event = msg("Event", [("wall_time", 1, F.TYPE_DOUBLE, OPT, None, None),
                          ("step", 2, F.TYPE_INT64, OPT, None, None),
                          ("file_version", 3, F.TYPE_STRING, OPT, None, 0),
                          ("summary", 5, F.TYPE_MESSAGE, OPT, ".tbread.Summary", 0),
                          ("session_log", 7, F.TYPE_MESSAGE, OPT, ".tbread.SessionLog", 0)],
                oneofs=["what"])
    for m in (shape, tensor, meta, summary, session, event):
        fd.message_type.add().CopyFrom(m)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("tbread.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def masked(data):
    crc = crc32c.crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path, live):
    data = open(path, "rb").read()
    pos, out = 0, []
    while pos < len(data):
        if len(data) - pos < 12:
            break
        header = data[pos:pos + 8]
        (n,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if hcrc != masked(header):
            sys.exit(f"FAIL: {path}: offset {pos}: the length's checksum is wrong")
        if len(data) - pos < 12 + n + 4:
            break
        body = data[pos + 12:pos + 12 + n]
        (dcrc,) = struct.unpack("<I", data[pos + 12 + n:pos + 16 + n])
        if dcrc != masked(body):
            sys.exit(f"FAIL: {path}: offset {pos}: the record's checksum is wrong")
        out.append(body)
        pos += 16 + n
    if pos != len(data):
        if not live:
            sys.exit(f"FAIL: {path}: {len(data) - pos} trailing bytes are not a whole record")
        print(f"{os.path.basename(path)}: {len(data) - pos} bytes of a record being written")
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def flatten(rec, prefix=""):
    for k, v in rec.items():
        if not prefix and k == "step":
            continue
        tag = f"{prefix}/{k}" if prefix else k
        if isinstance(v, dict):
            yield from flatten(v, tag)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield tag, v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--jsonl", required=True)
    ap.add_argument("--live", action="store_true")
    a = ap.parse_args()
    Event = build_messages()
    files = sorted(glob.glob(os.path.join(a.dir, "events.out.tfevents.*")))
    if not files:
        sys.exit(f"FAIL: no events.out.tfevents.* in {a.dir}")
    scalars = {}  # (step, tag) -> value
    texts = {}
    n_events = 0
    seen_start, purged = False, 0
    for path in files:
        recs = read_records(path, a.live)
        if not recs:
            sys.exit(f"FAIL: {path}: no complete record")
        first = Event.FromString(recs[0])
        if first.WhichOneof("what") != "file_version" or first.file_version != "brain.Event:2":
            sys.exit(f"FAIL: {path}: the first record is not the file version brain.Event:2")
        started = False
        for body in recs[1:]:
            ev = Event.FromString(body)
            n_events += 1
            if ev.WhichOneof("what") == "session_log" and ev.session_log.status == 1:  # START
                started = True
                if seen_start:  # a restart: TensorBoard drops steps >= this one
                    old = len(scalars)
                    scalars = {k: v for k, v in scalars.items() if k[0] < ev.step}
                    purged += old - len(scalars)
                seen_start = True
                continue
            if ev.WhichOneof("what") != "summary":
                sys.exit(f"FAIL: {path}: step {ev.step}: an event without a summary")
            if not started:
                sys.exit(f"FAIL: {path}: step {ev.step}: a summary before the file's SessionLog "
                         "START (TensorBoard could not purge a resumed run's orphaned steps)")
            for v in ev.summary.value:
                kind = v.WhichOneof("value")
                if kind == "simple_value":
                    if (ev.step, v.tag) in scalars:
                        sys.exit(f"FAIL: step {ev.step}: {v.tag} written twice")
                    scalars[(ev.step, v.tag)] = v.simple_value
                elif kind == "tensor" and v.metadata.plugin_data.plugin_name == "text":
                    texts[v.tag] = v.tensor.string_val[0].decode()
                else:
                    sys.exit(f"FAIL: step {ev.step}: {v.tag}: unexpected value kind {kind}")
    last_step = max((s for s, _ in scalars), default=0)
    if last_step == 0:
        sys.exit("FAIL: no scalar read")
    if a.live:
        # A step's training scalars and its evaluation's are separate events, written after
        # the JSONL's lines: mid-run the newest step in the files may still lack its val_loss.
        # Compare the steps before it, which the writer has finished.
        scalars = {k: v for k, v in scalars.items() if k[0] < last_step}
        last_step -= 1
    checked, steps = 0, set()
    for line in open(a.jsonl):
        rec = json.loads(line)
        step = rec["step"]
        if step > last_step:
            break
        for tag, v in flatten(rec):
            got = scalars.pop((step, tag), None)
            if got is None:
                sys.exit(f"FAIL: step {step}: {tag} is in the JSONL but not in the event files")
            if got != f32(v):
                sys.exit(f"FAIL: step {step}: {tag}: event file {got!r}, JSONL {v!r} (float32 {f32(v)!r})")
            checked += 1
        steps.add(step)
    if checked == 0:
        sys.exit("FAIL: no complete step to compare with the JSONL")
    if scalars:
        (s, t), v = next(iter(scalars.items()))
        sys.exit(f"FAIL: {len(scalars)} scalars not in the JSONL, e.g. step {s}: {t} = {v}")
    if "config" not in texts or '"model"' not in texts["config"]:
        sys.exit("FAIL: the run's config is not in the event files as text")
    print(f"ok: {len(files)} file(s), {n_events} events, {checked} scalars over {len(steps)} steps "
          f"(last {last_step}) equal the JSONL's; config text {len(texts['config'])} bytes"
          + (f"; {purged} scalars of steps a restart replaced purged, as TensorBoard does"
             if purged else "")
          + (f"; restart text: {texts['restart']!r}" if "restart" in texts else ""))


if __name__ == "__main__":
    main()
