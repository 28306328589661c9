#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Docs are tests: runs every shell command in README.md and docs/*.md as a newcomer would paste it.

What counts as a command: each line of a fenced block tagged ```sh (a trailing backslash continues it), less
its trailing comment. Blocks tagged otherwise (```text for output and usage synopses) are not run.

The newcomer: a fresh Debian bookworm shell in the source folder after README's quick start (`make demo`),
with build/ put on PATH the one way README says (its `export PATH=...` line, applied to every doc). So the
environment has Debian's default PATH (/usr/bin/python3 is `python3`) and no JOULE_* or PYTHON* variable of
the machine running the test: a command that needs a simulated GPU says so itself (`--sim v100`,
`JOULE_SIM=v100`, `PYTHONPATH=build/python python3 …`).

Skipped, and listed by name, are the commands whose own trailing comment, visible in the doc, says why:
"needs a GPU" (or "needs two GPUs", "needs real GPUs", …: the machine running the test has none), or
"not run by the docs test: REASON" (root, the network, a cluster, the build itself).

The rewrite, mechanical and the same for every doc:
  * every doc runs in a fresh scratch folder, where build/, data/, examples/, tests/ and bench/ link to the
    build and the source tree, and the files a newcomer would bring are made: train.py and my_benchmark
    (tiny programs), profile.csv (the shipped example profile), spec.json (a job spec);
  * a server (`joule serve`, `joule daemon`, `joule power --serve`) starts in the background and stays up
    until the end of its doc; the ports 7787, 9400 and 9401 become free loopback ports (JOULE_SERVER names
    the doc's 7787 for `joule job`, whose default it is), 0.0.0.0 becomes 127.0.0.1, /run/joule/joule.sock a
    socket in the scratch folder;
  * benchmarks (build/bench/…) run for 2 s (--duration-s 2), Python ones (bench/*.py) 1,000 iterations once
    (--iterations 1000 --repeats 1): the test checks that they work;
  * curl gets --fail-with-body, so that an HTTP error fails the command;
  * the job id printed by `joule job register` replaces the placeholder ID and the example ids in later
    commands of the same doc.
A command fails when it exits non-zero, times out, or prints an error (a line with "error" on stderr);
a server fails when it exits before the end of its doc or its stderr has an error. Docs run in parallel
(--jobs, default 3: most of the time is spent waiting on servers, benchmarks and sleeps), each doc's
commands in order; each doc's report is printed whole when it ends.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

SKIP_MARKER = re.compile(r"not run by the docs test:\s*(.+)$")
# "needs a GPU", "needs two GPUs and RAPL", "needs real GPUs and root", …
NEEDS_GPU = re.compile(r"\b(needs (?:a|an|one|two|\d+|real)(?: real)? GPUs?\b.*)$")
EXPORT = re.compile(r"^export ([A-Za-z_][A-Za-z0-9_]*)=")
# A fresh Debian's PATH (/etc/profile's for a user, plus the sbin folders root has).
NEWCOMER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DOCUMENTED_PORTS = (7787, 9400, 9401)
COMMAND_TIMEOUT_S = 180
SERVER_START_TIMEOUT_S = 20
ERROR_LINE = re.compile(r"\berror\b|Traceback", re.IGNORECASE)
JOB_ID = re.compile(r"\b([a-z][a-z0-9_]*-[0-9a-f]{8})\b")
EXAMPLE_JOB_IDS = ("mnist-8d1f69b4",)


@dataclass
class Command:
    doc: str
    line: int
    text: str  # as written, continuation lines joined, comment removed
    skip_reason: str | None = None


@dataclass
class Outcome:
    command: Command
    ok: bool
    detail: str = ""
    seconds: float = 0.0


def strip_comment(line: str) -> tuple[str, str]:
    """Splits a shell line into code and its trailing comment, respecting quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), ""


def extract_commands(path: Path, name: str) -> list[Command]:
    commands: list[Command] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    in_block = False
    tag = ""
    pending = ""
    pending_line = 0
    pending_comment = ""
    for number, raw in enumerate(lines, start=1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            if in_block:
                in_block = False
                continue
            in_block = True
            tag = stripped[3:].strip()
            continue
        if not in_block or tag != "sh":
            continue
        code, comment = strip_comment(raw.strip())
        if not pending:
            pending_line = number
        if comment:
            pending_comment = (pending_comment + " " + comment).strip()
        if code.endswith("\\"):
            pending += code[:-1].rstrip() + " "
            continue
        pending += code
        if pending.strip():
            marker = SKIP_MARKER.search(pending_comment) or NEEDS_GPU.search(pending_comment)
            reason = None
            if marker:
                reason = marker.group(1).strip()
                while reason.endswith(")") and reason.count(")") > reason.count("("):
                    reason = reason[:-1].rstrip()  # the marker was written inside parentheses
            commands.append(Command(name, pending_line, " ".join(pending.split()), reason))
        pending = ""
        pending_comment = ""
    return commands


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_PATH = re.compile(r"`((?:data|docs|include|src|scripts|examples|tests|bench|python)/[^`\s]*)`")


def missing_references(path: Path, source: Path) -> list[str]:
    """Links and `repo/paths` a doc cites that are not in the repository."""
    problems = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            file = (path.parent / target.split("#")[0]).resolve()
            if not file.exists():
                problems.append(f"{path.relative_to(source)}:{number}: link to {target}, which does not exist")
        for cited in CODE_PATH.findall(line):
            if any(c in cited for c in "<>{}*$…|"):
                continue  # a pattern, not a file
            cited = re.sub(r":\d+(-\d+)?$", "", cited)
            if not any((source / (cited + suffix)).exists() for suffix in ("", ".cpp", ".py")):
                problems.append(f"{path.relative_to(source)}:{number}: cites {cited}, which is not in the repository")
    return problems


def untagged_blocks(path: Path, source: Path) -> list[str]:
    """Fenced blocks with no language: each must say whether it is commands (sh) or not (text, json, …)."""
    problems = []
    in_block = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if not in_block and stripped == "```":
                problems.append(f"{path.relative_to(source)}:{number}: a code block with no language (sh for commands, text for output)")
            in_block = not in_block
    return problems


def unnamed_areas(source: Path) -> list[str]:
    """Every folder of src/ (an area) has its row in docs/architecture.md's table."""
    architecture = (source / "docs" / "architecture.md").read_text()
    return [
        f"docs/architecture.md: the area src/{area.name}/ is not in the table of areas"
        for area in sorted(p for p in (source / "src").iterdir() if p.is_dir())
        if f"| `{area.name}` |" not in architecture
    ]


_ports_lock = threading.Lock()
_ports_given: set[int] = set()


def free_port() -> int:
    """A free loopback port, never the same twice in a run (docs run in parallel)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with _ports_lock:
            if port not in _ports_given:
                _ports_given.add(port)
                return port


def newcomer_environment() -> dict[str, str]:
    """This process's environment less what a newcomer's fresh shell would not have."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JOULE_", "PYTHON", "CUDA_", "HIP_", "ROCR_")) and k not in ("VIRTUAL_ENV", "PATH")
    }
    env["PATH"] = NEWCOMER_PATH
    return env


def apply_export(text: str, env: dict[str, str], cwd: Path) -> str | None:
    """Runs an `export NAME=VALUE` command as the newcomer's shell would, updating `env`.
    @return an error, or None."""
    name = EXPORT.match(text).group(1)
    result = subprocess.run(
        ["bash", "-c", f'{text} && printf %s "${name}"'], cwd=cwd, env=env, capture_output=True, text=True
    )
    if result.returncode != 0:
        return f"exit {result.returncode}: {text}\n" + indent(result.stderr)
    env[name] = result.stdout
    return None


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class DocRun:
    """One doc's commands in one scratch folder, with its servers."""

    def __init__(self, args: argparse.Namespace, doc: str):
        self.args = args
        self.doc = doc
        self.scratch = Path(tempfile.mkdtemp(prefix="joule-docs-"))
        self.ports = {p: free_port() for p in DOCUMENTED_PORTS}
        self.job_id: str | None = None
        self.servers: list[tuple[Command, subprocess.Popen, Path, int | None, str | None]] = []
        self._prepare()

    def _prepare(self) -> None:
        source = Path(self.args.source_dir)
        for name in ("data", "examples", "tests", "bench", "docs", "python", "scripts"):
            if (source / name).exists():
                (self.scratch / name).symlink_to(source / name)
        (self.scratch / "build").symlink_to(Path(self.args.build_dir))
        (self.scratch / "out").mkdir()
        (self.scratch / "train.py").write_text(
            "import time\nfor step in range(5):\n    time.sleep(0.02)\nprint('trained 5 steps')\n"
        )
        benchmark = self.scratch / "my_benchmark"
        benchmark.write_text("#!/bin/sh\nsleep 0.1\necho 'benchmark done'\n")
        benchmark.chmod(0o755)
        shutil.copy(source / "data/perseus/example_s4_m8_profile.csv", self.scratch / "profile.csv")
        (self.scratch / "spec.json").write_text(
            '{"job_id_prefix": "mnist", "batch_sizes": [8, 16, 32], "default_batch_size": 16,'
            ' "max_power": 300, "number_of_gpus": 1, "gpu_model": "NVIDIA A40"}\n'
        )
        # The newcomer's shell after README's quick start (its exports), in this doc's folder.
        self.env = dict(self.args.session_env)
        self.env.update(
            {
                "PYTHONDONTWRITEBYTECODE": "1",  # keeps the source tree clean; changes nothing a command does
                "HOME": str(self.scratch),
                "JOULE_SERVER": f"http://127.0.0.1:{self.ports[7787]}",  # the doc's 7787 (see the rewrite)
            }
        )

    def rewrite(self, text: str) -> str:
        for documented, port in self.ports.items():
            text = re.sub(rf"(?<=:){documented}\b", str(port), text)
        text = text.replace("0.0.0.0:", "127.0.0.1:")
        # An HTTP error status fails the command (curl alone exits 0 on a 404).
        text = re.sub(r"(^|\| |&& )curl ", r"\1curl --fail-with-body ", text)
        text = text.replace("/run/joule/joule.sock", str(self.scratch / "joule.sock"))
        if self.job_id:
            text = re.sub(r"(?<=--job-id )ID\b", self.job_id, text)
            for example in EXAMPLE_JOB_IDS:
                text = text.replace(example, self.job_id)
        if text.startswith("build/bench/"):
            # Benchmarks run for 2 s: this checks that they work, `make bench` measures.
            if "--duration-s" in text:
                text = re.sub(r"--duration-s \S+", "--duration-s 2", text)
            else:
                text += " --duration-s 2"
        if re.search(r"\bpython3 bench/\S+\.py\b", text):
            # Python benchmarks likewise: 1,000 iterations, once.
            for option, value in (("--iterations", "1000"), ("--repeats", "1")):
                if option in text:
                    text = re.sub(rf"{option} \S+", f"{option} {value}", text)
                else:
                    text += f" {option} {value}"
        if re.match(r"^(build/)?joule( --sim \S+)? serve\b", text) and "--listen" not in text:
            text += f" --listen 127.0.0.1:{self.ports[7787]}"
        return text

    @staticmethod
    def server_kind(text: str) -> str | None:
        if re.match(r"^(build/)?joule( --sim \S+)? serve\b", text):
            return "serve"
        if re.match(r"^(build/)?joule( --sim \S+)? daemon\b", text):
            return "daemon"
        if re.match(r"^(build/)?joule( --sim \S+)? power\b", text) and "--serve" in text and "--duration-s" not in text:
            return "power"
        return None

    def run(self, command: Command) -> Outcome:
        text = self.rewrite(command.text)
        kind = self.server_kind(text)
        started = time.monotonic()
        if EXPORT.match(text):
            problem = apply_export(text, self.env, self.scratch)
            return Outcome(command, problem is None, problem or text, time.monotonic() - started)
        if kind:
            return self._start_server(command, text, kind, started)
        try:
            result = subprocess.run(
                ["bash", "-o", "pipefail", "-c", text],
                cwd=self.scratch,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return Outcome(command, False, f"still running after {COMMAND_TIMEOUT_S} s: {text}", COMMAND_TIMEOUT_S)
        seconds = time.monotonic() - started
        if "job register" in text:
            match = JOB_ID.search(result.stdout)
            if match:
                self.job_id = match.group(1)
        errors = [line for line in result.stderr.splitlines() if ERROR_LINE.search(line)]
        if result.returncode != 0 or errors:
            detail = f"exit {result.returncode}: {text}\n" + indent(result.stderr or result.stdout)
            return Outcome(command, False, detail, seconds)
        return Outcome(command, True, text, seconds)

    def _start_server(self, command: Command, text: str, kind: str, started: float) -> Outcome:
        port_match = re.search(r"127\.0\.0\.1:(\d+)", text)
        port = int(port_match.group(1)) if port_match else None
        socket_match = re.search(r"--socket (\S+)", text)
        sock = str(self.scratch / socket_match.group(1)) if socket_match else None
        if kind == "daemon" and not sock:
            sock = str(self.scratch / "joule.sock")
            text += f" --socket {sock}"
        # A new server on a port another one of this doc holds replaces it.
        for entry in list(self.servers):
            if (port is not None and entry[3] == port) or (sock is not None and entry[4] == sock):
                self._stop(entry)
                self.servers.remove(entry)
        log = self.scratch / f".server-{len(self.servers)}-{kind}.log"
        process = subprocess.Popen(
            ["bash", "-c", "exec " + text],
            cwd=self.scratch,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return Outcome(command, False, f"exited with {process.returncode} at start: {text}\n" + indent(log.read_text()))
            if (port is not None and kind != "daemon" and port_open(port)) or (
                kind == "daemon" and sock and Path(sock).exists() and (port is None or port_open(port))
            ):
                self.servers.append((command, process, log, port, sock))
                return Outcome(command, True, f"{text} (serving in the background)", time.monotonic() - started)
            time.sleep(0.05)
        process.kill()
        return Outcome(command, False, f"not serving after {SERVER_START_TIMEOUT_S} s: {text}\n" + indent(log.read_text()))

    @staticmethod
    def _stop(entry) -> str | None:
        command, process, log, _, _ = entry
        if process.poll() is not None:
            return f"exited early with {process.returncode}\n" + indent(log.read_text())
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return "did not stop within 15 s of SIGTERM"
        errors = [line for line in log.read_text().splitlines() if ERROR_LINE.search(line)]
        if process.returncode != 0 or errors:
            return f"stopped with {process.returncode}\n" + indent(log.read_text())
        return None

    def finish(self) -> list[Outcome]:
        outcomes = []
        for entry in self.servers:
            problem = self._stop(entry)
            if problem:
                outcomes.append(Outcome(entry[0], False, f"server: {problem}"))
        self.servers.clear()
        shutil.rmtree(self.scratch, ignore_errors=True)
        return outcomes


def indent(text: str, limit: int = 2000) -> str:
    text = text.strip()
    if len(text) > limit:
        text = text[:limit] + " …"
    return "\n".join("      " + line for line in text.splitlines())


def run_doc(args: argparse.Namespace, name: str, commands: list[Command]) -> tuple[str, list[Outcome], int]:
    """Runs one doc's commands in order. @return its report, its failures and how many commands ran."""
    report = io.StringIO()
    failures: list[Outcome] = []
    ran = 0
    started = time.monotonic()
    run = DocRun(args, name)
    try:
        for command in commands:
            if command.skip_reason:
                continue
            outcome = run.run(command)
            ran += 1
            status = "ok  " if outcome.ok else "FAIL"
            print(f"{status} {command.doc}:{command.line} ({outcome.seconds:.1f} s) {command.text}", file=report)
            if not outcome.ok:
                print(outcome.detail, file=report)
                failures.append(outcome)
    finally:
        for outcome in run.finish():
            print(f"FAIL {outcome.command.doc}:{outcome.command.line} {outcome.command.text}\n{outcome.detail}", file=report)
            failures.append(outcome)
    print(f"-- {name}: {ran} commands in {time.monotonic() - started:.1f} s", file=report)
    return report.getvalue(), failures, ran


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--joule", required=True, help="the built joule binary (it must be BUILD_DIR/joule)")
    parser.add_argument("--only", action="append", default=[], help="run only these docs (e.g. docs/plan.md)")
    parser.add_argument("--list", action="store_true", help="print the commands and what would be skipped")
    parser.add_argument("--jobs", type=int, default=3, help="docs run at once (default 3)")
    args = parser.parse_args()
    args.source_dir = str(Path(args.source_dir).resolve())
    args.build_dir = str(Path(args.build_dir).resolve())
    args.joule = str(Path(args.joule).resolve())
    started = time.monotonic()

    source = Path(args.source_dir)
    docs = [source / "README.md"] + sorted((source / "docs").glob("*.md"))
    failures: list[Outcome] = []
    skipped: list[Command] = []
    ran = 0
    problems = []
    for doc in docs:
        problems += missing_references(doc, source)
    for doc in docs + sorted((source / "data").glob("*/README.md")):
        problems += untagged_blocks(doc, source)
    problems += unnamed_areas(source)
    if Path(args.joule) != Path(args.build_dir) / "joule":
        problems.append(f"--joule {args.joule}: the docs put BUILD_DIR on PATH, so it must be {args.build_dir}/joule")
    for problem in problems:
        print(f"FAIL {problem}")

    # README's exports (build/ on PATH) hold for every doc, as in the newcomer's shell; they are evaluated
    # in a folder that looks like the source folder and lives as long as the run.
    root = Path(tempfile.mkdtemp(prefix="joule-docs-root-"))
    (root / "build").symlink_to(Path(args.build_dir))
    args.session_env = newcomer_environment()
    readme_exports = [c for c in extract_commands(docs[0], "README.md") if EXPORT.match(c.text) and not c.skip_reason]
    if not readme_exports and not args.list:
        problems.append("README.md: no `export PATH=...` line puts build/ on PATH, so `joule` is not found")
        print(f"FAIL {problems[-1]}")
    for command in readme_exports:
        problem = apply_export(command.text, args.session_env, root)
        if problem:
            failures.append(Outcome(command, False, problem))
            print(f"FAIL README.md:{command.line} {problem}")

    work = []
    for doc in docs:
        name = str(doc.relative_to(source))
        if args.only and name not in args.only:
            continue
        commands = extract_commands(doc, name)
        if not commands:
            continue
        if args.list:
            for c in commands:
                print(f"{c.doc}:{c.line}: {'SKIP (' + c.skip_reason + ') ' if c.skip_reason else ''}{c.text}")
            continue
        skipped += [c for c in commands if c.skip_reason]
        work.append((name, commands))
    if args.list:
        shutil.rmtree(root, ignore_errors=True)
        return 1 if problems else 0
    # The longest docs first, so that the pool ends together: a Python example (torch, processes) weighs
    # most, then benchmarks and commands that run for a while.
    def weight(command: Command) -> int:
        if command.skip_reason:
            return 0
        if "examples/" in command.text:
            return 20
        return 5 if re.search(r"bench/|--duration-s|infer replay", command.text) else 1

    work.sort(key=lambda item: -sum(weight(c) for c in item[1]))
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for report, doc_failures, doc_ran in pool.map(lambda item: run_doc(args, *item), work):
                print(report, end="", flush=True)
                failures += doc_failures
                ran += doc_ran
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{ran} commands run in {time.monotonic() - started:.1f} s, {len(failures)} failed, "
          f"{len(skipped)} skipped as marked in the docs:")
    for c in skipped:
        print(f"  skipped {c.doc}:{c.line}: {c.text}  ({c.skip_reason})")
    if problems:
        print(f"\n{len(problems)} problems in the docs themselves (above)")
    if failures:
        print("\nfailed:")
        for f in failures:
            print(f"  {f.command.doc}:{f.command.line}: {f.command.text}")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
