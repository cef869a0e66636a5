/* Is a node there? (probe.h) */
#include "probe.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_AGENT_WORDS = 32 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The agent's words, then NODE and "true". words holds the split copy of agent. */
static int build_argv(const char *agent, const char *node, char *words, size_t wlen,
                      char **argv) {
  snprintf(words, wlen, "%s", agent);
  int a = 0;
  for (char *w = strtok(words, " \t"); w && a < MAX_AGENT_WORDS; w = strtok(NULL, " \t"))
    argv[a++] = w;
  if (a == 0) return -1;
  argv[a++] = (char *)node;
  argv[a++] = "true";
  argv[a] = NULL;
  return 0;
}

/* The first line of what the agent wrote to stderr (fd, rewound), into out. */
static void first_line(int fd, char *out, size_t outlen) {
  char buf[256];
  ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
  buf[k > 0 ? k : 0] = '\0';
  buf[strcspn(buf, "\r\n")] = '\0';
  snprintf(out, outlen, "%s", buf);
}

int loom__host_is_local(const char *name) {
  if (!strcmp(name, "localhost") || !strcmp(name, "127.0.0.1")) return 1;
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) return 0;
  size_t short_len = strcspn(host, "."), n = strcspn(name, ".");
  return !strcmp(name, host) || (n == short_len && !strncmp(name, host, n) &&
                                 (name[n] == '\0' || host[n] == '\0'));
}

int loom__probe_hosts(const char *agent, const loom_host *hosts, int n, double timeout_s,
                      int *alive, char (*why)[128], char *err, size_t errlen) {
  pid_t pid[LOOM_MAX_HOSTS];
  int errfd[LOOM_MAX_HOSTS], done[LOOM_MAX_HOSTS];
  char words[1024];
  char *argv[MAX_AGENT_WORDS + 3];
  if (n > LOOM_MAX_HOSTS) n = LOOM_MAX_HOSTS;
  for (int i = 0; i < n; i++) {
    alive[i] = 0;
    done[i] = 0;
    errfd[i] = -1;
    snprintf(why[i], 128, "not probed");
    if (loom__host_is_local(hosts[i].name)) {
      alive[i] = done[i] = 1;
      snprintf(why[i], 128, "this machine");
      continue;
    }
    if (build_argv(agent, hosts[i].name, words, sizeof words, argv) != 0) {
      snprintf(err, errlen, "--rsh: an empty remote shell command");
      return -1;
    }
    FILE *tmp = tmpfile(); /* the agent's stderr, for the reason it gives */
    errfd[i] = tmp ? dup(fileno(tmp)) : -1;
    if (tmp) fclose(tmp);
    pid[i] = fork();
    if (pid[i] < 0) {
      snprintf(why[i], 128, "cannot fork the probe: %s", strerror(errno));
      done[i] = 1;
      continue;
    }
    if (pid[i] == 0) {
      setsid(); /* no controlling terminal: a password prompt fails instead of waiting */
      int null = open("/dev/null", O_RDWR);
      dup2(null, STDIN_FILENO);
      dup2(null, STDOUT_FILENO);
      dup2(errfd[i] >= 0 ? errfd[i] : null, STDERR_FILENO);
      execvp(argv[0], argv);
      fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
      _exit(127);
    }
  }
  double t0 = now_s();
  int left = 0, answered = 0;
  for (int i = 0; i < n; i++) {
    left += !done[i];
    answered += alive[i];
  }
  while (left > 0) {
    for (int i = 0; i < n; i++) {
      if (done[i]) continue;
      int st;
      pid_t r = waitpid(pid[i], &st, WNOHANG);
      if (r == 0) continue;
      done[i] = 1;
      left--;
      if (r == pid[i] && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        alive[i] = 1;
        answered++;
        snprintf(why[i], 128, "answered");
        continue;
      }
      char line[100] = "";
      if (errfd[i] >= 0) first_line(errfd[i], line, sizeof line);
      if (r == pid[i] && WIFEXITED(st))
        snprintf(why[i], 128, "exit status %d%s%s", WEXITSTATUS(st), line[0] ? ": " : "", line);
      else if (r == pid[i] && WIFSIGNALED(st))
        snprintf(why[i], 128, "killed by signal %d", WTERMSIG(st));
      else
        snprintf(why[i], 128, "lost (waitpid: %s)", strerror(errno));
    }
    if (left == 0) break;
    if (now_s() - t0 >= timeout_s) {
      for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        kill(-pid[i], SIGKILL); /* the agent's session: ssh and whatever it started */
        kill(pid[i], SIGKILL);
        waitpid(pid[i], NULL, 0);
        snprintf(why[i], 128, "no answer within %g s", timeout_s);
        done[i] = 1;
      }
      break;
    }
    usleep(20000);
  }
  for (int i = 0; i < n; i++)
    if (errfd[i] >= 0) close(errfd[i]);
  return answered;
}
