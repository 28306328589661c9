# SPDX-License-Identifier: Apache-2.0
"""C++ joule::Exception → the joule.Error subclass of its code, with the same message."""

from __future__ import annotations

import pytest

import joule
from joule import _joule

EXPECTED = {
    "invalid-argument": (joule.InvalidArgumentError, ValueError),
    "not-found": (joule.NotFoundError, LookupError),
    "out-of-range": (joule.OutOfRangeError, ValueError),
    "not-supported": (joule.NotSupportedError, joule.Error),
    "permission-denied": (joule.PermissionDeniedError, PermissionError),
    "library-missing": (joule.LibraryMissingError, joule.Error),
    "parse": (joule.ParseError, ValueError),
    "io": (joule.IoError, OSError),
    "state": (joule.StateError, RuntimeError),
    "device": (joule.DeviceError, joule.Error),
    "internal": (joule.InternalError, joule.Error),
}


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_every_code_maps_to_its_class_with_the_same_message(code: str) -> None:
    cls, builtin = EXPECTED[code]
    message = f"the {code} message: GPU 0 (ünïcode)"
    with pytest.raises(cls) as caught:
        _joule._raise_error(code, message)
    assert str(caught.value) == message
    assert caught.value.code == code
    assert isinstance(caught.value, joule.Error)
    assert isinstance(caught.value, builtin)


def test_classes_are_exported_from_joule() -> None:
    assert joule.NotFoundError.__module__ == "joule"
    assert issubclass(joule.TrainFailError, joule.Error)


def test_a_real_cpp_error_keeps_its_message(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    monitor.begin_window("a")
    with pytest.raises(joule.StateError) as caught:
        monitor.begin_window("a")
    assert str(caught.value) == "window 'a' is already open; end or cancel it first"
    with pytest.raises(joule.NotFoundError) as missing:
        monitor.end_window("b")
    assert str(missing.value) == "no open window named 'b' (open: a)"


def test_unknown_gpu_index(sim: joule.DeviceSet) -> None:
    with pytest.raises(joule.NotFoundError) as caught:
        joule.Monitor(gpus=[3], devices=sim)
    assert str(caught.value) == "Monitor(gpus=...): unknown GPU index 3: 1 GPU is visible (indices 0 to 0)"
    with pytest.raises(joule.NotFoundError) as caught:
        joule.PowerSampler(gpus=3, devices=sim)
    assert str(caught.value) == "PowerSampler(gpus=...): unknown GPU index 3: 1 GPU is visible (indices 0 to 0)"
