/* The plots of loom compare and loom report, drawn by gnuplot (Debian's gnuplot-nox; cairo's
 * pngcairo terminal and the svg terminal): loss (train lines, validation points) and tokens/s
 * against step, one line per run; peak memory by category (the largest over ranks) and
 * communication bytes per step as bars, one bar per run. Each plot is written as NAME.png and
 * NAME.svg into dir; the data files and the gnuplot script stay there too (plots.gp), so a plot
 * can be restyled by hand. */
#ifndef LOOM_CORE_PLOTS_H
#define LOOM_CORE_PLOTS_H

#include <stddef.h>

#include "run_metrics.h"

/* The plots' base names, in page order. */
extern const char *const loom_plot_names[4];

/* Draw the plots of runs[0..n) into dir (created). 0, or -1 + err (naming gnuplot's log when
 * gnuplot fails or is missing). LOOM_GNUPLOT overrides the gnuplot executable. */
int loom_plots_draw(const char *dir, const loom_run_metrics *runs, int n, char *err,
                    size_t errlen);

#endif
