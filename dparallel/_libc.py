"""The process's C library through ctypes, loaded once: its own symbols (``CDLL(None)``),
not ``ctypes.util.find_library``, which runs ``ldconfig -p`` in a subprocess."""

from __future__ import annotations

import ctypes
import functools
import platform

__all__ = ["c_library", "glibc"]


@functools.cache
def c_library() -> ctypes.CDLL | None:
    """The C library the process runs on (``syncfs``, ...), or None where none loads."""
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def glibc() -> ctypes.CDLL | None:
    """:func:`c_library` where it is glibc (``mallopt``, ``malloc_trim``), else None."""
    return c_library() if platform.libc_ver()[0] == "glibc" else None
