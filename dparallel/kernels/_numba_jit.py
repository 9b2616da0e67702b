"""How the ACSF kernel modules compile with numba (one set of options), and the dot
product they share. Each module defines plain-Python helpers and compiles them at its end
when numba is installed (:data:`HAVE_NUMBA`)."""

from __future__ import annotations

try:  # pragma: no cover - exercised when numba is installed
    import numba

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover
    HAVE_NUMBA = False

__all__ = ["CONTRACT", "HAVE_NUMBA", "REASSOC", "jit", "jit_views"]

CONTRACT = {"contract"}  # FMA only: exp/cos range reductions stay exact
REASSOC = {"contract", "reassoc", "nsz", "arcp"}  # reductions may be reordered


def jit(fastmath: set[str], **kw: bool):  # noqa: ANN201
    """njit with cache, numpy error model (no ZeroDivisionError checks: loops vectorise)."""
    return numba.njit(cache=True, error_model="numpy", fastmath=fastmath, **kw)


def jit_views(fastmath: set[str]):  # noqa: ANN201
    """:func:`jit` for helpers that allocate nothing and return no array: compiled
    without the runtime's reference counting (_nrt=False), so the array views they
    take are free instead of an atomic increment and decrement each."""
    return numba.njit(cache=True, error_model="numpy", fastmath=fastmath, _nrt=False)


def _reduce_dot(a, b, n):  # noqa: ANN001, ANN202
    """Σ_q a[q]·b[q] (vectorised: reassociation allowed)."""
    s = 0.0
    for q in range(n):
        s += a[q] * b[q]
    return s


if HAVE_NUMBA:  # pragma: no branch
    _reduce_dot = jit(REASSOC)(_reduce_dot)
