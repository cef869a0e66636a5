/* loom launch: a training job under a supervisor that restarts it (launch_cmd.c). */
#ifndef LOOM_CLI_LAUNCH_H
#define LOOM_CLI_LAUNCH_H

/* `loom launch ...` (argv[0] "loom", argv[1] "launch"). Returns the exit status. */
int loom_cmd_launch(int argc, char **argv);

#endif
