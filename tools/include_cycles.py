#!/usr/bin/env python3
"""Find include circles between the source files of core/ and of each plugin.

A circle is two or more .c/.cu files that need each other through their headers: file A calls a
function (or reads a global) that file B defines and that A sees through an `#include "..."` (a
header A includes, directly or through other headers), and B, in the same way, needs A, perhaps
through other files (A -> B -> C -> A). Such files cannot be understood, tested or replaced one
at a time; the fix is to move what both need into a file of its own (cuda_check.c) or to move
the function to the file that uses it (sample.c's caller).

What one "unit" is: the files linked together. core/ (loomcore and main.c) is one; every
plugin folder (plugins/<kind>/<name>/) is its own, since a plugin links nothing of the core.
Headers included with <...> (the SDK, system headers) carry no edges: they are outside the unit.

The parse is lexical, not a compiler's: comments, strings and preprocessor lines are dropped,
top-level definitions are found by brace depth, `static` ones are file-private. Enough for this
tree's style; a definition it misses only hides an edge, it never invents one.

Usage: include_cycles.py [ROOT]   (default: the repository this script lives in)
       include_cycles.py --self-test (the check on small made-up trees)
Exit status 0: no circle outside ALLOWED; 1: the circles found, each with the symbols that close
it, are printed.
"""
import os
import re
import sys

# Circles known and owned by another change, as sets of paths relative to ROOT. Empty this
# list once they are fixed: an allowed circle that no longer exists is reported too, so the
# list cannot go stale.
ALLOWED = [
]

TOKEN = re.compile(r'[A-Za-z_]\w*|\d[\w.]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|\S')
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
KEYWORDS = set("""auto break case char const continue default do double else enum extern float for
goto if inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while _Bool _Atomic _Noreturn _Static_assert _Thread_local
__attribute__ __restrict __inline __extension__ __typeof__ typeof""".split())


def strip(text):
    """The text without comments and preprocessor lines (line structure kept)."""
    text = re.sub(r'/\*.*?\*/', lambda m: re.sub(r'[^\n]', ' ', m.group()), text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    out = []
    cont = False
    for line in text.split('\n'):
        pre = cont or line.lstrip().startswith('#')
        cont = pre and line.rstrip().endswith('\\')
        out.append('' if pre else line)
    return '\n'.join(out)


def tokens(text):
    return TOKEN.findall(strip(text))


def skip_group(toks, i, open_, close):
    """Index after the group opened at toks[i]."""
    depth = 0
    while i < len(toks):
        if toks[i] == open_:
            depth += 1
        elif toks[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def top_level(toks):
    """(external definitions, declarations) of a file: names of non-static functions and globals
    it defines, and of functions and extern globals it declares without defining."""
    defs, decls = set(), set()
    decl = []  # tokens of the current top-level declaration
    i = 0
    while i < len(toks):
        t = toks[i]
        if t == '__attribute__' or t == '__declspec':
            i = skip_group(toks, i + 1, '(', ')')
            continue
        if t == 'extern' and i + 1 < len(toks) and toks[i + 1].startswith('"'):
            # extern "C" { ... } in headers shared with C++: its braces are not a body
            if i + 2 < len(toks) and toks[i + 2] == '{':
                i += 3
                continue
            i += 2
            continue
        if t == '}' and not decl:  # the end of an extern "C" block
            i += 1
            continue
        if t == '(':
            j = skip_group(toks, i, '(', ')')
            decl.append(('()', toks[i - 1] if i > 0 else ''))
            i = j
            continue
        if t == '{':
            words = [d for d in decl if isinstance(d, str)]
            calls = [d for d in decl if isinstance(d, tuple)]
            if '=' not in words and calls:  # a function's body
                name = calls[0][1]
                if re.match(r'[A-Za-z_]\w*$', name) and name not in KEYWORDS \
                        and 'static' not in words:
                    defs.add(name)
                decl = []
            # else an initializer or a struct/union/enum body: the declaration goes on to ';'
            i = skip_group(toks, i, '{', '}')
            continue
        if t == ';':
            eq = decl.index('=') if '=' in decl else len(decl)
            head = decl[:eq]
            words = [d for d in decl if isinstance(d, str)]
            calls = [d for d in head if isinstance(d, tuple)]
            if words and 'typedef' not in words:
                if calls:  # a prototype (or a function pointer: its name is a keyword here)
                    name = calls[0][1]
                    if re.match(r'[A-Za-z_]\w*$', name) and name not in KEYWORDS:
                        decls.add(name)
                else:  # a global: the identifier before '=' or ';' (arrays: before '[')
                    if '[' in head:
                        head = head[:head.index('[')]
                    names = [w for w in head if isinstance(w, str)
                             and re.match(r'[A-Za-z_]\w*$', w) and w not in KEYWORDS]
                    if names and 'static' not in words:
                        (decls if 'extern' in words else defs).add(names[-1])
                        decls.add(names[-1])
            decl = []
            i += 1
            continue
        decl.append(t)
        i += 1
    return defs, decls


def units(root):
    """{unit name: [paths of its sources and headers]}"""
    out = {}
    for top in ('core', 'plugins'):
        for dirpath, dirnames, files in os.walk(os.path.join(root, top)):
            dirnames.sort()
            rel = os.path.relpath(dirpath, root).split(os.sep)
            unit = 'core' if rel[0] == 'core' else '/'.join(rel[:3])
            if rel[0] == 'plugins' and len(rel) < 3:
                continue
            for f in sorted(files):
                if f.endswith(('.c', '.h', '.cu')):
                    out.setdefault(unit, []).append(os.path.join(dirpath, f))
    return out


def find_cycles(root):
    root = os.path.abspath(root)
    text = {}

    def read(p):
        if p not in text:
            with open(p, encoding='utf-8', errors='replace') as f:
                text[p] = f.read()
        return text[p]

    def includes(p):
        """Headers p includes with "...", resolved against its folder, then core/ (loomcore's
        include root); the closure over nested includes."""
        seen, todo = [], [p]
        while todo:
            q = todo.pop()
            for inc in INCLUDE.findall(read(q)):
                for base in (os.path.dirname(q), os.path.join(root, 'core')):
                    h = os.path.normpath(os.path.join(base, inc))
                    if os.path.isfile(h):
                        if h not in seen:
                            seen.append(h)
                            todo.append(h)
                        break
        return seen

    cycles = []
    for unit, paths in sorted(units(root).items()):
        sources = [p for p in paths if not p.endswith('.h')]
        info = {p: (set(tokens(read(p))),) + top_level(tokens(read(p))) for p in paths}
        definer = {}
        for p in sources:
            for name in info[p][1]:
                definer.setdefault(name, p)
        edges = {p: {} for p in sources}
        for a in sources:
            seen_decls = set()
            for h in includes(a):
                if h in info:
                    seen_decls |= info[h][2]
            for name in (seen_decls & info[a][0]):
                b = definer.get(name)
                if b and b != a and b in edges:
                    edges[a].setdefault(b, []).append(name)
        for comp in strongly_connected(edges):
            if len(comp) > 1:
                cycles.append((unit, comp, edges))
    return root, cycles


def strongly_connected(edges):
    """Tarjan's algorithm, iterative; components in a stable order."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def report(root, cycles, allowed):
    """Print the circles; the number of problems (circles not allowed, stale allowances)."""
    rel = lambda p: os.path.relpath(p, root)
    allowed = [frozenset(a) for a in allowed]
    allowed_seen = set()
    bad = 0
    for unit, comp, edges in cycles:
        key = frozenset(rel(p) for p in comp)
        if key in allowed:
            allowed_seen.add(key)
            print(f"include_cycles: allowed (see ALLOWED): {' <-> '.join(sorted(key))}")
            continue
        bad += 1
        print(f"include_cycles: {unit}: a circle of {len(comp)} files:")
        for a in comp:
            for b, names in sorted(edges[a].items()):
                if b in comp:
                    print(f"  {rel(a)} -> {rel(b)}  (uses {', '.join(sorted(set(names))[:4])})")
    for a in allowed:
        if a not in allowed_seen:
            bad += 1
            print(f"include_cycles: ALLOWED lists {' <-> '.join(sorted(a))}, which is no "
                  "longer a circle: remove it from the list")
    return bad


def self_test():
    """The check on small made-up trees: it finds a circle through headers, and only that."""
    import tempfile
    files = {
        # a circle through the headers: a.c calls b_run (b.h), b.c calls a_helper (a.h)
        'core/x/a.h': 'int a_helper(int x);\n',
        'core/x/a.c': '#include "a.h"\n#include "b.h"\nint a_helper(int x) { return x; }\n'
                      'int a_main(void) { return b_run(); }\n',
        'core/x/b.h': '#include <stdio.h>\nint b_run(void);\n',
        'core/x/b.c': '#include "b.h"\n#include "../x/a.h"\n'
                      'int b_run(void) { return a_helper(1); }\n',
        # a chain, not a circle: c.c uses a.c, nothing uses c.c
        'core/y/c.c': '#include "x/a.h"\nstatic int b_run(void) { return a_helper(2); }\n',
        # a plugin is its own unit: the same names there are no edge into core
        'plugins/kind/p/p.h': 'int a_helper(int x);\nint p_main(void);\n',
        'plugins/kind/p/p.c': '#include "p.h"\n/* b_run() */ int p_main(void) { return 0; }\n'
                              '__attribute__((unused)) static int a_helper2(void) { return 1; }\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            with open(os.path.join(root, name), 'w') as f:
                f.write(text)
        root, cycles = find_cycles(root)
        found = [sorted(os.path.relpath(p, root) for p in comp) for _, comp, _ in cycles]
        want = [['core/x/a.c', 'core/x/b.c']]
        if found != want:
            print(f"include_cycles --self-test: found {found}, expected {want}")
            return 1
        if report(root, cycles, [{'core/x/a.c', 'core/x/b.c'}]) != 0 or \
                report(root, [], [{'core/x/a.c', 'core/x/b.c'}]) != 1:
            print("include_cycles --self-test: the allowlist is not applied as documented")
            return 1
    print("include_cycles --self-test: a circle through headers is found, a chain is not")
    return 0


def main():
    if sys.argv[1:2] == ['--self-test']:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
    root, cycles = find_cycles(root)
    bad = report(root, cycles, ALLOWED)
    if bad:
        print(f"include_cycles: {bad} problem(s). Break a circle by moving what both files "
              "need into a file of its own (tools/include_cycles.py says why)")
        return 1
    print("include_cycles: no include circle in core/ or plugins/")
    return 0


if __name__ == '__main__':
    sys.exit(main())
