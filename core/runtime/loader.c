#include "loader.h"
#include "abi/abi_compat.h"
#include "elf_check.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef LOOM_PLUGIN_INSTALL_DIR
#define LOOM_PLUGIN_INSTALL_DIR "/usr/local/lib/loom/plugins"
#endif

const char *loom__kind_name(loom_plugin_kind kind) {
  switch (kind) {
    case LOOM_KIND_PARALLEL: return "parallel";
    case LOOM_KIND_PRECISION: return "precision";
    case LOOM_KIND_CHECKPOINT: return "checkpoint";
    case LOOM_KIND_COMM: return "comm";
    case LOOM_KIND_DEVICE: return "device";
  }
  return "unknown";
}

/* Callbacks a plugin of each kind must provide (byte offsets into its struct). Optional hooks
 * (every parallel hook but create/destroy) are not listed: NULL means "use the default". */
typedef struct required_slot { size_t offset; const char *name; } required_slot;
#define REQ(type, field) {offsetof(type, field), #field}
static const required_slot required_parallel[] = {
  REQ(loom_parallel_v1, create), REQ(loom_parallel_v1, destroy), {0, NULL}};
static const required_slot required_precision[] = {
  REQ(loom_precision_v1, create), REQ(loom_precision_v1, destroy),
  REQ(loom_precision_v1, compute_dtype), REQ(loom_precision_v1, loss_scale),
  REQ(loom_precision_v1, after_backward), {0, NULL}};
static const required_slot required_checkpoint[] = {
  REQ(loom_checkpoint_v1, create), REQ(loom_checkpoint_v1, destroy),
  REQ(loom_checkpoint_v1, should_save), REQ(loom_checkpoint_v1, save),
  REQ(loom_checkpoint_v1, resume_step), REQ(loom_checkpoint_v1, load), {0, NULL}};
static const required_slot required_comm[] = {
  REQ(loom_comm_v1, create), REQ(loom_comm_v1, destroy), REQ(loom_comm_v1, world),
  REQ(loom_comm_v1, world_comm), REQ(loom_comm_v1, split), REQ(loom_comm_v1, comm_free),
  REQ(loom_comm_v1, all_reduce), REQ(loom_comm_v1, reduce_scatter),
  REQ(loom_comm_v1, all_gather), REQ(loom_comm_v1, broadcast), REQ(loom_comm_v1, send),
  REQ(loom_comm_v1, recv), REQ(loom_comm_v1, test), REQ(loom_comm_v1, wait),
  REQ(loom_comm_v1, barrier), REQ(loom_comm_v1, abort), REQ(loom_comm_v1, reduce_scatter_v),
  REQ(loom_comm_v1, all_gather_v), {0, NULL}};
static const required_slot required_device[] = {
  REQ(loom_device_v1, create), REQ(loom_device_v1, destroy), REQ(loom_device_v1, alloc),
  REQ(loom_device_v1, free), REQ(loom_device_v1, copy), REQ(loom_device_v1, matmul_forward),
  REQ(loom_device_v1, matmul_backward), REQ(loom_device_v1, adamw), {0, NULL}};
#undef REQ

static const required_slot *required_for(loom_plugin_kind kind) {
  switch (kind) {
    case LOOM_KIND_PARALLEL: return required_parallel;
    case LOOM_KIND_PRECISION: return required_precision;
    case LOOM_KIND_CHECKPOINT: return required_checkpoint;
    case LOOM_KIND_COMM: return required_comm;
    case LOOM_KIND_DEVICE: return required_device;
  }
  return NULL;
}

static int exe_dir(char *buf, size_t len) {
  ssize_t n = readlink("/proc/self/exe", buf, len - 1);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *slash = strrchr(buf, '/');
  if (!slash) return -1;
  *slash = '\0';
  return 0;
}

int loom__plugin_search_path(char dirs[][PATH_MAX], int max) {
  int n = 0;
  const char *env = getenv("LOOM_PLUGIN_PATH");
  if (env && *env) {
    const char *s = env;
    while (*s && n < max) {
      const char *colon = strchr(s, ':');
      size_t len = colon ? (size_t)(colon - s) : strlen(s);
      if (len > 0 && len < PATH_MAX) {
        memcpy(dirs[n], s, len);
        dirs[n][len] = '\0';
        n++;
      }
      if (!colon) break;
      s = colon + 1;
    }
  }
  char exe[PATH_MAX];
  if (n < max && exe_dir(exe, sizeof exe) == 0 &&
      (size_t)snprintf(dirs[n], PATH_MAX, "%s/../lib/loom/plugins", exe) < PATH_MAX)
    n++;
  if (n < max) snprintf(dirs[n++], PATH_MAX, "%s", LOOM_PLUGIN_INSTALL_DIR);
  return n;
}

static int is_path(const char *name) {
  size_t len = strlen(name);
  return strchr(name, '/') != NULL || (len > 3 && strcmp(name + len - 3, ".so") == 0);
}

int loom__plugin_resolve(const char *name, char *path, size_t pathlen, char *err,
                         size_t errlen) {
  if (!name || !*name) {
    snprintf(err, errlen, "plugin '': empty plugin name");
    return -1;
  }
  if (is_path(name)) {
    if (access(name, F_OK) != 0) {
      snprintf(err, errlen, "plugin '%s': file %s: %s", name, name, strerror(errno));
      return -1;
    }
    snprintf(path, pathlen, "%s%s", strchr(name, '/') ? "" : "./", name); /* dlopen: a path */
    return 0;
  }
  char dirs[LOOM_MAX_SEARCH_DIRS][PATH_MAX];
  int n = loom__plugin_search_path(dirs, LOOM_MAX_SEARCH_DIRS);
  char searched[1024] = "";
  size_t used = 0;
  for (int i = 0; i < n; i++) {
    char candidate[PATH_MAX + 160];
    snprintf(candidate, sizeof candidate, "%s/%s.so", dirs[i], name);
    if (access(candidate, F_OK) == 0) {
      char *real = realpath(candidate, NULL);
      snprintf(path, pathlen, "%s", real ? real : candidate);
      free(real);
      return 0;
    }
    if (used < sizeof searched)
      used += (size_t)snprintf(searched + used, sizeof searched - used, "%s%s",
                               i ? ":" : "", dirs[i]);
  }
  snprintf(err, errlen,
           "plugin '%s': not found: no %s.so in the search path (%s); set LOOM_PLUGIN_PATH "
           "or give a path",
           name, name, searched);
  return -1;
}

int loom__plugin_open(loom_plugin *p, const char *name, loom_plugin_kind kind, char *err,
                      size_t errlen) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name ? name : "");
  if (loom__plugin_resolve(name, p->path, sizeof p->path, err, errlen) != 0) return -1;

  /* a truncated or foreign file must be refused here: dlopen would map it and die of SIGBUS */
  char why[600];
  if (loom__elf_check(p->path, why, sizeof why) != 0) {
    snprintf(err, errlen, "plugin '%s' (%s): cannot load: %s", name, p->path, why);
    return -1;
  }
  dlerror();
  p->handle = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
  if (!p->handle) {
    const char *why = dlerror();
    snprintf(err, errlen, "plugin '%s' (%s): cannot load: %s", name, p->path,
             why ? why : "unknown dlopen error");
    return -1;
  }
  const loom_plugin_header *hdr = (const loom_plugin_header *)dlsym(p->handle,
                                                                    LOOM_PLUGIN_SYMBOL);
  if (!hdr) {
    int has_other = dlsym(p->handle, "loom_plugin_v2") != NULL;
    snprintf(err, errlen,
             "plugin '%s' (%s): entry symbol '%s' not found%s", name, p->path,
             LOOM_PLUGIN_SYMBOL,
             has_other ? " (it exports loom_plugin_v2: built for a newer loom ABI)"
                       : ": not a loom plugin, or built without LOOM_EXPORT");
    goto fail;
  }
  if (hdr->abi_major != LOOM_ABI_MAJOR) {
    snprintf(err, errlen,
             "plugin '%s' (%s): built against loom ABI %u.%u, this loom speaks ABI %d.%d "
             "(the major version must match): rebuild the plugin against this SDK",
             name, p->path, hdr->abi_major, hdr->abi_minor, LOOM_ABI_MAJOR, LOOM_ABI_MINOR);
    goto fail;
  }
  size_t full = loom__abi_table_size((loom_plugin_kind)hdr->kind);
  if (full == 0) {
    snprintf(err, errlen, "plugin '%s' (%s): unknown plugin kind %u", name, p->path,
             hdr->kind);
    goto fail;
  }
  if (kind != 0 && hdr->kind != (uint32_t)kind) {
    snprintf(err, errlen, "plugin '%s' (%s): is a %s plugin, but a %s plugin was expected here",
             name, p->path, loom__kind_name((loom_plugin_kind)hdr->kind),
             loom__kind_name(kind));
    goto fail;
  }
  if (hdr->struct_size < sizeof(loom_plugin_header)) {
    snprintf(err, errlen, "plugin '%s' (%s): struct_size %u is smaller than its header", name,
             p->path, hdr->struct_size);
    goto fail;
  }
  /* OBS's rule: zero-fill, copy what both sides know, default what an older minor lacks */
  loom__abi_copy_table(&p->u, sizeof p->u, hdr);
  p->kind = (loom_plugin_kind)hdr->kind;

  const required_slot *req = required_for(p->kind);
  for (; req && req->name; req++) {
    void *fn;
    memcpy(&fn, (const char *)&p->u + req->offset, sizeof fn);
    if (!fn) {
      snprintf(err, errlen, "plugin '%s' (%s): required callback '%s' of a %s plugin is NULL",
               name, p->path, req->name, loom__kind_name(p->kind));
      goto fail;
    }
  }
  return 0;
fail:
  dlclose(p->handle);
  p->handle = NULL;
  return -1;
}

void loom__plugin_close(loom_plugin *p) {
  if (p && p->handle) {
    dlclose(p->handle);
    p->handle = NULL;
  }
}

static void print_caps(FILE *out, const loom_plugin *p) {
  uint64_t caps = p->u.hdr.caps;
  if (p->kind == LOOM_KIND_PARALLEL) {
    static const struct { uint64_t bit; const char *name; } names[] = {
      {LOOM_PAR_CAP_GRAD_SYNC, "grad-sync"}, {LOOM_PAR_CAP_OPTIMIZER, "optimizer"},
      {LOOM_PAR_CAP_SCHEDULE, "schedule"}, {LOOM_PAR_CAP_SPLIT_LAYERS, "split-layers"},
      {LOOM_PAR_CAP_SHARD_PARAMS, "shard-params"}, {LOOM_PAR_CAP_SHARD_GRADS, "shard-grads"},
      {LOOM_PAR_CAP_SHARD_OPTIM, "shard-optim"}, {LOOM_PAR_CAP_AXIS_DP, "axis=dp"},
      {LOOM_PAR_CAP_AXIS_TP, "axis=tp"}, {LOOM_PAR_CAP_AXIS_PP, "axis=pp"}};
    const char *sep = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
      if (caps & names[i].bit) {
        fprintf(out, "%s%s", sep, names[i].name);
        sep = ",";
      }
    if (!*sep) fprintf(out, "-");
  } else {
    fprintf(out, "0x%llx", (unsigned long long)caps);
  }
}

int loom__plugin_list(FILE *out) {
  char dirs[LOOM_MAX_SEARCH_DIRS][PATH_MAX];
  int n = loom__plugin_search_path(dirs, LOOM_MAX_SEARCH_DIRS);
  int found = 0;
  fprintf(out, "%-16s %-11s %-8s %-5s %-28s %s\n", "NAME", "KIND", "VERSION", "ABI", "CAPS",
          "FILE");
  for (int i = 0; i < n; i++) {
    struct dirent **ents = NULL;
    int m = scandir(dirs[i], &ents, NULL, alphasort);
    if (m < 0) continue;
    for (int j = 0; j < m; j++) {
      const char *fn = ents[j]->d_name;
      size_t len = strlen(fn);
      if (len > 3 && strcmp(fn + len - 3, ".so") == 0) {
        char path[PATH_MAX + 300], err[1024];
        snprintf(path, sizeof path, "%s/%s", dirs[i], fn);
        loom_plugin p;
        if (loom__plugin_open(&p, path, 0, err, sizeof err) == 0) {
          fprintf(out, "%-16s %-11s %-8s %u.%-3u ", p.u.hdr.name ? p.u.hdr.name : "?",
                  loom__kind_name(p.kind), p.u.hdr.version ? p.u.hdr.version : "?",
                  p.u.hdr.abi_major, p.u.hdr.abi_minor);
          print_caps(out, &p);
          fprintf(out, "  %s\n", path);
          if (p.u.hdr.description) fprintf(out, "%-16s %s\n", "", p.u.hdr.description);
          loom__plugin_close(&p);
          found++;
        } else {
          fprintf(out, "%-16s (fails to load) %s\n", fn, err);
        }
      }
      free(ents[j]);
    }
    free(ents);
  }
  return found;
}
