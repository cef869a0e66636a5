/* The supervisor's processes (Linux /proc): no rank of a stopped or failed attempt may outlive
 * it. loom launch becomes a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so a local rank whose
 * mpirun died is re-parented to the supervisor instead of init, and is still found here. */
#ifndef LOOM_CLI_LAUNCH_PROCTREE_H
#define LOOM_CLI_LAUNCH_PROCTREE_H

#include <sys/types.h>

/* Make this process the subreaper of its descendants. 0, or -1 (not Linux, or refused). */
int loom__become_subreaper(void);

/* Send `sig` to every descendant of `root` (children, grandchildren, ...; root itself not),
 * found through the parent links of /proc/PID/stat. Returns how many were signalled. */
int loom__signal_descendants(pid_t root, int sig);

/* SIGKILL every descendant of this process and reap the children: what is left of an attempt
 * after its mpirun has exited. Returns how many were killed. */
int loom__kill_leftovers(void);

#endif
