/* One attempt of a supervised job (job.h). */
#include "job.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proctree.h"

enum { LINE_MAX_BYTES = 4096 };

/* One output stream of the launcher: the pipe's read end, where its bytes go, and the line
 * being assembled for the classifier. */
typedef struct stream {
  int fd;        /* -1 once closed */
  int out;       /* STDOUT_FILENO or STDERR_FILENO */
  char line[LINE_MAX_BYTES];
  size_t len;
} stream;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return; /* our own output is gone: keep supervising all the same */
    p += k;
    n -= (size_t)k;
  }
}

/* Pass what is readable through, and hand each complete line to the classifier (a line longer
 * than the buffer is classified by its beginning). Returns 0, or -1 at end of file. */
static int pump(stream *s, loom_failure *f) {
  char buf[8192];
  ssize_t k = read(s->fd, buf, sizeof buf);
  if (k < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
  if (k <= 0) {
    if (s->len) { /* a last line without its newline */
      s->line[s->len] = '\0';
      loom__failure_line(f, s->line);
      s->len = 0;
    }
    close(s->fd);
    s->fd = -1;
    return -1;
  }
  write_all(s->out, buf, (size_t)k);
  for (ssize_t i = 0; i < k; i++) {
    if (buf[i] == '\n') {
      s->line[s->len] = '\0';
      loom__failure_line(f, s->line);
      s->len = 0;
    } else if (s->len < sizeof s->line - 1) {
      s->line[s->len++] = buf[i];
    }
  }
  return 0;
}

/* Wait up to timeout_ms for output and pass it through. */
static void pump_streams(stream *st, loom_failure *f, int timeout_ms) {
  struct pollfd p[2];
  int n = 0, idx[2];
  for (int i = 0; i < 2; i++)
    if (st[i].fd >= 0) {
      p[n] = (struct pollfd){.fd = st[i].fd, .events = POLLIN};
      idx[n++] = i;
    }
  if (n == 0) {
    usleep((useconds_t)timeout_ms * 1000);
    return;
  }
  if (poll(p, (nfds_t)n, timeout_ms) <= 0) return; /* timeout, or a signal arrived */
  for (int j = 0; j < n; j++)
    if (p[j].revents) pump(&st[idx[j]], f);
}

const char *loom__signal_name(int sig) {
  static char other[24];
  switch (sig) {
  case SIGINT: return "SIGINT";
  case SIGTERM: return "SIGTERM";
  case SIGHUP: return "SIGHUP";
  default: snprintf(other, sizeof other, "signal %d", sig); return other;
  }
}

/* Seconds mpirun gets to end the job after the first sign of a failure (a rank's error line, a
 * death mpirun reported). mpirun ends a job by telling every node's daemon; a node that went
 * silent (its link cut, powered off) never answers, and mpirun then waits on TCP's timeouts
 * (minutes) while the job's ranks elsewhere are already gone or stuck: past this grace the
 * supervisor ends mpirun itself, so the restart comes within grace + the ranks' watchdog. */
#define FAILURE_GRACE_S 15.0

/* Up to `rounds` x 20 ms for the streams' last bytes (their writers may be gone or going). */
static void drain(stream *st, loom_failure *f, int rounds) {
  for (int i = 0; i < rounds && (st[0].fd >= 0 || st[1].fd >= 0); i++) pump_streams(st, f, 20);
}

static pid_t start(char *const *argv, int out_fd, int err_fd, char *err, size_t errlen) {
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errlen, "cannot start %s: %s", argv[0], strerror(errno));
    return -1;
  }
  if (pid == 0) {
    setpgid(0, 0); /* not the terminal's group: Ctrl-C is the supervisor's to handle */
    int null = open("/dev/null", O_RDONLY); /* mpirun forwards stdin to rank 0: nothing */
    if (null >= 0) dup2(null, STDIN_FILENO);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    execvp(argv[0], argv);
    fprintf(stderr, "loom launch: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid); /* both sides: no window where the child is still in ours */
  return pid;
}

int loom__job_run(char *const *argv, volatile sig_atomic_t *stop, double stop_timeout_s,
                  loom_job_result *res, char *err, size_t errlen) {
  memset(res, 0, sizeof *res);
  loom__failure_init(&res->failure);
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0) {
    snprintf(err, errlen, "cannot make a pipe: %s", strerror(errno));
    return -1;
  }
  if (pipe(err_pipe) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    snprintf(err, errlen, "cannot make a pipe: %s", strerror(errno));
    return -1;
  }
  fcntl(out_pipe[0], F_SETFD, FD_CLOEXEC);
  fcntl(err_pipe[0], F_SETFD, FD_CLOEXEC);
  double t0 = now_s();
  pid_t pid = start(argv, out_pipe[1], err_pipe[1], err, errlen);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return -1;
  }
  stream st[2] = {{.fd = out_pipe[0], .out = STDOUT_FILENO},
                  {.fd = err_pipe[0], .out = STDERR_FILENO}};
  int status = 0, exited = 0, escalation = 0; /* 0 none, 1 SIGUSR1 sent, 2 SIGTERM, 3 SIGKILL */
  double next_at = 0, failed_at = 0;
  while (!exited) {
    const loom_failure *f = &res->failure;
    if (failed_at == 0 && (f->kind != LOOM_FAILURE_UNKNOWN || f->n_errors > 0))
      failed_at = now_s();
    if (escalation == 0 && failed_at > 0 && now_s() - failed_at > FAILURE_GRACE_S) {
      fprintf(stderr, "loom launch: a rank failed %.0f s ago and mpirun has not ended the job "
              "(a node that does not answer?): SIGTERM to mpirun, SIGKILL in 5 s\n",
              FAILURE_GRACE_S);
      kill(pid, SIGTERM);
      escalation = 2;
      next_at = now_s() + 5;
    }
    if (*stop && escalation == 0) {
      res->stop_signal = (int)*stop;
      fprintf(stderr, "loom launch: %s: stopping the job: SIGUSR1 to mpirun, which passes it to "
              "every rank (they save a checkpoint and exit); killed if still running in %g s\n",
              loom__signal_name((int)*stop), stop_timeout_s);
      kill(pid, SIGUSR1);
      escalation = 1;
      next_at = now_s() + stop_timeout_s;
    } else if (escalation > 0 && escalation < 3 && now_s() >= next_at) {
      escalation++;
      fprintf(stderr, "loom launch: the job is still running: %s\n",
              escalation == 2 ? "SIGTERM to mpirun" : "SIGKILL to all of it");
      if (escalation == 2) kill(pid, SIGTERM);
      else {
        loom__signal_descendants(pid, SIGKILL);
        kill(pid, SIGKILL);
      }
      next_at = now_s() + 5;
    }
    pump_streams(st, &res->failure, 200);
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) exited = 1;
    else if (r < 0 && errno != EINTR) {
      status = 0x7f00; /* defensive: lost the child; treated as a failure */
      exited = 1;
    }
  }
  /* what it printed last, then whatever it left behind (a rank whose mpirun died) */
  drain(st, &res->failure, 25);
  int left = loom__kill_leftovers();
  if (left > 0) fprintf(stderr, "loom launch: killed %d process(es) the job left behind\n", left);
  drain(st, &res->failure, 50);
  for (int i = 0; i < 2; i++)
    if (st[i].fd >= 0) close(st[i].fd);
  res->status = status;
  res->seconds = now_s() - t0;
  if (!res->stop_signal && *stop) res->stop_signal = (int)*stop;
  return 0;
}
