/* Check suite for loom launch's pieces (core/cli/launch/) and the restart record it hands to
 * `loom train` (core/train/restart_record.h): the failure classifier on Open MPI 4.1's own
 * messages (captured from mpirun runs of loom with LOOM_FAULT exit / kill / error, and a lost
 * daemon), the hostfile reader's refusals, the elastic batch arithmetic, the probe with a fake
 * remote shell, the supervisor's command line, and --restart's JSON. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/launch/elastic.h"
#include "cli/launch/failure.h"
#include "cli/launch/hostfile.h"
#include "cli/launch/launch_opts.h"
#include "cli/launch/probe.h"
#include "train/restart_record.h"
#include "support/check_suite.h"
#include "support/test_dir.h"

static void feed(loom_failure *f, const char *const *lines) {
  loom__failure_init(f);
  for (int i = 0; lines[i]; i++) loom__failure_line(f, lines[i]);
}

/* LOOM_FAULT=1:3:exit under mpirun -np 4 (rank 1 _exit(3)s). */
START_TEST(failure_exit_status) {
  const char *out[] = {
      "step     2/10 | loss 5.5172",
      "--------------------------------------------------------------------------",
      "Primary job  terminated normally, but 1 process returned",
      "a non-zero exit code. Per user-direction, the job has been aborted.",
      "mpirun detected that one or more processes exited with non-zero status, thus causing",
      "the job to be terminated. The first process to do so was:",
      "",
      "  Process name: [[21574,1],1]",
      "  Exit code:    3",
      NULL};
  loom_failure f;
  feed(&f, out);
  ck_assert_int_eq(f.kind, LOOM_FAILURE_EXIT);
  ck_assert_int_eq(f.rank, 1);
  ck_assert_int_eq(f.code, 3);
  char d[1024];
  loom__failure_describe(&f, 3 << 8, d, sizeof d);
  ck_assert_str_eq(d, "rank 1 exited with status 3");
}
END_TEST

/* LOOM_FAULT=1:3:kill: the rank SIGKILLs itself; the others' errors are consequences. */
START_TEST(failure_signal_names_node_and_rank_line) {
  const char *out[] = {
      "loom[0]: error: ddp: all-reduce failed: peer gone",
      "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).",
      NULL};
  loom_failure f;
  feed(&f, out);
  ck_assert_int_eq(f.kind, LOOM_FAILURE_SIGNAL);
  ck_assert_int_eq(f.rank, 1);
  ck_assert_int_eq(f.code, 9);
  ck_assert_str_eq(f.node, "vm");
  char d[1024];
  loom__failure_describe(&f, 137 << 8, d, sizeof d);
  /* rank 1 printed nothing: the first error line of any rank is quoted */
  ck_assert_str_eq(d, "rank 1 (node vm) was killed by signal 9 (Killed): loom[0]: error: ddp: "
                      "all-reduce failed: peer gone");
}
END_TEST

/* LOOM_FAULT=1:3:error: loom__fatal prints the rank's line, then MPI_Abort. The failing rank's
 * own first line is quoted, not another rank's that came first. */
START_TEST(failure_abort_quotes_the_ranks_line) {
  const char *out[] = {
      "loom[3]: error: a consequence",
      "loom[1]: error: fault injected by LOOM_FAULT=1:3:error at step 3",
      "loom[1]: error: a second line of the same rank",
      "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD",
      "with errorcode 1.",
      NULL};
  loom_failure f;
  feed(&f, out);
  ck_assert_int_eq(f.kind, LOOM_FAILURE_ABORT);
  ck_assert_int_eq(f.rank, 1);
  ck_assert_int_eq(f.code, 1);
  char d[1024];
  loom__failure_describe(&f, 1 << 8, d, sizeof d);
  ck_assert_str_eq(d, "rank 1 called MPI_Abort (error code 1): loom[1]: error: fault injected by "
                      "LOOM_FAULT=1:3:error at step 3");
}
END_TEST

/* A node gone: mpirun loses its daemon; that outranks the ranks' failures around it. */
START_TEST(failure_lost_node_outranks_ranks) {
  const char *out[] = {
      "mpirun noticed that process rank 0 with PID 0 on node nodeA exited on signal 15 "
      "(Terminated).",
      "ORTE has lost communication with a remote daemon.",
      "",
      "  HNP daemon   : [[12345,0],0] on node vm",
      "  Remote daemon: [[12345,0],2] on node nodeB",
      NULL};
  loom_failure f;
  feed(&f, out);
  ck_assert_int_eq(f.kind, LOOM_FAILURE_NODE);
  ck_assert_str_eq(f.node, "nodeB");
  char d[1024];
  loom__failure_describe(&f, 1 << 8, d, sizeof d);
  ck_assert_str_eq(d, "node nodeB was lost (mpirun lost its daemon there)");
  loom_failure g;
  feed(&g, out);
  ck_assert(loom__failure_same(&f, &g));
}
END_TEST

/* nodeB's daemon and ranks SIGKILLed mid-run (captured, two fake nodes on one machine): mpirun
 * says it could not start a daemon, a rank on nodeA that its peer on nodeB disconnected. */
START_TEST(failure_killed_node_from_peer_disconnect) {
  const char *out[] = {
      "ORTE was unable to reliably start one or more daemons.",
      "This usually is caused by:",
      "An MPI communication peer process has unexpectedly disconnected.  This",
      "usually indicates a failure in the peer process (e.g., a crash or",
      "  Local host: vm",
      "  Local PID:  6729",
      "  Peer host:  nodeB",
      NULL};
  loom_failure f;
  feed(&f, out);
  ck_assert_int_eq(f.kind, LOOM_FAILURE_NODE);
  char d[1024];
  loom__failure_describe(&f, 9 << 8, d, sizeof d);
  ck_assert_str_eq(d, "node nodeB was lost (mpirun lost its daemon there)");
  /* a peer's disconnect alone names the node its process died on; a rank's failure, seen
   * after it, outranks it (the disconnect is what the other ranks see of that death) */
  const char *peer[] = {"An MPI communication peer process has unexpectedly disconnected.",
                        "  Peer host:  nodeB", NULL};
  feed(&f, peer);
  loom__failure_describe(&f, 1 << 8, d, sizeof d);
  ck_assert_str_eq(d, "a process on node nodeB disappeared (an MPI peer there disconnected)");
  loom__failure_line(&f, "mpirun noticed that process rank 3 with PID 0 on node nodeB exited on "
                         "signal 11 (Segmentation fault).");
  ck_assert_int_eq(f.kind, LOOM_FAILURE_SIGNAL);
  ck_assert_int_eq(f.rank, 3);
}
END_TEST

/* Nothing known: the launcher's own status is the reason. */
START_TEST(failure_unknown_uses_the_status) {
  const char *out[] = {"something else entirely", NULL};
  loom_failure f;
  feed(&f, out);
  ck_assert_int_eq(f.kind, LOOM_FAILURE_UNKNOWN);
  char d[1024];
  loom__failure_describe(&f, 2 << 8, d, sizeof d);
  ck_assert_str_eq(d, "the launcher exited with status 2");
  loom__failure_describe(&f, SIGKILL, d, sizeof d);
  ck_assert_str_eq(d, "the launcher was killed by signal 9 (Killed)");
}
END_TEST

/* mpirun's MPI_Abort summary is not always printed (seen on 2 ranks: "ORTE_ERROR_LOG: Data
 * unpack would read past end of buffer ... show_help.c"): the first rank's error line names it. */
START_TEST(failure_summary_lost_names_the_first_error) {
  const char *out[] = {"loom[0]: error: fault injected by LOOM_FAULT=0:3:error at step 3",
                       "[vm:19569] [[8335,0],0] ORTE_ERROR_LOG: Data unpack would read past end "
                       "of buffer in file ../../../orte/util/show_help.c at line 501",
                       NULL};
  loom_failure f;
  feed(&f, out);
  char d[1024];
  loom__failure_describe(&f, 1 << 8, d, sizeof d);
  ck_assert_str_eq(d, "rank 0 failed (the launcher exited with status 1): loom[0]: error: fault "
                      "injected by LOOM_FAULT=0:3:error at step 3");
}
END_TEST

static char g_dir[256];
static void dir_setup(void) { test_dir_make(g_dir, sizeof g_dir, "check_launch"); }
static void dir_teardown(void) { test_dir_remove(g_dir); }

static const char *write_file(const char *name, const char *text) {
  const char *p = test_dir_path(g_dir, name);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
  return p;
}

START_TEST(hostfile_reads_and_writes) {
  const char *p = write_file("hosts", "# two nodes\nnodeA slots=2\n\n  nodeB slots=3 max_slots=4 "
                                      "# comment\nnodeC\n");
  loom_host h[LOOM_MAX_HOSTS];
  int n;
  char err[512];
  ck_assert_int_eq(loom__hostfile_read(p, h, &n, err, sizeof err), 0);
  ck_assert_int_eq(n, 3);
  ck_assert_str_eq(h[1].name, "nodeB");
  ck_assert_int_eq(h[1].slots, 3);
  ck_assert_int_eq(h[1].line, 4);
  ck_assert_int_eq(h[2].slots, 1);
  int alive[3] = {1, 0, 1};
  const char *q = test_dir_path(g_dir, "live");
  ck_assert_int_eq(loom__hostfile_write(q, h, alive, n, err, sizeof err), 3);
  loom_host g[LOOM_MAX_HOSTS];
  ck_assert_int_eq(loom__hostfile_read(q, g, &n, err, sizeof err), 0);
  ck_assert_int_eq(n, 2);
  ck_assert_str_eq(g[1].name, "nodeC");
}
END_TEST

static void expect_hostfile_refused(const char *text, const char *needle) {
  const char *p = write_file("bad", text);
  loom_host h[LOOM_MAX_HOSTS];
  int n;
  char err[512] = "";
  ck_assert_int_eq(loom__hostfile_read(p, h, &n, err, sizeof err), -1);
  ck_assert_msg(strstr(err, needle), "'%s' lacks '%s'", err, needle);
}

START_TEST(hostfile_refusals) {
  expect_hostfile_refused("a slots=0\n", "bad:1: slots must be an integer in [1, 4096]");
  expect_hostfile_refused("a\nb slots=x\n", "bad:2: slots must be");
  expect_hostfile_refused("a cpus=2\n", "unknown word 'cpus=2'");
  expect_hostfile_refused("a\nb\na slots=2\n", "bad:3: node 'a' is already on line 1");
  expect_hostfile_refused("# nothing\n\n", "names no node");
  char longline[1400];
  memset(longline, 'a', sizeof longline - 2);
  longline[sizeof longline - 2] = '\n';
  longline[sizeof longline - 1] = '\0';
  expect_hostfile_refused(longline, "bad:1: a line longer than 1022 characters");
  loom_host h[LOOM_MAX_HOSTS];
  int n;
  char err[512];
  ck_assert_int_eq(loom__hostfile_read(test_dir_path(g_dir, "missing"), h, &n, err, sizeof err),
                   -1);
  ck_assert(strstr(err, "cannot open the hostfile"));
}
END_TEST

START_TEST(elastic_keeps_the_global_batch) {
  char err[512];
  loom_batch_plan p = {.global_batch_size = 16, .micro_batch_size = 4, .tp = 1, .pp = 1};
  ck_assert_int_eq(loom__elastic_accum(&p, 4, err, sizeof err), 1);
  ck_assert_int_eq(loom__elastic_accum(&p, 2, err, sizeof err), 2);
  ck_assert_int_eq(loom__elastic_accum(&p, 1, err, sizeof err), 4);
  ck_assert_int_eq(loom__elastic_accum(&p, 3, err, sizeof err), -1);
  ck_assert_str_eq(err, "3 ranks remain (dp 3 = 3 / (tp 1 x pp 1)), but the global batch of 16 "
                        "sequences is not a multiple of micro_batch_size 4 x dp 3 = 12: it "
                        "cannot be kept by gradient accumulation");
  loom_batch_plan q = {.global_batch_size = 24, .micro_batch_size = 2, .tp = 2, .pp = 2};
  ck_assert_int_eq(loom__elastic_accum(&q, 12, err, sizeof err), 4); /* dp 3 */
  ck_assert_int_eq(loom__elastic_accum(&q, 4, err, sizeof err), 12); /* dp 1 */
  ck_assert_int_eq(loom__elastic_accum(&q, 6, err, sizeof err), -1);
  ck_assert_str_eq(err, "6 ranks remain, but tensor-parallel 2 x pipeline 2 = 4 does not divide "
                        "6: the mesh cannot be built on them");
}
END_TEST

/* A fake remote shell: node "up" answers, "down" exits 255 with a message, "hang" never
 * answers (killed at the timeout). */
START_TEST(probe_with_a_fake_agent) {
  const char *agent = write_file("agent.sh",
                                 "#!/bin/sh\n"
                                 "case \"$1\" in\n"
                                 "  up) shift; exec \"$@\" ;;\n"
                                 "  down) echo \"ssh: connect to host $1 port 22: refused\" >&2; "
                                 "exit 255 ;;\n"
                                 "  *) exec sleep 30 ;;\n"
                                 "esac\n");
  ck_assert_int_eq(chmod(agent, 0755), 0);
  loom_host h[3] = {{.name = "up", .slots = 1}, {.name = "down", .slots = 1},
                    {.name = "hang", .slots = 1}};
  int alive[3];
  char why[3][128], err[256];
  ck_assert_int_eq(loom__probe_hosts(agent, h, 3, 0.5, alive, why, err, sizeof err), 1);
  ck_assert(alive[0] && !alive[1] && !alive[2]);
  ck_assert_str_eq(why[1], "exit status 255: ssh: connect to host down port 22: refused");
  ck_assert_str_eq(why[2], "no answer within 0.5 s");
  ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1); /* every probe reaped */
  /* this machine answers without the agent (mpirun starts its ranks here without one) */
  loom_host local[1] = {{.name = "localhost", .slots = 2}};
  ck_assert_int_eq(loom__probe_hosts("/nonexistent/agent", local, 1, 0.5, alive, why, err,
                                     sizeof err), 1);
  ck_assert(alive[0]);
  char me[256] = "";
  gethostname(me, sizeof me - 1);
  ck_assert(loom__host_is_local(me));
  ck_assert(!loom__host_is_local("surely-not-this-host.example"));
}
END_TEST

static int parse(const char *const *args, loom_launch_opts *o) {
  char *argv[32];
  int argc = 0;
  argv[argc++] = "loom";
  argv[argc++] = "launch";
  for (int i = 0; args[i]; i++) argv[argc++] = (char *)args[i];
  return loom__launch_parse(argc, argv, o);
}

START_TEST(launch_command_line) {
  loom_launch_opts o;
  const char *ok[] = {"--hostfile", "h", "--min-nodes", "1", "--max-restarts", "5",
                      "--backoff", "0.5", "--rsh", "agent -x", "--mpirun-arg", "--bind-to",
                      "--mpirun-arg", "none", "c.json", "--set", "train.steps=4",
                      "--set=a=b", NULL};
  ck_assert_int_eq(parse(ok, &o), 0);
  ck_assert_str_eq(o.hostfile, "h");
  ck_assert_int_eq(o.min_nodes, 1);
  ck_assert_int_eq(o.max_restarts, 5);
  ck_assert(o.backoff_s == 0.5);
  ck_assert_str_eq(o.rsh, "agent -x");
  ck_assert_int_eq(o.n_mpirun_args, 2);
  ck_assert_str_eq(o.config, "c.json");
  ck_assert_int_eq(o.n_sets, 2);
  ck_assert_str_eq(o.sets[1], "a=b");
  const char *defaults[] = {"--np", "4", "c.json", NULL};
  ck_assert_int_eq(parse(defaults, &o), 0);
  ck_assert_int_eq(o.np, 4);
  ck_assert_int_eq(o.max_restarts, 3);
  ck_assert(o.backoff_s == 1 && o.probe_timeout_s == 10 && o.stop_timeout_s == 120);
  const char *bad[][6] = {{"--np", "0", "c.json", NULL},
                          {"--max-restarts", "-1", "c.json", NULL},
                          {"--backoff", "soon", "c.json", NULL},
                          {"--min-nodes", "1", "c.json", NULL}, /* no hostfile */
                          {"--np", "2", "--hostfile", "h", "c.json", NULL},
                          {"--np", "2", NULL},
                          {"--np", "2", "c.json", "--world", "2", NULL},
                          {"--frobnicate", "1", "c.json", NULL}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(parse(bad[i], &o) == -1, "case %zu accepted", i);
}
END_TEST

START_TEST(restart_info_round_trip) {
  loom_restart_info in = {.present = 1, .attempt = 2, .world_size_before = 4,
                          .grad_accum_steps_before = 1};
  snprintf(in.reason, sizeof in.reason, "rank 1 \"quoted\" was killed by signal 9 (Killed)");
  char *json = loom_restart_info_json(&in);
  ck_assert_ptr_nonnull(json);
  loom_restart_info out;
  char err[512];
  ck_assert_int_eq(loom_restart_info_parse(json, &out, err, sizeof err), 0);
  free(json);
  ck_assert(out.present);
  ck_assert_int_eq(out.attempt, 2);
  ck_assert_int_eq(out.world_size_before, 4);
  ck_assert_int_eq(out.grad_accum_steps_before, 1);
  ck_assert_str_eq(out.reason, in.reason);
  /* a newline cannot forge a log line */
  ck_assert_int_eq(loom_restart_info_parse("{\"attempt\":1,\"world_size_before\":2,"
                                           "\"grad_accum_steps_before\":1,\"reason\":\"a\\nb\"}",
                                           &out, err, sizeof err), 0);
  ck_assert_str_eq(out.reason, "a?b");
}
END_TEST

START_TEST(restart_info_refusals) {
  const char *bad[][2] = {
      {"[1]", "not a JSON object"},
      {"{", "not a JSON object"},
      {"{\"world_size_before\":2,\"grad_accum_steps_before\":1,\"reason\":\"x\"}",
       "no \"attempt\""},
      {"{\"attempt\":0,\"world_size_before\":2,\"grad_accum_steps_before\":1,\"reason\":\"x\"}",
       "\"attempt\" must be an integer in [1, "},
      {"{\"attempt\":1,\"world_size_before\":2,\"grad_accum_steps_before\":1,\"reason\":3}",
       "\"reason\" must be a string"},
      {"{\"attempt\":1,\"world_size_before\":2,\"grad_accum_steps_before\":1,\"reason\":\"x\","
       "\"extra\":1}", "unknown key \"extra\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    loom_restart_info out;
    char err[512] = "";
    ck_assert_int_eq(loom_restart_info_parse(bad[i][0], &out, err, sizeof err), -1);
    ck_assert_msg(strstr(err, bad[i][1]) && !strncmp(err, "--restart: ", 11), "'%s' lacks '%s'",
                  err, bad[i][1]);
    ck_assert(!out.present);
  }
}
END_TEST

/* A reason cut at the buffer's end never ends inside a UTF-8 sequence (jansson would refuse
 * to write the record). */
START_TEST(restart_reason_cut_on_a_character) {
  char json[3000];
  int n = snprintf(json, sizeof json, "{\"attempt\":1,\"world_size_before\":2,"
                                      "\"grad_accum_steps_before\":1,\"reason\":\"");
  for (int i = 0; i < 700; i++) n += snprintf(json + n, sizeof json - (size_t)n, "\xc3\xa9");
  snprintf(json + n, sizeof json - (size_t)n, "\"}");
  loom_restart_info out;
  char err[512];
  ck_assert_int_eq(loom_restart_info_parse(json, &out, err, sizeof err), 0);
  ck_assert_int_eq(strlen(out.reason) % 2, 0);
  char *back = loom_restart_info_json(&out);
  ck_assert_ptr_nonnull(back);
  free(back);
}
END_TEST

int main(void) {
  const check_case pure[] = {
      {"failure_exit_status", failure_exit_status},
      {"failure_signal_names_node_and_rank_line", failure_signal_names_node_and_rank_line},
      {"failure_abort_quotes_the_ranks_line", failure_abort_quotes_the_ranks_line},
      {"failure_lost_node_outranks_ranks", failure_lost_node_outranks_ranks},
      {"failure_killed_node_from_peer_disconnect", failure_killed_node_from_peer_disconnect},
      {"failure_unknown_uses_the_status", failure_unknown_uses_the_status},
      {"failure_summary_lost_names_the_first_error", failure_summary_lost_names_the_first_error},
      {"elastic_keeps_the_global_batch", elastic_keeps_the_global_batch},
      {"launch_command_line", launch_command_line},
      {"restart_info_round_trip", restart_info_round_trip},
      {"restart_info_refusals", restart_info_refusals},
      {"restart_reason_cut_on_a_character", restart_reason_cut_on_a_character},
  };
  Suite *s = check_case_suite("launch", CHECK_CASES(pure), NULL, NULL, 0);
  check_add_tcase(s, "files", CHECK_TESTS(hostfile_reads_and_writes, hostfile_refusals,
                                          probe_with_a_fake_agent),
                  dir_setup, dir_teardown, 10);
  return check_run_suite(s, CK_FORK);
}
