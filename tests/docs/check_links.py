#!/usr/bin/env python3
"""Every relative link in the tree's Markdown files points at a file that exists and, for a
'#anchor' into a .md page, at one of its headings (GitHub's slugs) or an <a id="...">, so
moving a section or a page cannot leave a dead link behind.

usage: check_links.py ROOT     (files: what git tracks plus untracked files it does not ignore;
                                without git the check is skipped, exit 77)"""
import os
import re
import subprocess
import sys


def slug(heading):
    h = re.sub(r'[^\w\- ]', '', heading.strip().lower())
    return h.replace(' ', '-')


_anchors = {}


def anchors(path):
    if path not in _anchors:
        found, fenced = set(), False
        for line in open(path, encoding='utf-8'):
            if line.startswith('```'):
                fenced = not fenced
            if fenced:
                continue
            if re.match(r'#{1,6} ', line):
                base = s = slug(line.lstrip('#'))
                n = 0
                while s in found:  # GitHub numbers repeated headings: x, x-1, x-2
                    n += 1
                    s = f'{base}-{n}'
                found.add(s)
            found.update(re.findall(r'<a (?:id|name)="([^"]+)"', line))
        _anchors[path] = found
    return _anchors[path]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    try:
        out = subprocess.run(['git', '-C', root, 'ls-files', '--cached', '--others',
                              '--exclude-standard', '*.md'],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f'SKIP: {root} is not a git work tree ({e})')
        sys.exit(77)
    bad = links = 0
    for f in out.split():
        path = os.path.join(root, f)
        text = re.sub(r'```.*?```', '', open(path, encoding='utf-8').read(), flags=re.S)
        text = re.sub(r'`[^`\n]*`', '', text)  # code spans are not links
        for m in re.finditer(r'\]\(([^)\s]+)\)', text):
            target = m.group(1)
            if re.match(r'[a-z][a-z0-9+.-]*:', target):  # http:, mailto:
                continue
            links += 1
            file, _, anchor = target.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(dest):
                print(f'FAIL: {f}: link to {target}: no such file')
                bad += 1
            elif anchor and dest.endswith('.md') and anchor not in anchors(dest):
                print(f'FAIL: {f}: link to {target}: {os.path.relpath(dest, root)} has no '
                      f'heading or <a id> "{anchor}"')
                bad += 1
    print(f'{links} relative links checked')
    if bad:
        sys.exit(1)
    print('ok: every relative link resolves')


if __name__ == '__main__':
    main()
