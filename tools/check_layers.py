#!/usr/bin/env python3
"""The plugin wall and the layers of docs/architecture.md, checked on the tree's sources.

  sdk/include/loom/   includes only its own headers (and system headers)
  plugins/<kind>/<n>/ includes only the SDK (<loom/...>), its own folder and the shared headers
                      of its kind (plugins/<kind>/*.h); never core/
  core/               the runtime: includes nothing of core/cli/, plugins/ or tests/, and its
                      folders form the layers of CORE_LAYERS: a file includes its own folder and
                      the folders of lower layers only (peers in one layer never each other)
  core/cli/           the commands: may include the runtime; nothing outside cli/ includes it
  core/CMakeLists.txt compiles no plugin source
  core/ names no plugin option: no string literal in core/ equals a key a plugin reads
  (api->opt_* getters, opt_check_keys lists), except the few keys that are also the host's own
  config keys (OWN_KEYS, each with where the host reads it) and the files translating another
  program's config whose key names the plugins borrowed (TRANSLATORS: DeepSpeed's)

Usage: check_layers.py [ROOT]  (default: the repository this script is in)
       check_layers.py --self-test
Exit 0 when every rule holds, else 1 with one line per violation.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)
LITERAL = re.compile(r'"((?:\\.|[^"\\\n])*)"')
# keys a plugin reads that are also keys of the host's own config schema (core/config/): the
# literal in core/ is the host's key, not the plugin's option
OWN_KEYS = {
    "device": "the config's \"device\" section (core/config/); cpu_offload's "
              "offload_optimizer.device is its own",
    "plugin": "every plugin section's \"plugin\" key, read by the host to load it",
    "schedule": "the lr_schedule section's checkpoint meta, and the SCHEDULE role's name; "
                "pipeline's \"schedule\" option is the plugin's",
    "every": "activation_checkpointing's \"every\" policy (gpt.h); checkpoint.every is the "
             "plugin's",
    "resume": "a conformance group's name; checkpoint.resume is the plugin's",
}
# files of core/ whose literals are another program's config keys, which loom's plugins took as
# their option names: the host writes them (into a plugin's options, from that program's file),
# it never reads a plugin's options
TRANSLATORS = {
    "core/config/deepspeed.c": "DeepSpeed's keys (offload_optimizer, pin_memory), written "
                               "into cpu_offload's options from a ds_config.json",
    "core/config/deepspeed_keys.c": "DeepSpeed's config reference (docs/config.md, DeepSpeed "
                                    "configs), mapped onto the plugins that borrowed its names",
}
SOURCE = ('.c', '.h', '.cu', '.cuh')
# core/'s folders, lowest first (docs/architecture.md "The layers"). config sits above model
# because it checks the model's sizes against the model's limits (gpt.h); formats (model files,
# init_from) read configs and write the model's tensors; train/ckpt/ is part of train.
CORE_LAYERS = [
    ["util"],
    ["abi", "data", "monitor"],
    ["device"],
    ["model"],
    ["config"],
    ["formats"],
    ["runtime"],
    ["train"],
    ["cli"],
]
LAYER_OF = {f: i for i, fs in enumerate(CORE_LAYERS) for f in fs}


def sources(root, top):
    for d, _, files in os.walk(os.path.join(root, top)):
        for f in files:
            if f.endswith(SOURCE):
                p = os.path.join(d, f)
                yield os.path.relpath(p, root), open(p, errors='replace').read()


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def resolve(root, path, name):
    """The repository-relative file a quoted include names, or None (not in the tree)."""
    for base in (os.path.dirname(path), 'core', 'sdk/include/loom'):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, p)):
            return p
    return None


def plugin_keys(root):
    keys = set()
    getter = re.compile(r'opt_(?:int|double|bool|string|object)\s*\([^;]*?"([A-Za-z_0-9.]+)"', re.S)
    checked = re.compile(r'opt_check_keys\s*\([^;]*?,[^;]*?,\s*(\w+)\s*\)')
    for path, text in sources(root, 'plugins'):
        code = strip_comments(text)
        keys.update(getter.findall(code))
        for name in set(checked.findall(code)):
            for body in re.findall(r'\b' + name + r'\s*\[\s*\]\s*=\s*\{([^}]*)\}', code):
                keys.update(LITERAL.findall(body))
    return keys


def check(root):
    bad = []
    for path, text in sources(root, 'sdk/include'):
        for kind, name in INCLUDE.findall(text):
            t = os.path.normpath(os.path.join(os.path.dirname(path), name))
            if kind == '"' and (not t.startswith('sdk/include/')
                                or not os.path.isfile(os.path.join(root, t))):
                bad.append(f"{path}: includes \"{name}\", not an SDK header")
    for path, text in sources(root, 'plugins'):
        parts = path.split('/')
        own = '/'.join(parts[:3]) + '/'
        kind_dir = '/'.join(parts[:2]) + '/'
        for kind, name in INCLUDE.findall(text):
            if kind == '<':
                continue
            t = resolve(root, path, name)
            if t is None:
                continue
            if not (t.startswith(own) or (t.startswith(kind_dir) and t.count('/') == 2)
                    or t.startswith('sdk/include/')):
                bad.append(f"{path}: includes {t}: a plugin includes only the SDK, its own "
                           f"folder and {kind_dir}*.h")
    for path, text in sources(root, 'core'):
        in_cli = path.startswith('core/cli/')
        for kind, name in INCLUDE.findall(text):
            if kind == '<':
                continue
            t = resolve(root, path, name)
            if t is None:
                continue
            if t.startswith('plugins/') or t.startswith('tests/'):
                bad.append(f"{path}: includes {t}: core/ includes no plugin or test file")
            elif t.startswith('core/cli/') and not in_cli:
                bad.append(f"{path}: includes {t}: the runtime never includes the commands")
            elif t.startswith('core/'):
                a, b = path.split('/')[1], t.split('/')[1]
                if a == b:
                    continue
                if a not in LAYER_OF or b not in LAYER_OF:
                    bad.append(f"{path}: core/{a if a not in LAYER_OF else b}/ is in no layer: "
                               "add it to CORE_LAYERS (and docs/architecture.md)")
                elif LAYER_OF[b] >= LAYER_OF[a]:
                    bad.append(f"{path}: includes {t}: core/{b}/ is not below core/{a}/ "
                               f"({' <- '.join('/'.join(l) for l in CORE_LAYERS)})")
    cm = os.path.join(root, 'core/CMakeLists.txt')
    if os.path.isfile(cm):
        for i, line in enumerate(open(cm), 1):
            code = line.split('#', 1)[0]
            if 'plugins/' in code:
                bad.append(f"core/CMakeLists.txt:{i}: names a plugin source: {line.strip()}")
    keys = plugin_keys(root) - set(OWN_KEYS)
    for path, text in sources(root, 'core'):
        if path in TRANSLATORS:
            continue
        code = strip_comments(text)
        for lit in sorted(set(LITERAL.findall(code)) & keys):
            bad.append(f"{path}: the string \"{lit}\" is a plugin's option key: the host must "
                       "not read plugins' options (ask the plugin through its ABI)")
    return bad


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        def put(p, s):
            os.makedirs(os.path.dirname(os.path.join(root, p)), exist_ok=True)
            open(os.path.join(root, p), 'w').write(s)
        put('sdk/include/loom/a_v1.h', '#include "b_v1.h"\n')
        put('sdk/include/loom/b_v1.h', '\n')
        put('plugins/parallel/x/x.c', '#include <loom/loom.h>\n#include "x.h"\n#include "../shared.h"\n'
            'static const char *const keys[] = {"bucket_mb", NULL}; f(){opt_check_keys(h,o,keys);}\n')
        put('plugins/parallel/x/x.h', '\n')
        put('plugins/parallel/shared.h', '\n')
        put('core/runtime/r.c', '#include "r.h"\n#include "util/u.h"\n'
            '/* "bucket_mb" in a comment is fine */\n')
        put('core/util/u.h', '\n')
        put('core/runtime/r.h', '\n')
        put('core/cli/c.c', '#include "runtime/r.h"\n')
        put('core/CMakeLists.txt', 'add_library(x r.c) # not plugins/ here\n')
        assert check(root) == [], check(root)
        put('plugins/parallel/x/y.c', '#include "../../../core/runtime/r.h"\n')
        put('core/runtime/s.c', '#include "cli/c.h"\n#include "../../plugins/parallel/x/x.h"\n'
            'const char *k = "bucket_mb";\n')
        put('core/cli/c.h', '\n')
        put('core/util/v.c', '#include "../runtime/r.h"\n')
        put('core/data/d.c', '#include "monitor/m.h"\n')
        put('core/monitor/m.h', '\n')
        put('core/CMakeLists.txt', 'add_library(x r.c ../plugins/parallel/x/x.c)\n')
        put('sdk/include/loom/c_v1.h', '#include "../../../core/runtime/r.h"\n')
        got = check(root)
        want = ['plugins/parallel/x/y.c', 'core/runtime/s.c: includes core/cli/c.h',
                'core/runtime/s.c: includes plugins/', 'core/CMakeLists.txt:1',
                'core/runtime/s.c: the string "bucket_mb"', 'sdk/include/loom/c_v1.h',
                'core/util/v.c: includes core/runtime/r.h: core/runtime/ is not below',
                'core/data/d.c: includes core/monitor/m.h: core/monitor/ is not below']
        for w in want:
            assert any(w in g for g in got), (w, got)
        assert len(got) == len(want), got
    print("check_layers self-test: ok")


if __name__ == '__main__':
    if sys.argv[1:] == ['--self-test']:
        self_test()
        sys.exit(0)
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))
    bad = check(root)
    for b in bad:
        print(b)
    print(f"check_layers: {len(bad)} violation(s)" if bad else "check_layers: every layer rule holds")
    sys.exit(1 if bad else 0)
