#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Slurm Prolog: records the energy counters of the job's GPUs on this node when the job starts; the Epilog
# (joule-epilog.sh) subtracts them from its own reading and writes the job's energy (docs/operators.md).
#
#   slurm.conf:  Prolog=/usr/share/joule/slurm/joule-prolog.sh
#                Epilog=/usr/share/joule/slurm/joule-epilog.sh
#
# Settings (environment, or /etc/default/joule-slurm, a shell file; JOULE_SLURM_CONFIG names another):
#   JOULE_BIN             the joule command (default: joule on PATH)
#   JOULE_JOBS_DIR        where snapshots and job files go (default /var/lib/joule/jobs)
#   JOULE_DAEMON_SOCKET   read the GPUs through `joule daemon` (no NVML in the prolog's process)
# Slurm gives the job's GPUs in SLURM_JOB_GPUS (physical indices); without it, all GPUs are read.
#
# It never fails: Slurm drains a node whose prolog exits non-zero, and a missing energy figure is not worth
# a drained node. Problems go to syslog (tag joule-prolog) and stderr, and it exits 0.
set -u
config=${JOULE_SLURM_CONFIG:-/etc/default/joule-slurm}
if [ -r "$config" ]; then
  # shellcheck source=/dev/null
  . "$config"
fi
JOULE_BIN=${JOULE_BIN:-joule}
JOULE_JOBS_DIR=${JOULE_JOBS_DIR:-/var/lib/joule/jobs}

log() {
  echo "joule-prolog: $*" >&2
  logger -t joule-prolog -- "$*" 2>/dev/null || true
}

job=${SLURM_JOB_ID:-}
case $job in
  '' | *[!0-9]*)
    log "SLURM_JOB_ID '$job' is not a job id: nothing recorded"
    exit 0
    ;;
esac
if ! mkdir -p "$JOULE_JOBS_DIR"; then
  log "job $job: cannot create $JOULE_JOBS_DIR: nothing recorded"
  exit 0
fi
if [ -n "${SLURM_JOB_GPUS:-}" ]; then
  CUDA_VISIBLE_DEVICES=$SLURM_JOB_GPUS
  export CUDA_VISIBLE_DEVICES
fi
snapshot="$JOULE_JOBS_DIR/$job.start.json"
tmp="$snapshot.tmp.$$"
if "$JOULE_BIN" counters >"$tmp" 2>"$tmp.err"; then
  mv -f "$tmp" "$snapshot"
else
  log "job $job: '$JOULE_BIN counters' failed: $(head -c 2000 "$tmp.err")"
  rm -f "$tmp"
fi
rm -f "$tmp.err"
exit 0
