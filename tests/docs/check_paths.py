#!/usr/bin/env python3
"""Every path into the repository that the Markdown files name — `tests/integration/resume.sh`,
plugins/comm/mpi/, configs/tiny.json — exists, so moving or renaming a file cannot leave the
docs pointing at nothing. A path is a word starting with one of the repository's top-level
folders; it counts as existing when it is a file or folder of the tree, or a program built
from one (file_loss for file_loss.c). Read: the prose and ```sh blocks; other fenced blocks
(program output, JSON) may show example paths.

usage: check_paths.py ROOT     (the tree: what git tracks plus untracked files it does not
                                ignore; without git the check is skipped, exit 77)"""
import re
import subprocess
import sys

TOP = ('.ci', 'bench', 'configs', 'core', 'docs', 'plugins', 'sdk', 'tests', 'tools')
# Paths a page may name before they exist (none now; add one only with the change that creates
# it close behind).
PLANNED = set()
# Example names the docs give a config of the reader's own.
EXAMPLES = {'configs/x.json'}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    try:
        out = subprocess.run(['git', '-C', root, 'ls-files', '--cached', '--others', '--exclude-standard'],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f'SKIP: {root} is not a git work tree ({e})')
        sys.exit(77)
    files = out.split('\n')
    known = set()
    for f in files:
        parts = f.split('/')
        for i in range(1, len(parts) + 1):
            known.add('/'.join(parts[:i]))
        stem = f.rsplit('.', 1)[0]
        if '/' in stem:
            known.add(stem)  # a program built from it
    word = re.compile(r'(?<![\w/.~$-])((?:%s)/[\w./-]*)' % '|'.join(re.escape(t) for t in TOP))
    bad = checked = 0
    for md in (f for f in files if f.endswith('.md')):
        fence = None
        for n, line in enumerate(open(f'{root}/{md}', encoding='utf-8'), 1):
            if line.startswith('```'):
                fence = None if fence is not None else line[3:].strip()
                continue
            if fence not in (None, 'sh'):
                continue
            for m in word.finditer(line):
                p = m.group(1).rstrip('.-/')
                if line[m.end():m.end() + 1] in ('{', '*') or p in PLANNED | EXAMPLES:
                    continue  # brace lists and globs (parallel/{ddp,zero}/, cpu_*.c) name several
                checked += 1
                if p not in known:
                    print(f'FAIL: {md}:{n}: names {p}, which is not in the tree')
                    bad += 1
    print(f'{checked} paths checked')
    if bad:
        sys.exit(1)
    print('ok: every path the docs name exists')


if __name__ == '__main__':
    main()
