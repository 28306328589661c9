# SPDX-License-Identifier: Apache-2.0
"""The exceptions joule raises: one class per C++ joule::ErrorCode, all derived from :class:`Error`.

A C++ ``joule::Exception`` becomes the class of its code with the same message. Each class also derives
from the built-in exception a Python programmer would expect (``ValueError`` for invalid arguments,
``LookupError`` for unknown names, ``PermissionError``, ``OSError``, ``RuntimeError`` for state errors), so
``except ValueError`` keeps working.
"""

from __future__ import annotations


class Error(Exception):
    """Base class of every joule error. ``code`` is the C++ ErrorCode's name, e.g. ``'not-found'``."""

    code: str = "error"


class InvalidArgumentError(Error, ValueError):
    """A value that can never be right (a malformed spec, a negative period, an unknown option)."""

    code = "invalid-argument"


class NotFoundError(Error, LookupError):
    """A named thing (device index, window, file, workload) does not exist."""

    code = "not-found"


class OutOfRangeError(Error, ValueError):
    """A well-formed value outside what the device or model accepts (e.g. a power limit)."""

    code = "out-of-range"


class NotSupportedError(Error):
    """The device or backend cannot do this at all."""

    code = "not-supported"


class PermissionDeniedError(Error, PermissionError):
    """The OS or driver refused; the message says how to get the right."""

    code = "permission-denied"


class LibraryMissingError(Error):
    """A vendor library could not be loaded or lacks a needed symbol."""

    code = "library-missing"


class ParseError(Error, ValueError):
    """A file or text could not be parsed; the message names where."""

    code = "parse"


class IoError(Error, OSError):
    """An I/O call failed (including an unreachable server)."""

    code = "io"


class StateError(Error, RuntimeError):
    """The call is not valid in the object's current state (e.g. a window that is already open)."""

    code = "state"


class DeviceError(Error):
    """The device or driver reported an unexpected failure."""

    code = "device"


class InternalError(Error):
    """A bug in joule."""

    code = "internal"


CLASS_BY_CODE: dict[str, type[Error]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        OutOfRangeError,
        NotSupportedError,
        PermissionDeniedError,
        LibraryMissingError,
        ParseError,
        IoError,
        StateError,
        DeviceError,
        InternalError,
    )
}

__all__ = ["Error", "CLASS_BY_CODE"] + [cls.__name__ for cls in CLASS_BY_CODE.values()]

# Shown as joule.NotFoundError etc. (they are exported from the package).
for _cls in (Error, *CLASS_BY_CODE.values()):
    _cls.__module__ = "joule"
del _cls
