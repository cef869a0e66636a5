// The reference: the npm gpt-3-encoder's encode() of each file, one line of ids per file.
//   node gpt2_encode.js PACKAGE_DIR FILE...
// gpt-3-encoder appends each word's tokens with Array.concat, quadratic in a file's tokens (a
// 400 KB fortune file would take minutes), so the text is handed to encode() in batches of
// ~4 KB cut between two of its own pre-tokeniser's matches, after one that does not end in white
// space: its regex has no look-behind and only the white-space alternatives look ahead, so
// encode() cuts each batch exactly as it cuts the whole text and the ids are the same.
const fs = require('fs');
const path = require('path');
const dir = process.argv[2];
const { encode } = require(dir);
const src = fs.readFileSync(path.join(dir, 'Encoder.js'), 'utf8');
const m = src.match(/^const pat = (\/.*\/gu)$/m);
if (!m) { console.error(`${dir}/Encoder.js: no "const pat = /.../gu" line`); process.exit(1); }
const pat = eval(m[1]);
for (const f of process.argv.slice(3)) {
  const text = fs.readFileSync(f, 'utf8');
  const out = [];
  let batch = '';
  for (const match of text.matchAll(pat)) {
    batch += match[0];
    if (batch.length >= 4096 && !/\s$/u.test(match[0])) {
      for (const id of encode(batch)) out.push(id);
      batch = '';
    }
  }
  if (batch) for (const id of encode(batch)) out.push(id);
  console.log(out.join(' '));
}
