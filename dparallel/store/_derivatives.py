"""On-disk layout of per-pair descriptor derivatives (store format 3; reads format 2).

float32 derivatives and vectors, int32 pair rows, radial columns as one number per pair
(``s``, rebuilt as ``s · r̂_ij`` on read, within :data:`RADIAL_TOLERANCE`), feature-major,
all columns of a block in one array ``dG_dr_split``; why each, measured:
docs/store-format.md ("Why this layout", "Why few files"). :func:`encode_pairs` and
:func:`decode_pairs` are exact inverses up to the float32 rounding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "BLOCK_ATTRIBUTES",
    "DERIVATIVE_DTYPE",
    "RADIAL_TOLERANCE",
    "decode_pairs",
    "encode_pairs",
]

#: Arrays of an encoded block that the store keeps as its group's attributes (format 3).
BLOCK_ATTRIBUTES = ("feature_index", "radial")
#: Storage dtype of ``dG_dr`` and ``vectors`` (compute dtype is the descriptor set's).
DERIVATIVE_DTYPE = np.dtype(np.float32)
#: A column counts as radial when |∂G/∂r − (∂G/∂r · r̂) r̂| ≤ this · |∂G/∂r| for every pair.
RADIAL_TOLERANCE = 1e-7

_INDEX_ARRAYS = ("pair_first", "pair_second", "center")
#: |∂G/∂r| below which a pair never makes a column angular (1/Å): float32 subnormals
#: carry too few digits for the relative test, and s·r̂ rebuilds them to well within it.
_NEGLIGIBLE2 = 1e-30**2


def _unit(vectors, p):  # noqa: ANN001, ANN202 - compiled
    """r̂ of pair ``p`` in float64 (0 for a zero vector)."""
    x = np.float64(vectors[p, 0])
    y = np.float64(vectors[p, 1])
    z = np.float64(vectors[p, 2])
    r = np.sqrt(x * x + y * y + z * z)
    if r > 0.0:
        return x / r, y / r, z / r
    return 0.0, 0.0, 0.0


def _radial_flags(dG_dr, vectors, tol2, radial):  # noqa: ANN001, ANN202 - compiled
    """Clear ``radial[f]`` (F,) for every column with a pair where |g|² − (g·r̂)² > tol2·|g|²
    (+ a negligible absolute floor).

    |g − (g·r̂) r̂|² = |g|² − (g·r̂)² for a unit r̂: one pass over ``dG_dr`` (P, F, 3).
    """
    for p in range(dG_dr.shape[0]):
        u0, u1, u2 = _unit(vectors, p)
        for f in range(dG_dr.shape[1]):
            if not radial[f]:  # decided (by an earlier pair): nothing more to test
                continue
            # in float64 whatever the input: float32 sums would leave ~1e-4 of residual
            g0 = np.float64(dG_dr[p, f, 0])
            g1 = np.float64(dG_dr[p, f, 1])
            g2 = np.float64(dG_dr[p, f, 2])
            s = g0 * u0 + g1 * u1 + g2 * u2
            n2 = g0 * g0 + g1 * g1 + g2 * g2
            if n2 - s * s > tol2 * n2 + _NEGLIGIBLE2:
                radial[f] = False


def _split(dG_dr, vectors, radial, angular, tol2, s_out, angular_out, still):  # noqa: ANN001, ANN202
    """Fill ``s_out`` (F_r, P) = g·r̂ of the candidate radial columns and ``angular_out``
    (F_a, 3, P); clear ``still[k]`` (F_r,) where candidate k fails the radial test of
    :func:`_radial_flags` at some pair. One pass over ``dG_dr``."""
    for p in range(dG_dr.shape[0]):
        u0, u1, u2 = _unit(vectors, p)
        for k in range(radial.shape[0]):
            f = radial[k]
            g0 = np.float64(dG_dr[p, f, 0])
            g1 = np.float64(dG_dr[p, f, 1])
            g2 = np.float64(dG_dr[p, f, 2])
            s = g0 * u0 + g1 * u1 + g2 * u2
            s_out[k, p] = s
            n2 = g0 * g0 + g1 * g1 + g2 * g2
            if n2 - s * s > tol2 * n2 + _NEGLIGIBLE2:
                still[k] = False
        for k in range(angular.shape[0]):
            f = angular[k]
            for c in range(3):
                angular_out[k, c, p] = dG_dr[p, f, c]


def _unsplit(s, angular_in, vectors, radial, angular, out):  # noqa: ANN001, ANN202 - compiled
    """Fill ``out`` (P, F, 3) float32 from the split layout: radial column ``radial[k]`` is
    ``s[k, p]`` · r̂ (r̂ rounded to float32 first, as :func:`decode_pairs` did with numpy),
    angular column ``angular[k]`` is ``angular_in[k, :, p]``. One pass, pair by pair."""
    for p in range(out.shape[0]):
        u0, u1, u2 = _unit(vectors, p)
        f0, f1, f2 = np.float32(u0), np.float32(u1), np.float32(u2)
        for k in range(radial.shape[0]):
            f = radial[k]
            v = np.float32(s[k, p])
            out[p, f, 0] = v * f0
            out[p, f, 1] = v * f1
            out[p, f, 2] = v * f2
        for k in range(angular.shape[0]):
            f = angular[k]
            for c in range(3):
                out[p, f, c] = angular_in[k, c, p]


def _unsplit_numpy(
    s: np.ndarray,
    angular_in: np.ndarray,
    vectors: np.ndarray,
    radial: np.ndarray,
    angular: np.ndarray,
    out: np.ndarray,
) -> None:
    """:func:`_unsplit` with numpy (the same numbers, bit for bit): slower per byte, but
    it spares a process that decodes little numba's import and first call."""
    v64 = vectors.astype(np.float64)
    x, y, z = v64.T
    dist = np.sqrt(x * x + y * y + z * z)[:, None]  # in _unit's order
    with np.errstate(invalid="ignore", divide="ignore"):  # r̂ = 0 unless r > 0, as _unit
        unit = np.where(dist > 0.0, v64 / dist, 0.0)
    unit = unit.astype(DERIVATIVE_DTYPE)
    if radial.size:
        out[:, radial, :] = s.T[:, :, None] * unit[:, None, :]
    if angular.size:
        out[:, angular, :] = angular_in.transpose(2, 0, 1)


#: A decoded block at least this large is rebuilt by the compiled :func:`_unsplit` (and so is
#: every block after it in the process); smaller ones with numpy. Loading numba and its
#: first call take ~1 s once per process, what numpy's extra time per byte adds up to only
#: over several hundred MB (docs/store-format.md, "Why this layout").
COMPILED_DECODE_BYTES = 64 << 20

#: Pairs whose test decides the candidate radial columns before the one splitting pass
#: (angular columns show themselves at once; a candidate that fails later costs a redo).
_PROBE = 64


_JIT: dict[str, Any] = {}


def _compiled(name: str) -> Any:
    """The numba-compiled (cached on disk) version of ``_radial_flags``, ``_split`` or
    ``_unsplit``."""
    if name not in _JIT:
        import numba

        from dparallel.kernels._numba_jit import cache_anywhere

        cache_anywhere()
        jit = numba.njit(cache=True, nogil=True, error_model="numpy")
        if not isinstance(globals()["_unit"], numba.core.registry.CPUDispatcher):
            globals()["_unit"] = jit(_unit)  # the helper both passes call, compiled first
        _JIT[name] = jit(globals()[name])
    return _JIT[name]


_SPLIT = ("radial", "dG_dr_split")


def encode_pairs(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The stored arrays of one ``d/<F>`` block (see the module docstring).

    ``arrays`` holds ``pair_first, pair_second, center, vectors, feature_index`` and either
    ``dG_dr`` (P, F, 3), whose radial columns are found here, or the split layout already
    (``radial`` and ``dG_dr_split``, as the compiled ACSF kernel writes it with
    ``split_derivatives``), taken as it is.
    Returns ``pairs`` (3, P) int32 = pair_first, pair_second, center; ``vectors_t``
    (3, P) float32; ``dG_dr_split`` (F_r + 3·F_a, P) float32; and the two the store keeps
    as attributes (:data:`BLOCK_ATTRIBUTES`): ``feature_index`` and ``radial`` (F,) bool.
    """
    split = all(name in arrays for name in _SPLIT)
    needed = {*_INDEX_ARRAYS, "vectors", "feature_index", *(() if split else ("dG_dr",))}
    missing = needed - set(arrays)
    if missing:
        raise StoreError(f"per-pair derivative block lacks {', '.join(sorted(missing))}")
    vectors = np.ascontiguousarray(arrays["vectors"])  # (P, 3) Å
    if vectors.dtype not in (np.float32, np.float64):
        vectors = vectors.astype(np.float64)
    # (3, P) int32 filled row by row: no (3, P) int64 stack and its conversion at once
    index = [np.asarray(arrays[name]).reshape(-1) for name in _INDEX_ARRAYS]
    if any(a.size and int(a.max()) >= 2**31 for a in index):
        raise StoreError("pair rows ≥ 2³¹: partitions that large are not supported")
    rows = np.empty((len(index), vectors.shape[0]), np.int32)
    for k, a in enumerate(index):  # three rows
        rows[k] = a
    vectors_t = np.empty((3, vectors.shape[0]), DERIVATIVE_DTYPE)  # (3, P), rounded once
    vectors_t[...] = vectors.T
    feature_index = np.asarray(arrays["feature_index"], np.int64)
    if split:
        flags, columns = _checked_split(arrays, feature_index.shape[0], vectors.shape[0])
    else:
        flags, columns = _split_columns(arrays["dG_dr"], vectors)
    return {
        "pairs": rows,
        "vectors_t": vectors_t,
        "dG_dr_split": columns,
        "feature_index": feature_index,
        "radial": flags,
    }


def _checked_split(
    arrays: Mapping[str, np.ndarray], n_features: int, n_pairs: int
) -> tuple[np.ndarray, np.ndarray]:
    """``radial`` (F,) and ``dG_dr_split`` (F_r + 3 F_a, P) of a block given split, checked
    against each other and cast to the stored dtypes."""
    flags = np.asarray(arrays["radial"], np.bool_)
    columns = np.asarray(arrays["dG_dr_split"], DERIVATIVE_DTYPE)
    n_r = int(flags.sum())
    expected = ((n_features,), (n_r + 3 * (n_features - n_r), n_pairs))
    if (flags.shape, columns.shape) != expected:
        raise StoreError(
            f"split derivative block: radial {flags.shape}, dG_dr_split {columns.shape} "
            f"do not fit {n_features} features and {n_pairs} pairs"
        )
    return flags, columns


def _split_columns(dG_dr: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The radial test on (P, F, 3) ``dG_dr``: flags (F,) and the split (F_r + 3 F_a, P)."""
    dG_dr = np.ascontiguousarray(dG_dr)  # (P, F, 3)
    if dG_dr.dtype not in (np.float32, np.float64):
        dG_dr = dG_dr.astype(np.float64)
    tol2 = RADIAL_TOLERANCE**2
    n_pairs = dG_dr.shape[0]
    flags = np.ones(dG_dr.shape[1], np.bool_)  # (F,) radial until a pair says otherwise
    _compiled("_radial_flags")(dG_dr[:_PROBE], vectors[:_PROBE], tol2, flags)
    while True:  # twice at most: once more if a candidate failed after the probe
        radial = np.flatnonzero(flags).astype(np.int64)
        angular = np.flatnonzero(~flags).astype(np.int64)
        columns = np.empty((radial.size + 3 * angular.size, n_pairs), DERIVATIVE_DTYPE)
        s = columns[: radial.size]  # (F_r, P)
        ang = columns[radial.size :].reshape(angular.size, 3, n_pairs)  # (F_a, 3, P)
        still = np.ones(radial.size, np.bool_)
        _compiled("_split")(dG_dr, vectors, radial, angular, tol2, s, ang, still)
        if still.all():
            return flags, columns
        flags[radial[~still]] = False


def decode_pairs(stored: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inverse of :func:`encode_pairs`: the logical arrays (``dG_dr`` (P, F, 3) float32).

    Also reads format 2 blocks (``dG_dr_radial`` (F_r, P), ``dG_dr_angular`` (F_a, 3, P)).
    """
    try:
        pairs = stored["pairs"]  # (3, P)
        vectors = np.ascontiguousarray(stored["vectors_t"].T)  # (P, 3) float32
        flags = np.asarray(stored["radial"]).astype(bool)
        feature_index = np.asarray(stored["feature_index"], np.int64)
        n_r, n_a, n_pairs = int(flags.sum()), int((~flags).sum()), vectors.shape[0]
        if "dG_dr_split" in stored or "dG_dr_radial" not in stored:  # format 3
            columns = stored["dG_dr_split"]
            s = columns[:n_r]  # (F_r, P)
            ang = columns[n_r:].reshape(n_a, 3, n_pairs)  # (F_a, 3, P)
        else:  # format 2
            s = stored["dG_dr_radial"]
            ang = stored["dG_dr_angular"]
    except (KeyError, ValueError) as exc:
        what = f"lacks {exc.args[0]}" if isinstance(exc, KeyError) else "has a misshapen array"
        raise StoreError(
            f"per-pair derivative block {what}: written by another dparallel version or "
            "damaged; re-featurize the store (dparallel featurize --overwrite)"
        ) from None
    n_features = flags.shape[0]
    shapes = {  # what the compiled pass reads (it checks no bounds)
        "pairs": (3, n_pairs), "vectors_t": (3, n_pairs), "feature_index": (n_features,),
        "radial": (n_r, n_pairs), "angular": (n_a, 3, n_pairs),
    }  # fmt: skip
    found = {
        "pairs": np.shape(pairs), "vectors_t": vectors.T.shape,
        "feature_index": feature_index.shape, "radial": np.shape(s), "angular": np.shape(ang),
    }  # fmt: skip
    if found != shapes:
        raise StoreError(
            f"per-pair derivative block of {n_features} columns ({n_r} radial) and "
            f"{n_pairs} pairs has arrays of shapes {found}, expected {shapes}: written by "
            "another dparallel version or damaged; re-featurize the store (dparallel "
            "featurize --overwrite)"
        )
    radial, angular = np.flatnonzero(flags), np.flatnonzero(~flags)
    dG_dr = np.empty((n_pairs, n_features, 3), DERIVATIVE_DTYPE)
    s, ang = np.asarray(s, DERIVATIVE_DTYPE), np.asarray(ang, DERIVATIVE_DTYPE)
    if "_unsplit" in _JIT or dG_dr.nbytes >= COMPILED_DECODE_BYTES:
        _compiled("_unsplit")(s, ang, vectors, radial, angular, dG_dr)
    else:
        _unsplit_numpy(s, ang, vectors, radial, angular, dG_dr)
    out = {name: pairs[k] for k, name in enumerate(_INDEX_ARRAYS)}
    out.update(vectors=vectors, feature_index=feature_index, dG_dr=dG_dr)
    return out
