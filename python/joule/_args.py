# SPDX-License-Identifier: Apache-2.0
"""Argument errors that name the argument: ``ZeusCost(eta=...): expected a number, got str 'high'``.

pybind11 answers a call whose argument it cannot convert with "incompatible function arguments" and every
signature of the function. :func:`install` wraps the native module's functions, constructors and methods so
that such a TypeError names the argument, what it must be and what it got (a wrapper costs about 0.1 µs a
call; the calls made every training step check their arguments in C++ instead, see HOT). The package's Python
classes check their own arguments with :func:`indices`, :func:`number`, :func:`integer` and :func:`flag`.
"""

from __future__ import annotations

import builtins
import datetime
import functools
import os
import re
from collections.abc import Sequence
from typing import Any, Callable, Optional

# Called every training step: they stay unwrapped, so that a window costs what docs/python.md measures; they
# check their own arguments' types in C++ (string_argument() in python/src/bindings.hpp), with the same words.
HOT = {"_Monitor": {"begin_window", "end_window", "cancel_window", "is_open"}}

# pybind11's words when no signature fits: "incompatible function arguments" (or "constructor arguments").
_INCOMPATIBLE = re.compile(r"incompatible (function|constructor) arguments")
_EXCERPT = 40


def show(value: Any) -> str:
    """``str 'a'``, ``int 3``, ``list [1, 'x']``: a value's type and a short repr, for messages."""
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not hide the real error
        text = "<unprintable>"
    if len(text) > _EXCERPT:
        text = text[: _EXCERPT - 1] + "…"
    return f"{type(value).__name__} {text}"


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return not isinstance(value, float) and hasattr(type(value), "__index__")


def indices(call: str, keyword: str, value: Any, what: str = "GPU indices") -> Optional[list[int]]:
    """`value` as a list of indices: None stays None, an int is a list of one, a sequence of ints is a list.
    @raises TypeError "CALL(KEYWORD=...): expected a list of WHAT or an int, got …" for anything else."""
    if value is None:
        return None
    expected = f"a list of {what} or an int"
    if _is_integer(value):
        return [int(value)]
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{call}({keyword}=...): expected {expected}, got {show(value)}")
    result = []
    for position, item in enumerate(value):
        if not _is_integer(item):
            raise TypeError(
                f"{call}({keyword}=...): expected {expected}, got {show(value)} (item {position} is {show(item)})"
            )
        result.append(int(item))
    return result


def number(call: str, keyword: str, value: Any) -> float:
    """`value` as a float (an int, a float, or anything with __float__ but a string or a bool).
    @raises TypeError "CALL(KEYWORD=...): expected a number, got str 'fast'"."""
    if isinstance(value, (str, bytes, bool)) or not (
        isinstance(value, (int, float)) or hasattr(type(value), "__float__")
    ):
        raise TypeError(f"{call}({keyword}=...): expected a number, got {show(value)}")
    return float(value)


def integer(call: str, keyword: str, value: Any) -> int:
    """`value` as an int (not a float, even 2.0: a count is whole). @raises TypeError naming the argument."""
    if not _is_integer(value):
        raise TypeError(f"{call}({keyword}=...): expected an integer, got {show(value)}")
    return int(value)


def flag(call: str, keyword: str, value: Any) -> bool:
    """`value` as a bool (True or False; numpy's bools too). @raises TypeError naming the argument."""
    if not isinstance(value, bool) and type(value).__name__ != "bool_":
        raise TypeError(f"{call}({keyword}=...): expected True or False, got {show(value)}")
    return bool(value)


def text(call: str, keyword: str, value: Any, none: bool = False) -> Optional[str]:
    """`value` as a str (or None if `none`). @raises TypeError naming the argument."""
    if value is None and none:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{call}({keyword}=...): expected a string{' or None' if none else ''}, got {show(value)}")
    return value


def steady_state(call: str, value: Any) -> Any:
    """The type of an optimizer's steady_state (the C++ side checks the mode and the settings' values)."""
    if value is not None and not isinstance(value, (str, dict)):
        raise TypeError(
            f"{call}(steady_state=...): expected None, 'auto', 'off', 'fixed', 'steady' or a dict of its "
            f"settings, got {show(value)}"
        )
    return value


# ---- pybind11 signatures


def _split_top(text: str, separator: str = ",") -> list[str]:
    """Splits at `separator` outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


class _Parameter:
    def __init__(self, text: str) -> None:
        self.kind = "plain"
        if text.startswith("**"):
            self.kind, text = "kwargs", text[2:]
        elif text.startswith("*"):
            self.kind, text = ("args", text[1:]) if len(text) > 1 else ("kwonly-marker", "")
        elif text == "/":
            self.kind = "posonly-marker"
        name_type, has_default, _ = text.partition("=")
        name, _, annotation = name_type.partition(":")
        self.name = name.strip()
        self.annotation = annotation.strip()
        self.has_default = bool(has_default)


def signatures(function: Any) -> list[list[_Parameter]]:
    """The parameter lists of a pybind11 function, from the signatures its docstring begins with."""
    name = getattr(function, "__name__", "")
    doc = getattr(function, "__doc__", None) or ""
    found = []
    for line in doc.splitlines():
        line = re.sub(r"^\d+\. ", "", line.strip())
        if not line.startswith(name + "(") or ") ->" not in line:
            continue
        inner = line[len(name) + 1 : line.rindex(") ->")]
        params = [_Parameter(p) for p in _split_top(inner)]
        if params and params[0].name == "" and params[0].kind == "kwargs":
            continue  # the "(*args, **kwargs)" line above the overloads
        found.append(params)
    return found


def _type_args(annotation: str) -> tuple[str, list[str]]:
    head, bracket, rest = annotation.partition("[")
    if not bracket:
        return annotation.strip(), []
    return head.strip(), _split_top(rest[: rest.rindex("]")])


def _native_class(name: str) -> Optional[type]:
    from . import _joule

    short = name.rsplit(".", 1)[-1]
    found = getattr(_joule, short, None) if name.startswith(("joule.", short)) else None
    return found if isinstance(found, type) else None


def matches(value: Any, annotation: str) -> Optional[bool]:
    """Whether pybind11 could convert `value` to the type it names `annotation` (None: cannot tell)."""
    head, args = _type_args(annotation)
    if head in ("object", "Any", "handle", "") or head.startswith("numpy"):
        return True
    if head == "None":
        return value is None
    if head == "Optional":
        return value is None or matches(value, args[0])
    if head == "Union":
        results = [matches(value, a) for a in args]
        return True if any(results) else (None if None in results else False)
    if head == "int":
        return _is_integer(value)
    if head == "float":
        return isinstance(value, (int, float)) or hasattr(type(value), "__float__") or hasattr(type(value), "__index__")
    if head == "bool":
        return value is None or isinstance(value, (bool, int, float))
    if head == "str":
        return isinstance(value, (str, bytes))
    if head in ("os.PathLike", "PathLike"):
        return isinstance(value, (str, bytes, os.PathLike))
    if head in ("List", "list", "Sequence"):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            return False
        results = [matches(item, args[0]) for item in value] if args else []
        return False if False in results else True
    if head in ("Tuple", "tuple"):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            return False
        if len(args) == 2 and args[1] == "...":
            return all(matches(item, args[0]) is not False for item in value)
        return len(value) == len(args) and all(matches(v, a) is not False for v, a in zip(value, args))
    if head in ("Dict", "dict"):
        if not isinstance(value, dict):
            return False
        if len(args) != 2:
            return True
        return all(matches(k, args[0]) is not False and matches(v, args[1]) is not False for k, v in value.items())
    if head in ("Set", "set"):
        return isinstance(value, (set, frozenset))
    if head == "Callable":
        return value is None or callable(value)
    if head == "datetime.timedelta":
        return isinstance(value, (datetime.timedelta, int, float))
    if head == "datetime.datetime":
        return isinstance(value, datetime.datetime)
    cls = _native_class(head)
    if cls is not None:
        return isinstance(value, cls)
    builtin = getattr(builtins, head, None)
    if isinstance(builtin, type):
        return isinstance(value, builtin)
    return None


_PLURAL = {"int": "integers", "float": "numbers", "str": "strings", "bool": "booleans"}
_SINGULAR = {"int": "an integer", "float": "a number", "str": "a string", "bool": "True or False", "None": "None"}


def describe(annotation: str, plural: bool = False) -> str:
    """Words for a pybind11 type: ``Optional[List[int]]`` → "a list of integers or None"."""
    head, args = _type_args(annotation)
    if head == "Optional":
        return f"{describe(args[0], plural)} or None"
    if head == "Union":
        if all(_native_class(a) for a in args):
            return "one of " + ", ".join(describe(a)[2:] for a in args)  # "one of joule.ZeusCost, …"
        return " or ".join(describe(a, plural) for a in args)
    if head in ("List", "list", "Sequence"):
        return f"{'lists' if plural else 'a list'} of {describe(args[0], True) if args else 'values'}"
    if head in ("Tuple", "tuple"):
        inner = ", ".join(describe(a) for a in args if a != "...")
        return f"{'tuples' if plural else 'a tuple'} ({inner})"
    if head in ("Dict", "dict"):
        if len(args) == 2:
            return f"{'dicts' if plural else 'a dict'} of {describe(args[0], True)} to {describe(args[1], True)}"
        return "dicts" if plural else "a dict"
    if head == "Callable":
        return "callables" if plural else "a callable"
    if head == "datetime.timedelta":
        return "timedeltas or seconds" if plural else "a datetime.timedelta or seconds"
    if plural and head in _PLURAL:
        return _PLURAL[head]
    if not plural and head in _SINGULAR:
        return _SINGULAR[head]
    short = head.rsplit(".", 1)[-1].lstrip("_")
    name = f"joule.{short}" if head.startswith("joule.") or _native_class(head) else head
    return f"{name} objects" if plural else f"a {name}"


def _problems(params: list[_Parameter], call: str, args: tuple, kwargs: dict) -> list[str]:
    """Why this call does not fit this signature (empty: it fits, as far as can be told)."""
    positional = [p for p in params if p.kind == "plain"]
    keyword_only_from = next((i for i, p in enumerate(params) if p.kind in ("kwonly-marker", "args")), len(params))
    accepts_args = any(p.kind == "args" for p in params)
    accepts_kwargs = any(p.kind == "kwargs" for p in params)
    by_position = [p for p in params[:keyword_only_from] if p.kind == "plain"]
    bound: dict[str, Any] = {}
    problems = []
    if len(args) > len(by_position) and not accepts_args:
        shown = len(by_position) - (1 if by_position and by_position[0].name == "self" else 0)
        problems.append(f"{call}() takes {shown} positional argument{'s' if shown != 1 else ''}, got "
                        f"{len(args) - (len(by_position) - shown)}")
    for param, value in zip(by_position, args):
        bound[param.name] = value
    names = {p.name: p for p in positional}
    for key, value in kwargs.items():
        if key not in names:
            if not accepts_kwargs:
                listed = ", ".join(p.name for p in positional if p.name != "self")
                problems.append(f"{call}(): no argument called {key!r} (it takes: {listed})")
            continue
        if key in bound:
            problems.append(f"{call}(): {key} given twice")
        bound[key] = value
    for param in positional:
        if param.name in bound and param.name != "self" and param.annotation:
            if matches(bound[param.name], param.annotation) is False:
                problems.append(f"{call}({param.name}=...): expected {describe(param.annotation)}, "
                                f"got {show(bound[param.name])}")
    for param in positional:
        if param.name not in bound and not param.has_default:
            problems.append(f"{call}(): missing the argument {param.name!r}")
    if not problems:
        # pybind11 writes unsigned C++ integers as "int" too: a negative one is what it refused.
        for param in positional:
            value = bound.get(param.name)
            head, args = _type_args(param.annotation)
            head, args = _type_args(args[0]) if head == "Optional" else (head, args)
            negative = _is_integer(value) and value < 0 if head == "int" else (
                head in ("List", "list") and args == ["int"] and isinstance(value, Sequence)
                and any(_is_integer(item) and item < 0 for item in value)
            )
            if negative:
                what = "a non-negative integer" if head == "int" else "a list of non-negative integers"
                problems.append(f"{call}({param.name}=...): expected {what}, got {show(value)}")
    return problems


def explain(function: Any, call: str, args: tuple, kwargs: dict) -> str:
    """The one-line reason pybind11 refused this call, naming the argument."""
    best: Optional[list[str]] = None
    for params in signatures(function):
        problems = _problems(params, call, args, kwargs)
        if best is None or len(problems) < len(best):
            best = problems
    if best:
        return best[0]
    parts = [show(a) for a in args[1:]] + [f"{k}={show(v)}" for k, v in kwargs.items()]
    first = " ".join((getattr(function, "__doc__", None) or "").split("\n")[0].split())
    return f"{call}(): the arguments ({', '.join(parts)}) do not match {first}"


# Native functions the package's Python functions call under another name.
PUBLIC_NAMES = {"_discover": "devices"}


def _call_name(owner: Optional[str], name: str, args: tuple, static: bool) -> str:
    if owner is None:
        return PUBLIC_NAMES.get(name, name.lstrip("_"))
    # The class the caller used (Monitor, not the native _Monitor it derives from).
    cls = (type(args[0]).__name__ if args and not static else owner).lstrip("_")
    return cls if name == "__init__" else f"{cls}.{name}"


def _wrap(function: Callable, owner: Optional[str], name: str, static: bool = False) -> Callable:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except TypeError as error:
            if not _INCOMPATIBLE.search(str(error)):
                raise
            message = explain(function, _call_name(owner, name, args, static), args, kwargs)
        raise TypeError(message) from None

    wrapper.__joule_native__ = function  # type: ignore[attr-defined]
    return wrapper


def _wrap_method(function: Callable, owner: str, name: str) -> Callable:
    """_wrap() for an instance method. Its code is named as the method, with `self` first: pybind11 calls a
    Python override of a C++ virtual unless the calling frame is that method on the same object
    (RankAggregator.all_ranks: a wrapper under another name would call itself through the trampoline)."""

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return function(self, *args, **kwargs)
        except TypeError as error:
            if not _INCOMPATIBLE.search(str(error)):
                raise
            message = explain(function, _call_name(owner, name, (self, *args), False), (self, *args), kwargs)
        raise TypeError(message) from None

    try:
        wrapper.__code__ = wrapper.__code__.replace(co_name=name, co_qualname=f"{owner}.{name}")
    except TypeError:  # Python < 3.11: no co_qualname
        wrapper.__code__ = wrapper.__code__.replace(co_name=name)
    functools.update_wrapper(wrapper, function)
    wrapper.__joule_native__ = function  # type: ignore[attr-defined]
    return wrapper


def _is_native_function(value: Any) -> bool:
    return type(value).__name__ == "builtin_function_or_method" and bool(signatures(value))


def install(module: Any) -> None:
    """Wraps the native module's functions and its classes' constructors, methods and property setters
    (once: a second call changes nothing)."""
    for name, value in list(vars(module).items()):
        if name.startswith("__"):
            continue
        if _is_native_function(value):
            setattr(module, name, _wrap(value, None, name))
        elif isinstance(value, type) and value.__module__ == module.__name__:
            _install_class(value)


def _install_class(cls: type) -> None:
    hot = HOT.get(cls.__name__, set())
    for name, value in list(vars(cls).items()):
        if name in hot or (name.startswith("__") and name not in ("__init__", "__call__")):
            continue
        if type(value).__name__ == "instancemethod":
            function = value.__func__
            params = signatures(function)
            # A method of self alone has no argument to get wrong.
            if params and all(len([p for p in ps if p.kind == "plain"]) <= 1 and len(ps) <= 1 for ps in params):
                continue
            if params:
                setattr(cls, name, _wrap_method(function, cls.__name__, name))
        elif isinstance(value, staticmethod) and _is_native_function(value.__func__):
            setattr(cls, name, staticmethod(_wrap(value.__func__, cls.__name__, name, static=True)))
        elif type(value) is property and value.fset is not None and signatures(value.fset):
            setattr(cls, name, property(value.fget, _wrap_setter(value.fset, cls.__name__, name), value.fdel,
                                        value.__doc__))


def _wrap_setter(setter: Callable, owner: str, name: str) -> Callable:
    def wrapper(self: Any, value: Any) -> None:
        try:
            setter(self, value)
            return
        except TypeError as error:
            if not _INCOMPATIBLE.search(str(error)):
                raise
            params = signatures(setter)
            annotation = params[0][-1].annotation if params and params[0] else ""
            expected = describe(annotation) if annotation else "another type"
            message = f"{type(self).__name__.lstrip('_')}.{name} = ...: expected {expected}, got {show(value)}"
        raise TypeError(message) from None

    return wrapper
