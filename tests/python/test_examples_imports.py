# SPDX-License-Identifier: Apache-2.0
"""The examples/ scripts, run by a newcomer without joule or torch importable: one line that says how to run
them (PYTHONPATH=build/python, python3-torch) and exit 2, not a traceback. Needs neither torch nor a build
of the examples' dependencies: each run stops at its imports (about 50 ms)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

import joule
from conftest import SOURCE_DIR

EXAMPLES = SOURCE_DIR / "examples"
ALL = ["train_power_limit.py", "train_batch_size.py", "train_chase.py", "train_pipeline.py", "serve_llm.py"]
WITH_TORCH = ["train_power_limit.py", "train_batch_size.py", "train_pipeline.py", "serve_llm.py"]
PACKAGE_PARENT = str(pathlib.Path(joule.__file__).resolve().parents[1])


def run_example(name: str, cwd: pathlib.Path, pythonpath: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    # As documented: examples/NAME from the source folder (here a copy of the relative path's start).
    (cwd / "examples").mkdir(exist_ok=True)
    script = cwd / "examples" / name
    if not script.exists():
        script.symlink_to(EXAMPLES / name)
    return subprocess.run(
        [sys.executable, f"examples/{name}", "--help"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("name", ALL)
def test_an_example_without_joule_says_how_to_set_pythonpath(name: str, tmp_path: pathlib.Path) -> None:
    result = run_example(name, tmp_path, [])
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"examples/{name}: cannot import joule (No module named 'joule'); build it (make demo), then run this "
        f"from the source folder as: PYTHONPATH=build/python python3 examples/{name}\n"
    )


@pytest.mark.parametrize("name", WITH_TORCH)
def test_an_example_without_torch_says_how_to_get_it(name: str, tmp_path: pathlib.Path) -> None:
    # A torch that cannot be imported, first on the path: as on a Python without python3-torch.
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\")\n")
    result = run_example(name, tmp_path, [str(fake), PACKAGE_PARENT])
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"examples/{name}: cannot import torch (No module named 'torch'); install PyTorch (Debian: sudo apt "
        f"install python3-torch) and run this with that Python: PYTHONPATH=build/python /usr/bin/python3 "
        f"examples/{name}\n"
    )
