/* Monitoring: the live progress line on rank 0 and the JSONL metrics file.
 * Each step record: step, loss, lr, grad_norm, tokens_per_s, ms_per_step, eta_s, tokens,
 * comm_bytes (bytes this rank's plugins sent during the step, algorithmic volume; the host's own
 * control messages — the loss average — are not counted), mem_peak_bytes per category (rank 0's) and mem_peak_bytes_max (the largest over all ranks).
 * gflops (model FLOP/s of the whole job) and mfu (when logging.peak_gflops is set).
 * Each eval record: step, val_loss. Every record goes to the JSONL file (logging.metrics) and to
 * TensorBoard (logging.tensorboard, every numeric field a scalar: core/monitor/tb_sink.h).
 * On a terminal the progress line is redrawn in place; elsewhere one line per interval. */
#ifndef LOOM_CORE_METRICS_H
#define LOOM_CORE_METRICS_H

typedef struct loom_trainer loom_trainer;

typedef struct loom_step_metrics {
  int step;
  double loss;      /* mean training loss over the global batch */
  double lr;
  double grad_norm; /* global L2 norm before clipping */
  double seconds;   /* wall time of the step on this rank */
  int skipped;      /* the precision plugin skipped the update */
  double loss_scale;/* the loss scale this step ran with (1 without loss scaling) */
} loom_step_metrics;

/* rank 0: open logging.metrics (0 or -1 + err); a resumed run first drops the records logged
 * after its checkpoint, so each step appears once, and marks its start in TensorBoard (a
 * SessionLog START at the next step: TensorBoard drops the older files' later events). */
int loom_metrics_open(loom_trainer *tr);
void loom_metrics_start(loom_trainer *tr); /* header line */
/* Log a step / an eval on rank 0. -1 with tr->err when the metrics file cannot be written. */
int loom_metrics_step(loom_trainer *tr, const loom_step_metrics *m);
int loom_metrics_eval(loom_trainer *tr, int step, double val_loss);
/* Before printing anything else on rank 0: end the live progress line (a terminal's) if one is
 * on screen, so the next output starts on its own line. */
void loom_metrics_end_line(loom_trainer *tr);
void loom_metrics_end(loom_trainer *tr);   /* summary: peak memory per category, throughput */
/* rank 0, the run's last line: where the metrics file and the checkpoints went */
void loom_metrics_where(loom_trainer *tr);
void loom_metrics_close(loom_trainer *tr);

/* Rank 0: one record (a JSON object starting {"step":N, and its newline) to the JSONL file and
 * to TensorBoard (its numbers as scalars). 0, or -1 with tr->err. */
int loom__metrics_emit(loom_trainer *tr, const char *rec);

#endif
