#include "html_page.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plots.h"

/* Append file `path` base64-encoded to out. 0 or -1 (errno). */
static int base64_file(FILE *out, const char *path) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  unsigned char in[3];
  size_t n;
  while ((n = fread(in, 1, 3, f)) > 0) {
    unsigned v = (unsigned)in[0] << 16 | (n > 1 ? (unsigned)in[1] << 8 : 0) | (n > 2 ? in[2] : 0);
    fputc(tab[v >> 18 & 63], out);
    fputc(tab[v >> 12 & 63], out);
    fputc(n > 1 ? tab[v >> 6 & 63] : '=', out);
    fputc(n > 2 ? tab[v & 63] : '=', out);
    if (n < 3) break;
  }
  int bad = ferror(f);
  fclose(f);
  return bad ? -1 : 0;
}

int loom_html_page_write(const char *path, const char *title, const loom_table *t,
                         const char *plot_dir, char *err, size_t errlen) {
  FILE *out = fopen(path, "w");
  if (!out) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  fprintf(out,
          "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>%s</title>\n"
          "<style>body{font-family:sans-serif;margin:2em;color:#222}"
          "table{border-collapse:collapse;margin-bottom:2em}"
          "th,td{border:1px solid #ccc;padding:4px 10px;text-align:right;"
          "font-variant-numeric:tabular-nums}th{background:#f4f4f4}"
          "tr>th:first-child{text-align:left}"
          "img{max-width:100%%;border:1px solid #eee;margin:0.5em 0}</style>\n"
          "</head><body>\n<h1>%s</h1>\n",
          title, title);
  loom_table_html(out, t);
  for (int p = 0; p < 4; p++) {
    char svg[4200];
    snprintf(svg, sizeof svg, "%s/%s.svg", plot_dir, loom_plot_names[p]);
    fprintf(out, "<h2>%s</h2>\n<img alt=\"%s\" src=\"data:image/svg+xml;base64,",
            loom_plot_names[p], loom_plot_names[p]);
    if (base64_file(out, svg) != 0) {
      snprintf(err, errlen, "cannot read %s: %s", svg, strerror(errno));
      fclose(out);
      return -1;
    }
    fputs("\">\n", out);
  }
  fputs("<script>\nwindow.addEventListener('load', function () {\n"
        "  var imgs = document.images, ok = 0;\n"
        "  for (var i = 0; i < imgs.length; i++)\n"
        "    if (imgs[i].complete && imgs[i].naturalWidth > 0) ok++;\n"
        "  document.documentElement.setAttribute('data-images-loaded', ok + '/' + imgs.length);\n"
        "});\n</script>\n</body></html>\n",
        out);
  int bad = ferror(out);
  if (fclose(out) != 0 || bad) {
    snprintf(err, errlen, "writing %s failed: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}
