#!/usr/bin/env python3
"""The layout sections cannot go stale: every folder of the tree down to DEPTH levels (and every
plugin, plugins/<kind>/<name>/) must have its line in the section, and every line must name a
folder that exists.

usage: check_layout.py ROOT FILE:DEPTH[:plugins] ...
  e.g. check_layout.py . docs/architecture.md:2:plugins README.md:1

The section is the first fenced block after the heading "## Layout" of FILE. An entry line starts
with a path ending in '/', relative to the nearest line above it that is indented less; `{a,b}/`
stands for the siblings a/ and b/. Other lines (continuations) are not read. The tree is what git
tracks plus untracked files it does not ignore, so a folder just created is held to it too;
without git (an exported tarball) the check is skipped (exit 77)."""
import re
import subprocess
import sys


def tree_dirs(root):
    try:
        out = subprocess.run(['git', '-C', root, 'ls-files', '--cached', '--others', '--exclude-standard'],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f'SKIP: {root} is not a git work tree ({e})')
        sys.exit(77)
    dirs = set()
    for f in out.splitlines():
        parts = f.split('/')[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add('/'.join(parts[:i]))
    return dirs


def expand(token):
    m = re.search(r'\{([^{}]*)\}', token)
    if not m:
        return [token]
    return [x for alt in m.group(1).split(',')
            for x in expand(token[:m.start()] + alt + token[m.end():])]


def section(path):
    """(line number, indent, token) of every entry line of FILE's "## Layout" block."""
    lines = open(path, encoding='utf-8').read().split('\n')
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == '## Layout')
    except StopIteration:
        sys.exit(f'FAIL: {path}: no "## Layout" heading')
    i = start + 1
    while i < len(lines) and not lines[i].startswith('```'):
        if lines[i].startswith('#'):
            sys.exit(f'FAIL: {path}:{start + 1}: the Layout section has no fenced block before the next heading')
        i += 1
    entries = []
    for j in range(i + 1, len(lines)):
        l = lines[j]
        if l.startswith('```'):
            return entries
        tok = l.split()[0] if l.strip() else ''
        if tok.endswith('/'):
            entries.append((j + 1, len(l) - len(l.lstrip(' ')), tok))
    sys.exit(f'FAIL: {path}:{i + 1}: the Layout block is not closed')


def documented(path):
    """{folder: line} for every folder FILE's section names, resolved against its parents."""
    stack, named = [], {}  # stack of (indent, [parent paths])
    for lineno, indent, tok in section(path):
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parents = stack[-1][1] if stack else ['']
        paths = [(p + '/' if p else '') + t.strip('/') for p in parents for t in expand(tok)]
        for p in paths:
            named[p] = lineno
        stack.append((indent, paths))
    return named


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    root = sys.argv[1]
    dirs = tree_dirs(root)
    bad = 0
    for spec in sys.argv[2:]:
        fname, depth, *opt = spec.split(':')
        depth = int(depth)
        named = documented(f'{root}/{fname}')
        covered = set(named)
        for p in named:  # a line for comm/mpi/ also covers comm/
            parts = p.split('/')
            covered.update('/'.join(parts[:i]) for i in range(1, len(parts)))
        want = {d for d in dirs if d.count('/') < depth}
        if 'plugins' in opt:
            want |= {d for d in dirs if d.startswith('plugins/') and d.count('/') == 2}
        for d in sorted(want - covered):
            print(f'FAIL: {fname}: the Layout section has no line for {d}/ (add one saying what it holds)')
            bad += 1
        for p, lineno in sorted(named.items()):
            if p not in dirs:
                print(f'FAIL: {fname}:{lineno}: the Layout section names {p}/, which is not in the tree')
                bad += 1
        print(f'{fname}: {len(named)} folders named, {len(want)} required (depth {depth}'
              f'{", every plugin" if "plugins" in opt else ""})')
    if bad:
        sys.exit(1)
    print('ok: the layout sections match the tree')


if __name__ == '__main__':
    main()
