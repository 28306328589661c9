# SPDX-License-Identifier: Apache-2.0
"""The layout test's own rules (layout_test.py) on tiny sources: what it counts as a function and its length,
a thread or a library interface in an entry point, and an include the table of areas does not allow.

Run by CTest as docs.selftest; by hand: /usr/bin/python3 -m pytest -q tests/docs/test_layout_test.py
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import layout_test  # noqa: E402


def body(lines: int) -> str:
    return "\n".join(f"  x += {i};" for i in range(lines))


def test_a_function_counts_from_its_opening_to_its_closing_brace() -> None:
    source = "namespace a {\nint f(int x) {\n" + body(5) + "\n  return x;\n}\n}  // namespace a\n"
    [function] = layout_test.cpp_functions(source)
    assert (function.name, function.first_line, function.lines) == ("f", 2, 8)


def test_lambdas_blocks_and_braces_in_strings_stay_inside_their_function() -> None:
    source = (
        "struct S {\n"
        "  void m() const noexcept {\n"
        "    auto g = [&](int y) { if (y) { return; } };\n"
        '    const char* s = "}}}{";\n'
        '    auto raw = R"({"a": {"b": 1}})";\n'
        "    long n = 1'000'000; char c = '}';\n"
        "    for (;;) { break; }\n"
        "  }\n"
        "};\n"
        "auto h() -> int { return 1; }\n"
    )
    functions = layout_test.cpp_functions(source)
    assert [(f.name, f.lines) for f in functions] == [("m", 7), ("h", 1)]


def test_long_python_and_cpp_functions_of_entry_points_are_named(tmp_path: pathlib.Path) -> None:
    (tmp_path / "src" / "cli").mkdir(parents=True)
    (tmp_path / "src" / "core").mkdir(parents=True)
    (tmp_path / "python" / "joule").mkdir(parents=True)
    (tmp_path / "src" / "cli" / "run.cpp").write_text("void run() {\n" + body(101) + "\n}\n")
    (tmp_path / "src" / "core" / "lib.cpp").write_text("void lib() {\n" + body(200) + "\n}\n")
    (tmp_path / "python" / "joule" / "m.py").write_text("def f():\n" + "    x = 1\n" * 99 + "\ndef g():\n    pass\n")
    problems = layout_test.long_functions(tmp_path)
    assert problems == ["src/cli/run.cpp:1: run is 103 lines (an entry point's functions are at most 100: move its "
                        "machinery into the library area that owns it, or split it)"]


def test_threads_and_library_interfaces_in_entry_points(tmp_path: pathlib.Path) -> None:
    (tmp_path / "include" / "joule" / "device").mkdir(parents=True)
    (tmp_path / "include" / "joule" / "device" / "gpu.hpp").write_text("class Gpu {};\nclass Clock {};\n")
    (tmp_path / "python" / "src").mkdir(parents=True)
    (tmp_path / "python" / "src" / "a.cpp").write_text(
        "class Replica final : public device::Gpu {\n int x;\n};\n"
        "class Forward : public Clock {\n double now() { return py::cast<double>(f()); }\n};\n"
        "class Local : public std::exception {};\n"
        "struct Pool {\n  std::vector<std::thread> threads_;\n  unsigned n = std::thread::hardware_concurrency();\n};\n")
    problems = layout_test.machinery_classes(tmp_path)
    assert problems == [
        "python/src/a.cpp:9: an entry point owns a thread (threads are machinery: they belong in the library)",
        "python/src/a.cpp:1: Replica implements a library interface (public device::Gpu) in an entry point: it "
        "belongs in the library",
    ]


def test_an_include_the_table_does_not_allow_and_a_cycle(tmp_path: pathlib.Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(
        "| area | owns | depends on |\n|---|---|---|\n| `core` | x | fmt |\n| `device` | x | core |\n"
        "| `measure` | x | device |\n| `carbon` | x | measure, http |\n| `cli` | x | everything |\n")
    for area in ("core", "device", "measure", "carbon", "cli"):
        (tmp_path / "src" / area).mkdir(parents=True)
    (tmp_path / "src" / "measure" / "m.cpp").write_text('#include "joule/core/error.hpp"\n#include "joule/carbon/x.hpp"\n')
    (tmp_path / "src" / "carbon" / "c.cpp").write_text('#include "joule/core/error.hpp"\n')
    (tmp_path / "src" / "cli" / "c.cpp").write_text('#include "joule/carbon/x.hpp"\n')
    assert layout_test.wrong_includes(tmp_path) == [
        "src/measure/m.cpp:2: the area `measure` includes `carbon`, which its row of docs/architecture.md does not "
        "allow (allowed: core, device)"]
    table = {"a": {"b"}, "b": {"a"}}
    assert layout_test.allowed_areas(table)[1] == [
        "docs/architecture.md: the area `a` depends on itself through its table (a cycle)",
        "docs/architecture.md: the area `b` depends on itself through its table (a cycle)"]
