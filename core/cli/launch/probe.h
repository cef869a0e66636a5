/* Is a node there? loom launch asks each node of its hostfile, in parallel, with the remote
 * shell mpirun itself starts its daemons through: `AGENT NODE true` (AGENT: --rsh, default
 * ssh; words split on blanks, as Open MPI's plm_rsh_agent is). A node answers when that exits 0
 * within the timeout; the agent runs in a session of its own (it cannot prompt on the terminal)
 * with stdin and stdout on /dev/null, and is killed with its process group at the timeout. */
#ifndef LOOM_CLI_LAUNCH_PROBE_H
#define LOOM_CLI_LAUNCH_PROBE_H

#include <stddef.h>

#include "hostfile.h"

/* 1 when `name` is this machine ("localhost", "127.0.0.1", or its hostname, short or full):
 * mpirun starts its ranks there without a remote shell, and so it answers without a probe. */
int loom__host_is_local(const char *name);

/* Probe hosts[0..n) (this machine's name without a probe: loom__host_is_local). alive[i] = 1
 * when node i answered; otherwise why[i] (128 bytes each) says
 * how it did not ("timed out after 10 s", "exit status 255: ssh: connect to host ..."). Returns
 * the number that answered, or -1 with err when the agent cannot be started at all. */
int loom__probe_hosts(const char *agent, const loom_host *hosts, int n, double timeout_s,
                      int *alive, char (*why)[128], char *err, size_t errlen);

#endif
