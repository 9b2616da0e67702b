"""The Python entry points of featurize and ingest name an argument of the wrong type
(a descriptors file's path, a mapping of options, ase.Atoms for the structure file)
instead of failing inside with ``AttributeError: 'str' object has no attribute
'to_dict'`` or ``expected str, bytes or os.PathLike object, not list``; nothing is
written."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.errors import ArgumentTypeError
from dparallel.workflow.featurize import (
    FeaturizeOptions,
    featurize,
    featurize_in_process,
    featurize_status,
    prepare_featurize,
)
from dparallel.workflow.ingest import ingest

if TYPE_CHECKING:
    from pathlib import Path

DESCRIPTORS = DescriptorSet(acsf=ACSF.uniform(["H"], r_cut=4.0, radial=[(0.1, 0.0)], narrow=[]))


@pytest.mark.parametrize("call", [featurize, featurize_in_process, featurize_status,
                                  prepare_featurize])  # fmt: skip
def test_featurize_names_a_descriptors_path_and_an_options_mapping(tmp_path: Path, call) -> None:  # noqa: ANN001
    data = tmp_path / "h.xyz"
    data.write_text("1\nenergy=0.5\nH 0 0 0\n")
    store = tmp_path / "s.zarr"
    with pytest.raises(ArgumentTypeError) as refused:
        call(data, store, "descriptors.yaml")
    assert str(refused.value) == (
        f"{call.__name__}: descriptors is a str, not a DescriptorSet (a descriptors file: "
        "dparallel.workflow.descriptors_spec.load_descriptors(path))"
    )
    with pytest.raises(ArgumentTypeError) as refused:
        call(data, store, DESCRIPTORS, {"partition_atoms": 10})
    assert str(refused.value) == (
        f"{call.__name__}: options is a dict, not a FeaturizeOptions (FeaturizeOptions(**...))"
    )
    assert not store.exists()
    assert isinstance(FeaturizeOptions(), FeaturizeOptions)


def test_ingest_names_an_options_mapping(tmp_path: Path) -> None:
    data = tmp_path / "h.xyz"
    data.write_text("1\nenergy=0.5\nH 0 0 0\n")
    with pytest.raises(ArgumentTypeError) as refused:
        ingest(data, tmp_path / "s.zarr", {"partition_atoms": 10})  # type: ignore[arg-type]
    assert (
        str(refused.value)
        == "ingest: options is a dict, not an IngestOptions (IngestOptions(**...))"
    )
    assert not (tmp_path / "s.zarr").exists()


def _atoms() -> list:
    from ase.build import bulk

    return [bulk("Cu", cubic=True) for _ in range(2)]


@pytest.mark.parametrize("given", ["list", "generator", "atoms"])
@pytest.mark.parametrize("call", [featurize, featurize_in_process, ingest, "train"])
def test_atoms_given_for_a_structure_file_are_named(tmp_path: Path, call, given) -> None:  # noqa: ANN001
    # "TypeError: expected str, bytes or os.PathLike object, not list" before
    frames = _atoms()
    source = {"list": frames, "generator": (a for a in frames), "atoms": frames[0]}[given]
    store = tmp_path / "s.zarr"
    with pytest.raises(ArgumentTypeError) as refused:
        if call == "train":
            from dparallel.train import train

            train(source, tmp_path / "model")
        elif call is ingest:
            ingest(source, store)
        else:
            call(source, store, DESCRIPTORS)
    kind = {"list": "list", "generator": "generator", "atoms": "Atoms"}[given]
    assert str(refused.value).startswith(f"a {kind} was given where data is named: give a path")
    assert "ase.io.write('data.extxyz', frames)" in str(refused.value)
    assert not store.exists() and not (tmp_path / "model").exists()
