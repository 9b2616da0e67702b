"""numba-compile a plain-Python kernel when numba is installed (``None`` otherwise)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["njit_or_none"]


def njit_or_none(kernel: Callable[..., Any]) -> Any:
    """``kernel`` compiled with numba (cached on disk, no GIL, numpy error model), or
    ``None`` when numba is not installed (the caller falls back or refuses)."""
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a runtime dependency
        return None
    import dparallel.kernels._numba_jit  # noqa: F401 - keys the disk cache of this directory

    return numba.njit(cache=True, error_model="numpy", nogil=True)(kernel)
