# SPDX-License-Identifier: Apache-2.0
"""``python -m joule COMMAND …`` runs the joule command line (``devices``, ``measure``, ``power``, ``simulate``,
``plan``, ``serve``, ``job``, ``carbon``, …) with the same flags, output and exit codes.

The binary is the one installed with the package (``pip install .`` and ``cmake --install`` put it in
``joule/_bin/``), else the build tree's (``PYTHONPATH=build/python``), else ``$JOULE_BIN``, else ``joule`` on
PATH. The interpreter is replaced by it, so signals reach it directly and its exit code is the process's.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys
from typing import Optional


def find_binary() -> Optional[str]:
    """The joule executable ``python -m joule`` runs, or None."""
    package = pathlib.Path(__file__).resolve().parent
    candidates = [package / "_bin" / "joule", package.parents[1] / "joule"]
    if os.environ.get("JOULE_BIN"):
        candidates.append(pathlib.Path(os.environ["JOULE_BIN"]))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("joule")


def main() -> int:
    binary = find_binary()
    if binary is None:
        print(
            "python -m joule: the joule command was not found next to the package (joule/_bin/joule), in the "
            "build tree, in $JOULE_BIN or on PATH; install the package with pip or cmake --install, or set "
            "JOULE_BIN",
            file=sys.stderr,
        )
        return 127
    os.execv(binary, [binary, *sys.argv[1:]])
    return 0  # not reached: execv replaces this process


if __name__ == "__main__":
    sys.exit(main())
