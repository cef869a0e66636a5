"""The GPT-2 reference with GPT-2's own regex semantics: OpenAI's encoder.py algorithm (byte to
unicode table, BPE by merge rank) over its pre-tokenising pattern run by Python's `regex`
module, as encoder.py runs it. One line of ids per file.

    python3 gpt2_encode.py GPT2_DIR FILE...     (GPT2_DIR: encoder.json and vocab.bpe)

Written from the algorithm's description (Radford et al. 2019, section 2.2; encoder.py), not
copied; what it must agree with is the ids GPT-2 itself produced for its training data."""
import json
import os
import sys

import regex

PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def byte_table():
    """Each byte's printable stand-in: printable Latin-1 bytes stand for themselves, the other
    bytes for the code points from 256 up, in byte order (encoder.py's bytes_to_unicode)."""
    keep = [b for b in range(256)
            if ord('!') <= b <= ord('~') or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class Gpt2:
    def __init__(self, d):
        with open(os.path.join(d, 'encoder.json'), encoding='utf-8') as f:
            self.ids = json.load(f)
        with open(os.path.join(d, 'vocab.bpe'), encoding='utf-8') as f:
            lines = f.read().split('\n')[1:]  # the first line is a version comment
        self.rank = {tuple(l.split()): i for i, l in enumerate(l for l in lines if l.strip())}
        self.table = byte_table()
        self.cache = {}

    def bpe(self, word):
        """The merges of `word` (a tuple of symbols): the lowest-ranked adjacent pair first,
        every occurrence of it at once, until no adjacent pair has a rank."""
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            pairs = {(parts[i], parts[i + 1]) for i in range(len(parts) - 1)}
            best = min(pairs, key=lambda p: self.rank.get(p, float('inf')))
            if best not in self.rank:
                break
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        self.cache[word] = parts
        return parts

    def encode(self, text):
        out = []
        for piece in PATTERN.findall(text):
            word = tuple(self.table[b] for b in piece.encode('utf-8'))
            out += [self.ids[s] for s in self.bpe(word)]
        return out


def main():
    g = Gpt2(sys.argv[1])
    for path in sys.argv[2:]:
        with open(path, encoding='utf-8', newline='') as f:
            print(' '.join(map(str, g.encode(f.read()))))


if __name__ == '__main__':
    main()
