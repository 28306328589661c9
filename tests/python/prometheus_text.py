# SPDX-License-Identifier: Apache-2.0
"""Reading the Prometheus text exposition in the tests (test_infer.py, test_serve_llm_example.py)."""

from __future__ import annotations

import re

SAMPLE_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_exposition(text: str) -> tuple[dict[str, str], Samples]:
    """The text exposition → {family: type}, {(sample name, labels): value}."""
    types: dict[str, str] = {}
    samples: Samples = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            match = SAMPLE_LINE.match(line)
            assert match, line
            labels = frozenset(LABEL_PAIR.findall(match.group(2) or ""))
            samples[(match.group(1), labels)] = float(match.group(3))
    return types, samples
