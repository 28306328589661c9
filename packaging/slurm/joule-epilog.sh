#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Slurm Epilog: reads the energy counters of the job's GPUs (and, through joule daemon, of the node's CPU
# packages and DRAM) again, subtracts what joule-prolog.sh recorded at
# the start, and writes the job's energy on this node as JSON in the shape of `joule measure --format json`
# to $JOULE_JOBS_DIR/$SLURM_JOB_ID.json (docs/operators.md). Settings as in joule-prolog.sh, plus:
#   JOULE_PYTHON          the Python 3 that does the arithmetic (default python3; standard library only)
#   JOULE_JOB_FILE_NODE   1: name the file $SLURM_JOB_ID.<short host name>.json (a folder shared by nodes)
#
# It runs as root: the jobs folder must be safe as for the prolog (refused otherwise, warned about if others
# may create names in it, sticky); the start snapshot is trusted only if it is root's own regular file, one
# link, writable by no one else (opened without following links: a user who replaced it cannot choose the
# job's energy); every file it writes is created afresh (O_EXCL|O_NOFOLLOW) and renamed into place.
#
# Shared GPUs: the job file also gives each GPU's estimated share for this job (`estimated_share`, marked
# estimated, the method named) beside the whole GPU's counter difference, from `joule counters --job-energy`:
# only joule daemon can tell it (JOULE_DAEMON_SOCKET), since it samples the GPUs' processes all along and the
# driver keeps seconds of samples. Where it cannot (no daemon, GPUs without process samples, a job scope), the
# file says why (`estimated_shares.error`) and the counter difference is all there is.
#
# CPU energy: a RAPL counter that was reset during the job (the daemon counts the resets it sees: a step back
# faster than a package can draw) makes the job's CPU energy not measurable (null, with the reason), never a
# wrap's worth of phantom energy.
#
# It never fails (a non-zero epilog drains the node): problems go to syslog (tag joule-epilog) and stderr.
set -u
config=${JOULE_SLURM_CONFIG:-/etc/default/joule-slurm}
if [ -r "$config" ]; then
  # shellcheck source=/dev/null
  . "$config"
fi
JOULE_BIN=${JOULE_BIN:-joule}
JOULE_JOBS_DIR=${JOULE_JOBS_DIR:-/var/lib/joule/jobs}
JOULE_PYTHON=${JOULE_PYTHON:-python3}

log() {
  echo "joule-epilog: $*" >&2
  logger -t joule-epilog -- "$*" 2>/dev/null || true
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
    log "SLURM_JOB_ID '$job' is not a job id: nothing written"
    exit 0
    ;;
esac
check_jobs_folder "$JOULE_JOBS_DIR"
if [ -n "$unsafe" ]; then
  log "job $job: refusing the jobs folder $JOULE_JOBS_DIR: $unsafe; nothing written"
  exit 0
fi
if [ -n "$shared" ]; then
  log "job $job: warning: $shared"
fi
start="$JOULE_JOBS_DIR/$job.start.json"
if [ ! -e "$start" ] && [ ! -L "$start" ]; then
  log "job $job: no start snapshot $start (the prolog did not run or failed): nothing written"
  exit 0
fi
job_nodes "$job" || exit 0
if [ -z "$nodes" ] && [ -n "${SLURM_JOB_GPUS:-}" ]; then
  CUDA_VISIBLE_DEVICES=$SLURM_JOB_GPUS
  export CUDA_VISIBLE_DEVICES
fi
host=$(hostname -s 2>/dev/null || hostname)
if [ -z "$nodes" ] && [ "${JOULE_JOB_FILE_NODE:-0}" = 1 ]; then
  out="$JOULE_JOBS_DIR/$job.$host.json"
else
  out="$JOULE_JOBS_DIR/$job.json"
fi
# A fresh name (mode 0600, O_EXCL): never a file or link someone put there.
if ! end=$(mktemp "$JOULE_JOBS_DIR/.$job.end.json.XXXXXXXX"); then
  log "job $job: cannot create a file in $JOULE_JOBS_DIR: nothing written"
  exit 0
fi
if ! err=$("$JOULE_BIN" counters ${nodes:+--nodes "$nodes"} 2>&1 >"$end"); then
  log "job $job: '$JOULE_BIN counters' failed: $(printf '%s' "$err" | head -c 2000)"
  rm -f -- "$end" "$start"
  exit 0
fi
# The job's estimated share of each GPU it shared with other jobs, or why there is none (kept for the file).
shares=
shares_error=
if [ -n "$nodes" ]; then
  shares_error="each job's share of a shared GPU is read on the node (joule-epilog.sh through the node's joule daemon), not in the job scope (JOULE_SLURM_SCOPE=job)"
elif ! shares=$(mktemp "$JOULE_JOBS_DIR/.$job.shares.json.XXXXXXXX"); then
  shares=
  shares_error="cannot create a file in $JOULE_JOBS_DIR"
elif ! shares_error=$("$JOULE_BIN" counters --job-energy "$job" 2>&1 >"$shares"); then
  shares_error=$(printf '%s' "$shares_error" | head -c 2000)
  shares_error=${shares_error#joule: error: }
  rm -f -- "$shares"
  shares=
else
  shares_error=
fi
# Python prints one line on stderr and exits 3 when it does not trust the start snapshot (left in place for
# inspection), 1 (a traceback) when it fails otherwise.
why=$(JOULE_HOST=$host JOULE_SHARES_ERROR=$shares_error "$JOULE_PYTHON" - "$start" "$end" "$out" "$shares" 2>&1 <<'PYTHON'
import errno
import json
import os
import stat
import sys
import tempfile

start_path, end_path, out_path, shares_path = sys.argv[1:5]
MAX_SNAPSHOT_BYTES = 1 << 20  # a snapshot is a few kB; more is not one


def read_trusted(path, what):
    """The JSON in `path` if it is a file the scripts (this uid) wrote: opened without following a link, then
    judged on what was opened (nothing can be swapped in between); otherwise one line on stderr and exit 3."""

    def refuse(why):
        sys.stderr.write("not trusting the %s %s: %s; nothing written (it is left in place for inspection)\n"
                         % (what, path, why))
        sys.exit(3)

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:
            refuse("it is a symbolic link (someone replaced the prolog's file)")
        refuse(error.strerror)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            refuse("it is not a regular file")
        if info.st_uid != os.geteuid():
            refuse("it belongs to uid %d, not to uid %d, who wrote it (someone replaced it)"
                   % (info.st_uid, os.geteuid()))
        if info.st_nlink != 1:
            refuse("it has %d hard links (it may be another file under a second name)" % info.st_nlink)
        if info.st_mode & 0o022:
            refuse("other users may write it (mode %04o)" % stat.S_IMODE(info.st_mode))
        data = f.read(MAX_SNAPSHOT_BYTES + 1)
    if len(data) > MAX_SNAPSHOT_BYTES:
        refuse("it is larger than %d bytes" % MAX_SNAPSHOT_BYTES)
    try:
        return json.loads(data)
    except ValueError as error:
        refuse("it is not JSON (%s)" % error)


start = read_trusted(start_path, "start snapshot")
end = read_trusted(end_path, "end snapshot")


def key(gpu):
    # The UUID survives a change of CUDA_VISIBLE_DEVICES order; the physical index where there is none.
    return gpu.get("uuid") or "physical:%s" % gpu.get("physical_index")


def node_devices(start, end):
    """The devices of one node between two of its snapshots: (devices, total of those measured)."""
    before = {key(gpu): gpu for gpu in start["gpus"]}
    wall_time_s = end["time_unix_s"] - start["time_unix_s"]
    devices = []
    total = 0.0
    for gpu in end["gpus"]:
        device = {
            "kind": "gpu",
            "index": gpu["index"],
            "physical_index": gpu.get("physical_index"),
            "uuid": gpu.get("uuid"),
            "name": gpu.get("name"),
            "energy_j": None,
            "average_power_w": None,
            # A MIG instance's counter is its GPU's x its slice share (the snapshot says "mig-slice-share").
            "source": gpu.get("energy_source") or "counter",
            "estimated": (gpu.get("energy_source") or "counter") != "counter",
        }
        first = before.get(key(gpu))
        if first is None:
            device["error"] = "not in the prolog's snapshot"
        elif first.get("energy_j") is None or gpu.get("energy_j") is None:
            device["error"] = gpu.get("error") or first.get("error") or "no energy counter"
        elif gpu["energy_j"] < first["energy_j"]:
            device["error"] = "the energy counter went back (driver reloaded during the job)"
        else:
            energy_j = gpu["energy_j"] - first["energy_j"]
            device["energy_j"] = energy_j
            if wall_time_s > 0:
                device["average_power_w"] = energy_j / wall_time_s
            total += energy_j
        devices.append(device)

    # CPU packages and their DRAM: subtractable only when both snapshots came from joule daemon, whose counters are
    # wrap-corrected over its whole life (RAPL wraps within minutes at full load). They cover the whole socket:
    # on a node shared by several jobs each job is charged the whole package.
    cpus_before = {cpu["index"]: cpu for cpu in start.get("cpus", [])}
    for cpu in end.get("cpus", []):
        first = cpus_before.get(cpu["index"])
        for kind, field, kind_resets in (("cpu", "package_energy_j", "package_counter_resets"),
                                         ("dram", "dram_energy_j", "dram_counter_resets")):
            if kind == "dram" and cpu.get(field) is None and (first is None or first.get(field) is None):
                continue  # no DRAM domain
            device = {"kind": kind, "index": cpu["index"], "name": cpu.get("name"), "energy_j": None,
                      "average_power_w": None, "source": "counter", "estimated": False}
            if first is None:
                device["error"] = "not in the prolog's snapshot"
            elif not (cpu.get("wrap_corrected_across_processes") and first.get("wrap_corrected_across_processes")):
                device["error"] = ("RAPL counters wrap within minutes: read them through joule daemon "
                                   "(JOULE_DAEMON_SOCKET) so that two snapshots a job apart can be subtracted")
            elif first.get(field) is None or cpu.get(field) is None:
                device["error"] = cpu.get("error") or first.get("error") or "no reading"
            elif first.get(kind_resets) is None or cpu.get(kind_resets) is None:
                device["error"] = ("not measurable: the snapshots do not say whether the RAPL counter was reset during "
                                   "the job (a joule daemon older than the scripts took them)")
            elif cpu[kind_resets] != first[kind_resets]:
                # A reset is not a wrap: counted as one it is a range's worth of phantom energy (262 kJ).
                device["error"] = ("not measurable: the RAPL counter was reset during the job (%s)"
                                   % (cpu.get("counter_reset") or "the daemon counted a reset"))
            elif cpu[field] < first[field]:
                device["error"] = "the counter went back (the daemon restarted during the job)"
            else:
                energy_j = cpu[field] - first[field]
                device["energy_j"] = energy_j
                if wall_time_s > 0:
                    device["average_power_w"] = energy_j / wall_time_s
                total += energy_j
            devices.append(device)
    return devices, total


wall_time_s = end["time_unix_s"] - start["time_unix_s"]
nodes = None
if "nodes" in end:
    # The job's nodes, read at once through their daemons (PrologSlurmctld/EpilogSlurmctld): one entry per node,
    # and a total only when every node's every device was measured (never a silently lower figure).
    starts = {node["node"]: node for node in start.get("nodes", [])}
    nodes = []
    total = 0.0
    for node in end["nodes"]:
        entry = {"node": node["node"], "address": node.get("address"), "complete": False, "error": None,
                 "energy_j": None, "devices": []}
        first = starts.get(node["node"])
        if node.get("error") or (first is not None and first.get("error")):
            entry["error"] = node.get("error") or "at the job's start: " + first["error"]
        elif first is None:
            entry["error"] = "not in the prolog's snapshot"
        else:
            entry["devices"], node_total = node_devices(first, node)
            errors = ["%s %s: %s" % (d["kind"], d["index"], d["error"]) for d in entry["devices"] if d.get("error")]
            if errors:
                entry["error"] = "; ".join(errors)
            elif not entry["devices"]:
                entry["error"] = "no device"
            else:
                entry["complete"] = True
                entry["energy_j"] = node_total
        if entry["complete"] and total is not None:
            total += entry["energy_j"]
        else:
            total = None
        nodes.append(entry)
    devices = [dict(device, node=entry["node"]) for entry in nodes for device in entry["devices"]]
else:
    devices, total = node_devices(start, end)

def add_estimated_shares(devices):
    """Each GPU's estimated share for this job, from joule daemon's job_energy answer (`joule counters
    --job-energy`), beside its counter difference; or why there is none. @return the summary."""
    summary = {"estimated": True, "method": None, "source": "joule daemon (job_energy)", "total_energy_j": None,
               "error": os.environ.get("JOULE_SHARES_ERROR") or None}
    answer = read_trusted(shares_path, "job energy answer") if shares_path else None
    if answer is not None and not (isinstance(answer.get("gpus"), list)
                                   and isinstance(answer.get("not_accounted"), list)
                                   and isinstance(answer.get("method"), str)):
        summary["error"] = "joule counters --job-energy answered in an unexpected shape"
        answer = None
    if answer is None:
        summary["error"] = summary["error"] or "joule counters --job-energy gave no answer"
        for device in devices:
            if device["kind"] == "gpu":
                device["estimated_share"] = None
        return summary
    summary["method"] = answer["method"]
    shares = {gpu.get("uuid"): gpu for gpu in answer["gpus"]}
    not_accounted = {gpu.get("uuid"): gpu.get("reason") for gpu in answer["not_accounted"]}
    total = 0.0
    missing = []
    for device in devices:
        if device["kind"] != "gpu":
            continue
        share = shares.get(device.get("uuid"))
        if share is not None:
            energy_j = share["energy_mj"] / 1000
            device["estimated_share"] = {
                "energy_j": energy_j, "gpu_energy_j": share["gpu_energy_mj"] / 1000,
                "start_unix_s": share["start_ms"] / 1000, "end_unix_s": share["end_ms"] / 1000,
                "estimated": True, "method": answer["method"]}
            total += energy_j
        elif device.get("uuid") in not_accounted:
            device["estimated_share"] = None
            device["estimated_share_error"] = not_accounted[device.get("uuid")]
            missing.append("gpu %s: %s" % (device["index"], not_accounted[device.get("uuid")]))
        else:
            # Accounted, but no process of the job was sampled on it: the job did not use it.
            device["estimated_share"] = {"energy_j": 0.0, "gpu_energy_j": None, "start_unix_s": None,
                                         "end_unix_s": None, "estimated": True, "method": answer["method"]}
    if missing:
        summary["error"] = "; ".join(missing)  # never a silently lower total
    else:
        summary["total_energy_j"] = total
    return summary


shares_summary = add_estimated_shares(devices)

env = os.environ
report = {
    "job": {
        "id": env.get("SLURM_JOB_ID"),
        "user": env.get("SLURM_JOB_USER"),
        "partition": env.get("SLURM_JOB_PARTITION"),
        "node": env.get("JOULE_HOST"),
        "gpus": env.get("SLURM_JOB_GPUS"),
        "nodes": env.get("SLURM_JOB_NODELIST") if nodes is not None else None,
    },
    "start_unix_s": start["time_unix_s"],
    "end_unix_s": end["time_unix_s"],
    "wall_time_s": wall_time_s,
    "devices": devices,
    "total_energy_j": total,
    "estimated_shares": shares_summary,
}
if nodes is not None:
    report["nodes"] = nodes
    report["complete"] = total is not None
# Written to a name created afresh in the folder (mkstemp: O_CREAT|O_EXCL|O_NOFOLLOW), then renamed over the
# job file's name: a rename replaces whatever is there (a link, a file), never writes through it.
folder, name = os.path.split(out_path)
fd, temporary = tempfile.mkstemp(prefix="." + name + ".", dir=folder or ".")
try:
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o644)  # the job's user may read its energy
        json.dump(report, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(temporary, out_path)
except BaseException:
    os.unlink(temporary)
    raise
PYTHON
)
status=$?
[ -z "$shares" ] || rm -f -- "$shares"
if [ "$status" -eq 3 ]; then
  log "job $job: $why"
  rm -f -- "$end"
  exit 0
fi
if [ "$status" -ne 0 ]; then
  log "job $job: computing the energy failed ($JOULE_PYTHON exited $status): $(printf '%s' "$why" | tail -n 1)"
fi
rm -f -- "$end" "$start"
exit 0
