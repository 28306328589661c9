# SPDX-License-Identifier: Apache-2.0
"""Installing the package: `cmake --install` into a prefix (always) and `pip install .` offline (opt-in:
JOULE_TEST_PIP=1, because pip writes build-pip/ into the source tree)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import SOURCE_DIR

BUILD_DIR = os.environ.get("JOULE_BUILD_DIR")
IMPORT_CHECK = (
    "import joule, sys; "
    "d = joule.devices(sim='v100', virtual_clock=True, cpus=False); m = joule.Monitor(devices=d); "
    "m.begin_window('w'); d.advance(1); print(joule.__file__, round(m.end_window('w').time_s, 3))"
)


def import_from(site_packages: pathlib.Path, cwd: pathlib.Path) -> str:
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environment["PYTHONPATH"] = str(site_packages)
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK], cwd=cwd, env=environment, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.skipif(not BUILD_DIR or shutil.which("cmake") is None, reason="needs JOULE_BUILD_DIR and cmake")
def test_cmake_install_into_a_prefix(tmp_path: pathlib.Path) -> None:
    prefix = tmp_path / "prefix"
    subprocess.run(
        ["cmake", "--install", str(BUILD_DIR), "--prefix", str(prefix), "--component", "python"],
        check=True,
        capture_output=True,
    )
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site_packages = prefix / "lib" / version / "site-packages"
    installed = {path.name for path in (site_packages / "joule").iterdir()}
    assert {"__init__.py", "_joule.pyi", "py.typed", "torch.py", "huggingface.py"} <= installed
    assert any(name.startswith("_joule.") and name.endswith(".so") for name in installed)
    output = import_from(site_packages, tmp_path)
    assert output.startswith(str(site_packages)) and output.strip().endswith(" 1.0")
    # `python -m joule` runs the command line installed with the package.
    assert (site_packages / "joule" / "_bin" / "joule").is_file()
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "JOULE_BIN")}
    environment["PYTHONPATH"] = str(site_packages)
    version = subprocess.run([sys.executable, "-m", "joule", "--version"], cwd=tmp_path, env=environment,
                             capture_output=True, text=True, check=False)
    assert version.returncode == 0 and version.stdout == "joule 0.1.0\n", version.stderr


@pytest.mark.skipif(os.environ.get("JOULE_TEST_PIP") != "1" or not BUILD_DIR, reason="opt-in: JOULE_TEST_PIP=1")
def test_pip_install_offline(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "target"
    environment = dict(os.environ, JOULE_BUILD_DIR=str(BUILD_DIR))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps", "--target",
         str(target), str(SOURCE_DIR)],
        check=True,
        capture_output=True,
        env=environment,
    )
    assert import_from(target, tmp_path).startswith(str(target))
