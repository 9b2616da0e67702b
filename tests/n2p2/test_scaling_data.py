"""scaling.data: dparallel's rows equal n2p2's nnp-scaling rows (order, values, units)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
from n2p2_helpers import assert_same, energy_offsets, nnp_dataset, nnp_scaling, random_weights

from dparallel.deploy import DeployedModel
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.errors import InputFormatError
from dparallel.io import open_source
from dparallel.n2p2 import (
    acsf_from_input_nn,
    format_scaling_data,
    load_potential,
    read_input_nn,
    read_scaling_data,
)
from dparallel.workflow.descriptors_spec import load_descriptors
from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process, write_scaling_data

if TYPE_CHECKING:
    from pathlib import Path

    from dparallel.descriptors import ACSF

#: Functions n2p2 accepts that need care: ζ < 1, negative integer ζ, λ ≠ ±1 (1 + λ cos θ
#: ≤ 0 happens: the term is dropped, also for integer ζ), η < 0 ...
EXTREMES = """\
symfunction_short H 3 O H 0.01 0.5 0.5 12.0
symfunction_short H 3 O H 0.01 2.0 2 12.0
symfunction_short O 3 H H 0.02 -3.0 3 12.0
symfunction_short O 3 H H 0.01 0.5 -2 12.0
symfunction_short H 9 O O 0.005 -2.5 2.5 12.0
symfunction_short O 2 H -0.002 1.5 12.0
"""
#: ... and ζ = 0: n2p2's values are right, its forces NaN (its groups divide by ζ).
ZETA_ZERO = "symfunction_short O 9 H H 0.01 1.0 0 12.0 0.5\n"


def _stats(acsf: ACSF, path: Path, units: str) -> dict[str, np.ndarray]:
    """(F, 4) [min, max, mean, sigma] per element of ``acsf`` on a file, in n2p2's order."""
    batch = open_source(path, "n2p2", units=units).read(0, None)
    out = acsf.compute(batch)
    tables = {}
    for e in acsf.elements:
        v = out[e].values.numpy()[:, acsf.n2p2_order(e)]
        tables[e] = np.stack([v.min(0), v.max(0), v.mean(0), v.std(0, ddof=1)], 1)
    return tables


def _assert_rows(ours: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    for e in ref:
        np.testing.assert_allclose(ours[e][:, :3], ref[e][:, :3], rtol=1e-11, err_msg=e)
        np.testing.assert_allclose(ours[e][:, 3], ref[e][:, 3], rtol=1e-9, err_msg=e)


def _structures(path: Path, n: int) -> list[str]:
    """The first ``n`` structures of an n2p2 input.data, as text blocks."""
    blocks, current = [], []
    for line in path.read_text().splitlines(keepends=True):
        current.append(line)
        if line.split()[:1] == ["end"]:
            blocks.append("".join(current))
            current = []
    return blocks[:n]


def _counts(acsf: ACSF) -> dict[str, int]:
    return {e: acsf.n_features(e) for e in acsf.elements}


@pytest.mark.integration
def test_featurize_writes_n2p2s_scaling_data(n2p2_bin: Path, water: Path, tmp_path: Path) -> None:
    """featurize (dataset in Bohr/Hartree, input.nn in the dataset's units) → scaling.data
    equal to nnp-scaling's, row for row; a 'given'-order store is permuted on writing."""
    ref_path = nnp_scaling(tmp_path / "n2p2", water / "input.nn", water / "input.data")
    (tmp_path / "desc.yaml").write_text(f"acsf: {{n2p2: {water / 'input.nn'}}}\n")
    descriptors = load_descriptors(tmp_path / "desc.yaml", data_units="bohr-hartree")
    assert descriptors.acsf is not None and descriptors.acsf.order == "n2p2"
    ref = read_scaling_data(ref_path, _counts(descriptors.acsf))
    for order in ("n2p2", "given"):
        acsf = acsf_from_input_nn(str(water / "input.nn"), unit="bohr-hartree", order=order)
        store = featurize_in_process(
            water / "input.data",
            tmp_path / f"{order}.zarr",
            DescriptorSet(acsf=acsf),
            FeaturizeOptions(units="bohr-hartree", partition_atoms=2000),
        )
        assert store.attrs["config"]["features"]["acsf"]["order"] == order
        write_scaling_data(store, tmp_path / f"{order}.scaling.data")
        _assert_rows(read_scaling_data(tmp_path / f"{order}.scaling.data", _counts(acsf)), ref)


@pytest.mark.integration
def test_units_rule_of_the_descriptors_yaml(n2p2_bin: Path, water: Path, tmp_path: Path) -> None:
    """The input.nn follows the dataset's units unless `units:` says otherwise."""
    ref = read_scaling_data(
        nnp_scaling(tmp_path, water / "input.nn", water / "input.data"),
        read_input_nn(water / "input.nn").n_symmetry_functions,
    )
    data = water / "input.data"
    (tmp_path / "follow.yaml").write_text(f"acsf: {{n2p2: {water / 'input.nn'}}}\n")
    follow = load_descriptors(tmp_path / "follow.yaml", data_units="bohr-hartree").acsf
    _assert_rows(_stats(follow, data, "bohr-hartree"), ref)
    (tmp_path / "bohr.yaml").write_text(
        f"acsf: {{n2p2: {water / 'input.nn'}, units: bohr-hartree}}\n"
    )
    explicit = load_descriptors(tmp_path / "bohr.yaml", data_units="ase").acsf
    assert explicit == follow
    (tmp_path / "ase.yaml").write_text(f"acsf: {{n2p2: {water / 'input.nn'}, units: ase}}\n")
    wrong = load_descriptors(tmp_path / "ase.yaml", data_units="bohr-hartree").acsf
    one = open_source(data, "n2p2", units="bohr-hartree").read(0, 1)
    g_wrong, g_right = wrong.compute(one)["O"].values, follow.compute(one)["O"].values
    assert not np.allclose(g_wrong, g_right, rtol=1e-3)  # rc = 12 Å instead of 12 bohr


@pytest.mark.integration
def test_angular_semantics_equal_n2p2s(n2p2_bin: Path, water: Path, tmp_path: Path) -> None:
    """ζ < 1, ζ ≤ 0, λ ≠ ±1, η < 0: values as n2p2 computes them (both backends), and
    forces too (but for ζ = 0, where n2p2's are NaN; finite differences: test_acsf_derivatives)."""
    text = (water / "input.nn").read_text() + EXTREMES
    (tmp_path / "extremes.nn").write_text(text + ZETA_ZERO)
    ref_path = nnp_scaling(tmp_path / "n2p2", tmp_path / "extremes.nn", water / "input.data")
    acsf = acsf_from_input_nn(str(tmp_path / "extremes.nn"))
    ref = read_scaling_data(ref_path, _counts(acsf))
    _assert_rows(_stats(acsf, water / "input.data", "ase"), ref)
    batch = open_source(water / "input.data", "n2p2").read(0, 4)
    a, b = acsf.compute(batch, backend="torch"), acsf.compute(batch, backend="numba")
    for e in acsf.elements:
        np.testing.assert_allclose(a[e].values, b[e].values, rtol=1e-12)
    # and their derivatives: forces of a potential on these functions equal nnp-dataset's
    d = tmp_path / "forces"
    (tmp_path / "finite.nn").write_text(text)
    nnp_scaling(d, tmp_path / "finite.nn", water / "input.data")
    (d / "input.data").write_text("".join(_structures(water / "input.data", 3)))
    random_weights(d, seed=4)
    ref_e, ref_f = nnp_dataset(d)
    pot_acsf, model = load_potential(d)
    three = open_source(d / "input.data", "n2p2").read(0, None)
    out = DeployedModel(pot_acsf, model).predict(three)
    assert_same(
        out["energy"],
        out["forces"],
        ref_e,
        ref_f,
        energy_offsets(read_input_nn(d / "input.nn"), three),
    )


def test_format_and_read_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tables = [rng.normal(size=(3, 4)), rng.normal(size=(2, 4))]
    (tmp_path / "s.data").write_text(format_scaling_data(tables))
    back = read_scaling_data(tmp_path / "s.data", {"H": 3, "O": 2})
    np.testing.assert_array_equal(back["H"], tables[0])  # 17 digits: the same doubles
    np.testing.assert_array_equal(back["O"], tables[1])
    with pytest.raises(InputFormatError, match=r"5 scaling rows, but .* need 6"):
        read_scaling_data(tmp_path / "s.data", {"H": 3, "O": 3})
    with pytest.raises(InputFormatError, match="line 9: row for element 2, function 1 where"):
        read_scaling_data(tmp_path / "s.data", {"H": 4, "O": 1})


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cli_featurize_units_bohr_hartree(n2p2_bin: Path, water: Path, tmp_path: Path) -> None:
    """`dparallel featurize input.data --units bohr-hartree --descriptors {n2p2: input.nn}
    --scaling-data`: positions and input.nn lengths converted alike → n2p2's scaling.data."""
    import os
    import subprocess
    import sys

    ref_path = nnp_scaling(tmp_path / "n2p2", water / "input.nn", water / "input.data")
    (tmp_path / "d.yaml").write_text(f"acsf: {{n2p2: {water / 'input.nn'}}}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    subprocess.run(
        [sys.executable, "-m", "dparallel", "featurize", str(water / "input.data"),
         "-o", str(tmp_path / "s.zarr"), "--descriptors", str(tmp_path / "d.yaml"),
         "--units", "bohr-hartree", "--scaling-data", str(tmp_path / "scaling.data"),
         "--local", "1", "--quiet"],
        env=env, capture_output=True, text=True, timeout=240, check=True,
    )  # fmt: skip
    counts = read_input_nn(water / "input.nn").n_symmetry_functions
    _assert_rows(
        read_scaling_data(tmp_path / "scaling.data", counts), read_scaling_data(ref_path, counts)
    )


@pytest.mark.integration
def test_an_element_without_atoms_keeps_its_rows_as_nnp_scaling_writes_them(
    n2p2_bin: Path, tmp_path: Path
) -> None:
    """Data without Ag, an input.nn of Cu, Ag and Au: nnp-scaling writes Ag's rows (±DBL_MAX,
    NaN) between Cu's and Au's, and so does featurize; without them Au's rows took Ag's
    element index, and the file paired with no input.nn."""
    from ase.calculators.emt import EMT
    from n2p2_helpers import alloy_input_nn, alloy_structures

    from dparallel.n2p2 import write_input_data

    structures = alloy_structures(4)
    for atoms in structures:
        atoms.set_chemical_symbols(["Cu" if s == "Ag" else s for s in atoms.symbols])
        atoms.calc = EMT()
    (tmp_path / "input.nn").write_text(alloy_input_nn())
    write_input_data(tmp_path / "input.data", structures)
    ref_path = nnp_scaling(tmp_path / "n2p2", tmp_path / "input.nn", tmp_path / "input.data")
    acsf = acsf_from_input_nn(str(tmp_path / "input.nn"))
    with pytest.warns(UserWarning, match="no atom of Ag"):
        store = featurize_in_process(
            tmp_path / "input.data", tmp_path / "s.zarr", DescriptorSet(acsf=acsf),
            FeaturizeOptions(format="n2p2"),
        )  # fmt: skip
    write_scaling_data(store, tmp_path / "scaling.data")

    def table(path: Path) -> np.ndarray:
        rows = [line.split() for line in path.read_text().splitlines() if line[:1] != "#"]
        return np.array([[float(x) for x in row] for row in rows])

    ours, theirs = table(tmp_path / "scaling.data"), table(ref_path)
    np.testing.assert_array_equal(ours[:, :2], theirs[:, :2])  # element and function indices
    np.testing.assert_allclose(ours[:, 2:], theirs[:, 2:], rtol=1e-9, equal_nan=True)
    assert np.isnan(ours[ours[:, 0] == 2, 4:]).all()  # Ag: no mean, no sigma
