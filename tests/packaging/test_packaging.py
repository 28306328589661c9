# SPDX-License-Identifier: Apache-2.0
"""The operator files under packaging/ (docs/operators.md): the Prometheus recording rules (promtool check and
unit tests), the Grafana dashboard (its PromQL parses and names only metrics that exist), the Kubernetes
DaemonSet (structure and key fields), the Slurm prolog/epilog (a fake job on simulated GPUs behind a
`joule daemon`), and the identity labels on `joule power --serve`'s samples (environment and --label).

Run by CTest as packaging.pytest; by hand:
    JOULE_BIN=build/joule /usr/bin/python3 -m pytest -q tests/packaging
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Iterator

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("JOULE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
PACKAGING = SOURCE_DIR / "packaging"
RULES = PACKAGING / "prometheus" / "joule-rules.yml"
DASHBOARD = PACKAGING / "grafana" / "joule-dashboard.json"
DAEMONSET = PACKAGING / "kubernetes" / "joule-daemonset.yaml"
PROLOG = PACKAGING / "slurm" / "joule-prolog.sh"
EPILOG = PACKAGING / "slurm" / "joule-epilog.sh"

# What a user's shell may have set that would change what the tests see.
USER_SETTINGS = ("JOULE_SIM", "JOULE_DAEMON_SOCKET", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                 "SLURM_JOB_ID", "SLURM_JOB_USER", "SLURM_JOB_PARTITION", "SLURM_JOB_GPUS", "JOULE_POD_NAME",
                 "JOULE_POD_NAMESPACE", "JOULE_CONTAINER_NAME", "JOULE_NODE_NAME")


def clean_environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in USER_SETTINGS}
    env.update(extra)
    return env


@pytest.fixture
def joule_bin() -> pathlib.Path:
    path = os.environ.get("JOULE_BIN")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("JOULE_BIN (the built joule) is not set")
    return pathlib.Path(path)


def promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        pytest.skip("promtool is not on PATH (Debian package `prometheus`)")
    return found


# ---- recording rules


def test_rules_pass_promtool_check() -> None:
    result = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rules_unit_tests() -> None:
    tests = pathlib.Path(__file__).with_name("joule-rules.test.yml")
    result = subprocess.run([promtool(), "test", "rules", tests.name], cwd=tests.parent, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def recorded_names() -> set[str]:
    return set(re.findall(r"^\s*- record:\s*(\S+)", RULES.read_text(), flags=re.M))


def documented_metrics() -> set[str]:
    """Every metric family named in docs/metrics.md."""
    return set(re.findall(r"\bjoule_[a-z0-9_]+", (SOURCE_DIR / "docs" / "metrics.md").read_text()))


def test_rules_read_documented_metrics() -> None:
    text = RULES.read_text()
    used = set(re.findall(r"\b(joule_[a-z0-9_]+)\b", text)) - {n.split(":")[1] for n in recorded_names()}
    assert used <= documented_metrics(), used - documented_metrics()


# ---- Grafana dashboard


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def test_dashboard_structure() -> None:
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("instance", "gpu", "job", "pod"):
        assert variables[name]["type"] == "query", name
        assert variables[name]["datasource"]["uid"] == "${datasource}", name
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for p in board["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]
        assert 0 <= p["gridPos"]["x"] and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
    # The panels the operators' guide promises.
    titles = " | ".join(p["title"] for p in board["panels"])
    for word in ("power limit", "SM clock", "Temperature", "Utilisation", "per Slurm job", "Carbon",
                 "Inference"):
        assert word in titles, word


def test_dashboard_names_only_existing_metrics() -> None:
    known = documented_metrics() | recorded_names()
    used: set[str] = set()
    for expr in dashboard_exprs():
        for name in re.findall(r"\b([a-z_]*:?joule_[a-z0-9_:]+)\b", expr):
            used.add(re.sub(r"_(bucket|sum|count)$", "", name) if name not in known else name)
    assert used <= known, used - known
    assert recorded_names() & used, "the dashboard should read the recording rules"


def test_dashboard_promql_parses() -> None:
    """Each panel's query, with Grafana's variables filled in, as a recording rule for `promtool check`."""
    rules = []
    for i, expr in enumerate(dashboard_exprs()):
        filled = (expr.replace("$__rate_interval", "5m").replace("$__range", "1h")
                  .replace("$instance", ".*").replace("$gpu", ".*").replace("$job", ".*").replace("$pod", ".*"))
        assert "$" not in filled, filled
        rules.append(f"      - record: dashboard_query_{i}\n        expr: {json.dumps(filled)}\n")
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        f.write("groups:\n  - name: dashboard\n    rules:\n" + "".join(rules))
        f.flush()
        result = subprocess.run([promtool(), "check", "rules", f.name], capture_output=True, text=True,
                                timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- Kubernetes DaemonSet


def test_daemonset_fields() -> None:
    yaml = pytest.importorskip("yaml", reason="python3-yaml is not installed")
    documents = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    assert len(documents) == 1
    ds = documents[0]
    assert ds["apiVersion"] == "apps/v1"
    assert ds["kind"] == "DaemonSet"
    template = ds["spec"]["template"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    spec = template["spec"]
    assert spec["nodeSelector"], "runs on GPU nodes only"
    containers = {c["name"]: c for c in spec["containers"]}
    assert set(containers) == {"daemon", "exporter"}
    for c in containers.values():
        assert {"cpu", "memory"} <= set(c["resources"]["limits"]), c["name"]
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]), c["name"]
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert mounts["socket"] == "/run/joule", c["name"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["socket"]["hostPath"]["path"] == "/run/joule"

    daemon = containers["daemon"]
    assert daemon["command"][0] == "joule" and "daemon" in daemon["command"]
    socket = daemon["command"][daemon["command"].index("--socket") + 1]
    assert socket == "/run/joule/joule.sock"
    assert "SYS_ADMIN" in daemon["securityContext"]["capabilities"]["add"]
    # The network listener: TLS files from the Secret, mounted private, on the node's address.
    command = daemon["command"]
    assert command[command.index("--listen") + 1] == "$(JOULE_NODE_IP):9700"
    daemon_env = {e["name"]: e for e in daemon["env"]}
    assert daemon_env["JOULE_NODE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    tls_mount = {m["name"]: m for m in daemon["volumeMounts"]}["tls"]
    for flag in ("--tls-cert", "--tls-key", "--tls-client-ca", "--tokens"):
        assert command[command.index(flag) + 1].startswith(tls_mount["mountPath"] + "/"), flag
    assert tls_mount["readOnly"] is True
    assert volumes["tls"]["secret"]["defaultMode"] == 0o400
    assert spec["hostNetwork"] is True

    exporter = containers["exporter"]
    script = " ".join(exporter["command"])
    assert f"--daemon {socket} power --serve :9400" in script
    port = exporter["ports"][0]["containerPort"]
    assert port == 9400
    assert template["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    env = {e["name"]: e for e in exporter["env"]}
    # The downward API gives the node's name, which joule turns into the label `node`.
    assert env["JOULE_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "JOULE_POD_NAME" not in env, "the exporter's own pod name would mislabel the node's workloads"


# ---- Slurm prolog and epilog


@pytest.fixture
def sim_daemon(joule_bin: pathlib.Path) -> Iterator[pathlib.Path]:
    """`joule daemon` on two simulated V100s: their energy counters run on in one process, as a driver's do,
    so that the prolog's and the epilog's readings (two processes) can be subtracted."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="joule-slurm-"))
    folder.chmod(0o755)
    socket = folder / "joule.sock"
    # A fake powercap tree (package 0 with a DRAM domain) for the RAPL counters the daemon serves.
    package = folder / "powercap" / "intel-rapl:0"
    for zone, name, energy_uj in ((package, "package-0", 5_000_000), (package / "intel-rapl:0:0", "dram", 1_000_000)):
        zone.mkdir(parents=True)
        (zone / "name").write_text(name + "\n")
        (zone / "max_energy_range_uj").write_text("262143328850\n")
        (zone / "energy_uj").write_text(f"{energy_uj}\n")
    (folder / "powercap" / "intel-rapl:0:0").symlink_to(package / "intel-rapl:0:0")
    process = subprocess.Popen([str(joule_bin), "--sim", "2xv100", "daemon", "--socket", str(socket)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=clean_environment(JOULE_POWERCAP_ROOT=str(folder / "powercap")))
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "joule daemon: serving 2 GPUs" in line, line + process.stderr.read()
        yield socket
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def run_script(script: pathlib.Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", str(script)], env=env, capture_output=True, text=True, timeout=60)


def job_environment(joule_bin: pathlib.Path, jobs: pathlib.Path, **extra: str) -> dict[str, str]:
    return clean_environment(JOULE_BIN=str(joule_bin), JOULE_JOBS_DIR=str(jobs), JOULE_SLURM_CONFIG="/nonexistent",
                             JOULE_PYTHON=sys.executable, SLURM_JOB_USER="alice", SLURM_JOB_PARTITION="gpu",
                             **extra)


def test_prolog_and_epilog_write_the_jobs_energy(joule_bin: pathlib.Path, sim_daemon: pathlib.Path,
                                                 tmp_path: pathlib.Path) -> None:
    jobs = tmp_path / "jobs"
    env = job_environment(joule_bin, jobs, SLURM_JOB_ID="4242", SLURM_JOB_GPUS="1",
                          JOULE_DAEMON_SOCKET=str(sim_daemon))
    prolog = run_script(PROLOG, env)
    assert prolog.returncode == 0, prolog.stderr
    assert prolog.stderr == ""
    start = json.loads((jobs / "4242.start.json").read_text())
    assert [g["physical_index"] for g in start["gpus"]] == [1], "only the job's GPU (SLURM_JOB_GPUS)"
    assert [c["package_energy_j"] for c in start["cpus"]] == [5.0]
    time.sleep(0.2)
    package = sim_daemon.parent / "powercap" / "intel-rapl:0"
    (package / "energy_uj").write_text("8000000\n")  # +3 J
    (package / "intel-rapl:0:0" / "energy_uj").write_text("1500000\n")  # +0.5 J
    epilog = run_script(EPILOG, env)
    assert epilog.returncode == 0, epilog.stderr
    assert epilog.stderr == ""
    report = json.loads((jobs / "4242.json").read_text())
    assert report["job"]["id"] == "4242"
    assert report["job"]["user"] == "alice"
    assert report["job"]["partition"] == "gpu"
    assert report["job"]["gpus"] == "1"
    assert report["wall_time_s"] >= 0.2
    gpu, cpu, dram = report["devices"]
    assert (cpu["kind"], cpu["index"], cpu["energy_j"]) == ("cpu", 0, pytest.approx(3.0))
    assert (dram["kind"], dram["energy_j"]) == ("dram", pytest.approx(0.5))
    assert gpu["kind"] == "gpu" and gpu["physical_index"] == 1
    assert gpu["uuid"] == start["gpus"][0]["uuid"]
    # A simulated V100 running ImageNet draws between its idle power and its 250 W limit.
    assert 30 <= gpu["average_power_w"] <= 250, gpu
    assert gpu["energy_j"] == pytest.approx(gpu["average_power_w"] * report["wall_time_s"])
    assert report["total_energy_j"] == pytest.approx(gpu["energy_j"] + 3.5)
    # Simulated GPUs report no process samples: no estimated share, and the file says why.
    assert gpu["estimated_share"] is None
    shares = report["estimated_shares"]
    assert shares["estimated"] is True and shares["total_energy_j"] is None and shares["method"] is None
    assert shares["error"].startswith(
        "joule daemon: no GPU of this daemon reports per-process samples, so a job's share of a shared GPU cannot "
        "be estimated: GPU 0 (Tesla V100-PCIE-32GB (simulated)) does not report per-process utilisation (sim "
        "backend)"), shares
    # Nothing left behind but the job's file.
    assert sorted(p.name for p in jobs.iterdir()) == ["4242.json"]


def fake_joule(tmp_path: pathlib.Path, joule_bin: pathlib.Path, answer: dict | None, error: str = "") -> pathlib.Path:
    """A JOULE_BIN that answers `counters --job-energy` as a daemon on NVML GPUs would (the simulated GPUs report
    no process samples; the daemon's side is tested through the fake NVML in tests/daemon/job_energy_test.cpp)
    and runs the real joule for everything else."""
    script = tmp_path / "joule"
    body = (f"cat <<'JSON'\n{json.dumps(answer)}\nJSON\nexit 0" if answer is not None
            else f"echo 'joule: error: {error}' >&2\nexit 1")
    script.write_text(f"""#!/bin/sh
if [ "$1" = counters ] && [ "$2" = --job-energy ]; then
  [ "$3" = 4242 ] || {{ echo "joule: error: asked for job $3" >&2; exit 1; }}
{body}
fi
exec {joule_bin} "$@"
""")
    script.chmod(0o755)
    return script


def test_the_epilog_writes_each_gpus_estimated_share_beside_its_counter(joule_bin: pathlib.Path,
                                                                         sim_daemon: pathlib.Path,
                                                                         tmp_path: pathlib.Path) -> None:
    jobs = tmp_path / "jobs"
    env = job_environment(joule_bin, jobs, SLURM_JOB_ID="4242", JOULE_DAEMON_SOCKET=str(sim_daemon))
    assert run_script(PROLOG, env).returncode == 0
    start = json.loads((jobs / "4242.start.json").read_text())
    uuid0, uuid1 = (gpu["uuid"] for gpu in start["gpus"])
    method = "nvml process utilisation samples"
    answer = {"job": "4242", "estimated": True, "method": method, "ended": True,
              "gpus": [{"gpu": 0, "uuid": uuid0, "energy_mj": 60_000, "gpu_energy_mj": 100_000,
                        "start_ms": 1_000, "end_ms": 5_000}],
              "not_accounted": []}
    env["JOULE_BIN"] = str(fake_joule(tmp_path, joule_bin, answer))
    epilog = run_script(EPILOG, env)
    assert epilog.returncode == 0 and epilog.stderr == "", epilog.stderr
    report = json.loads((jobs / "4242.json").read_text())
    first, second = (d for d in report["devices"] if d["kind"] == "gpu")
    # The whole GPU's counter difference stays; the job's share is beside it, marked estimated, the method named.
    assert first["source"] == "counter" and first["energy_j"] > 0
    assert first["estimated_share"] == {"energy_j": 60.0, "gpu_energy_j": 100.0, "start_unix_s": 1.0,
                                        "end_unix_s": 5.0, "estimated": True, "method": method}
    # Accounted but never sampled for this job: its share is 0.
    assert second["estimated_share"]["energy_j"] == 0.0
    assert report["estimated_shares"] == {"estimated": True, "method": method, "source": "joule daemon (job_energy)",
                                          "total_energy_j": 60.0, "error": None}
    assert sorted(p.name for p in jobs.iterdir()) == ["4242.json"]

    # A GPU the daemon cannot split: no share for it, no total, the reason named.
    assert run_script(PROLOG, env).returncode == 0
    answer["not_accounted"] = [{"gpu": 1, "uuid": uuid1, "reason": "GPU 1 is a MIG instance"}]
    env["JOULE_BIN"] = str(fake_joule(tmp_path, joule_bin, answer))
    assert run_script(EPILOG, env).returncode == 0
    report = json.loads((jobs / "4242.json").read_text())
    second = [d for d in report["devices"] if d["kind"] == "gpu"][1]
    assert second["estimated_share"] is None and second["estimated_share_error"] == "GPU 1 is a MIG instance"
    assert report["estimated_shares"]["total_energy_j"] is None
    assert report["estimated_shares"]["error"] == "gpu 1: GPU 1 is a MIG instance"

    # The daemon does not know the job: today's output, and the daemon's reason.
    assert run_script(PROLOG, env).returncode == 0
    env["JOULE_BIN"] = str(fake_joule(tmp_path, joule_bin, None, "joule daemon: unknown job 4242: no process"))
    epilog = run_script(EPILOG, env)
    assert epilog.returncode == 0 and epilog.stderr == "", epilog.stderr
    report = json.loads((jobs / "4242.json").read_text())
    assert all(d["estimated_share"] is None for d in report["devices"] if d["kind"] == "gpu")
    assert report["estimated_shares"]["error"] == "joule daemon: unknown job 4242: no process"
    assert report["total_energy_j"] > 0
    assert sorted(p.name for p in jobs.iterdir()) == ["4242.json"]


def test_without_the_daemon_the_job_file_says_why_there_is_no_share(joule_bin: pathlib.Path,
                                                                      tmp_path: pathlib.Path) -> None:
    jobs = tmp_path / "jobs"
    env = job_environment(joule_bin, jobs, SLURM_JOB_ID="4242", JOULE_SIM="1xv100")
    # Without a daemon the simulated GPU's counter restarts in each process; only the share's reason matters.
    assert run_script(PROLOG, env).returncode == 0
    assert run_script(EPILOG, env).returncode == 0
    report = json.loads((jobs / "4242.json").read_text())
    assert report["estimated_shares"]["error"] == (
        "counters --job-energy: only joule daemon can tell a job's share of a shared GPU (it samples the GPUs' "
        "processes all along): give --daemon SOCKET or set JOULE_DAEMON_SOCKET")


FLEET_PROLOG = PACKAGING / "slurm" / "joule-fleet-prolog.sh"
FLEET_EPILOG = PACKAGING / "slurm" / "joule-fleet-epilog.sh"


def free_port(host: str) -> int:
    import socket
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def test_fleet_prolog_and_epilog_write_one_file_for_every_node_of_the_job(joule_bin: pathlib.Path,
                                                                          tmp_path: pathlib.Path) -> None:
    """PrologSlurmctld/EpilogSlurmctld: the job's nodes (127.0.0.2 and 127.0.0.3, one port) through their
    daemons' TLS listeners, SLURM_JOB_NODELIST expanded by scontrol (a fake one here), one job file."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (Debian package openssl; scripts/install-deps has it)")
    tmp_path.chmod(0o755)
    pki = tmp_path / "pki"
    pki.mkdir()

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True, timeout=60)
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    openssl("req", "-x509", *curve, "-days", "2", "-subj", "/CN=ca", "-keyout", "ca.key", "-out", "ca.pem")
    openssl("req", *curve, "-subj", "/CN=node", "-keyout", "node.key", "-out", "node.csr")
    (pki / "node.ext").write_text("subjectAltName=IP:127.0.0.2,IP:127.0.0.3\n")
    openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", "node.ext", "-out", "node.pem")
    token = "f" * 64
    (pki / "tokens").write_text(f"controller read {token}\n")
    (pki / "token").write_text(token + "\n")
    for private in ("ca.key", "node.key", "tokens", "token"):
        (pki / private).chmod(0o600)
    port = free_port("127.0.0.2")
    daemons = []
    try:
        for host in ("127.0.0.2", "127.0.0.3"):
            daemon = subprocess.Popen(
                [str(joule_bin), "--sim", "2xv100", "daemon", "--socket", str(tmp_path / f"{host}.sock"),
                 "--audit-log", str(tmp_path / f"{host}.log"), "--listen", f"{host}:{port}", "--tls-cert",
                 str(pki / "node.pem"), "--tls-key", str(pki / "node.key"), "--tokens", str(pki / "tokens")],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env=clean_environment(JOULE_POWERCAP_ROOT=str(tmp_path / "no-rapl")))
            daemons.append(daemon)
            assert daemon.stdout is not None
            assert daemon.stdout.readline().startswith("joule daemon: serving"), daemon.stderr
        scontrol = tmp_path / "scontrol"
        scontrol.write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && [ "$3" = "127.0.0.[2-3]" ] || exit 1\n'
                            'printf "127.0.0.2\\n127.0.0.3\\n"\n')
        scontrol.chmod(0o755)
        jobs = tmp_path / "jobs"
        env = job_environment(joule_bin, jobs, SLURM_JOB_ID="5151", SLURM_JOB_NODELIST="127.0.0.[2-3]",
                              JOULE_SCONTROL=str(scontrol), JOULE_DAEMON_PORT=str(port),
                              JOULE_DAEMON_CA=str(pki / "ca.pem"), JOULE_DAEMON_TOKEN_FILE=str(pki / "token"))
        prolog = run_script(FLEET_PROLOG, env)
        assert prolog.returncode == 0 and prolog.stderr == "", prolog.stderr
        start = json.loads((jobs / "5151.start.json").read_text())
        assert [node["node"] for node in start["nodes"]] == ["127.0.0.2", "127.0.0.3"]
        time.sleep(0.3)
        epilog = run_script(FLEET_EPILOG, env)
        assert epilog.returncode == 0 and epilog.stderr == "", epilog.stderr
        report = json.loads((jobs / "5151.json").read_text())
        assert report["job"]["nodes"] == "127.0.0.[2-3]"
        assert report["complete"] is True
        assert [node["node"] for node in report["nodes"]] == ["127.0.0.2", "127.0.0.3"]
        for node in report["nodes"]:
            assert node["complete"] is True and node["error"] is None, node
            assert len(node["devices"]) == 2
            # Two simulated V100s at 220.25 W over at least 0.3 s.
            assert node["energy_j"] >= 2 * 220 * 0.3, node
        assert report["total_energy_j"] == pytest.approx(sum(node["energy_j"] for node in report["nodes"]))
        assert {device["node"] for device in report["devices"]} == {"127.0.0.2", "127.0.0.3"}
        assert sorted(p.name for p in jobs.iterdir()) == ["5151.json"]

        # A node whose daemon went away between the prolog and the epilog: named, and no total.
        assert run_script(FLEET_PROLOG, dict(env, SLURM_JOB_ID="5152")).returncode == 0
        daemons[1].terminate()
        daemons[1].wait(timeout=10)
        epilog = run_script(FLEET_EPILOG, dict(env, SLURM_JOB_ID="5152"))
        assert epilog.returncode == 0 and epilog.stderr == "", epilog.stderr
        incomplete = json.loads((jobs / "5152.json").read_text())
        assert incomplete["complete"] is False and incomplete["total_energy_j"] is None
        assert incomplete["nodes"][0]["complete"] is True and incomplete["nodes"][0]["energy_j"] > 0
        assert incomplete["nodes"][1]["complete"] is False and incomplete["nodes"][1]["energy_j"] is None
        assert incomplete["nodes"][1]["error"].startswith("cannot reach node 127.0.0.3 (127.0.0.3:"), incomplete
        # scontrol cannot expand the list: said, nothing recorded, exit 0.
        bad = run_script(FLEET_PROLOG, dict(env, SLURM_JOB_ID="5153", SLURM_JOB_NODELIST="other[1-2]"))
        assert bad.returncode == 0
        assert "job 5153: cannot list the nodes of 'other[1-2]' with " in bad.stderr, bad.stderr
    finally:
        for daemon in daemons:
            daemon.terminate()
            daemon.wait(timeout=10)


def test_prolog_and_epilog_never_fail_the_job(joule_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    jobs = tmp_path / "jobs"
    # No job id: nothing recorded, exit 0.
    result = run_script(PROLOG, job_environment(joule_bin, jobs))
    assert result.returncode == 0
    assert "SLURM_JOB_ID '' is not a job id: nothing recorded" in result.stderr
    # joule fails (no GPU): logged, exit 0, no snapshot.
    env = job_environment(joule_bin, jobs, SLURM_JOB_ID="7", JOULE_DAEMON_SOCKET=str(tmp_path / "none.sock"))
    result = run_script(PROLOG, env)
    assert result.returncode == 0
    assert "job 7: '" in result.stderr and "counters' failed: joule: error:" in result.stderr, result.stderr
    assert list(jobs.iterdir()) == []
    # The epilog without the prolog's snapshot: logged, exit 0.
    result = run_script(EPILOG, env)
    assert result.returncode == 0
    assert f"job 7: no start snapshot {jobs}/7.start.json" in result.stderr


def run_with_pid(script: pathlib.Path, env: dict[str, str], plant) -> subprocess.CompletedProcess:
    """Runs `script` in a shell whose pid is known before the script starts (it execs the script after reading
    a line), so that `plant(pid)` can put links where the script's `$$` names go, as a user can guess them."""
    process = subprocess.Popen(["/bin/sh", "-c", 'read line; exec /bin/sh "$0"', str(script)], env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    plant(process.pid)
    out, err = process.communicate("go\n", timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_links_planted_in_the_jobs_folder_are_never_followed(joule_bin: pathlib.Path, sim_daemon: pathlib.Path,
                                                             tmp_path: pathlib.Path) -> None:
    # Before: the scripts (root) wrote `>"$JOB.start.json.tmp.$$"`, `"$JOB.end.json.tmp.$$"`, `"$out.tmp.$$"` and
    # their `.err` following links: a link planted at the guessable name made root overwrite any file, and
    # `mv -f` moved the snapshot into a directory linked at its name.
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o755)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim_dir = tmp_path / "victim_dir"
    victim_dir.mkdir()
    env = job_environment(joule_bin, jobs, SLURM_JOB_ID="4242", JOULE_DAEMON_SOCKET=str(sim_daemon))

    def plant(*names: str) -> None:
        for name in names:
            path = jobs / name
            if path.is_symlink():
                path.unlink()
            path.symlink_to(victim)

    (jobs / "4242.start.json").symlink_to(victim_dir)
    prolog = run_with_pid(PROLOG, env, lambda pid: plant(f"4242.start.json.tmp.{pid}",
                                                         f"4242.start.json.tmp.{pid}.err"))
    assert prolog.returncode == 0 and prolog.stderr == "", prolog.stderr
    assert not (jobs / "4242.start.json").is_symlink()  # the link was replaced, not followed
    plant("4242.json")
    epilog = run_with_pid(EPILOG, env, lambda pid: plant(f"4242.end.json.tmp.{pid}", f"4242.end.json.tmp.{pid}.err",
                                                         f"4242.json.tmp.{pid}"))
    assert epilog.returncode == 0 and epilog.stderr == "", epilog.stderr
    assert victim.read_text() == "precious\n"
    assert list(victim_dir.iterdir()) == []
    job_file = jobs / "4242.json"
    assert not job_file.is_symlink() and job_file.stat().st_mode & 0o777 == 0o644
    assert json.loads(job_file.read_text())["job"]["id"] == "4242"
    # Nothing but the job's file and the links planted under the old names.
    assert sorted(p.name for p in jobs.iterdir() if not p.is_symlink()) == ["4242.json"]


@pytest.mark.parametrize("replace, why", [
    ("symlink", "it is a symbolic link (someone replaced the prolog's file)"),
    ("writable", "other users may write it (mode 0666)"),
    ("hardlink", "it has 2 hard links (it may be another file under a second name)"),
    ("owner", "it belongs to uid 65534, not to uid 0, who wrote it (someone replaced it)"),
])
def test_a_replaced_start_snapshot_is_not_trusted(joule_bin: pathlib.Path, sim_daemon: pathlib.Path,
                                                  tmp_path: pathlib.Path, replace: str, why: str) -> None:
    # Before: the epilog read whatever was at $JOB.start.json: whoever could replace it chose the job's energy.
    if replace == "owner" and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    jobs = tmp_path / "jobs"
    env = job_environment(joule_bin, jobs, SLURM_JOB_ID="4242", JOULE_DAEMON_SOCKET=str(sim_daemon))
    assert run_script(PROLOG, env).stderr == ""
    start = jobs / "4242.start.json"
    forged = json.loads(start.read_text())
    forged["time_unix_s"] -= 86400  # a day longer, 0 J: what a user would rather be charged
    elsewhere = tmp_path / "forged.json"
    elsewhere.write_text(json.dumps(forged))
    start.unlink()
    if replace == "symlink":
        start.symlink_to(elsewhere)
    elif replace == "hardlink":
        os.link(elsewhere, start)
    else:
        start.write_text(json.dumps(forged))
        if replace == "writable":
            start.chmod(0o666)
        else:
            os.chown(start, 65534, 65534)
    epilog = run_script(EPILOG, env)
    assert epilog.returncode == 0
    assert epilog.stderr == (f"joule-epilog: job 4242: not trusting the start snapshot {start}: {why}; nothing "
                             "written (it is left in place for inspection)\n")
    assert not (jobs / "4242.json").exists()
    assert start.is_symlink() or start.exists()
    assert sorted(p.name for p in jobs.iterdir()) == ["4242.start.json"]


def test_a_jobs_folder_others_may_write_is_refused_or_warned_about(joule_bin: pathlib.Path,
                                                                   sim_daemon: pathlib.Path,
                                                                   tmp_path: pathlib.Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    env = job_environment(joule_bin, jobs, SLURM_JOB_ID="4242", JOULE_DAEMON_SOCKET=str(sim_daemon))
    # Not sticky: anyone may replace or plant anything in it. Refused, nothing recorded or written.
    for mode, who in ((0o777, "others"), (0o775, "its group")):
        jobs.chmod(mode)
        why = (f"{jobs} is writable by {who} (mode {mode:04o}) and not sticky: any user could replace the job "
               f"snapshots or plant links where the scripts (root) write; make it 0755 (chmod go-w {jobs})")
        for script, name, outcome in ((PROLOG, "prolog", "nothing recorded"), (EPILOG, "epilog", "nothing written")):
            result = run_script(script, env)
            assert result.returncode == 0
            assert result.stderr == f"joule-{name}: job 4242: refusing the jobs folder {jobs}: {why}; {outcome}\n"
        assert list(jobs.iterdir()) == []
    # A folder above it that others may write: the jobs folder could be swapped.
    jobs.chmod(0o755)
    tmp_path.chmod(0o777)
    result = run_script(PROLOG, env)
    assert f"refusing the jobs folder {jobs}: {tmp_path} is writable by others (mode 0777) and not sticky" in \
        result.stderr, result.stderr
    tmp_path.chmod(0o755)
    # Sticky (as /tmp): others cannot replace root's files there, so the scripts go on, saying so once each.
    jobs.chmod(0o1777)
    warning = (f"warning: the jobs folder {jobs} is writable by others (mode 1777; sticky, so they cannot replace "
               f"root's files): they can fill it with names; the scripts create their files afresh and check the "
               f"snapshot, but a folder only root can write (chmod 0755 {jobs}) is safer")
    prolog = run_script(PROLOG, env)
    assert prolog.stderr == f"joule-prolog: job 4242: {warning}\n"
    epilog = run_script(EPILOG, env)
    assert epilog.stderr == f"joule-epilog: job 4242: {warning}\n"
    assert sorted(p.name for p in jobs.iterdir()) == ["4242.json"]


def test_a_rapl_counter_reset_during_the_job_is_not_measurable(joule_bin: pathlib.Path, sim_daemon: pathlib.Path,
                                                               tmp_path: pathlib.Path) -> None:
    # Before: the daemon counted any step back as a wrap: a reset from 5 J charged the job 262,138 J (130 kW).
    jobs = tmp_path / "jobs"
    package = sim_daemon.parent / "powercap" / "intel-rapl:0"
    top_uj = 262143328850

    def job(number: str, before_uj: int, after_uj: int) -> dict:
        env = job_environment(joule_bin, jobs, SLURM_JOB_ID=number, JOULE_DAEMON_SOCKET=str(sim_daemon))
        (package / "energy_uj").write_text(f"{before_uj}\n")
        assert run_script(PROLOG, env).stderr == ""
        (package / "energy_uj").write_text(f"{after_uj}\n")
        (package / "intel-rapl:0:0" / "energy_uj").write_text("1500000\n" if number == "51" else "2000000\n")
        assert run_script(EPILOG, env).stderr == ""
        return json.loads((jobs / f"{number}.json").read_text())

    # A real wrap: 1 J to the top, 2 J after it, in well under a second: 3 J, counted.
    wrapped = job("51", top_uj - 1_000_000, 2_000_000)
    cpu = next(d for d in wrapped["devices"] if d["kind"] == "cpu")
    assert cpu["energy_j"] == pytest.approx(3.0, abs=1e-3) and "error" not in cpu, cpu
    # A reset: back from 2 J to 1 mJ. As a wrap that is 262,138 J in a fraction of a second: not measurable,
    # with the daemon's reason; the DRAM, not reset, is measured.
    reset = job("52", 2_000_000, 1_000)
    cpu, dram = (next(d for d in reset["devices"] if d["kind"] == kind) for kind in ("cpu", "dram"))
    assert cpu["energy_j"] is None and cpu["average_power_w"] is None, cpu
    assert cpu["error"].startswith("not measurable: the RAPL counter was reset during the job (joule daemon: "
                                   f"{package}/energy_uj went back from 2000000 to 1000 uJ in "), cpu["error"]
    assert "as a wrap that would be 262141 J, " in cpu["error"], cpu["error"]
    assert cpu["error"].endswith(" on average, more than the 1000 W a package can draw, so the counter was reset "
                                 "(CPU hot-plug, a firmware or virtual machine reset) and nothing is counted for "
                                 "that step)"), cpu["error"]
    assert dram["energy_j"] == pytest.approx(0.5)
    gpus = sum(d["energy_j"] for d in reset["devices"] if d["kind"] == "gpu")
    assert reset["total_energy_j"] == pytest.approx(gpus + 0.5)


# ---- identity labels on an exporter


def scrape_power_serve(joule_bin: pathlib.Path, env: dict[str, str], *labels: str) -> str:
    args = [str(joule_bin), "--sim", "v100", "power", "--serve", "127.0.0.1:0", "--duration-s", "30"]
    for label in labels:
        args += ["--label", label]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = re.search(r"http://\S+/metrics", line)
        assert url, line + process.stderr.read()
        with urllib.request.urlopen(url.group(0), timeout=10) as response:
            return response.read().decode()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)


def samples(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_every_sample_carries_the_jobs_labels(joule_bin: pathlib.Path) -> None:
    env = clean_environment(SLURM_JOB_ID="77", SLURM_JOB_USER="bob", JOULE_POD_NAME="trainer-0",
                            POD_NAME="not-read", CONTAINER_NAME="not-read")
    text = scrape_power_serve(joule_bin, env, "team=vision", "slurm_job_id=78")
    lines = samples(text)
    assert any(line.startswith("joule_gpu_energy_joules_total{") for line in lines)
    for line in lines:
        # The manual label wins over the detected one.
        for label in ('slurm_job_id="78"', 'slurm_user="bob"', 'pod="trainer-0"', 'team="vision"'):
            assert label in line, line
        assert "container=" not in line, line
    # Outside a job, no identity label.
    plain = samples(scrape_power_serve(joule_bin, clean_environment()))
    assert not any("slurm_job_id" in line for line in plain)


@pytest.mark.parametrize("args, message", [
    (["--sim", "v100", "power", "--serve", "127.0.0.1:0", "--label", "gpu=1"],
     "joule: error: --label: label name 'gpu' is one of the exporters' own labels ("),
    (["--sim", "v100", "power", "--serve", "127.0.0.1:0", "--label", "team"],
     "joule: error: --label: label \"team\" is not NAME=VALUE (e.g. team=vision)\n"),
    (["--label", "team=a", "--sim", "v100", "devices"],
     "joule: error: --label applies only to exported metrics, which 'joule devices' has none of: use it with "
     "joule power --serve, joule daemon --metrics, joule serve, or joule infer replay|bench --metrics-out\n"),
    (["--sim", "v100", "power", "--duration-s", "0.1", "--label", "team=a"],
     "joule: error: --label applies only to exported metrics, which 'joule power' has none of:"),
])
def test_bad_labels_are_refused(joule_bin: pathlib.Path, args: list[str], message: str) -> None:
    result = subprocess.run([str(joule_bin), *args], capture_output=True, text=True, timeout=30,
                            env=clean_environment())
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(message), result.stderr


# ---- scripts/hw-check


def test_hw_check_without_a_gpu_checks_the_simulated_one_and_exits_0(joule_bin: pathlib.Path,
                                                                     tmp_path: pathlib.Path) -> None:
    script = PACKAGING.parent / "scripts" / "hw-check"
    env = clean_environment(JOULE_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1",
                            JOULE_AMD_SMI_LIBRARY="/nonexistent/libamd_smi.so",
                            JOULE_LEVEL_ZERO_LIBRARY="/nonexistent/libze_loader.so.1",
                            JOULE_ROCM_SMI_LIBRARY="/nonexistent/librocm_smi64.so.1",
                            JOULE_POWERCAP_ROOT="/nonexistent/powercap")
    out = tmp_path / "report.txt"
    result = subprocess.run([str(script), "--duration-s", "0.3", "--no-load", "--joule", str(joule_bin), "--out",
                             str(out)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = out.read_text()
    assert report == result.stdout
    assert "== environment" in report and "kernel: " in report
    assert "checking a simulated v100 the same way instead" in report
    assert "PASS energy vs power" in report and "no setting was changed" in report
    bad = subprocess.run([str(script), "--duration-s"], env=env, capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2 and bad.stderr == "hw-check: --duration-s needs a value (see --help)\n"


# ---- the daemon's systemd unit (packaging/joule-daemon.service.in)

UNIT = PACKAGING / "joule-daemon.service.in"


def unit_sections(text: str) -> dict[str, list[tuple[str, str]]]:
    """The unit's [Section] → (key, value) in order, as systemd reads it: comments, continuation lines."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith(("#", ";"))):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, _, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return sections


def unit_values(section: list[tuple[str, str]], key: str) -> list[str]:
    return [value for k, value in section if k == key]


def unit_exec_start(service: list[tuple[str, str]], environment: dict[str, str], bindir: str) -> list[str]:
    """ExecStart= as systemd runs it: Environment= (each value one assignment, quotes removed), then what an
    EnvironmentFile would set (`environment`); an unquoted $VAR becomes its words, ${VAR} one word."""
    variables: dict[str, str] = {}
    for value in unit_values(service, "Environment"):
        name, _, assigned = value.strip('"').partition("=")
        variables[name] = assigned
    variables.update(environment)
    (exec_start,) = unit_values(service, "ExecStart")
    argv: list[str] = []
    for word in exec_start.replace("@JOULE_BINDIR@", bindir).split():
        match = re.fullmatch(r"\$(\w+)|\$\{(\w+)\}", word)
        if match and match.group(1):
            argv += variables.get(match.group(1), "").split()
        elif match:
            argv.append(variables.get(match.group(2), ""))
        else:
            argv.append(word)
    return argv


def test_daemon_unit_names_no_group_and_stops_after_a_refusal() -> None:
    sections = unit_sections(UNIT.read_text())
    unit, service = sections["Unit"], sections["Service"]
    # No group a Debian machine may lack (it has no `gpu` group): not in the unit, not in the default start line.
    assert not unit_values(service, "Group") and not unit_values(service, "SupplementaryGroups")
    argv = unit_exec_start(service, {}, "/usr/bin")
    assert not {"--allow-group", "--read-group", "--allow-user", "--read-user"} & set(argv), argv
    assert argv[argv.index("--others") + 1] == "read"
    # The site names its groups in an optional file.
    assert unit_values(service, "EnvironmentFile") == ["-/etc/default/joule-daemon"]
    assert "$JOULE_DAEMON_ACCESS" in unit_values(service, "ExecStart")[0]
    # A refusal (exit 1, or 2 for a malformed flag) is not retried; a crash is, a bounded number of times.
    assert unit_values(service, "Restart") == ["on-failure"]
    assert set(unit_values(service, "RestartPreventExitStatus")[0].split()) == {"1", "2"}
    assert int(unit_values(unit, "StartLimitBurst")[0]) >= 1
    assert int(unit_values(unit, "StartLimitIntervalSec")[0]) >= 60
    assert unit_values(unit, "Documentation") == ["man:joule-daemon(1) file://@JOULE_DOCDIR@/docs/daemon.md"]


def daemon_from_unit(joule_bin: pathlib.Path, folder: pathlib.Path, access: dict[str, str]) -> subprocess.Popen:
    """The unit's start line, with the socket and audit log in `folder`, on a simulated V100."""
    service = unit_sections(UNIT.read_text())["Service"]
    argv = unit_exec_start(service, access, str(joule_bin.parent))
    argv = [str(folder / "joule.sock") if a == "/run/joule/joule.sock" else a for a in argv]
    argv = [str(folder / "audit.log") if a == "/var/log/joule/audit.log" else a for a in argv]
    assert argv[0] == str(joule_bin)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_environment(JOULE_SIM="v100", JOULE_POWERCAP_ROOT=str(folder / "no-rapl")))


def test_daemon_unit_start_line_serves_without_any_group(joule_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    tmp_path.chmod(0o755)
    process = daemon_from_unit(joule_bin, tmp_path, {})
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("joule daemon: serving 1 GPU on "), line
        assert process.stdout.readline() == "joule daemon: control: root; read: (no rule); others: read\n"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
    assert process.returncode == 0


def test_daemon_unit_a_missing_group_is_one_line_and_an_exit_status_not_restarted(
        joule_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    tmp_path.chmod(0o755)
    # The site's file names a group this machine lacks (as `gpu` on Debian).
    process = daemon_from_unit(joule_bin, tmp_path,
                               {"JOULE_DAEMON_ACCESS": "--allow-group no-such-group-joule --others read"})
    stdout, stderr = process.communicate(timeout=10)
    service = unit_sections(UNIT.read_text())["Service"]
    assert str(process.returncode) in unit_values(service, "RestartPreventExitStatus")[0].split()
    assert stderr == ("joule: error: --allow-group no-such-group-joule: no such group (give a name from /etc/group "
                      "or a numeric id)\n")
    assert stdout == ""


def test_daemon_unit_network_line_listens_and_reload_keeps_it_serving(
        joule_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    tmp_path.chmod(0o755)
    tokens = tmp_path / "tokens"
    tokens.write_text("trainer read " + "t" * 64 + "\n")
    tokens.chmod(0o600)
    service = unit_sections(UNIT.read_text())["Service"]
    assert unit_values(service, "ExecReload") == ["/bin/kill -HUP $MAINPID"]
    assert "$JOULE_DAEMON_NETWORK" in unit_values(service, "ExecStart")[0]
    process = daemon_from_unit(joule_bin, tmp_path, {
        "JOULE_DAEMON_NETWORK": f"--listen 127.0.0.1:0 --allow-plain-loopback --tokens {tokens}"})
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(4)]
        assert any(line.startswith("joule daemon: network listener on 127.0.0.1:") for line in lines), lines
        process.send_signal(signal.SIGHUP)  # systemctl reload: the daemon reads its files again, and goes on
        time.sleep(0.3)
        assert process.poll() is None
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
    assert process.returncode == 0


def test_daemon_unit_passes_systemd_analyze_verify(joule_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze is not on PATH (Debian package `systemd`)")
    unit = tmp_path / "joule-daemon.service"
    unit.write_text(UNIT.read_text().replace("@JOULE_BINDIR@", str(joule_bin.parent))
                    .replace("@JOULE_DOCDIR@", "/usr/share/doc/joule").replace("@JOULE_UNIT_DIR@", str(tmp_path)))
    result = subprocess.run([analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60,
                            env=clean_environment(SYSTEMD_LOG_LEVEL="warning"))
    # Only what concerns this unit: the machine's other units (none, or not loaded in a container) aside.
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if "joule-daemon" in line]
    assert result.returncode == 0 and not complaints, result.stdout + result.stderr
