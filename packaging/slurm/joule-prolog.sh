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
#   JOULE_SLURM_SCOPE     job: read every node of SLURM_JOB_NODELIST through its daemon's network listener
#                         (set by joule-fleet-prolog.sh/joule-fleet-epilog.sh, slurmctld's PrologSlurmctld and
#                         EpilogSlurmctld): one job file with each node and the total (docs/fleet.md)
#   JOULE_DAEMON_PORT     the nodes' daemon port in that scope (default 9700); JOULE_DAEMON_CA,
#                         JOULE_DAEMON_TOKEN_FILE (or JOULE_DAEMON_CERT and JOULE_DAEMON_KEY) authenticate
#   JOULE_SCONTROL        the scontrol that expands SLURM_JOB_NODELIST (default scontrol)
# Slurm gives the job's GPUs in SLURM_JOB_GPUS (physical indices); without it, all GPUs are read.
#
# It runs as root (slurmd's user), so nothing a user can plant in the jobs folder may redirect its writes or
# feed the epilog a snapshot: the folder (and every folder above it) must be root's and writable by no one
# else unless sticky (it refuses otherwise; a sticky folder others may write is warned about), and the
# snapshot is written to a name created afresh (mktemp: O_CREAT|O_EXCL, never through a link), then renamed
# over the snapshot's name (a rename replaces a link, it does not follow it).
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

# Sets `unsafe` to why the folder $1 (or one above it) lets another user replace or plant the scripts' files,
# and `shared` to a warning when others may create names in it (sticky); both empty if it is root's alone.
# The same rule as joule daemon's socket folder (docs/daemon.md).
check_jobs_folder() {
  unsafe=
  shared=
  me=$(id -u)
  if ! folder=$(cd -P -- "$1" 2>/dev/null && pwd -P); then
    unsafe="cannot enter it"
    return
  fi
  current=$folder
  while :; do
    info=$(stat -c '%u %a' -- "$current" 2>/dev/null) || {
      unsafe="cannot inspect $current"
      return
    }
    owner=${info% *}
    mode=$((0${info#* }))
    if [ "$owner" != 0 ] && [ "$owner" != "$me" ]; then
      unsafe="$current belongs to uid $owner, not to root: its owner could replace the job snapshots; use a folder of root's"
      return
    fi
    if [ $((mode & 022)) != 0 ]; then
      if [ $((mode & 01000)) = 0 ]; then
        unsafe=$(printf '%s is writable by %s (mode %04o) and not sticky: any user could replace the job snapshots or plant links where the scripts (root) write; make it 0755 (chmod go-w %s)' \
          "$current" "$([ $((mode & 002)) != 0 ] && echo others || echo its group)" "$mode" "$current")
        return
      fi
      if [ "$current" = "$folder" ]; then
        shared=$(printf 'the jobs folder %s is writable by others (mode %04o; sticky, so they cannot replace root'"'"'s files): they can fill it with names; the scripts create their files afresh and check the snapshot, but a folder only root can write (chmod 0755 %s) is safer' \
          "$folder" "$mode" "$folder")
      fi
    fi
    [ "$current" = / ] && return
    current=${current%/*}
    [ -n "$current" ] || current=/
  done
}

# Sets `nodes` to the job's nodes as `joule counters --nodes` takes them (HOST=HOST:PORT,…) when the script runs
# for the whole job (JOULE_SLURM_SCOPE=job: joule-fleet-prolog.sh and joule-fleet-epilog.sh, as slurmctld's
# PrologSlurmctld and EpilogSlurmctld), each node read through its daemon's network listener (docs/fleet.md);
# empty otherwise (this node's counters). @return 1, having said why, when the nodes cannot be listed.
job_nodes() {
  nodes=
  [ "${JOULE_SLURM_SCOPE:-node}" = job ] || return 0
  if ! hosts=$("${JOULE_SCONTROL:-scontrol}" show hostnames "${SLURM_JOB_NODELIST:-}" 2>&1); then
    log "job $1: cannot list the nodes of '${SLURM_JOB_NODELIST:-}' with ${JOULE_SCONTROL:-scontrol}: $(printf '%s' "$hosts" | head -c 500)"
    return 1
  fi
  for node_host in $hosts; do
    nodes="${nodes:+$nodes,}$node_host=$node_host:${JOULE_DAEMON_PORT:-9700}"
  done
  if [ -z "$nodes" ]; then
    log "job $1: SLURM_JOB_NODELIST names no node"
    return 1
  fi
  # The daemons' authority and this side's token or certificate (docs/fleet.md), for joule counters.
  export JOULE_DAEMON_CA JOULE_DAEMON_TOKEN_FILE JOULE_DAEMON_CERT JOULE_DAEMON_KEY 2>/dev/null || true
  return 0
}

job=${SLURM_JOB_ID:-}
case $job in
  '' | *[!0-9]*)
    log "SLURM_JOB_ID '$job' is not a job id: nothing recorded"
    exit 0
    ;;
esac
# The jobs folder itself 0755 whatever the umask (missing folders above it get the umask's mode, and are
# checked like it below).
# shellcheck disable=SC2174
if ! mkdir -p -m 0755 "$JOULE_JOBS_DIR"; then
  log "job $job: cannot create $JOULE_JOBS_DIR: nothing recorded"
  exit 0
fi
check_jobs_folder "$JOULE_JOBS_DIR"
if [ -n "$unsafe" ]; then
  log "job $job: refusing the jobs folder $JOULE_JOBS_DIR: $unsafe; nothing recorded"
  exit 0
fi
if [ -n "$shared" ]; then
  log "job $job: warning: $shared"
fi
job_nodes "$job" || exit 0
if [ -z "$nodes" ] && [ -n "${SLURM_JOB_GPUS:-}" ]; then
  CUDA_VISIBLE_DEVICES=$SLURM_JOB_GPUS
  export CUDA_VISIBLE_DEVICES
fi
snapshot="$JOULE_JOBS_DIR/$job.start.json"
# A fresh name (mode 0600, O_EXCL): never a file or link someone put there.
if ! tmp=$(mktemp "$JOULE_JOBS_DIR/.$job.start.json.XXXXXXXX"); then
  log "job $job: cannot create a file in $JOULE_JOBS_DIR: nothing recorded"
  exit 0
fi
if err=$("$JOULE_BIN" counters ${nodes:+--nodes "$nodes"} 2>&1 >"$tmp"); then
  # -T: a directory (or a link to one) at the snapshot's name is an error, never a folder to move into.
  if ! mv -fT -- "$tmp" "$snapshot"; then
    log "job $job: cannot rename $tmp to $snapshot: nothing recorded"
    rm -f -- "$tmp"
  fi
else
  log "job $job: '$JOULE_BIN counters' failed: $(printf '%s' "$err" | head -c 2000)"
  rm -f -- "$tmp"
fi
exit 0
