# SPDX-License-Identifier: Apache-2.0
"""The docs test itself (docs_test.py) on a tiny source tree: it runs commands as a newcomer pastes them (no
JOULE_SIM, no `python` shim, build/ on PATH only through README's export line), skips what a doc marks
"# needs a GPU", and fails a command that needs a GPU unmarked. A few seconds: each case runs joule once.

Run by CTest as docs.selftest; by hand:
    JOULE_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/docs/test_docs_test.py
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
DOCS_TEST = HERE / "docs_test.py"
EXPORT = "export PATH=$PWD/build:$PATH   # once, in the source folder\n"


@pytest.fixture
def build_dir() -> pathlib.Path:
    path = os.environ.get("JOULE_BUILD_DIR")
    if not path or not os.access(pathlib.Path(path) / "joule", os.X_OK):
        pytest.skip("JOULE_BUILD_DIR (a build with build/joule) is not set")
    return pathlib.Path(path).resolve()


def run_docs_test(tmp_path: pathlib.Path, build_dir: pathlib.Path, readme: str,
                  docs: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "source"
    (source / "docs").mkdir(parents=True)
    (source / "src" / "core").mkdir(parents=True)
    (source / "data" / "perseus").mkdir(parents=True)
    (source / "data" / "perseus" / "example_s4_m8_profile.csv").write_text("stage\n")
    (source / "docs" / "architecture.md").write_text("| area | what |\n|---|---|\n| `core` | the core |\n")
    (source / "README.md").write_text(readme)
    for name, text in (docs or {}).items():
        (source / "docs" / name).write_text(text)
    # The machine's own settings must not leak into the newcomer's shell.
    env = dict(os.environ, JOULE_SIM="v100", PYTHONPATH="/nonexistent")
    return subprocess.run(
        [sys.executable, str(DOCS_TEST), "--source-dir", str(source), "--build-dir", str(build_dir),
         "--joule", str(build_dir / "joule"), "--jobs", "2"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )


def block(*lines: str) -> str:
    return "```sh\n" + "".join(line + "\n" for line in lines) + "```\n"


def test_commands_run_as_pasted_after_readmes_export(tmp_path: pathlib.Path, build_dir: pathlib.Path) -> None:
    result = run_docs_test(tmp_path, build_dir, "# r\n" + block(EXPORT.rstrip()), {
        "a.md": block(
            "joule --sim v100 devices --format json",
            # The newcomer's shell: no JOULE_SIM or PYTHONPATH of the machine; python3 is Debian's.
            "python3 -c 'import os, sys; assert \"JOULE_SIM\" not in os.environ and \"PYTHONPATH\" not in "
            "os.environ and sys.executable == \"/usr/bin/python3\"'",
            "joule power --serve 127.0.0.1:9400   # this machine's GPUs (needs a GPU)",
        ),
    })
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 commands run" in result.stdout, result.stdout  # the export, devices, python3
    assert "skipped docs/a.md:4: joule power --serve 127.0.0.1:9400  (needs a GPU)" in result.stdout


def test_a_command_that_needs_a_gpu_unmarked_fails(tmp_path: pathlib.Path, build_dir: pathlib.Path) -> None:
    result = run_docs_test(tmp_path, build_dir, "# r\n" + block(EXPORT.rstrip()), {
        "a.md": block("joule power --serve 127.0.0.1:9400"),
    })
    assert result.returncode == 1
    assert "FAIL docs/a.md:2 " in result.stdout and "nothing to sample: no GPU found" in result.stdout


def test_python_is_not_a_command_on_debian(tmp_path: pathlib.Path, build_dir: pathlib.Path) -> None:
    result = run_docs_test(tmp_path, build_dir, "# r\n" + block(EXPORT.rstrip()), {
        "a.md": block("python -c 'print(1)'"),
    })
    assert result.returncode == 1
    assert "FAIL docs/a.md:2 " in result.stdout and "python: command not found" in result.stdout


def test_without_readmes_export_joule_is_not_found(tmp_path: pathlib.Path, build_dir: pathlib.Path) -> None:
    result = run_docs_test(tmp_path, build_dir, "# r\n" + block("joule --sim v100 devices"))
    assert result.returncode == 1
    assert "README.md: no `export PATH=...` line puts build/ on PATH, so `joule` is not found" in result.stdout
    assert "joule: command not found" in result.stdout
