# SPDX-License-Identifier: Apache-2.0
"""setuptools glue for `pip install .`: builds the pybind11 module joule._joule with CMake (the project's
normal build, target joule_python) and packages it with python/joule/. Metadata is in pyproject.toml.

Environment: JOULE_BUILD_DIR (default build-pip/cmake) is the CMake build directory, reused if configured;
JOULE_BUILD_JOBS (default 2) the parallel jobs.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent
# Keep setuptools' own output out of build/ (the project's CMake build directory) and out of python/.
WORK = ROOT / "build-pip"


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        build_dir = pathlib.Path(os.environ.get("JOULE_BUILD_DIR", WORK / "cmake")).resolve()
        if not (build_dir / "CMakeCache.txt").exists():
            subprocess.check_call(
                [
                    "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    f"-DPython3_EXECUTABLE={sys.executable}", "-DJOULE_BUILD_PYTHON=ON", "-DJOULE_BUILD_TESTS=OFF",
                    "-DJOULE_BUILD_BENCH=OFF",
                ]
            )
        jobs = os.environ.get("JOULE_BUILD_JOBS", "2")
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "joule_python", "joule", "-j", jobs])
        built = sorted((build_dir / "python" / "joule").glob("_joule*.so"))
        if not built:
            raise RuntimeError(f"the CMake build in {build_dir} produced no joule/_joule*.so")
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target)
        # The command line, for `python -m joule` (joule/__main__.py).
        binary_dir = target.parent / "_bin"
        binary_dir.mkdir(exist_ok=True)
        shutil.copy2(build_dir / "joule", binary_dir / "joule")


WORK.mkdir(exist_ok=True)
setup(
    ext_modules=[CMakeExtension("joule._joule")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(WORK / "setuptools")}, "egg_info": {"egg_base": str(WORK)}},
)
