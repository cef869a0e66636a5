/* file_loss: loom's forward loss on fixed tokens with the parameters of a model file, for the
 * export tests (tests/integration/lib/check_export.py recomputes it in torch from the same file).
 *
 * Usage: file_loss MODEL safetensors|llmc V maxT L NH C TOKENS B T
 *   MODEL    a file `loom export` wrote (or any GPT-2 file of these dimensions)
 *   TOKENS   B*T + 1 int32 token ids (native little-endian): inputs are tokens[0 .. B*T),
 *            targets tokens[1 .. B*T] (the sequences are consecutive rows of one stream)
 * Prints "loss %.9g" (the mean cross-entropy over the B*T positions) on stdout. The parameters
 * go through init_from's reader (formats/model_files.h) into a one-rank model on the CPU
 * device: the path a run's init_from takes. */
#include <stdio.h>
#include <stdlib.h>

#include "device/device.h"
#include "formats/gpt2_layout.h"
#include "formats/model_files.h"
#include "model/gpt.h"

int main(int argc, char **argv) {
  if (argc != 11) {
    fprintf(stderr, "usage: %s MODEL safetensors|llmc V maxT L NH C TOKENS B T\n", argv[0]);
    return 2;
  }
  int d[5];
  for (int i = 0; i < 5; i++) d[i] = atoi(argv[3 + i]);
  const int B = atoi(argv[9]), T = atoi(argv[10]);
  int format = loom__model_format(argv[2]);
  gpt_config cfg = {.vocab_size = d[0], .max_seq_len = d[1], .n_layer = d[2], .n_head = d[3],
                    .n_embd = d[4]};
  char err[1024];
  loom_dev dev;
  gpt_model m, table;
  if (format < 0 || B < 1 || T < 1 || T > cfg.max_seq_len) {
    fprintf(stderr, "file_loss: bad format, B or T\n");
    return 2;
  }
  if (loom__dev_open(&dev, loom__cpu_device(), "{}", 0, err, sizeof err) != LOOM_OK ||
      gpt_init(&m, &cfg, &dev, err, sizeof err) != LOOM_OK ||
      loom__gpt2_table(&table, d[0], d[1], d[2], d[3], d[4], err, sizeof err) != 0) {
    fprintf(stderr, "file_loss: %s\n", err);
    return 1;
  }
  loom_model_file *f = loom__model_file_open(argv[1], (loom_model_format)format, &table, err,
                                             sizeof err);
  if (!f || loom__model_file_fill(f, &m, 0, m.num_parameters, m.params_memory, err,
                                  sizeof err) != 0) {
    fprintf(stderr, "file_loss: %s\n", err);
    return 1;
  }
  loom__model_file_close(f);
  size_t n = (size_t)B * T;
  int32_t *tok = malloc((n + 1) * sizeof *tok);
  FILE *tf = fopen(argv[8], "rb");
  if (!tok || !tf || fread(tok, sizeof *tok, n + 1, tf) != n + 1) {
    fprintf(stderr, "file_loss: cannot read %zu tokens from %s\n", n + 1, argv[8]);
    return 1;
  }
  fclose(tf);
  float loss;
  if (gpt_forward(&m, tok, tok + 1, B, T, NULL, &loss) != LOOM_OK) {
    fprintf(stderr, "file_loss: forward failed (a token id >= V?)\n");
    return 1;
  }
  printf("loss %.9g\n", loss);
  free(tok);
  gpt_free(&table);
  gpt_free(&m);
  loom__dev_close(&dev);
  return 0;
}
