/* The supervisor's processes (proctree.h). */
#include "proctree.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int loom__become_subreaper(void) {
#ifdef PR_SET_CHILD_SUBREAPER
  return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 ? 0 : -1;
#else
  return -1;
#endif
}

/* The parent of `pid` from /proc/PID/stat ("PID (COMM) STATE PPID ..."; COMM may hold spaces
 * and parentheses, so the fields start after the last ')'), and whether it is a zombie (dead,
 * waiting to be reaped: nothing left to kill). -1 when it is gone. */
static pid_t parent_of(pid_t pid, int *zombie) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *close = strrchr(buf, ')');
  int ppid;
  char state;
  if (!close || sscanf(close + 1, " %c %d", &state, &ppid) != 2) return -1;
  *zombie = state == 'Z' || state == 'X';
  return (pid_t)ppid;
}

/* Every process's (pid, ppid, zombie) now; *n of them, malloc'd (NULL when /proc cannot be
 * read). */
static pid_t (*process_table(int *n))[3] {
  *n = 0;
  DIR *d = opendir("/proc");
  if (!d) return NULL;
  int cap = 1024;
  pid_t (*t)[3] = malloc(sizeof *t * (size_t)cap);
  struct dirent *e;
  while (t && (e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    int zombie = 0;
    pid_t pp = parent_of((pid_t)pid, &zombie);
    if (pp < 0) continue;
    if (*n == cap) {
      pid_t (*g)[3] = realloc(t, sizeof *t * (size_t)(cap *= 2));
      if (!g) break;
      t = g;
    }
    t[*n][0] = (pid_t)pid;
    t[*n][1] = pp;
    t[*n][2] = zombie;
    (*n)++;
  }
  closedir(d);
  return t;
}

int loom__signal_descendants(pid_t root, int sig) {
  int n, count = 0;
  pid_t (*t)[3] = process_table(&n);
  if (!t) return 0;
  for (int i = 0; i < n; i++) {
    if (t[i][2]) continue; /* a zombie: already dead */
    pid_t q = t[i][1];
    for (int depth = 0; q > 1 && depth < 64; depth++) { /* walk up to root or init */
      if (q == root) {
        if (kill(t[i][0], sig) == 0) count++;
        break;
      }
      int j = 0;
      while (j < n && t[j][0] != q) j++;
      q = j < n ? t[j][1] : -1;
    }
  }
  free(t);
  return count;
}

int loom__kill_leftovers(void) {
  int killed = 0;
  for (int round = 0; round < 8; round++) { /* a dying parent re-parents its children to us */
    int k = loom__signal_descendants(getpid(), SIGKILL);
    killed += k;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    if (k == 0) break;
    usleep(20000);
  }
  return killed;
}
