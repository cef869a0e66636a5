#!/bin/bash
# the README's scripts and docs, not memory safety: the normal build only (label readme)
# ctest: name=readme.readme_sdk_template labels=readme cost=28
# sdk/template/README.md's build block, as written there (extracted, so the docs and this test
# cannot drift): install loom into $HOME/loom (HOME is a scratch dir), build a copy of the
# template against it, list it with the command the README gives, on a PATH without loom, and
# run `loom conformance` on it from that fresh install (the plugin author's whole path).
# Needs: LOOM_BUILD, LOOM_SRC.
set -u
. "$(dirname "$0")/../lib/lib.sh"
readme=$LOOM_SRC/sdk/template/README.md
awk '/readme_sdk_template.sh runs the block below/ { want = 1; next }
     want && /^    / { inside = 1; sub(/^    /, ""); print; next }
     inside { exit }' "$readme" > "$WORK/block.sh"
grep -q "plugins" "$WORK/block.sh" || die "$readme: the build block (after its marker comment) was not found"
sed "s|<loom build>|$LOOM_BUILD|g" "$WORK/block.sh" > "$WORK/run.sh"
echo "== sdk/template/README.md's block:"
cat "$WORK/run.sh"
mkdir -p "$WORK/home"
cp -r "$LOOM_SRC/sdk/template" "$WORK/template"
rm -rf "$WORK/template/build"
# a PATH without loom on it: the README must not assume `loom` is there
path=/usr/local/bin:/usr/bin:/bin
PATH=$path command -v loom > /dev/null && die "loom is on $path: this test cannot tell"
(cd "$WORK/template" && env -u LOOM_PLUGIN_PATH HOME="$WORK/home" PATH="$path" bash -e "$WORK/run.sh") \
  > "$WORK/out.log" 2>&1 || { cat "$WORK/out.log"; die "the README's block failed"; }
grep -E "template.*parallel|parallel.*template" "$WORK/out.log" ||
  { cat "$WORK/out.log"; die "the template plugin is not listed as a parallel plugin"; }
# the block's last step: the conformance battery, from the install, passes on the template
grep -E "^summary: [0-9]+ passed, 0 failed" "$WORK/out.log" ||
  { cat "$WORK/out.log"; die "loom conformance did not pass on the template"; }
grep -q "^PASS  parallel.equivalence.dp2 " "$WORK/out.log" ||
  { cat "$WORK/out.log"; die "loom conformance ran no equivalence check"; }
echo "ok: the template README's commands build, list and pass loom conformance without loom on PATH"
