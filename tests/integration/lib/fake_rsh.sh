#!/bin/bash
# A remote shell for "nodes" that are all this machine, for loom launch's tests and mpirun's
# plm_rsh_agent: `fake_rsh.sh NODE COMMAND...` runs COMMAND here, as `ssh NODE COMMAND...` would
# there (mpirun passes its daemon's command line as words for a remote shell to join). A node
# whose marker file $FAKE_RSH_DOWN/NODE exists is gone: it never answers (the caller's timeout
# ends the wait), as a powered-off node's ssh hangs.
node=$1
shift
if [ -n "${FAKE_RSH_DOWN:-}" ] && [ -e "$FAKE_RSH_DOWN/$node" ]; then
  exec sleep 3600
fi
exec /bin/sh -c "$*"
