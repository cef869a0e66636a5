/* Hostfiles (hostfile.h). */
#include "hostfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad_line(char *err, size_t errlen, const char *path, int line, const char *what,
                    const char *word) {
  snprintf(err, errlen, "%s:%d: %s '%.100s' (expected \"NAME [slots=N]\", Open MPI's hostfile "
           "format)", path, line, what, word);
  return -1;
}

/* One line's words after the name: slots=N, max_slots=N (ignored). */
static int parse_options(char *rest, loom_host *h, const char *path, char *err, size_t errlen) {
  for (char *w = strtok(rest, " \t\r\n"); w; w = strtok(NULL, " \t\r\n")) {
    char *end;
    if (!strncmp(w, "slots=", 6)) {
      long v = strtol(w + 6, &end, 10);
      if (w[6] == '\0' || *end != '\0' || v < 1 || v > 4096)
        return bad_line(err, errlen, path, h->line, "slots must be an integer in [1, 4096], got",
                        w);
      h->slots = (int)v;
    } else if (!strncmp(w, "max_slots=", 10)) {
      continue; /* Open MPI's oversubscription bound: the world is the slots */
    } else {
      return bad_line(err, errlen, path, h->line, "unknown word", w);
    }
  }
  return 0;
}

int loom__hostfile_read(const char *path, loom_host *hosts, int *n, char *err, size_t errlen) {
  *n = 0;
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "%s: cannot open the hostfile: %s", path, strerror(errno));
    return -1;
  }
  char buf[1024];
  int line = 0, rc = 0;
  while (rc == 0 && fgets(buf, sizeof buf, f)) {
    line++;
    if (!strchr(buf, '\n') && !feof(f)) { /* never read the rest of a line as a line */
      snprintf(err, errlen, "%s:%d: a line longer than %zu characters", path, line,
               sizeof buf - 2);
      rc = -1;
      break;
    }
    char *hash = strchr(buf, '#');
    if (hash) *hash = '\0';
    char *name = buf + strspn(buf, " \t\r\n");
    if (!*name) continue;
    size_t len = strcspn(name, " \t\r\n");
    if (len >= sizeof hosts[0].name) {
      rc = bad_line(err, errlen, path, line, "a node name longer than 127 characters:", name);
      break;
    }
    if (*n == LOOM_MAX_HOSTS) {
      snprintf(err, errlen, "%s:%d: more than %d nodes", path, line, LOOM_MAX_HOSTS);
      rc = -1;
      break;
    }
    loom_host *h = &hosts[*n];
    memset(h, 0, sizeof *h);
    memcpy(h->name, name, len);
    h->slots = 1;
    h->line = line;
    if (parse_options(name + len, h, path, err, errlen) != 0) {
      rc = -1;
      break;
    }
    for (int i = 0; i < *n; i++)
      if (!strcmp(hosts[i].name, h->name)) {
        snprintf(err, errlen, "%s:%d: node '%s' is already on line %d (give it one line with "
                 "slots=N)", path, line, h->name, hosts[i].line);
        rc = -1;
      }
    if (rc == 0) (*n)++;
  }
  fclose(f);
  if (rc == 0 && *n == 0) {
    snprintf(err, errlen, "%s: the hostfile names no node", path);
    rc = -1;
  }
  return rc;
}

int loom__hostfile_write(const char *path, const loom_host *hosts, const int *alive, int n,
                         char *err, size_t errlen) {
  FILE *f = fopen(path, "w");
  if (!f) {
    snprintf(err, errlen, "%s: cannot write the hostfile: %s", path, strerror(errno));
    return -1;
  }
  int slots = 0;
  for (int i = 0; i < n; i++) {
    if (!alive[i]) continue;
    fprintf(f, "%s slots=%d\n", hosts[i].name, hosts[i].slots);
    slots += hosts[i].slots;
  }
  if (fclose(f) != 0) {
    snprintf(err, errlen, "%s: cannot write the hostfile: %s", path, strerror(errno));
    return -1;
  }
  return slots;
}
