"""The compiled ACSF kernel's argument types: its numeric tables (:class:`KernelPlan`),
the network and force outputs of a fused call (:class:`NetworkForces`), and the store's
split dG/dr layout (:class:`SplitLayout`), with their builders. numpy only: no numba."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "KernelPlan",
    "NetworkForces",
    "SplitLayout",
    "no_network",
    "no_split",
    "radial_columns",
    "split_layout",
]


class KernelPlan(NamedTuple):
    """Numeric tables of one central element's functions (built by the engine's plan).

    Slots: for a neighbour of element f, the derivative accumulators of the angular
    functions of element pair (f, g) seen with partners of element g start at
    ``s_off[f, g]`` (one per column of that pair, in column order).
    """

    pt: np.ndarray  # (n_el, n_el) int64 unordered element-pair index
    cut_rc: np.ndarray  # (C,) distinct cutoffs: rc, n2p2 type, inner α
    cut_kind: np.ndarray  # (C,) int64
    cut_alpha: np.ndarray  # (C,)
    rk_off: np.ndarray  # (n_el + 1,) radial keys of neighbour element f: [rk_off[f], rk_off[f+1])
    rk_eta: np.ndarray  # (K_r,)
    rk_rs: np.ndarray  # (K_r,)
    rk_cut: np.ndarray  # (K_r,) int64 cutoff id
    ek_eta: np.ndarray  # (E,) radial parts of angular functions
    ek_rs: np.ndarray  # (E,)
    ek_cut: np.ndarray  # (E,) int64 cutoff id
    ek_narrow: np.ndarray  # (E,) int64: 1 = type 3 (has the r_jk factor)
    zk_zeta: np.ndarray  # (Z,) angular parts (ζ, λ)
    zk_lam: np.ndarray  # (Z,)
    zk_int: np.ndarray  # (Z,) int64 ζ when ζ is an integer
    zk_isint: np.ndarray  # (Z,) int64 0/1
    p_col_off: np.ndarray  # (n_pt + 1,) columns of element pair p
    col_e: np.ndarray  # (K,) int64 radial part of each column
    col_z: np.ndarray  # (K,) int64 angular part
    col_scale: np.ndarray  # (K,) 2^(1-ζ)
    # triplet tables indexed by pair p + mode·n_pt; mode 1 leaves out separable columns
    p_e_off: np.ndarray  # (2 n_pt + 1,) radial parts used by the triplet columns
    p_e_list: np.ndarray  # int64
    p_z_off: np.ndarray  # (2 n_pt + 1,) angular parts used by the triplet columns
    p_z_list: np.ndarray  # int64
    p_c_off: np.ndarray  # (2 n_pt + 1,) cutoffs of the narrow triplet columns
    p_c_list: np.ndarray  # int64
    p_rc2: np.ndarray  # (2 n_pt,) reject triplets with r_jk² ≥ this (inf with wide columns)
    p_rmax: np.ndarray  # (2 n_pt,) neighbours at r ≥ this take no part in triplets
    p_tcol_off: np.ndarray  # (2 n_pt + 1,) columns evaluated over triplets
    p_tcol: np.ndarray  # int64
    p_scol_off: np.ndarray  # (n_pt + 1,) separable columns of pair p (O(n) per centre)
    p_scol: np.ndarray  # int64
    p_ab: np.ndarray  # (n_pt, 2) int64 elements (a ≤ b) of pair p
    e_sep: np.ndarray  # (E,) int64 row of a radial part in the tensor sums T, or -1
    mono_parent: np.ndarray  # (M,) int64 monomial μ = parent · u[axis], μ ≤ max separable ζ
    mono_axis: np.ndarray  # (M,) int64
    mono_up: np.ndarray  # (M, 3) int64 index of μ + e_α, -1 beyond the degree
    mono_power: np.ndarray  # (M, 3) int64 exponents of μ
    z_sep: np.ndarray  # (Z, M) C(ζ, |μ|) λ^|μ| |μ|!/μ! (separable angular parts)
    z_sep_self: np.ndarray  # (Z,) (1 + λ)^ζ, weight of the j = k terms
    sep_min_neighbors: int  # centres with fewer neighbours use mode 0 (all over triplets)
    s_off: np.ndarray  # (n_el, n_el) int64 accumulator slots, see class doc
    vsrc: np.ndarray  # (F,) int64 value column ← radial key (< K_r) or K_r + column
    dsrc_off: np.ndarray  # (n_el + 1,) derivative columns of neighbour element f
    dsrc: np.ndarray  # (Σ F_f,) int64 radial key (< K_r) or K_r + slot
    dscale: np.ndarray  # (Σ F_f,) factor of each derivative column
    dfeat: np.ndarray  # (Σ F_f,) int64 feature column of each derivative column


class NetworkForces(NamedTuple):
    """The atomic network of the central element and where energies, forces and virial go.

    With ``on`` the kernel leaves out pairs beyond ``r_max``, evaluates the network on
    each centre's descriptors as soon as they are complete, and contracts ∂E/∂G_i with
    that centre's derivative terms into forces and virial at once: no ∂G/∂r output
    (``dflat`` may be empty), one scatter per triplet instead of one per column.
    Network: per layer ``layers[l] = (kind, n_in, n_out, offset into params)``, kind
    0 = linear (weights W (n_out, n_in) row-major, then the bias),
    1 = divide by ``params[off]``,
    2 = tanh; input (G - shift)·factor + consts[0], energy out·consts[1] + consts[2].
    """

    on: bool
    layers: np.ndarray  # (L, 4) int64
    params: np.ndarray  # float64
    shift: np.ndarray  # (F,)
    factor: np.ndarray  # (F,)
    consts: np.ndarray  # (3,) input offset, energy scale, reference energy
    width: int  # widest layer
    r_max: float  # pairs at r ≥ r_max are left out (the list may hold more, e.g. a skin)
    first: np.ndarray  # (P,) int64 global row of each pair's centre i
    second: np.ndarray  # (P,) int64 global row of each pair's neighbour j
    structure: np.ndarray  # (N,) int64 structure of each atom (virial)
    grad: np.ndarray  # (N, 3) float64 ∂E/∂r, accumulated (eV/Å)
    virial: np.ndarray  # (S, 3, 3) float64 accumulated (eV), or (0, 3, 3) to skip
    energies: np.ndarray  # (n_e,) float64 out: atomic energies (eV)


class SplitLayout(NamedTuple):
    """Where the kernel writes dG/dr when ``on``: per neighbour element f a block at
    ``d_base[f]`` of ``n_radial[f]`` radial columns as one number per pair, s = ∂G/∂r_ij · r̂_ij
    ((n_radial[f], n_pairs[f]), feature-major), then the other columns as 3-vectors
    ((n_f − n_radial[f], 3, n_pairs[f])): the store's layout (docs/store-format.md), so a
    featurize task writes the kernel's output as it is. Off: (n_pairs[f], n_f, 3) pair-major.
    ``column[c]`` is derivative column c's index among its block's radial or other columns.
    Radial columns are those of radial (type 2) functions, whose derivative is s · r̂_ij."""

    on: bool
    n_pairs: np.ndarray  # (n_el,) int64 pairs of each neighbour element's block
    n_radial: np.ndarray  # (n_el,) int64 radial columns of each block
    column: np.ndarray  # (Σ F_f,) int64 index among the radial or the other columns


def no_network() -> NetworkForces:
    """The ``net`` argument of a kernel call without the fused network (values, dG/dr)."""
    i1 = np.zeros(0, dtype=np.int64)
    f1 = np.zeros(0)
    return NetworkForces(
        False, np.zeros((0, 4), dtype=np.int64), f1, f1, f1, f1, 0, 0.0, i1, i1, i1,
        np.zeros((0, 3)), np.zeros((0, 3, 3)), f1,
    )  # fmt: skip


def no_split() -> SplitLayout:
    """The ``split`` argument of a kernel call with pair-major dG/dr (or none)."""
    i1 = np.zeros(0, dtype=np.int64)
    return SplitLayout(False, i1, i1, i1)


def radial_columns(plan: KernelPlan) -> np.ndarray:
    """(Σ F_f,) bool: which derivative columns are radial (from a radial key; ∂G/∂r_ij = s r̂)."""
    return plan.dsrc < plan.rk_eta.shape[0]


def split_layout(plan: KernelPlan, n_pairs: np.ndarray) -> SplitLayout:
    """:class:`SplitLayout` of ``plan`` for blocks of ``n_pairs`` (n_el,) pairs."""
    radial = radial_columns(plan)  # (Σ F_f,)
    column = np.zeros(radial.shape[0], dtype=np.int64)
    n_radial = np.zeros(n_pairs.shape[0], dtype=np.int64)
    for f in range(n_pairs.shape[0]):
        lo, hi = int(plan.dsrc_off[f]), int(plan.dsrc_off[f + 1])
        r = radial[lo:hi]
        column[lo:hi] = np.where(r, np.cumsum(r) - 1, np.cumsum(~r) - 1)
        n_radial[f] = int(r.sum())
    return SplitLayout(True, n_pairs.astype(np.int64), n_radial, column)
