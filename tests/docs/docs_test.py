#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Docs are tests: runs every shell command in README.md and docs/*.md as a newcomer would paste it.

What counts as a command: each line of a fenced block tagged ```sh (a trailing backslash continues it), less
its trailing comment. Blocks tagged otherwise (```text for output and usage synopses) are not run.

A command that cannot run on a machine without a GPU, root or network carries, in its own trailing comment
and visible in the doc, the marker "not run by the docs test: REASON". It is skipped and listed by name.

The rewrite, mechanical and the same for every doc:
  * every command runs in a fresh scratch folder per doc, where build/, data/, examples/, tests/ and bench/
    link to the build and the source tree, and the files a newcomer would bring are made: train.py and
    my_benchmark (tiny programs), profile.csv (the shipped example profile), spec.json (a job spec);
  * `joule` and `python` on PATH are the built binary and /usr/bin/python3; JOULE_SIM=v100 for the whole
    run, so "this machine's GPUs" is one simulated V100;
  * a server (`joule serve`, `joule daemon`, `joule power --serve`) starts in the background and stays up
    until the end of its doc; the ports 7787, 9400 and 9401 become free loopback ports, 0.0.0.0 becomes
    127.0.0.1, /run/joule/joule.sock a socket in the scratch folder;
  * benchmarks (build/bench/…) run for 2 s (--duration-s 2): the test checks that they work;
  * curl gets --fail-with-body, so that an HTTP error fails the command; JOULE_SERVER points `joule job`
    at the doc's server;
  * the job id printed by `joule job register` replaces the placeholder ID and the example ids in later
    commands of the same doc.
A command fails when it exits non-zero, times out, or prints an error (a line with "error" on stderr);
a server fails when it exits before the end of its doc or its stderr has an error.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SKIP_MARKER = re.compile(r"not run by the docs test:\s*(.+)$")
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
            marker = SKIP_MARKER.search(pending_comment)
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        bin_dir = self.scratch / ".bin"
        bin_dir.mkdir()
        (bin_dir / "joule").symlink_to(Path(self.args.joule))
        (bin_dir / "python").symlink_to(self.args.python)
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
        self.env = dict(os.environ)
        self.env.update(
            {
                "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                "JOULE_SIM": "v100",
                "PYTHONDONTWRITEBYTECODE": "1",
                "HOME": str(self.scratch),
                "JOULE_SERVER": f"http://127.0.0.1:{self.ports[7787]}",
            }
        )
        self.env.pop("JOULE_DAEMON_SOCKET", None)

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--joule", required=True, help="the built joule binary")
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--only", action="append", default=[], help="run only these docs (e.g. docs/plan.md)")
    parser.add_argument("--list", action="store_true", help="print the commands and what would be skipped")
    args = parser.parse_args()
    args.source_dir = str(Path(args.source_dir).resolve())
    args.build_dir = str(Path(args.build_dir).resolve())
    args.joule = str(Path(args.joule).resolve())

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
    for problem in problems:
        print(f"FAIL {problem}")
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
        run = DocRun(args, name)
        try:
            for command in commands:
                if command.skip_reason:
                    skipped.append(command)
                    continue
                outcome = run.run(command)
                ran += 1
                status = "ok  " if outcome.ok else "FAIL"
                print(f"{status} {command.doc}:{command.line} ({outcome.seconds:.1f} s) {command.text}", flush=True)
                if not outcome.ok:
                    print(outcome.detail, flush=True)
                    failures.append(outcome)
        finally:
            for outcome in run.finish():
                print(f"FAIL {outcome.command.doc}:{outcome.command.line} {outcome.command.text}\n{outcome.detail}")
                failures.append(outcome)
    if args.list:
        return 1 if problems else 0
    print(f"\n{ran} commands run, {len(failures)} failed, {len(skipped)} skipped as marked in the docs:")
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
