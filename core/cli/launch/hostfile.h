/* Hostfiles for loom launch: Open MPI's format, one node per line, "NAME [slots=N]" ('#'
 * starts a comment; slots defaults to 1, as the supervisor needs a world size it can count on;
 * max_slots is accepted and ignored). The supervisor reads the user's file once and writes the
 * nodes that answer to a file of its own for each attempt's mpirun. */
#ifndef LOOM_CLI_LAUNCH_HOSTFILE_H
#define LOOM_CLI_LAUNCH_HOSTFILE_H

#include <stddef.h>

enum { LOOM_MAX_HOSTS = 256 };

typedef struct loom_host {
  char name[128];
  int slots;   /* ranks on this node */
  int line;    /* its line in the hostfile (for messages) */
} loom_host;

/* Read `path` into hosts[0..*n). 0, or -1 with "FILE:LINE: reason" in err: an unreadable
 * file, a line that is not "NAME [slots=N]" or longer than 1022 characters, slots outside [1, 4096], a node named twice, more
 * than LOOM_MAX_HOSTS nodes, or no node at all. */
int loom__hostfile_read(const char *path, loom_host *hosts, int *n, char *err, size_t errlen);

/* Write the hosts with alive[i] set to `path` ("NAME slots=N" lines), replacing it. Returns
 * their total slots, or -1 with err. */
int loom__hostfile_write(const char *path, const loom_host *hosts, const int *alive, int n,
                         char *err, size_t errlen);

#endif
