"""Features constant over a whole dataset are warned of when featurize ends, naming the
element and the functions: the functions n2p2's nnp-scaling finds constant ("min equals
max") on the same data, and those a neighbour list shows no atom pair for."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from ase.build import bulk

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "n2p2"))
from n2p2_helpers import alloy_input_nn

from dparallel.descriptors import ACSF, NeighborSum
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.n2p2 import acsf_from_input_nn, write_input_data
from dparallel.n2p2.binaries import find_bin_dir, run_tool, stage
from dparallel.workflow.featurize import featurize_in_process


def _cells(seed: int = 0) -> list:
    """Three Cu cells of 7.2 Å with one Au each (Au-Au at 7.2 Å, beyond every cutoff) and
    one with a single Ag atom (every Ag function constant: one atom)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(4):
        atoms = bulk("Cu", "fcc", a=3.6, cubic=True).repeat((2, 2, 2))
        atoms[int(rng.integers(len(atoms)))].symbol = "Ag" if k == 3 else "Au"
        atoms.rattle(0.1, seed=k)
        out.append(atoms)
    return out


def _warned(
    path: Path, descriptors: DescriptorSet, tmp_path: Path, kind: str = "acsf"
) -> dict[str, set[int]]:
    """Element → feature columns the featurize warning names (none: {})."""
    with pytest.warns(UserWarning, match="features constant over the whole dataset") as got:
        featurize_in_process(path, tmp_path / "s.zarr", descriptors)
    (text,) = [str(w.message) for w in got if "constant" in str(w.message)]
    assert text.startswith(f"{tmp_path / 's.zarr'}: {kind}: ")
    found = re.findall(r"element (\w+) \(\d+ atoms?\): \d+ of \d+ features \(([^)]*)\)", text)
    return {e: {int(k) for k in re.findall(r"(\d+): type", listed)} for e, listed in found}


@pytest.mark.skipif(find_bin_dir() is None, reason="n2p2 is not built (../shared/n2p2)")
def test_the_functions_named_are_those_n2p2_finds_constant(tmp_path: Path) -> None:
    (tmp_path / "input.nn").write_text(alloy_input_nn())
    write_input_data(tmp_path / "input.data", _cells())
    acsf = acsf_from_input_nn(tmp_path / "input.nn", order="n2p2")  # n2p2's columns
    ours = _warned(tmp_path / "input.data", DescriptorSet(acsf=acsf), tmp_path)
    n2p2 = tmp_path / "n2p2"
    stage(n2p2, {"input.nn": tmp_path / "input.nn", "input.data": tmp_path / "input.data"})
    log = run_tool("nnp-scaling", n2p2, ["1"])
    theirs: dict[str, set[int]] = {}
    for e, k in re.findall(r"min equals max.*?Element (\w+) SF\s+(\d+)", log):
        theirs.setdefault(e, set()).add(int(k))
    assert theirs and ours == theirs


@pytest.mark.parametrize("kind", ["acsf", "neighbor_sum"])
def test_pairs_never_within_the_cutoff_are_named_and_varying_ones_not(
    kind: str, tmp_path: Path
) -> None:
    import ase.io
    from ase.neighborlist import neighbor_list

    cells = [c for c in _cells() if "Au" in c.get_chemical_symbols()]
    r_cut = 5.0
    for atoms in cells:  # the reference: no Au has an Au neighbour within r_cut
        i, j = neighbor_list("ij", atoms, r_cut)
        au = np.array(atoms.get_chemical_symbols()) == "Au"
        assert not (au[i] & au[j]).any() and (au[i] & ~au[j]).any()
    ase.io.write(tmp_path / "cells.extxyz", cells)
    if kind == "acsf":
        descriptor = ACSF.uniform(["Cu", "Au"], r_cut=r_cut, radial=[(0.05, 0.0)], narrow=[])
    else:
        descriptor = NeighborSum(["Cu", "Au"], r_cut=r_cut, n_sensitivities=3)
    warned = _warned(tmp_path / "cells.extxyz", DescriptorSet({kind: descriptor}), tmp_path, kind)
    au_au = [
        k
        for k, f in enumerate(descriptor.features("Au"))
        if f.get("neighbors", [f.get("neighbor")]) == ["Au"]
    ]
    assert au_au and warned == {"Au": set(au_au)}


def test_constant_neighbor_sums_are_told_to_raise_r_min() -> None:
    """Neighbor sums' constant features come with their own fix (a larger r_min: the
    default 0.8 Å centres sensitivities closer than any Cu pair), ACSF's without it."""
    from dparallel.descriptors.feature_ranges import constant_features

    low, high = np.zeros(4), np.array([0.0, 0.0, 1.0, 2.0])  # two columns constant
    ranges = {"Cu": SimpleNamespace(count=32, minimum=low, maximum=high)}
    sums = NeighborSum(["Cu"], r_cut=5.0, n_sensitivities=4)
    text = constant_features("neighbor_sum", ranges, sums)
    assert text is not None and "0: type neighbor_sum Cu-Cu nu 0" in text
    assert "a larger r_min" in text
    radial = [(eta, 0.0) for eta in (0.01, 0.02, 0.05, 0.1)]
    acsf = ACSF.uniform(["Cu"], r_cut=5.0, radial=radial, narrow=[])
    text = constant_features("acsf", ranges, acsf)
    assert text is not None and "r_min" not in text
