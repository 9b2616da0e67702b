"""What every backend switch asks the same way: whether numba imports here (one probe,
tried once per process) and the error for a backend name a switch does not know.

The neighbor-sum switch (:mod:`dparallel.kernels.neighbor_sums`), the ACSF switch
(``descriptors/_acsf_backends.py``) and the neighbour list's all-pairs path all ask
:func:`numba_import_error`, so they agree on whether numba can run: a numba that is
installed but fails to import (say a numpy it was not built for) turns every compiled
route off at once instead of one switch falling back and another raising the ImportError
(docs/kernels.md, "When numba does not import"). The descriptor registry's compiled route
asks :func:`numba_expected`: that answer once probed, before it whether numba is
installed, so a driver that only plans a run imports no numba.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import TYPE_CHECKING

from dparallel.errors import BackendUnavailableError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["numba_available", "numba_import_error", "numba_unavailable", "unknown_backend"]

logger = logging.getLogger(__name__)

#: ``"numba"`` → ``None`` (it imports) or why it does not (``"ImportError: …"``); filled on
#: the first question, so every caller gets the one answer (tests may set it).
PROBED: dict[str, str | None] = {}


def numba_import_error() -> str | None:
    """``None`` when ``import numba`` works here, else the failure as ``"Type: message"``
    (tried once per process; the failure is logged once)."""
    if "numba" not in PROBED:
        try:
            import numba  # noqa: F401
        except Exception as exc:  # noqa: BLE001 - a broken install raises more than ImportError
            PROBED["numba"] = f"{type(exc).__name__}: {exc}"
            logger.warning(
                "numba cannot be imported (%s): the compiled kernels are off (ACSF backend "
                "'auto' computes with 'torch', neighbor sums with 'chunked', neighbour lists "
                "with vesin alone); reinstall numba (pip install --force-reinstall numba) "
                "to get them back",
                PROBED["numba"],
            )
        else:
            PROBED["numba"] = None
    return PROBED["numba"]


def numba_available() -> bool:
    """Whether numba imports here (:func:`numba_import_error` is ``None``)."""
    return numba_import_error() is None


def numba_expected() -> bool:
    """Whether numba is expected to import: the probe's answer once it was asked, before
    that whether numba is installed, without importing it (a driver planning a run or
    choosing a route pays no numba import; a broken install is found by the probe)."""
    if "numba" in PROBED:
        return PROBED["numba"] is None
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # a None in sys.modules, a broken parent
        return False


def numba_unavailable(what: str, instead: str) -> BackendUnavailableError:
    """The error for ``what`` (e.g. ``"ACSF backend 'numba'"``) asked for while numba does
    not import; ``instead`` names what to use."""
    return BackendUnavailableError(
        f"{what} needs numba, which cannot be imported here ({numba_import_error()}); "
        f"reinstall numba (pip install --force-reinstall numba) or use {instead}"
    )


def unknown_backend(
    what: str, name: object, valid: Iterable[str], source: str
) -> BackendUnavailableError:
    """The error for a backend name that the ``what`` switch (``"kernel"``, ``"ACSF"`` …)
    does not know, given by ``source``; it lists the ``valid`` names."""
    return BackendUnavailableError(
        f"unknown {what} backend {name!r} (from {source}); "
        f"expected one of {', '.join(repr(b) for b in valid)}"
    )
