"""Parsing n2p2 input.nn symmetry-function definitions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import ase
import numpy as np
import pytest
from acsf_reference import reference

from dparallel.descriptors import ACSF
from dparallel.errors import InputFormatError, SourceNotFoundError

if TYPE_CHECKING:
    from pathlib import Path

INPUT_NN = """\
# n2p2 input.nn excerpt
number_of_elements 2
elements H O                       # element order
cutoff_type 6 0.2
global_hidden_layers_short 2       # ignored by the descriptor
symfunction_short H 2 H 0.5 0.0 6.0
symfunction_short H 2 O 0.3 0.9 6.0
symfunction_short H 3 O H 0.05 -1.0 2.0 6.0
symfunction_short H 9 H O 0.02 1.0 4.0 5.0 0.7
symfunction_short O 2 H 0.5 0.8 6.0
symfunction_short O 3 H H 0.05 -1.0 2.0 6.0 1.0
symfunction_short O 9 H H 0.05 -1.0 2.0 6.0
"""


def test_parse_metadata_and_values(tmp_path: Path) -> None:
    path = tmp_path / "input.nn"
    path.write_text(INPUT_NN)
    acsf = ACSF.from_n2p2(str(path))
    assert acsf.elements == ["H", "O"] and acsf.r_cut == 6.0
    assert acsf.n_features("H") == 4 and acsf.n_features("O") == 3
    h = acsf.features("H")
    assert h[2] == {
        "type": 3,
        "center": "H",
        "neighbors": ["H", "O"],
        "eta": 0.05,
        "rs": 0.0,
        "zeta": 2.0,
        "lambda": -1.0,
        "rc": 6.0,
        "cutoff": "poly2",
        "alpha": 0.2,
    }
    assert h[3]["rs"] == 0.7 and h[3]["rc"] == 5.0 and h[3]["zeta"] == 4.0 and h[3]["type"] == 9
    assert acsf.features("O")[1]["rs"] == 1.0
    water = ase.Atoms("OHH", positions=[[0, 0, 0], [0.9572, 0, 0], [-0.2399872, 0.9266272, 0]])
    out = acsf.compute([water])
    for e, res in out.items():
        for row, atom in enumerate(res.atom_index.tolist()):
            np.testing.assert_allclose(
                res.values[row].numpy(), reference(water, acsf._features[e], atom), rtol=1e-12
            )


def test_unit_conversion(tmp_path: Path) -> None:
    path = tmp_path / "input.nn"
    path.write_text("elements H\nsymfunction_short H 2 H 0.5 2.0 10.0\n")
    bohr = 0.529177
    f = ACSF.from_n2p2(str(path), unit=bohr).features("H")[0]
    assert f["rc"] == pytest.approx(10 * bohr) and f["rs"] == pytest.approx(2 * bohr)
    assert f["eta"] == pytest.approx(0.5 / bohr**2) and f["cutoff"] == "cos"


@pytest.mark.parametrize(
    "line,message",
    [
        (
            "symfunction_short H 4 H 0.5 0.0 6.0",
            "line 2: symmetry function type 4 is not supported",
        ),
        ("symfunction_short H 2 C 0.5 0.0 6.0", "line 2: element 'C' is not in the elements"),
        ("symfunction_short H 3 H H 0.5 1.0 6.0", "line 2: type 3 expects"),
        ("symfunction_short H 2 H x 0.0 6.0", "line 2: could not read a number"),
        ("cutoff_type 12", "line 2: cutoff_type 12 unknown"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "input.nn"
    path.write_text(f"elements H\n{line}\n")
    with pytest.raises(InputFormatError, match=message):
        ACSF.from_n2p2(str(path))


def test_missing_file_and_elements(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError, match="not found"):
        ACSF.from_n2p2(str(tmp_path / "nope.nn"))
    (tmp_path / "a.nn").write_text("symfunction_short H 2 H 0.5 0.0 6.0\n")
    with pytest.raises(InputFormatError, match="no 'elements' line"):
        ACSF.from_n2p2(str(tmp_path / "a.nn"))
