# SPDX-License-Identifier: Apache-2.0
"""The package itself: exports, type stubs, py.typed, docstrings, no torch import."""

from __future__ import annotations

import ast
import inspect
import pathlib

import joule
from joule import _joule
from conftest import run_python

PACKAGE_DIR = pathlib.Path(joule.__file__).resolve().parent


def stub_names() -> dict[str, set[str]]:
    """Top-level names of _joule.pyi → the members each class declares."""
    tree = ast.parse((PACKAGE_DIR / "_joule.pyi").read_text())
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
            names[node.name] = members
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = set()
    return names


def test_stubs_cover_the_native_module() -> None:
    stubs = stub_names()
    public = {name for name in dir(_joule) if not name.startswith("__")}
    assert public == set(stubs), "joule/_joule.pyi and the module disagree"
    for name, members in stubs.items():
        cls = getattr(_joule, name)
        if not isinstance(cls, type):
            continue
        actual = {member for member in vars(cls) if not member.startswith("__") or member in ("__enter__", "__exit__", "__init__")}
        inherited = {m for base in cls.__mro__[1:] if base.__module__ == "joule._joule" for m in vars(base)}
        assert actual - inherited <= members | {"__init__"}, f"{name}: {sorted(actual - inherited - members)} lack stubs"


def test_py_typed_marker_ships() -> None:
    assert (PACKAGE_DIR / "py.typed").is_file()


def test_public_names_have_docstrings() -> None:
    for name in joule.__all__:
        obj = getattr(joule, name)
        if inspect.isclass(obj) or inspect.isroutine(obj):
            assert (obj.__doc__ or "").strip(), f"joule.{name} has no docstring"


def test_import_joule_does_not_import_torch() -> None:
    result = run_python(["-c", "import sys, joule; print('torch' in sys.modules)"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_version() -> None:
    assert joule.__version__.count(".") == 2


def test_python_dash_m_joule_runs_the_command_line() -> None:
    version = run_python(["-m", "joule", "--version"])
    assert version.returncode == 0, version.stderr
    assert version.stdout == "joule 0.1.0\n"
    devices = run_python(["-m", "joule", "--sim", "2xa40", "devices", "--format", "json"])
    assert devices.returncode == 0, devices.stderr
    assert '"backend": "sim"' in devices.stdout
    typo = run_python(["-m", "joule", "devcies"])
    assert typo.returncode == 2
    assert typo.stderr == "joule: error: unknown command 'devcies'; did you mean 'devices'? (see 'joule --help')\n"
    measured = run_python(["-m", "joule", "--sim", "v100", "measure", "--", "sh", "-c", "exit 3"])
    assert measured.returncode == 3  # the command's own exit code, as from the binary
