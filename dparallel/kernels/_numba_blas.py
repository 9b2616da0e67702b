"""numba's BLAS check at first use, without importing ``scipy.linalg``.

When numba first uses its CPU target (a kernel loaded from the cache or compiled), it
imports ``numba.np.arraymath``, which asks once whether a BLAS is there
(``ensure_blas``: ``import scipy.linalg.cython_blas``, then the Fortran integer width
check). Importing ``scipy.linalg.cython_blas`` imports all of ``scipy.linalg`` (~0.2 s of
CPU, numpy.f2py and numpy.testing included), on the path to the first featurize worker
(the warm forkserver) and in every spawned worker, though no dparallel kernel calls
BLAS (no ``np.dot``, ``@`` or ``np.linalg`` in compiled code). The answer only selects
how ``np.correlate``/``np.convolve`` compile. :func:`defer_blas_check` gives that one
question the same answer from the extension's file and the same width check; every other
``ensure_blas`` (compiling ``np.dot``, ``np.linalg``) still imports it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

__all__ = ["defer_blas_check"]

#: The module whose import-time BLAS question is answered from the file.
_ASKER = "numba.np.arraymath"


def defer_blas_check() -> None:
    """Make numba's import-time BLAS check find ``scipy.linalg.cython_blas`` without
    importing it (idempotent; nothing once numba's CPU target has been used)."""
    from numba.np import linalg

    if _ASKER in sys.modules or getattr(linalg.ensure_blas, "deferred", False):
        return
    full = linalg.ensure_blas

    def ensure_blas() -> None:
        width_check = getattr(linalg, "_check_lapack_int_width", None)  # numba's internal
        asker = sys._getframe(1).f_globals.get("__name__")
        if asker != _ASKER or "scipy.linalg" in sys.modules or width_check is None:
            full()  # numba's own check (also where its internals moved: the import's cost)
            return
        if not cython_blas_present():
            raise ImportError("scipy 0.16+ is required for linear algebra")  # numba's words
        width_check()

    ensure_blas.deferred = True  # type: ignore[attr-defined]
    linalg.ensure_blas = ensure_blas


def cython_blas_present() -> bool:
    """Whether ``scipy.linalg.cython_blas`` is installed (found, not imported)."""
    try:
        spec = importlib.util.find_spec("scipy")
    except (ImportError, ValueError):
        return False
    places = spec.submodule_search_locations if spec is not None else None
    if not places:
        return False
    linalg_dirs = [str(Path(place) / "linalg") for place in places]
    return importlib.machinery.PathFinder.find_spec("cython_blas", linalg_dirs) is not None
