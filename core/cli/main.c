/* loom — command line.
 *   loom train CONFIG [--set KEY=VALUE]...    train (under mpirun/srun for several ranks)
 *   loom launch [--np N | --hostfile F] [--max-restarts N] ... CONFIG [--set ...]
 *                                             train under a supervisor that restarts it
 *   loom check CONFIG [--set ...] [--world N] validate all that train checks before step 1
 *   loom estimate CONFIG [--set ...] [--world N] [--ranks-per-node K] [--json]
 *                                                        per-rank memory and traffic
 *   loom compare CONFIG_OR_RUN_DIR... [--np N] [--steps S] [--expect-equal TOL]   A/B runs
 *   loom report RUN_DIR [--out DIR]           one run's table, plots and HTML page
 *   loom export RUN_OR_CKPT --format safetensors|llmc OUT   parameters for HF / llm.c
 *   loom plugins                              list the plugins on the search path
 *   loom conformance PLUGIN [...]             the conformance battery (core/cli/conformance/)
 *   loom version
 *   loom help [COMMAND], loom COMMAND --help  usage, per command */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "cli/conformance/conformance.h"
#include "cli/launch/launch.h"
#include "cli/launch/launch_opts.h"
#include "export_cmd.h"
#include "cli/report/commands.h"
#include "runtime/loader.h"
#include "runtime/plugins.h"
#include "util/test_hooks.h"
#include "estimate.h"
#include "estimate_nodes.h"
#include "train/metrics.h"
#include "train/preflight.h"
#include "train/trainer.h"
#include "util/one_line.h"

#ifndef LOOM_VERSION
#define LOOM_VERSION "0.0.0"
#endif

static void usage(FILE *out) {
  fprintf(out,
          "usage: loom train CONFIG [--set KEY=VALUE]...  train a GPT as CONFIG says\n"
          "       loom launch [--np N | --hostfile FILE] [--max-restarts N] [--min-nodes M]\n"
          "                   CONFIG [--set KEY=VALUE]...  train under a supervisor that\n"
          "                                                restarts it from its newest\n"
          "                                                checkpoint when a rank or node\n"
          "                                                fails (loom help launch)\n"
          "       loom check CONFIG [--set KEY=VALUE]... [--world N]\n"
          "                                                validate everything train checks\n"
          "                                                before step 1, without training\n"
          "       loom estimate CONFIG [--set ...] [--world N] [--ranks-per-node K] [--json]\n"
          "                                                per-rank memory by category and\n"
          "                                                bytes sent per step on N ranks\n"
          "       loom compare CONFIG_OR_RUN_DIR... [--np N] [--steps S] [--expect-equal TOL]\n"
          "                                                A/B runs side by side, with plots\n"
          "       loom report RUN_DIR [--out DIR]          one run's table, plots, HTML page\n"
          "       loom export RUN_OR_CKPT --format safetensors|llmc OUT\n"
          "                                                a checkpoint's parameters as a\n"
          "                                                Hugging Face GPT-2 or llm.c file\n"
          "       loom plugins                             list plugins (LOOM_PLUGIN_PATH)\n"
          "       loom conformance PLUGIN [--with P] [--np N]\n"
          "                                                check a plugin against loom's own\n"
          "                                                battery (loom help conformance)\n"
          "       loom version\n"
          "       loom help [COMMAND]                      this text, or one command's\n"
          "\n"
          "--deepspeed FILE (train, check, estimate) reads a DeepSpeed config\n"
          "  (ds_config.json) for the parallel, precision, optimizer, batch and clipping\n"
          "  settings; `loom check CONFIG --deepspeed FILE` shows its mapping key by key\n"
          "  (docs/config.md, \"DeepSpeed configs\"). Same as --set deepspeed=FILE.\n"
          "--set KEY=VALUE overrides one config key (repeatable, applied in order):\n"
          "  KEY is a dotted path into the config: train.steps, optimizer.lr,\n"
          "      parallel[0].plugin (arrays by index; missing objects are created)\n"
          "  VALUE is parsed as JSON when it parses, else taken as a string:\n"
          "      --set train.steps=40            the number 40\n"
          "      --set data.train=data/x_*.bin   the string (no quotes needed)\n"
          "      --set 'sample.prompt=\"42\"'      the string \"42\" (quoted JSON)\n"
          "      --set 'optimizer.betas=[0.9,0.99]'   a list, as a JSON array\n"
          "      --set 'parallel=[{\"plugin\":\"zero1\"}]'   an object or array of objects\n"
          "      --set checkpoint=null           null turns a section off where that is\n"
          "                                      allowed (checkpoint, parallel); other\n"
          "                                      keys refuse null\n"
          "Several ranks: mpirun -np N loom train CONFIG. Docs: docs/config.md, docs/abi.md\n");
}

/* `loom help COMMAND` and `loom COMMAND --help`. Returns 0, or -1 for an unknown command. */
static int command_help(FILE *out, const char *cmd) {
  if (!strcmp(cmd, "train")) {
    fprintf(out,
            "usage: loom train CONFIG [--set KEY=VALUE]...\n"
            "Train the GPT that CONFIG (a JSON file, docs/config.md) describes, on one rank or\n"
            "under a launcher: mpirun -np N loom train CONFIG. With a checkpoint plugin the run\n"
            "resumes from its newest checkpoint. Progress goes to stdout, errors to stderr as\n"
            "one line 'loom[RANK]: error: ...'. Ctrl-C, SIGTERM or SIGUSR1 saves a checkpoint\n"
            "and exits 130. --set KEY=VALUE overrides a config key (see 'loom help').\n"
            "--restart JSON (written by loom launch) records the run as a restart of a failed\n"
            "attempt: a 'restart' record in the metrics and TensorBoard.\n");
  } else if (!strcmp(cmd, "launch")) {
    loom_launch_help(out);
  } else if (!strcmp(cmd, "check")) {
    fprintf(out,
            "usage: loom check CONFIG [--set KEY=VALUE]... [--world N] [--deepspeed FILE]\n"
            "Validate CONFIG as 'loom train' would before its first step, without training:\n"
            "every key, the plugins (loaded and created with their options), the data files\n"
            "(shards and vocabulary opened and checked), the batch arithmetic and the\n"
            "parallel layout on N ranks (--world N, default 1). Prints 'CONFIG: ok' or one\n"
            "error line; exit status 0 or 1. With a DeepSpeed file (--deepspeed FILE or the\n"
            "config's \"deepspeed\" key) it first prints one line per key of that file: what\n"
            "it maps to in loom's schema, accepted with a note, or refused and why.\n");
  } else if (!strcmp(cmd, "estimate")) {
    fprintf(out,
            "usage: loom estimate CONFIG [--set KEY=VALUE]... [--world N] [--ranks-per-node K]\n"
            "                     [--json]\n"
            "Per-rank memory by category (the largest over the N ranks) and the bytes each\n"
            "rank sends per optimizer step, computed from CONFIG without training.\n"
            "--ranks-per-node K: also the bytes per step that cross between nodes of K ranks\n"
            "(ranks placed by block, as mpirun --map-by slot), per mesh axis; it also resolves\n"
            "shard_size \"node\" and a hierarchical all-reduce over the launcher's nodes.\n"
            "--json prints the same as one JSON object (\"inter_node\").\n");
  } else if (!strcmp(cmd, "compare")) {
    loom_compare_help(out);
  } else if (!strcmp(cmd, "report")) {
    loom_report_help(out);
  } else if (!strcmp(cmd, "export")) {
    loom_export_help(out);
  } else if (!strcmp(cmd, "plugins")) {
    fprintf(out,
            "usage: loom plugins\n"
            "List every plugin on the search path ($LOOM_PLUGIN_PATH, then the build or\n"
            "install tree's lib/loom/plugins) with kind, version, ABI and capabilities, and\n"
            "each file that fails to load with the reason.\n");
  } else if (!strcmp(cmd, "conformance")) {
    char *args[] = {"loom", "conformance", "--help", NULL};
    return loom_conformance_main(3, args);
  } else if (!strcmp(cmd, "version")) {
    fprintf(out, "usage: loom version\nPrint loom's version and its plugin ABI version.\n");
  } else if (!strcmp(cmd, "help")) {
    usage(out);
  } else {
    return -1;
  }
  return 0;
}

static int is_help_flag(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

/* `--deepspeed FILE` is the override deepspeed="FILE" (FILE as a JSON string, whatever it
 * reads like): the config's "deepspeed" key, applied in order with the --set ones. */
static const char *deepspeed_override(const char *file) {
  static char buf[2 * LOOM_PATH_MAX + 16];
  json_t *s = json_string(file);
  char *q = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
  json_decref(s);
  if (!q || strlen(q) + 12 > sizeof buf) {
    free(q);
    fprintf(stderr, "loom: --deepspeed: expected a file name of valid UTF-8, < %d bytes\n",
            LOOM_PATH_MAX);
    return NULL;
  }
  snprintf(buf, sizeof buf, "deepspeed=%s", q);
  free(q);
  return buf;
}

/* Collect --set overrides (and --set=...) and --deepspeed FILE; returns the count or -1 on a
 * bad argument. */
static int parse_overrides(int argc, char **argv, int first, const char **out, int max) {
  int n = 0;
  for (int i = first; i < argc; i++) {
    const char *v = NULL;
    if (!strcmp(argv[i], "--set") && i + 1 < argc) v = argv[++i];
    else if (!strncmp(argv[i], "--set=", 6)) v = argv[i] + 6;
    else if (!strcmp(argv[i], "--deepspeed") && i + 1 < argc) {
      if (!(v = deepspeed_override(argv[++i]))) return -1;
    } else if (!strncmp(argv[i], "--deepspeed=", 12)) {
      if (!(v = deepspeed_override(argv[i] + 12))) return -1;
    } else if (!strcmp(argv[i], "--deepspeed")) {
      fprintf(stderr, "loom: --deepspeed needs a value after it (a DeepSpeed config file, "
              "ds_config.json)\n");
      return -1;
    }
    else if (!strcmp(argv[i], "--world") && i + 1 < argc) { /* only train gets here so */
      fprintf(stderr, "loom: --world is for loom check and estimate; train runs on the ranks "
              "its launcher starts (mpirun -np N loom train CONFIG)\n");
      return -1;
    } else if (!strcmp(argv[i], "--set") || !strcmp(argv[i], "--world")) {
      fprintf(stderr, "loom: %s needs a value after it (%s; see 'loom help')\n", argv[i],
              argv[i][2] == 's' ? "--set KEY=VALUE" : "--world N, for loom check and estimate");
      return -1;
    } else {
      fprintf(stderr, "loom: unexpected argument '%s'\n", argv[i]);
      return -1;
    }
    if (n == max) {
      fprintf(stderr, "loom: too many --set overrides (max %d)\n", max);
      return -1;
    }
    out[n++] = v;
  }
  return n;
}

/* loom train CONFIG [--set KEY=VALUE]... [--restart JSON] (--restart: loom launch's record of
 * the failed attempt this run restarts, restart_record.h) */
static int cmd_train(int argc, char **argv) {
  char *rest[2 * 64 + 3];
  int nrest = 0;
  const char *restart_json = NULL;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--restart")) {
      if (i + 1 == argc) {
        fprintf(stderr, "loom: --restart needs a value after it (the JSON loom launch writes)\n");
        return 2;
      }
      restart_json = argv[++i];
      continue;
    }
    if (nrest == (int)(sizeof rest / sizeof rest[0])) {
      fprintf(stderr, "loom: too many arguments\n");
      return 2;
    }
    rest[nrest++] = argv[i];
  }
  loom_restart_info restart;
  char err[1400];
  if (restart_json && loom_restart_info_parse(restart_json, &restart, err, sizeof err) != 0) {
    loom__put_line(stderr, "loom: ", err);
    return 2;
  }
  const char *overrides[64];
  int n = parse_overrides(nrest, rest, 0, overrides, 64);
  if (n < 0) return 2;
  loom_trainer *tr = calloc(1, sizeof *tr);
  if (!tr) return 1;
  /* a reader of stdout that goes away (`loom train | head`) must not kill the run: writes fail
   * with EPIPE instead, and the progress lines stop (metrics.c, flush_stdout) */
  signal(SIGPIPE, SIG_IGN);
  if (loom_trainer_init(tr, argv[2], overrides, n, restart_json ? &restart : NULL) != 0 ||
      loom_trainer_run(tr) != 0 ||
      (!tr->stopped && loom_trainer_sample(tr) != 0))
    loom_trainer_fail(tr, 1); /* prints, takes every rank down, exits */
  loom_metrics_where(tr);
  int rc = tr->stopped ? 130 : 0; /* 128 + SIGINT, as a shell reports an interrupted job */
  loom_trainer_free(tr);
  free(tr);
  return rc;
}

/* A count option's value: an integer in [1, 2^20], else -1 after printing what is wrong. */
static int parse_count(const char *opt, const char *v, const char *what) {
  char *end;
  long w = strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || w < 1 || w > 1 << 20) {
    fprintf(stderr, "loom: %s: expected a number of %s in [1, %d], got '%s'\n", opt, what,
            1 << 20, v);
    return -1;
  }
  return (int)w;
}

/* Split the arguments after CONFIG into --world N, --json and --ranks-per-node K (when json
 * and per_node are not NULL; *per_node 0 without it) and the --set overrides. Returns the
 * number of overrides, or -1 after printing what is wrong. */
static int parse_args(int argc, char **argv, int *world, int *json, int *per_node,
                      const char **overrides, int max) {
  char *rest[2 * 64 + 3];
  int nrest = 0;
  *world = 1;
  if (per_node) *per_node = 0;
  for (int i = 3; i < argc; i++) {
    const char *v = NULL;
    if (json && !strcmp(argv[i], "--json")) {
      *json = 1;
      continue;
    }
    const char *rpn = "--ranks-per-node";
    if (per_node && !strncmp(argv[i], rpn, 16) && (argv[i][16] == '\0' || argv[i][16] == '=')) {
      const char *k = argv[i][16] == '=' ? argv[i] + 17 : i + 1 < argc ? argv[++i] : "";
      if ((*per_node = parse_count("--ranks-per-node", k, "ranks")) < 0) return -1;
      continue;
    }
    if (!strcmp(argv[i], "--world") && i + 1 < argc) v = argv[++i];
    else if (!strncmp(argv[i], "--world=", 8)) v = argv[i] + 8;
    if (v) {
      if ((*world = parse_count("--world", v, "ranks")) < 0) return -1;
      continue;
    }
    if (nrest == (int)(sizeof rest / sizeof rest[0])) {
      fprintf(stderr, "loom: too many arguments\n");
      return -1;
    }
    rest[nrest++] = argv[i];
  }
  return parse_overrides(nrest, rest, 0, overrides, max);
}

/* loom check CONFIG [--set ...] [--world N]: everything train validates before step 1. */
static int cmd_check(int argc, char **argv) {
  const char *overrides[64];
  int world;
  int n = parse_args(argc, argv, &world, NULL, NULL, overrides, 64);
  if (n < 0) return 2;
  char err[2048], start[1400];
  /* the DeepSpeed file's mapping, key by key, before the verdict (refused keys included) */
  loom_config_deepspeed_report(stdout, argv[2], overrides, n);
  if (loom_preflight(argv[2], overrides, n, world, NULL, start, sizeof start, err,
                     sizeof err) != 0) {
    loom__put_line(stderr, "loom: error: ", err);
    return 1;
  }
  if (world > 1) printf("%s: ok (on %d ranks)\n", argv[2], world);
  else printf("%s: ok\n", argv[2]);
  if (start[0]) printf("loom: %s\n", start); /* train's start-up line: resume or init_from */
  return 0;
}

/* loom estimate CONFIG [--set ...] [--world N] [--ranks-per-node K] [--json] */
static int cmd_estimate(int argc, char **argv) {
  const char *overrides[64];
  int world, json = 0, per_node = 0;
  int n = parse_args(argc, argv, &world, &json, &per_node, overrides, 64);
  if (n < 0) return 2;
  loom_estimate e;
  loom_estimate_nodes nodes;
  char err[2048];
  if (loom_estimate_compute(argv[2], overrides, n, world, per_node, &e, err, sizeof err) != 0 ||
      (per_node && loom_estimate_nodes_compute(&e, per_node, &nodes, err, sizeof err) != 0)) {
    loom__put_line(stderr, "loom: error: ", err);
    return 1;
  }
  if (json) {
    if (loom_estimate_print_json(stdout, &e, per_node ? loom_estimate_nodes_json(&nodes) : NULL) !=
        0) {
      fprintf(stderr, "loom: error: out of memory\n");
      return 1;
    }
  } else {
    loom_estimate_print(stdout, &e);
    if (per_node) loom_estimate_nodes_print(stdout, &nodes);
  }
  return 0;
}

int main(int argc, char **argv) {
  loom__test_hooks_init(); /* the tests' fault knobs, read once before anything runs */
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "help") || is_help_flag(cmd)) {
    if (argc < 3) {
      usage(stdout);
      return 0;
    }
    if (command_help(stdout, argv[2]) == 0) return 0;
    fprintf(stderr, "loom: help: unknown command '%s' (commands: train, launch, check, "
            "estimate, compare, report, export, plugins, conformance, version)\n", argv[2]);
    return 2;
  }
  if (!strcmp(cmd, "conformance")) return loom_conformance_main(argc, argv);
  /* `loom train --help`, `loom check CONFIG -h`: help, never a config file named --help */
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i - 1], "--set") || !strcmp(argv[i - 1], "--deepspeed"))
      continue; /* a value, even if it reads "-h" */
    if (is_help_flag(argv[i]) && command_help(stdout, cmd) == 0) return 0;
  }
  if (!strcmp(cmd, "launch")) return loom_cmd_launch(argc, argv);
  if (!strcmp(cmd, "compare")) return loom_cmd_compare(argc, argv);
  if (!strcmp(cmd, "report")) return loom_cmd_report(argc, argv);
  if (!strcmp(cmd, "export")) return loom_cmd_export(argc, argv);
  if (!strcmp(cmd, "train") || !strcmp(cmd, "check") || !strcmp(cmd, "estimate")) {
    if (argc < 3) {
      fprintf(stderr, "loom %s: missing CONFIG\n", cmd);
      command_help(stderr, cmd);
      return 2;
    }
    if (argv[2][0] == '-') {
      fprintf(stderr, "loom %s: expected CONFIG (a JSON file) first, got option '%s'\n", cmd,
              argv[2]);
      command_help(stderr, cmd);
      return 2;
    }
    if (!strcmp(cmd, "estimate")) return cmd_estimate(argc, argv);
    return !strcmp(cmd, "train") ? cmd_train(argc, argv) : cmd_check(argc, argv);
  }
  if (argc > 2) {
    fprintf(stderr, "loom %s: unexpected argument '%s'\n", cmd, argv[2]);
    if (command_help(stderr, cmd) != 0) usage(stderr);
    return 2;
  }
  if (!strcmp(cmd, "plugins")) return loom__plugin_list(stdout) > 0 ? 0 : 1;
  if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
    printf("loom %s (plugin ABI %d.%d)\n", LOOM_VERSION, LOOM_ABI_MAJOR, LOOM_ABI_MINOR);
    return 0;
  }
  fprintf(stderr, "loom: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
