"""What every ACSF backend shares: the backend choice (:class:`Backend`), what an element
kernel is asked for (:class:`KernelCall`) and the column bookkeeping of one central element
(:class:`ElementPlan`), built once from the feature metadata (docs/acsf.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from dparallel.kernels.acsf_plan import build_kernel_plan, key_index, pair_table

if TYPE_CHECKING:
    from dparallel.kernels.acsf_numba import KernelPlan

__all__ = ["Backend", "ElementPlan", "KernelCall", "build_plan"]


@dataclass(frozen=True)
class Backend:
    """Which kernel computes ACSF, and its options.

    ``name``: ``"torch"`` (vectorised, differentiable reference), ``"numba"`` (compiled
    triplet loop), ``"triton"`` (the GPU kernel, or on CPU under ``TRITON_INTERPRET=1``) or
    ``"auto"`` (numba when it imports and no gradient is needed, else torch).
    ``max_triplets``: torch only, triplets per block (memory bound, docs/acsf.md).
    ``float32_terms``: numba only, per-triplet terms in float32 (twice the vector width;
    sums stay float64, about 1e-7 relative error). ``device``: triton only, where the
    kernel runs (default: ``_acsf_backends.triton_device()``).
    """

    name: str = "auto"
    max_triplets: int = 131072
    float32_terms: bool = False
    device: str | None = None

    @staticmethod
    def of(backend: str | Backend) -> Backend:
        """``backend`` as a :class:`Backend` (a name takes the default options)."""
        return backend if isinstance(backend, Backend) else Backend(str(backend))


class KernelCall(NamedTuple):
    """What an element kernel is asked for, besides the plan and the pairs."""

    derivatives: bool
    dtype: Any = None  # output numpy type (numpy kernels); None: the vectors' dtype
    derivative_dtype: Any = None  # of dG/dr; None: ``dtype``
    split: bool = False  # dG/dr as SplitDerivatives (the store's layout)
    backend: Backend = Backend()


@dataclass
class ElementPlan:
    """Column bookkeeping for one central element (built once from feature metadata)."""

    n_features: int
    r_max: float
    n_el: int = 1  # number of elements (neighbour element indices are below it)
    # radial columns: unique (eta, rs, rc, kind, alpha)
    rad_keys: list[tuple[float, float, float, int, float]] = field(default_factory=list)
    # angular radial-part keys, narrow first: (narrow, eta, rs, rc, kind, alpha)
    e_keys: list[tuple[bool, float, float, float, int, float]] = field(default_factory=list)
    n_narrow_keys: int = 0
    z_keys: list[tuple[float, float]] = field(default_factory=list)  # (zeta, lambda)
    ang_cols: list[tuple[int, int]] = field(default_factory=list)  # (e_key, z_key) per column
    outer: bool = False  # ang_cols is the full e-major product e_keys × z_keys
    # value source index: features gathered from cat([rad (n_el*K_r), ang (n_pt*K_a)])
    value_source: list[int] = field(default_factory=list)
    # derivative groups per neighbour element f: (feature positions, source columns)
    # source columns index cat([rad (K_r), ang slots (n_el*K_a)])
    deriv_groups: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)
    kernel: KernelPlan | None = None  # tables of the compiled (numba) kernel


def build_plan(features: list[dict], elements: list[str]) -> ElementPlan:
    """Column bookkeeping for a list of feature dicts of one central element."""
    n_el = len(elements)
    index = {e: n for n, e in enumerate(elements)}
    pt_of = pair_table(n_el)
    rad_keys: list = []
    e_keys_n: list = []
    e_keys_w: list = []
    z_keys: list = []
    rad_of: list = []
    ang_raw: list = []
    for f in features:
        cut = (float(f["rc"]), int(f["cutoff_id"]), float(f["alpha"]))
        if f["type"] == 2:
            key = (float(f["eta"]), float(f["rs"]), *cut)
            rad_of.append((index[f["neighbors"][0]], key_index(rad_keys, key)))
            ang_raw.append(None)
        else:
            narrow = f["type"] == 3
            ek = (narrow, float(f["eta"]), float(f["rs"]), *cut)
            key_index(e_keys_n if narrow else e_keys_w, ek)
            zk = (float(f["zeta"]), float(f["lambda"]))
            key_index(z_keys, zk)
            a, b = index[f["neighbors"][0]], index[f["neighbors"][1]]
            rad_of.append(None)
            ang_raw.append((a, b, ek, zk))
    e_keys = e_keys_n + e_keys_w
    ang_cols: list = []
    for item in ang_raw:
        if item is not None:
            key_index(ang_cols, (e_keys.index(item[2]), z_keys.index(item[3])))
    outer = len(e_keys) * len(z_keys) <= 2 * len(ang_cols)
    if outer:  # every (radial part, angular part) combination, e-major: no column gathers
        ang_cols = [(a, b) for a in range(len(e_keys)) for b in range(len(z_keys))]
    k_r, k_a = len(rad_keys), len(ang_cols)
    value_source: list[int] = []
    # per neighbour element: (feature positions, source columns), in feature order as built
    groups: dict[int, tuple[list[int], list[int]]] = {g: ([], []) for g in range(n_el)}
    for pos, (rad, ang) in enumerate(zip(rad_of, ang_raw, strict=True)):
        if rad is not None:
            fe, kcol = rad
            value_source.append(fe * k_r + kcol)
            groups[fe][0].append(pos)
            groups[fe][1].append(kcol)
        else:
            a, b, ek, zk = ang
            column = ang_cols.index((e_keys.index(ek), z_keys.index(zk)))
            value_source.append(n_el * k_r + int(pt_of[a, b]) * k_a + column)
            # pair with neighbour a sees partner b in slot b, and vice versa
            for me, partner in ((a, b), (b, a)) if a != b else ((a, b),):
                groups[me][0].append(pos)
                groups[me][1].append(k_r + partner * k_a + column)
    r_max = max([float(f["rc"]) for f in features], default=0.0)
    return ElementPlan(
        n_features=len(features),
        r_max=r_max,
        n_el=n_el,
        rad_keys=rad_keys,
        e_keys=e_keys,
        n_narrow_keys=len(e_keys_n),
        z_keys=z_keys,
        ang_cols=ang_cols,
        outer=outer,
        value_source=value_source,
        deriv_groups={g: v for g, v in groups.items() if v[0]},
        kernel=build_kernel_plan(features, elements),
    )
