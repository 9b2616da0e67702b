"""Reading a descriptors file (``load_descriptors``): a workflow file given in its place."""

from __future__ import annotations

from pathlib import Path

import pytest

from dparallel.errors import ConfigError
from dparallel.workflow.descriptors_spec import load_descriptors

ROOT = Path(__file__).parents[2]


def test_a_workflow_file_given_as_descriptors_is_one_line_naming_workflow() -> None:
    # `featurize --descriptors workflows/quickstart.yaml` listed eight "unknown descriptor
    # type 'dataset'", "… 'store'", … lines, one per workflow section
    workflow = ROOT / "workflows" / "quickstart.yaml"
    with pytest.raises(ConfigError) as refused:
        load_descriptors(workflow)
    assert str(refused.value) == (
        f"{workflow}: a workflow file (its descriptors are its 'descriptors' section), not "
        "a descriptors file: pass it with --workflow"
    )
    assert load_descriptors(workflow, section="descriptors").acsf is not None
    # where a workflow's descriptors are welcome (dparallel train --descriptors)
    section = load_descriptors(workflow, section="descriptors")
    assert load_descriptors(workflow, workflows=True).to_dict() == section.to_dict()


def test_a_file_of_only_a_descriptors_section_is_read_as_that_section(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("descriptors:\n  acsf: {elements: [H], radial: [[0.1, 0.0]]}\n")
    assert list(load_descriptors(path).acsf.elements) == ["H"]


def test_uniform_keys_beside_an_input_nn_are_refused_not_ignored(tmp_path: Path) -> None:
    """`acsf: {n2p2: input.nn, r_cut: 4.0}` featurized with the input.nn's cutoffs and said
    nothing of r_cut; a key at its default (a spec printed by `validate --json`) is no
    choice and still reads."""
    from dparallel.n2p2 import acsf_from_input_nn

    input_nn = ROOT / "workflows" / "n2p2" / "input.nn"
    path = tmp_path / "d.yaml"
    path.write_text(f"acsf: {{n2p2: {input_nn}, r_cut: 4.0, alpha: 0.1}}\n")
    with pytest.raises(ConfigError, match=r"r_cut, alpha: not used with 'n2p2: input.nn'"):
        load_descriptors(path)
    path.write_text(f"acsf: {{n2p2: {input_nn}, r_cut: 6.0, radial: []}}\n")
    expected = acsf_from_input_nn(str(input_nn)).to_dict()
    assert load_descriptors(path).acsf.to_dict() == expected


def test_an_input_nn_is_read_in_the_units_it_declares(tmp_path: Path) -> None:
    """An exported potential's input.nn says ``# Units: ase`` (Å): featurizing Bohr data
    with ``acsf: {n2p2: export/input.nn}`` read its 5.0 as 5 bohr (rc 2.65 Å), which
    ``init_from`` the export then refused; ``units`` contradicting the file is refused."""
    lines = (ROOT / "workflows" / "n2p2" / "input.nn").read_text()
    (tmp_path / "input.nn").write_text("# Units: ase (lengths × 1 Å)\n" + lines)
    path = tmp_path / "d.yaml"
    path.write_text(f"acsf: {{n2p2: {tmp_path / 'input.nn'}}}\n")
    acsf = load_descriptors(path, data_units="bohr-hartree").acsf
    assert {f["rc"] for f in acsf.to_dict()["features"]["Cu"]} == {5.0}  # the file's number
    path.write_text(f"acsf: {{n2p2: {tmp_path / 'input.nn'}, units: bohr-hartree}}\n")
    with pytest.raises(ConfigError, match=r"input.nn declares units ase, but bohr-hartree"):
        load_descriptors(path)
