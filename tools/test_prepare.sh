#!/bin/sh
# End-to-end test of loom-prepare on a small tree the test makes: 2 text files, 1 binary file
# (skipped), 1 symlink to a text file (read once). Checks the outputs, the numbers in meta.json,
# the shard headers and contents, the val split rule, stale-shard cleanup and the error paths.
#   usage: test_prepare.sh /path/to/loom-prepare
set -u
BIN=${1:?usage: test_prepare.sh /path/to/loom-prepare}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/loom_prepare_test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0

ok() { echo "ok   - $1"; }
bad() { echo "FAIL - $1"; fails=$((fails + 1)); }
check() { # check DESCRIPTION COMMAND...
  d=$1; shift
  if "$@"; then ok "$d"; else bad "$d"; fi
}
# the integer (or null / real) value of KEY in a flat JSON file
json_val() { sed -n "s/^[[:space:]]*\"$2\": *\([^,]*\),\{0,1\}[[:space:]]*\$/\1/p" "$1"; }
fsize() { wc -c < "$1" | tr -d ' '; }

# ---- the input tree ----
in=$tmp/in
mkdir -p "$in/sub"
awk 'BEGIN { for (i = 0; i < 500; i++)
  printf "line %d: the quick brown fox jumps over the lazy dog\n", i }' > "$in/a.txt"
awk 'BEGIN { for (i = 0; i < 300; i++)
  printf "%%\nfortune %d: a penny saved is a penny earned.\n", i }' > "$in/sub/b.txt"
printf 'BIN\000\001\002binary data\n' > "$in/bin.dat"
ln -s a.txt "$in/z_link.txt"
total=$(( $(fsize "$in/a.txt") + $(fsize "$in/sub/b.txt") ))

# ---- a normal run: val every 2nd block, small shards so there are several ----
out=$tmp/out
"$BIN" --out "$out" --val-every 2 --shard-tokens 4096 "$in" > "$tmp/stdout" 2> "$tmp/stderr"
rc=$?
check "run exits 0 (got $rc)" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || { cat "$tmp/stderr"; exit 1; }
for f in train_000.bin train_001.bin val_000.bin vocab.json meta.json; do
  check "$f written" [ -s "$out/$f" ]
done
check "no temporary files left" [ -z "$(ls "$out" | grep '\.tmp\.')" ]
check "summary mentions the unigram baseline" grep -q "unigram baseline" "$tmp/stdout"
check "binary file skipped with a note" grep -q "bin.dat.*not text" "$tmp/stderr"
check "symlink read once with a note" grep -q "z_link.txt.*read once" "$tmp/stderr"

check "vocab.json is the byte tokenizer" \
  grep -q '"type": "byte", "vocab_size": 256' "$out/vocab.json"

train=$(json_val "$out/meta.json" train_tokens)
val=$(json_val "$out/meta.json" val_tokens)
files=$(json_val "$out/meta.json" files)
vocab=$(json_val "$out/meta.json" vocab_size)
loss=$(json_val "$out/meta.json" unigram_val_loss)
echo "     meta: train=$train val=$val files=$files vocab=$vocab loss=$loss total_bytes=$total"
check "meta: files = 2 (binary skipped, symlink deduped)" [ "$files" = 2 ]
check "meta: vocab_size = 256" [ "$vocab" = 256 ]
check "meta: train + val = bytes of the 2 text files" [ $((train + val)) -eq "$total" ]
# val = the odd-numbered 8 KiB blocks of the stream
expect_val=$(awk -v n="$total" 'BEGIN { v = 0
  for (o = 8192; o < n; o += 16384) v += (n - o < 8192 ? n - o : 8192); print v }')
check "meta: val = every 2nd 8 KiB block ($expect_val)" [ "$val" -eq "$expect_val" ]
check "meta: unigram_val_loss in (0, 8)" awk -v x="$loss" 'BEGIN { exit !(x > 0 && x < 8) }'

# shard headers and sizes agree with meta.json
sum=0
for f in "$out"/train_*.bin; do
  set -- $(od -An -t d4 -N 12 "$f")
  [ "$1" = 20240520 ] && [ "$2" = 1 ] || bad "$f: header $1 $2"
  [ "$(fsize "$f")" -eq $((1024 + 2 * $3)) ] || bad "$f: size vs header count $3"
  sum=$((sum + $3))
done
check "train shard counts sum to train_tokens" [ "$sum" -eq "$train" ]
n_train=$(ls "$out"/train_*.bin | wc -l)
check "train shards: all but the last hold 4096 tokens" \
  [ "$(od -An -t d4 -j 8 -N 4 "$out/train_000.bin" | tr -d ' ')" -eq 4096 ]
last=$(ls "$out"/train_*.bin | tail -n 1)
lastn=$(od -An -t d4 -j 8 -N 4 "$last" | tr -d ' ')
check "last train shard ($n_train shards) holds between N/2 and 1.5N" \
  [ "$lastn" -ge 2048 -a "$lastn" -lt 6144 ]
# tokens are the bytes: the first 64 tokens of train_000 are the first 64 bytes of a.txt
t=$(od -An -v -t u2 -j 1024 -N 128 "$out/train_000.bin" | tr -s ' \n' '  ')
b=$(od -An -v -t u1 -N 64 "$in/a.txt" | tr -s ' \n' '  ')
check "train_000 starts with the bytes of a.txt" [ "$t" = "$b" ]
# the val shard starts with the stream's block 1 (bytes 8192..)
t=$(od -An -v -t u2 -j 1024 -N 32 "$out/val_000.bin" | tr -s ' \n' '  ')
b=$(od -An -v -t u1 -j 8192 -N 16 "$in/a.txt" | tr -s ' \n' '  ')
check "val_000 starts at block 1 of the stream" [ "$t" = "$b" ]

# ---- deterministic: a second run gives the same bytes; bigger shards remove stale ones ----
"$BIN" --out "$tmp/out_again" --val-every 2 --shard-tokens 4096 "$in" > /dev/null 2>&1
check "same input, same shards" cmp -s "$out/train_000.bin" "$tmp/out_again/train_000.bin"
"$BIN" --out "$out" --val-every 2 --shard-tokens 1000000 "$in" > /dev/null 2> "$tmp/stderr2"
check "rerun with bigger shards exits 0" [ $? -eq 0 ]
check "rerun removed the stale train_001.bin" [ ! -e "$out/train_001.bin" ]
check "rerun: one train shard holds all train tokens" \
  [ "$(od -An -t d4 -j 8 -N 4 "$out/train_000.bin" | tr -d ' ')" -eq "$train" ]

# ---- unreadable inputs inside the tree: skipped with a note and counted, the rest prepared ----
cp -r "$in" "$tmp/in_broken"
ln -s gone.txt "$tmp/in_broken/sub/dangling.txt"
ln -s loop1 "$tmp/in_broken/sub/loop2"
ln -s loop2 "$tmp/in_broken/sub/loop1"   # a symlink loop (ELOOP)
"$BIN" --verbose --out "$tmp/out_broken" --val-every 2 --shard-tokens 4096 "$tmp/in_broken" \
  > "$tmp/stdout_b" 2> "$tmp/stderr_b"
check "unreadable inputs: exits 0 (got $?)" [ -s "$tmp/out_broken/meta.json" ]
check "dangling symlink skipped with a note" \
  grep -q "sub/dangling.txt: dangling symlink (its target does not exist), skipped" "$tmp/stderr_b"
check "symlink loop skipped with a note" grep -q "sub/loop1: cannot read: .*, skipped" "$tmp/stderr_b"
check "summary counts 3 unreadable" grep -q ", 3 unreadable" "$tmp/stdout_b"
check "meta: skipped_unreadable = 3" \
  [ "$(json_val "$tmp/out_broken/meta.json" skipped_unreadable)" = 3 ]
check "unreadable inputs: the same shards as without them" \
  cmp -s "$tmp/out_again/train_000.bin" "$tmp/out_broken/train_000.bin"
# a missing path named on the command line stays an error (the user's typo), nothing written
ln -s gone.txt "$tmp/top_dangling.txt"
"$BIN" --out "$tmp/out_top" "$tmp/top_dangling.txt" > /dev/null 2> "$tmp/stderr_t"
check "dangling symlink named on the command line: exits 1 (got $?)" [ ! -e "$tmp/out_top" ]

# ---- small input, default --val-every 20: no val split, null baseline ----
"$BIN" --out "$tmp/small" "$in/a.txt" > "$tmp/stdout3" 2>&1
check "small input exits 0" [ $? -eq 0 ]
check "small input: val_tokens 0" [ "$(json_val "$tmp/small/meta.json" val_tokens)" = 0 ]
check "small input: unigram_val_loss null" \
  [ "$(json_val "$tmp/small/meta.json" unigram_val_loss)" = null ]

# ---- Debian's fortunes, when installed: .dat indexes skipped, .u8 symlinks read once ----
fort=/usr/share/games/fortunes
if [ -d "$fort" ] && [ -n "$(ls "$fort"/*.dat 2>/dev/null)" ]; then
  "$BIN" --out "$tmp/fortunes" "$fort" > "$tmp/fstdout" 2> "$tmp/fquiet"
  check "fortunes: exits 0" [ $? -eq 0 ]
  check "fortunes: skip notes capped without --verbose" \
    [ "$(grep -c 'note:' "$tmp/fquiet")" -le 4 ]
  "$BIN" --verbose --out "$tmp/fortunes" "$fort" > "$tmp/fstdout" 2> "$tmp/fstderr"
  check "fortunes: .dat index files skipped as not text" \
    grep -q '\.dat: holds a NUL byte' "$tmp/fstderr"
  u8=$(ls "$fort"/*.u8 2>/dev/null | head -n 1)
  if [ -n "$u8" ]; then
    check "fortunes: .u8 symlinks read once" grep -q '\.u8: same file as' "$tmp/fstderr"
  fi
  ft=$(json_val "$tmp/fortunes/meta.json" train_tokens)
  fv=$(json_val "$tmp/fortunes/meta.json" val_tokens)
  check "fortunes: train and val both nonempty" [ "${ft:-0}" -gt 0 -a "${fv:-0}" -gt 0 ]
  sed -n 's/^/     /p' "$tmp/fstdout"
else
  echo "skip - $fort not installed"
fi

# ---- errors ----
"$BIN" --out "$tmp/out_bad" "$tmp/nope" > /dev/null 2> "$tmp/err"
rc=$?
check "missing path exits 1 (got $rc)" [ "$rc" -eq 1 ]
check "missing path: one line naming the path" \
  [ "$(wc -l < "$tmp/err")" -eq 1 -a -n "$(grep "$tmp/nope" "$tmp/err")" ]
mkdir -p "$tmp/only_bin"
printf 'x\000y' > "$tmp/only_bin/x.bin"
"$BIN" --out "$tmp/out_empty" "$tmp/only_bin" > /dev/null 2> "$tmp/err"
check "input with no text exits 1" [ $? -eq 1 ]
check "input with no text: message says so" grep -q "no text" "$tmp/err"
"$BIN" "$in" > /dev/null 2> "$tmp/err"
check "missing --out exits 2" [ $? -eq 2 ]
"$BIN" --out "$tmp/o" --val-every x "$in" > /dev/null 2>&1
check "bad --val-every exits 2" [ $? -eq 2 ]
"$BIN" --bogus > /dev/null 2>&1
check "unknown option exits 2" [ $? -eq 2 ]
"$BIN" --help > "$tmp/help" 2>&1
check "--help exits 0 and shows usage" [ $? -eq 0 -a -n "$(grep usage: "$tmp/help")" ]

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all checks passed"
