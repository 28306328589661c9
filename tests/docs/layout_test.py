#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layout rules of docs/architecture.md, checked on the source tree (no build needed, well under a second).

1. The entry points (src/cli, python/src, python/joule) only parse, convert and print: together they hold at most
   MAX_ENTRY_SHARE of the non-test code (non-blank, non-comment lines of src/, include/, python/src, python/joule).
2. No function in an entry point is over MAX_FUNCTION_LINES lines (a function's lines run from the line of its
   opening brace to the line of its closing one; Python: from `def` to its last line).
3. No class in an entry point owns a thread or implements a library interface. A pybind11 trampoline (a class
   whose body forwards to Python: PYBIND11_OVERRIDE…, py::) is a converter and allowed.
4. Each area of src/ includes only the areas its row of docs/architecture.md's table says it depends on (and
   what those depend on, transitively); the table itself has no cycle. `cli` and the Python binding may
   include every area.

Run by CTest as docs.layout; by hand: /usr/bin/python3 tests/docs/layout_test.py --source-dir .
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_ENTRY_SHARE = 0.18
MAX_FUNCTION_LINES = 100
ENTRY_POINTS = ("src/cli/", "python/src/", "python/joule/")


def is_entry_point(relative: str) -> bool:
    return relative.startswith(ENTRY_POINTS)


def code_files(source: Path) -> list[Path]:
    files = [*source.glob("src/**/*.cpp"), *source.glob("src/**/*.hpp"), *source.glob("include/**/*.hpp"),
             *source.glob("python/src/**/*.cpp"), *source.glob("python/src/**/*.hpp"),
             *source.glob("python/joule/**/*.py")]
    return sorted(p for p in files if p.is_file())


def strip_comments_and_strings(text: str) -> str:
    """C++ text with comments, string and character literals emptied; every newline kept (so lines still count)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("\n" * text.count("\n", i, end))
            i = end
            continue
        raw = re.match(r'R"([^(\s]{0,16})\(', text[i:i + 20]) if c == "R" and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) else None
        if raw:
            closing = ")" + raw.group(1) + '"'
            end = text.find(closing, i + len(raw.group(0)))
            end = n if end < 0 else end + len(closing)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
            continue
        # A quote after a digit is a digit separator (1'000), not a character literal.
        if c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def code_line_count(path: Path) -> int:
    """Non-blank lines that are not only a comment (C++ // or /* */ lines, Python # lines)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".py":
        return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))
    return sum(1 for line in strip_comments_and_strings(text).splitlines() if line.strip())


@dataclass
class Function:
    name: str
    first_line: int
    lines: int


_SCOPE_HEAD = re.compile(r'\b(namespace|class|struct|union|enum)\b[^()]*$|extern\s*""\s*$')
_FUNCTION_HEAD = re.compile(r"\)\s*(?:const|noexcept|override|final|mutable|->\s*[\w:<>,\s*&]+|\s)*$")
_CONTROL = re.compile(r"\b(if|for|while|switch|catch|else|do|try)\s*$")


def cpp_functions(text: str) -> list[Function]:
    """Function bodies at namespace or class scope (a lambda counts as part of the function it is in)."""
    text = strip_comments_and_strings(text)
    found: list[Function] = []
    stack: list[tuple[str, int, str]] = []  # (scope | function | block, line of "{", name)
    head_start, line = 0, 1
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            head = text[head_start:i].strip()
            kind, name = "block", ""
            if not any(k == "function" for k, _, _ in stack):
                if _SCOPE_HEAD.search(head):
                    kind = "scope"
                elif _FUNCTION_HEAD.search(head) and not _CONTROL.search(head.split("(")[0]):
                    kind = "function"
                    names = re.findall(r"([\w:~]+)\s*\(", head)
                    name = names[0] if names else "?"
            stack.append((kind, line, name))
            head_start = i + 1
        elif c == "}":
            if stack:
                kind, first, name = stack.pop()
                if kind == "function":
                    found.append(Function(name, first, line - first + 1))
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
    return found


def python_functions(text: str) -> list[Function]:
    return [Function(node.name, node.lineno, node.end_lineno - node.lineno + 1)
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def long_functions(source: Path) -> list[str]:
    problems = []
    for path in code_files(source):
        relative = path.relative_to(source).as_posix()
        if not is_entry_point(relative):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        functions = python_functions(text) if path.suffix == ".py" else cpp_functions(text)
        problems += [
            f"{relative}:{f.first_line}: {f.name} is {f.lines} lines (an entry point's functions are at most "
            f"{MAX_FUNCTION_LINES}: move its machinery into the library area that owns it, or split it)"
            for f in functions if f.lines > MAX_FUNCTION_LINES
        ]
    return problems


def entry_share(source: Path) -> tuple[int, int]:
    entry = total = 0
    for path in code_files(source):
        count = code_line_count(path)
        total += count
        if is_entry_point(path.relative_to(source).as_posix()):
            entry += count
    return entry, total


_CLASS_WITH_BASES = re.compile(r"\b(?:class|struct)\s+(\w+)\s*(?:final\s*)?:\s*([^{;]+)\{")
_THREAD_MEMBER = re.compile(r"\bstd::(?:j?thread)\b(?!::)")
_TRAMPOLINE = re.compile(r"PYBIND11_OVERRIDE|\bpy::|\bpybind11::")


def class_body(text: str, open_brace: int) -> str:
    depth = 0
    for i in range(open_brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_brace:i + 1]
    return text[open_brace:]


def library_classes(source: Path) -> set[str]:
    """The names of the classes and structs the library's public headers declare."""
    names = set()
    for header in (source / "include" / "joule").rglob("*.hpp"):
        names.update(re.findall(r"\b(?:class|struct)\s+(\w+)", strip_comments_and_strings(header.read_text(encoding="utf-8"))))
    return names


def machinery_classes(source: Path) -> list[str]:
    problems = []
    interfaces = library_classes(source)
    for path in code_files(source):
        relative = path.relative_to(source).as_posix()
        if not is_entry_point(relative):
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".py":
            for number, line in enumerate(raw.splitlines(), start=1):
                if re.search(r"\bthreading\.Thread\b|\bThreadPoolExecutor\b", line) and not line.strip().startswith("#"):
                    problems.append(f"{relative}:{number}: an entry point starts a thread (threads are machinery: "
                                    "they belong in the library)")
            continue
        text = strip_comments_and_strings(raw)
        for number, line in enumerate(text.splitlines(), start=1):
            if _THREAD_MEMBER.search(line):
                problems.append(f"{relative}:{number}: an entry point owns a thread (threads are machinery: they "
                                "belong in the library)")
        for match in _CLASS_WITH_BASES.finditer(text):
            bases = [b.strip() for b in match.group(2).split(",")]
            library_bases = [b for b in bases if re.sub(r"<.*", "", b).split("::")[-1].strip() in interfaces]
            if not library_bases:
                continue
            body = class_body(text, match.end() - 1)
            if _TRAMPOLINE.search(body):
                continue
            number = text.count("\n", 0, match.start()) + 1
            problems.append(f"{relative}:{number}: {match.group(1)} implements a library interface "
                            f"({', '.join(library_bases)}) in an entry point: it belongs in the library")
    return problems


def area_table(source: Path) -> dict[str, set[str]]:
    """area → the areas its row of docs/architecture.md's table depends on (libraries left out)."""
    rows = {}
    for line in (source / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"\|\s*`(\w+)`\s*\|.*\|\s*([^|]*)\|\s*$", line)
        if match:
            rows[match.group(1)] = {d.strip() for d in match.group(2).split(",")}
    areas = set(rows)
    return {area: ({d for d in deps if d in areas} if "everything" not in deps else areas - {area})
            for area, deps in rows.items()}


def allowed_areas(table: dict[str, set[str]]) -> tuple[dict[str, set[str]], list[str]]:
    problems, closure = [], {}
    for area in table:
        seen, todo = set(), list(table[area])
        while todo:
            dependency = todo.pop()
            if dependency not in seen:
                seen.add(dependency)
                todo += table.get(dependency, set())
        if area in seen and area != "cli":
            problems.append(f"docs/architecture.md: the area `{area}` depends on itself through its table (a cycle)")
        closure[area] = seen | {area}
    return closure, problems


_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]joule/(\w+)/', re.MULTILINE)


def wrong_includes(source: Path) -> list[str]:
    table = area_table(source)
    closure, problems = allowed_areas(table)
    for area in sorted(p.name for p in (source / "src").iterdir() if p.is_dir()):
        if area not in closure or area == "cli":
            continue
        for path in sorted([*(source / "src" / area).rglob("*.[ch]pp"), *(source / "include" / "joule" / area).rglob("*.hpp")]):
            for match in _INCLUDE.finditer(path.read_text(encoding="utf-8", errors="replace")):
                needed = match.group(1)
                if needed not in closure[area]:
                    line = path.read_text(encoding="utf-8", errors="replace").count("\n", 0, match.start()) + 1
                    problems.append(f"{path.relative_to(source)}:{line}: the area `{area}` includes `{needed}`, which "
                                    f"its row of docs/architecture.md does not allow (allowed: "
                                    f"{', '.join(sorted(closure[area] - {area})) or 'nothing'})")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", type=Path, default=Path(__file__).resolve().parents[2])
    source = parser.parse_args().source_dir.resolve()

    problems = long_functions(source) + machinery_classes(source) + wrong_includes(source)
    entry, total = entry_share(source)
    share = entry / total if total else 0.0
    print(f"entry points: {entry} of {total} code lines ({share:.1%}; at most {MAX_ENTRY_SHARE:.0%})")
    if share > MAX_ENTRY_SHARE:
        problems.append(f"the entry points hold {share:.1%} of the non-test code (at most {MAX_ENTRY_SHARE:.0%}): "
                        "move machinery from src/cli, python/src and python/joule into the library")
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
