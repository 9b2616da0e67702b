"""DeployedModel.predict takes what a script holds: a StructureBatch, ase.Atoms or an
iterable of them (their calculators never called); anything else is named."""

from __future__ import annotations

import numpy as np
import pytest
from _deploy_models import hco_acsf, structures, write_model_dir
from ase.calculators.calculator import Calculator as AseCalculator

from dparallel.deploy import load_deployed
from dparallel.errors import ArgumentTypeError
from dparallel.train.export import export_model
from dparallel.types import StructureBatch


class _Refusing(AseCalculator):
    """A calculator that must not be asked (predict needs no labels)."""

    implemented_properties = ["energy", "forces"]  # noqa: RUF012

    def calculate(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        raise AssertionError("predict asked the atoms' own calculator")


@pytest.fixture(scope="module")
def model(tmp_path_factory):  # noqa: ANN001, ANN201
    path = write_model_dir(tmp_path_factory.mktemp("model"), hco_acsf())
    export_model(path, artifacts=False)
    return load_deployed(path)


def test_atoms_lists_and_generators_give_the_batchs_results(model) -> None:  # noqa: ANN001
    frames = list(structures().values())
    # the reference: the batch built field by field, without from_ase
    batch = StructureBatch(
        numbers=np.concatenate([a.numbers for a in frames]).astype(np.int64),
        positions=np.concatenate([a.positions for a in frames]),
        cells=np.stack([a.cell.array for a in frames]),
        pbc=np.stack([a.pbc for a in frames]),
        energy=np.full(len(frames), np.nan),
        forces=np.full((sum(len(a) for a in frames), 3), np.nan),
        offsets=np.cumsum([0, *(len(a) for a in frames)]),
    )
    expected = model.predict(batch, stress=True)
    for a in frames:
        a.calc = _Refusing()
    for given in (frames, (a for a in frames), tuple(frames)):
        found = model.predict(given, stress=True)
        assert found.keys() == expected.keys()
        for key in expected:
            np.testing.assert_array_equal(found[key], expected[key])
    one = model.predict(frames[0])
    np.testing.assert_array_equal(one["energy"], expected["energy"][:1])


@pytest.mark.parametrize("given", [5, "data.extxyz", [object()]])
def test_anything_else_is_named(model, given) -> None:  # noqa: ANN001
    with pytest.raises(ArgumentTypeError, match=r"^from_ase: .*(not an ase\.Atoms)"):
        model.predict(given)
