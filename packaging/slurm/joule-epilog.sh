#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Slurm Epilog: reads the energy counters of the job's GPUs (and, through joule daemon, of the node's CPU
# packages and DRAM) again, subtracts what joule-prolog.sh recorded at
# the start, and writes the job's energy on this node as JSON in the shape of `joule measure --format json`
# to $JOULE_JOBS_DIR/$SLURM_JOB_ID.json (docs/operators.md). Settings as in joule-prolog.sh, plus:
#   JOULE_PYTHON          the Python 3 that does the arithmetic (default python3; standard library only)
#   JOULE_JOB_FILE_NODE   1: name the file $SLURM_JOB_ID.<short host name>.json (a folder shared by nodes)
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

job=${SLURM_JOB_ID:-}
case $job in
  '' | *[!0-9]*)
    log "SLURM_JOB_ID '$job' is not a job id: nothing written"
    exit 0
    ;;
esac
start="$JOULE_JOBS_DIR/$job.start.json"
if [ ! -r "$start" ]; then
  log "job $job: no start snapshot $start (the prolog did not run or failed): nothing written"
  exit 0
fi
if [ -n "${SLURM_JOB_GPUS:-}" ]; then
  CUDA_VISIBLE_DEVICES=$SLURM_JOB_GPUS
  export CUDA_VISIBLE_DEVICES
fi
host=$(hostname -s 2>/dev/null || hostname)
if [ "${JOULE_JOB_FILE_NODE:-0}" = 1 ]; then
  out="$JOULE_JOBS_DIR/$job.$host.json"
else
  out="$JOULE_JOBS_DIR/$job.json"
fi
end="$JOULE_JOBS_DIR/$job.end.json.tmp.$$"
if ! "$JOULE_BIN" counters >"$end" 2>"$end.err"; then
  log "job $job: '$JOULE_BIN counters' failed: $(head -c 2000 "$end.err")"
  rm -f "$end" "$end.err" "$start"
  exit 0
fi
rm -f "$end.err"
JOULE_HOST=$host "$JOULE_PYTHON" - "$start" "$end" "$out.tmp.$$" <<'PYTHON'
import json
import os
import sys

start_path, end_path, out_path = sys.argv[1:4]
with open(start_path, encoding="utf-8") as f:
    start = json.load(f)
with open(end_path, encoding="utf-8") as f:
    end = json.load(f)


def key(gpu):
    # The UUID survives a change of CUDA_VISIBLE_DEVICES order; the physical index where there is none.
    return gpu.get("uuid") or "physical:%s" % gpu.get("physical_index")


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
        "source": "counter",
        "estimated": False,
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
    for kind, field in (("cpu", "package_energy_j"), ("dram", "dram_energy_j")):
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
        elif cpu[field] < first[field]:
            device["error"] = "the counter went back (the daemon restarted during the job)"
        else:
            energy_j = cpu[field] - first[field]
            device["energy_j"] = energy_j
            if wall_time_s > 0:
                device["average_power_w"] = energy_j / wall_time_s
            total += energy_j
        devices.append(device)

env = os.environ
report = {
    "job": {
        "id": env.get("SLURM_JOB_ID"),
        "user": env.get("SLURM_JOB_USER"),
        "partition": env.get("SLURM_JOB_PARTITION"),
        "node": env.get("JOULE_HOST"),
        "gpus": env.get("SLURM_JOB_GPUS"),
    },
    "start_unix_s": start["time_unix_s"],
    "end_unix_s": end["time_unix_s"],
    "wall_time_s": wall_time_s,
    "devices": devices,
    "total_energy_j": total,
}
with open(out_path, "w", encoding="utf-8") as f:
    json.dump(report, f, indent=2, sort_keys=True)
    f.write("\n")
PYTHON
status=$?
if [ "$status" -eq 0 ]; then
  mv -f "$out.tmp.$$" "$out"
else
  log "job $job: computing the energy failed ($JOULE_PYTHON exited $status)"
  rm -f "$out.tmp.$$"
fi
rm -f "$end" "$start"
exit 0
