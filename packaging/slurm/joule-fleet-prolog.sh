#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Slurm PrologSlurmctld (slurm.conf: PrologSlurmctld=/usr/share/joule/slurm/joule-fleet-prolog.sh): joule-prolog.sh for the
# whole job, on the controller: every node of SLURM_JOB_NODELIST read at once through its daemon's network
# listener (`joule daemon --listen`, docs/fleet.md), one job file $JOULE_JOBS_DIR/$SLURM_JOB_ID.json with each
# node's energy and the total (null, with the node named, when a node did not answer). Settings as in
# joule-prolog.sh (JOULE_DAEMON_PORT, JOULE_DAEMON_CA, JOULE_DAEMON_TOKEN_FILE, JOULE_SCONTROL).
JOULE_SLURM_SCOPE=job
export JOULE_SLURM_SCOPE
exec "$(dirname -- "$0")/joule-prolog.sh" "$@"
