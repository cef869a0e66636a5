/* The one self-contained HTML page of loom compare / loom report: the table and the plots
 * (each SVG embedded as a data: URI, so the page can be mailed or attached to a CI job alone).
 * On load the page counts its images that decoded and sets
 * <html data-images-loaded="K/N">, which the headless-browser test reads. */
#ifndef LOOM_CORE_HTML_PAGE_H
#define LOOM_CORE_HTML_PAGE_H

#include <stddef.h>

#include "compare_table.h"

/* Write `path` with `title`, the table t and the plots plot_dir/NAME.svg (loom_plot_names).
 * 0, or -1 + err. */
int loom_html_page_write(const char *path, const char *title, const loom_table *t,
                         const char *plot_dir, char *err, size_t errlen);

#endif
