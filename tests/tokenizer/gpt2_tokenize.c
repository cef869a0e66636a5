/* Test driver: GPT-2 BPE token ids of each file, and the round trip decode(encode(x)) == x.
 *
 *   gpt2_tokenize GPT2_DIR FILE...
 *   gpt2_tokenize --pieces FILE...
 *
 * For each FILE prints one line: its token ids, space-separated (what the test compares with
 * the references' encode() of the same text). Exits 1 with a message naming the file and the
 * first differing byte when the bytes of the ids are not exactly the file's. With --pieces: the
 * pre-tokeniser's pieces instead, as their lengths in bytes (what gpt2_classes.py compares with
 * the reference regex's matches). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/gpt2_pretok.h"
#include "data/tokenizer.h"
#include "util/input_file.h"

/* One line per file: the byte length of each pre-tokeniser piece. */
static int print_pieces(int nfiles, char **files) {
  char err[1024];
  loom_gpt2_pretok *p = loom_gpt2_pretok_create(err, sizeof err);
  if (!p) {
    fprintf(stderr, "gpt2_tokenize: %s\n", err);
    return 1;
  }
  int rc = 0;
  for (int f = 0; f < nfiles && rc == 0; f++) {
    size_t len, pos = 0, start, plen, k = 0;
    char *text = loom__read_regular(files[f], 1u << 30, &len, err, sizeof err);
    if (!text) {
      fprintf(stderr, "gpt2_tokenize: %s\n", err);
      rc = 1;
      break;
    }
    while (loom_gpt2_pretok_next(p, text, len, &pos, &start, &plen))
      printf(k++ ? " %zu" : "%zu", plen);
    printf("\n");
    free(text);
  }
  loom_gpt2_pretok_free(p);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fputs("usage: gpt2_tokenize GPT2_DIR FILE... | gpt2_tokenize --pieces FILE...\n", stderr);
    return 2;
  }
  if (strcmp(argv[1], "--pieces") == 0) return print_pieces(argc - 2, argv + 2);
  char err[1024];
  loom_tokenizer tok;
  if (loom_tokenizer_load_gpt2_files(&tok, argv[1], err, sizeof err) != 0) {
    fprintf(stderr, "gpt2_tokenize: %s\n", err);
    return 1;
  }
  int rc = 0;
  for (int f = 2; f < argc && rc == 0; f++) {
    size_t len;
    char *text = loom__read_regular(argv[f], 1u << 30, &len, err, sizeof err);
    if (!text) {
      fprintf(stderr, "gpt2_tokenize: %s\n", err);
      rc = 1;
      break;
    }
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    unsigned char *back = malloc(len + 1);
    size_t n = ids ? loom_tokenizer_encode(&tok, text, len, ids, len + 1) : SIZE_MAX;
    if (!back || n > len) {
      fprintf(stderr, "gpt2_tokenize: %s: out of memory\n", argv[f]);
      rc = 1;
    }
    size_t o = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
      printf(i ? " %d" : "%d", ids[i]);
      size_t k;
      const unsigned char *b = loom_tokenizer_token_bytes(&tok, ids[i], &k);
      if (!b || o + k > len) {
        fprintf(stderr, "gpt2_tokenize: %s: token %zu (id %d) decodes past the text\n", argv[f],
                i, ids[i]);
        rc = 1;
        break;
      }
      memcpy(back + o, b, k);
      o += k;
    }
    printf("\n");
    if (rc == 0 && (o != len || memcmp(back, text, len) != 0)) {
      size_t d = 0;
      while (d < o && d < len && back[d] == (unsigned char)text[d]) d++;
      fprintf(stderr, "gpt2_tokenize: %s: decode(encode(x)) != x: %zu bytes back of %zu, first "
              "difference at byte %zu\n", argv[f], o, len, d);
      rc = 1;
    }
    free(ids);
    free(back);
    free(text);
  }
  loom_tokenizer_free(&tok);
  return rc;
}
