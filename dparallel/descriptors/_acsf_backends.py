"""The ACSF backend switch: one driver, three element kernels (torch, numba, triton).

:class:`Backend` names a backend and its options (as torchani's ``AEVComputer(strategy=…)``),
:func:`resolve_backend` checks that it can run here, and :func:`element_arrays`, the one
route of ``ACSF.compute`` and ``ACSF.compute_arrays``, runs its element kernel per central
element and keys the pair derivative blocks as ``DescriptorResult.to_numpy`` does. An
element kernel takes ``(plan, pairs, n_centers, call)`` and returns values (n_centers, F)
and, with derivatives, ``{f: (pair selector (P_f,), dG/dr)}``: dG/dr (P_f, F_f, 3), or a
:class:`SplitDerivatives` with ``call.split``. The torch kernel is the differentiable
reference.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from dparallel.descriptors._acsf_engine import Backend, KernelCall
from dparallel.errors import BackendUnavailableError, DescriptorError
from dparallel.kernels._backends.availability import (
    numba_available,
    numba_unavailable,
    unknown_backend,
)
from dparallel.kernels._backends.triton_env import interpreting

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from dparallel.descriptors._acsf_engine import ElementPlan
    from dparallel.kernels.acsf_numba import KernelPlan
    from dparallel.kernels.pair_select import ElementPairs

__all__ = [
    "BACKENDS",
    "Backend",
    "KernelCall",
    "SplitDerivatives",
    "check_triton",
    "derivative_groups",
    "element_arrays",
    "element_kernel",
    "numba_available",
    "numba_element",
    "resolve_backend",
    "triton_device",
    "triton_element",
    "triton_runs_on",
]

BACKENDS = ("auto", "torch", "numba", "triton")


class SplitDerivatives(NamedTuple):
    """dG/dr of one neighbour element's pairs in the store's split layout (P pairs)."""

    radial: np.ndarray  # (F,) bool: column is radial, ∂G/∂r_ij = s · r̂_ij
    # (F_r + 3 F_a, P): s of the radial columns, then the other columns' ∂G/∂r_ij as
    # x, y, z rows per column (one array, as the store keeps it)
    dG_dr_split: Any


# ------------------------------------------------------------------ availability
# numba_available: the one probe every switch asks (kernels/_backends/availability.py);
# it imports numba, so a numba that is installed but broken makes "auto" torch here too.


def check_triton() -> None:
    """Raise :class:`BackendUnavailableError` unless the Triton backend can run here."""
    if importlib.util.find_spec("triton") is None:
        raise BackendUnavailableError("backend='triton' needs triton (pip install triton)")
    import torch

    if not torch.cuda.is_available() and not interpreting():
        raise BackendUnavailableError(
            "backend='triton' needs a CUDA device, or TRITON_INTERPRET=1 (set before triton "
            "is imported) to run the kernel on CPU in Triton's interpreter"
        )


def triton_runs_on(device: str) -> bool:
    """Whether the Triton kernel can run on ``device`` here (CUDA, or CPU when interpreted)."""
    try:
        check_triton()
    except BackendUnavailableError:
        return False
    import torch

    return torch.device(device).type == triton_device().type


def triton_device() -> torch.device:
    """Where the kernel runs: the CPU under the interpreter, else the current CUDA device."""
    import torch

    return torch.device("cpu") if interpreting() else torch.device("cuda")


def resolve_backend(backend: str | Backend, needs_grad: bool = False) -> Backend:
    """``backend`` with ``"auto"`` decided (numba when it imports and no gradient is
    needed, else torch); raises :class:`BackendUnavailableError` for an unknown name or
    one that cannot run here, :class:`DescriptorError` if a gradient is needed and it is
    not torch."""
    chosen = Backend.of(backend)
    name = chosen.name
    if name not in BACKENDS:
        raise unknown_backend("ACSF", name, BACKENDS, "backend= argument")
    if name == "auto":
        name = "numba" if not needs_grad and numba_available() else "torch"
        return replace(chosen, name=name)
    if name == "numba" and not numba_available():
        raise numba_unavailable("ACSF backend 'numba'", "backend='torch' or 'auto'")
    if name == "triton":
        check_triton()
    if needs_grad and name != "torch":
        raise DescriptorError(
            f"backend={name!r} is not differentiable; use backend='torch' with "
            "positions that require grad"
        )
    return chosen


def element_kernel(call: KernelCall) -> Callable[..., tuple[Any, dict[int, Any] | None]]:
    """The element kernel of ``call``'s resolved backend."""
    if call.backend.name == "torch":
        from dparallel.descriptors._acsf_torch import torch_element

        return torch_element
    return numba_element if call.backend.name == "numba" else triton_element


# ------------------------------------------------------------------ the driver
class BatchPairs(NamedTuple):
    """A batch's pair list as the driver takes it."""

    el_index: np.ndarray  # (N,) int64 element index of each atom
    pair_first: np.ndarray  # (P,) int64
    pair_second: np.ndarray  # (P,) int64
    vectors: np.ndarray  # (P, 3) r_ij, the selection's (and numpy kernels') copy
    distances: np.ndarray  # (P,)
    tensors: tuple[Any, Any] | None = None  # torch (vectors, distances): the torch route


def element_arrays(
    elements: list[str],
    plans: dict[str, ElementPlan],
    pairs: BatchPairs,
    call: KernelCall,
) -> dict[str, dict[str, Any]]:
    """Per central element, ``values``, ``atom_index`` and, with derivatives, every neighbour
    element F's ``<F>/…`` arrays (``to_numpy``'s, or ``<F>/radial`` and ``<F>/dG_dr_split``
    when split): numpy, or torch tensors when ``pairs.tensors`` is given."""
    from dparallel.kernels.pair_select import ElementPairs, element_pairs

    n_el = len(elements)
    el_index = pairs.el_index
    element_atoms = [np.flatnonzero(el_index == e_idx) for e_idx in range(n_el)]
    local = np.full(el_index.shape[0], -1, dtype=np.int64)  # (N,) row within its element
    for atoms in element_atoms:
        local[atoms] = np.arange(atoms.shape[0])
    as_array: Callable[[np.ndarray], Any] = lambda a: a  # noqa: E731
    if pairs.tensors is not None:
        import torch

        as_array = torch.from_numpy
    kernel = element_kernel(call)
    out: dict[str, dict[str, Any]] = {}
    for e_idx, e in enumerate(elements):
        plan = plans[e]
        atoms = element_atoms[e_idx]  # (n_e,) sorted
        sel = element_pairs(
            el_index, local, pairs.pair_first, pairs.pair_second, pairs.vectors,
            pairs.distances, e_idx, plan.r_max,
        )  # fmt: skip  # (P_e,) pairs of centre element e in its cutoff
        if pairs.tensors is not None:
            rows = as_array(sel.rows)
            sel = ElementPairs(
                rows, as_array(sel.center), as_array(sel.neighbor_el),
                pairs.tensors[0][rows], pairs.tensors[1][rows],
            )  # fmt: skip
        values, groups = kernel(plan, sel, atoms.shape[0], call)
        arrays = {"values": values, "atom_index": as_array(atoms)}
        if call.derivatives:
            assert groups is not None
            arrays |= _derivative_arrays(elements, plan, pairs, sel, groups, call, as_array)
        out[e] = arrays
    return out


def _derivative_arrays(
    elements: list[str],
    plan: ElementPlan,
    pairs: BatchPairs,
    sel: ElementPairs,
    groups: dict[int, tuple[Any, Any]],
    call: KernelCall,
    as_array: Callable[[np.ndarray], Any],
) -> dict[str, Any]:
    """The ``<F>/…`` arrays of one central element (every neighbour element F)."""
    pair_first, pair_second = as_array(pairs.pair_first), as_array(pairs.pair_second)
    arrays: dict[str, Any] = {}
    for f_idx, f in enumerate(elements):
        if f_idx in groups:
            pick, dg = groups[f_idx]
        else:  # no feature of this element sees an f neighbour: no columns
            pick, dg = _no_columns(sel, f_idx, call)
        rows = sel.rows[pick]
        feat_pos = plan.deriv_groups.get(f_idx, ([], []))[0]
        arrays |= {
            f"{f}/pair_first": pair_first[rows],
            f"{f}/pair_second": pair_second[rows],
            f"{f}/center": sel.center[pick],
            f"{f}/vectors": sel.vectors[pick],
            f"{f}/feature_index": as_array(np.asarray(feat_pos, dtype=np.int64)),
        }
        if call.split:
            arrays |= {f"{f}/{name}": a for name, a in dg._asdict().items()}
        else:
            arrays[f"{f}/dG_dr"] = dg
    return arrays


def _no_columns(sel: ElementPairs, f_idx: int, call: KernelCall) -> tuple[Any, Any]:
    """Selector and dG/dr (P_f, 0, 3) (split: (0,), (0, P_f)) of f pairs without columns."""
    if not isinstance(sel.vectors, np.ndarray):  # torch
        pick = (sel.neighbor_el == f_idx).nonzero().squeeze(1)
        return pick, sel.vectors.new_zeros((int(pick.shape[0]), 0, 3))
    pick = np.flatnonzero(sel.neighbor_el == f_idx)
    dg = np.zeros((pick.shape[0], 0, 3), dtype=call.derivative_dtype or sel.vectors.dtype)
    if call.split:
        return pick, SplitDerivatives(np.zeros(0, bool), dg[:, :, 0].T)
    return pick, dg


# ------------------------------------------------------------------ numba
def numba_element(
    plan: ElementPlan, pairs: ElementPairs, n_centers: int, call: KernelCall
) -> tuple[np.ndarray, dict[int, tuple[np.ndarray, Any]] | None]:
    """The compiled kernel on numpy arrays (pairs sorted by centre, in the plan's cutoff).

    Sums in float64 (triplet terms in float32 with ``call.backend.float32_terms``), rounded
    once to ``call.dtype`` (default the vectors') and dG/dr to ``call.derivative_dtype``.
    """
    from dparallel.kernels.acsf_numba import acsf_element, no_network, no_split, split_layout

    kplan = plan.kernel
    assert kplan is not None
    n_el, derivatives = plan.n_el, call.derivatives
    dtype = call.dtype or pairs.vectors.dtype.type
    vec = np.ascontiguousarray(pairs.vectors, dtype=np.float64)  # (P_e, 3)
    dist = np.ascontiguousarray(pairs.distances, dtype=np.float64)  # (P_e,)
    nbr = pairs.neighbor_el.astype(np.int64, copy=False)
    seg = np.zeros(n_centers + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs.center, minlength=n_centers), out=seg[1:])
    values: np.ndarray = np.zeros((n_centers, plan.n_features), dtype=dtype)
    grp_row = np.zeros(nbr.shape[0], dtype=np.int64)
    d_base = np.zeros(n_el, dtype=np.int64)
    n_pairs = np.zeros(n_el, dtype=np.int64)
    sels: dict[int, np.ndarray] = {}
    if derivatives:
        for f in range(n_el):
            if kplan.dsrc_off[f + 1] == kplan.dsrc_off[f]:
                continue
            sel = np.flatnonzero(nbr == f) if n_el > 1 else np.arange(nbr.shape[0])
            grp_row[sel] = np.arange(sel.shape[0])
            sels[f] = sel
            n_pairs[f] = sel.shape[0]
    layout = split_layout(kplan, n_pairs) if call.split and derivatives else no_split()
    total = 0
    n_rows: dict[int, int] = {}  # numbers per pair of each block: F_r + 3 F_a (3 F unsplit)
    for f in sels:
        width = int(kplan.dsrc_off[f + 1] - kplan.dsrc_off[f])
        n_radial = int(layout.n_radial[f]) if layout.on else 0
        n_rows[f] = n_radial + 3 * (width - n_radial)
        d_base[f] = total
        total += n_pairs[f] * n_rows[f]
    dflat: np.ndarray = np.empty(total, dtype=call.derivative_dtype or dtype)
    work = np.empty(0, dtype=np.float32 if call.backend.float32_terms else np.float64)
    acsf_element(
        kplan, vec, dist, seg, nbr, grp_row, d_base, values, dflat, derivatives, work,
        no_network(), layout,
    )  # fmt: skip
    if not derivatives:
        return values, None
    groups = derivative_groups(
        kplan, sels, (d_base, n_rows, dflat), layout.on,
        lambda sel, block, radial: block.reshape(sel.shape[0], radial.shape[0], 3),
    )  # fmt: skip
    return values, groups


def derivative_groups(
    kplan: KernelPlan,
    selections: dict[int, Any],
    blocks: tuple[np.ndarray, Any, Any],
    split: bool,
    unsplit: Callable[[Any, Any, np.ndarray], Any],
) -> dict[int, tuple[Any, Any]]:
    """``{f: (sel, dG/dr)}`` from a kernel's flat output (numpy or torch).

    ``blocks`` = (d_base, n_rows, dflat): neighbour element f's block, (n_rows[f], P_f) at
    ``d_base[f]``, is viewed without a copy: a :class:`SplitDerivatives` with ``split``,
    else ``unsplit(sel, block, radial columns (F_f,) bool)``.
    """
    from dparallel.kernels.acsf_layout import radial_columns

    d_base, n_rows, dflat = blocks
    radial = radial_columns(kplan)  # (Σ F_f,)
    groups: dict[int, tuple[Any, Any]] = {}
    for f, sel in selections.items():
        lo, hi = int(kplan.dsrc_off[f]), int(kplan.dsrc_off[f + 1])
        n_p, base, rows = int(sel.shape[0]), int(d_base[f]), int(n_rows[f])
        block = dflat[base : base + rows * n_p].reshape(rows, n_p)  # no copy
        if split:
            groups[f] = (sel, SplitDerivatives(radial[lo:hi], block))
        else:
            groups[f] = (sel, unsplit(sel, block, radial[lo:hi]))
    return groups


# ------------------------------------------------------------------ triton
def triton_element(
    plan: ElementPlan, pairs: ElementPairs, n_centers: int, call: KernelCall
) -> tuple[Any, dict[int, tuple[Any, Any]] | None]:
    """The Triton kernel on ``call.backend.device`` (default :func:`triton_device`).

    Numpy pairs give numpy results (in ``call.dtype``, dG/dr in ``call.derivative_dtype``),
    tensors give tensors on their device. Computed in float64 and rounded once.
    """
    import torch

    from dparallel.kernels._backends.triton_acsf import triton_acsf_element

    if call.backend.float32_terms:
        raise DescriptorError("the Triton kernel computes its terms in float64 only")
    kplan = plan.kernel
    assert kplan is not None
    numpy_in = isinstance(pairs.vectors, np.ndarray)
    home = torch.device("cpu") if numpy_in else pairs.vectors.device
    dev = torch.device(call.backend.device) if call.backend.device else triton_device()
    vec, dist, cen, nbr = (
        torch.as_tensor(np.ascontiguousarray(a) if numpy_in else a.detach()).to(dev)
        for a in (pairs.vectors, pairs.distances, pairs.center, pairs.neighbor_el)
    )
    dtype = _torch_dtype(call.dtype) or vec.dtype
    out = triton_acsf_element(
        kplan, vec, dist, cen, nbr, n_centers, plan.n_el, call.derivatives, dtype,
        _torch_dtype(call.derivative_dtype),
    )  # fmt: skip
    back = (lambda t: t.cpu().numpy()) if numpy_in else (lambda t: t.to(home))
    if not call.derivatives:
        return back(out.values), None
    assert out.dflat is not None

    def pair_major(sel: torch.Tensor, block: torch.Tensor, radial: np.ndarray) -> torch.Tensor:
        unit = vec.index_select(0, sel) / dist.index_select(0, sel)[:, None]
        return _pair_major(block, radial, unit.to(block.dtype))

    groups = derivative_groups(
        kplan, out.selections, (out.d_base, out.n_rows, out.dflat), call.split, pair_major
    )
    moved = {
        f: (back(sel), SplitDerivatives(np.asarray(dg.radial), back(dg.dG_dr_split)))
        if call.split
        else (back(sel), back(dg))
        for f, (sel, dg) in groups.items()
    }
    return back(out.values), moved


def _torch_dtype(dtype: Any) -> torch.dtype | None:
    """The torch dtype of a numpy type (None stays None)."""
    import torch

    return None if dtype is None else getattr(torch, np.dtype(dtype).name)


def _pair_major(block: torch.Tensor, radial: np.ndarray, unit: torch.Tensor) -> torch.Tensor:
    """(P, F, 3) dG/dr in feature order from a split block (F_r + 3 F_a, P)."""
    import torch

    n_rad = int(radial.sum())
    n_p = block.shape[1]
    rad = block[:n_rad].T.unsqueeze(2) * unit.unsqueeze(1)  # (P, F_r, 3): s · r̂
    ang = block[n_rad:].T.reshape(n_p, radial.shape[0] - n_rad, 3)  # (P, F_a, 3)
    both = torch.cat([rad, ang], 1)
    where = np.where(radial, np.cumsum(radial) - 1, n_rad + np.cumsum(~radial) - 1)
    return both.index_select(1, torch.as_tensor(where, device=block.device))
