"""Every error of ``dparallel.errors`` reaches the client from a Dask task as itself."""

from __future__ import annotations

import inspect

import pytest

import dparallel.errors as errors

#: Constructor arguments of the errors that take more than a message.
_ARGS: dict[type, tuple[object, ...]] = {errors.UnknownElementError: (3, "unknown element X")}
_CLASSES = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, BaseException) and cls.__module__ == errors.__name__
]


@pytest.mark.parametrize("cls", _CLASSES, ids=lambda cls: cls.__name__)
def test_each_error_survives_dasks_exception_transport(cls: type[BaseException]) -> None:
    """Dask sends a task's exception through tblib, which rebuilds it with
    ``cls.__new__(cls, *args)``: SourceNotFoundError (ValueError and FileNotFoundError)
    came back as a bare ``Exception("SourceNotFoundError(...)")``."""
    from distributed.core import error_message
    from distributed.protocol import pickle

    args = _ARGS.get(cls, ("input file not found: /data/x.extxyz",))
    try:
        raise cls(*args)
    except BaseException as exc:  # noqa: BLE001 - each class of the module in turn
        message = error_message(exc)
        sent = exc
    back = pickle.loads(message["exception"].data)
    assert type(back) is cls
    assert str(back) == str(sent)
