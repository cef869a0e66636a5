"""GPT-2's pre-tokeniser over all of Unicode: loom's pieces against GPT-2's regex (Python's
`regex`, as encoder.py runs it) for every code point, in a context where the character classes
decide the cut.

    python3 gpt2_classes.py GPT2_TOKENIZE WORKDIR

Each code point c (every Unicode scalar value but "\\n", which separates the records) is put in
the record "x c.\\n". There " c." is cut into [" ", c, "."] when c is white space (\\s), into
[" c", "."] when it is a letter or a digit (\\p{L}, \\p{N}), and is one piece when it is
anything else, so a code point that loom and GPT-2 class differently cuts differently. The
white-space class must agree everywhere (it is spelled out in core/data/gpt2_pretok.c as
Unicode's White_Space, which no Unicode version since 6.3 changed); letters and digits come from
each library's Unicode tables, so code points assigned between PCRE2's and `regex`'s Unicode
versions may differ: they are counted and shown, not failed. Exits 1 on a white-space
difference."""
import subprocess
import sys
import unicodedata

import regex

from gpt2_encode import PATTERN


def main():
    tokenize, work = sys.argv[1], sys.argv[2]
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and c != 0x0A]
    records = ['x ' + chr(c) + '.\n' for c in points]
    text = ''.join(records)
    path = work + '/all_unicode.txt'
    with open(path, 'w', encoding='utf-8', newline='') as f:
        f.write(text)
    out = subprocess.run([tokenize, '--pieces', path], check=True, capture_output=True,
                         text=True).stdout.split()
    loom = [int(n) for n in out]
    ref = [len(p.encode('utf-8')) for p in PATTERN.findall(text)]
    # both as piece boundaries (byte offsets), then per record
    def cuts(lengths):
        at, s = 0, set()
        for n in lengths:
            at += n
            s.add(at)
        return s
    lc, rc = cuts(loom), cuts(ref)
    space_bad, letter_diff, at = [], [], 0
    for c, rec in zip(points, records):
        n = len(rec.encode('utf-8'))
        span = range(at + 1, at + n + 1)
        if any((o in lc) != (o in rc) for o in span):
            w = len(chr(c).encode('utf-8'))
            # loom cut " c." into [" ", c, "."]: loom took c for white space
            loom_space = at + 2 in lc and at + 2 + w in lc
            ref_space = regex.match(r'\s', chr(c)) is not None
            (space_bad if loom_space != ref_space else letter_diff).append(c)
        at += n
    def show(cs):
        return ', '.join(f"U+{c:04X} {unicodedata.category(chr(c))}" for c in cs[:12]) + \
            (f", ... ({len(cs)} in all)" if len(cs) > 12 else '')
    same = len(points) - len(space_bad) - len(letter_diff)
    print(f"pre-tokeniser over {len(points)} code points: {same} cut as GPT-2's regex cuts them")
    if letter_diff:
        print(f"  letters/digits differing by Unicode version (PCRE2's tables vs regex "
              f"{regex.__version__}'s): {show(letter_diff)}")
    if space_bad:
        print(f"FAIL: white space classed differently from GPT-2's \\s: {show(space_bad)}")
        return 1
    print("  white space: identical to GPT-2's \\s (Unicode White_Space) at every code point")
    return 0


if __name__ == '__main__':
    sys.exit(main())
