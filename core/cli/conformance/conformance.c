/* `loom conformance PLUGIN [--with P]... [--options JSON] [--np N] [--rtol R] [--keep DIR]
 *                          [--only GROUPS]`
 *
 * The ABI checks that need the plugin's table run here, in process, through the loader every
 * job uses; the checks that need training jobs (equivalence, resume, faults, collectives,
 * precision, checkpoint) run in the installed battery script, which this front execs with what
 * it learned in LOOM_CONF_* variables. One line per check: "PASS|FAIL|SKIP  NAME  detail". */
#include "conformance.h"
#include "device_conformance.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/loader.h"

typedef struct tally {
  int passed, failed;
  char failures[4096]; /* names of the failed checks, space-separated */
} tally;

static void report(tally *t, int ok, const char *check, const char *fmt, const char *detail) {
  printf("%s  %-28s %s%s\n", ok ? "PASS" : "FAIL", check, fmt ? fmt : "", detail ? detail : "");
  if (ok) {
    t->passed++;
  } else {
    t->failed++;
    size_t len = strlen(t->failures);
    snprintf(t->failures + len, sizeof t->failures - len, "%s%s", len ? " " : "", check);
  }
}

/* Append "; why" to buf (the reasons a check failed, all of them). */
static void why(char *buf, size_t len, const char *msg) {
  size_t used = strlen(buf);
  snprintf(buf + used, len - used, "%s%s", used ? "; " : "", msg);
}

/* The size a plugin built against this minor must declare, and the smallest any 1.x may. */
static void kind_sizes(const loom_plugin *p, size_t *now, size_t *min) {
  switch (p->kind) {
    case LOOM_KIND_PARALLEL:
      *now = sizeof(loom_parallel_v1);
      *min = offsetof(loom_parallel_v1, region); /* 1.0 ended before region (1.1) */
      return;
    case LOOM_KIND_PRECISION: *now = *min = sizeof(loom_precision_v1); return;
    case LOOM_KIND_CHECKPOINT: *now = *min = sizeof(loom_checkpoint_v1); return;
    case LOOM_KIND_COMM:
      *now = sizeof(loom_comm_v1);
      *min = offsetof(loom_comm_v1, local); /* 1.3 ended before local (1.4) */
      return;
    case LOOM_KIND_DEVICE:
      *now = sizeof(loom_device_v1);
      *min = offsetof(loom_device_v1, round_to); /* 1.2 ended before round_to (1.3) */
      return;
  }
  *now = *min = 0;
}

/* Header fields: major, reserved, identity strings, the name matching the file name. */
static void check_header(tally *t, const loom_plugin *p) {
  const loom_plugin_header *h = &p->u.hdr;
  char bad[1024] = "", msg[512];
  if (h->abi_major != LOOM_ABI_MAJOR) {
    snprintf(msg, sizeof msg, "abi_major %u, this loom speaks %d", h->abi_major, LOOM_ABI_MAJOR);
    why(bad, sizeof bad, msg);
  }
  if (h->reserved != 0) why(bad, sizeof bad, "the reserved field is not zero");
  if (!h->name || !*h->name) why(bad, sizeof bad, "no name");
  if (!h->version || !*h->version) why(bad, sizeof bad, "no version string");
  if (!h->description || !*h->description) why(bad, sizeof bad, "no description");
  const char *base = strrchr(p->path, '/');
  base = base ? base + 1 : p->path;
  size_t blen = strlen(base);
  if (h->name && *h->name &&
      !(blen > 3 && !strcmp(base + blen - 3, ".so") && strlen(h->name) == blen - 3 &&
        !strncmp(base, h->name, blen - 3))) {
    snprintf(msg, sizeof msg, "hdr.name '%s' does not match the file name %s (configs find "
             "a plugin by its file name)", h->name, base);
    why(bad, sizeof bad, msg);
  }
  snprintf(msg, sizeof msg, "ABI %u.%u, kind %s, name '%s', version %s", h->abi_major,
           h->abi_minor, loom__kind_name(p->kind), h->name ? h->name : "",
           h->version ? h->version : "");
  report(t, !bad[0], "abi.header", bad[0] ? bad : msg, NULL);
}

static void check_struct_size(tally *t, const loom_plugin *p) {
  const loom_plugin_header *h = &p->u.hdr;
  size_t now, min;
  kind_sizes(p, &now, &min);
  char msg[512];
  int ok = 1;
  if (h->struct_size < min) {
    snprintf(msg, sizeof msg, "struct_size %u is smaller than any ABI 1.x %s table (%zu "
             "bytes): the header is not LOOM_PLUGIN_HEADER_INIT(..., loom_%s_v1)",
             h->struct_size, loom__kind_name(p->kind), min, loom__kind_name(p->kind));
    ok = 0;
  } else if (h->abi_minor == LOOM_ABI_MINOR && h->struct_size != now) {
    snprintf(msg, sizeof msg, "struct_size %u, but a %s table of ABI %d.%d is %zu bytes: "
             "set it with sizeof(loom_%s_v1)", h->struct_size, loom__kind_name(p->kind),
             LOOM_ABI_MAJOR, LOOM_ABI_MINOR, now, loom__kind_name(p->kind));
    ok = 0;
  } else if (h->abi_minor < LOOM_ABI_MINOR && h->struct_size > now) {
    snprintf(msg, sizeof msg, "struct_size %u is larger than this loom's %zu-byte table, but "
             "the plugin claims the older minor %u", h->struct_size, now, h->abi_minor);
    ok = 0;
  } else {
    snprintf(msg, sizeof msg, "%u bytes (this loom's %s table: %zu)", h->struct_size,
             loom__kind_name(p->kind), now);
  }
  report(t, ok, "abi.struct_size", msg, NULL);
}

#define HOOKS(X)                                                                          \
  X(setup) X(begin_step) X(begin_micro) X(pre_forward) X(post_forward) X(pre_backward)    \
  X(post_backward) X(end_backward) X(grad_norm_sq) X(optimizer_step) X(end_step)          \
  X(state_items) X(region) X(run_step)

/* Space-separated names of the parallel hooks the plugin fills. */
static void parallel_hooks(const loom_parallel_v1 *par, char *out, size_t len) {
  out[0] = '\0';
#define X(slot)                                                                  \
  if (par->slot) {                                                               \
    size_t used = strlen(out);                                                   \
    snprintf(out + used, len - used, "%s%s", used ? " " : "", #slot);            \
  }
  HOOKS(X)
#undef X
}

static const char *cap_names(uint64_t c, char *out, size_t len) {
  static const struct { uint64_t bit; const char *name; } names[] = {
    {LOOM_PAR_CAP_GRAD_SYNC, "GRAD_SYNC"}, {LOOM_PAR_CAP_OPTIMIZER, "OPTIMIZER"},
    {LOOM_PAR_CAP_SCHEDULE, "SCHEDULE"}, {LOOM_PAR_CAP_SPLIT_LAYERS, "SPLIT_LAYERS"},
    {LOOM_PAR_CAP_SHARD_PARAMS, "SHARD_PARAMS"}, {LOOM_PAR_CAP_SHARD_GRADS, "SHARD_GRADS"},
    {LOOM_PAR_CAP_SHARD_OPTIM, "SHARD_OPTIM"}, {LOOM_PAR_CAP_AXIS_DP, "AXIS_DP"},
    {LOOM_PAR_CAP_AXIS_TP, "AXIS_TP"}, {LOOM_PAR_CAP_AXIS_PP, "AXIS_PP"}};
  out[0] = '\0';
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!(c & names[i].bit)) continue;
    size_t used = strlen(out);
    snprintf(out + used, len - used, "%s%s", used ? " " : "", names[i].name);
  }
  return out;
}

/* A parallel plugin's caps against the hooks it fills (docs/abi.md, "Roles and caps"). */
static void check_parallel_caps(tally *t, const loom_parallel_v1 *par) {
  const uint64_t c = par->hdr.caps;
  const uint64_t known = LOOM_PAR_CAP_GRAD_SYNC | LOOM_PAR_CAP_OPTIMIZER | LOOM_PAR_CAP_SCHEDULE |
                         LOOM_PAR_CAP_SPLIT_LAYERS | LOOM_PAR_CAP_SHARD_PARAMS |
                         LOOM_PAR_CAP_SHARD_GRADS | LOOM_PAR_CAP_SHARD_OPTIM |
                         LOOM_PAR_CAP_AXIS_DP | LOOM_PAR_CAP_AXIS_TP | LOOM_PAR_CAP_AXIS_PP;
  char bad[2048] = "", msg[512];
  int axes = !!(c & LOOM_PAR_CAP_AXIS_DP) + !!(c & LOOM_PAR_CAP_AXIS_TP) +
             !!(c & LOOM_PAR_CAP_AXIS_PP);
  if (c & ~known) {
    snprintf(msg, sizeof msg, "unknown capability bits 0x%llx", (unsigned long long)(c & ~known));
    why(bad, sizeof bad, msg);
  }
  if (axes != 1) why(bad, sizeof bad, "declares exactly one axis (AXIS_DP, AXIS_TP or AXIS_PP)");
#define RULE(cond, text) \
  if (cond) why(bad, sizeof bad, text)
  RULE((c & LOOM_PAR_CAP_OPTIMIZER) && !par->optimizer_step,
       "OPTIMIZER without optimizer_step: the host would call a NULL step");
  RULE(!(c & LOOM_PAR_CAP_OPTIMIZER) && par->optimizer_step,
       "optimizer_step is filled but OPTIMIZER is not declared: the host never calls it");
  RULE((c & LOOM_PAR_CAP_OPTIMIZER) && !par->state_items,
       "OPTIMIZER without state_items: its optimizer state would not be checkpointed");
  RULE(!!(c & LOOM_PAR_CAP_SPLIT_LAYERS) != !!par->region,
       "SPLIT_LAYERS and the region slot go together");
  RULE((c & LOOM_PAR_CAP_SPLIT_LAYERS) && !(c & LOOM_PAR_CAP_AXIS_TP),
       "SPLIT_LAYERS works on the TP axis: declare AXIS_TP");
  RULE(!!(c & LOOM_PAR_CAP_SCHEDULE) != !!par->run_step,
       "SCHEDULE and the run_step slot go together");
  RULE(!!(c & LOOM_PAR_CAP_SCHEDULE) != !!(c & LOOM_PAR_CAP_AXIS_PP),
       "SCHEDULE and AXIS_PP go together");
  RULE((c & LOOM_PAR_CAP_GRAD_SYNC) && !(c & LOOM_PAR_CAP_AXIS_DP),
       "GRAD_SYNC synchronises the data-parallel axis: declare AXIS_DP");
  RULE((c & LOOM_PAR_CAP_GRAD_SYNC) && !par->post_backward && !par->end_backward,
       "GRAD_SYNC, but neither post_backward nor end_backward is filled: nothing can sync "
       "the gradients");
  RULE((c & (LOOM_PAR_CAP_SHARD_OPTIM | LOOM_PAR_CAP_SHARD_GRADS)) &&
           !(c & LOOM_PAR_CAP_GRAD_SYNC),
       "sharding gradients or the optimizer partition needs GRAD_SYNC");
  RULE((c & LOOM_PAR_CAP_SHARD_GRADS) && !(c & LOOM_PAR_CAP_SHARD_OPTIM),
       "SHARD_GRADS without SHARD_OPTIM (ZeRO-2 shards both)");
  RULE((c & LOOM_PAR_CAP_SHARD_PARAMS) && !(c & LOOM_PAR_CAP_SHARD_GRADS),
       "SHARD_PARAMS without SHARD_GRADS (ZeRO-3 shards all three)");
  RULE((c & LOOM_PAR_CAP_SHARD_OPTIM) && !par->setup,
       "SHARD_OPTIM without setup: the partition is published in setup");
  RULE((c & LOOM_PAR_CAP_SHARD_PARAMS) && !(par->pre_forward && par->pre_backward),
       "SHARD_PARAMS without pre_forward and pre_backward: the parameters are never gathered");
#undef RULE
  char names[256], hooks[512];
  parallel_hooks(par, hooks, sizeof hooks);
  snprintf(msg, sizeof msg, "caps [%s], hooks [%s]", cap_names(c, names, sizeof names), hooks);
  report(t, !bad[0], "abi.caps", bad[0] ? bad : msg, NULL);
}

static void check_other_caps(tally *t, const loom_plugin *p) {
  uint64_t c = p->u.hdr.caps, known = 0;
  if (p->kind == LOOM_KIND_CHECKPOINT) known = LOOM_CKPT_CAP_RESHARD | LOOM_CKPT_CAP_GLOBAL_VIEW;
  if (p->kind == LOOM_KIND_COMM) known = LOOM_COMM_CAP_HOST_MEMORY | LOOM_COMM_CAP_DEVICE_MEMORY;
  char msg[256];
  if (p->kind == LOOM_KIND_COMM && !(c & LOOM_COMM_CAP_HOST_MEMORY)) {
    report(t, 0, "abi.caps", "a comm plugin without LOOM_COMM_CAP_HOST_MEMORY cannot move this "
           "loom's buffers (the CPU device's memory is host memory)", NULL);
    return;
  }
  if (c & ~known)
    snprintf(msg, sizeof msg, "unknown capability bits 0x%llx for a %s plugin",
             (unsigned long long)(c & ~known), loom__kind_name(p->kind));
  else
    snprintf(msg, sizeof msg, "caps 0x%llx; every required slot is filled (checked by the "
             "loader)", (unsigned long long)c);
  report(t, !(c & ~known), "abi.caps", msg, NULL);
}

static int exe_path(char *buf, size_t len) {
  ssize_t n = readlink("/proc/self/exe", buf, len - 1);
  if (n <= 0) return -1;
  buf[n] = '\0';
  return 0;
}

/* --only's list: each name one of the battery's groups. Returns 0, or -1 after saying which. */
static int check_groups(const char *list) {
  static const char *const groups[] = {"abi", "parallel", "resume", "faults", "comm",
                                       "precision", "checkpoint", NULL};
  const char *s = list;
  while (*s) {
    size_t len = strcspn(s, ",");
    int known = 0;
    for (int g = 0; groups[g]; g++)
      if (strlen(groups[g]) == len && !strncmp(s, groups[g], len)) known = 1;
    if (!known) {
      fprintf(stderr, "loom conformance: --only: unknown group '%.*s' (groups: abi, parallel, "
              "resume, faults, comm, precision, checkpoint)\n", (int)len, s);
      return -1;
    }
    s += len + (s[len] == ',');
  }
  return 0;
}

static int usage(FILE *out) {
  fprintf(out,
          "usage: loom conformance PLUGIN [--with PLUGIN]... [--options JSON] [--np N]\n"
          "                               [--rtol R] [--keep DIR] [--only GROUP[,GROUP...]]\n"
          "Run the checks loom's own plugins pass on PLUGIN (a name on the plugin search path\n"
          "or a path to a .so), those that apply to its kind and its declared roles: abi,\n"
          "parallel (equivalence to the 1-rank run, composition, replicas agreeing), resume,\n"
          "faults, comm, precision, checkpoint. One line per check, then a summary; exit\n"
          "status 1 when a check fails.\n"
          "  --with PLUGIN   another plugin every job needs (repeatable)\n"
          "  --options JSON  the plugin's own options in every job: '{\"key\": value}'\n"
          "  --np N          the largest world size to use (default 4)\n"
          "  --rtol R        equivalence tolerance (default 1e-5, fp32; a 16-bit precision\n"
          "                  plugin passes its derived bound, e.g. 1e-2 for bf16)\n"
          "  --keep DIR      keep the jobs' configs, logs, metrics and checkpoints in DIR\n"
          "  --only GROUPS   run only these groups (the in-process ABI checks always run)\n"
          "Needs mpirun and python3. docs/conformance.md lists the checks.\n");
  return 2;
}

int loom_conformance_main(int argc, char **argv) {
  for (int i = 2; i < argc; i++) /* a device backend: its kernels, not a training battery */
    if (!strcmp(argv[i], "--device")) return loom_device_conformance_main(argc, argv);
  const char *plugin = NULL, *np = "4", *keep = "", *only = "";
  char with[2048] = "";
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (a[0] == '-' && i + 1 >= argc) {
      fprintf(stderr, "loom conformance: %s needs a value\n", a);
      return usage(stderr);
    }
    if (!strcmp(a, "--with")) {
      size_t used = strlen(with);
      snprintf(with + used, sizeof with - used, "%s%s", used ? " " : "", argv[++i]);
    } else if (!strcmp(a, "--np")) {
      np = argv[++i];
      char *end;
      long n = strtol(np, &end, 10);
      if (*end || n < 1 || n > 64) {
        fprintf(stderr, "loom conformance: --np: expected a world size in [1, 64], got '%s'\n",
                np);
        return 2;
      }
    } else if (!strcmp(a, "--rtol")) {
      char *end;
      double r = strtod(argv[++i], &end);
      if (*end || !(r > 0 && r < 1)) {
        fprintf(stderr, "loom conformance: --rtol: expected a relative tolerance in (0, 1), "
                "got '%s'\n", argv[i]);
        return 2;
      }
      setenv("LOOM_CONF_RTOL", argv[i], 1);
    } else if (!strcmp(a, "--options")) {
      setenv("LOOM_CONF_OPTIONS", argv[++i], 1);
    } else if (!strcmp(a, "--keep")) {
      keep = argv[++i];
    } else if (!strcmp(a, "--only")) {
      only = argv[++i];
      if (check_groups(only) != 0) return 2;
    } else if (a[0] == '-') {
      fprintf(stderr, "loom conformance: unknown option '%s'\n", a);
      return usage(stderr);
    } else if (!plugin) {
      plugin = a;
    } else {
      fprintf(stderr, "loom conformance: unexpected argument '%s' (one plugin per run; "
              "--with adds the others a run needs)\n", a);
      return usage(stderr);
    }
  }
  if (!plugin) {
    fprintf(stderr, "loom conformance: missing PLUGIN\n");
    return usage(stderr);
  }

  tally t = {0};
  loom_plugin *p = calloc(1, sizeof *p);
  char err[2048];
  if (!p) return 1;
  printf("loom conformance %s\n", plugin);
  if (loom__plugin_open(p, plugin, 0, err, sizeof err) != 0) {
    report(&t, 0, "abi.load", err, NULL);
    printf("summary: 0 passed, 1 failed (abi.load), 0 skipped: the plugin does not load, "
           "nothing else can run\n");
    free(p);
    return 1;
  }
  report(&t, 1, "abi.load", p->path, NULL);
  check_header(&t, p);
  check_struct_size(&t, p);
  char hooks[512] = "", caps[256] = "";
  int own_estimate = 0; /* ABI 1.6: the plugin describes its memory and traffic itself */
  if (p->kind == LOOM_KIND_PARALLEL) {
    const loom_parallel_v1 *par = &p->u.parallel;
    own_estimate = par->estimate != NULL; /* the loader's full-size copy */
    check_parallel_caps(&t, &p->u.parallel);
    parallel_hooks(&p->u.parallel, hooks, sizeof hooks);
    cap_names(p->u.hdr.caps, caps, sizeof caps);
  } else {
    check_other_caps(&t, p);
    if (p->kind == LOOM_KIND_CHECKPOINT)
      snprintf(caps, sizeof caps, "%s%s",
               p->u.hdr.caps & LOOM_CKPT_CAP_RESHARD ? "RESHARD " : "",
               p->u.hdr.caps & LOOM_CKPT_CAP_GLOBAL_VIEW ? "GLOBAL_VIEW" : "");
  }
  fflush(stdout);

  /* The battery script and the probe plugin sit next to the binary's prefix (build and install
   * trees alike); LOOM_CONFORMANCE_DIR overrides the script's folder. */
  char exe[PATH_MAX], dir[PATH_MAX], script[PATH_MAX], probe[PATH_MAX];
  if (exe_path(exe, sizeof exe) != 0) {
    fprintf(stderr, "loom conformance: cannot read /proc/self/exe\n");
    free(p);
    return 1;
  }
  char *slash = strrchr(exe, '/');
  snprintf(dir, sizeof dir, "%.*s/../share/loom/conformance", (int)(slash - exe), exe);
  if (getenv("LOOM_CONFORMANCE_DIR")) snprintf(dir, sizeof dir, "%s", getenv("LOOM_CONFORMANCE_DIR"));
  snprintf(script, sizeof script, "%s/run.sh", dir);
  snprintf(probe, sizeof probe, "%.*s/../lib/loom/conformance/conformance_probe.so",
           (int)(slash - exe), exe);
  if (access(script, R_OK) != 0 || access(probe, R_OK) != 0) {
    fprintf(stderr, "loom conformance: the battery is not installed next to this loom: "
            "expected %s and %s (cmake --install installs both)\n", script, probe);
    free(p);
    return 1;
  }
  char num[32];
  setenv("LOOM_CONF_LOOM", exe, 1);
  setenv("LOOM_CONF_DIR", dir, 1);
  setenv("LOOM_CONF_PROBE", probe, 1);
  char abs[PATH_MAX]; /* the jobs' configs name the plugin by this path: make it absolute */
  setenv("LOOM_CONF_PLUGIN", realpath(p->path, abs) ? abs : p->path, 1);
  setenv("LOOM_CONF_NAME", p->u.hdr.name ? p->u.hdr.name : plugin, 1);
  setenv("LOOM_CONF_KIND", loom__kind_name(p->kind), 1);
  setenv("LOOM_CONF_CAPS", caps, 1);
  setenv("LOOM_CONF_HOOKS", hooks, 1);
  setenv("LOOM_CONF_ESTIMATE", own_estimate ? "1" : "0", 1);
  setenv("LOOM_CONF_WITH", with, 1);
  setenv("LOOM_CONF_NP", np, 1);
  setenv("LOOM_CONF_KEEP", keep, 1);
  setenv("LOOM_CONF_ONLY", only, 1);
  snprintf(num, sizeof num, "%d", t.passed);
  setenv("LOOM_CONF_PASSED", num, 1);
  snprintf(num, sizeof num, "%d", t.failed);
  setenv("LOOM_CONF_FAILED", num, 1);
  setenv("LOOM_CONF_FAILURES", t.failures, 1);
  loom__plugin_close(p);
  free(p);
  execlp("bash", "bash", script, (char *)NULL);
  fprintf(stderr, "loom conformance: cannot run bash %s\n", script);
  return 1;
}
